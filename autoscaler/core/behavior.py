"""HPA ``behavior``: stabilization windows, scale rate policies and min/max clamping, as the HPA controller does.

This is the stage after a policy type's raw recommendation (``engine`` step 5). It reproduces
``pkg/controller/podautoscaler/horizontal.go`` of Kubernetes:

1. with a ``behavior`` block (``normalizeDesiredReplicasWithBehaviors``):
   a. stabilize: the scale-up window takes the *lowest* recommendation of the window, the scale-down window the
      *highest*; the result is the current count moved into ``[up, down]``;
   b. rate policies (Pods / Percent per ``periodSeconds``), measured from the replica count at the start of
      each period (scale events of the period undone); ``selectPolicy`` Max / Min / Disabled;
   c. min/max bounds, folded into (b) exactly as upstream does (only in the direction of the change);
2. without ``behavior`` (the legacy path, ``normalizeDesiredReplicas``): the highest recommendation of the
   last 300 s (the controller's ``--horizontal-pod-autoscaler-downscale-stabilization``), then
   ``convertDesiredReplicasWithRules``: at most ``max(2 × current, 4)`` per evaluation, then min/max.

Everything is a function of its arguments: recommendation history and scale events live in ``PolicyState``
(the engine records scale events when a decision changes the count). Window edges follow upstream exactly:
the legacy window keeps a recommendation stamped exactly ``300 s`` ago, the behavior windows and the rate
periods do not (upstream compares with ``Before``/``After``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from autoscaler.core.model import PolicyState, Reason
from autoscaler.core.policies.hpa import BehaviorSpec, ScalingRulesSpec

#: The controller flag ``--horizontal-pod-autoscaler-downscale-stabilization`` (default 5 min): the legacy window,
#: and the scale-down window of a ``behavior`` that does not set one.
DEFAULT_DOWNSCALE_WINDOW_S = 300
#: Legacy per-evaluation scale-up cap: ``max(2 × current, 4)`` (upstream ``scaleUpLimitFactor/Minimum``).
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0

Select = Literal["Max", "Min", "Disabled"]


@dataclass(frozen=True, slots=True)
class RatePolicy:
    kind: Literal["Pods", "Percent"]
    value: int
    period_s: int

    def describe(self) -> str:
        unit = " pods" if self.kind == "Pods" else "%"
        return f"{self.value}{unit}/{self.period_s}s"


@dataclass(frozen=True, slots=True)
class Rules:
    """One direction's scaling rules after the ``autoscaling/v2`` API defaults are applied."""

    window_s: int
    select: Select
    policies: tuple[RatePolicy, ...]
    tolerance: float | None

    @property
    def longest_period_s(self) -> int:
        return max((p.period_s for p in self.policies), default=0)


_DEFAULT_UP = Rules(0, "Max", (RatePolicy("Pods", 4, 15), RatePolicy("Percent", 100, 15)), None)
_DEFAULT_DOWN = Rules(DEFAULT_DOWNSCALE_WINDOW_S, "Max", (RatePolicy("Percent", 100, 15),), None)


def _with_defaults(given: ScalingRulesSpec | None, default: Rules) -> Rules:
    # Field by field, as upstream's GenerateHPAScale{Up,Down}Rules: a given list of policies replaces the
    # default list entirely; anything not given keeps its default.
    if given is None:
        return default
    policies = (
        tuple(RatePolicy(p.type, p.value, p.period_seconds) for p in given.policies)
        if given.policies is not None
        else default.policies
    )
    return Rules(
        window_s=given.stabilization_window_seconds
        if given.stabilization_window_seconds is not None
        else default.window_s,
        select=given.select_policy or default.select,
        policies=policies,
        tolerance=given.tolerance,
    )


class Directions(NamedTuple):
    """A ``behavior`` block's rules for each direction."""

    up: Rules
    down: Rules


# Built at every evaluation (``decide``'s hot path): plain slotted dataclasses built positionally, read by name
# (a NamedTuple's or a frozen dataclass's construction costs about twice as much).


@dataclass(slots=True)
class Bounded:
    """A recommendation after a stage that may change it: the count, why it changed (None: it did not) and how."""

    desired: int
    reason: Reason | None
    message: str


@dataclass(slots=True)
class Staged:
    """``stage``'s result: ``Bounded``'s fields, and the recommendation history to keep in the state."""

    desired: int
    reason: Reason | None
    message: str
    #: ``(time, recommended count)`` of the evaluations a later window can still see, this one last.
    recommendations: tuple[tuple[float, int], ...]


def effective_rules(behavior: BehaviorSpec) -> Directions:
    """The scaleUp and scaleDown rules of a ``behavior`` block with every omitted field defaulted."""
    return Directions(
        _with_defaults(behavior.scale_up, _DEFAULT_UP), _with_defaults(behavior.scale_down, _DEFAULT_DOWN)
    )


@dataclass(frozen=True, slots=True)
class Normalized:
    desired: int
    reason: Reason | None  # None: the recommendation passed unchanged
    message: str
    state: PolicyState


def clamp(*, min_replicas: int, max_replicas: int, recommended: int, state: PolicyState) -> Normalized:
    """Bounds only, for policy types that do not use the behavior stage."""
    bounded = bound(min_replicas=min_replicas, max_replicas=max_replicas, recommended=recommended)
    return Normalized(bounded.desired, bounded.reason, bounded.message, state)


def bound(*, min_replicas: int, max_replicas: int, recommended: int) -> Bounded:
    """``clamp`` without the state."""
    if recommended < min_replicas:
        return Bounded(min_replicas, Reason.LIMITED_BY_MIN, f"raised to minReplicas {min_replicas}")
    if recommended > max_replicas:
        return Bounded(max_replicas, Reason.LIMITED_BY_MAX, f"limited to maxReplicas {max_replicas}")
    return Bounded(recommended, None, "")


def normalize(
    *,
    behavior: BehaviorSpec | None,
    min_replicas: int,
    max_replicas: int,
    current: int,
    recommended: int,
    state: PolicyState,
    now: float,
) -> Normalized:
    """Apply stabilization, rate limits and bounds to a raw recommendation, as HPA does.

    ``behavior`` None takes upstream's legacy path. The returned state has the recommendation recorded
    (history pruned to what a later evaluation can still use); scale events are recorded by the engine.
    """
    staged = stage(
        rules=None if behavior is None else effective_rules(behavior),
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        current=current,
        recommended=recommended,
        state=state,
        now=now,
    )
    kept = replace(state, recommendations=staged.recommendations)
    return Normalized(staged.desired, staged.reason, staged.message, kept)


def stage(
    *,
    rules: Directions | None,
    min_replicas: int,
    max_replicas: int,
    current: int,
    recommended: int,
    state: PolicyState,
    now: float,
    recommendations: tuple[tuple[float, int], ...] | None = None,
) -> Staged:
    """``normalize`` for the engine: ``rules`` are ``effective_rules`` computed once (None: the legacy path),
    the history is ``recommendations`` when given, else ``state.recommendations``; scale events are read from
    ``state``."""
    history = state.recommendations if recommendations is None else recommendations
    if rules is None:
        return _legacy(min_replicas, max_replicas, current, recommended, history, now)
    return _with_behavior(rules.up, rules.down, min_replicas, max_replicas, current, recommended, history, state, now)


def since(history: tuple[tuple[float, int], ...], cutoff: float) -> tuple[tuple[float, int], ...]:
    """``tuple(e for e in history if e[0] >= cutoff)``; in time order (as the engine records them) the entries
    that go are a prefix, and the history is sliced (or returned as is) instead of rebuilt."""
    n = 0
    for t, _ in history:
        if t >= cutoff:
            break
        n += 1
    kept = history[n:] if n else history
    for t, _ in kept:
        if not t >= cutoff:  # out of time order (or NaN): filter the whole history
            return tuple(e for e in history if e[0] >= cutoff)
    return kept


def newer_than(history: tuple[tuple[float, int], ...], cutoff: float) -> tuple[tuple[float, int], ...]:
    """``tuple(e for e in history if e[0] > cutoff)``, sliced as ``since`` does."""
    n = 0
    for t, _ in history:
        if t > cutoff:
            break
        n += 1
    kept = history[n:] if n else history
    for t, _ in kept:
        if not t > cutoff:  # out of time order (or NaN): filter the whole history
            return tuple(e for e in history if e[0] > cutoff)
    return kept


# --- legacy path (no behavior) -------------------------------------------------------------------------------


def _legacy(
    min_replicas: int,
    max_replicas: int,
    current: int,
    recommended: int,
    history: tuple[tuple[float, int], ...],
    now: float,
) -> Staged:
    # Upstream drops a recommendation only when it is *before* the cutoff: one stamped exactly 300 s ago counts.
    # One pass does ``since`` and the max of what it keeps: in time order (as the engine records them) the
    # entries that go are a prefix, sliced off; an old entry after a kept one (or a NaN time) means filtering.
    cutoff = now - DEFAULT_DOWNSCALE_WINDOW_S
    stabilized = recommended
    drop = 0  # the leading entries before the cutoff
    kept_any = False
    in_order = True
    for t, count in history:
        if t >= cutoff:
            kept_any = True
            if count > stabilized:  # noqa: PLR1730 (a max() call per entry costs more than the comparison)
                stabilized = count
        elif kept_any:
            in_order = False
        else:
            drop += 1
    kept = (history[drop:] if drop else history) if in_order else tuple(e for e in history if e[0] >= cutoff)
    history = (*kept, (now, recommended))
    notes: list[str] = []
    reason: Reason | None = None
    if stabilized != recommended:
        reason = Reason.STABILIZING
        notes.append(
            f"held at {stabilized}, the highest recommendation of the last {DEFAULT_DOWNSCALE_WINDOW_S}s "
            f"(downscale stabilization without behavior)"
        )
    desired = stabilized
    scale_up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    if stabilized < min_replicas:
        desired, reason = min_replicas, Reason.LIMITED_BY_MIN
        notes.append(f"raised to minReplicas {min_replicas}")
    elif max_replicas > scale_up_limit:
        if stabilized > scale_up_limit:
            desired, reason = scale_up_limit, Reason.RATE_LIMITED
            notes.append(f"scale-up limited to {desired}: at most max(2×{current}, 4) per evaluation without behavior")
    elif stabilized > max_replicas:
        desired, reason = max_replicas, Reason.LIMITED_BY_MAX
        notes.append(f"limited to maxReplicas {max_replicas}")
    return Staged(desired, reason, "; ".join(notes), history)


# --- behavior path -------------------------------------------------------------------------------------------


def stabilize(
    *, recommendations: Sequence[tuple[float, int]], up: Rules, down: Rules, current: int, recommended: int, now: float
) -> int:
    """Upstream ``stabilizeRecommendationWithBehaviors``: the current count moved into [lowest recommendation of
    the scale-up window, highest of the scale-down window], both windows including ``recommended``."""
    up_cutoff = now - up.window_s
    down_cutoff = now - down.window_s
    up_rec = min([recommended, *(r for t, r in recommendations if t > up_cutoff)])
    down_rec = max([recommended, *(r for t, r in recommendations if t > down_cutoff)])
    return min(max(current, up_rec), down_rec)


def _changed_in_period(events: Sequence[tuple[float, int]], period_s: int, now: float) -> int:
    cutoff = now - period_s
    return sum(change for t, change in events if t > cutoff)


def _count_at_period_start(state: PolicyState, current: int, period_s: int, now: float) -> int:
    """The replica count at the start of the period: the scale events inside it undone (upstream's
    period-start accounting, the same for both directions)."""
    added = _changed_in_period(state.scale_up_events, period_s, now)
    deleted = _changed_in_period(state.scale_down_events, period_s, now)
    return current - added + deleted


def scale_up_limit(*, rules: Rules, current: int, state: PolicyState, now: float) -> int:
    """Upstream ``calculateScaleUpLimitWithScalingRules``: the highest count the policies allow now."""
    if rules.select == "Disabled":
        return current
    proposals = []
    for policy in rules.policies:
        start = _count_at_period_start(state, current, policy.period_s, now)
        if policy.kind == "Pods":
            proposals.append(start + policy.value)
        else:
            # Rounded up so that a small percentage of a small count still adds a replica.
            proposals.append(math.ceil(start * (1 + policy.value / 100)))
    if not proposals:
        return current
    return min(proposals) if rules.select == "Min" else max(proposals)


def scale_down_limit(*, rules: Rules, current: int, state: PolicyState, now: float) -> int:
    """Upstream ``calculateScaleDownLimitWithBehaviors``: the lowest count the policies allow now."""
    if rules.select == "Disabled":
        return current
    proposals = []
    for policy in rules.policies:
        start = _count_at_period_start(state, current, policy.period_s, now)
        if policy.kind == "Pods":
            proposals.append(start - policy.value)
        else:
            # int() truncates toward zero, as Go's int32 conversion: the count that stays is rounded down.
            proposals.append(int(start * (1 - policy.value / 100)))
    if not proposals:
        return current
    # "Min" selects the smallest change, i.e. the highest remaining count.
    return max(proposals) if rules.select == "Min" else min(proposals)


def _with_behavior(
    up: Rules,
    down: Rules,
    min_replicas: int,
    max_replicas: int,
    current: int,
    recommended: int,
    history: tuple[tuple[float, int], ...],
    state: PolicyState,
    now: float,
) -> Staged:
    stabilized = stabilize(
        recommendations=history, up=up, down=down, current=current, recommended=recommended, now=now
    )
    # Keep only what a later evaluation can still see (upstream overwrites such entries instead).
    kept = newer_than(history, now - max(up.window_s, down.window_s))
    history = (*kept, (now, recommended))

    notes: list[str] = []
    reason: Reason | None = None
    if stabilized != recommended:
        reason = Reason.STABILIZING
        if recommended >= current:
            notes.append(
                f"held at {stabilized}, the lowest recommendation of the {up.window_s}s scale-up stabilization window"
            )
        else:
            notes.append(
                f"held at {stabilized}, the highest recommendation of the {down.window_s}s scale-down "
                f"stabilization window"
            )

    desired = stabilized
    if stabilized > current:
        limit = max(scale_up_limit(rules=up, current=current, state=state, now=now), current)
        if max_replicas > limit:
            if stabilized > limit:
                desired = limit
                if up.select == "Disabled":
                    reason = Reason.SCALING_DISABLED
                    notes.append("scale-up disabled (scaleUp.selectPolicy Disabled)")
                else:
                    reason = Reason.RATE_LIMITED
                    notes.append(f"scale-up limited to {limit} by scaleUp policies {_describe(up)}")
        elif stabilized > max_replicas:
            desired, reason = max_replicas, Reason.LIMITED_BY_MAX
            notes.append(f"limited to maxReplicas {max_replicas}")
    elif stabilized < current:
        limit = min(scale_down_limit(rules=down, current=current, state=state, now=now), current)
        if min_replicas < limit:
            if stabilized < limit:
                desired = limit
                if down.select == "Disabled":
                    reason = Reason.SCALING_DISABLED
                    notes.append("scale-down disabled (scaleDown.selectPolicy Disabled)")
                else:
                    reason = Reason.RATE_LIMITED
                    notes.append(f"scale-down limited to {limit} by scaleDown policies {_describe(down)}")
        elif stabilized < min_replicas:
            desired, reason = min_replicas, Reason.LIMITED_BY_MIN
            notes.append(f"raised to minReplicas {min_replicas}")
    return Staged(desired, reason, "; ".join(notes), history)


def _describe(rules: Rules) -> str:
    policies = ", ".join(p.describe() for p in rules.policies)
    return f"({policies}, selectPolicy {rules.select}, from the count at the start of each period)"
