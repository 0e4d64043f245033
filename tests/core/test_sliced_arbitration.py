"""Issue 14: the arbitration on a slice inventory (the TPU7x codelab: two 4x4x4 blocks, 2x2x2 groups).

What serving can get is what still fits as whole slices of its group's shape, not the ClusterQueue's
``999999``; victims are the training Workloads whose stop frees a placeable region, chosen by the hand-off's
own order (least work lost since the last checkpoint); a super-slice is one unit over two blocks.
"""

from __future__ import annotations

import itertools
from typing import Any

from autoscaler.core import arbitration
from autoscaler.core.engine import compile_policy
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
    TrainingWorkload,
)
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.core.topology import Inventory, Occupant, Region, Shape

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
