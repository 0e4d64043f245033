"""Issue 14: the arbitration on a slice inventory (the TPU7x codelab: two 4x4x4 blocks, 2x2x2 groups).

What serving can get is what still fits as whole slices of its group's shape, not the ClusterQueue's
``999999``; victims are the training Workloads whose stop frees a placeable region, chosen by the hand-off's
own order (least work lost since the last checkpoint); a super-slice is one unit over two blocks.
"""

from __future__ import annotations

import itertools
from typing import Any

from autoscaler.core import arbitration
from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    QuotaStatus,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SliceCapacity,
    TargetKind,
    TargetRef,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.core.topology import Inventory, Occupant, Region, Shape
from tests.core import test_disaggregated as td

TPU = "google.com/tpu"
NS = "llm-d-pd-disaggregation"
TARGET = TargetRef(TargetKind.LEADER_WORKER_SET, "kueue-vllm-decode-model-streamer", NS)
SUB, BLOCK = Shape(2, 2, 2), Shape(4, 4, 4)
#: The eight 2x2x2 places of a 4x4x4 block, in placement order.
CELLS: list[tuple[int, int, int]] = [(x, y, z) for x, y, z in itertools.product((0, 2), repeat=3)]


def policy_doc() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "qwen-decode"},
        "spec": {
            "target": {"kind": "LeaderWorkerSet", "name": TARGET.name, "namespace": NS},
            "minReplicas": 1, "maxReplicas": 16,
            "signals": [{"name": "waiting", "preset": "vllm.waiting"}],
            "policy": {"type": "queue", "work": ["waiting"], "capacityPerReplica": 8},
            "capacity": {"clusterQueue": "cq", "resource": TPU, "perReplica": 8, "minRunSeconds": 0},
            "preemptible": [{"namespace": NS, "selector": {"matchLabels": {"kueue.x-k8s.io/queue-name": "lq"}}}],
        },
    }


SPEC: Spec = ScalingPolicy.model_validate(policy_doc()).spec


def sub(block: str, *indexes: int) -> tuple[Region, ...]:
    return tuple(Region(block, CELLS[i], SUB) for i in indexes)


def train(name: str, slices: int, since_s: float | None, **kw: Any) -> TrainingWorkload:
    return TrainingWorkload(NS, name, kw.pop("priority", 1000), slices * 8, kw.pop("active", True),
                            kw.pop("admitted", True), uid=f"uid-{name}", since_checkpoint_s=since_s,
                            slices=(SUB,) * slices, **kw)


def world(*occupants: Occupant) -> Inventory:
    return Inventory(BLOCK, ("cube-a", "cube-b"), occupants)


#: Block a: the codelab's sub-slicing JobSet (6 slices) + one decode and one prefill group: full.
#: Block b: two more training JobSets of 4 slices each: full.
FULL = world(
    Occupant(f"{NS}/sub", sub("cube-a", 0, 1, 2, 3, 4, 5)),
    Occupant(f"{NS}/decode-0", sub("cube-a", 6)),
    Occupant(f"{NS}/prefill-0", sub("cube-a", 7)),
    Occupant(f"{NS}/b-stale", sub("cube-b", 0, 1, 2, 3)),
    Occupant(f"{NS}/b-fresh", sub("cube-b", 4, 5, 6, 7)),
)


def observe(inventory: Inventory, training: tuple[TrainingWorkload, ...], *, current: int = 1, gated: int = 0,
            pending: float = 0.0) -> Observation:
    slices = SliceCapacity("slice-rf", inventory, "nodes labelled for Topology slice-topology")
    used = float(inventory.used_chips)
    return Observation(
        target=TARGET,
        replicas=ReplicaStatus(spec=current, ready=current - gated, gated=gated, slice=SUB),
        training=training,
        quota=QuotaStatus("cq", TPU, nominal=999999, reserved=used, pending=pending, slices=slices),
    )


TRAINING = (train("sub", 6, 300.0), train("b-stale", 4, 600.0), train("b-fresh", 4, 30.0))


def stops(result: arbitration.Plan) -> list[str]:
    return [d.workload.name for d in result.training if d.action is TrainingAction.DEACTIVATE]


def test_the_quota_number_is_not_capacity_the_free_slices_are() -> None:
    # 999999 nominal, 128 used: the chip rule would see 999,871 free. On the blocks nothing is free: one more
    # decode group needs a victim, the one losing least (b-fresh: 32 chips × 30 s; sub: 48 × 300; b-stale 32 × 600).
    result = arbitration.plan(spec=SPEC, observation=observe(FULL, TRAINING), desired=2)
    assert result.desired == 2
    assert stops(result) == ["b-fresh"]
    message = result.training[0].message
    assert "on block cube-b" in message
    assert "a 2x2x2 slice fits at cube-b@" in message
    assert "0 2x2x2 slice(s) free in flavor slice-rf (2 4x4x4 blocks, 128 of 128 chips held" in message


def test_free_slices_are_used_before_any_victim() -> None:
    inv = FULL.without([f"{NS}/b-fresh"])  # 4 slices free in cube-b
    result = arbitration.plan(spec=SPEC, observation=observe(inv, TRAINING[:2]), desired=5)
    assert (result.desired, stops(result)) == (5, [])
    # A fifth group needs a victim: exactly one more Workload, the cheapest whose stop frees a region.
    result = arbitration.plan(spec=SPEC, observation=observe(inv, TRAINING[:2]), desired=6)
    assert (result.desired, stops(result)) == (6, ["sub"])


def test_nothing_stoppable_means_waiting_not_999871_free() -> None:
    protected = (train("sub", 6, 300.0, resumed_at=990.0), train("b-stale", 4, 600.0, resumed_at=990.0),
                 train("b-fresh", 4, 30.0, resumed_at=990.0))
    spec = ScalingPolicy.model_validate(
        {**policy_doc(), "spec": {**policy_doc()["spec"], "capacity": {
            "clusterQueue": "cq", "resource": TPU, "perReplica": 8, "minRunSeconds": 600}}}).spec
    result = arbitration.plan(spec=spec, observation=observe(FULL, protected), desired=3, now=1000.0)
    assert (result.desired, result.training) == (1, ())
    assert "limited by topology: only 1 groups fit as whole 2x2x2 slices" in result.message
    assert "not stopping llm-d-pd-disaggregation/b-fresh resumed 10s ago" in result.message


def test_a_super_slice_is_one_unit_that_frees_both_blocks() -> None:
    whole = (Region("cube-a", (0, 0, 0), BLOCK), Region("cube-b", (0, 0, 0), BLOCK))
    inv = world(Occupant(f"{NS}/super", whole))
    sup = TrainingWorkload(NS, "super", 0, 128, True, True, uid="uid-super", since_checkpoint_s=60.0,
                           slices=(Shape(4, 4, 8),))
    result = arbitration.plan(spec=SPEC, observation=observe(inv, (sup,), current=0), desired=3)
    assert (result.desired, stops(result)) == (3, ["super"])
    assert "on blocks cube-a, cube-b (one unit)" in result.training[0].message


def test_two_pools_never_claim_the_same_victim() -> None:
    # Decode stopped b-fresh (not evicted yet: freeing 4 slices) and asked for 1 group (8 chips, pending).
    # Prefill, on the same ClusterQueue, wants 4 more: 3 fit in what b-fresh frees; the 4th needs another
    # victim, never b-fresh again.
    stopped = (train("sub", 6, 300.0), train("b-stale", 4, 600.0),
               train("b-fresh", 4, 30.0, active=False, deactivated_by_us=True))
    obs = observe(FULL, stopped, pending=8.0)
    result = arbitration.plan(spec=SPEC, observation=obs, desired=4)
    assert result.desired == 4
    assert stops(result) == []
    result = arbitration.plan(spec=SPEC, observation=obs, desired=5)
    assert (result.desired, stops(result)) == (5, ["sub"])


def test_groups_waiting_for_admission_get_slices() -> None:
    # Decode asked for a second group that Kueue cannot place (the blocks are full): it waits for admission,
    # and a victim is chosen for it; the count is held, not raised.
    result = arbitration.plan(spec=SPEC, observation=observe(FULL, TRAINING, current=2, gated=1), desired=2)
    assert (result.desired, stops(result)) == (2, ["b-fresh"])
    assert "admit its 1 group(s) waiting for admission" in result.training[0].message


def test_training_resumes_only_when_its_slices_fit() -> None:
    held = train("b-fresh", 4, 30.0, active=False, admitted=False, deactivated_by_us=True)
    crowded = FULL.without([f"{NS}/b-fresh"]).with_occupant(Occupant(f"{NS}/decode-1", sub("cube-b", 4)))
    result = arbitration.plan(spec=SPEC, observation=observe(crowded, (*TRAINING[:2], held), current=2), desired=2)
    assert result.training == ()  # 3 slices free, it needs 4
    free = FULL.without([f"{NS}/b-fresh"])
    result = arbitration.plan(spec=SPEC, observation=observe(free, (*TRAINING[:2], held), current=1), desired=1)
    assert [(d.action, d.workload.name) for d in result.training] == [(TrainingAction.REACTIVATE, "b-fresh")]


def test_the_engine_reports_waiting_for_capacity_with_the_blocks() -> None:
    cp = compile_policy(ScalingPolicy.model_validate(policy_doc()))
    held = tuple(train(w.name, len(w.slices), w.since_checkpoint_s, resumed_at=999.0) for w in TRAINING)
    spec_doc = policy_doc()
    spec_doc["spec"]["capacity"]["minRunSeconds"] = 600
    cp = compile_policy(ScalingPolicy.model_validate(spec_doc))
    obs = observe(FULL, held)
    obs = Observation(obs.target, obs.replicas, {"waiting": SignalReading(30.0, 1000.0)}, obs.training, obs.quota)
    decisions, _ = cp.decide(obs, PolicyState(), 1000.0)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert (scale.desired, scale.reason) == (1, Reason.WAITING_FOR_CAPACITY)
    assert "0 2x2x2 slice(s) free in flavor slice-rf" in scale.message


# ------------------------------------------------------------------ one policy, two pools (type disaggregated)

PREFILL = TargetRef(TargetKind.LEADER_WORKER_SET, "prefill", NS)
HALF = Shape(2, 4, 4)
#: Checkpoint ages of eight single-slice fine-tunes filling cube-b, by 2x2x2 place: the four freshest (places
#: 4, 5, 6, 0) are not one half-block, so the cheapest 32 chips by count free no 2x4x4 region; the cheapest
#: half-block is places 4-7 (5+110+120+500 s), not the first in placement order (0-3); the freshest of all
#: (place 4, 5 s) is inside it, so decode, placed after prefill, must not take it too.
B_AGES = (130.0, 600.0, 700.0, 800.0, 5.0, 110.0, 120.0, 500.0)


def two_pool_world() -> tuple[Inventory, tuple[TrainingWorkload, ...], dict[str, str]]:
    """cube-a: prefill's 2x4x4 group (places 0-3), decode's 2x2x2 group (place 4) and three fresh fine-tunes
    (places 5-7, 10/20/30 s): every half of cube-a holds serving. cube-b: eight fine-tunes (``B_AGES``)."""
    occupants = [
        Occupant(f"{NS}/prefill-0", (Region("cube-a", (0, 0, 0), HALF),)),
        Occupant(f"{NS}/decode-0", sub("cube-a", 4)),
        *(Occupant(f"{NS}/a{i}", sub("cube-a", i)) for i in (5, 6, 7)),
        *(Occupant(f"{NS}/b{i}", sub("cube-b", i)) for i in range(8)),
    ]
    training = (
        *(train(f"a{i}", 1, 10.0 * (i - 4)) for i in (5, 6, 7)),
        *(train(f"b{i}", 1, age) for i, age in enumerate(B_AGES)),
    )
    owners = {f"{NS}/prefill-0": PREFILL.key, f"{NS}/decode-0": TARGET.key}
    return world(*occupants), training, owners


def two_pool_quota(inventory: Inventory, owners: dict[str, str]) -> QuotaStatus:
    slices = SliceCapacity("slice-rf", inventory, "nodes labelled for Topology slice-topology", owners=owners)
    return QuotaStatus("cq", TPU, nominal=999999, reserved=float(inventory.used_chips), slices=slices)


def asks(prefill: int, decode: int) -> list[arbitration.GroupAsk]:
    return [
        arbitration.GroupAsk(PREFILL.key, HALF, 1, prefill, chips=32.0, label="prefill"),
        arbitration.GroupAsk(TARGET.key, SUB, 1, decode, chips=8.0, label="decode"),
    ]


def sliced_stops(result: arbitration.SlicedPlan) -> list[str]:
    return sorted(d.workload.name for d in result.training if d.action is TrainingAction.DEACTIVATE)


def test_joint_victims_free_a_region_of_each_pools_shape_at_the_least_lost_work() -> None:
    inv, training, owners = two_pool_world()
    assert SPEC.capacity is not None
    result = arbitration.plan_slices(capacity=SPEC.capacity, quota=two_pool_quota(inv, owners),
                                     training=training, asks=asks(2, 4))
    # Prefill's 2x4x4 can only go to cube-b (serving holds a place in every half of cube-a): the cheapest
    # half there is places 4-7, not the four freshest (4, 5, 6, 0), which would free no 2x4x4 region. Decode's
    # three 2x2x2 take the cheapest single places left: cube-a's fine-tunes (10, 20, 30 s), not b4 (5 s), whose
    # place prefill's new group takes.
    assert sliced_stops(result) == ["a5", "a6", "a7", "b4", "b5", "b6", "b7"]
    assert result.desired == {PREFILL.key: 2, TARGET.key: 4}
    by_name = {d.workload.name: d.message for d in result.training}
    assert "so prefill can grow 1→2 groups: a 2x4x4 slice fits at cube-b@2,0,0:2x4x4 once it stops" in by_name["b7"]
    assert "so decode can grow 1→4 groups: a 2x2x2 slice fits at cube-a@2,0,2:2x2x2" in by_name["a5"]
    # Each victim once, and what they free is exactly what was asked: 32 + 3 × 8 chips.
    assert sum(d.workload.chips for d in result.training) == 32 + 24


def test_joint_groups_that_fit_free_stop_nothing_and_the_larger_shape_is_placed_first() -> None:
    inv, training, owners = two_pool_world()
    # cube-b's places 0-3 and 7 free. A 2x2x2 placed first (place 0, first in order) would leave no free
    # half; placed after the 2x4x4 (places 0-3) it takes place 7: nothing is stopped.
    gone = [f"{NS}/b{i}" for i in (0, 1, 2, 3, 7)]
    left = tuple(w for w in training if f"{NS}/{w.name}" not in gone)
    assert SPEC.capacity is not None
    result = arbitration.plan_slices(capacity=SPEC.capacity, quota=two_pool_quota(inv.without(gone), owners),
                                     training=left, asks=asks(2, 2))
    assert (result.desired, sliced_stops(result)) == ({PREFILL.key: 2, TARGET.key: 2}, [])


def test_joint_super_slice_yields_once_as_one_unit_for_both_pools() -> None:
    whole = (Region("cube-a", (0, 0, 0), BLOCK), Region("cube-b", (0, 0, 0), BLOCK))
    inv = world(Occupant(f"{NS}/super", whole))
    sup = TrainingWorkload(NS, "super", 0, 128, True, True, uid="uid-super", since_checkpoint_s=60.0,
                           slices=(Shape(4, 4, 8),))
    quota = two_pool_quota(inv, {})
    plan_asks = [
        arbitration.GroupAsk(PREFILL.key, HALF, 0, 1, chips=32.0, label="prefill"),
        arbitration.GroupAsk(TARGET.key, SUB, 0, 2, chips=8.0, label="decode"),
    ]
    assert SPEC.capacity is not None
    result = arbitration.plan_slices(capacity=SPEC.capacity, quota=quota, training=(sup,), asks=plan_asks)
    assert result.desired == {PREFILL.key: 1, TARGET.key: 2}
    assert [d.workload.name for d in result.training] == ["super"]  # one deactivation for both pools
    assert "on blocks cube-a, cube-b (one unit)" in result.training[0].message


def test_joint_groups_that_cannot_be_placed_are_held_back_per_pool() -> None:
    inv, training, owners = two_pool_world()
    # Only cube-a's fine-tunes may be stopped (cube-b's were resumed a moment ago): no 2x4x4 region can be
    # freed anywhere, three 2x2x2 can.
    protected = tuple(
        w if w.name.startswith("a") else train(w.name, 1, w.since_checkpoint_s, resumed_at=990.0) for w in training)
    spec_doc = policy_doc()
    spec_doc["spec"]["capacity"]["minRunSeconds"] = 600
    capacity = ScalingPolicy.model_validate(spec_doc).spec.capacity
    assert capacity is not None
    result = arbitration.plan_slices(capacity=capacity, quota=two_pool_quota(inv, owners), training=protected,
                                     asks=asks(2, 4), now=1000.0)
    assert result.desired == {PREFILL.key: 1, TARGET.key: 4}
    assert sliced_stops(result) == ["a5", "a6", "a7"]
    assert "prefill: 1 2x4x4 slice(s) asked for, 0 placeable" in result.message
    assert "limited by topology" in result.message


def joint_policy() -> Any:
    """The disaggregated test policy (tests/core/test_disaggregated.py) with prefill on 2x4x4 groups (32,000
    prompt tokens/s each: 4× a 2x2x2's, an estimate for the test) and decode on 2x2x2, with capacity."""
    doc = td.policy_doc(capacity=True, budget=None)
    doc["spec"]["policy"]["prefill"]["variants"][0].update(
        {"sliceTopology": "2x4x4", "tokensPerSecond": 32000, "maxReplicas": 4})
    doc["spec"]["preemptible"] = [{"namespace": NS}]
    doc["spec"]["capacity"]["minRunSeconds"] = 0
    return compile_policy(ScalingPolicy.model_validate(doc))


def test_the_joint_policy_stops_the_training_that_frees_each_pools_regions() -> None:
    # Through the engine: the disaggregated policy asks prefill 1→2 (2x4x4) and decode 1→4 (2x2x2); the blocks
    # are full; the victims are the ones freeing a 2x4x4 half-block and three 2x2x2 places at the least work.
    inv, training, owners = two_pool_world()
    pre, dec = td.PRE, td.DEC
    owners = {f"{NS}/prefill-0": pre.key, f"{NS}/decode-0": dec.key}
    values = {**td.QUIET, "prompt": 40000.0, "gen": 5000.0}
    obs = td.observation(values, {"prefill": (1, 1), "decode": (1, 1)}, training=training,
                         quota=two_pool_quota(inv, owners))
    decisions, _ = decide(joint_policy(), obs, PolicyState(), td.T0)
    got = td.scales(decisions)
    assert (got["prefill"].desired, got["decode"].desired) == (2, 4)
    stopped = sorted(d.workload.name for d in decisions if isinstance(d, TrainingDecision))
    assert stopped == ["a5", "a6", "a7", "b4", "b5", "b6", "b7"]


def test_one_job_over_several_slices_beats_several_cheaper_singles_as_a_set() -> None:
    # Three decode groups wanted. Three single-slice jobs (800 chip-s each) are each cheaper than the 3-slice
    # job m (24 chips × 50 s = 1,200 chip-s), but all three together lose 2,400: stopping m alone frees the three
    # places at half the lost work. Chosen group by group, the singles would go.
    serving = [Occupant(f"{NS}/serve-{i}", sub("cube-a", i)) for i in range(5)]
    serving += [Occupant(f"{NS}/serve-b{i}", sub("cube-b", i)) for i in range(3, 8)]
    singles = [Occupant(f"{NS}/s{i}", sub("cube-a", i)) for i in (5, 6, 7)]
    inv = world(*serving, *singles, Occupant(f"{NS}/m", sub("cube-b", 0, 1, 2)))
    training = (*(train(f"s{i}", 1, 100.0) for i in (5, 6, 7)), train("m", 3, 50.0))
    assert SPEC.capacity is not None
    result = arbitration.plan_slices(
        capacity=SPEC.capacity, quota=two_pool_quota(inv, {}), training=training,
        asks=[arbitration.GroupAsk(TARGET.key, SUB, 1, 4, chips=8.0, label="decode")])
    assert (result.desired, sliced_stops(result)) == ({TARGET.key: 4}, ["m"])
