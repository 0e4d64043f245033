"""The serving/training arbitration rule: named cases from the GKE tutorial, and its invariants."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import arbitration
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import (
    Ahead,
    DeferredScale,
    DemandHistory,
    DemandJump,
    Observation,
    PolicyState,
    QueueQuota,
    QuotaStatus,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.policies.base import Recommendation
from autoscaler.core.spec import ScalingPolicy, Spec

GPU = "nvidia.com/gpu"
TARGET = TargetRef(TargetKind.DEPLOYMENT, "tgi-gemma-deployment", "llm")


def policy_doc() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "tgi-gemma"},
        "spec": {
            "target": {"kind": "Deployment", "name": "tgi-gemma-deployment", "namespace": "llm"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "signals": [{"name": "queue", "preset": "tgi.queue_size"}],
            "policy": {"type": "queue", "work": ["queue"], "capacityPerReplica": 10},
            "capacity": {"clusterQueue": "cluster-queue", "resource": GPU, "perReplica": 2},
            "preemptible": [{"namespace": "llm", "selector": {"matchLabels": {"app": "finetune-job"}}}],
        },
    }


SPEC: Spec = ScalingPolicy.model_validate(policy_doc()).spec


def wl(
    name: str = "job-finetune-gemma-l4-3316f",
    *,
    priority: int = 100,
    chips: int = 4,
    active: bool = True,
    admitted: bool = True,
    ours: bool = False,
) -> TrainingWorkload:
    return TrainingWorkload("llm", name, priority, chips, active, admitted, uid=f"uid-{name}", deactivated_by_us=ours)


def observe(current: int, reserved: float, training: tuple[TrainingWorkload, ...], nominal: float = 6) -> Observation:
    return Observation(
        target=TARGET,
        replicas=ReplicaStatus(spec=current, ready=current),
        training=training,
        quota=QuotaStatus("cluster-queue", GPU, nominal=nominal, reserved=reserved),
    )


def actions(plan: arbitration.Plan) -> list[tuple[str, str]]:
    return [(d.action.value, d.workload.name) for d in plan.training]


CASES = [
    # The tutorial, step by step (6 GPUs; TGI 2 per replica; the fine-tune 2 pods × 2 GPUs = 4).
    # Serving asks for its replicas in the same pass: its pods then wait for Kueue, ahead of queued training.
    pytest.param(1, 2, 6, (wl(),), 2, [("deactivate", "job-finetune-gemma-l4-3316f")],
                 id="tutorial-scale-to-2-deactivates-the-finetune-and-scales-at-once"),
    pytest.param(1, 2, 6, (wl(active=False, ours=True),), 2, [],
                 id="tutorial-restart-before-eviction-does-not-stop-twice-and-scales"),
    pytest.param(1, 2, 2, (wl(active=False, admitted=False, ours=True),), 2, [],
                 id="tutorial-after-eviction-serving-scales-to-2"),
    pytest.param(2, 1, 4, (wl(active=False, admitted=False, ours=True),), 1,
                 [("reactivate", "job-finetune-gemma-l4-3316f")],
                 id="tutorial-back-to-1-scales-down-and-reactivates"),
    pytest.param(1, 1, 2, (wl(active=False, admitted=False, ours=True),), 1,
                 [("reactivate", "job-finetune-gemma-l4-3316f")],
                 id="steady-with-room-reactivates"),
    pytest.param(2, 2, 6, (wl(active=False, admitted=False, ours=True),), 2, [],
                 id="steady-without-room-keeps-it-stopped"),
    pytest.param(1, 1, 2, (wl(active=False, admitted=False, ours=False),), 1, [],
                 id="never-resumes-what-someone-else-stopped"),
    pytest.param(1, 2, 2, (wl(),), 2, [], id="scale-up-that-fits-touches-no-training"),
    pytest.param(1, 2, 6, (wl("cheap", priority=10, chips=2), wl("dear", priority=100, chips=4)), 2,
                 [("deactivate", "cheap")], id="lowest-priority-first-and-only-enough"),
    pytest.param(1, 3, 6, (wl("a", priority=10, chips=2), wl("b", priority=20, chips=2), wl("c", priority=30)),
                 3, [("deactivate", "a"), ("deactivate", "b")], id="stops-when-the-new-replicas-fit"),
    pytest.param(1, 3, 4, (wl("a", chips=2),), 3, [("deactivate", "a")],
                 id="free-room-plus-one-victim-covers-the-scale-up"),
    pytest.param(1, 3, 6, (wl("a", chips=2),), 2, [("deactivate", "a")],
                 id="only-what-fits-with-all-preemptible-training-stopped"),
    pytest.param(1, 3, 6, (wl("a", chips=2, admitted=False), wl("b", chips=2, active=False, admitted=False)), 1, [],
                 id="pending-or-stopped-training-frees-nothing"),
    pytest.param(2, 1, 6, (wl("hi", priority=100, chips=6, active=False, admitted=False, ours=True),
                           wl("lo", priority=10, chips=2, active=False, admitted=False, ours=True)), 1, [],
                 id="reactivation-in-priority-order-no-overtaking"),
    pytest.param(1, 1, 0, (wl("hi", priority=100, chips=2, active=False, admitted=False, ours=True),
                           wl("mid", priority=50, chips=2, active=False, admitted=False, ours=True),
                           wl("lo", priority=10, chips=4, active=False, admitted=False, ours=True)), 1,
                 [("reactivate", "hi"), ("reactivate", "mid")], id="reactivates-highest-first-while-they-fit"),
    pytest.param(1, 1, 6, (wl(active=False, admitted=True, ours=True),), 1,
                 [("reactivate", "job-finetune-gemma-l4-3316f")],
                 id="still-admitted-resumes-without-new-room"),
]


@pytest.mark.parametrize(("current", "desired", "reserved", "training", "now", "expected"), CASES)
def test_plan(
    current: int,
    desired: int,
    reserved: float,
    training: tuple[TrainingWorkload, ...],
    now: int,
    expected: list[tuple[str, str]],
) -> None:
    result = arbitration.plan(spec=SPEC, observation=observe(current, reserved, training), desired=desired)
    assert result.desired == now
    assert actions(result) == expected


def test_messages_say_why_with_numbers() -> None:
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, (wl(),)), desired=2)
    assert result.message == ""  # the scale-up goes ahead; the deactivation says why
    (decision,) = result.training
    assert decision.reason is Reason.DEACTIVATE_TRAINING
    assert decision.message == (
        "deactivating llm/job-finetune-gemma-l4-3316f (priority 100, 4 nvidia.com/gpu, last checkpoint unknown) "
        "so serving can grow 1→2 replicas: they need 2 nvidia.com/gpu; 0 free (nvidia.com/gpu, ClusterQueue "
        "cluster-queue)"
    )


def test_not_enough_even_with_all_training_stopped() -> None:
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, (wl(chips=2),), nominal=6), desired=3)
    assert actions(result) == [("deactivate", "job-finetune-gemma-l4-3316f")]
    assert result.desired == 2
    assert result.message == (
        "limited by capacity: only 2 replicas fit even with all eligible training stopped; 3 replicas need "
        "4 more nvidia.com/gpu; 0 free (nvidia.com/gpu, ClusterQueue cluster-queue); deactivating "
        "llm/job-finetune-gemma-l4-3316f"
    )


def test_without_quota_the_plan_passes_through() -> None:
    obs = Observation(target=TARGET, replicas=ReplicaStatus(1, 1), training=(wl(),))
    assert arbitration.plan(spec=SPEC, observation=obs, desired=3) == arbitration.Plan(3, ())


def test_the_victim_order_is_replaceable() -> None:
    def largest_first(ws: Any, shortfall: float) -> list[TrainingWorkload]:
        return sorted(ws, key=lambda w: -w.chips)[:1]

    training = (wl("small", priority=1, chips=2), wl("big", priority=50, chips=4))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2, choose=largest_first)
    assert actions(result) == [("deactivate", "big")]


def test_engine_scales_up_and_deactivates_in_one_decision() -> None:
    compiled = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    obs = observe(1, 6, (wl(),))
    obs = Observation(obs.target, obs.replicas, {"queue": SignalReading(15.0, 1000.0)}, obs.training, obs.quota)
    decisions, _ = compiled.decide(obs, PolicyState(), 1000.0)
    scale, training = decisions
    assert isinstance(scale, ScaleDecision)
    assert (scale.desired, scale.reason) == (2, Reason.SCALE_UP)
    assert isinstance(training, TrainingDecision)
    assert training.action is TrainingAction.DEACTIVATE


def test_engine_reports_waiting_for_capacity() -> None:
    compiled = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    obs = observe(1, 6, (wl(chips=2),))
    obs = Observation(obs.target, obs.replicas, {"queue": SignalReading(25.0, 1000.0)}, obs.training, obs.quota)
    decisions, _ = compiled.decide(obs, PolicyState(), 1000.0)
    scale, training = decisions
    assert isinstance(scale, ScaleDecision)
    assert (scale.current, scale.desired, scale.reason) == (1, 2, Reason.WAITING_FOR_CAPACITY)
    assert "only 2 replicas fit" in scale.message
    assert isinstance(training, TrainingDecision)
    assert training.action is TrainingAction.DEACTIVATE


workloads = st.lists(
    st.builds(
        wl,
        name=st.sampled_from(["a", "b", "c", "d", "e"]),
        priority=st.integers(0, 3),
        chips=st.integers(0, 8),
        active=st.booleans(),
        admitted=st.booleans(),
        ours=st.booleans(),
    ),
    max_size=5,
    unique_by=lambda w: w.name,
).map(tuple)


@given(
    current=st.integers(0, 6),
    desired=st.integers(0, 6),
    reserved=st.floats(0, 16, allow_nan=False),
    nominal=st.floats(0, 16, allow_nan=False),
    training=workloads,
)
def test_invariants(current: int, desired: int, reserved: float, nominal: float, training: Any) -> None:
    quota = QuotaStatus("cluster-queue", GPU, nominal=nominal, reserved=reserved)
    obs = Observation(TARGET, ReplicaStatus(current, current), training=training, quota=quota)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=desired)
    kinds = {d.action for d in result.training}
    # Never more than wanted; never stop and resume in one plan; serving never shrinks for lack of quota.
    assert result.desired <= desired
    assert result.desired >= min(current, desired)
    assert len(kinds) <= 1
    if TrainingAction.DEACTIVATE in kinds or result.desired < desired:
        assert desired > current
        # What serving asks for fits in what is free plus what stopped training releases.
        freeing = sum(w.chips for w in training if not w.active and w.admitted)
        stopped = sum(d.workload.chips for d in result.training)
        assert (result.desired - current) * 2 <= max(0.0, quota.free + freeing + stopped) + 1e-9
    if TrainingAction.DEACTIVATE in kinds:
        # Only as many victims as needed: without the last one the scale-up would not have fitted.
        rest = [d.workload.chips for d in result.training][:-1]
        freeing = sum(w.chips for w in training if not w.active and w.admitted)
        assert (result.desired - current) * 2 > quota.free + freeing + sum(rest) - 1e-9 or result.desired < desired
    for d in result.training:
        if d.action is TrainingAction.DEACTIVATE:
            assert d.workload.active
            assert d.workload.admitted
        else:
            assert d.workload.deactivated_by_us
            assert not d.workload.active
    # Deterministic: the same snapshot gives the same plan (a restart repeats nothing new).
    assert arbitration.plan(spec=SPEC, observation=obs, desired=desired) == result
    assert arbitration.plan(spec=SPEC, observation=obs, desired=desired) == result


def test_decisions_are_applied_deactivations_first_then_the_scale_then_reactivations() -> None:
    stop = TrainingDecision(wl("a"), TrainingAction.DEACTIVATE, Reason.DEACTIVATE_TRAINING, "")
    resume = TrainingDecision(wl("b"), TrainingAction.REACTIVATE, Reason.REACTIVATE_TRAINING, "")
    scale = ScaleDecision(TARGET, 1, 2, Reason.SCALE_UP, "")
    assert arbitration.in_apply_order([resume, scale, stop]) == [stop, scale, resume]
    assert arbitration.in_apply_order([scale]) == [scale]


def test_a_shrinking_target_is_applied_before_a_growing_one() -> None:
    # One policy with several targets: the chips one pool frees are there for the other's new replicas.
    grow = ScaleDecision(TARGET, 1, 3, Reason.SCALE_UP, "")
    shrink = ScaleDecision(TargetRef(TargetKind.DEPLOYMENT, "other", TARGET.namespace), 4, 2, Reason.SCALE_DOWN, "")
    assert arbitration.in_apply_order([grow, shrink]) == [shrink, grow]
    assert arbitration.in_apply_order([shrink, grow]) == [shrink, grow]


# --- the budget: chips in flight ------------------------------------------------------------------------


def observe_inflight(
    current: int, reserved: float, training: tuple[TrainingWorkload, ...], *, gated: int = 0,
    others_pending: float = 0.0, nominal: float = 6, borrowable: float = 0.0,
) -> Observation:
    return Observation(
        target=TARGET,
        replicas=ReplicaStatus(spec=current, ready=current - gated, starting=gated, gated=gated),
        training=training,
        quota=QuotaStatus("cluster-queue", GPU, nominal=nominal, reserved=reserved, borrowable=borrowable,
                          pending=others_pending),
    )


def test_it_does_not_undo_itself_while_its_replica_waits() -> None:
    # 41 ms after "deactivate, then scale 1→2": the Workload is still admitted (Kueue has not evicted it) and
    # the second replica is gated. The old rule saw desired == current and resumed the Workload.
    obs = observe_inflight(2, 6, (wl(active=False, admitted=True, ours=True),), gated=1)
    assert arbitration.plan(spec=SPEC, observation=obs, desired=2).training == ()
    # Once the replica is admitted (the Workload evicted), still no room: it stays stopped.
    obs = observe_inflight(2, 4, (wl(active=False, admitted=False, ours=True),))
    assert arbitration.plan(spec=SPEC, observation=obs, desired=2).training == ()


def test_no_reactivation_while_another_targets_replicas_wait() -> None:
    obs = observe_inflight(1, 2, (wl(active=False, admitted=False, ours=True),), others_pending=2)
    assert arbitration.plan(spec=SPEC, observation=obs, desired=1).training == ()
    obs = observe_inflight(1, 2, (wl(active=False, admitted=False, ours=True),))
    assert actions(arbitration.plan(spec=SPEC, observation=obs, desired=1)) == [
        ("reactivate", "job-finetune-gemma-l4-3316f")
    ]


def test_scale_down_of_a_gated_replica_releases_nothing_but_ends_the_wait() -> None:
    # 2 replicas, the second gated; back to 1: the gated one goes first, so nothing is released and nothing
    # waits any more; the stopped, already-evicted Workload (4) does not fit in the 2 free: it stays stopped.
    obs = observe_inflight(2, 4, (wl(active=False, admitted=False, ours=True),), gated=1)
    assert arbitration.plan(spec=SPEC, observation=obs, desired=1).training == ()
    # Still admitted (not evicted yet): resumed without new room, since no replica waits for it any more.
    obs = observe_inflight(2, 6, (wl(active=False, admitted=True, ours=True),), gated=1)
    assert actions(arbitration.plan(spec=SPEC, observation=obs, desired=1)) == [
        ("reactivate", "job-finetune-gemma-l4-3316f")
    ]


def test_freed_chips_are_spent_once_across_policies() -> None:
    # Policy A stopped the 4-chip fine-tune and asked for 2 more replicas (4 chips, not admitted yet): policy B
    # on the same ClusterQueue sees the Workload freeing 4 and 4 asked for: nothing left for it.
    obs = observe_inflight(1, 6, (wl(active=False, admitted=True, ours=True),), others_pending=4)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=2)
    assert result.desired == 1
    assert "4 asked for by serving replicas Kueue has not admitted yet" in result.message


def test_own_gated_replicas_take_the_room_first() -> None:
    # 2 free, but this target's own gated replica asked for them: a third replica needs a victim.
    obs = observe_inflight(2, 4, (wl("a", chips=2),), gated=1, nominal=6)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=3)
    assert result.desired == 3
    assert actions(result) == [("deactivate", "a")]


def test_queued_training_claims_room_before_a_reactivation() -> None:
    queued = wl("queued", chips=2, active=True, admitted=False)
    obs = observe_inflight(1, 2, (queued, wl("ours", chips=4, active=False, admitted=False, ours=True)))
    assert arbitration.plan(spec=SPEC, observation=obs, desired=1).training == ()


# --- victims: the least work lost ----------------------------------------------------------------------


def ckpt(name: str, since: float | None, *, chips: int = 4, priority: int = 10, **kw: Any) -> TrainingWorkload:
    # A job that declares it honours checkpoint requests unless a case says otherwise (only such a one is asked).
    kw.setdefault("honours_requests", True)
    w = wl(name, chips=chips, priority=priority)
    return TrainingWorkload(w.namespace, w.name, w.priority, w.chips, True, True, uid=w.uid,
                            since_checkpoint_s=since, **kw)


def test_the_freshest_checkpoint_is_stopped_not_the_lowest_name() -> None:
    training = (ckpt("a-stale", 900), ckpt("b-fresh", 30), ckpt("c-mid", 300))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2)
    assert actions(result) == [("deactivate", "b-fresh")]
    assert "last checkpoint 30s ago, ~120 chip-s lost" in result.training[0].message


def test_two_fresh_small_jobs_beat_one_stale_big_one() -> None:
    training = (ckpt("big", 600, chips=4), ckpt("s1", 10, chips=2), ckpt("s2", 20, chips=2))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=3)
    assert sorted(actions(result)) == [("deactivate", "s1"), ("deactivate", "s2")]


def test_unknown_checkpoint_is_not_taken_as_fresh() -> None:
    training = (ckpt("unknown", None), ckpt("known", 3000))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2)
    assert actions(result) == [("deactivate", "known")]


def test_kueue_order_is_still_available_for_comparison() -> None:
    training = (ckpt("a", 900, priority=1), ckpt("b", 30, priority=5))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2,
                              choose=arbitration.lowest_priority_first)
    assert actions(result) == [("deactivate", "a")]


@settings(deadline=None)  # up to 2^10 subsets on a shared 2-core machine
@given(
    chips=st.lists(st.integers(1, 8), min_size=1, max_size=14),
    since=st.lists(st.one_of(st.none(), st.floats(0, 5000)), min_size=14, max_size=14),
    shortfall=st.integers(1, 40),
)
def test_least_work_lost_frees_enough_and_is_no_worse_than_kueue_order(
    chips: list[int], since: list[float | None], shortfall: int
) -> None:
    ws = [ckpt(f"w{i}", since[i], chips=c) for i, c in enumerate(chips)]
    chosen = arbitration.least_work_lost(ws, shortfall)
    if sum(chips) >= shortfall:
        assert sum(w.chips for w in chosen) >= shortfall
        kueue = arbitration.lowest_priority_first(ws, shortfall)
        if all(w.since_checkpoint_s is not None for w in ws) and len(ws) <= arbitration.EXHAUSTIVE_MAX:
            lost = sum(arbitration.work_at_risk(w) or 0.0 for w in chosen)
            assert lost <= sum(arbitration.work_at_risk(w) or 0.0 for w in kueue) + 1e-6
    else:
        assert sorted(w.key for w in chosen) == sorted(w.key for w in ws)


def test_anti_thrash_min_run_and_preemption_cap() -> None:
    now = 10_000.0
    just_resumed = ckpt("resumed", 10, resumed_at=now - 60)
    twice = ckpt("twice", 10, preempted_at=(now - 3000, now - 100))
    min_run = spec_with(minRunSeconds=600)
    # Off by default: the just-resumed job (10 s of work at risk) may be stopped; the capped one never.
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, (just_resumed, twice)), desired=2, now=now)
    assert actions(result) == [("deactivate", "resumed")]
    result = arbitration.plan(spec=min_run, observation=observe(1, 6, (just_resumed, twice)), desired=2, now=now)
    assert result.desired == 1
    assert result.training == ()
    assert "resumed 60s ago (minRunSeconds 600)" in result.message
    assert "already stopped 2× in the last hour (maxPreemptionsPerHour 2)" in result.message
    # An hour later both may be stopped again; the fresher checkpoint goes.
    later = now + 3600
    result = arbitration.plan(spec=min_run, observation=observe(1, 6, (just_resumed, twice)), desired=2, now=later)
    assert result.desired == 2
    assert len(result.training) == 1


# --- borrowing as Kueue lends it ----------------------------------------------------------------------


BORROW_CASES = [
    pytest.param(QueueQuota(6, 6, borrowing_limit=10), [], False, 0.0, id="no-cohort-lends-nothing"),
    pytest.param(QueueQuota(6, 6, borrowing_limit=10), [QueueQuota(8, 8)], True, 0.0,
                 id="a-busy-cohort-lends-nothing"),
    pytest.param(QueueQuota(6, 6, borrowing_limit=3), [QueueQuota(8, 2)], True, 3.0,
                 id="capped-by-the-borrowing-limit"),
    pytest.param(QueueQuota(6, 6), [QueueQuota(8, 2, lending_limit=4)], True, 4.0,
                 id="capped-by-the-lenders-lending-limit"),
    pytest.param(QueueQuota(6, 8), [QueueQuota(8, 2)], True, 6.0,
                 id="already-borrowed-counts-and-is-not-lent-twice"),
    # Added where a mutation run (docs/testing.md) showed the rule untested.
    pytest.param(QueueQuota(6, 6), [QueueQuota(8, 6), QueueQuota(4, 1)], True,
                 5.0, id="every-cohort-member-lends-its-spare"),
    pytest.param(QueueQuota(6, 9, borrowing_limit=3), [QueueQuota(8, 2)], True, 3.0,
                 id="a-used-up-borrowing-limit-lends-no-more"),
    pytest.param(QueueQuota(6, 8, borrowing_limit=4), [QueueQuota(8, 0)], True, 4.0,
                 id="the-borrowing-limit-counts-what-is-already-borrowed"),
]


BORROW_CASES += [
    # Kueue's pool is every member's lendable quota less every member's usage past its unlent part: a member that
    # borrows takes from everyone's lendable quota, ours too (before, each member's spare was clipped at 0 and
    # our own nominal counted as free while another member held it).
    pytest.param(QueueQuota(6, 2), [QueueQuota(8, 12)], True, -4.0, id="a-borrower-holds-our-nominal-quota"),
    pytest.param(QueueQuota(6, 2, reclaims=True), [QueueQuota(8, 12)], True, 0.0,
                 id="reclaimed-within-the-cohort-our-nominal-is-ours"),
    # Serving asked for on another member is admitted into the pool before what we ask for...
    pytest.param(QueueQuota(2, 2), [QueueQuota(2, 2, pending=2), QueueQuota(4, 0)], True, 2.0,
                 id="another-members-pending-takes-from-what-is-lent"),
    # ...except what fits in that member's unlent part (nominal - lendingLimit), which is never in the pool.
    pytest.param(QueueQuota(2, 2), [QueueQuota(4, 0, lending_limit=2, pending=2)], True, 2.0,
                 id="pending-within-the-unlent-part-takes-nothing-lent"),
    pytest.param(QueueQuota(2, 2), [QueueQuota(4, 0, lending_limit=2, pending=3)], True, 1.0,
                 id="pending-past-the-unlent-part-takes-from-the-pool"),
]


@pytest.mark.parametrize(("own", "others", "cohort", "expected"), BORROW_CASES)
def test_kueue_borrowable(own: Any, others: Any, cohort: bool, expected: float) -> None:
    assert arbitration.kueue_borrowable(own, others, in_cohort=cohort) == expected


def _cohort_quota(*, b_pending: float = 0.0) -> QuotaStatus:
    """cq-a (2, full) in cohort ``shared`` with cq-b (2, full) and a lender (4, idle), as the controller reads it."""
    members = (QueueQuota(2, 2, name="cq-a"), QueueQuota(2, 2, name="cq-b"), QueueQuota(4, 0, name="lender"))
    quota = QuotaStatus("cq-a", "nvidia.com/gpu", 2, 2, borrowable=4, cohort="shared", members=members)
    return arbitration.lent(quota, {"cq-b": b_pending})


@pytest.mark.parametrize(
    ("b_pending", "available"),
    [
        pytest.param(0.0, 4.0, id="the-lenders-4-are-ours-while-nobody-else-asks"),
        pytest.param(4.0, 0.0, id="what-cq-b-asked-for-is-not-lent-twice"),
        # Kueue admits cq-b's replicas as room frees, before ours: the 2 it has not got yet are spoken for too
        # (as another target's pending replicas on our own ClusterQueue are), so a scale-up must free them first.
        pytest.param(6.0, -2.0, id="what-cq-b-waits-for-beyond-the-pool-is-spoken-for"),
    ],
)
def test_the_budget_of_a_cohort_member_counts_what_the_others_asked_for(b_pending: float, available: float) -> None:
    acct = arbitration.budget(quota=_cohort_quota(b_pending=b_pending), training=(), own_pending=0.0)
    assert acct.available == available
    assert acct.cohort == "shared"
    assert acct.cohort_pending == b_pending
    if b_pending:
        assert "taken by serving replicas asked for on its other ClusterQueues" in acct.describe()
    assert "cohort shared" in acct.describe()


def test_lent_leaves_a_queue_without_cohort_alone() -> None:
    quota = QuotaStatus("cq", "nvidia.com/gpu", 6, 2)
    assert arbitration.lent(quota, {"other": 4.0}) is quota


# --- asking for a checkpoint first (capacity.checkpointRequestSeconds) -----------------------------------------


def spec_with(**capacity: Any) -> Spec:
    doc = policy_doc()
    doc["spec"]["capacity"].update(capacity)
    return ScalingPolicy.model_validate(doc).spec


ASK = spec_with(checkpointRequestSeconds=60)


def test_a_stale_victim_is_asked_to_checkpoint_and_serving_waits() -> None:
    now = 10_000.0
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (ckpt("stale", 500),)), desired=2, now=now)
    assert actions(result) == [("request-checkpoint", "stale")]
    assert result.desired == 1, "a pending replica would make Kueue preempt it before it saves"
    assert "waiting for llm/stale to checkpoint" in result.message
    # Asked 20 s ago, still saving: wait, do not ask again.
    asked = ckpt("stale", 520, checkpoint_requested_at=now - 20)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (asked,)), desired=2, now=now)
    assert (result.desired, result.training) == (1, ())
    # Saved (its last checkpoint is newer than the request): stopped now, serving scales.
    saved = ckpt("stale", 5, checkpoint_requested_at=now - 35)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (saved,)), desired=2, now=now)
    assert (result.desired, actions(result)) == (2, [("deactivate", "stale")])
    # Asked 70 s ago and never saved (the job ignores requests): stopped anyway.
    ignored = ckpt("stale", 570, checkpoint_requested_at=now - 70)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (ignored,)), desired=2, now=now)
    assert (result.desired, actions(result)) == (2, [("deactivate", "stale")])


def test_a_job_that_does_not_declare_it_honours_requests_is_never_asked_nor_waited_for() -> None:
    # Requests on, but the job never said it reads them (no autoscaler.dev/checkpoint-on-request: "true"):
    # asking would only make serving wait out checkpointRequestSeconds for a save that never comes.
    now = 10_000.0
    silent = ckpt("silent", 500, honours_requests=False, save_s=20.0, grace_s=60.0)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (silent,)), desired=2, now=now)
    assert (result.desired, actions(result), result.waiting_for_checkpoint) == (2, [("deactivate", "silent")], False)
    # The same job declaring it: its 20 s save fits its 60 s grace period, so it is asked as it is stopped.
    declared = ckpt("declared", 500, save_s=20.0, grace_s=60.0)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (declared,)), desired=2, now=now)
    assert (result.desired, sorted(actions(result))) == (
        2, [("deactivate", "declared"), ("request-checkpoint", "declared")])
    # Acting ahead asks only a declared job too.
    training = (ckpt("silent", 300, chips=2, honours_requests=False), ckpt("other", 300, chips=2,
                                                                          honours_requests=False))
    result = arbitration.plan(spec=AHEAD_ASK, observation=observe(1, 6, training), desired=1, ahead=SOON, now=now)
    assert result.training == ()


def test_a_fresh_victim_is_stopped_without_asking() -> None:
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (ckpt("fresh", 40),)), desired=2, now=1.0)
    assert actions(result) == [("deactivate", "fresh")]


def test_requests_go_first_in_apply_order() -> None:
    ask = TrainingDecision(wl("a"), TrainingAction.REQUEST_CHECKPOINT, Reason.REQUEST_CHECKPOINT, "")
    stop = TrainingDecision(wl("b"), TrainingAction.DEACTIVATE, Reason.DEACTIVATE_TRAINING, "")
    scale = ScaleDecision(TARGET, 1, 2, Reason.SCALE_UP, "")
    assert arbitration.in_apply_order([scale, stop, ask]) == [ask, stop, scale]


# --- replicas waiting for admission (issue 14) ------------------------------------------------------------


def test_a_replica_waiting_for_admission_gets_room_from_training() -> None:
    # 2 replicas, the second gated for want of quota: the fine-tune holds 4 of the 6. Holding the count must
    # not mean waiting forever: the fine-tune is stopped for the replica already asked for.
    obs = observe_inflight(2, 6, (wl(),), gated=1)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=2)
    assert result.desired == 2
    assert actions(result) == [("deactivate", "job-finetune-gemma-l4-3316f")]
    assert "admit its 1 replica(s) waiting for admission" in result.training[0].message
    # Room already there (Kueue will admit it on its own): nothing is stopped.
    obs = observe_inflight(2, 2, (wl(active=False, admitted=False, ours=True),), gated=1)
    assert arbitration.plan(spec=SPEC, observation=obs, desired=2).training == ()


def test_a_replica_that_cannot_be_admitted_is_held_not_removed() -> None:
    # Nothing eligible to stop (a protected job is not in the list): the gated replica stays asked for, and
    # the message says it does not fit.
    obs = observe_inflight(2, 6, (), gated=1)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=2)
    assert (result.desired, result.training) == (2, ())
    assert "do not all fit even with all eligible training stopped" in result.message


def test_waiting_for_admission_is_its_own_reason() -> None:
    # spec 2 = 1 ready + 1 gated; the queue needs 2: the hold says the replica waits for admission.
    cp = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    obs = Observation(
        target=TARGET,
        replicas=ReplicaStatus(spec=2, ready=1, starting=0, gated=1),
        signals={"queue": SignalReading(15.0, 1000.0)},
        training=(wl(),),
        quota=QuotaStatus("cluster-queue", GPU, nominal=6, reserved=6),
    )
    decisions, _ = cp.decide(obs, PolicyState(), 1000.0)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert (scale.desired, scale.reason) == (2, Reason.WAITING_FOR_ADMISSION)
    assert "1 of 2 replicas wait for Kueue admission" in scale.message
    assert [(d.action, d.workload.name) for d in decisions[1:] if isinstance(d, TrainingDecision)] == [
        (TrainingAction.DEACTIVATE, "job-finetune-gemma-l4-3316f")
    ]


# --- acting ahead of a forecast need (Recommendation.ahead) --------------------------------------------------


SOON = Ahead(replicas=2, within_s=240)
AHEAD = spec_with(actAhead=True)
AHEAD_ASK = spec_with(actAhead=True, checkpointRequestSeconds=60)


def test_act_ahead_stops_a_victim_that_just_checkpointed_and_starts_the_replica_now() -> None:
    # 6 GPUs: 1 replica (2) + two 2-GPU jobs. Serving needs 1 now and forecasts 2 within 240 s.
    training = (ckpt("stale", 400, chips=2), ckpt("fresh", 10, chips=2))
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, training), desired=1, ahead=SOON)
    assert (result.desired, actions(result)) == (2, [("deactivate", "fresh")])
    assert "ahead of need" in result.training[0].message
    assert "forecasts 2 replicas within 240s" in result.message
    # Opt-in: without capacity.actAhead nothing is stopped ahead of need.
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=1, ahead=SOON)
    assert (result.desired, result.training) == (1, ())


def test_act_ahead_waits_for_a_checkpoint_rather_than_stop_work_early() -> None:
    # Nobody has just saved (fresh = 2 evaluation periods, 30 s here): stop nothing ahead, serving stays.
    training = (ckpt("a", 100, chips=2), ckpt("b", 400, chips=2))
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, training), desired=1, ahead=SOON)
    assert (result.desired, result.training) == (1, ())
    # Without a forecast, a just-saved job is not touched either.
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, (ckpt("fresh", 10, chips=2),)), desired=1)
    assert (result.desired, result.training) == (1, ())


def test_act_ahead_with_requests_asks_the_cheapest_victim_to_save_while_serving_does_not_wait_yet() -> None:
    now = 10_000.0
    training = (ckpt("a", 100, chips=2), ckpt("b", 400, chips=2))
    result = arbitration.plan(spec=AHEAD_ASK, observation=observe(1, 6, training), desired=1, ahead=SOON, now=now)
    assert (result.desired, actions(result)) == (1, [("request-checkpoint", "a")])
    # Once it has saved, it is stopped and the replica starts, still ahead of need.
    saved = (ckpt("a", 3, chips=2, checkpoint_requested_at=now - 25), ckpt("b", 425, chips=2))
    result = arbitration.plan(spec=AHEAD_ASK, observation=observe(1, 6, saved), desired=1, ahead=SOON, now=now + 25)
    assert (result.desired, actions(result)) == (2, [("deactivate", "a")])


def test_act_ahead_respects_anti_thrash() -> None:
    now = 10_000.0
    capped = ckpt("fresh", 10, chips=2, preempted_at=(now - 3000, now - 100))
    training = (capped, ckpt("other", 400, chips=2))
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, training), desired=1, ahead=SOON, now=now)
    assert (result.desired, result.training) == (1, ())
    resumed = (ckpt("fresh", 10, chips=2, resumed_at=now - 60), ckpt("other", 400, chips=2))
    result = arbitration.plan(spec=spec_with(minRunSeconds=600, actAhead=True), observation=observe(1, 6, resumed),
                              desired=1, ahead=SOON, now=now)
    assert (result.desired, result.training) == (1, ())


def test_act_ahead_while_an_earlier_hand_off_is_still_in_flight() -> None:
    # 6 GPUs: 2 replicas, the second gated and waiting for "leaving" (stopped, in its grace period); "fresh" has
    # just saved. The forecast wants a third replica: it is started now on "fresh"'s chips, not once "leaving"
    # is gone (by then "fresh" would be stopped wherever its interval stands).
    training = (wl("leaving", chips=2, active=False, admitted=True, ours=True), ckpt("fresh", 5, chips=2))
    obs = observe_inflight(2, 6, training, gated=1)
    result = arbitration.plan(spec=AHEAD, observation=obs, desired=2, ahead=Ahead(replicas=3, within_s=240))
    assert (result.desired, actions(result)) == (3, [("deactivate", "fresh")])
    # Not when the gated replica still needs a victim (transition 2 decides), nor without a forecast.
    short = (ckpt("stale", 300, chips=2), ckpt("fresh", 5, chips=2))
    result = arbitration.plan(spec=AHEAD, observation=observe_inflight(2, 6, short, gated=1), desired=2,
                              ahead=Ahead(replicas=3, within_s=240))
    assert (result.desired, actions(result)) == (2, [("deactivate", "fresh")])
    assert arbitration.plan(spec=AHEAD, observation=obs, desired=2).training == ()
    assert arbitration.plan(spec=SPEC, observation=obs, desired=2, ahead=Ahead(replicas=3, within_s=240)).training == ()


def test_act_ahead_does_nothing_when_the_forecast_fits() -> None:
    training = (ckpt("fresh", 10, chips=2),)
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 4, training), desired=1, ahead=SOON)
    assert (result.desired, result.training) == (1, ())


def test_no_reactivation_of_what_the_forecast_needs_back() -> None:
    # Serving scales 2 → 1, which frees the 2 GPUs the stopped job needs; but the policy forecasts 2 replicas
    # within the lead: the job stays down (hysteresis). Without the forecast it is resumed.
    stopped = (wl("job", chips=2, active=False, admitted=False, ours=True),)
    result = arbitration.plan(spec=SPEC, observation=observe(2, 6, stopped), desired=1, ahead=SOON)
    assert result.training == ()
    result = arbitration.plan(spec=SPEC, observation=observe(2, 6, stopped), desired=1,
                              ahead=Ahead(replicas=1, within_s=240))
    assert actions(result) == [("reactivate", "job")]
    result = arbitration.plan(spec=SPEC, observation=observe(2, 6, stopped), desired=1)
    assert actions(result) == [("reactivate", "job")]


# --- the victim's grace period and checkpoint schedule (issue 11, items 4 and 5) -------------------------------


def test_a_trainer_that_saves_within_its_grace_period_loses_nothing_and_goes_first() -> None:
    # "saver" has not checkpointed for 500 s but saves on SIGTERM in 20 s of its 60 s grace period: stopping it
    # loses nothing, so it goes before a job that saved 30 s ago.
    saver = ckpt("saver", 500, saves_on_termination=True, save_s=20, grace_s=60)
    training = (saver, ckpt("fresh", 30))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2)
    assert actions(result) == [("deactivate", "saver")]
    assert arbitration.work_at_risk(saver) == 0.0
    assert arbitration.eviction_s(saver) == 20
    # A grace period shorter than its save: SIGKILL cuts the save, it loses its 500 s like any other.
    short = ckpt("saver", 500, saves_on_termination=True, save_s=20, grace_s=10)
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, (short, ckpt("fresh", 30))), desired=2)
    assert actions(result) == [("deactivate", "fresh")]
    assert (arbitration.work_at_risk(short), arbitration.eviction_s(short)) == (2000.0, 10)


@pytest.mark.parametrize("many", [pytest.param(False, id="every-subset"), pytest.param(True, id="greedy")])
def test_among_victims_that_lose_nothing_the_one_that_saved_last_goes_first(many: bool) -> None:
    # Three savers lose nothing and leave as quickly (20 s saves): should a save fail (slower than declared,
    # cut by SIGKILL), the one that checkpointed 40 s ago loses the least, so it is stopped, not the first
    # by name. The same order above EXHAUSTIVE_MAX candidates (the greedy pass).
    def saver(name: str, since: float) -> TrainingWorkload:
        return ckpt(name, since, chips=2, saves_on_termination=True, save_s=20, grace_s=60)

    training: tuple[TrainingWorkload, ...] = (saver("a-due", 590), saver("b-just-saved", 40), saver("c-mid", 300))
    if many:
        training += tuple(saver(f"d-{i:02}", 400 + i) for i in range(arbitration.EXHAUSTIVE_MAX))
    full = 2 + 2 * len(training)  # one replica (2 GPUs) and every job: the quota is all taken
    result = arbitration.plan(spec=SPEC, observation=observe(1, full, training, nominal=full), desired=2)
    assert actions(result) == [("deactivate", "b-just-saved")]


def test_a_trainer_that_saves_within_its_grace_period_is_never_asked_first() -> None:
    # Asking it would only delay serving: it saves on SIGTERM anyway.
    saver = ckpt("saver", 500, saves_on_termination=True, save_s=20, grace_s=60)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (saver,)), desired=2, now=1e4)
    assert (result.desired, actions(result)) == (2, [("deactivate", "saver")])


def test_equal_losses_stop_the_victim_that_leaves_soonest() -> None:
    # Both lose 30 s × 4 chips; serving waits for the slower's eviction: 30 s grace beats 600 s.
    training = (ckpt("a-slow", 30, grace_s=600), ckpt("b-quick", 30, grace_s=30))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2)
    assert actions(result) == [("deactivate", "b-quick")]


def test_with_requests_a_save_that_fits_the_grace_period_is_asked_as_the_victim_stops() -> None:
    # Requests on, the victim's declared 30 s save fits in its 60 s grace period: ask and stop in one pass (the
    # save runs while its chips are held anyway); serving does not wait.
    fits = ckpt("stale", 500, save_s=30, grace_s=60)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (fits,)), desired=2, now=1e4)
    assert (result.desired, sorted(actions(result))) == (2, [("deactivate", "stale"), ("request-checkpoint", "stale")])
    assert not result.waiting_for_checkpoint
    assert "fits in its 60s grace period" in " ".join(d.message for d in result.training)
    # Applied request first, then the stop.
    assert [d.action for d in arbitration.in_apply_order(list(result.training))
            if isinstance(d, TrainingDecision)] == [TrainingAction.REQUEST_CHECKPOINT, TrainingAction.DEACTIVATE]
    # A save longer than the grace period: asked, and serving waits for it (the old rule).
    long = ckpt("stale", 500, save_s=90, grace_s=60)
    result = arbitration.plan(spec=ASK, observation=observe(1, 6, (long,)), desired=2, now=1e4)
    assert (result.desired, actions(result), result.waiting_for_checkpoint) == (
        1, [("request-checkpoint", "stale")], True)


WAIT = spec_with(checkpointWaitSeconds=60)


def test_a_checkpoint_due_soon_is_waited_for_when_it_saves_more_than_serving_waits() -> None:
    # Interval 600 s: "due" saved 590 s ago, its next save is due in 10 s (2,360 chip-s at risk against 10 s × 4
    # chips serving waits); "mid" saved 200 s ago (800 chip-s, due in 400 s). Without the schedule "mid" is
    # stopped; with it "due" is waited for and then stopped right after its save.
    training = (ckpt("due", 590, checkpoint_interval_s=600), ckpt("mid", 200, checkpoint_interval_s=600))
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=2, now=1e4)
    assert actions(result) == [("deactivate", "mid")]
    result = arbitration.plan(spec=WAIT, observation=observe(1, 6, training), desired=2, now=1e4)
    assert (result.desired, result.training, result.waiting_for_checkpoint) == (1, (), True)
    assert "waiting for llm/due to checkpoint" in result.message
    # 12 s later it has saved: stopped now, serving scales.
    saved = (ckpt("due", 2, checkpoint_interval_s=600), ckpt("mid", 212, checkpoint_interval_s=600))
    result = arbitration.plan(spec=WAIT, observation=observe(1, 6, saved), desired=2, now=1e4 + 12)
    assert (result.desired, actions(result)) == (2, [("deactivate", "due")])


def test_a_checkpoint_due_soon_is_not_waited_for_when_little_is_at_risk_or_it_is_due_too_late() -> None:
    # 2 chips at risk for 20 s (40 chip-s) against its save due in 25 s × the 2 chips serving lacks: stop now.
    small = ckpt("small", 20, chips=2, checkpoint_interval_s=45)
    assert WAIT.capacity is not None
    assert arbitration.worth_waiting(WAIT.capacity, small, 2) is None
    assert arbitration.worth_waiting(WAIT.capacity, small, 1) == 25  # 25 chip-s of serving: worth it
    result = arbitration.plan(spec=WAIT, observation=observe(1, 6, (small,)), desired=2, now=1e4)
    assert (result.desired, actions(result)) == (2, [("deactivate", "small")])
    # Due in 100 s, beyond the 60 s bound: stop now.
    late = ckpt("late", 500, checkpoint_interval_s=600)
    result = arbitration.plan(spec=WAIT, observation=observe(1, 6, (late,)), desired=2, now=1e4)
    assert (result.desired, actions(result)) == (2, [("deactivate", "late")])
    # Overdue (it does not keep its schedule): stop now.
    overdue = ckpt("overdue", 700, checkpoint_interval_s=600)
    assert arbitration.next_checkpoint_s(overdue) is None


def test_the_checkpoint_interval_is_learned_from_successive_checkpoint_times() -> None:
    learn = arbitration.learn_interval
    m = learn(None, None)
    assert m is None
    m = learn(None, 1000.0)
    assert m == arbitration.CheckpointMemory(last=1000.0, interval_s=None)
    assert learn(m, 1000.0) == m  # the same annotation read again: nothing new
    m = learn(m, 1620.0)
    assert m == arbitration.CheckpointMemory(last=1620.0, interval_s=620.0)
    m = learn(m, 2260.0)  # 640 s: within the drift band, the interval is kept
    assert m == arbitration.CheckpointMemory(last=2260.0, interval_s=620.0)
    m = learn(m, 2360.0)  # 100 s (a requested save): far off, the latest gap replaces it
    assert m == arbitration.CheckpointMemory(last=2360.0, interval_s=100.0)
    assert learn(m, 2000.0) == m  # an older value (a restored job's annotation read late): ignored


def test_act_ahead_never_stops_early_a_trainer_that_saves_within_its_grace_period() -> None:
    # Just checkpointed, but it saves on SIGTERM within its grace period: it loses nothing when the need is due
    # either, so stopping it ahead would only cost training. The one that does not save is stopped ahead.
    saver = ckpt("saver", 10, chips=2, saves_on_termination=True, save_s=20, grace_s=60)
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, (saver, ckpt("other", 400, chips=2))),
                              desired=1, ahead=SOON)
    assert (result.desired, result.training) == (1, ())
    plain = ckpt("plain", 10, chips=2, grace_s=60)
    result = arbitration.plan(spec=AHEAD, observation=observe(1, 6, (plain, ckpt("other", 400, chips=2))),
                              desired=1, ahead=SOON)
    assert (result.desired, actions(result)) == (2, [("deactivate", "plain")])


def _deferring_policy(**capacity: Any) -> Any:
    doc = policy_doc()
    doc["spec"]["capacity"].update(capacity)
    return compile_policy(ScalingPolicy.model_validate(doc))


def test_a_scale_up_deferred_for_a_checkpoint_completes_while_the_policy_holds_its_count() -> None:
    # The queue policy wants 2 (queue 15 over 10 per replica) and the victim is asked to save; by the time it
    # has saved the burst is gone (queue 9: the policy holds its 1 replica); the scale-up it asked for still
    # completes (HandoffAfterCheckpoint), as it would have had the replica started at once and kept it.
    cp = _deferring_policy(checkpointRequestSeconds=60)
    now = 10_000.0
    stale = ckpt("job-finetune-gemma-l4-3316f", 500)
    obs = observe(1, 6, (stale,))
    burst = Observation(obs.target, obs.replicas, {"queue": SignalReading(15.0, now)}, obs.training, obs.quota)
    decisions, state = cp.decide(burst, PolicyState(), now)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert scale.desired == 1
    assert state.deferred is not None
    assert state.deferred.replicas == 2
    # 15 s later, still saving, the burst gone: the deferred scale-up still waits, and says so.
    saving = ckpt("job-finetune-gemma-l4-3316f", 515, checkpoint_requested_at=now)
    calm = Observation(obs.target, obs.replicas, {"queue": SignalReading(9.0, now + 15)}, (saving,), obs.quota)
    decisions, state = cp.decide(calm, state, now + 15)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert (scale.desired, scale.reason, decisions[1:]) == (1, Reason.WAITING_FOR_CAPACITY, [])
    assert "the scale-up to 2 deferred 15s ago still waits" in scale.message
    assert state.deferred == DeferredScale(2, now)
    saved = ckpt("job-finetune-gemma-l4-3316f", 2, checkpoint_requested_at=now)
    calm = Observation(obs.target, obs.replicas, {"queue": SignalReading(9.0, now + 30)}, (saved,), obs.quota)
    decisions, state = cp.decide(calm, state, now + 30)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert (scale.desired, scale.reason) == (2, Reason.HANDOFF_AFTER_CHECKPOINT)
    assert [(d.action, d.workload.name) for d in decisions[1:] if isinstance(d, TrainingDecision)] == [
        (TrainingAction.DEACTIVATE, "job-finetune-gemma-l4-3316f")]
    assert state.deferred is None
    # Past the wait's bound (60 s + one evaluation period), the deferred scale-up is dropped.
    _, state = cp.decide(burst, PolicyState(), now)
    late = Observation(obs.target, obs.replicas, {"queue": SignalReading(9.0, now + 90)}, (saved,), obs.quota)
    decisions, state = cp.decide(late, state, now + 90)
    assert isinstance(decisions[0], ScaleDecision)
    assert decisions[0].desired == 1
    assert state.deferred is None


# --- the hand-off's lead: the victims' eviction time (Context.eviction_s) -----------------------------------


def test_the_policy_sees_the_longest_eviction_among_the_victims_it_may_stop() -> None:
    # A policy's forecast for the hand-off reaches a victim's eviction plus its cold start: the engine hands
    # the policy the longest eviction among the running Workloads it may stop (a saver's save, else its grace
    # period); one at its preemption cap, or stopped, does not count; none read: None.
    seen: list[float | None] = []

    class Recorder:
        uses_behavior = False

        def recommend(self, ctx: Any, state: object | None) -> tuple[Any, object | None]:
            seen.append(ctx.eviction_s)
            return Recommendation(1, Reason.STEADY, "steady"), state

    cp = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    object.__setattr__(cp, "algorithm", Recorder())
    now = 10_000.0
    training = (
        ckpt("saver", 100, chips=1, saves_on_termination=True, save_s=20, grace_s=600),  # leaves after its save
        ckpt("slow", 100, chips=1, grace_s=300),
        # Stopped twice in the last hour (maxPreemptionsPerHour 2): not a victim now.
        ckpt("capped", 100, chips=1, grace_s=900, preempted_at=(now - 900, now - 600)),
        wl("stopped", chips=1, active=False),
    )
    for ws, expected in ((training, 300.0), (training[:1], 20.0), ((ckpt("unread", 100),), None)):
        obs = Observation(target=TARGET, replicas=ReplicaStatus(spec=1, ready=1), training=ws,
                          quota=QuotaStatus("cluster-queue", GPU, nominal=6, reserved=6))
        cp.decide(obs, PolicyState(), now)
        assert seen[-1] == expected
    # Without capacity the policy is told nothing about training.
    doc = policy_doc()
    del doc["spec"]["capacity"], doc["spec"]["preemptible"]
    bare = compile_policy(ScalingPolicy.model_validate(doc))
    object.__setattr__(bare, "algorithm", Recorder())
    bare.decide(Observation(target=TARGET, replicas=ReplicaStatus(spec=1, ready=1), training=training), PolicyState(),
                now)
    assert seen[-1] is None


# --- yielding at a checkpoint (transition 5: capacity.yieldAtCheckpoint) -----------------------------------------


def demand(now: float, *changes: int, observed: float = 700.0, count: int = 1) -> DemandHistory:
    """A wanted count observed for ``observed`` seconds that moved by ``changes`` (spread over that time)."""
    step = observed / (len(changes) + 1)
    return DemandHistory(since=now - observed, count=count,
                         jumps=tuple(DemandJump(now - observed + (i + 1) * step, c) for i, c in enumerate(changes)))


def neither(name: str, since: float | None, **kw: Any) -> TrainingWorkload:
    """A trainer that neither saves on SIGTERM nor honours requests: 60 s grace period, 630 s between saves."""
    kw.setdefault("honours_requests", False)
    return ckpt(name, since, chips=2, grace_s=60.0, save_s=30.0, checkpoint_interval_s=630.0, **kw)


def test_the_wanted_count_is_remembered_by_its_changes_within_the_lookback() -> None:
    h = arbitration.observe_demand(None, 2, 100.0)
    assert (h.since, h.count, h.jumps) == (100.0, 2, ())
    assert arbitration.observe_demand(h, 2, 115.0) is h  # nothing moved: the same record, no copy
    h = arbitration.observe_demand(arbitration.observe_demand(h, 4, 130.0), 3, 145.0)
    assert h.jumps == (DemandJump(130.0, 2), DemandJump(145.0, -1))
    assert h.count == 3
    later = arbitration.observe_demand(h, 3, 130.0 + arbitration.DEMAND_LOOKBACK_S)
    assert later.jumps == (DemandJump(145.0, -1),)  # an hour old: dropped
    # Variance rate: (2² + 1²) over 100 s observed; a longer horizon than observed counts the rest as calm.
    assert arbitration.demand_variance(h, 200.0, 100.0) == pytest.approx(5 / 100)
    assert arbitration.demand_variance(h, 200.0, 400.0) == pytest.approx(5 / 400)
    assert arbitration.demand_variance(h, 100.0, 400.0) is None  # nothing observed yet


def test_the_chance_of_a_rise_follows_the_reflection_principle() -> None:
    assert arbitration.reach_chance(0, 600, 0.0) == 1.0
    assert arbitration.reach_chance(1, 600, 0.0) == 0.0
    # A rise of one standard deviation of the end point is reached with chance 2 (1 − Φ(1)) = 0.3173.
    assert arbitration.reach_chance(3.0, 900.0, 9.0 / 900.0) == pytest.approx(0.3173, abs=1e-4)
    assert arbitration.reach_chance(2, 600, 0.01) < arbitration.reach_chance(1, 600, 0.01)
    assert arbitration.reach_chance(1, 300, 0.01) < arbitration.reach_chance(1, 600, 0.01)


def test_a_trainer_that_would_lose_work_yields_right_after_its_checkpoint_when_serving_will_likely_need_it() -> None:
    now = 10_000.0
    training = (neither("fresh", 5.0), neither("mid", 300.0))
    wild = demand(now, 10, -10, 10, -10, 10, -10, 10, -10)  # 800 replicas² in 700 s
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=1, now=now, demand=wild)
    # Serving keeps its count (nothing is started on a chance); the job that just saved stops now, losing 5 s.
    assert (result.desired, actions(result)) == (1, [("deactivate", "fresh")])
    assert "yielding llm/fresh at its checkpoint" in result.training[0].message
    assert "(yieldAtCheckpoint balance)" in result.training[0].message
    # A calm count: balance keeps it running (a 60 s grace period does not pay for 625 s of idle chips) ...
    calm = demand(now, 1, -1, 1, -1)
    result = arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=1, now=now, demand=calm)
    assert result.training == ()
    # ... the 95 % upper band yields it (chance ≈ 0.6 ≥ 5 %); off never does.
    band = spec_with(yieldAtCheckpoint="band")
    result = arbitration.plan(spec=band, observation=observe(1, 6, training), desired=1, now=now, demand=calm)
    assert actions(result) == [("deactivate", "fresh")]
    off = spec_with(yieldAtCheckpoint="off")
    result = arbitration.plan(spec=off, observation=observe(1, 6, training), desired=1, now=now, demand=wild)
    assert result.training == ()
    # Observed for less than its next checkpoint is away: the rest counts as calm. One change of 1 in 60 s is
    # a chance of 32 % over 625 s with the rest taken as calm (band yields), not 76 % as if extrapolated.
    young = demand(now, 1, observed=60.0)
    assert arbitration.reach_chance(1, 625, arbitration.demand_variance(young, now, 625) or 0) < 0.35
    assert arbitration.plan(spec=SPEC, observation=observe(1, 6, training), desired=1, now=now,
                            demand=young).training == ()
    assert actions(arbitration.plan(spec=band, observation=observe(1, 6, training), desired=1, now=now,
                                    demand=young)) == [("deactivate", "fresh")]


@pytest.mark.parametrize("victim", [
    pytest.param(neither("saver", 5.0, saves_on_termination=True), id="saves-on-SIGTERM"),
    pytest.param(neither("asked", 5.0, honours_requests=True), id="asked-as-it-stops"),
    pytest.param(neither("stale", 100.0), id="not-just-saved"),
    pytest.param(neither("capped", 5.0, preempted_at=(9_000.0, 9_500.0)), id="at-its-preemption-cap"),
    pytest.param(neither("restoring", 0.0, resumed_at=9_900.0), id="resumed-and-not-saved-since"),
])
def test_only_a_just_saved_eligible_trainer_that_would_lose_work_yields(victim: TrainingWorkload) -> None:
    now = 10_000.0
    band = spec_with(yieldAtCheckpoint="band", checkpointRequestSeconds=60)
    wild = demand(now, 10, -10, 10, -10, 10, -10, 10, -10)
    result = arbitration.plan(spec=band, observation=observe(1, 6, (victim,)), desired=1, now=now, demand=wild)
    assert result.training == ()


def test_a_yielded_trainer_is_not_resumed_into_chips_serving_will_likely_take_before_its_first_checkpoint() -> None:
    now = 10_000.0
    stopped = dataclasses.replace(neither("yielded", None), active=False, admitted=False, deactivated_by_us=True)
    # 1 replica (2 GPUs) of 6: 4 free, the job needs 2, leaving room for one more replica.
    obs = observe(1, 2, (stopped,))
    wild = demand(now, 10, -10, 10, -10, 10, -10, 10, -10)
    assert arbitration.plan(spec=SPEC, observation=obs, desired=1, now=now, demand=wild).training == ()
    calm = demand(now, 1, -1)
    assert actions(arbitration.plan(spec=SPEC, observation=obs, desired=1, now=now, demand=calm)) == [
        ("reactivate", "yielded")]
    assert actions(arbitration.plan(spec=SPEC, observation=obs, desired=1, now=now)) == [("reactivate", "yielded")]


def test_the_engine_remembers_the_wanted_count_for_policies_with_capacity() -> None:
    cp = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    obs = Observation(
        target=TARGET, replicas=ReplicaStatus(spec=1, ready=1), signals={"queue": SignalReading(15.0, 1000.0)},
        training=(), quota=QuotaStatus("cluster-queue", GPU, nominal=6, reserved=2),
    )
    _, state = cp.decide(obs, PolicyState(), 1000.0)
    assert state.demand == DemandHistory(since=1000.0, count=2)
