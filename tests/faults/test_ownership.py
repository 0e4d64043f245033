"""One owner per target at run time: the same rule as ``validate``, on every load and reload, and the
``autoscaler.dev/managed-by`` claim across replicas and controllers.

Two policies pointed at one Deployment with different capacities used to flip it 2 <-> 3 (42 writes in 40
passes); now the first by validate's order (sorted files, then document order) acts, the other is held
with an ``OwnershipConflict`` Event and condition.
"""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.controller.targets import MANAGED_BY_ANNOTATION
from tests.faults.harness import World, decisions, events, policy_text, scale_puts

pytestmark = pytest.mark.looptime


def conditions(world: World, policy: str) -> float:
    rt = world.runtimes[-1]
    return sum(
        s.value for m in rt.telemetry.conditions.collect() for s in m.samples
        if s.labels.get("policy") == policy and s.labels.get("type") == "OwnershipConflict"
    )


@pytest.mark.fault("ownership-two-policies-one-target")
async def test_two_policies_on_one_target_the_first_acts_the_other_is_held(world: World) -> None:
    world.add_services(1, queue=25)
    (world.policies / "svc-0.yaml").unlink()
    # 25 queued: alpha (10 per replica) wants 3, beta (20 per replica) wants 2. They used to take turns.
    (world.policies / "a.yaml").write_text(policy_text(0, name="alpha", per_replica=10))
    (world.policies / "b.yaml").write_text(policy_text(0, name="beta", per_replica=20))
    rt = world.runtime()
    async with world.running(rt):
        await asyncio.sleep(600)
        assert conditions(world, "beta") == 1
        assert conditions(world, "alpha") == 0
    assert world.replicas(0) == 3
    assert len(scale_puts(world.kube, 0)) == 1, "one write, no flapping"
    assert decisions(rt, "beta") == 0
    assert decisions(rt, "alpha") >= 30
    (note,) = events(world.kube, 0, "OwnershipConflict")
    assert "beta is held" in note
    assert "alpha" in note


@pytest.mark.fault("ownership-reload-order")
async def test_the_owner_does_not_depend_on_the_order_files_arrived_in(world: World) -> None:
    world.add_services(1, queue=25)
    (world.policies / "svc-0.yaml").unlink()
    (world.policies / "b.yaml").write_text(policy_text(0, name="beta", per_replica=20))
    rt = world.runtime()
    async with world.running(rt):
        await asyncio.sleep(30)
        assert world.replicas(0) == 2  # beta alone: it acts, and claims the Deployment
        claim = world.kube.get("apps/v1", "Deployment", "svc-0", "ns-0")["metadata"]["annotations"]
        assert claim[MANAGED_BY_ANNOTATION] == "beta"
        # a.yaml arrives: by validate's rule alpha (a.yaml sorts first) owns the target, beta is held. The
        # Deployment still carries beta's claim, so alpha refuses too: neither acts, and both say why.
        (world.policies / "a.yaml").write_text(policy_text(0, name="alpha", per_replica=10))
        await asyncio.sleep(60)
        assert conditions(world, "beta") == 1
        assert world.replicas(0) == 2
        assert any("managed-by=beta" in n for n in events(world.kube, 0, "OwnershipConflict"))
        # The operator hands the target over: alpha acts.
        world.kube.modify("apps/v1", "Deployment", "svc-0", "ns-0",
                          metadata={"annotations": {MANAGED_BY_ANNOTATION: None}})
        await asyncio.sleep(30)
        assert world.replicas(0) == 3
        # b.yaml removed: nothing is held any more.
        (world.policies / "b.yaml").unlink()
        await asyncio.sleep(10)
        assert conditions(world, "beta") == 0
    assert decisions(rt, "beta") >= 1


@pytest.mark.fault("ownership-other-controller")
async def test_a_target_claimed_by_another_controller_is_never_written(world: World) -> None:
    world.add_services(2, queue=25)
    world.kube.modify("apps/v1", "Deployment", "svc-0", "ns-0",
                      metadata={"annotations": {MANAGED_BY_ANNOTATION: "another-autoscaler"}})
    rt = world.runtime()
    async with world.running(rt):
        await asyncio.sleep(120)
    assert world.replicas(0) == 1
    assert scale_puts(world.kube, 0) == []
    assert any("another-autoscaler" in n for n in events(world.kube, 0, "OwnershipConflict"))
    assert world.replicas(1) == 3, "the other policy acts"


@pytest.mark.fault("ownership-two-replicas")
async def test_two_replicas_with_the_same_policies_share_the_claim(world: World) -> None:
    world.add_services(1, queue=25)
    first, second = world.runtime(identity="a"), world.runtime(identity="b")
    async with world.running(first):
        await asyncio.sleep(20)
    assert world.replicas(0) == 3
    world.queue(0, 45)
    async with world.running(second):  # the other replica takes over (same policy names: same owner)
        await asyncio.sleep(20)
    assert world.replicas(0) == 5
    assert events(world.kube, 0, "OwnershipConflict") == []
