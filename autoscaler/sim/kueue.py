"""Kueue in the simulator: one ClusterQueue's quota, serving replicas and checkpointed training jobs.

Serving replicas and training jobs are Kueue Workloads admitted against one nominal quota. Who gives way
when serving needs chips is decided by an ``Arbiter`` (pluggable; the later arbitration work replaces the
default). ``KueueArbiter`` does what Kueue alone does:

1. a serving replica that does not fit is admitted by preempting lower-priority training, only when it
   cannot be admitted otherwise (reactive), lowest priority first, then the most recently admitted
   (Kueue's candidate order), keeping the smallest prefix that makes room and dropping the victims that
   turn out not to be needed;
2. preempted jobs are requeued and admitted again, highest priority first then oldest first, whenever the
   free quota fits them and no serving replica is waiting (BestEffortFIFO: a smaller job may pass a larger one).

A training job computes for ``checkpointIntervalSeconds``, saves for ``checkpointSaveSeconds``, and repeats;
after each admission except the very first (jobs already running at time 0) it spends ``restoreSeconds``
reloading before computing. Identical jobs are staggered: at time 0 job i of n is i/n of an interval past
its last checkpoint (they were not all started at once). Its accounting is exact and closed-form
(``segment_work``), so it needs no events of its own.

Preemption and deactivation take time, as in a cluster: Kueue's reconcile (``kueue.admissionSeconds``), then
the victim's pods get SIGTERM and ``terminationGracePeriodSeconds``. A trainer that saves on SIGTERM
(``saveOnPreemption``) and whose save fits in the grace period keeps all its work and exits after the save;
otherwise it loses the work since its last checkpoint and its chips are held for the whole grace period.
A trainer that honours checkpoint requests (``checkpointOnRequest``) and is still saving a requested
checkpoint when SIGTERM comes finishes that save when it ends within the grace period, keeps the work up to
the request, and exits once saved (the request's contract, docs/controller.md); a save that would end later
is cut by SIGKILL.
The job is ``TERMINATING`` meanwhile: its chips are not free, and the serving pod waits for them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from autoscaler.core.model import TrainingWorkload


class JobState(enum.Enum):
    QUEUED = "queued"  # requeued after preemption, or never admitted: waits for quota
    RUNNING = "running"
    TERMINATING = "terminating"  # preempted or deactivated, pods still in their grace period
    DEACTIVATED = "deactivated"  # Workload.spec.active=false: not requeued until reactivated


@dataclass(frozen=True, slots=True)
class SegmentWork:
    """Seconds of one admission (from admission to now): computed, and of that, safely checkpointed."""

    computed_s: float
    checkpointed_s: float
    since_checkpoint_s: float


def segment_work(
    elapsed_s: float, *, restore_s: float, interval_s: float, save_s: float
) -> SegmentWork:
    """Work done ``elapsed_s`` after admission: restore, then (compute ``interval_s``, save ``save_s``)*.

    A checkpoint counts once its save has completed; work computed after it, including a checkpoint whose
    save was interrupted, is what a preemption loses.
    """
    x = elapsed_s - restore_s
    if x <= 0:
        return SegmentWork(0.0, 0.0, 0.0)
    cycle = interval_s + save_s
    n = math.floor(x / cycle)
    rem = x - n * cycle
    computed = n * interval_s + min(rem, interval_s)
    return SegmentWork(computed, n * interval_s, rem)


@dataclass(frozen=True, slots=True)
class Stop:
    """One stop of a training job, for the per-victim account of lost work (``bench.handoff --explain``)."""

    at: float
    #: Deactivated (by a hand-off) rather than preempted by Kueue.
    deactivated: bool
    #: Seconds computed since its last checkpoint and not saved: what this stop lost, per chip.
    lost_s: float
    #: Seconds since its last admission: a stop soon after a restart wastes the restore as well.
    ran_s: float
    #: Stopped before its restore finished (the restore's time was spent for nothing).
    restoring: bool
    chips: int
    #: What its next admission spends restoring before it computes again (computing nothing, per chip).
    restore_s: float


class TrainingJob:
    """One checkpointed training job (one Kueue Workload)."""

    __slots__ = (
        "admitted_at", "after", "chips", "declares_checkpoints", "evicted_at", "evicted_for", "evictions",
        "first_admission",
        "grace_s",
        "honours_requests", "interval_s", "labels", "lost_s", "name", "namespace", "offset_s", "preemptions",
        "priority", "rebased", "release_at", "requested_at", "restore_s", "save_on_preemption", "save_s", "state",
        "stops", "useful_s",
    )

    def __init__(self, *, name: str, namespace: str, priority: int, chips: int, interval_s: float,
                 save_s: float, restore_s: float, grace_s: float = 0.0, save_on_preemption: bool = False,
                 offset_s: float = 0.0, labels: dict[str, str] | None = None,
                 honours_requests: bool = False, declares_checkpoints: bool = True) -> None:
        self.name = name
        self.namespace = namespace
        self.priority = priority
        self.chips = chips
        self.interval_s = interval_s
        self.save_s = save_s
        self.restore_s = restore_s
        self.grace_s = grace_s
        self.save_on_preemption = save_on_preemption
        #: At time 0 (first admission only): seconds computed since the last checkpoint (staggered phases).
        self.offset_s = offset_s
        self.labels = labels or {}
        self.state = JobState.QUEUED
        self.release_at = 0.0
        self.after = JobState.QUEUED
        self.admitted_at = 0.0
        self.evicted_at = 0.0
        #: While Kueue preempts it for a serving replica: that replica's target (``TargetRef.key``), as Kueue's
        #: ``Preempted`` message names the preemptor and the controller resolves it (``TrainingWorkload.evicted_for``).
        self.evicted_for = ""
        #: True until the job has been admitted once in the simulation; jobs admitted at time 0 are taken
        #: to be already warm (running before the window starts), so they skip the restore.
        self.first_admission = True
        self.useful_s = 0.0
        self.lost_s = 0.0
        self.preemptions = 0
        #: When it was stopped (preempted or deactivated): the per-job preemption rate is read from it.
        self.evictions: list[float] = []
        self.stops: list[Stop] = []
        #: Saves at once when asked (``checkpoint_on_request``); when it was last asked; whether the running
        #: segment started from such a save (no restore: the job never stopped).
        self.honours_requests = honours_requests
        self.requested_at: float | None = None
        self.rebased = False
        #: Its job declares its save time, whether it saves on SIGTERM and its checkpoint interval (the
        #: ``autoscaler.dev/checkpoint-*`` annotations the controller reads); its grace period is always read.
        self.declares_checkpoints = declares_checkpoints

    def work(self, now: float) -> SegmentWork:
        """This admission's work inside the simulated window (work before time 0 is not counted)."""
        if self.first_admission and self.admitted_at == 0.0:
            w = segment_work(now + self.offset_s, restore_s=0.0, interval_s=self.interval_s, save_s=self.save_s)
            return SegmentWork(max(0.0, w.computed_s - self.offset_s), max(0.0, w.checkpointed_s - self.offset_s),
                               w.since_checkpoint_s)
        # After a requested save the job never stopped: its new cycle starts without a restore.
        restore = 0.0 if self.rebased else self.restore_s
        return segment_work(now - self.admitted_at, restore_s=restore, interval_s=self.interval_s,
                            save_s=self.save_s)

    def admit(self, now: float) -> None:
        self.state = JobState.RUNNING
        self.admitted_at = now
        self.rebased = False

    def request_checkpoint(self, now: float) -> float | None:
        """Asked to checkpoint: when the save it starts now completes, or None if it does not honour requests
        (or is not running). Its computation since the last checkpoint is saved then (``checkpoint_saved``)."""
        self.requested_at = now
        if not self.honours_requests or self.state is not JobState.RUNNING:
            return None
        return now + self.save_s

    def checkpoint_saved(self, asked: float, now: float) -> None:
        """The save asked for at ``asked`` completed at ``now`` (if the job ran throughout): what it computed up
        to ``asked`` is kept, and a new checkpoint cycle starts now."""
        if self.state is not JobState.RUNNING or self.admitted_at > asked:
            return  # stopped (or restarted) before the save completed: nothing was saved
        self.useful_s += self.work(asked).computed_s
        self.admitted_at = now
        self.rebased = True

    def evict(self, now: float, *, deactivate: bool, reconcile_s: float = 0.0, evicted_for: str = "") -> float:
        """Kueue evicts the job now (SIGTERM after ``reconcile_s``): keep the checkpointed work (all of it if
        it saves within the grace period), lose the rest. Returns when its chips are free. ``evicted_for``: the
        serving target whose waiting replica Kueue preempts it for ("" for a deactivation)."""
        self.evicted_for = "" if deactivate else evicted_for
        w = self.work(now)
        saves = self.save_on_preemption and self.save_s <= self.grace_s
        asked = self.requested_at
        # A save asked for (``request_checkpoint``) and still running when SIGTERM comes: a trainer that honours
        # requests finishes it and then exits, when it ends within the grace period; the rest is SIGKILLed.
        in_flight = (
            asked is not None and self.honours_requests and self.admitted_at <= asked <= now < asked + self.save_s
            and asked + self.save_s <= now + reconcile_s + self.grace_s
        )
        lost = 0.0
        if saves:
            self.useful_s += w.computed_s
            hold = self.save_s
        elif in_flight and asked is not None:
            self.useful_s += self.work(asked).computed_s  # computing stopped when the save began
            hold = max(reconcile_s, asked + self.save_s - now) - reconcile_s
        else:
            self.useful_s += w.checkpointed_s
            lost = w.computed_s - w.checkpointed_s
            self.lost_s += lost
            hold = self.grace_s
        warm = self.first_admission and self.admitted_at == 0.0
        restore = 0.0 if warm or self.rebased else self.restore_s
        self.stops.append(Stop(at=now, deactivated=deactivate, lost_s=lost, ran_s=now - self.admitted_at,
                               restoring=now - self.admitted_at < restore, chips=self.chips,
                               restore_s=self.restore_s))
        self.preemptions += 1
        self.evictions.append(now)
        self.first_admission = False
        self.evicted_at = now
        self.after = JobState.DEACTIVATED if deactivate else JobState.QUEUED
        self.state = JobState.TERMINATING
        self.release_at = now + reconcile_s + hold
        return self.release_at

    def released(self) -> None:
        """Its pods are gone: requeued (preempted) or inactive (deactivated) from now on."""
        self.state = self.after

    def workload(
        self, now: float, *, deactivated_by_us: bool = False, preempted_at: tuple[float, ...] = (),
        resumed_at: float | None = None,
    ) -> TrainingWorkload:
        """As the controller reads it, with this controller's marks (``preempted-at``, ``resumed-at``)."""
        running = self.state is JobState.RUNNING
        by_kueue = self.state is JobState.TERMINATING and self.after is not JobState.DEACTIVATED
        since: float | None = None
        if running:
            w = self.work(now)
            since = w.since_checkpoint_s
            if not (self.first_admission and self.admitted_at == 0.0) and w.checkpointed_s == 0.0:
                # Restarted and not saved since: the controller reads the checkpoint it restored from and bounds
                # the risk by the time since its admission, less the restore the job declares
                # (autoscaler.dev/checkpoint-restore-seconds), as controller/workloads.py does.
                restore = self.restore_s if self.declares_checkpoints and not self.rebased else 0.0
                since = max(0.0, now - self.admitted_at - restore)
        return TrainingWorkload(
            namespace=self.namespace,
            name=self.name,
            priority=self.priority,
            chips=self.chips,
            active=not (self.state is JobState.DEACTIVATED
                        or (self.state is JobState.TERMINATING and self.after is JobState.DEACTIVATED)),
            admitted=running or self.state is JobState.TERMINATING,
            deactivated_by_us=deactivated_by_us,
            # Preempted by Kueue's own rule and still holding its chips: its Workload carries ``Evicted``
            # (reason ``Preempted``) while still admitted, as the controller reads it (``evicting_reason``).
            evicting=by_kueue,
            evicted_reason="Preempted" if by_kueue else "",
            evicted_for=self.evicted_for if by_kueue else "",
            since_checkpoint_s=since,
            checkpoint_requested_at=self.requested_at,
            preempted_at=preempted_at,
            resumed_at=resumed_at,
            grace_s=self.grace_s,
            save_s=self.save_s if self.declares_checkpoints else None,
            saves_on_termination=self.save_on_preemption and self.declares_checkpoints,
            # Between two completed saves: the time the last-checkpoint annotation moves by.
            checkpoint_interval_s=self.interval_s + self.save_s if self.declares_checkpoints else None,
            honours_requests=self.honours_requests and self.declares_checkpoints,
        )


class Arbiter(Protocol):
    """Who gives way between serving and training. Pure choices: the simulator applies them."""

    def victims(
        self, *, needed: int, free: int, running: Sequence[TrainingJob], serving_priority: int, now: float
    ) -> list[TrainingJob] | None:
        """Jobs to preempt so ``needed`` chips fit, or None to leave the serving replica pending."""
        ...

    def admissible(self, *, free: int, queued: Sequence[TrainingJob], now: float) -> list[TrainingJob]:
        """Queued jobs to admit now into ``free`` chips (called only when no serving replica waits)."""
        ...


class KueueArbiter:
    """Kueue's own behaviour: reactive preemption by priority, then recency; requeue when quota frees."""

    def victims(
        self, *, needed: int, free: int, running: Sequence[TrainingJob], serving_priority: int, now: float
    ) -> list[TrainingJob] | None:
        candidates = sorted(
            (j for j in running if j.priority < serving_priority),
            key=lambda j: (j.priority, -j.admitted_at, j.name),
        )
        chosen: list[TrainingJob] = []
        room = free
        for job in candidates:
            if room >= needed:
                break
            chosen.append(job)
            room += job.chips
        if room < needed:
            return None
        # Like Kueue, give back candidates that turn out not to be needed (tried in reverse order).
        for job in reversed(list(chosen)):
            if room - job.chips >= needed:
                chosen.remove(job)
                room -= job.chips
        return chosen

    def admissible(self, *, free: int, queued: Sequence[TrainingJob], now: float) -> list[TrainingJob]:
        out: list[TrainingJob] = []
        for job in sorted(queued, key=lambda j: (-j.priority, j.evicted_at, j.name)):
            if job.chips <= free:
                out.append(job)
                free -= job.chips
        return out
