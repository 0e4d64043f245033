"""Leader election on a coordination.k8s.io/v1 Lease, two electors against one emulated API server.

Timing runs on the event loop's clock (``looptime``): the lease durations below are virtual seconds.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.config import LeaderElectionConfig
from autoscaler.controller.leader import LeaderElector
from tests.kube.emulator import Emulator

CFG = LeaderElectionConfig(
    lease_name="autoscaler", lease_duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2
)
LEASE = ("coordination.k8s.io/v1", "Lease", "autoscaler", "ops")


def elector(api: client.ApiClient, identity: str) -> LeaderElector:
    return LeaderElector(api, config=CFG, identity=identity, namespace="ops", wall=time.time)


async def test_first_elector_creates_the_lease_and_renews_it(kube: Emulator, kube_client: client.ApiClient) -> None:
    a = elector(kube_client, "a")
    assert await a.try_acquire_or_renew()
    lease = kube.get(*LEASE)["spec"]
    assert lease["holderIdentity"] == "a"
    assert lease["leaseDurationSeconds"] == 15
    assert lease["leaseTransitions"] == 0
    assert lease["acquireTime"].endswith("Z")
    assert lease["renewTime"] == lease["acquireTime"]
    assert await a.try_acquire_or_renew()
    writes = [(r.method, r.path, r.content_type) for r in kube.writes()]
    assert writes[0] == ("POST", "/apis/coordination.k8s.io/v1/namespaces/ops/leases", "application/json")
    assert writes[1][:2] == ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/autoscaler")
    # Optimistic concurrency: the renewal carries the resourceVersion it read.
    assert kube.writes()[1].body["metadata"]["resourceVersion"]
    assert kube.get(*LEASE)["spec"]["acquireTime"] == lease["acquireTime"]


async def test_second_elector_waits_while_the_lease_is_renewed(kube: Emulator, kube_client: client.ApiClient) -> None:
    a, b = elector(kube_client, "a"), elector(kube_client, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert not b.holds()
    assert kube.get(*LEASE)["spec"]["holderIdentity"] == "a"


@pytest.mark.looptime
async def test_standby_takes_over_an_expired_lease_and_counts_the_transition(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    a, b = elector(kube_client, "a"), elector(kube_client, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b starts its own expiry clock now
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.sleep(14)
    assert not await b.try_acquire_or_renew(), "not expired after 14 s of a 15 s lease"
    await asyncio.sleep(1)
    assert await b.try_acquire_or_renew()
    assert loop.time() - t0 == pytest.approx(15)
    spec = kube.get(*LEASE)["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    # a has not renewed for 15 s > renewDeadline 10 s: it knows it must not act, without asking anyone.
    assert not a.holds()


async def test_a_write_based_on_a_stale_read_loses_with_409(kube: Emulator, kube_client: client.ApiClient) -> None:
    a, b = elector(kube_client, "a"), elector(kube_client, "b")
    assert await a.try_acquire_or_renew()
    kube.modify(*LEASE, spec={"holderIdentity": ""})  # released: anyone may take it
    path = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/autoscaler"
    # Between b's read and b's write, a takes the Lease: b's write carries a stale resourceVersion.
    def a_takes_it() -> None:
        kube.modify(*LEASE, spec={"holderIdentity": "a"})

    kube.after("GET", path, a_takes_it)
    assert not await b.try_acquire_or_renew()
    assert [r.status for r in kube.requests if r.method == "PUT"][-1] == 409
    assert kube.get(*LEASE)["spec"]["holderIdentity"] == "a"
    assert not b.holds()


@pytest.mark.looptime
async def test_handover_when_the_leader_dies_standby_leads_after_the_lease_duration(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    a, b = elector(kube_client, "a"), elector(kube_client, "b")
    assert await a.try_acquire_or_renew()  # a leads, then dies: it never renews again
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tb = asyncio.create_task(b.run())
    await asyncio.wait_for(b.wait_leading(), 60)
    # b saw the lease unchanged for leaseDurationSeconds (15 s) on its own clock, retrying every 2 s.
    assert 15 <= loop.time() - t0 <= 17
    assert b.holds()
    assert not a.holds()
    assert kube.get(*LEASE)["spec"]["holderIdentity"] == "b"
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


@pytest.mark.looptime
async def test_leader_stops_at_once_when_its_renewals_fail(kube: Emulator, kube_client: client.ApiClient) -> None:
    changes: list[bool] = []
    a = LeaderElector(kube_client, config=CFG, identity="a", namespace="ops", wall=time.time,
                      on_change=changes.append)
    ta = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait_leading(), 5)
    loop = asyncio.get_running_loop()
    kube.inject(500, "/apis/coordination.k8s.io/v1/namespaces/ops/leases/autoscaler", method="PUT", times=6)
    t_fail = loop.time()
    while a.holds():
        await asyncio.sleep(0.5)
    # The last good renewal was at most one retry period (2 s) before the faults: it stops by 10 s after it.
    assert 8 <= loop.time() - t_fail <= 10.5
    assert changes == [True, False]
    ta.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ta


@pytest.mark.looptime
async def test_leader_stops_when_another_holder_appears(kube: Emulator, kube_client: client.ApiClient) -> None:
    a = elector(kube_client, "a")
    ta = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait_leading(), 5)
    kube.modify(*LEASE, spec={"holderIdentity": "intruder", "renewTime": "2026-11-30T10:00:00.000000Z"})
    await asyncio.sleep(2.5)  # one retry period: a reads the Lease again
    assert not a.holds()
    assert kube.get(*LEASE)["spec"]["holderIdentity"] == "intruder"
    ta.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ta


@pytest.mark.looptime
async def test_release_on_shutdown_lets_the_standby_lead_without_waiting(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    a, b = elector(kube_client, "a"), elector(kube_client, "b")
    ta = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait_leading(), 5)
    assert not await b.try_acquire_or_renew()
    ta.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ta
    assert kube.get(*LEASE)["spec"]["holderIdentity"] == ""
    assert await b.try_acquire_or_renew()


@pytest.mark.parametrize(
    ("code", "holds_after"),
    [pytest.param(403, False, id="rbac-forbidden"), pytest.param(503, False, id="server-unavailable")],
)
async def test_api_errors_never_grant_the_lease(
    kube: Emulator, kube_client: client.ApiClient, code: int, holds_after: bool
) -> None:
    kube.inject(code, "/apis/coordination.k8s.io/v1/namespaces/ops/leases*", times=10)
    a = elector(kube_client, "a")
    assert not await a.try_acquire_or_renew()
    assert a.holds() is holds_after
