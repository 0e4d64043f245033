"""A simulated training job asked to checkpoint before it is stopped (capacity.checkpointRequestSeconds)."""

from __future__ import annotations

import pytest

from autoscaler.sim.kueue import JobState, TrainingJob


def job(*, honours: bool) -> TrainingJob:
    """A trainer that does not save on SIGTERM (else Kueue's own preemption would keep its work too)."""
    j = TrainingJob(name="t", namespace="training", priority=1, chips=4, interval_s=600, save_s=20, restore_s=60,
                    honours_requests=honours, save_on_preemption=False)
    j.admit(0.0)  # running before the window: warm, no restore
    return j


def test_a_job_that_honours_the_request_keeps_its_work() -> None:
    j = job(honours=True)
    done = j.request_checkpoint(300.0)
    assert done == 320.0
    assert j.workload(310.0).checkpoint_requested_at == 300.0
    j.checkpoint_saved(300.0, 320.0)
    assert j.useful_s == 300.0
    assert j.workload(330.0).since_checkpoint_s == pytest.approx(10.0)
    j.evict(330.0, deactivate=True)
    assert j.useful_s == 300.0
    assert j.lost_s == pytest.approx(10.0)


def test_a_job_that_ignores_it_loses_what_kueue_alone_would() -> None:
    j = job(honours=False)
    assert j.request_checkpoint(300.0) is None
    j.evict(330.0, deactivate=True)
    assert (j.useful_s, j.lost_s) == (0.0, 330.0)


def test_stopped_before_the_save_completes_nothing_is_saved() -> None:
    j = job(honours=True)
    j.request_checkpoint(300.0)
    j.evict(310.0, deactivate=True)
    j.checkpoint_saved(300.0, 320.0)
    assert j.state is JobState.TERMINATING
    assert j.useful_s == 0.0


def test_a_restarted_job_risks_what_it_did_since_its_admission_as_the_controller_reads_it() -> None:
    """Re-admitted after a stop and not saved since: the controller reads the checkpoint it restored from and
    bounds the risk by the time since its admission less the restore the job declares, so the simulated Workload
    says the same; a job that declares nothing is bounded by the whole time since its admission."""
    j = job(honours=False)
    j.evict(300.0, deactivate=True)
    j.released()
    j.admit(1000.0)
    assert j.workload(1030.0).since_checkpoint_s == 0.0  # restoring (60 s): nothing computed a stop could lose
    assert j.workload(1100.0).since_checkpoint_s == 40.0  # 40 s computed after the restore
    j.declares_checkpoints = False
    assert j.workload(1100.0).since_checkpoint_s == 100.0  # the restore unknown: counted, the safe side
    j.declares_checkpoints = True
    # Once it has saved in this admission, the time since that save.
    assert j.workload(1000.0 + 60 + 600 + 20 + 5).since_checkpoint_s == 5.0


@pytest.mark.parametrize(
    ("grace_s", "honours", "useful_s", "lost_s", "release_at"),
    [
        # Asked at 300 (a 20 s save), SIGTERM at 310 + 2 s reconcile: the save ends at 320, within the grace
        # period: the work up to the request is kept and the pods exit once it is saved.
        pytest.param(60.0, True, 300.0, 0.0, 320.0, id="save-in-flight-fits-the-grace-period"),
        # A 5 s grace period: SIGKILL at 317 cuts the save; everything since the last checkpoint is lost.
        pytest.param(5.0, True, 0.0, 310.0, 317.0, id="grace-period-shorter-than-the-rest-of-the-save"),
        # A job that does not honour requests never started the save.
        pytest.param(60.0, False, 0.0, 310.0, 372.0, id="request-ignored"),
    ],
)
def test_a_requested_save_still_running_at_sigterm_completes_within_the_grace_period(
    grace_s: float, honours: bool, useful_s: float, lost_s: float, release_at: float
) -> None:
    j = TrainingJob(name="t", namespace="training", priority=1, chips=4, interval_s=600, save_s=20, restore_s=60,
                    grace_s=grace_s, honours_requests=honours, save_on_preemption=False)
    j.admit(0.0)
    j.request_checkpoint(300.0)
    assert j.evict(310.0, deactivate=True, reconcile_s=2.0) == release_at
    assert (j.useful_s, j.lost_s) == (useful_s, lost_s)
    j.checkpoint_saved(300.0, 320.0)  # the save's own completion: already counted (or cut), never twice
    assert j.useful_s == useful_s


def test_the_controller_reads_the_grace_period_and_the_declared_checkpoint_facts() -> None:
    """The simulated Workload carries what controller/workloads.py reads from the job: its grace period always,
    and its save time, save-on-SIGTERM and interval (between completed saves) when the job declares them."""
    j = TrainingJob(name="t", namespace="training", priority=1, chips=4, interval_s=600, save_s=20, restore_s=60,
                    grace_s=60, save_on_preemption=True)
    j.admit(0.0)
    w = j.workload(100.0)
    assert (w.grace_s, w.save_s, w.saves_on_termination, w.checkpoint_interval_s) == (60, 20, True, 620)
    quiet = TrainingJob(name="q", namespace="training", priority=1, chips=4, interval_s=600, save_s=20,
                        restore_s=60, grace_s=60, save_on_preemption=True, declares_checkpoints=False)
    quiet.admit(0.0)
    w = quiet.workload(100.0)
    assert (w.grace_s, w.save_s, w.saves_on_termination, w.checkpoint_interval_s) == (60, None, False, None)
