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
reloading before computing. Preemption discards the computation since the last completed checkpoint.
Its accounting is exact and closed-form (``segment_work``), so it needs no events of its own.
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


class TrainingJob:
    """One checkpointed training job (one Kueue Workload)."""

    __slots__ = (
        "admitted_at", "chips", "evicted_at", "first_admission", "interval_s", "lost_s", "name",
        "namespace", "preemptions", "priority", "restore_s", "save_s", "state", "useful_s",
    )

    def __init__(self, *, name: str, namespace: str, priority: int, chips: int, interval_s: float,
                 save_s: float, restore_s: float) -> None:
        self.name = name
        self.namespace = namespace
        self.priority = priority
        self.chips = chips
        self.interval_s = interval_s
        self.save_s = save_s
        self.restore_s = restore_s
        self.state = JobState.QUEUED
        self.admitted_at = 0.0
        self.evicted_at = 0.0
        #: True until the job has been admitted once in the simulation; jobs admitted at time 0 are taken
        #: to be already warm (running before the window starts), so they skip the restore.
        self.first_admission = True
        self.useful_s = 0.0
        self.lost_s = 0.0
        self.preemptions = 0

    def work(self, now: float) -> SegmentWork:
        restore = 0.0 if self.first_admission and self.admitted_at == 0.0 else self.restore_s
        return segment_work(now - self.admitted_at, restore_s=restore, interval_s=self.interval_s,
                            save_s=self.save_s)

    def admit(self, now: float) -> None:
        self.state = JobState.RUNNING
        self.admitted_at = now

    def evict(self, now: float, *, deactivate: bool) -> None:
        """Stop the job now: keep the checkpointed work, lose the rest."""
        w = self.work(now)
        self.useful_s += w.checkpointed_s
        self.lost_s += w.computed_s - w.checkpointed_s
        self.preemptions += 1
        self.first_admission = False
        self.evicted_at = now
        self.state = JobState.DEACTIVATED if deactivate else JobState.QUEUED

    def workload(self, now: float, *, deactivated_by_us: bool = False) -> TrainingWorkload:
        running = self.state is JobState.RUNNING
        return TrainingWorkload(
            namespace=self.namespace,
            name=self.name,
            priority=self.priority,
            chips=self.chips,
            active=self.state is not JobState.DEACTIVATED,
            admitted=running,
            deactivated_by_us=deactivated_by_us,
            since_checkpoint_s=self.work(now).since_checkpoint_s if running else None,
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
