"""What every policy type provides: a config model and a pure ``recommend`` function.

A policy type turns the judged signals into a raw replica recommendation. The engine
(``autoscaler.core.engine``) does the rest, the same for every type: unknown-signal holds and fallback,
scale-to-zero, HPA ``behavior`` (stabilization and rate limits), min/max clamping, capacity arbitration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from autoscaler.core.fast import quick_init
from autoscaler.core.model import Ahead, Reacquire, Reason, ReplicaStatus, SignalValue, TargetRef

if TYPE_CHECKING:
    from autoscaler.core.spec import Spec


@quick_init
@dataclass(frozen=True, slots=True)
class Context:
    """What a policy type sees at one evaluation."""

    now: float
    target: TargetRef
    replicas: ReplicaStatus
    #: Every signal of the policy, judged (ok or unknown), composites included.
    signals: Mapping[str, SignalValue]
    spec: Spec
    #: Per-replica values (pod or group name -> value) of usable signals whose source gave them; HPA's Pods
    #: metrics use them for the missing- and unready-pod rules.
    per_replica: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: With ``capacity``: the longest eviction (seconds from SIGTERM until its chips are free) among the
    #: training Workloads a hand-off may stop now (``arbitration.handoff_eviction_s``): a hand-off's lead is
    #: this plus serving's cold start. None without ``capacity`` or when no victim's grace period was read.
    eviction_s: float | None = None
    #: With ``capacity``, for a type that prices its releases (``prices_release``: ``slo``'s
    #: ``scaleDown.priceReacquire``): what getting back replicas released now would take in training stops
    #: (``arbitration.reacquire``). None otherwise.
    reacquire: Reacquire | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Recommendation:
    """A raw recommendation before behavior and clamping.

    ``replicas`` is None when the policy cannot decide because a signal it needs is unknown; the
    engine then holds (or falls back). ``message`` is one sentence with the numbers behind it.
    """

    replicas: int | None
    reason: Reason
    message: str
    unknown_signals: tuple[str, ...] = ()
    #: With ``replicas`` None: the count the usable signals alone ask for, when the type knows one but will not
    #: act on it (HPA: a scale-down while another metric is unknown). A fallback takes the higher of the two, as
    #: HPA does over KEDA's fallback metric and the healthy triggers.
    usable_replicas: int | None = None
    #: The type's forecast over a hand-off's lead (``Ahead``), when it has one: only the capacity arbitration
    #: reads it (act ahead of a forecast need, keep stopped training down while it holds).
    ahead: Ahead | None = None


class PolicyAlgorithm(Protocol):
    """A policy type's algorithm, built once from its config."""

    #: Whether the engine applies the HPA ``behavior`` stage (stabilization, rate policies) afterwards.
    uses_behavior: bool

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        """Return the raw recommendation and this type's new private state."""
        ...
