"""Health that tells the truth, and leadership that is never shared.

- the loop dies, or wedges where no deadline can reach: ``/healthz`` fails (the reload task, still alive,
  no longer keeps the pod "healthy");
- a renewal the server stored but answered 9 s late: the old leader stops before the standby may lead;
- the lease black-holed mid-term: the leader stops acting by its renew deadline, the standby takes over,
  and a replica RBAC forbids backs off instead of polling every retry period.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from autoscaler.controller import kube as kubeapi
from autoscaler.controller.config import LeaderElectionConfig
from autoscaler.controller.leader import LeaderElector
from autoscaler.controller.loop import Stamped
from tests.faults.harness import World, events, sample
from tests.kube.emulator import Emulator

pytestmark = pytest.mark.looptime

CFG = LeaderElectionConfig(
    lease_name="autoscaler", lease_duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2
)
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/autoscaler"


class Crashing:
    """A leadership whose wait raises: the loop task dies of an unexpected error."""

    def holds(self) -> bool:
        return True

    def remaining(self) -> float:
        return 60.0

    async def wait_leading(self) -> None:
        raise RuntimeError("bug in the loop")


@pytest.mark.fault("health-loop-crashed")
async def test_healthz_fails_at_once_when_the_loop_task_dies(world: World) -> None:
    world.add_services(1)
    rt = world.runtime()
    async with world.running(rt):
        assert rt.telemetry.healthy()
        rt.controller.leader = Crashing()
        health = await sample(1.0, 10.0, rt.telemetry.healthy)
        assert health[2:] == [False] * (len(health) - 2), "dead loop: liveness fails within a second or two"
        assert rt.telemetry.dead is not None
        assert "bug in the loop" in rt.telemetry.dead


@pytest.mark.fault("health-loop-wedged")
async def test_healthz_fails_when_the_loop_wedges_although_the_reload_task_is_alive(world: World) -> None:
    world.add_services(1)
    rt = world.runtime(livenessStallSeconds=60)
    wedge: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def wedged(policies: object, since: float | None = None) -> dict[str, Stamped]:
        await asyncio.shield(wedge)  # a bug no deadline can cut (it swallows the cancellation's effect)
        return {}

    async with world.running(rt):
        await asyncio.sleep(20)
        rt.controller.prepare = wedged  # type: ignore[method-assign]
        health = await sample(1.0, 120.0, rt.telemetry.healthy)
        wedge.set_result(None)
    # Healthy until the stall threshold (60 s after the last tick), then failing: the kubelet restarts us.
    assert health[:40] == [True] * 40
    assert health[-30:] == [False] * 30


def replica_client(kube: Emulator, agent: str) -> client.ApiClient:
    api = client.ApiClient(client.Configuration(host=kube.url))
    api.user_agent = agent  # the emulator cuts off one replica by its User-Agent
    return kubeapi.with_deadlines(api, 10.0)


@pytest.fixture
async def replicas(kube: Emulator) -> AsyncIterator[tuple[LeaderElector, LeaderElector]]:
    apis = [replica_client(kube, "replica-a"), replica_client(kube, "replica-b")]
    a = LeaderElector(apis[0], config=CFG, identity="a", namespace="ops", wall=time.time)
    b = LeaderElector(apis[1], config=CFG, identity="b", namespace="ops", wall=time.time)
    yield a, b
    for api in apis:
        await api.close()


async def run(elector: LeaderElector) -> asyncio.Task[None]:
    return asyncio.create_task(elector.run())


async def stop(*tasks: asyncio.Task[None]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.fault("leader-late-renewal")
async def test_a_renewal_answered_9s_late_never_lets_two_replicas_lead(
    kube: Emulator, replicas: tuple[LeaderElector, LeaderElector]
) -> None:
    a, b = replicas
    ta = await run(a)
    await asyncio.wait_for(a.wait_leading(), 5)
    tb = await run(b)
    await asyncio.sleep(5)  # b has seen a renew
    # a's next renewal is stored at once but answered 9 s late; after that answer, a is cut off for good.
    kube.slow(LEASE_PATH, 9, method="PUT", times=1, after=True, agent="replica-a")

    def cut_off_a() -> None:
        kube.black_hole("/apis/coordination.k8s.io/*", agent="replica-a")

    kube.after("PUT", LEASE_PATH, cut_off_a)
    timeline = await sample(0.05, 45.0, lambda: (a.holds(), b.holds()))
    both = [i * 0.05 for i, (x, y) in enumerate(timeline) if x and y]
    assert both == [], f"both replicas held the lease at t = {both[:3]}..."
    assert timeline[-1] == (False, True), "b took over once a's lease expired"
    await stop(ta, tb)


@pytest.mark.fault("leader-lost-black-hole")
async def test_a_leader_whose_renewals_vanish_stops_by_its_renew_deadline(
    kube: Emulator, replicas: tuple[LeaderElector, LeaderElector]
) -> None:
    a, b = replicas
    ta = await run(a)
    await asyncio.wait_for(a.wait_leading(), 5)
    tb = await run(b)
    await asyncio.sleep(3)
    loop = asyncio.get_running_loop()
    kube.black_hole("/apis/coordination.k8s.io/*", agent="replica-a")
    cut = loop.time()
    while a.holds():
        await asyncio.sleep(0.1)
    assert loop.time() - cut <= 10.1, "at most renewDeadlineSeconds after the last renewal was sent"
    await asyncio.wait_for(b.wait_leading(), 30)
    assert not a.holds()
    # a's campaign is not silenced by the hung requests: each round ends at its deadline and a new one starts
    # (a hung renewal used to leave a replica without a single lease request for 10 minutes).
    before = a.requests
    await asyncio.sleep(120)
    assert a.requests - before >= 4
    await stop(ta, tb)


@pytest.mark.fault("api-403-lease")
async def test_a_replica_forbidden_the_lease_backs_off(kube: Emulator) -> None:
    kube.inject(403, "/apis/coordination.k8s.io/*", times=100_000)
    api = replica_client(kube, "replica-a")
    a = LeaderElector(api, config=CFG, identity="a", namespace="ops", wall=time.time)
    ta = await run(a)
    await asyncio.sleep(300)
    await stop(ta)
    await api.close()
    # Polling every 2 s would be 150 reads in 300 s; backing off from 2 s doubling to 15 s with full jitter
    # (at least the 2 s retry period) averages ~7.5 s a round: ~45.
    assert 5 <= a.requests <= 60
    assert not a.holds()


@pytest.mark.fault("leader-lost-mid-pass")
async def test_a_lease_running_out_mid_write_cuts_the_write_and_the_next_leader_finishes(world: World) -> None:
    world.add_services(1, queue=25)
    old = world.runtime(identity="old")
    loop = asyncio.get_running_loop()
    lease = Fenced(until=loop.time() + 3.0)  # the last renewal leaves 3 s, and no renewal comes
    old.controller.leader = lease
    world.kube.slow("/apis/apps/v1/namespaces/ns-0/*", 2.0)  # each read of the scale path takes 2 s
    async with world.running(old):
        await asyncio.sleep(20)
    assert world.replicas(0) == 1
    assert [r for r in world.kube.writes() if "/scale" in r.path] == [], "no write after the fence"
    assert "svc-0" not in old.controller.states, "nothing committed from a plan cut short"
    exposition = old.telemetry.exposition().decode()
    assert 'autoscaler_actions_total{action="scale",policy="svc-0",result="not_leader"}' in exposition
    assert events(world.kube, 0, "ActionFailed") == [], "a replica past its fence writes no Event either"
    world.kube.clear_faults()
    new = world.runtime(identity="new")
    async with world.running(new):
        await asyncio.sleep(20)
    assert world.replicas(0) == 3
    assert len([r for r in world.kube.writes() if "/scale" in r.path]) == 1


class Fenced:
    """A lease surely held until ``until`` (loop time) and never renewed: it runs out mid-pass."""

    def __init__(self, until: float) -> None:
        self.until = until

    def remaining(self) -> float:
        return max(0.0, self.until - asyncio.get_running_loop().time())

    def holds(self) -> bool:
        return self.remaining() > 0

    async def wait_leading(self) -> None:
        if not self.holds():
            await asyncio.Event().wait()
