"""Sharing the accelerator quota between serving and training (Kueue Workloads): a pure rule.

``plan(spec=, observation=, desired=, now=)`` takes the replica count serving wants and the Kueue picture
(the ClusterQueue's ``QuotaStatus`` and the policy's preemptible ``TrainingWorkload``s) and returns what
serving may have *now*, plus the Workloads to deactivate or reactivate.

**The budget** (``budget``): one account per ClusterQueue and resource, the same for every policy that
shares it in a pass, counting the chips in flight as well as Kueue's reservation; in a cohort, what the
cohort lends is shared by every policy on its members (``lent``):

- ``available``: nominal quota + what the cohort would lend (``kueue_borrowable``, Kueue's own rule;
  ``borrowingLimit`` is a cap, not capacity; serving replicas asked for on the cohort's other members and not
  admitted yet are taken from it first) − reservation;
- ``freeing``: Workloads deactivated but not yet evicted (their chips come back once, and only once);
- ``admitting``: Workloads Kueue itself is evicting to admit a serving replica counted in ``pending``
  (``making_room``: the preemptor its ``Preempted`` condition names is a waiting replica of this target or of a
  ledger target; ``unselected_making_room``: the same for a Workload on the ClusterQueue the policy does not
  select, ``QuotaStatus.evicting``): room already being made for that replica, so no victim is asked for it
  again;
- ``pending``: serving replicas asked for and not admitted yet: this target's gated replicas plus the
  other targets' on the ClusterQueue (``QuotaStatus.pending``, from the pass ledger through ``in_pass``, in
  the controller and the simulator alike). They take the room as it frees, before anything else;
- ``claiming``: training Workloads active but not admitted (queued, or reactivated and not yet admitted):
  Kueue admits them into free room, so a reactivation never counts that room again.

Its transitions:

1. Scale-up that fits: the new replicas need ``(desired − current) × perReplica`` units, no more than
   ``available + freeing + admitting − pending``. Serving scales.
2. Scale-up that does not fit: choose victims among the active, admitted Workloads that may be stopped (not one Kueue
   is already evicting, ``TrainingWorkload.evicting``: its place is promised to what Kueue evicts it for, so it is
   never a victim, and counted as room only when that is one of our waiting replicas, ``admitting``; not resumed
   by us less than ``minRunSeconds`` ago, stopped by us fewer than ``maxPreemptionsPerHour`` times in the last
   hour): the set that frees enough chips and loses the least work
   (``least_work_lost``: chips × seconds since the last checkpoint, nothing for one that saves on SIGTERM within its
   grace period, ``saves_within_grace``; then the shortest wait for serving, ``eviction_s``; then the fewest chips;
   then the least work at stake should a declared save fail, ``at_stake``; a Workload whose checkpoint time is
   unknown is stopped only when no set of known ones suffices). Victims may first save: asked to
   (``checkpointRequestSeconds``, only those whose job declares it honours requests, ``honours_requests``; asked as
   they are stopped when their save fits their grace period, ``asks_as_it_stops``) or on their own schedule
   (``checkpointWaitSeconds``, ``worth_waiting``); serving then waits for them (``Plan.waiting_for_checkpoint``).
   Serving asks at once for what fits once they are gone: the caller deactivates first, then scales, in one pass; the
   new pods wait for Kueue admission and, being of higher priority, take the freed quota before any queued training.
   What does not fit even with every eligible Workload stopped is held back (the engine reports
   ``WaitingForCapacity``). Re-run after a restart, the same snapshot gives the same plan, and a Workload already
   stopped is counted as freeing, not stopped twice.
3. Serving no longer needs the room (desired ≤ current): scale down first, then reactivate the Workloads
   this controller deactivated, highest priority first, while they fit in ``available`` plus what the
   scale-down frees minus ``claiming``. **Nothing is reactivated while any serving replica on the
   ClusterQueue waits for admission** (this target's after the scale-down, or another's). A Workload that
   does not fit stops the reactivations (no lower-priority job overtakes it).
   With the policy's forecast (``ahead``), the chips it needs back within its lead are kept out of the room:
   nothing is reactivated that serving is forecast to take again (hysteresis).
4. Acting ahead (``_act_ahead``; only with ``capacity.actAhead``): serving needs no more now but the policy
   forecasts ``ahead.replicas`` within ``ahead.within_s`` and they do not fit. Workloads that have just
   checkpointed are stopped now and serving starts the replicas they make room for (they lose at most two
   evaluation periods of work, instead of wherever their interval stands when the need is due); with checkpoint
   requests on, the victims of transition 2 are asked to save now, while serving does not wait yet. Nothing else
   is stopped early, and never a Workload that saves within its grace period. Also while this target's replicas
   wait for admission, once the chips they wait for are on their way (an earlier hand-off in flight): a ramp's
   next step need not wait for the first victim to leave.
5. Yielding at a checkpoint (``_yield_at_checkpoint``; ``capacity.yieldAtCheckpoint``, for victims that lose
   work when stopped: ``loses_work``): serving needs no more now, a Workload has just checkpointed, and
   serving's count is likely to rise into its chips before its next checkpoint: it is stopped now, losing
   nothing, and its chips wait free for serving. The chance is the reflection principle's for a driftless
   random walk (``reach_chance``) with the variance the wanted count showed (``observe_demand``,
   ``demand_variance``): a measured band, not a forecast. The same rule keeps such a Workload stopped rather
   than resume it into chips serving is as likely to take before its first checkpoint (``_would_yield``).

The victim choice is a parameter (``choose``), so ``lowest_priority_first`` (Kueue's order) can be compared
with ``least_work_lost`` on the same rule.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.core import topology
from autoscaler.core.model import (
    Ahead,
    AskedReplicas,
    Decision,
    DemandHistory,
    DemandJump,
    EvictedFor,
    Observation,
    QueueQuota,
    QuotaStatus,
    Reacquire,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SliceCapacity,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.spec import CapacitySpec, Spec

#: Picks victims: (eligible candidates, chips still missing) → the Workloads to stop, first to last. When no
#: set frees enough, every candidate (the caller then asks only for what fits).
VictimChooser = Callable[[Sequence[TrainingWorkload], float], list[TrainingWorkload]]

# A small tolerance so "4.000000001 GPUs" from milli-quantities does not deny a fit.
_EPS = 1e-9
HOUR_S = 3600.0
#: Up to this many candidates every subset is tried (2^10 = 1,024 sums); above it, a greedy pass.
EXHAUSTIVE_MAX = 10
#: Acting ahead, a Workload counts as "just checkpointed" for this many evaluation periods after its save: each
#: evaluation sees a new checkpoint within one period, so two leave room for one late pass, and the work it
#: then loses is at most that long (a rule of the evaluation rhythm, not a figure fitted to a trace).
FRESH_EVALUATIONS = 2
#: How far back the wanted count's changes are measured (``observe_demand``): the hour the per-job preemption
#: cap counts over too (``estimate``: several checkpoint intervals of the jobs these policies displace).
DEMAND_LOOKBACK_S = HOUR_S
#: ``yieldAtCheckpoint: band``: a victim yields when serving's count reaches its chips before its next
#: checkpoint with at least this chance, i.e. when the need's 95 % upper band does (a convention, not fitted).
BAND_CHANCE = 0.05


@dataclass(frozen=True, slots=True)
class Plan:
    #: The replica count serving may have now (less than desired while training still holds the chips).
    desired: int
    training: tuple[TrainingDecision, ...]
    message: str = ""
    #: Some victim is left to checkpoint first (asked, or its own save due soon): serving waits for it.
    waiting_for_checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class Budget:
    """One ClusterQueue's accelerator account at one evaluation (see the module docstring)."""

    cluster_queue: str
    resource: str
    available: float
    freeing: float
    pending: float
    claiming: float
    #: The ClusterQueue's cohort ("" without one), and what serving on its other members takes of what it
    #: lends (already out of ``available``).
    cohort: str = ""
    cohort_pending: float = 0.0
    #: Training Kueue is evicting to admit serving replicas this account counts in ``pending``
    #: (``making_room``): room already being made for them, released as ``freeing`` is.
    admitting: float = 0.0

    @property
    def for_serving(self) -> float:
        """Room new serving replicas can count on: what is free plus what stopped training releases (and what
        Kueue evicts for serving replicas waiting), less what serving replicas already asked for."""
        return self.available + self.freeing + self.admitting - self.pending

    def describe(self) -> str:
        parts = [f"{_units(self.available)} free"]
        if self.freeing > _EPS:
            parts.append(f"{_units(self.freeing)} being released by stopped training")
        if self.admitting > _EPS:
            parts.append(f"{_units(self.admitting)} being released by training Kueue evicts for serving replicas "
                         "waiting for admission")
        if self.pending > _EPS:
            parts.append(f"{_units(self.pending)} asked for by serving replicas Kueue has not admitted yet")
        if self.claiming > _EPS:
            parts.append(f"{_units(self.claiming)} asked for by queued training")
        if self.cohort_pending > _EPS:
            parts.append(
                f"{_units(self.cohort_pending)} of what cohort {self.cohort} lends taken by serving replicas asked "
                "for on its other ClusterQueues"
            )
        where = f"ClusterQueue {self.cluster_queue}" + (f", cohort {self.cohort}" if self.cohort else "")
        return f"{', '.join(parts)} ({self.resource}, {where})"


def budget(
    *, quota: QuotaStatus, training: Sequence[TrainingWorkload], own_pending: float, waiting: Collection[str] = ()
) -> Budget:
    """The account of ``quota`` with the chips in flight (``own_pending``: this target's gated replicas' chips;
    ``waiting``: the targets whose waiting replicas it counts, ``waiting_targets``)."""
    return Budget(
        cluster_queue=quota.cluster_queue,
        resource=quota.resource,
        available=quota.free,
        freeing=float(sum(w.chips for w in training if not w.active and w.admitted)),
        pending=quota.pending + own_pending,
        claiming=float(sum(w.chips for w in training if w.active and not w.admitted)),
        cohort=quota.cohort,
        cohort_pending=quota.cohort_pending,
        admitting=float(sum(w.chips for w in training if making_room(w, waiting)))
        + sum(e.chips for e in unselected_making_room(quota.evicting, training, waiting)),
    )


def waiting_targets(quota: QuotaStatus, own: Mapping[str, int]) -> frozenset[str]:
    """The serving targets (``TargetRef.key``) whose replicas waiting for admission an account on ``quota``
    counts in ``pending``: the deciding policy's own (``own``: target key → its gated replicas) and the pass
    ledger's other targets (``quota.asked``, from ``in_pass``), each while it has a replica waiting."""
    mine = {k for k, gated in own.items() if gated > 0}
    return frozenset(mine | {k for k, a in quota.asked.items() if a.gated > 0})


def making_room(w: TrainingWorkload, waiting: Collection[str]) -> bool:
    """Kueue is evicting ``w`` (still admitted, its chips held until its pods are gone) to admit a replica of a
    serving target in ``waiting`` (``TrainingWorkload.evicted_for``, read from Kueue's ``Preempted`` condition
    by the controller, set by the simulator's Kueue): room already being made for a replica the account counts
    in ``pending``, released once, as a Workload we stopped is. No victim is asked for it again. Any other
    Workload Kueue evicts (for its own workload, or for a preemptor the controller could not name) stays
    neither victim nor room (``_ineligible``)."""
    return w.evicting and w.active and w.admitted and bool(w.evicted_for) and w.evicted_for in waiting


def unselected_making_room(
    evicting: Sequence[EvictedFor], training: Sequence[TrainingWorkload], waiting: Collection[str]
) -> tuple[EvictedFor, ...]:
    """The Workloads Kueue evicts (``QuotaStatus.evicting``) for a replica of a target in ``waiting`` that are not
    among the policy's own ``training`` (its ``preemptible`` selection, whose ones ``making_room`` counts): a
    research team's job in the same namespace, or another policy's. Their chips are room being made for that
    replica as much as a selected Workload's are; read only from the ClusterQueue's account, never a victim (this
    policy may not stop them) and never resumed. Each Workload is counted once, by its key."""
    mine = {w.key for w in training}
    return tuple(e for e in evicting if e.target in waiting and e.key not in mine)


def _guaranteed(q: QueueQuota) -> float:
    """The part of ``q``'s nominal quota it never lends (Kueue's ``guaranteedQuota``: nominal − lendingLimit)."""
    return 0.0 if q.lending_limit is None else max(0.0, q.nominal - q.lending_limit)


def _in_cohort(q: QueueQuota, used: float) -> float:
    """What of ``used`` a member holds in the cohort's pool: its usage past its guaranteed part."""
    return max(0.0, used - _guaranteed(q))


def kueue_borrowable(own: QueueQuota, others: Sequence[QueueQuota], *, in_cohort: bool) -> float:
    """What a ClusterQueue may hold above its nominal quota, as Kueue lends it (Kueue's ``available`` in
    ``pkg/cache/resource_node.go``, for a cohort without a parent or quota of its own): the cohort's pool is
    every member's lendable quota (nominal, or ``lendingLimit``), less every member's usage past its unlent
    part; ours is our unlent room plus that pool, capped by our ``borrowingLimit`` over what we already hold in
    it. A member's usage is its reservation plus its ``pending`` (serving replicas asked for there: Kueue admits
    them into the pool as it frees, before anything we ask, so they count in full, as the pending replicas of
    other targets on our own ClusterQueue do, and may leave less than nothing); ``own.pending`` is left to the
    budget's ``pending``
    (subtracting it there is exact: the rule is linear in our own usage). A member that borrows takes from
    everyone's lendable part, ours too: what others borrow of our nominal quota counts as ours only when our
    queue reclaims it (``reclaims``: Kueue then preempts the borrowers), so the result may be negative.
    Without a cohort nothing is lent, whatever the limit says. Returned including what we already borrow, so
    ``nominal + borrowable − reserved`` is what is free."""
    if not in_cohort:
        return 0.0
    used = own.reserved
    pool = sum(q.nominal - _guaranteed(q) for q in (own, *others))
    pool -= _in_cohort(own, used) + sum(_in_cohort(q, q.reserved + q.pending) for q in others)
    if own.borrowing_limit is not None:
        pool = min(pool, own.nominal - _guaranteed(own) - _in_cohort(own, used) + own.borrowing_limit)
    available = max(0.0, _guaranteed(own) - used) + pool
    if own.reclaims:
        available = max(available, own.nominal - used)
    return available - own.nominal + own.reserved


def ledger_keys(spec: Spec) -> frozenset[str]:
    """The pass-ledger keys one policy notes and leaves out of its own view (``in_pass``'s ``mine``): every
    target it scales, the other pools of a ``disaggregated`` policy too."""
    return frozenset(t.ref().key for t in spec.targets())


def asked_by(spec: Spec, statuses: Mapping[str, ReplicaStatus]) -> dict[str, AskedReplicas]:
    """One policy's entries of the pass ledger, from its targets' replica status (by ``TargetRef.key``): every
    target of ``ledger_keys``, as the simulator's pools join its ledger (``Simulation.join_ledger``). A policy with
    several targets notes each pool at its own group's slice chips (``perReplica`` where its slice is unknown);
    one target at ``perReplica``. A target whose status is not in ``statuses`` is left as the ledger has it."""
    capacity = spec.capacity
    if capacity is None:
        return {}
    several = len(spec.targets()) > 1
    out: dict[str, AskedReplicas] = {}
    for key in ledger_keys(spec):
        status = statuses.get(key)
        if status is None:
            continue
        per = float(status.slice.chips) if several and status.slice is not None else capacity.per_replica
        out[key] = AskedReplicas(status.spec, status.gated, per)
    return out


def in_pass(quota: QuotaStatus, *, mine: Collection[str], ledger: Mapping[str, AskedReplicas]) -> QuotaStatus:
    """``quota`` as one policy decides on it within a pass: what every *other* serving target on the
    ClusterQueue asked for and Kueue has not admitted yet (the pass ledger, ``ledger``: per target key, its
    count, its replicas waiting and their chips) is spoken for. Their chips are ``pending`` (taken from the free
    room first, as Kueue admits them first) and their counts ``asked`` (with a slice inventory their groups take
    free places first, among them the places a victim stopped earlier in the pass is freeing). ``mine``: the
    deciding policy's own targets, whose waiting replicas the budget counts itself (``budget``'s
    ``own_pending``). The controller fills the ledger from its bulk read of the targets and from each write it
    makes; the simulator from its pools. Both decide on this view, so two policies in one pass never count the
    same free chips, place or stopped victim twice: a policy that stopped a Workload and asked for a group for
    its place has that place taken, in the next policy's view, by the group it asked for."""
    others = {k: a for k, a in ledger.items() if k not in mine}
    pending = float(sum(a.gated * a.per_replica for a in others.values()))
    return dataclasses.replace(quota, pending=pending, asked=others)


def lent(quota: QuotaStatus, pending: Mapping[str, float]) -> QuotaStatus:
    """``quota`` with what its cohort lends counted again with ``pending``: per other ClusterQueue of the cohort
    (by name), the serving chips asked for there and not admitted yet (the controller's pass ledger). Kueue
    admits them into the cohort's pool as it frees, so two policies on two members never spend the same lent
    chips. ``cohort_pending`` keeps what they take (for the budget's message). Without a cohort, unchanged."""
    own = next((m for m in quota.members if m.name == quota.cluster_queue), None)
    if not quota.cohort or own is None:
        return quota
    others = tuple(
        dataclasses.replace(m, pending=pending.get(m.name, 0.0)) for m in quota.members if m.name != own.name
    )
    before = kueue_borrowable(own, [dataclasses.replace(m, pending=0.0) for m in others], in_cohort=True)
    borrowable = kueue_borrowable(own, others, in_cohort=True)
    return dataclasses.replace(
        quota, borrowable=borrowable, members=(own, *others), cohort_pending=max(0.0, before - borrowable)
    )


def saves_within_grace(w: TrainingWorkload) -> bool:
    """``w`` saves a checkpoint on SIGTERM (declared) and its save (declared) fits in its pods'
    ``terminationGracePeriodSeconds``: a stop loses nothing. A save longer than the grace period is cut by
    SIGKILL: then a stop loses the work since its last checkpoint, as for a trainer that does not save."""
    return (w.saves_on_termination and w.save_s is not None and w.grace_s is not None
            and w.save_s <= w.grace_s + _EPS)


def eviction_s(w: TrainingWorkload) -> float | None:
    """At most how long ``w``'s chips stay held after SIGTERM: its save when it saves within its grace period
    (it exits once saved), else its grace period (a trainer still running at its end is killed). None when its
    grace period was not read. Kueue's own reconcile before SIGTERM comes on top (a second or two)."""
    return w.save_s if saves_within_grace(w) else w.grace_s


def handoff_eviction_s(capacity: CapacitySpec, training: Sequence[TrainingWorkload], now: float) -> float | None:
    """The longest eviction (``eviction_s``) among the running Workloads this policy may stop now: how long a
    hand-off's victim may hold its chips after SIGTERM, whichever is chosen. A policy's forecast for the
    hand-off reaches this far plus its cold start (``Context.eviction_s``). None when no running Workload's
    grace period was read (the policy keeps its own estimate)."""
    known = [
        e for w in training
        if w.active and w.admitted and w.chips > 0 and _ineligible(capacity, w, now) is None
        and (e := eviction_s(w)) is not None
    ]
    return max(known, default=None)


def reacquire(
    *,
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    replicas: ReplicaStatus,
    target: str,
    max_replicas: int,
    now: float,
) -> Reacquire | None:
    """What getting back the replicas a scale-down releases now would take (``Reacquire``): for releasing 1, 2, ...
    replicas, the training ``_reactivate`` would resume on their chips, and the most replicas the target could
    then have with every running Workload the arbitration may stop (``_ineligible``: the per-job cap on stops in
    the last hour, ``minRunSeconds`` after a resume), against what it can have now; and when the budget lets it
    reach that again (a stop ageing out of the hour, a resume out of ``minRunSeconds``). The reactivation is taken
    without the policy's forecast hysteresis or the yield rule (each can only keep training down, so the cost is
    not understated). None with a slice inventory (where a group goes is the placement's, not a chip count)."""
    if quota.slices is not None and replicas.slice is not None:
        return None
    per, current, gated = capacity.per_replica, replicas.spec, replicas.gated
    room = budget(quota=quota, training=training, own_pending=gated * per,
                  waiting=waiting_targets(quota, {target: gated})).for_serving

    def reach(count: int, free: float, ws: Sequence[TrainingWorkload], at: float) -> int:
        stoppable = sum(
            w.chips for w in ws if w.active and w.admitted and w.chips > 0 and _ineligible(capacity, w, at) is None
        )
        return min(max_replicas, max(count, count + math.floor((free + stoppable) / per + _EPS)))

    reachable = reach(current, room, training, now)
    after: list[int] = []
    regained: list[float] = []
    resumed: list[str] = []
    for k in range(1, current + 1):
        back = {d.workload.key for d in _reactivate(capacity, quota, training, current, current - k, gated).training}
        ws = [
            dataclasses.replace(w, active=True, admitted=True, deactivated_by_us=False, resumed_at=now)
            if w.key in back else w
            for w in training
        ]
        # Removing k replicas frees their chips (the gated ones first: their ask); the training resumed takes its
        # chips back (a Workload still admitted was counted as being released).
        free = room + k * per - sum(w.chips for w in training if w.key in back)
        got = reach(current - k, free, ws, now)
        wait = 0.0
        if got < reachable:
            ends = sorted({t for w in ws for t in (
                *(p + HOUR_S for p in w.preempted_at),
                *((w.resumed_at + capacity.min_run_seconds,) if w.resumed_at is not None else ()),
            ) if t > now})
            wait = next((t - now for t in ends if reach(current - k, free, ws, t) >= reachable), math.inf)
        after.append(got)
        regained.append(wait)
        resumed.append(", ".join(
            f"{w.key} (stopped {sum(1 for p in w.preempted_at if now - p < HOUR_S)}× in the last hour)"
            for w in training if w.key in back
        ))
    return Reacquire(reachable, tuple(after), tuple(regained), tuple(resumed))


def work_at_risk(w: TrainingWorkload) -> float | None:
    """Chip-seconds stopping ``w`` now loses (work since its last checkpoint; nothing when it saves within its
    grace period), None when unknown."""
    if saves_within_grace(w):
        return 0.0
    return None if w.since_checkpoint_s is None else w.chips * max(0.0, w.since_checkpoint_s)


def next_checkpoint_s(w: TrainingWorkload) -> float | None:
    """Seconds until ``w``'s next checkpoint completes, from its interval (declared or learned) and its last
    checkpoint; None when either is unknown or the checkpoint is overdue (a schedule it does not keep now)."""
    if w.checkpoint_interval_s is None or w.since_checkpoint_s is None:
        return None
    due = w.checkpoint_interval_s - w.since_checkpoint_s
    return due if due >= 0 else None


#: A learned checkpoint interval: the gap between two successive ``last-checkpoint-time`` values, kept while
#: the next gap is within this factor of it (a trainer whose steps drift keeps its learned interval; a gap
#: far off, after a restart or a missed save, replaces it: the latest gap is the best guess of the next).
INTERVAL_DRIFT = 1.5


@dataclass(frozen=True, slots=True)
class CheckpointMemory:
    """What the controller remembers of one job's checkpoints between passes (``learn_interval``)."""

    last: float
    interval_s: float | None = None


def learn_interval(memory: CheckpointMemory | None, last_checkpoint: float | None) -> CheckpointMemory | None:
    """The job's checkpoint schedule after reading ``last_checkpoint`` (its annotation's time, unix seconds)
    this pass: a new, later value than remembered gives the interval (their difference). Pure: the caller
    keeps the memory (the controller per Workload UID; lost on restart, then learned again after two saves)."""
    if last_checkpoint is None:
        return memory
    if memory is None or last_checkpoint <= memory.last:
        return memory if memory is not None else CheckpointMemory(last=last_checkpoint)
    gap = last_checkpoint - memory.last
    interval = memory.interval_s
    if interval is None or not interval / INTERVAL_DRIFT <= gap <= interval * INTERVAL_DRIFT:
        interval = gap
    return CheckpointMemory(last=last_checkpoint, interval_s=interval)


def observe_demand(history: DemandHistory | None, wanted: int, now: float) -> DemandHistory:
    """``history`` after this evaluation's wanted count: its changes within ``DEMAND_LOOKBACK_S`` (pure; the
    engine keeps it in ``PolicyState.demand``). The unchanged history itself when nothing moved."""
    if history is None:
        return DemandHistory(since=now, count=wanted)
    old = now - DEMAND_LOOKBACK_S
    expired = bool(history.jumps) and history.jumps[0].at <= old
    if wanted == history.count and not expired:
        return history
    jumps = tuple(j for j in history.jumps if j.at > old) if expired else history.jumps
    if wanted != history.count:
        jumps = (*jumps, DemandJump(now, wanted - history.count))
    return DemandHistory(since=history.since, count=wanted, jumps=jumps)


def demand_variance(history: DemandHistory, now: float, horizon_s: float) -> float | None:
    """The wanted count's measured variance rate (replicas² per second): its realised quadratic variation (the
    sum of its squared changes) over the time observed, within ``DEMAND_LOOKBACK_S``. While less than
    ``horizon_s`` has been observed, the rest of the horizon counts as calm (a count that did not move): a
    young history's few changes are not extrapolated as if they were all there is. None before any time
    has been observed."""
    span = now - max(history.since, now - DEMAND_LOOKBACK_S)
    if span <= 0:
        return None
    moved = sum(j.change * j.change for j in history.jumps if j.at > now - DEMAND_LOOKBACK_S)
    return moved / max(span, horizon_s)


def reach_chance(rise: float, horizon_s: float, variance: float) -> float:
    """The chance that a count moving as a driftless random walk with ``variance`` (replicas² per second) rises
    by ``rise`` or more at some moment within ``horizon_s``: by the reflection principle, twice the chance it
    ends there, 2 (1 − Φ(rise / σ√H)) = erfc(rise / σ√(2H))."""
    if rise <= 0:
        return 1.0
    spread = math.sqrt(max(0.0, variance) * max(0.0, horizon_s))
    if spread <= 0:
        return 0.0
    return min(1.0, math.erfc(rise / (spread * math.sqrt(2.0))))


def loses_work(capacity: CapacitySpec, w: TrainingWorkload) -> bool:
    """Stopping ``w`` loses the work since its last checkpoint: it neither saves on SIGTERM within its grace
    period nor is asked and saves as it stops (``asks_as_it_stops``)."""
    return not saves_within_grace(w) and not asks_as_it_stops(capacity, w)


def yield_threshold(capacity: CapacitySpec, w: TrainingWorkload, horizon_s: float) -> float | None:
    """The chance above which ``w`` yields its chips now rather than run ``horizon_s`` to its next checkpoint
    (``yieldAtCheckpoint``); None: never (off, or its grace period unknown).

    ``balance``: yielding leaves its chips idle until serving takes them, running on loses the work computed
    until serving takes them plus its grace period (chips held, nothing kept). Until that moment the two cost
    the same chip-time, so yielding wins when chance × grace > (1 − chance) × horizon (what it forgoes when
    the rise does not come): chance > horizon ÷ (horizon + grace). ``band``: ``BAND_CHANCE``."""
    mode = capacity.yield_at_checkpoint
    if mode == "off" or w.grace_s is None:
        return None
    if mode == "band":
        return BAND_CHANCE
    return horizon_s / (horizon_s + w.grace_s) if horizon_s + w.grace_s > 0 else None


def _set_key(
    ws: Sequence[TrainingWorkload],
) -> tuple[float, float, float, float, float, tuple[int, ...], tuple[str, ...]]:
    risks = [work_at_risk(w) for w in ws]
    return (
        # Chips whose checkpoint time is unknown first: unknown is never taken as "just saved".
        sum(w.chips for w, r in zip(ws, risks, strict=True) if r is None),
        sum(r for r in risks if r is not None),  # then the least work lost
        # then the shortest wait for serving (the slowest victim's eviction; an unread grace period last)
        max((math.inf if (e := eviction_s(w)) is None else e for w in ws), default=0.0),
        sum(w.chips for w in ws),  # then the fewest chips stopped
        # then the least work at stake should a declared save on SIGTERM fail (slower than declared, cut by
        # SIGKILL): among victims that lose nothing, the ones that checkpointed last (``at_stake``).
        sum(at_stake(w) for w in ws),
        tuple(sorted((w.priority for w in ws), reverse=True)),  # then, as Kueue, the lowest priorities
        tuple(sorted(w.key for w in ws)),  # deterministic
    )


def at_stake(w: TrainingWorkload) -> float:
    """Chip-seconds computed since ``w``'s last checkpoint (0 when unknown: unknown ones are ranked apart):
    what a stop loses if the job does not save as declared. Equal to ``work_at_risk`` for a job that does
    not save on SIGTERM; for one that does, the hedge that breaks ties among victims that lose nothing."""
    return 0.0 if w.since_checkpoint_s is None else w.chips * max(0.0, w.since_checkpoint_s)


def victim_rank(training: Sequence[TrainingWorkload]) -> topology.Rank:
    """The hand-off's order of victim sets (``_set_key``) over Workload keys, for ``topology.choose_yield``:
    with a slice inventory the victims are chosen among those whose stop frees a placeable region, by the same
    order as without one (unknown checkpoints last, then the least work lost, the fewest chips, priorities)."""
    by_key = {w.key: w for w in training}

    def rank(keys: tuple[str, ...]) -> Any:
        return _set_key([by_key[k] for k in keys])

    return rank


def least_work_lost(candidates: Sequence[TrainingWorkload], shortfall: float) -> list[TrainingWorkload]:
    """Among the sets of ``candidates`` that free at least ``shortfall`` chips, the one that loses the least
    work (see ``_set_key``); every candidate when none does."""
    pool = sorted(candidates, key=lambda w: _set_key([w]))
    if sum(w.chips for w in pool) < shortfall - _EPS:
        return pool
    if len(pool) <= EXHAUSTIVE_MAX:
        # The first two terms of the key are sums: compare those cheaply, the full key only on a tie.
        parts = [
            (w.chips if work_at_risk(w) is None else 0, work_at_risk(w) or 0.0, w.chips) for w in pool
        ]
        best: tuple[int, ...] | None = None
        best_sums: tuple[float, float] = (math.inf, math.inf)
        for r in range(1, len(pool) + 1):
            for combo in itertools.combinations(range(len(pool)), r):
                chips = sum(parts[i][2] for i in combo)
                if chips < shortfall - _EPS:
                    continue
                sums = (sum(parts[i][0] for i in combo), sum(parts[i][1] for i in combo))
                if sums < best_sums or (
                    sums == best_sums and best is not None
                    and _set_key([pool[i] for i in combo]) < _set_key([pool[i] for i in best])
                ):
                    best, best_sums = combo, sums
        return sorted((pool[i] for i in best or ()), key=lambda w: _set_key([w]))
    # Many candidates: cheapest per chip first, then give back what turns out not to be needed.
    order = sorted(pool, key=lambda w: (work_at_risk(w) is None, (work_at_risk(w) or 0.0) / max(w.chips, 1),
                                        at_stake(w) / max(w.chips, 1), w.key))
    chosen: list[TrainingWorkload] = []
    for w in order:
        if sum(c.chips for c in chosen) >= shortfall - _EPS:
            break
        chosen.append(w)
    for w in reversed(list(chosen)):
        if sum(c.chips for c in chosen) - w.chips >= shortfall - _EPS:
            chosen.remove(w)
    return chosen


def lowest_priority_first(candidates: Sequence[TrainingWorkload], shortfall: float) -> list[TrainingWorkload]:
    """Kueue's own order, blind to checkpoints: lowest priority first, among equals the larger, then by name;
    as many as needed."""
    chosen: list[TrainingWorkload] = []
    for w in sorted(candidates, key=lambda w: (w.priority, -w.chips, w.key)):
        if sum(c.chips for c in chosen) >= shortfall - _EPS:
            break
        chosen.append(w)
    return chosen


def _units(value: float) -> str:
    return f"{value:g}"


def plan(
    *,
    spec: Spec,
    observation: Observation,
    desired: int,
    now: float = 0.0,
    choose: VictimChooser = least_work_lost,
    ahead: Ahead | None = None,
    demand: DemandHistory | None = None,
) -> Plan:
    """Decide which training to deactivate or reactivate for ``desired`` serving replicas (and, with the policy's
    forecast ``ahead``, which to stop early at a checkpoint and which to keep down; see transitions 4 and 5;
    with the wanted count's history ``demand``, which to yield at its checkpoint: transition 5)."""
    capacity, quota = spec.capacity, observation.quota
    if capacity is None or quota is None:
        return Plan(desired=desired, training=())
    replicas = observation.replicas
    current = replicas.spec
    # Replicas waiting for admission need room as much as new ones: holding the count while they wait for
    # quota that training holds would wait forever (nothing is on its way for them).
    acct = budget(quota=quota, training=observation.training, own_pending=replicas.gated * capacity.per_replica,
                  waiting=waiting_targets(quota, {observation.target.key: replicas.gated}))
    forecast = 0 if ahead is None else ahead.replicas
    # Acting ahead counts chips; with TPU slices a stop must free a whole region of the target's shape, which
    # only transition 2's placement knows: there, serving's own count drives the hand-off.
    sliced = quota.slices is not None and replicas.slice is not None
    if desired > current or (desired == current and replicas.gated > 0):
        if quota.slices is not None and replicas.slice is not None:
            return _scale_up_sliced(capacity, acct, quota, observation.target.key, replicas.slice,
                                    observation.training, current, desired, now, replicas.gated)
        up = _scale_up(capacity, acct, observation.training, current, desired, now, choose, replicas.gated,
                       waits_within=_headroom(capacity, ahead))
        if desired > current or up.training or ahead is None or not capacity.act_ahead or forecast <= current:
            return up
        # The replicas waiting for admission wait only for chips already on their way (an earlier hand-off in
        # flight: a victim in its grace period). A ramp's next step can still be taken ahead, at a checkpoint;
        # waiting for the first hand-off to finish would leave the next victim to be stopped wherever it stands.
        early = _act_ahead(capacity, acct, observation.training, current, ahead, now, choose,
                           fresh_s=FRESH_EVALUATIONS * spec.evaluation_period_seconds)
        return up if early is None else early
    if ahead is not None and capacity.act_ahead and not sliced and desired == current and forecast > current:
        early = _act_ahead(capacity, acct, observation.training, current, ahead, now, choose,
                           fresh_s=FRESH_EVALUATIONS * spec.evaluation_period_seconds)
        if early is not None:
            return early
    if demand is not None and not sliced and desired == current and replicas.gated == 0:
        yielded = _yield_at_checkpoint(capacity, acct, observation.training, current, demand, now,
                                       fresh_s=FRESH_EVALUATIONS * spec.evaluation_period_seconds)
        if yielded is not None:
            return yielded
    # Reactivation hysteresis: the chips the forecast needs within its lead stay with serving.
    keep = max(0, forecast - desired) * capacity.per_replica
    return _reactivate(capacity, quota, observation.training, current, desired, replicas.gated, keep=keep,
                       ahead=ahead, demand=None if sliced else demand, now=now)


def plan_chips(
    *,
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
    gated: int,
    now: float = 0.0,
    choose: VictimChooser = least_work_lost,
    waiting: Mapping[str, int] | None = None,
) -> Plan:
    """``plan`` for a policy with several targets, in chips: ``current``/``desired``/``gated`` are the chips
    of all its pools together, so the pools make one request (one shortfall, one victim set) and can never
    together ask for more than is free or claim the same victim. ``Plan.desired`` is the chips granted.
    ``waiting``: its pools' gated replicas by target key (``waiting_targets``)."""
    chips = capacity.model_copy(update={"per_replica": 1.0})
    if desired > current or (desired == current and gated > 0):
        acct = budget(quota=quota, training=training, own_pending=float(gated),
                      waiting=waiting_targets(quota, waiting or {}))
        return _scale_up(chips, acct, training, current, desired, now, choose, gated, unit="chips")
    return _reactivate(chips, quota, training, current, desired, gated, unit="chips")


def _ineligible(capacity: CapacitySpec, w: TrainingWorkload, now: float) -> str | None:
    """Why this controller will not stop ``w`` now (Kueue already evicting it; anti-thrash), or None."""
    if w.evicting:
        # Kueue keeps its quota and place until its pods are gone, and then gives them to what it evicts it for:
        # stopping it frees nothing for us, so it is no victim, and its chips are never counted as ours to free.
        why = f" ({w.evicted_reason})" if w.evicted_reason else ""
        return f"{w.key}: Kueue is already evicting it{why}, for a workload of its own choosing"
    if w.resumed_at is not None and now - w.resumed_at < capacity.min_run_seconds:
        return f"{w.key} resumed {now - w.resumed_at:.0f}s ago (minRunSeconds {capacity.min_run_seconds:g})"
    recent = sum(1 for t in w.preempted_at if now - t < HOUR_S)
    if recent >= capacity.max_preemptions_per_hour:
        cap = capacity.max_preemptions_per_hour
        return f"{w.key} already stopped {recent}× in the last hour (maxPreemptionsPerHour {cap})"
    return None


def _risk_text(w: TrainingWorkload) -> str:
    if w.since_checkpoint_s is None:
        return "last checkpoint unknown"
    return f"last checkpoint {w.since_checkpoint_s:.0f}s ago, ~{work_at_risk(w):.0f} chip-s lost"


def _scale_up(
    capacity: CapacitySpec,
    acct: Budget,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
    now: float,
    choose: VictimChooser,
    gated: int = 0,
    *,
    unit: str = "replicas",
    waits_within: Ahead | None = None,
) -> Plan:
    per, res = capacity.per_replica, acct.resource
    room_s = None if waits_within is None else waits_within.headroom_s
    need = (desired - current) * per
    headroom = acct.for_serving
    if need <= headroom + _EPS:
        return Plan(desired=desired, training=())
    running = [w for w in training if w.active and w.admitted and w.chips > 0]
    held = {w.key: why for w in running if (why := _ineligible(capacity, w, now)) is not None}
    eligible = [w for w in running if w.key not in held]
    # Ask only for what can be had: the most replicas that fit with every eligible Workload stopped. Never
    # fewer than now: replicas waiting for admission are not removed for want of room (they wait for it).
    reachable = max(current, min(
        desired, current + math.floor((headroom + sum(w.chips for w in eligible)) / per + _EPS)))
    shortfall = (reachable - current) * per - headroom
    victims = _choose_waiting(capacity, choose, eligible, shortfall, room_s) if shortfall > _EPS else []
    stopping, saving = _checkpoint_first(capacity, victims, now, missing=shortfall, headroom_s=room_s)
    if saving:
        # Serving asks only for what fits without the victims still saving: a pending replica would make
        # Kueue preempt them at once, losing the work the checkpoint is about to keep.
        reachable = max(current, min(reachable, current + math.floor(
            (headroom + sum(v.chips for v in stopping)) / per + _EPS)))
    waiting_units = "replica(s)" if unit == "replicas" else unit
    grow = (
        f"grow {current}→{reachable} {unit}" if reachable > current
        else f"admit its {gated} {waiting_units} waiting for admission"
    )
    decisions = _training_decisions(
        capacity, stopping, saving,
        lambda v: f"so serving can {grow}: they need {_units(need)} {res}; {acct.describe()}",
        headroom_s=room_s,
    )
    if desired == current:
        # Only replicas waiting for admission: say what they wait for, and what is done about it.
        waiting = [
            f"{gated} {waiting_units} waiting for admission need {_units(gated * per)} {res}; {acct.describe()}"
        ]
        if headroom + sum(w.chips for w in eligible) < -_EPS:
            waiting.insert(0, "they do not all fit even with all eligible training stopped")
        waiting.extend(_waiting_text(v, waits_within) for v, _ in saving)
        if stopping:
            waiting.append(f"deactivating {', '.join(v.key for v in stopping)}")
        waiting.extend(f"not stopping {why}" for why in held.values())
        return Plan(desired=desired, training=decisions, message="; ".join(waiting),
                    waiting_for_checkpoint=bool(saving))
    if reachable == desired:
        return Plan(desired=desired, training=decisions, waiting_for_checkpoint=bool(saving))
    parts = [f"{desired} {unit} need {_units(need)} more {res}; {acct.describe()}"]
    parts.extend(_waiting_text(v, waits_within) for v, _ in saving)
    if stopping:  # not the victims still saving: they are named above, waited for
        parts.append(f"deactivating {', '.join(v.key for v in stopping)}")
    parts.extend(f"not stopping {why}" for why in held.values())
    message = f"limited by capacity: only {reachable} {unit} fit even with all eligible training stopped; "
    return Plan(desired=reachable, training=decisions, message=message + "; ".join(parts),
                waiting_for_checkpoint=bool(saving))


def _training_decisions(
    capacity: CapacitySpec,
    stopping: Sequence[TrainingWorkload],
    saving: Sequence[tuple[TrainingWorkload, bool]],
    because: Callable[[TrainingWorkload], str],
    *,
    headroom_s: float | None = None,
) -> tuple[TrainingDecision, ...]:
    """Deactivations (each saying why: ``because``) and checkpoint requests, as both scale-up rules make them."""
    res = capacity.resource
    bound = (
        f"up to {capacity.checkpoint_request_seconds:g}s" if headroom_s is None
        else f"only within its {headroom_s:.0f}s latency headroom less its eviction (at most "
             f"{capacity.checkpoint_request_seconds:g}s)"
    )
    return tuple(
        TrainingDecision(
            workload=v,
            action=TrainingAction.DEACTIVATE,
            reason=Reason.DEACTIVATE_TRAINING,
            message=f"deactivating {v.key} (priority {v.priority}, {v.chips} {res}, {_risk_text(v)}) {because(v)}",
        )
        for v in stopping
    ) + tuple(
        _ask(v, f"as it is stopped ({_risk_text(v)}): its {v.save_s:g}s save fits in its {v.grace_s:g}s grace "
                "period; serving does not wait for it")
        for v in stopping if asks_as_it_stops(capacity, v)
    ) + tuple(
        _ask(v, f"before it is stopped ({_risk_text(v)}); serving waits {bound} for it")
        for v, ask in saving if ask
    )


def _waiting_text(v: TrainingWorkload, headroom: Ahead | None) -> str:
    """A clause naming a victim serving waits for, and within what when that is the policy's headroom."""
    if headroom is None or headroom.headroom_s is None:
        return f"waiting for {v.key} to checkpoint"
    due = next_checkpoint_s(v)
    when = "" if due is None else f" (its next one due in {due:.0f}s)"
    return f"waiting for {v.key} to checkpoint{when} within the policy's {headroom.headroom_text or 'headroom'}"


def _ask(v: TrainingWorkload, when: str) -> TrainingDecision:
    """The decision asking ``v`` to checkpoint; ``when`` says when and what serving does meanwhile."""
    return TrainingDecision(workload=v, action=TrainingAction.REQUEST_CHECKPOINT, reason=Reason.REQUEST_CHECKPOINT,
                            message=f"asking {v.key} to checkpoint {when}")


#: How many free places ``describe_slices`` counts at most (a message, not a census).
_FREE_COUNT_MAX = 64


def describe_slices(
    slices: SliceCapacity, shape: topology.Shape, inventory: topology.Inventory, pending_groups: int = 0
) -> str:
    """One clause: how many slices of ``shape`` fit now, in what, read from where."""
    inv = slices.inventory
    free = len(topology.free_places(inventory, shape, _FREE_COUNT_MAX))
    text = (
        f"{free} {shape} slice(s) free in flavor {slices.flavor} ({len(inv.blocks)} {inv.block_shape} "
        f"blocks, {inv.used_chips} of {inv.total_chips} chips held"
    )
    if pending_groups:
        text += f", {pending_groups} slice(s) asked for by other serving groups Kueue has not admitted yet"
    return text + (f"; {slices.source})" if slices.source else ")")


def _blocks_of(inventory: topology.Inventory, key: str) -> str:
    blocks = sorted({r.block for o in inventory.occupants if o.key == key for r in o.regions})
    return f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {', '.join(blocks)} (one unit)"


def serving_view(
    capacity: CapacitySpec, inventory: topology.Inventory, training: Sequence[TrainingWorkload], now: float,
    *, waiting: Collection[str] = (), evicting: Sequence[EvictedFor] = (),
) -> topology.Inventory:
    """The slice inventory as serving's scale-up sees it: training stopped and not evicted yet removed (its
    regions are being released), and so is training Kueue evicts for a replica of a target in ``waiting``
    (``making_room``; among ``evicting``, the ClusterQueue's, also the Workloads the policy does not select:
    ``unselected_making_room``); the running training this controller may stop (``_ineligible`` says which not)
    marked preemptible, everything else (serving, protected or unmatched Workloads) never."""
    inv = inventory.without([
        *(w.key for w in training if (not w.active and w.admitted) or making_room(w, waiting)),
        *(e.key for e in unselected_making_room(evicting, training, waiting)),
    ])
    running = [w for w in training if w.active and w.admitted and w.chips > 0]
    return inv.preemptible(w.key for w in running if _ineligible(capacity, w, now) is None)


@dataclass(frozen=True, slots=True)
class GroupAsk:
    """One target's part of a sliced request: its groups (``current``/``desired``/``gated``) of one ``shape``."""

    target: str
    shape: topology.Shape
    current: int
    desired: int
    gated: int = 0
    #: Chips one group counts against the ClusterQueue's quota (``perReplica`` for one target; the variant's
    #: slice chips for a policy with several targets).
    chips: float = 0.0
    #: Who grows, in messages ("serving" for one target, the pool's name for several).
    label: str = "serving"


@dataclass(frozen=True, slots=True)
class SlicedView:
    """The slice inventory as a sliced scale-up places its groups into (``sliced_view``)."""

    #: ``serving_view``, with the other serving targets' groups not placed yet holding free places.
    inventory: topology.Inventory
    #: Target key -> its groups holding a place (placed, or reserved by Kueue); the rest of its ``current``
    #: groups wait for admission and are placed before any new one.
    mine: dict[str, int]
    #: The other targets' groups asked for and not placed yet (placed as the smallest shape asked for).
    others: int


def sliced_view(
    capacity: CapacitySpec, quota: QuotaStatus, asks: Sequence[GroupAsk], training: Sequence[TrainingWorkload],
    now: float,
) -> SlicedView:
    """The one view of the blocks a sliced scale-up places its groups into (``_grant_sliced``; the
    ``disaggregated`` type's fit check reads the same, so a mix is never judged placeable on a place the grant
    will not give): training stopped and not evicted yet, and training Kueue evicts for a waiting replica of
    these targets, count as room (``serving_view``); the other targets' groups asked for and not placed yet take
    free places first; ``mine`` says how many of each target's groups hold a place."""
    slices = quota.slices
    assert slices is not None
    ours = {a.target for a in asks}
    # Training stopped and not evicted yet: its regions are being released (counted once, as ``freeing``);
    # the eligible victims are marked preemptible.
    inv = serving_view(capacity, slices.inventory, training, now,
                       waiting=waiting_targets(quota, {a.target: a.gated for a in asks}), evicting=quota.evicting)
    # Groups hold a place once Kueue reserved one for them (admitted or provisioning), whatever their pods'
    # gates say: the inventory, read after the replicas, is the fresher word on that.
    # Groups whose owner is not the target itself (Kueue's pod-group integration) are not recognised by it:
    # then the replicas not gated are the placed ones, as the replicas say.
    placed_by = Counter(slices.owners.values())
    mine = {a.target: max(placed_by.get(a.target, 0), a.current - a.gated) for a in asks}
    # Other targets' groups asked for and not placed yet take the free room first (placed as the smallest shape
    # asked for here: their own shape is not in the ledger, ``estimate``).
    smallest = min((a.shape for a in asks), key=lambda s: (s.chips, s))
    if quota.asked:
        others = sum(
            a.gated if not placed_by.get(t) else max(0, min(a.gated, a.spec - placed_by[t]))
            for t, a in quota.asked.items() if t not in ours
        )
    else:
        others = math.ceil(quota.pending / smallest.chips - _EPS) if quota.pending > _EPS else 0
    taken = topology.free_places(inv, smallest, others)
    inv = inv.with_occupants((*inv.occupants, *(
        topology.Occupant(key=f"pending-serving-{i}", regions=place) for i, place in enumerate(taken))))
    return SlicedView(inv, mine, others)


@dataclass(frozen=True, slots=True)
class _SlicedGrant:
    """What ``_grant_sliced`` found, per target key (the callers word the messages)."""

    reachable: dict[str, int]
    want: dict[str, int]
    waiting: dict[str, int]
    placeable: dict[str, int]
    unplaceable: dict[str, int]
    decisions: tuple[TrainingDecision, ...]
    stopping: tuple[TrainingWorkload, ...]
    saving: tuple[tuple[TrainingWorkload, bool], ...]
    held: dict[str, str]
    #: One clause on the free slices (the first ask's shape; every shape for several).
    desc: str


def _grant_sliced(
    capacity: CapacitySpec,
    acct: Budget,
    quota: QuotaStatus,
    asks: Sequence[GroupAsk],
    training: Sequence[TrainingWorkload],
    now: float,
) -> _SlicedGrant:
    """The one sliced scale-up rule (transition 1/2 on a slice inventory), for one target or several: every
    group asked for (new, or waiting for admission) must fit as a whole slice of its own target's shape in a
    free region. The shapes are placed largest first (a small slice placed first could split the region a
    large one needs), each group in what the previous ones left, so two groups never share a place or a
    victim. Where nothing is free, the victims are the running training whose stop frees a region of that
    group's shape, chosen by the hand-off's order (``victim_rank``: unknown checkpoints last, least work lost);
    a super-slice over two blocks is one victim freeing both. The quota number still caps the chips."""
    slices = quota.slices
    assert slices is not None
    view = sliced_view(capacity, quota, asks, training, now)
    inv, mine, others = view.inventory, view.mine, view.others
    running = [w for w in training if w.active and w.admitted and w.chips > 0]
    held = {w.key: why for w in running if (why := _ineligible(capacity, w, now)) is not None}
    want = {a.target: max(0, a.desired - mine[a.target]) for a in asks}
    waiting = {a.target: max(0, a.current - mine[a.target]) for a in asks}
    desc = "; ".join(dict.fromkeys(describe_slices(slices, a.shape, inv, others) for a in asks))
    # Chips for the asked-for and new groups: what the quota has left, plus what the waiting ones already count.
    quota_room = acct.for_serving + sum(a.gated * a.chips for a in asks)
    order = sorted(asks, key=lambda a: (-a.shape.chips, a.target))
    if sum(want[a.target] * a.chips for a in asks) <= quota_room + _EPS and _all_free(inv, order, want):
        return _SlicedGrant(
            reachable={a.target: a.desired for a in asks}, want=want, waiting=waiting,
            placeable=dict(want), unplaceable={a.target: 0 for a in asks}, decisions=(), stopping=(), saving=(),
            held=held, desc=desc)
    plans = _least_victims(inv, order, want, victim_rank(training))
    by_key = {w.key: w for w in training}
    victims = [by_key[k] for a in order for k in dict.fromkeys(plans[a.target].victims)]
    victims = list({v.key: v for v in victims}.values())
    stopping, saving = _checkpoint_first(capacity, victims, now, missing=float(sum(v.chips for v in victims)))
    ready = {v.key for v in stopping}
    room = quota_room + sum(v.chips for v in stopping)
    reachable: dict[str, int] = {}
    frees: dict[str, tuple[GroupAsk, tuple[topology.Region, ...]]] = {}
    for ask in order:
        usable = 0
        for choice in plans[ask.target].placed:
            if not set(choice.victims) <= ready:
                break  # a victim still saving: serving asks only for the slices that are free or freed now
            usable += 1
        usable = min(usable, math.floor(room / ask.chips + _EPS)) if ask.chips > 0 else usable
        room -= usable * ask.chips
        reachable[ask.target] = max(ask.current, min(ask.desired, ask.current + usable - waiting[ask.target]))
        for choice in plans[ask.target].placed:
            for k in choice.victims:
                frees.setdefault(k, (ask, choice.regions))

    def because(v: TrainingWorkload) -> str:
        ask, regions = frees[v.key]
        got = reachable[ask.target]
        grow = (
            f"grow {ask.current}→{got} groups" if got > ask.current
            else f"admit its {waiting[ask.target]} group(s) waiting for admission"
        )
        return (f"on {_blocks_of(inv, v.key)} so {ask.label} can {grow}: a {ask.shape} slice fits at "
                f"{', '.join(str(r) for r in regions)} once it stops; {desc}")

    return _SlicedGrant(
        reachable=reachable, want=want, waiting=waiting,
        placeable={t: len(g.placed) for t, g in plans.items()},
        unplaceable={t: g.unplaceable for t, g in plans.items()},
        decisions=_training_decisions(capacity, stopping, saving, because),
        stopping=tuple(stopping), saving=tuple(saving), held=held, desc=desc)


def _place_groups(
    inventory: topology.Inventory, order: Sequence[GroupAsk], want: dict[str, int], rank: topology.Rank
) -> dict[str, topology.GroupsPlan]:
    """Every ask's groups placed one after another (``topology.plan_groups``: a free region first, else the
    region whose preemptible blockers rank lowest), each in what the previous ones left."""
    plans: dict[str, topology.GroupsPlan] = {}
    for ask in order:
        groups = topology.plan_groups(inventory, ask.shape, want[ask.target], {}, owner_prefix=f"{ask.target}#new",
                                      rank=rank)
        plans[ask.target] = groups
        inventory = inventory.without(groups.victims)
        inventory = inventory.with_occupants((*inventory.occupants, *(
            topology.Occupant(key=f"{ask.target}#new-{i}", regions=c.regions) for i, c in enumerate(groups.placed))))
    return plans


def _least_victims(
    inventory: topology.Inventory, order: Sequence[GroupAsk], want: dict[str, int], rank: topology.Rank
) -> dict[str, topology.GroupsPlan]:
    """The placement of every group wanted whose victim set ranks lowest as a whole (the hand-off's order).

    Group by group (``_place_groups``) is not enough: one Workload over several slices can cost more than one
    single-slice job but less than the three it replaces when three groups are wanted. Up to
    ``EXHAUSTIVE_MAX`` preemptible occupants, every set ranking below the group-by-group one and freeing enough
    chips is tried in rank order, and the first under which every group can be placed (only its members may
    yield) wins; above that, or when even group by group some groups cannot be placed, group by group."""
    greedy = _place_groups(inventory, order, want, rank)
    candidates = sorted(o.key for o in inventory.occupants if o.preemptible)
    if len(candidates) > EXHAUSTIVE_MAX or any(g.unplaceable for g in greedy.values()):
        return greedy
    chips = {o.key: o.chips for o in inventory.occupants}
    short = sum(want[a.target] * a.shape.chips for a in order) - (inventory.total_chips - inventory.used_chips)
    bound = rank(tuple(sorted({k for g in greedy.values() for k in g.victims})))
    cheaper = [
        combo for size in range(1, len(candidates) + 1) for combo in itertools.combinations(candidates, size)
        if sum(chips[k] for k in combo) >= short and rank(combo) < bound
    ]
    for combo in sorted(cheaper, key=rank):
        plans = _place_groups(inventory.preemptible(combo), order, want, rank)
        if not any(g.unplaceable for g in plans.values()):
            return plans
    return greedy


def _all_free(inventory: topology.Inventory, order: Sequence[GroupAsk], want: dict[str, int]) -> bool:
    """Whether every group wanted fits in free regions now, larger shapes first, none sharing a place."""
    for ask in order:
        places = topology.free_places(inventory, ask.shape, want[ask.target])
        if len(places) < want[ask.target]:
            return False
        inventory = inventory.with_occupants((*inventory.occupants, *(
            topology.Occupant(key=f"{ask.target}#free-{i}", regions=p) for i, p in enumerate(places))))
    return True


def _scale_up_sliced(
    capacity: CapacitySpec,
    acct: Budget,
    quota: QuotaStatus,
    target: str,
    shape: topology.Shape,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
    now: float,
    gated: int,
) -> Plan:
    """Transition 1/2 for one target where the flavor has a slice inventory (``_grant_sliced``)."""
    ask = GroupAsk(target, shape, current, desired, gated, chips=capacity.per_replica)
    got = _grant_sliced(capacity, acct, quota, [ask], training, now)
    reachable, want, waiting, desc = got.reachable[target], got.want[target], got.waiting[target], got.desc
    decisions = got.decisions
    if reachable == desired and (desired > current or got.unplaceable[target] == 0):
        return Plan(
            desired=desired, training=decisions, waiting_for_checkpoint=bool(got.saving),
            message="" if desired > current else (
                f"{waiting} group(s) waiting for admission need as many {shape} slice(s); {desc}"))
    parts = [f"{want} {shape} slice(s) asked for, {got.placeable[target]} placeable; {desc}"]
    parts.extend(f"waiting for {v.key} to checkpoint" for v, _ in got.saving)
    if got.stopping:
        parts.append(f"deactivating {', '.join(v.key for v in got.stopping)}")
    parts.extend(f"not stopping {why}" for why in got.held.values())
    if desired == current:
        return Plan(desired=desired, training=decisions, waiting_for_checkpoint=bool(got.saving), message=(
            "they do not all fit as whole slices even with all eligible training stopped; " + "; ".join(parts)))
    message = (f"limited by topology: only {reachable} groups fit as whole {shape} slices even with all eligible "
               "training stopped; ")
    return Plan(desired=reachable, training=decisions, message=message + "; ".join(parts),
                waiting_for_checkpoint=bool(got.saving))


@dataclass(frozen=True, slots=True)
class SlicedPlan:
    """``plan_slices``' answer: the groups each target may have now, by target key, and the training decisions."""

    desired: dict[str, int]
    training: tuple[TrainingDecision, ...]
    message: str = ""


def plan_slices(
    *,
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    asks: Sequence[GroupAsk],
    now: float = 0.0,
) -> SlicedPlan:
    """``plan`` for a policy with several targets on a slice inventory (``quota.slices``): one request for the
    groups of all its pools, each placed as a whole slice of its own shape (``_grant_sliced``), one victim
    set chosen by region at the least lost work; a target that shrinks asks for nothing. When no pool grows
    and none waits for admission: transition 3 in chips (``_reactivate``; a Workload resumes only where all
    its slices fit now)."""
    if not any(a.desired > a.current or a.gated > 0 for a in asks):
        have = sum(int(a.current * a.chips) for a in asks)
        want = sum(int(a.desired * a.chips) for a in asks)
        chips = capacity.model_copy(update={"per_replica": 1.0})
        back = _reactivate(chips, quota, training, have, want, 0, unit="chips")
        return SlicedPlan(desired={a.target: a.desired for a in asks}, training=back.training)
    acct = budget(quota=quota, training=training, own_pending=float(sum(a.gated * a.chips for a in asks)),
                  waiting=waiting_targets(quota, {a.target: a.gated for a in asks}))
    got = _grant_sliced(capacity, acct, quota, asks, training, now)
    short = [a for a in asks if got.reachable[a.target] < a.desired]
    if not short:
        return SlicedPlan(desired=got.reachable, training=got.decisions)
    parts = [
        f"{a.label}: {got.want[a.target]} {a.shape} slice(s) asked for, {got.placeable[a.target]} placeable"
        for a in short
    ]
    parts.append(got.desc)
    parts.extend(f"waiting for {v.key} to checkpoint" for v, _ in got.saving)
    if got.stopping:
        parts.append(f"deactivating {', '.join(v.key for v in got.stopping)}")
    parts.extend(f"not stopping {why}" for why in got.held.values())
    message = "limited by topology: not every group fits as a whole slice even with all eligible training stopped; "
    return SlicedPlan(desired=got.reachable, training=got.decisions, message=message + "; ".join(parts))


def _headroom(capacity: CapacitySpec, ahead: Ahead | None) -> Ahead | None:
    """The policy's forecast when it carries a latency headroom the arbitration waits within
    (``capacity.waitWithinHeadroom``); None: the constant bounds (``checkpointRequestSeconds``,
    ``checkpointWaitSeconds``) apply as they are."""
    if not capacity.wait_within_headroom or ahead is None or ahead.headroom_s is None:
        return None
    return ahead


def headroom_wait(capacity: CapacitySpec, w: TrainingWorkload, headroom_s: float | None) -> float | None:
    """How long serving may wait for ``w`` to checkpoint before it is stopped (item 1b): the policy's latency
    headroom less ``w``'s eviction (``eviction_s``: its grace period, which serving waits out after the stop
    anyway). None when there is no headroom to wait in, ``w``'s grace period is unknown, or ``w`` loses
    nothing when stopped now (it saves on SIGTERM, or is asked as it stops: waiting would only delay serving)."""
    if headroom_s is None or not loses_work(capacity, w):
        return None
    evict = eviction_s(w)
    if evict is None or headroom_s - evict <= _EPS:
        return None
    return headroom_s - evict


def worth_waiting(
    capacity: CapacitySpec, w: TrainingWorkload, missing: float, headroom_s: float | None = None
) -> float | None:
    """With a latency headroom (``_headroom``; ``headroom_s``): the seconds until ``w``'s next checkpoint
    (``next_checkpoint_s``) when it completes within what serving may wait for it (``headroom_wait``): within
    the headroom serving's objective is not at risk, and the chips keep computing work that the save keeps.
    Without one, with ``checkpointWaitSeconds`` W > 0: the seconds until its next checkpoint when it is due
    within W and stopping ``w`` right after it saves more work (its ``work_at_risk`` now) than serving goes
    without meanwhile (``missing`` chips × the wait). Else None (stop it now, or ask)."""
    if headroom_s is not None:
        budget, due = headroom_wait(capacity, w, headroom_s), next_checkpoint_s(w)
        return due if budget is not None and due is not None and due <= budget + _EPS else None
    bound = capacity.checkpoint_wait_seconds
    if bound <= 0 or saves_within_grace(w):
        return None
    due, risk = next_checkpoint_s(w), work_at_risk(w)
    if due is None or risk is None or due > bound:
        return None
    return due if due * max(missing, 0.0) < risk else None


def asks_as_it_stops(capacity: CapacitySpec, w: TrainingWorkload) -> bool:
    """With checkpoint requests on (``checkpointRequestSeconds`` > 0): ``w`` declares it honours them
    (``honours_requests``), its declared save fits in its grace period, and it does not save on SIGTERM by
    itself, so it is asked to checkpoint and stopped in the same pass. A trainer that honours requests
    finishes a requested save before it exits, SIGTERM or not (the request's documented contract): the save runs in
    the grace period the chips are held for anyway, and
    serving does not wait for it."""
    return (capacity.checkpoint_request_seconds > 0 and w.honours_requests and not saves_within_grace(w)
            and w.save_s is not None and w.grace_s is not None and w.save_s <= w.grace_s + _EPS)


def _choose_waiting(
    capacity: CapacitySpec,
    choose: VictimChooser,
    eligible: Sequence[TrainingWorkload],
    shortfall: float,
    headroom_s: float | None = None,
) -> list[TrainingWorkload]:
    """``choose`` with the victims worth waiting for (``worth_waiting``) counted as losing nothing: they are
    stopped right after their checkpoint, so their chips come to serving after that wait and their grace
    period (shown as their eviction: among victims that lose nothing the shortest wait goes first). The
    chosen Workloads as read (``_checkpoint_first`` splits them)."""
    if capacity.checkpoint_wait_seconds <= 0 and headroom_s is None:
        return choose(eligible, shortfall)
    seen = {w.key: w for w in eligible}
    shown = []
    for w in eligible:
        due = worth_waiting(capacity, w, shortfall, headroom_s)
        shown.append(w if due is None else dataclasses.replace(
            w, since_checkpoint_s=0.0, grace_s=None if w.grace_s is None else w.grace_s + due))
    return [seen[w.key] for w in choose(shown, shortfall)]


def _checkpoint_first(
    capacity: CapacitySpec,
    victims: Sequence[TrainingWorkload],
    now: float,
    *,
    missing: float = 0.0,
    headroom_s: float | None = None,
) -> tuple[list[TrainingWorkload], list[tuple[TrainingWorkload, bool]]]:
    """Split victims into those to stop now and those to let save first (with whether to ask now).

    A victim that saves on SIGTERM within its grace period is stopped now: it loses nothing, and asking it
    first would only delay serving. With ``checkpointWaitSeconds``, a victim whose own next checkpoint is
    worth waiting for (``worth_waiting``, ``missing``: the chips serving still lacks) is left to save on its
    schedule, not asked: the next evaluation after its save finds it just checkpointed and stops it.

    With ``checkpointRequestSeconds`` T > 0, a victim that declares it honours requests (``honours_requests``)
    and whose last checkpoint is older than T (or unknown) is asked to checkpoint (``REQUEST_CHECKPOINT``)
    and stopped once its last checkpoint is newer than the request, or T after the request, whichever comes first. A
    request older than 2 T belongs to an earlier hand-off:
    it is asked again. The request time lives on the job, so a restart neither repeats nor forgets it.

    With a latency headroom (``headroom_s``, item 1b) both waits are bounded by it instead: a victim's own
    checkpoint is waited for when it completes within ``headroom_wait``, and a requested one only while that
    is positive, its declared save fits in what is left of it, and T has not passed since the request. Every
    evaluation reads the headroom anew, so the wait ends when the policy's objective comes at risk."""
    t = capacity.checkpoint_request_seconds
    if t <= 0 and capacity.checkpoint_wait_seconds <= 0 and headroom_s is None:
        return list(victims), []
    stopping: list[TrainingWorkload] = []
    saving: list[tuple[TrainingWorkload, bool]] = []
    for v in victims:
        if saves_within_grace(v) or asks_as_it_stops(capacity, v):
            # It saves on SIGTERM within its grace period, or saves when asked within it: waiting first is
            # pure delay (``_training_decisions`` asks the latter as it stops it).
            stopping.append(v)
            continue
        if worth_waiting(capacity, v, missing, headroom_s) is not None:
            saving.append((v, False))  # its own checkpoint is due soon: wait for it, no request
            continue
        if t <= 0 or not v.honours_requests:
            # Requests off, or a job that never said it reads them: asking would only make serving wait.
            stopping.append(v)
            continue
        if v.since_checkpoint_s is not None and v.since_checkpoint_s <= t:
            stopping.append(v)  # saved recently: little to lose, no reason to wait
            continue
        asked = v.checkpoint_requested_at
        if headroom_s is not None:
            budget = headroom_wait(capacity, v, headroom_s)
            fresh = asked is None or now - asked >= 2 * t
            # What the save still needs: all of it when asked now, what is left of it when asked earlier
            # (unknown without a declared save time: then only the headroom and T bound the wait).
            left = 0.0 if v.save_s is None else max(0.0, v.save_s - (0.0 if fresh or asked is None else now - asked))
            if budget is None or left > budget + _EPS or (not fresh and asked is not None and now - asked >= t):
                stopping.append(v)  # no headroom for it (left), or asked and not saved within T
            else:
                saving.append((v, fresh))
            continue
        if asked is None or now - asked >= 2 * t:
            saving.append((v, True))
        elif now - asked >= t:
            stopping.append(v)  # asked, not saved in time: stop it anyway
        else:
            saving.append((v, False))  # asked, saving: wait
    return stopping, saving


def _act_ahead(
    capacity: CapacitySpec,
    acct: Budget,
    training: Sequence[TrainingWorkload],
    current: int,
    ahead: Ahead,
    now: float,
    choose: VictimChooser,
    *,
    fresh_s: float,
) -> Plan | None:
    """Transition 4: serving does not need more replicas now, but the policy forecasts ``ahead.replicas``
    within ``ahead.within_s`` (a hand-off's lead: eviction plus cold start) and they do not fit. Waiting until
    they are due would stop training wherever it stands; acting now stops only Workloads that have just
    checkpointed (``since_checkpoint_s`` ≤ ``fresh_s``, or ≤ ``checkpointRequestSeconds`` with requests on),
    so they lose at most that much work, and starts the replicas they make room for at once. Others are left
    running (asked to checkpoint, with requests on) until one saves, or until the need is due and transition
    2 decides. None when there is nothing to do ahead."""
    per, res = capacity.per_replica, acct.resource
    headroom = acct.for_serving
    need = (ahead.replicas - current) * per
    if need <= headroom + _EPS:
        return None  # it fits when it is due: nothing to stop early
    running = [w for w in training if w.active and w.admitted and w.chips > 0]
    eligible = [w for w in running if _ineligible(capacity, w, now) is None]
    t = capacity.checkpoint_request_seconds
    window = max(fresh_s, t)
    # Just checkpointed: stopped now, it loses at most ``window`` of work. Not one that saves on SIGTERM within
    # its grace period: it loses nothing when the need is due either, so stopping it early only costs training.
    fresh = [w for w in eligible if not saves_within_grace(w)
             and w.since_checkpoint_s is not None and w.since_checkpoint_s <= window]
    reachable = min(ahead.replicas, current + math.floor(max(0.0, headroom + sum(w.chips for w in fresh)) / per + _EPS))
    stopping: list[TrainingWorkload] = []
    if reachable > current:
        stopping = choose(fresh, (reachable - current) * per - headroom)
    asking: list[TrainingWorkload] = []
    if t > 0:
        # The rest of the forecast need: ask the victims transition 2 would choose to save now, while serving
        # does not wait yet; each is stopped here once its save shows.
        rest = [w for w in eligible if w not in stopping]
        missing = need - headroom - sum(w.chips for w in stopping)
        if missing > _EPS:
            asking = [v for v, ask in _checkpoint_first(capacity, choose(rest, missing), now, missing=missing)[1]
                      if ask]
    if not stopping and not asking:
        return None
    lead = f"the policy forecasts {ahead.replicas} replicas within {ahead.within_s:g}s (now {current})"
    decisions = tuple(
        TrainingDecision(
            workload=v, action=TrainingAction.DEACTIVATE, reason=Reason.DEACTIVATE_TRAINING,
            message=(
                f"deactivating {v.key} ahead of need (priority {v.priority}, {v.chips} {res}, {_risk_text(v)}): "
                f"{lead}; they need {_units(need)} {res}; {acct.describe()}"
            ),
        )
        for v in stopping
    ) + tuple(
        TrainingDecision(
            workload=v, action=TrainingAction.REQUEST_CHECKPOINT, reason=Reason.REQUEST_CHECKPOINT,
            message=f"asking {v.key} to checkpoint ahead of need ({_risk_text(v)}): {lead}",
        )
        for v in asking
    )
    desired = max(current, reachable if stopping else current)
    message = (
        f"acting ahead: {lead}; starting {desired - current} on the chips of "
        f"{', '.join(v.key for v in stopping)}, which just checkpointed"
        if stopping else f"acting ahead: {lead}; asking {', '.join(v.key for v in asking)} to checkpoint first"
    )
    return Plan(desired=desired, training=decisions, message=message)


def _yield_at_checkpoint(
    capacity: CapacitySpec,
    acct: Budget,
    training: Sequence[TrainingWorkload],
    current: int,
    demand: DemandHistory,
    now: float,
    *,
    fresh_s: float,
) -> Plan | None:
    """Transition 5: serving needs no more now. A Workload that loses work when stopped (``loses_work``) and
    has just checkpointed (within ``fresh_s``) is stopped now when serving's count is likely enough
    (``yield_threshold``) to rise into its chips before its next checkpoint (``reach_chance`` over
    ``next_checkpoint_s``, the rise being what no longer fits in the free room, from the wanted count's
    measured variance, ``demand_variance``). Its chips stay free until serving takes them: nothing is started
    for them. Not a Workload still in its first interval since we resumed it (``_restarting``). The freshest
    first; each yield widens the room the next must be needed for. None: nothing yields."""
    if capacity.yield_at_checkpoint == "off":
        return None
    per = capacity.per_replica
    fresh = sorted(
        (w for w in training
         if w.active and w.admitted and w.chips > 0 and loses_work(capacity, w) and w.since_checkpoint_s is not None
         and w.since_checkpoint_s <= fresh_s and next_checkpoint_s(w) is not None
         and not _restarting(w, now) and _ineligible(capacity, w, now) is None),
        key=lambda w: (w.since_checkpoint_s or 0.0, w.key),
    )
    room = max(0.0, acct.for_serving)
    decisions: list[TrainingDecision] = []
    for w in fresh:
        horizon = next_checkpoint_s(w)
        assert horizon is not None  # filtered above
        variance = demand_variance(demand, now, horizon)
        threshold = yield_threshold(capacity, w, horizon)
        if variance is None or threshold is None:
            continue
        rise = math.floor(room / per + _EPS) + 1
        chance = reach_chance(rise, horizon, variance)
        if chance <= threshold:
            continue
        room += w.chips
        decisions.append(TrainingDecision(
            workload=w, action=TrainingAction.DEACTIVATE, reason=Reason.DEACTIVATE_TRAINING,
            message=(
                f"yielding {w.key} at its checkpoint (priority {w.priority}, {w.chips} {capacity.resource}, "
                f"{_risk_text(w)}): serving's count ({current}) rises by {rise} or more before its next "
                f"checkpoint in {horizon:.0f}s with chance {chance:.0%} (measured variance "
                f"{variance * HOUR_S:.2f} replicas² per hour), above {threshold:.0%} "
                f"(yieldAtCheckpoint {capacity.yield_at_checkpoint}); it loses nothing now, its chips wait "
                f"free for serving; {acct.describe()}"
            ),
        ))
    if not decisions:
        return None
    names = ", ".join(d.workload.key for d in decisions)
    return Plan(desired=current, training=tuple(decisions),
                message=f"yielding {names} at its checkpoint: serving's count is likely to need its chips first")


def _reactivate(
    capacity: CapacitySpec,
    quota: QuotaStatus,
    training: Sequence[TrainingWorkload],
    current: int,
    desired: int,
    gated: int,
    *,
    keep: float = 0.0,
    ahead: Ahead | None = None,
    unit: str = "replicas",
    demand: DemandHistory | None = None,
    now: float = 0.0,
) -> Plan:
    ours = sorted(
        (w for w in training if w.deactivated_by_us and not w.active),
        key=lambda w: (-w.priority, w.key),
    )
    if not ours:
        return Plan(desired=desired, training=())
    res, cq, per = quota.resource, quota.cluster_queue, capacity.per_replica
    removed = current - desired
    # A scale-down removes replicas not yet admitted first (the ReplicaSet controller deletes unscheduled
    # pods first); what stays gated still waits for room, and so does any other target's.
    waiting = max(0, gated - removed) * per + quota.pending
    if waiting > _EPS:
        return Plan(desired=desired, training=())
    released = max(0, removed - gated) * per
    claiming = float(sum(w.chips for w in training if w.active and not w.admitted))
    room = quota.free + released - claiming - keep
    decisions: list[TrainingDecision] = []
    # With a slice inventory, a Workload resumes only once its slices fit whole in regions free *now* (what
    # this scale-down releases is counted at the next evaluation, once Kueue has released it).
    inventory = None if quota.slices is None else quota.slices.inventory
    for w in ours:
        # Still admitted (Kueue has not evicted it yet): resuming it needs no new room.
        needs = 0 if w.admitted else w.chips
        if needs > room + _EPS:
            break
        if needs and _would_yield(capacity, w, room - needs, demand, now):
            break  # resumed, it would most likely be stopped again before its first checkpoint
        if inventory is not None and needs and w.slices:
            placed = _place_all(inventory, w)
            if placed is None:
                break
            inventory = placed
        room -= needs
        after = f" after scaling {current}→{desired}" if released else ""
        kept = (
            f"; {_units(keep)} {res} kept for the {ahead.replicas} replicas forecast within {ahead.within_s:g}s"
            if keep > _EPS and ahead is not None else ""
        )
        queued = f", {_units(claiming)} of them asked for by queued training" if claiming > _EPS else ""
        decisions.append(
            TrainingDecision(
                workload=w,
                action=TrainingAction.REACTIVATE,
                reason=Reason.REACTIVATE_TRAINING,
                message=(
                    f"reactivating {w.key} (priority {w.priority}, {w.chips} {res}): serving needs {desired} "
                    f"{unit}, none waits for admission, and {_units(room + needs + claiming + keep)} {res} are "
                    f"free in ClusterQueue {cq}{after}{queued}{kept}"
                ),
            )
        )
    return Plan(desired=desired, training=tuple(decisions))


def _restarting(w: TrainingWorkload, now: float) -> bool:
    """``w`` was resumed by this controller less than one checkpoint interval ago: it has not saved since (a
    save comes after its restore and a whole interval), so its fresh look is its restart, and stopping it
    would waste the restore it is paying."""
    interval = w.checkpoint_interval_s
    return w.resumed_at is not None and interval is not None and now - w.resumed_at < interval


def _would_yield(
    capacity: CapacitySpec, w: TrainingWorkload, room_after: float, demand: DemandHistory | None, now: float
) -> bool:
    """Transition 5's rule at a resume: ``w`` (losing work when stopped) stays stopped when serving's count is
    as likely to rise into its chips (what is left free after resuming it, ``room_after``) before its first
    checkpoint (its interval) as would make it yield there."""
    if demand is None or capacity.yield_at_checkpoint == "off" or not loses_work(capacity, w):
        return False
    horizon = w.checkpoint_interval_s
    if horizon is None:
        return False
    variance = demand_variance(demand, now, horizon)
    threshold = yield_threshold(capacity, w, horizon)
    if variance is None or threshold is None:
        return False
    rise = math.floor(max(0.0, room_after) / capacity.per_replica + _EPS) + 1
    return reach_chance(rise, horizon, variance) > threshold


def _place_all(inventory: topology.Inventory, w: TrainingWorkload) -> topology.Inventory | None:
    """``inventory`` with every slice of ``w`` placed in a free region, or None when one does not fit."""
    for index, shape in enumerate(w.slices):
        place = topology.find_place(inventory, shape)
        if place is None:
            return None
        inventory = inventory.with_occupant(topology.Occupant(key=f"{w.key}#{index}", regions=place))
    return inventory


def resume_uncovered(
    *, held: Sequence[TrainingWorkload], quota: QuotaStatus, claimed: float = 0.0
) -> list[TrainingDecision]:
    """Workloads this controller stopped that no policy covers any more (its policy was deleted or renamed, or
    its selector changed) are resumed by transition 3's rule: never while serving waits for admission on the
    ClusterQueue (``quota.pending``), highest priority first, while their chips are free (less what Workloads
    resumed earlier still claim, ``claimed``; one not evicted yet waits until it is); one that does not fit
    stops the rest."""
    if quota.pending > _EPS:
        return []
    room = quota.free - claimed
    out: list[TrainingDecision] = []
    for w in sorted(held, key=lambda w: (-w.priority, w.key)):
        # Even if not evicted yet, its chips count as needed: with no policy left, nobody knows who they were
        # freed for, so it waits until they are free again.
        needs = w.chips
        if needs > room + _EPS:
            break
        room -= needs
        out.append(TrainingDecision(
            workload=w, action=TrainingAction.REACTIVATE, reason=Reason.REACTIVATE_TRAINING,
            message=(
                f"reactivating {w.key} ({w.chips} {quota.resource}): no policy covers it any more (deleted, "
                f"renamed or its preemptible selector changed) and {_units(room + needs)} {quota.resource} are "
                f"free in ClusterQueue {quota.cluster_queue} with no serving replica waiting"
            ),
        ))
    return out


def in_apply_order(decisions: Sequence[Decision]) -> list[Decision]:
    """The order every caller applies one evaluation's decisions in: deactivations, then the scale(s), shrinking
    ones first, then reactivations. Stopping training before asking for replicas lets the stopped Workloads'
    quota go to the new serving pods (Kueue would otherwise pick its own victims for them); scaling down before resuming
    training frees the room the resumed Workloads need."""
    training = [d for d in decisions if isinstance(d, TrainingDecision)]
    # A policy with several targets: its shrinking pools first, so the chips they free are there for the
    # growing ones (a single target has one scale decision: nothing to order).
    scale = sorted((d for d in decisions if isinstance(d, ScaleDecision)), key=lambda d: d.desired > d.current)
    return [
        *(d for d in training if d.action is TrainingAction.REQUEST_CHECKPOINT),
        *(d for d in training if d.action is TrainingAction.DEACTIVATE),
        *scale,
        *(d for d in training if d.action is TrainingAction.REACTIVATE),
    ]
