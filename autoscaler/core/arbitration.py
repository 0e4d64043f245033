"""Sharing the accelerator quota between serving and training (Kueue Workloads): a pure rule.

``plan(spec=, observation=, desired=)`` takes the replica count serving wants and the Kueue picture (the
ClusterQueue's ``QuotaStatus`` and the policy's preemptible ``TrainingWorkload``s) and returns what serving
may have *now*, plus the Workloads to deactivate or reactivate. Its transitions:

1. Scale-up that fits: the new replicas need ``(desired − current) × perReplica`` units, no more than free in
   the ClusterQueue (the current replicas' own usage is already in the reservation). Serving scales.
2. Scale-up that does not fit: training Workloads this policy already stopped and Kueue has not yet evicted
   (inactive but still admitted) count as freeing. For what is still missing, deactivate the active, admitted
   Workloads in victim order (lowest priority first) until the new replicas fit, or all are chosen. Serving
   asks at once for what fits once they are gone: the caller deactivates first, then scales, in one pass.
   The new serving pods wait for Kueue admission, and as the higher-priority Workloads they take the freed
   quota before any queued training can (asking later would let Kueue re-admit other queued training into
   the quota just freed, and preempt again). Only what does not fit even with every preemptible Workload
   stopped is held back (the engine reports ``WaitingForCapacity``). Re-run after a restart, the same
   snapshot gives the same plan, and a Workload already stopped is counted as freeing, not stopped twice.
3. Serving no longer needs the room (desired ≤ current): scale down first, then reactivate the Workloads this
   policy deactivated, highest priority first, while they fit in what is free plus what the scale-down frees.
   A Workload that does not fit stops the reactivations (no lower-priority job overtakes it).

The victim order is a parameter (``choose``), so a checkpoint-aware order (``since_checkpoint_s``) can
replace ``lowest_priority_first`` without touching the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoscaler.core.model import (
    Decision,
    Observation,
    QuotaStatus,
    Reason,
    ScaleDecision,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.spec import CapacitySpec, Spec

#: Orders candidate victims: the first is deactivated first.
VictimOrder = Callable[[Sequence[TrainingWorkload]], list[TrainingWorkload]]

# A small tolerance so "4.000000001 GPUs" from milli-quantities does not deny a fit.
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Plan:
    #: The replica count serving may have now (less than desired while training still holds the chips).
    desired: int
    training: tuple[TrainingDecision, ...]
    message: str = ""


def lowest_priority_first(candidates: Sequence[TrainingWorkload]) -> list[TrainingWorkload]:
    """Lowest priority first; among equals the larger (fewer stops), then by name (deterministic)."""
    return sorted(candidates, key=lambda w: (w.priority, -w.chips, w.key))


def _units(value: float) -> str:
    return f"{value:g}"


def plan(
    *, spec: Spec, observation: Observation, desired: int, choose: VictimOrder = lowest_priority_first
) -> Plan:
    """Decide which training to deactivate or reactivate for ``desired`` serving replicas."""
    capacity, quota = spec.capacity, observation.quota
    if capacity is None or quota is None:
        return Plan(desired=desired, training=())
    current = observation.replicas.spec
    if desired > current:
        return _scale_up(capacity, quota, observation.training, current, desired, choose)
    return _reactivate(capacity, quota, observation.training, current, desired)


def _scale_up(
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
    choose: VictimOrder,
) -> Plan:
    per, res, cq = capacity.per_replica, quota.resource, quota.cluster_queue
    need = (desired - current) * per
    free = quota.free
    if need <= free + _EPS:
        return Plan(desired=desired, training=())
    # Stopped by us, not yet evicted by Kueue: its chips are on their way back; never stop it twice.
    freeing = sum(w.chips for w in training if not w.active and w.admitted)
    candidates = choose([w for w in training if w.active and w.admitted and w.chips > 0])
    victims: list[TrainingWorkload] = []
    released = free + freeing
    for victim in candidates:
        if need <= released + _EPS:
            break
        victims.append(victim)
        released += victim.chips
    reachable = min(desired, current + math.floor(max(0.0, released) / per + _EPS))
    decisions = tuple(
        TrainingDecision(
            workload=v,
            action=TrainingAction.DEACTIVATE,
            reason=Reason.DEACTIVATE_TRAINING,
            message=(
                f"deactivating {v.key} (priority {v.priority}, {v.chips} {res}) so serving can grow "
                f"{current}→{reachable} replicas: they need {_units(need)} {res}, {_units(free)} free in "
                f"ClusterQueue {cq}"
            ),
        )
        for v in victims
    )
    if reachable == desired:
        return Plan(desired=desired, training=decisions)
    parts = [f"{desired} replicas need {_units(need)} more {res}, {_units(free)} free in ClusterQueue {cq}"]
    if victims:
        parts.append(f"deactivating {', '.join(v.key for v in victims)}")
    if freeing:
        parts.append(f"{_units(freeing)} {res} being released by deactivated training")
    message = f"limited by capacity: only {reachable} replicas fit even with all preemptible training stopped; "
    return Plan(desired=reachable, training=decisions, message=message + "; ".join(parts))


def _reactivate(
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
) -> Plan:
    res, cq = quota.resource, quota.cluster_queue
    released = (current - desired) * capacity.per_replica
    room = quota.free + released
    ours = sorted(
        (w for w in training if w.deactivated_by_us and not w.active),
        key=lambda w: (-w.priority, w.key),
    )
    decisions: list[TrainingDecision] = []
    for w in ours:
        # Still admitted (Kueue has not evicted it yet): resuming it needs no new room.
        needs = 0 if w.admitted else w.chips
        if needs > room + _EPS:
            break
        room -= needs
        after = f" after scaling {current}→{desired}" if released else ""
        decisions.append(
            TrainingDecision(
                workload=w,
                action=TrainingAction.REACTIVATE,
                reason=Reason.REACTIVATE_TRAINING,
                message=(
                    f"reactivating {w.key} (priority {w.priority}, {w.chips} {res}): serving needs {desired} "
                    f"replicas and {_units(room + needs)} {res} are free in ClusterQueue {cq}{after}"
                ),
            )
        )
    return Plan(desired=desired, training=tuple(decisions))


def in_apply_order(decisions: Sequence[Decision]) -> list[Decision]:
    """The order every caller applies one evaluation's decisions in: deactivations, then the scale, then
    reactivations. Stopping training before asking for replicas lets the stopped Workloads' quota go to the
    new serving pods (Kueue would otherwise pick its own victims for them); scaling down before resuming
    training frees the room the resumed Workloads need."""
    training = [d for d in decisions if isinstance(d, TrainingDecision)]
    scale = [d for d in decisions if isinstance(d, ScaleDecision)]
    return [
        *(d for d in training if d.action is TrainingAction.DEACTIVATE),
        *scale,
        *(d for d in training if d.action is TrainingAction.REACTIVATE),
    ]
