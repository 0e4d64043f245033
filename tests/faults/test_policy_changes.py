"""Policies edited or deleted while a pass is running, and the controller's own clock jumping.

The reload runs in its own task beside the loop: a file changes while an evaluation of its policy is
between its read and its write. The evaluation in flight finishes on the version it started with (one
consistent plan, nothing half of each); the next pass uses the new version; a deleted policy's state is
dropped and it writes nothing more. The other policies keep being evaluated throughout.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.harness import World, decisions, deployment_path, policy_text, scale_puts

pytestmark = pytest.mark.looptime


@pytest.mark.fault("policy-edited-mid-pass")
async def test_a_policy_edited_mid_pass_finishes_on_the_old_version_then_uses_the_new(world: World) -> None:
    world.add_services(2, queue=25, period=15)
    rt = world.runtime(reloadPollSeconds=1)
    # While svc-0's Scale is being read (the plan made: 25 at 10 per replica = 3), its file is rewritten to
    # 5 per replica (25 / 5 = 5 replicas) and the read is slow enough for the reload to land mid-pass.
    world.kube.slow(deployment_path(0) + "/scale", 3.0, method="GET", times=1)

    def edit() -> None:
        (world.policies / "svc-0.yaml").write_text(policy_text(0, per_replica=5))

    # On the pass's read of svc-0's target: its pods (the Deployment itself may come from the target watch,
    # which the pass then does not read again: controller/observer.py, "changed").
    world.kube.after("GET", "/api/v1/namespaces/ns-0/pods", edit)
    async with world.running(rt):
        await asyncio.sleep(2.5)
        assert rt.store.policies["svc-0"].policy.spec.policy.capacity_per_replica == 5  # type: ignore[union-attr]
        await asyncio.sleep(60)
    assert [r.body["spec"]["replicas"] for r in scale_puts(world.kube, 0)] == [3, 5]
    assert world.replicas(0) == 5
    assert decisions(rt, "svc-1") >= 4


@pytest.mark.fault("policy-deleted-mid-pass")
async def test_a_policy_deleted_mid_pass_writes_nothing_more(world: World) -> None:
    world.add_services(2, queue=5, period=15)
    rt = world.runtime(reloadPollSeconds=1)
    async with world.running(rt):
        await asyncio.sleep(20)
        world.kube.slow(deployment_path(0) + "/scale", 3.0, method="GET", times=1)
        world.queue(0, 45)  # svc-0 wants 5; its evaluation is in flight when the file goes
        world.queue(1, 25)
        world.kube.after("GET", deployment_path(0) + "/scale", (world.policies / "svc-0.yaml").unlink)
        await asyncio.sleep(60)
        assert "svc-0" not in rt.store.policies
        assert "svc-0" not in rt.controller.states
        writes_after_delete = len(scale_puts(world.kube, 0))
        await asyncio.sleep(60)
    assert writes_after_delete <= 1, "at most the write of the evaluation already in flight"
    assert len(scale_puts(world.kube, 0)) == writes_after_delete, "nothing after the deletion was loaded"
    assert world.replicas(1) == 3, "the other policy kept running"


@pytest.mark.fault("clock-jump-controller")
@pytest.mark.parametrize("jump", [pytest.param(3600.0, id="wall-forward-1h"), pytest.param(-3600.0, id="wall-back-1h")])
async def test_a_wall_clock_jump_neither_cuts_a_window_short_nor_freezes_the_loop(
    world: World, jump: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.add_services(1, replicas=3, queue=0, period=15)  # idle: scale-down after the 300 s window
    rt = world.runtime()
    real = time.time
    async with world.running(rt):
        await asyncio.sleep(60)
        monkeypatch.setattr(time, "time", lambda: real() + jump)  # NTP steps the host clock
        await asyncio.sleep(200)
        assert world.replicas(0) == 3, "still inside the 300 s window: the jump did not end it"
        assert rt.telemetry.healthy()
        await asyncio.sleep(120)
    assert world.replicas(0) == 1, "the window ended on the loop's clock, 300 s after the first evaluation"
    assert len(scale_puts(world.kube, 0)) == 1
