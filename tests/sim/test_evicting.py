"""The simulator's Kueue marks the jobs it preempts on its own as the controller reads such a Workload: still
admitted, ``Evicted`` (``TrainingWorkload.evicting``), until their pods are gone. The one arbitration then neither
stops one again nor counts its chips, in ``simulate`` as in ``run`` (tests/core/test_evicting.py,
tests/controller/test_handoff.py)."""

from __future__ import annotations

from autoscaler.core import arbitration
from autoscaler.sim.kueue import JobState, TrainingJob
from tests.core import test_arbitration as chips


def job(name: str, offset_s: float, chips: int = 2) -> TrainingJob:
    """A trainer running since before the window, ``offset_s`` past its last checkpoint at time 0."""
    j = TrainingJob(name=name, namespace="llm", priority=10, chips=chips, interval_s=3600, save_s=20, restore_s=60,
                    grace_s=30, offset_s=offset_s, labels={"app": "finetune-job"})
    j.admit(0.0)
    return j


def test_a_job_kueue_preempts_reads_evicting_until_its_pods_are_gone() -> None:
    j = job("fresh", 0.0)
    j.evict(100.0, deactivate=False, reconcile_s=2.0)
    seen = j.workload(110.0)
    assert (seen.active, seen.admitted, seen.evicting, seen.evicted_reason) == (True, True, True, "Preempted")
    j.released()
    assert j.state is JobState.QUEUED
    seen = j.workload(140.0)
    assert (seen.active, seen.admitted, seen.evicting) == (True, False, False)


def test_a_job_we_deactivate_is_freeing_not_evicting() -> None:
    j = job("ours", 0.0)
    j.evict(100.0, deactivate=True, reconcile_s=2.0)
    seen = j.workload(110.0, deactivated_by_us=True)
    assert (seen.active, seen.admitted, seen.evicting) == (False, True, False)


def test_the_arbitration_leaves_kueues_victim_to_kueue() -> None:
    # 8 GPUs full: serving 2, "leaving" 4, "stale" 2. Kueue preempts "leaving" for a workload of its own; two more
    # serving replicas (4 GPUs) may count only on "stale": one more replica, one stop, never "leaving".
    leaving, stale = job("leaving", 0.0, chips=4), job("stale", 2990.0)
    leaving.evict(5.0, deactivate=False, reconcile_s=2.0)
    training = (leaving.workload(10.0), stale.workload(10.0))
    result = arbitration.plan(spec=chips.SPEC, observation=chips.observe(1, 8, training, nominal=8), desired=3)
    assert chips.actions(result) == [("deactivate", "stale")]
    assert result.desired == 2
