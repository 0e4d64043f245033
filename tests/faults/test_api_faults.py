"""The Kubernetes API failing: black holes, timeouts, slow answers, 5xx, 409, 403 and 410 on watches.

Three services (``svc-0..2``, one namespace each); the fault hits ``svc-0``'s namespace only, so every
scenario also checks that the other policies keep being evaluated and that health tells the truth.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from autoscaler.controller.telemetry import serve
from tests.faults.harness import World, decisions, deployment_path, sample, scale_puts

pytestmark = pytest.mark.looptime


@pytest.mark.fault("api-black-hole")
async def test_a_black_holed_read_fails_its_policy_only_and_health_stays_true(world: World) -> None:
    world.add_services(3)
    rt = world.runtime()
    world.kube.black_hole("/apis/apps/v1/namespaces/ns-0/*")  # never answered: the connection stays open
    async with world.running(rt):
        health = await sample(1.0, 120.0, rt.telemetry.healthy)
    assert all(health), "the loop kept ticking: every API call and every evaluation has a deadline"
    assert decisions(rt, "svc-0") == 0, "nothing is decided on a read that never came"
    # A control run with no fault evaluates each policy every 15 s: 9 times in 120 s. With svc-0's reads
    # hanging until their 10 s deadline, each pass is 10 s longer: 5 or more.
    assert decisions(rt, "svc-1") >= 5
    assert decisions(rt, "svc-2") >= 5
    text = rt.telemetry.exposition().decode()
    assert 'autoscaler_errors_total{component="observe"}' in text


@pytest.mark.fault("api-timeout")
async def test_a_write_answered_after_its_deadline_is_not_repeated(world: World) -> None:
    world.add_services(2, queue=25)  # 25 queued at 10 per replica: 1 -> 3
    rt = world.runtime()
    # The server stores the scale at once but answers 30 s later (after the 10 s client deadline).
    world.kube.slow(deployment_path(0) + "/scale", 30, method="PATCH", times=1, after=True)
    async with world.running(rt):
        await asyncio.sleep(60)
        assert rt.telemetry.healthy()
    assert world.replicas(0) == 3
    assert len(scale_puts(world.kube, 0)) == 1, "the next pass read 3 and wrote nothing: no double action"
    assert world.replicas(1) == 3


@pytest.mark.fault("api-slow")
async def test_slow_answers_within_the_deadline_only_slow_the_policy_down(world: World) -> None:
    world.add_services(2, queue=25)
    rt = world.runtime()
    world.kube.slow("/apis/apps/v1/namespaces/ns-0/*", 4)  # every request there takes 4 s
    async with world.running(rt):
        await asyncio.sleep(60)
        assert rt.telemetry.healthy()
    assert world.replicas(0) == 3
    assert len(scale_puts(world.kube, 0)) == 1
    assert decisions(rt, "svc-0") >= 2
    assert decisions(rt, "svc-1") >= 4


@pytest.mark.fault("api-5xx")
async def test_a_failing_api_server_holds_the_policy_and_recovers_without_double_action(world: World) -> None:
    world.add_services(2, queue=25)
    rt = world.runtime()
    fault = world.kube.inject(503, deployment_path(0) + "/scale", method="PATCH", times=10_000)
    async with world.running(rt):
        await asyncio.sleep(60)
        assert world.replicas(0) == 1
        assert world.replicas(1) == 3, "the other policy acted meanwhile"
        assert rt.telemetry.healthy()
        fault.remaining = 0  # the server recovers
        await asyncio.sleep(30)
    assert world.replicas(0) == 3
    ok = [r for r in scale_puts(world.kube, 0) if r.status == 200]
    assert len(ok) == 1


@pytest.mark.fault("api-409")
async def test_conflicts_are_retried_from_a_fresh_read(world: World) -> None:
    world.add_services(1, queue=25)
    rt = world.runtime()
    world.kube.inject(409, deployment_path(0) + "/scale", method="PATCH", times=3)
    async with world.running(rt):
        await asyncio.sleep(20)
    assert world.replicas(0) == 3
    assert [r.status for r in scale_puts(world.kube, 0)] == [409, 409, 409, 200]


@pytest.mark.fault("api-403")
async def test_a_forbidden_watch_backs_off_and_names_itself_without_blocking_readiness(world: World) -> None:
    world.add_services(3)
    world.kube.deny("watch", "deployments", namespace="ns-0")
    rt = world.runtime()
    async with world.running(rt):
        servers = await serve(rt.telemetry, host="127.0.0.1", metrics_port=0, health_port=0)
        try:
            await asyncio.sleep(300)
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{servers.ports[1]}/readyz") as r:
                status, body = r.status, await r.text()
        finally:
            await servers.stop()
    watches = [r for r in world.kube.requests if r.verb == "watch" and r.namespace == "ns-0"]
    # A fixed 1 s retry made 300 requests in 300 s; exponential backoff with jitter (0.8 s doubling to 30 s)
    # makes about 25.
    assert 5 <= len(watches) <= 40
    assert status == 200, body
    assert "degraded: watch /apis/apps/v1/namespaces/ns-0/deployments failing: 403" in body
    assert "ns-1" not in body
    assert decisions(rt, "svc-0") >= 15, "its policy still runs on its period"
    assert decisions(rt, "svc-1") >= 15


@pytest.mark.fault("api-410")
async def test_an_expired_watch_relists_and_still_wakes_its_policy(world: World) -> None:
    world.add_services(1, period=600)  # periods far apart: only the watch can wake the policy in time
    rt = world.runtime()
    async with world.running(rt):
        await world.kube.wait_for_watchers(1, plural="deployments")
        await asyncio.sleep(1)
        before = decisions(rt, "svc-0")
        world.kube.inject(410, "/apis/apps/v1/namespaces/ns-0/deployments", times=1)
        world.kube.drop_watches()  # the stream reconnects into a 410 and must relist
        await asyncio.sleep(1)
        world.queue(0, 25)
        world.kube.modify("apps/v1", "Deployment", "svc-0", "ns-0", metadata={"annotations": {"touched": "1"}})
        await asyncio.sleep(5)
    expired = [r for r in world.kube.requests if r.verb == "watch" and r.status == 200]
    assert len(expired) >= 2
    assert decisions(rt, "svc-0") > before
    assert world.replicas(0) == 3
