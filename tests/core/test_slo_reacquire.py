"""``scaleDown.priceReacquire`` of type ``slo``: a release priced against the training stop its return would cost
(``arbitration.reacquire`` computes what the preemption budget allows; the policy keeps a replica it could not
buy back on less evidence than the time it takes to come back). tests/sim/test_price_reacquire.py has it in the
closed loop."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core import arbitration
from autoscaler.core.model import (
    QuotaStatus,
    Reacquire,
    Reason,
    ReplicaStatus,
    SignalReading,
    TrainingWorkload,
)
from autoscaler.core.policies import slo
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import CapacitySpec
from tests.core.test_slo import BASE, STEP, T0, TARGET, policy

GPU = "nvidia.com/gpu"
NOW = 50_000.0
CAPACITY = CapacitySpec.model_validate({"clusterQueue": "cq", "resource": GPU, "perReplica": 2})


def job(i: int, *, stopped: bool = False, stops: tuple[float, ...] = ()) -> TrainingWorkload:
    """One of six 2-GPU trainers (the TGI cluster's); ``stopped``: deactivated by us, its chips released;
    ``stops``: seconds ago it was stopped by us."""
    return TrainingWorkload(
        "training", f"job-{i}", 100, 2, active=not stopped, admitted=not stopped, deactivated_by_us=stopped,
        preempted_at=tuple(NOW - s for s in stops),
    )


def reacquire(training: tuple[TrainingWorkload, ...], serving: int, capacity: CapacitySpec = CAPACITY) -> Reacquire:
    running = sum(w.chips for w in training if w.active and w.admitted)
    quota = QuotaStatus("cq", GPU, nominal=16, reserved=2 * serving + running)
    got = arbitration.reacquire(capacity=capacity, quota=quota, training=training,
                                replicas=ReplicaStatus(serving, serving), target="llm/serving", max_replicas=8,
                                now=NOW)
    assert got is not None
    return got


# 5 serving replicas on 16 GPUs: 2 replicas' chips were free, three trainers stopped by us for the other three.
EXHAUSTED = (job(0, stopped=True, stops=(500, 100)), job(1, stopped=True, stops=(400,)),
             job(2, stopped=True, stops=(300,)), job(3), job(4), job(5))


def test_a_release_that_resumes_a_job_with_its_stops_spent_lowers_the_reach_until_the_first_ages_out() -> None:
    got = reacquire(EXHAUSTED, 5)
    # Now: 5 + the three running trainers' chips = 8. Releasing one resumes job-0 (the arbitration's order), which
    # was stopped twice in the last hour (maxPreemptionsPerHour 2): it cannot be stopped again for 3,100 s.
    assert got.reachable == 8
    assert got.after[0] == 7
    assert got.regained_in_s[0] == pytest.approx(3100.0)
    assert "job-0 (stopped 2× in the last hour)" in got.resumed[0]


def test_a_release_whose_job_can_still_be_stopped_costs_no_reach() -> None:
    once = (job(0, stopped=True, stops=(500,)), *EXHAUSTED[1:])
    got = reacquire(once, 5)
    assert got.after[0] == got.reachable == 8
    assert got.regained_in_s[0] == 0.0


def test_a_release_onto_free_chips_costs_no_reach() -> None:
    free = (job(0), job(1), job(2), job(3), job(4), job(5))
    got = reacquire(free, 2)
    assert got.resumed == ("", "")
    assert got.after == (8, 8)
    assert got.regained_in_s == (0.0, 0.0)


def test_a_job_resumed_is_not_stoppable_within_min_run_seconds() -> None:
    once = (job(0, stopped=True, stops=(500,)), *EXHAUSTED[1:])
    got = reacquire(once, 5, CAPACITY.model_copy(update={"min_run_seconds": 600.0}))
    assert got.after[0] == 7
    assert got.regained_in_s[0] == pytest.approx(600.0)


# --- the policy ----------------------------------------------------------------------------------------------


class Driver:
    """Evaluates the policy step by step with a given ``Context.reacquire`` (what the engine computes from the
    training and the quota: ``arbitration.reacquire``)."""

    def __init__(self, **scale_down: Any) -> None:
        self.pol = policy({**BASE, "scaleDown": scale_down})
        assert isinstance(self.pol.spec.policy, slo.SloPolicyConfig)
        self.algo = slo.build(self.pol.spec.policy)
        self.judge = SignalJudge(self.pol.spec)
        self.state: object | None = None
        self.now = T0
        self.reacquire: Reacquire | None = None

    def step(self, spec: int, running: float) -> Recommendation:
        readings = {k: SignalReading(v, self.now - 1) for k, v in (("waiting", 0.0), ("running", running))}
        ctx = Context(self.now, TARGET, ReplicaStatus(spec, spec), self.judge.judge_all(readings, self.now),
                      self.pol.spec, {}, None, self.reacquire)
        rec, self.state = self.algo.recommend(ctx, self.state)
        self.now += STEP
        return rec

    def steady(self, seconds: float, spec: int, running: float) -> Recommendation:
        rec = None
        for _ in range(int(seconds / STEP)):
            rec = self.step(spec, running)
        assert rec is not None
        return rec


def spent(wait: float, after: int = 7) -> Reacquire:
    """Releasing any of the 4 replicas resumes a job whose stops are spent for ``wait`` seconds."""
    return Reacquire(8, (after,) * 4, (wait,) * 4, ("training/job-0 (stopped 2× in the last hour)",) * 4)


@pytest.mark.parametrize("option", [True, False], ids=["priceReacquire", "as-before"])
def test_a_release_the_budget_could_not_buy_back_waits_for_evidence_spanning_its_return_or_all_kept(
    option: bool,
) -> None:
    drv = Driver(priceReacquire=option)
    drv.reacquire = spent(3000.0)
    # 4 replicas at a load of 0.95 (40 running of 42 a replica): the band and the hold window keep 2.
    rec = drv.steady(900, 4, 40)
    if not option:
        assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message
        return
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    assert "not below 4: releasing 4→3 resumes training/job-0 (stopped 2× in the last hour)" in rec.message
    assert "could not buy it back for 3000s (the pool could reach 7 of the 8 it can now)" in rec.message
    # 3,000 s + a hand-off's lead (2 cold starts without a victim's eviction), longer than the 1,800 s of history
    # the policy keeps: released only on that whole history, and 895 s are observed (gauges: no rate window).
    assert "3240s to come back, and the load history observed spans 895s of the 1800s it needs" in rec.message
    # Once the whole history kept is observed, its peak decides: 0.96 fits 2 replicas at 0.64.
    rec = drv.steady(910, 4, 40)
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message


def test_a_release_that_costs_no_reach_is_as_before() -> None:
    drv = Driver(priceReacquire=True)
    drv.reacquire = spent(0.0, after=8)
    rec = drv.steady(900, 4, 40)
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message
    assert "preemption budget" not in rec.message


def test_on_evidence_spanning_its_return_the_peak_of_that_time_decides() -> None:
    drv = Driver(priceReacquire=True)
    drv.reacquire = spent(300.0)
    # A peak of 2.4 (100 running) 500 s ago, within the 540 s (300 + 240) a released replica takes to come back.
    drv.steady(400, 4, 40)
    drv.steady(60, 4, 100)
    rec = drv.steady(500, 4, 40)
    assert rec.replicas == 4, rec.message
    assert "over the 540s it takes to come back the peak 2.40 of the last 535s at ≤ 0.64 needs 4" in rec.message
    # Once the peak is older than that, the rules as before: down to 3 (the load + the largest rise, 1.45).
    rec = drv.steady(60, 4, 40)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
    assert "preemption budget" not in rec.message


@pytest.mark.parametrize("option", [True, False], ids=["priceReacquire", "as-before"])
def test_a_slow_ramp_keeps_what_its_slope_needs_over_the_return(option: bool) -> None:
    drv = Driver(priceReacquire=option)
    drv.reacquire = spent(900.0)
    # A ramp from 0.64 to 1.69 replica-equivalents (27 to 71 running, ±1) over 1,790 s, 4 replicas held: its past
    # peak is about the load now, which 3 replicas carry at the scale-down utilization (1.76 ≤ 3 × 0.64); the
    # ramp's slope over the 480 s window that shows it does not (2.05 > 1.92).
    rec = None
    for i in range(358):
        rec = drv.step(4, 27 + 44 * i / 357 + (1 if i % 2 else -1))
    assert rec is not None
    if not option:
        assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
        return
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    assert ("over the 1140s it takes to come back the load now 1.76 + the slow ramp's +0.036/min (over the last "
            "480s) over 480s = 2.05 at ≤ 0.64 needs 4") in rec.message
