"""Answers no API server sends (a proxy's, a broken server's): JSON nested deeper than Python's decoder recurses,
text, a JSON array, a Lease whose fields have the wrong type. Each is a failed call, typed and one line; none
crashes the controller or ends its lease campaign (which would leave a replica alive that never leads again).

Over real HTTP: a small server answers what the case says, the real kubernetes-asyncio client reads it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from autoscaler.controller import kube
from autoscaler.controller.config import LeaderElectionConfig
from autoscaler.controller.leader import LeaderElector
from autoscaler.controller.workloads import HELD_FOR, _held_info

#: Python's JSON decoder recurses once per level: this raises RecursionError in ``json.loads``.
DEEP = "[" * 100_000 + "]" * 100_000
LEASES = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


@dataclass
class Hostile:
    """Answers a request with the first queued (method, status, body) of its method; else, as an API server
    without the Lease: 404 to a GET, the object back to a create."""

    answers: list[tuple[str, int, str]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(f"{request.method} {request.path}")
        for i, (method, status, body) in enumerate(self.answers):
            if method == request.method:
                del self.answers[i]
                return web.Response(status=status, text=body, content_type="application/json")
        if request.method == "POST":
            obj = await request.json()
            obj["metadata"]["resourceVersion"] = "1"
            return web.json_response(obj, status=201)
        answer = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                  "message": "leases.coordination.k8s.io \"autoscaler\" not found"}
        return web.json_response(answer, status=404)


@pytest.fixture
async def hostile() -> AsyncIterator[tuple[Hostile, client.ApiClient]]:
    server = Hostile()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        yield server, api
    finally:
        await api.close()
        await runner.cleanup()


@pytest.mark.parametrize(("body", "says"), [
    pytest.param(DEEP, "nested too deeply", id="nested-deeply"),
    pytest.param("<html>proxy</html>", "not a JSON object: '<html>proxy</html>'", id="text"),
    pytest.param("[1, 2]", "not a JSON object: '[1, 2]'", id="json-array"),
])
async def test_a_200_that_is_no_object_is_a_typed_one_line_error(
    hostile: tuple[Hostile, client.ApiClient], body: str, says: str
) -> None:
    server, api = hostile
    server.answers.append(("GET", 200, body))
    with pytest.raises(kube.BadAnswer) as err:
        await kube.get_json(api, "/apis/apps/v1/namespaces/llm/deployments/srv")
    assert says in str(err.value)
    assert "\n" not in str(err.value)
    assert len(str(err.value)) < 400


async def test_a_typed_call_answered_too_deeply_nested_is_a_typed_error(
    hostile: tuple[Hostile, client.ApiClient],
) -> None:
    server, api = hostile
    server.answers.append(("GET", 200, DEEP))
    with pytest.raises(kube.BadAnswer, match="nested too deeply"):
        await kube.call(client.AppsV1Api(api).read_namespaced_deployment("srv", "llm"))


async def test_an_error_status_with_a_body_nested_too_deeply_keeps_its_type(
    hostile: tuple[Hostile, client.ApiClient],
) -> None:
    server, api = hostile
    server.answers.append(("GET", 409, DEEP))
    with pytest.raises(kube.Conflict) as err:
        await kube.get_json(api, "/apis/apps/v1/namespaces/llm/deployments/srv")
    assert "\n" not in str(err.value)
    assert len(str(err.value)) < 400


@pytest.mark.looptime
@pytest.mark.parametrize("body", [
    pytest.param(DEEP, id="nested-deeply"),
    pytest.param("<html>proxy</html>", id="text"),
    pytest.param("[1, 2]", id="json-array"),
    pytest.param(json.dumps({"spec": {"leaseDurationSeconds": "soon"}}), id="duration-not-a-number"),
    pytest.param(json.dumps({"spec": ["holderIdentity"]}), id="spec-a-list"),
])
async def test_a_lease_read_that_is_no_lease_is_a_failed_round_and_the_campaign_goes_on(
    hostile: tuple[Hostile, client.ApiClient], body: str
) -> None:
    server, api = hostile
    server.answers.extend([("GET", 200, body)] * 3)
    cfg = LeaderElectionConfig(lease_name="autoscaler", lease_duration_seconds=15, renew_deadline_seconds=10,
                               retry_period_seconds=2)
    elector = LeaderElector(api, config=cfg, identity="a", namespace="ops", wall=time.time)
    assert not await elector.try_acquire_or_renew()
    assert elector.last_error is not None
    assert "no Lease" in elector.last_error
    campaign = asyncio.create_task(elector.run())
    # The two hostile reads left are failed rounds (backed off); the next read finds no Lease and creates it.
    await asyncio.wait_for(elector.wait_leading(), 120)
    assert not campaign.done()
    assert f"POST {LEASES}" in server.seen
    campaign.cancel()
    with pytest.raises(asyncio.CancelledError):
        await campaign


@pytest.mark.looptime
async def test_a_round_failing_in_a_way_no_one_foresaw_is_a_failed_round_and_the_campaign_goes_on(
    hostile: tuple[Hostile, client.ApiClient],
) -> None:
    # The create answered 201 with a body the typed client's decoder cannot read: RecursionError from inside the
    # client, past every error the round names. The campaign logs it and tries again.
    server, api = hostile
    server.answers.append(("POST", 201, DEEP))
    cfg = LeaderElectionConfig(lease_name="autoscaler", lease_duration_seconds=15, renew_deadline_seconds=10,
                               retry_period_seconds=2)
    elector = LeaderElector(api, config=cfg, identity="a", namespace="ops", wall=time.time)
    campaign = asyncio.create_task(elector.run())
    await asyncio.wait_for(elector.wait_leading(), 120)
    assert server.seen.count(f"POST {LEASES}") == 2
    assert not campaign.done()
    campaign.cancel()
    with pytest.raises(asyncio.CancelledError):
        await campaign


@pytest.mark.parametrize("text", [DEEP, "{", "[]"])
def test_a_held_for_mark_no_one_can_read_is_an_empty_mark(text: str) -> None:
    assert _held_info({HELD_FOR: text}) == {}
