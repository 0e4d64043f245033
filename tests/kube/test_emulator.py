"""The emulator behaves like the real API server where clients trip, driven by the real client over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kube import objects
from tests.kube.emulator import Emulator, Rbac, label_selector_matches
from tests.kube.kueue import Kueue

LWS = ("leaderworkerset.x-k8s.io", "v1", "llm", "leaderworkersets")
ROOT = Path(__file__).resolve().parents[2]


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or b"{}")
    return body


async def test_create_assigns_uid_and_resource_version(kube: Emulator, kube_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(kube_client)
    created = await apps.create_namespaced_deployment("llm", objects.deployment())  # type: ignore[arg-type]
    assert created.metadata.uid
    assert int(created.metadata.resource_version) == kube.resource_version
    assert created.metadata.generation == 1
    with pytest.raises(ApiException) as err:
        await apps.create_namespaced_deployment("llm", objects.deployment())  # type: ignore[arg-type]
    assert err.value.status == 409
    assert _status(err.value)["reason"] == "AlreadyExists"


async def test_stale_update_is_a_conflict(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    apps = client.AppsV1Api(kube_client)
    first = await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", metadata={"labels": {"x": "y"}})
    first.spec.replicas = 3
    with pytest.raises(ApiException) as err:
        await apps.replace_namespaced_deployment("tgi-gemma-deployment", "llm", first)
    assert err.value.status == 409
    status = _status(err.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on deployments.apps "tgi-gemma-deployment": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"] == 1


async def test_patch_with_stale_resource_version_is_a_conflict(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    stored = kube.add(objects.deployment())
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2})
    apps = client.AppsV1Api(kube_client)
    body = {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]}, "spec": {"replicas": 5}}
    with pytest.raises(ApiException) as err:
        await apps.patch_namespaced_deployment_scale("tgi-gemma-deployment", "llm", body)
    assert err.value.status == 409


async def test_deployment_scale_subresource(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment(replicas=1))
    apps = client.AppsV1Api(kube_client)
    scale = await apps.read_namespaced_deployment_scale("tgi-gemma-deployment", "llm")
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (1, 1, "app=gemma-server")
    patched = await apps.patch_namespaced_deployment_scale("tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}})
    assert patched.spec.replicas == 2
    assert kube.requests[-1].content_type == "application/strategic-merge-patch+json"
    stored = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    assert stored["spec"]["replicas"] == 2
    assert stored["metadata"]["generation"] == 2
    # A replace with the Scale's resourceVersion succeeds once, then is stale.
    scale = await apps.read_namespaced_deployment_scale("tgi-gemma-deployment", "llm")
    scale.spec.replicas = 3
    await apps.replace_namespaced_deployment_scale("tgi-gemma-deployment", "llm", scale)
    scale.spec.replicas = 4
    with pytest.raises(ApiException) as err:
        await apps.replace_namespaced_deployment_scale("tgi-gemma-deployment", "llm", scale)
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        pytest.param({"spec": {"replicas": 2}}, None, 400, id="dict-sent-as-json-patch-rejected"),
        pytest.param({"spec": {"replicas": 2}}, "application/merge-patch+json", 200, id="merge-patch"),
        pytest.param(
            [{"op": "replace", "path": "/spec/replicas", "value": 2}], None, 200, id="json-patch-list"
        ),
        pytest.param(
            {"spec": {"replicas": 2}}, "application/strategic-merge-patch+json", 415, id="strategic-on-crd-415"
        ),
        pytest.param(
            [{"op": "replace", "path": "/spec/replicas", "value": 2}], "application/merge-patch+json", 422,
            id="list-sent-as-merge-patch-rejected",
        ),
    ],
)
async def test_lws_scale_patch_content_types(
    kube: Emulator, kube_client: client.ApiClient, body: Any, content_type: str | None, status: int
) -> None:
    kube.add(objects.leader_worker_set(replicas=1))
    api = client.CustomObjectsApi(kube_client)
    kwargs: dict[str, Any] = {"_content_type": content_type} if content_type else {}
    if status == 200:
        result = await api.patch_namespaced_custom_object_scale(*LWS, "jetstream", body, **kwargs)
        assert result["spec"]["replicas"] == 2
        assert result["status"]["selector"].endswith("worker-index=0")
    else:
        with pytest.raises(ApiException) as err:
            await api.patch_namespaced_custom_object_scale(*LWS, "jetstream", body, **kwargs)
        assert err.value.status == status
    expected = 2 if status == 200 else 1
    stored = kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")
    assert stored["spec"]["replicas"] == expected


async def test_status_subresource_is_separate(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment(replicas=1, ready=1))
    apps = client.AppsV1Api(kube_client)
    await apps.patch_namespaced_deployment(
        "tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}, "status": {"readyReplicas": 9}}
    )
    stored = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    assert (stored["spec"]["replicas"], stored["status"]["readyReplicas"]) == (2, 1)
    await apps.patch_namespaced_deployment_status(
        "tgi-gemma-deployment", "llm", {"spec": {"replicas": 7}, "status": {"readyReplicas": 2}}
    )
    stored = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    assert (stored["spec"]["replicas"], stored["status"]["readyReplicas"]) == (2, 2)


async def test_custom_resource_update_needs_resource_version(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    kube.add(objects.leader_worker_set())
    api = client.CustomObjectsApi(kube_client)
    body = objects.leader_worker_set(replicas=3)
    with pytest.raises(ApiException) as err:
        await api.replace_namespaced_custom_object(*LWS, "jetstream", body)
    assert err.value.status == 422


async def test_list_with_selectors_and_pages(kube: Emulator, kube_client: client.ApiClient) -> None:
    for i in range(3):
        kube.add(objects.pod(f"tgi-{i}", labels={"app": "gemma-server", "i": str(i)}))
    kube.add(objects.pod("other", labels={"app": "other"}))
    core = client.CoreV1Api(kube_client)
    pods = await core.list_namespaced_pod("llm", label_selector="app=gemma-server,i notin (2)")
    assert [p.metadata.name for p in pods.items] == ["tgi-0", "tgi-1"]
    assert pods.metadata.resource_version == str(kube.resource_version)
    page = await core.list_namespaced_pod("llm", limit=3)
    assert len(page.items) == 3
    rest = await core.list_namespaced_pod("llm", limit=3, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["tgi-2"]
    named = await core.list_namespaced_pod("llm", field_selector="metadata.name=other")
    assert [p.metadata.name for p in named.items] == ["other"]


async def test_a_paged_list_is_one_snapshot_until_compaction(kube: Emulator, kube_client: client.ApiClient) -> None:
    """As etcd serves later pages at the first page's revision: a change between pages does not show, and once
    compaction passes that revision the token answers 410 Expired with an inconsistent token for the rest."""
    for i in range(5):
        kube.add(objects.pod(f"tgi-{i}"))
    core = client.CoreV1Api(kube_client)
    first = await core.list_namespaced_pod("llm", limit=2)
    assert [p.metadata.name for p in first.items] == ["tgi-0", "tgi-1"]
    kube.remove("v1", "Pod", "tgi-2", "llm")
    kube.add(objects.pod("tgi-5"))
    rest = await core.list_namespaced_pod("llm", limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["tgi-2", "tgi-3"]
    assert rest.metadata.resource_version == first.metadata.resource_version
    assert rest.metadata._continue
    kube.compact()
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("llm", limit=2, _continue=rest.metadata._continue)
    assert info.value.status == 410
    status = _status(info.value)
    assert status["reason"] == "Expired"
    assert status["message"].startswith("The provided continue parameter is too old")
    now = await core.list_namespaced_pod("llm", limit=2, _continue=status["metadata"]["continue"])
    assert [p.metadata.name for p in now.items] == ["tgi-4", "tgi-5"]  # the rest as it is now


@pytest.mark.parametrize(
    ("query", "code"),
    [
        pytest.param({"resource_version_match": "NotOlderThan"}, 422, id="match-without-resource-version"),
        pytest.param({"resource_version": "0", "resource_version_match": "Exact"}, 422, id="exact-zero"),
        pytest.param({"resource_version": "1", "resource_version_match": "Newest"}, 422, id="unknown-match"),
        pytest.param({"resource_version": "101", "_continue": "eyJydiI6MTAxfQ=="}, 400, id="continue-with-rv"),
    ],
)
async def test_list_options_are_validated(
    kube: Emulator, kube_client: client.ApiClient, query: dict[str, str], code: int
) -> None:
    core: Any = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("llm", **query)
    assert info.value.status == code


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param("a=b", {"a": "b"}, True, id="equal"),
        pytest.param("a==b", {"a": "c"}, False, id="double-equal-mismatch"),
        pytest.param("a!=b", {}, True, id="not-equal-missing-key"),
        pytest.param("a in (x, y)", {"a": "y"}, True, id="in"),
        pytest.param("a in (x)", {}, False, id="in-missing-key"),
        pytest.param("a notin (x)", {}, True, id="notin-missing-key"),
        pytest.param("a", {"a": ""}, True, id="exists"),
        pytest.param("!a", {"a": "1"}, False, id="not-exists"),
        pytest.param("a=b,c in (d)", {"a": "b", "c": "e"}, False, id="conjunction"),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert label_selector_matches(selector, labels) is matches


async def test_watch_streams_events_and_resumes(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    apps = client.AppsV1Api(kube_client)
    seen: list[tuple[str, int]] = []
    w = watch.Watch()
    stream = w.stream(apps.list_namespaced_deployment, "llm", timeout_seconds=30)

    async def produce() -> None:
        await kube.wait_for_watchers(1)
        kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2})
        kube.remove("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")

    producer = asyncio.create_task(produce())
    async for event in stream:
        seen.append((event["type"], event["object"].spec.replicas))
        if event["type"] == "DELETED":
            break
    await producer
    await w.close()
    assert seen == [("ADDED", 1), ("MODIFIED", 2), ("DELETED", 2)]


async def test_watch_from_resource_version_replays_later_events(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    kube.add(objects.deployment())
    listed = await client.AppsV1Api(kube_client).list_namespaced_deployment("llm")
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 3})
    w = watch.Watch()
    async for event in w.stream(
        client.AppsV1Api(kube_client).list_namespaced_deployment, "llm",
        resource_version=listed.metadata.resource_version, timeout_seconds=30,
    ):
        assert (event["type"], event["object"].spec.replicas) == ("MODIFIED", 3)
        break
    await w.close()


async def test_watch_older_than_compaction_is_gone(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    old = kube.resource_version
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2})
    kube.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        async for _ in w.stream(
            client.AppsV1Api(kube_client).list_namespaced_deployment, "llm", resource_version=str(old),
            timeout_seconds=30,
        ):
            pass
    await w.close()
    assert err.value.status == 410
    assert "too old resource version" in str(err.value.reason)


async def _raw_watch(kube_client: client.ApiClient, query: str) -> tuple[int, list[dict[str, Any]]]:
    """A watch of llm's Deployments read as the wire carries it: the HTTP status and every JSON line."""
    async with aiohttp.ClientSession() as http, http.get(
        f"{kube_client.configuration.host}/apis/apps/v1/namespaces/llm/deployments?watch=true&{query}"
    ) as answer:
        return answer.status, [json.loads(line) for line in (await answer.read()).decode().splitlines() if line]


@pytest.mark.parametrize(
    ("code", "reason", "message", "want_reason", "want_message"),
    [
        pytest.param(410, None, "injected fault 410", "Expired", "too old resource version: ", id="410-expired"),
        pytest.param(410, "Gone", "too old resource version: 1 (2)", "Gone", "too old resource version: 1 (2)",
                     id="410-gone-as-servers-before-the-watch-cache-said"),
        pytest.param(410, None, "The resourceVersion for the provided watch is too old.", "Expired",
                     "The resourceVersion for the provided watch is too old.", id="410-from-the-etcd-watcher"),
        pytest.param(500, None, "etcdserver: request timed out", "InternalError",
                     "Internal error occurred: etcdserver: request timed out", id="500-internal"),
        pytest.param(504, None, "Too large resource version: 9, current: 8", "Timeout",
                     "Timeout: Too large resource version: 9, current: 8", id="504-timeout"),
    ],
)
async def test_an_error_met_inside_a_watch_is_an_error_event_after_200(
    kube: Emulator, kube_client: client.ApiClient, code: int, reason: str | None, message: str, want_reason: str,
    want_message: str,
) -> None:
    """The watch cache (``newErrWatcher``) and the etcd watcher answer an accepted watch with 200 and one ``ERROR``
    event carrying the Status k8s.io/apimachinery's constructors build, then end the stream."""
    kube.add(objects.deployment())
    kube.inject(code, "/apis/apps/v1/namespaces/llm/deployments", in_stream=True, reason=reason, message=message)
    status, lines = await _raw_watch(kube_client, "timeoutSeconds=30")
    assert status == 200
    assert [line["type"] for line in lines] == ["ERROR"]
    body = lines[0]["object"]
    assert (body["kind"], body["code"], body["reason"], body["status"]) == ("Status", code, want_reason, "Failure")
    assert body["message"].startswith(want_message)


async def test_a_watch_from_a_version_the_server_has_not_reached_times_out_in_the_stream(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """An apiserver behind a load balancer may not have reached the version another one served: its watch cache
    waits up to 3 s for it, then sends 504 ``Too large resource version`` in the stream; a write that reaches the
    version in time lets the watch go on."""
    kube.add(objects.deployment())
    ahead = kube.resource_version + 1
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, lines = await _raw_watch(kube_client, f"resourceVersion={ahead + 5}&timeoutSeconds=30")
    assert status == 200
    assert loop.time() - started >= 2.9
    (error,) = lines
    assert error["type"] == "ERROR"
    body = error["object"]
    assert (body["code"], body["reason"]) == (504, "Timeout")
    assert body["message"] == f"Timeout: Too large resource version: {ahead + 5}, current: {ahead - 1}"
    assert body["details"]["causes"] == [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]

    def scale(n: int) -> None:
        kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": n})

    loop.call_later(0.5, scale, 2)  # reaches the version asked for: the watch goes on from it
    loop.call_later(1.0, scale, 3)
    loop.call_later(1.5, kube.drop_watches)
    status, lines = await _raw_watch(kube_client, f"resourceVersion={ahead}&timeoutSeconds=30")
    assert [(line["type"], line["object"]["spec"]["replicas"]) for line in lines] == [("MODIFIED", 3)]


async def test_dropped_watch_ends_the_stream(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    w = watch.Watch()
    events = []
    stream = w.stream(client.AppsV1Api(kube_client).list_namespaced_deployment, "llm", timeout_seconds=30)

    async def drop() -> None:
        await kube.wait_for_watchers(1)
        kube.drop_watches()

    dropper = asyncio.create_task(drop())
    async for event in stream:  # ends without error when the server closes the stream (timeout given)
        events.append(event["type"])
    await dropper
    await w.close()
    assert events == ["ADDED"]


async def test_bookmarks_carry_the_resource_version(kube: Emulator, kube_client: client.ApiClient) -> None:
    w = watch.Watch()
    stream = w.stream(
        client.AppsV1Api(kube_client).list_namespaced_deployment, "llm",
        allow_watch_bookmarks=True, timeout_seconds=30,
    )

    async def mark() -> None:
        await kube.wait_for_watchers(1)
        kube.bookmark()

    marker = asyncio.create_task(mark())
    async for event in stream:
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == str(kube.resource_version)
        break
    await marker
    await w.close()


@pytest.mark.looptime
async def test_a_watch_gets_a_bookmark_a_minute_and_one_before_its_deadline_which_ends_it(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """As the watch cache: a bookmark every minute (``defaultBookmarkFrequency``) and one right before the
    deadline; ``timeoutSeconds`` is the stream's whole life, events or not (not a silence that events reset)."""
    kube.add(objects.deployment())
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def scale_at(*times: float) -> None:
        for n, at in enumerate(times, start=2):
            await asyncio.sleep(t0 + at - loop.time())
            kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": n})

    scaler = asyncio.create_task(scale_at(40, 100))
    w = watch.Watch()
    seen = []
    async for event in w.stream(
        client.AppsV1Api(kube_client).list_namespaced_deployment, "llm", resource_version=str(kube.resource_version),
        allow_watch_bookmarks=True, timeout_seconds=150,
    ):
        seen.append((event["type"], round(loop.time() - t0)))
    await scaler
    await w.close()
    assert seen == [("MODIFIED", 40), ("BOOKMARK", 60), ("MODIFIED", 100), ("BOOKMARK", 120), ("BOOKMARK", 150)]


async def test_rbac_denial_has_the_real_message(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    kube.deny("patch", "deployments/scale", namespace="llm")
    apps = client.AppsV1Api(kube_client)
    with pytest.raises(ApiException) as err:
        await apps.patch_namespaced_deployment_scale("tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}})
    assert err.value.status == 403
    assert _status(err.value)["message"] == (
        'deployments.apps "tgi-gemma-deployment" is forbidden: User '
        '"system:serviceaccount:autoscaler:autoscaler" cannot patch resource "deployments/scale" '
        'in API group "apps" in the namespace "llm"'
    )
    await apps.read_namespaced_deployment_scale("tgi-gemma-deployment", "llm")  # get is still allowed


async def test_injected_faults_hit_the_next_requests_only(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    kube.inject(503, "/apis/apps/v1/namespaces/llm/deployments/*", times=2)
    apps = client.AppsV1Api(kube_client)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")
        assert err.value.status == 503
    await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")
    assert [r.status for r in kube.requests] == [503, 503, 200]


@pytest.mark.parametrize(
    ("cleared", "statuses"),
    [
        pytest.param(None, [503, 200, 200], id="all-faults"),
        pytest.param("/apis/apps/v1/namespaces/llm/deployments/*", [503, 200, 200], id="by-path"),
        pytest.param("/apis/other/*", [503, 503, 503], id="another-path-untouched"),
    ],
)
async def test_clear_faults_heals_the_server(
    kube: Emulator, kube_client: client.ApiClient, cleared: str | None, statuses: list[int]
) -> None:
    kube.add(objects.deployment())
    kube.inject(503, "/apis/apps/v1/namespaces/llm/deployments/*", times=1000)
    apps = client.AppsV1Api(kube_client)
    with pytest.raises(ApiException):
        await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")
    assert kube.clear_faults(cleared) == (0 if statuses[1] == 503 else 999)
    for _ in range(2):
        with contextlib.suppress(ApiException):
            await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")
    assert [r.status for r in kube.requests] == statuses


async def test_strict_mode_rejects_and_records_unexpected_writes(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    kube.add(objects.deployment())
    kube.strict = True
    kube.expect_write("PATCH", "/apis/apps/v1/namespaces/llm/deployments/*/scale", times=1)
    apps = client.AppsV1Api(kube_client)
    await apps.patch_namespaced_deployment_scale("tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}})
    with pytest.raises(ApiException):
        await apps.patch_namespaced_deployment_scale("tgi-gemma-deployment", "llm", {"spec": {"replicas": 3}})
    assert len(kube.violations) == 1
    with pytest.raises(AssertionError, match="unexpected writes"):
        kube.check()
    kube.violations.clear()  # this test expected the violation; the fixture would fail on it otherwise


@pytest.mark.parametrize(
    ("write_version", "read_version", "field", "value"),
    [
        pytest.param(
            "v1beta2", "v1beta1", "priorityClassName", "low-priority", id="v1beta2-ref-read-as-v1beta1-name"
        ),
        pytest.param(
            "v1beta1", "v1beta2", "priorityClassRef",
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low-priority"},
            id="v1beta1-name-read-as-v1beta2-ref",
        ),
    ],
)
async def test_kueue_versions_share_storage(
    kube: Emulator, kube_client: client.ApiClient, write_version: str, read_version: str, field: str, value: Any
) -> None:
    kube.add(objects.workload("wl", priority_class="low-priority", priority=10,
                              api_version=f"kueue.x-k8s.io/{write_version}"))
    got = await client.CustomObjectsApi(kube_client).get_namespaced_custom_object(
        "kueue.x-k8s.io", read_version, "llm", "workloads", "wl"
    )
    assert got["apiVersion"] == f"kueue.x-k8s.io/{read_version}"
    assert got["spec"][field] == value


async def test_kueue_s_webhook_guards_an_admitted_workload(kube: Emulator, kube_client: client.ApiClient) -> None:
    """Kueue's validating webhook (``ValidateWorkloadUpdate``): while quota is reserved ``spec.podSets`` may not
    change and ``status.admission`` may be cleared but not edited; ``spec.active`` and metadata are free, which is
    all the controller writes. A denial is relayed as a 403 naming the webhook."""
    kube.add(objects.workload("train"))

    def reserve(obj: dict[str, Any]) -> None:
        obj["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 2}]},
                         "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                         "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}

    kube.modify("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm", reserve)
    custom: Any = client.CustomObjectsApi(kube_client)  # dict bodies and _content_type: beyond the stubs
    args = ("kueue.x-k8s.io", "v1beta2", "llm", "workloads", "train")
    pod_sets = kube.get("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm")["spec"]["podSets"]
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object(
            *args, {"spec": {"podSets": [{**pod_sets[0], "count": 3}]}}, _content_type="application/merge-patch+json")
    assert err.value.status == 403
    assert _status(err.value)["message"] == (
        'admission webhook "vworkload.kb.io" denied the request: spec.podSets: Invalid value: "array": field is '
        "immutable")
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object_status(
            *args, {"status": {"admission": {"clusterQueue": "other"}}}, _content_type="application/merge-patch+json")
    assert err.value.status == 403
    await custom.patch_namespaced_custom_object(
        *args, {"metadata": {"annotations": {"a": "b"}}, "spec": {"active": False}},
        _content_type="application/merge-patch+json")
    await custom.patch_namespaced_custom_object_status(  # Kueue's eviction clears the admission
        *args, {"status": {"admission": None}}, _content_type="application/merge-patch+json")
    assert kube.get("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm")["spec"]["active"] is False


async def test_a_scale_and_a_workload_warn_of_the_fields_the_server_drops(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """The fields of a Scale and of a Workload's spec are known here: any other one is dropped with a Warning
    (fieldValidation Warn, what a client that sends none gets), as a misspelt ``replica`` would be."""
    kube.add(objects.deployment())
    kube.add(objects.workload("train"))
    apps: Any = client.AppsV1Api(kube_client)  # dict bodies and _content_type: beyond the stubs
    custom: Any = client.CustomObjectsApi(kube_client)
    await apps.patch_namespaced_deployment_scale(
        "tgi-gemma-deployment", "llm", {"spec": {"replica": 3}}, _content_type="application/merge-patch+json")
    await custom.patch_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "llm", "workloads", "train", {"spec": {"activ": False}},
        _content_type="application/merge-patch+json")
    assert [r.warnings for r in kube.writes()] == [['unknown field "spec.replica"'], ['unknown field "spec.activ"']]
    assert len(kube.warnings) == 2
    kube.warnings.clear()


async def test_unserved_version_is_not_found(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.unserve("kueue.x-k8s.io", "v1beta2")
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(kube_client).list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "llm", "workloads"
        )
    assert err.value.status == 404
    assert _status(err.value)["message"] == "the server could not find the requested resource"


def test_kueue_helper_tracks_quota_explicitly(kube: Emulator) -> None:
    kueue = Kueue(kube)
    kube.add(objects.cluster_queue())
    kube.add(objects.local_queue())
    job = kube.add(objects.job())
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=job, priority=100))
    kube.add(objects.workload("pod-tgi-1", pods=1, priority=1000))
    assert kueue.admit_pending() == ["pod-tgi-1", "job-finetune-gemma-l4-3316f"]
    assert kueue.free("cluster-queue", objects.GPU) == 0
    cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cluster-queue")
    assert cq["status"]["flavorsReservation"][0]["resources"][0]["total"] == "6"
    kube.modify("kueue.x-k8s.io/v1beta2", "Workload", "job-finetune-gemma-l4-3316f", "llm", spec={"active": False})
    kueue.sync()
    wl = kueue.workload("job-finetune-gemma-l4-3316f")
    assert "admission" not in wl["status"]
    evicted = next(c for c in wl["status"]["conditions"] if c["type"] == "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "Deactivated")
    assert kueue.free("cluster-queue", objects.GPU) == 4


async def test_dry_run_answers_but_stores_nothing(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    rv = kube.resource_version
    apps = client.AppsV1Api(kube_client)
    answer = await apps.patch_namespaced_deployment_scale(
        "tgi-gemma-deployment", "llm", {"spec": {"replicas": 3}}, dry_run="All"
    )
    assert answer.spec.replicas == 3
    assert kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"] == 1
    assert kube.resource_version == rv


@pytest.mark.parametrize(
    ("preconditions", "status"),
    [
        pytest.param({"resourceVersion": "1"}, 409, id="stale-resource-version"),
        pytest.param({"uid": "not-the-uid"}, 409, id="other-uid"),
        pytest.param({}, 200, id="none"),
    ],
)
async def test_delete_preconditions(
    kube: Emulator, kube_client: client.ApiClient, preconditions: dict[str, str], status: int
) -> None:
    kube.add(objects.deployment())
    apps = client.AppsV1Api(kube_client)
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(**{
        "resource_version" if k == "resourceVersion" else k: v for k, v in preconditions.items()
    }))
    if status == 200:
        await apps.delete_namespaced_deployment("tgi-gemma-deployment", "llm", body=body)
    else:
        with pytest.raises(ApiException) as err:
            await apps.delete_namespaced_deployment("tgi-gemma-deployment", "llm", body=body)
        assert err.value.status == status
    assert kube.exists("apps/v1", "Deployment", "tgi-gemma-deployment", "llm") is (status != 200)


async def test_compaction_point_is_configurable(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    first = kube.resource_version
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2})
    second = kube.resource_version
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 3})
    kube.compact(at=second)
    apps = client.AppsV1Api(kube_client)
    w = watch.Watch()
    listing = apps.list_namespaced_deployment
    async for event in w.stream(listing, "llm", resource_version=str(second), timeout_seconds=30):
        assert (event["type"], event["object"].spec.replicas) == ("MODIFIED", 3)
        break
    await w.close()
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        async for _ in w.stream(listing, "llm", resource_version=str(first), timeout_seconds=30):
            pass
    await w.close()
    assert err.value.status == 410


_SA = "system:serviceaccount:autoscaler-system:accel-autoscaler"
_RBAC_DOCS: list[dict[str, Any]] = [
    {"kind": "ClusterRole", "metadata": {"name": "work"}, "rules": [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]},
    ]},
    {"kind": "RoleBinding", "metadata": {"name": "work", "namespace": "llm"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "work"},
     "subjects": [{"kind": "ServiceAccount", "name": "accel-autoscaler", "namespace": "autoscaler-system"}]},
    {"kind": "Role", "metadata": {"name": "lease", "namespace": "autoscaler-system"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["accel-autoscaler"]},
    ]},
    {"kind": "RoleBinding", "metadata": {"name": "lease", "namespace": "autoscaler-system"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
     "subjects": [{"kind": "ServiceAccount", "name": "accel-autoscaler"}]},
    {"kind": "ClusterRole", "metadata": {"name": "quota"}, "rules": [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get"]}]},
    {"kind": "ClusterRoleBinding", "metadata": {"name": "quota"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "quota"},
     "subjects": [{"kind": "ServiceAccount", "name": "accel-autoscaler", "namespace": "autoscaler-system"}]},
    {"kind": "ClusterRoleBinding", "metadata": {"name": "someone-else"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "work"},
     "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": "autoscaler-system"}]},
]


@pytest.mark.parametrize(
    ("verb", "group", "resource", "namespace", "name", "allowed"),
    [
        pytest.param("get", "apps", "deployments", "llm", "d", True, id="rolebinding-namespace"),
        pytest.param("get", "apps", "deployments", "other", "d", False, id="rolebinding-other-namespace"),
        pytest.param("watch", "apps", "deployments", "llm", None, False, id="verb-not-granted"),
        pytest.param("patch", "apps", "deployments/scale", "llm", "d", True, id="subresource"),
        pytest.param("patch", "apps", "deployments", "llm", "d", False, id="subresource-is-not-the-resource"),
        pytest.param("get", "", "deployments", "llm", "d", False, id="api-group"),
        pytest.param("get", "coordination.k8s.io", "leases", "autoscaler-system", "accel-autoscaler", True,
                     id="resource-name"),
        pytest.param("get", "coordination.k8s.io", "leases", "autoscaler-system", "other", False,
                     id="other-resource-name"),
        pytest.param("list", "coordination.k8s.io", "leases", "autoscaler-system", None, False,
                     id="resource-names-never-allow-list"),
        pytest.param("get", "kueue.x-k8s.io", "clusterqueues", None, "cq", True, id="clusterrolebinding"),
        pytest.param("list", "apps", "deployments", None, None, False, id="binding-of-another-subject"),
    ],
)
def test_rbac_authorizes_like_kubernetes(
    verb: str, group: str, resource: str, namespace: str | None, name: str | None, allowed: bool
) -> None:
    assert Rbac(_RBAC_DOCS, _SA).allows(verb, group, resource, namespace, name) is allowed


async def test_enforced_rbac_answers_403_over_http(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    kube.add(objects.deployment(namespace="other"))
    kube.enforce_rbac(_RBAC_DOCS, user=_SA)
    apps = client.AppsV1Api(kube_client)
    assert (await apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")).metadata.name
    with pytest.raises(ApiException) as err:
        await apps.read_namespaced_deployment("tgi-gemma-deployment", "other")
    assert err.value.status == 403
    assert f'User "{_SA}" cannot get resource "deployments"' in _status(err.value)["message"]
    assert kube.rbac_denied == ["get apps/deployments other/tgi-gemma-deployment"]


async def test_scalingpolicy_status_subresource(kube: Emulator, kube_client: client.ApiClient) -> None:
    """The CRD's status subresource as the real server serves it: a write of the object keeps the stored
    status, a /status write changes only the status and not the generation."""
    custom: Any = client.CustomObjectsApi(kube_client)  # the generated stubs omit _content_type
    args = ("autoscaler.dev", "v1alpha1", "llm", "scalingpolicies")
    body = _scaling_policy("p")
    await custom.create_namespaced_custom_object(*args, body)
    await custom.patch_namespaced_custom_object_status(
        *args, "p", {"status": {"reason": "ScaleUp"}, "spec": {"minReplicas": 9}},
        _content_type="application/merge-patch+json")
    obj = kube.get("autoscaler.dev/v1alpha1", "ScalingPolicy", "p", "llm")
    assert obj["status"] == {"reason": "ScaleUp"}
    assert obj["spec"]["minReplicas"] == 1
    assert obj["metadata"]["generation"] == 1
    await custom.patch_namespaced_custom_object(
        *args, "p", {"spec": {"minReplicas": 2}, "status": {"reason": "Nope"}},
        _content_type="application/merge-patch+json")
    obj = kube.get("autoscaler.dev/v1alpha1", "ScalingPolicy", "p", "llm")
    assert obj["status"] == {"reason": "ScaleUp"}
    assert obj["spec"]["minReplicas"] == 2
    assert obj["metadata"]["generation"] == 2


def _scaling_policy(name: str) -> dict[str, Any]:
    """The first ScalingPolicy of policies/recommended.yaml (valid against the CRD), named ``name`` in llm."""
    doc = next(d for d in yaml.safe_load_all((ROOT / "policies" / "recommended.yaml").read_text())
               if d and d.get("kind") == "ScalingPolicy")
    doc["metadata"] = {"name": name, "namespace": "llm"}
    return dict(doc)


async def test_a_custom_resource_is_pruned_and_validated_against_its_crd(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """As apiextensions-apiserver: fields the CRD's structural schema does not declare are dropped without an
    error (a status field the controller writes and the CRD lacks is lost, silently), and a wrong type is 422."""
    custom: Any = client.CustomObjectsApi(kube_client)
    args = ("autoscaler.dev", "v1alpha1", "llm", "scalingpolicies")
    body = _scaling_policy("p")
    body["spec"]["bogus"] = 1
    await custom.create_namespaced_custom_object(*args, body)
    await custom.patch_namespaced_custom_object_status(
        *args, "p", {"status": {"reason": "ScaleUp", "notInTheSchema": 3}},
        _content_type="application/merge-patch+json")
    obj = kube.get("autoscaler.dev/v1alpha1", "ScalingPolicy", "p", "llm")
    assert "bogus" not in obj["spec"]
    assert obj["status"] == {"reason": "ScaleUp"}
    # fieldValidation Warn, the default: dropped with a Warning header each; the fixture fails a test on them.
    assert [r.warnings for r in kube.writes()] == [['unknown field "spec.bogus"'],
                                                   ['unknown field "status.notInTheSchema"']]
    kube.warnings.clear()
    with pytest.raises(ApiException) as info:  # Strict (kubectl's default): refused
        await custom.patch_namespaced_custom_object_status(
            *args, "p", {"status": {"notInTheSchema": 3}, "metadata": {"labelz": {}}},
            _content_type="application/merge-patch+json", field_validation="Strict")
    assert info.value.status == 400
    assert _status(info.value)["message"] == (
        'ScalingPolicy in version "v1alpha1" cannot be handled as a ScalingPolicy: strict decoding error: '
        'unknown field "metadata.labelz", unknown field "status.notInTheSchema"')
    with pytest.raises(ApiException) as info:
        await custom.patch_namespaced_custom_object_status(
            *args, "p", {"status": {"currentReplicas": "three"}}, _content_type="application/merge-patch+json")
    assert info.value.status == 422
    assert "currentReplicas" in _status(info.value)["message"]


@pytest.mark.parametrize(
    ("path", "body", "accepted"),
    [
        pytest.param("events.k8s.io/v1", {"eventTime": "2026-01-01T00:00:00Z"}, False, id="event-time-in-seconds"),
        pytest.param("events.k8s.io/v1", {"eventTime": "2026-01-01T00:00:00.123Z"}, False,
                     id="event-time-in-milliseconds"),
        pytest.param("events.k8s.io/v1", {}, True, id="event-time-in-microseconds"),
        pytest.param("coordination.k8s.io/v1", {"renewTime": "2026-01-01T00:00:00Z"}, False, id="lease-in-seconds"),
        pytest.param("coordination.k8s.io/v1", {"renewTime": "2026-01-01T00:00:00.000001+01:00"}, True,
                     id="lease-in-microseconds"),
    ],
)
async def test_micro_times_decode_only_with_six_fractional_digits(
    kube: Emulator, kube_client: client.ApiClient, path: str, body: dict[str, Any], accepted: bool
) -> None:
    """``metav1.MicroTime`` decodes with Go's ``RFC3339Micro`` layout, which takes exactly six fractional digits:
    an Event's ``eventTime`` or a Lease's ``renewTime`` in whole seconds fails the body's decoding (400)."""
    send: Any  # dict bodies: beyond the stubs
    if path == "events.k8s.io/v1":
        obj = _event(**body)
        send = client.EventsV1Api(kube_client).create_namespaced_event
    else:
        obj = {"apiVersion": path, "kind": "Lease", "metadata": {"name": "l", "namespace": "llm"},
               "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, **body}}
        send = client.CoordinationV1Api(kube_client).create_namespaced_lease
    if accepted:
        await send("llm", obj)
        return
    with pytest.raises(ApiException) as info:
        await send("llm", obj)
    assert info.value.status == 400
    assert "parsing time" in _status(info.value)["message"]


def _event(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "llm"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "autoscaler.dev/controller",
        "reportingInstance": "pod-a", "action": "scale", "reason": "ScaleUp", "note": "why", "type": "Normal",
        "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "llm", "name": "d"},
    }
    body.update(change)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"reportingInstance": None}, "reportingInstance", id="instance-required"),
        pytest.param({"reportingInstance": "x" * 129}, "reportingInstance", id="instance-over-128-bytes"),
        pytest.param({"reportingController": "not a name"}, "reportingController", id="controller-qualified-name"),
        pytest.param({"eventTime": None}, "eventTime", id="event-time-required"),
        pytest.param({"type": "Info"}, "type", id="type-normal-or-warning"),
        pytest.param({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}}, "series.count",
                     id="series-count-at-least-2"),
        pytest.param({"deprecatedCount": 3}, "count: Invalid value", id="deprecated-fields-unset"),
        pytest.param({"regarding": {"kind": "Node", "name": "n"}}, "involvedObject.namespace",
                     id="cluster-scoped-regarding-only-in-default-or-kube-system"),
        pytest.param({"note": "é" * 513}, "message", id="note-over-1024-bytes"),
    ],
)
async def test_events_v1_are_validated_as_the_server_does(
    kube: Emulator, kube_client: client.ApiClient, change: dict[str, Any], field: str
) -> None:
    events: Any = client.EventsV1Api(kube_client)
    with pytest.raises(ApiException) as info:
        await events.create_namespaced_event("llm", _event(**change))
    assert info.value.status == 422
    assert field in _status(info.value)["message"]


def _core_event(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "llm"},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "llm", "name": "d"},
        "reason": "ScaleUp", "message": "why", "type": "Normal", "count": 1, "source": {"component": "c"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    body.update(change)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param({}, None, id="old-style-in-its-object-s-namespace"),
        pytest.param({"involvedObject": {"kind": "Deployment", "namespace": "other", "name": "d"}},
                     "involvedObject.namespace", id="old-style-namespace-must-match"),
        pytest.param({"involvedObject": {"kind": "Node", "name": "n"}}, "involvedObject.namespace",
                     id="old-style-cluster-scoped-only-in-default"),
        pytest.param({"involvedObject": {"kind": "Node", "name": "n"}, "metadata": {"name": "e", "namespace":
                     "default"}}, None, id="old-style-cluster-scoped-in-default"),
        pytest.param({"eventTime": "2026-01-01T00:00:00.000000Z"}, "reportingController: Required value",
                     id="with-event-time-needs-the-reporting-fields"),
        pytest.param({"eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "autoscaler.dev/c",
                      "reportingInstance": "pod-a", "action": "scale"}, None,
                     id="with-event-time-and-the-reporting-fields"),
        pytest.param({"reason": "x" * 200, "message": "y" * 5000}, None, id="old-style-has-no-length-limits"),
    ],
)
async def test_core_v1_events_are_held_to_the_legacy_rules(
    kube: Emulator, kube_client: client.ApiClient, change: dict[str, Any], problem: str | None
) -> None:
    """``legacyValidateEvent`` (k8s.io/kubernetes pkg/apis/core/validation/events.go) is all a core v1 Event is
    held to: without an ``eventTime`` its namespace must equal ``involvedObject.namespace`` (an object without one:
    the Event in "default"); with one, the reporting fields are required as through events.k8s.io/v1."""
    core: Any = client.CoreV1Api(kube_client)
    body = _core_event(**change)
    namespace = body["metadata"]["namespace"]
    if problem is None:
        await core.create_namespaced_event(namespace, body)
        return
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_event(namespace, body)
    assert info.value.status == 422
    assert problem in _status(info.value)["message"]


async def test_an_events_v1_update_may_change_only_its_series(kube: Emulator, kube_client: client.ApiClient) -> None:
    events: Any = client.EventsV1Api(kube_client)
    await events.create_namespaced_event("llm", _event())
    merge = "application/merge-patch+json"
    series = {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}
    await events.patch_namespaced_event("e", "llm", series, _content_type=merge)
    with pytest.raises(ApiException) as info:
        await events.patch_namespaced_event("e", "llm", {"note": "another"}, _content_type=merge)
    assert info.value.status == 422
    assert "message: field is immutable" in _status(info.value)["message"]  # the internal name, as the server


# --- kube3: third-party CRDs, no-op writes, dryRun, metadata, Warning headers -------------------------------------

KUEUE_V1BETA2 = ("kueue.x-k8s.io", "v1beta2", "llm", "workloads")
MERGE = "application/merge-patch+json"


async def test_third_party_crds_prune_the_fields_they_do_not_declare(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """Kueue's, LeaderWorkerSet's and JobSet's structural schemas (``tests.kube.crds.FIELDS``, read from their Go
    types) prune what they do not declare, at every level listed: a misspelt field is a Warning and is not stored,
    on the main resource and on ``/status``. A lenient server would store it and a controller reading it back
    would believe a field no real cluster keeps."""
    kube.add(objects.leader_worker_set())
    kube.add(objects.cluster_queue())
    custom: Any = client.CustomObjectsApi(kube_client)  # dict bodies and _content_type: beyond the stubs
    await custom.patch_namespaced_custom_object(
        *LWS, "jetstream", {"spec": {"leaderWorkerTemplate": {"sise": 8}}}, _content_type=MERGE)
    await custom.patch_cluster_custom_object_status(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", "cluster-queue",
        {"status": {"flavorsReservation": [{"name": "default-flavor", "resources": [
            {"name": objects.GPU, "total": "2", "borowed": "0"}]}]}}, _content_type=MERGE)
    assert [r.warnings for r in kube.writes()] == [
        ['unknown field "spec.leaderWorkerTemplate.sise"'],
        ['unknown field "status.flavorsReservation[0].resources[0].borowed"'],
    ]
    kube.warnings.clear()
    lws = kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")
    assert "sise" not in lws["spec"]["leaderWorkerTemplate"]
    cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cluster-queue")
    assert cq["status"]["flavorsReservation"][0]["resources"][0] == {"name": objects.GPU, "total": "2"}


def test_a_fixture_may_not_write_what_a_real_crd_prunes_or_refuses(kube: Emulator) -> None:
    """A test's stand-in for Kueue or the LWS controller writes through the API server in a real cluster too: a
    field the CRD does not declare, or a Workload its rules refuse, is the test's mistake and raises."""
    lws = objects.leader_worker_set()
    lws["status"]["readyGroups"] = 1
    with pytest.raises(ValueError, match=r"does not declare .*: status\.readyGroups"):
        kube.add(lws)
    kube.add(objects.workload("train"))
    with pytest.raises(ValueError, match="priority should not be nil"):
        kube.modify("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm", spec={"priorityClassRef": {
            "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"}})


def _reserve(obj: dict[str, Any]) -> None:
    condition = {"status": "True", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    obj["status"] = {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 2}]},
        "conditions": [{"type": "QuotaReserved", "reason": "QuotaReserved", **condition},
                       {"type": "Admitted", "reason": "Admitted", **condition}],
    }


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        pytest.param({"spec": {"queueName": "other"}},
                     '<nil>: Invalid value: "object": queueName is immutable while workload quota reserved',
                     id="queueName-while-reserved"),
        pytest.param({"spec": {"priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                                    "name": "high"}, "priority": 5}},
                     '<nil>: Invalid value: "object": priorityClassRef is immutable while workload quota reserved',
                     id="priority-class-appears-while-reserved"),
        pytest.param({"spec": {"maximumExecutionTimeSeconds": 600}},
                     '<nil>: Invalid value: "object": maximumExecutionTimeSeconds is immutable while workload quota '
                     "reserved", id="max-execution-time-while-admitted"),
        pytest.param({"status": {"admission": {"podSetAssignments": [{"name": "main"}, {"name": "extra"}]}}},
                     '<nil>: Invalid value: "object": podSetAssignments must have the same number of podSets as the '
                     "spec", id="assignments-per-podset"),
    ],
)
async def test_kueue_s_workload_crd_rules_refuse_what_kueue_refuses(
    kube: Emulator, kube_client: client.ApiClient, patch: dict[str, Any], message: str
) -> None:
    """The Workload CRD's CEL rules (kueue ``apis/kueue/v1beta2/workload_types.go``, ``x-kubernetes-validations``
    on ``Workload``): while quota is reserved its queue, its priority class and (admitted) its execution limit stay,
    and an admission has one assignment per podSet. A refusal is 422 ``Invalid`` with the rule's message at the
    root's path ``<nil>``. What the controller writes (``spec.active`` and annotations, with the version read)
    passes."""
    kube.webhooks.clear()  # the CRD's own rules, not Kueue's webhook (``test_kueue_s_webhook_guards_...``)
    kube.add(objects.workload("train"))
    kube.modify("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm", _reserve)
    custom: Any = client.CustomObjectsApi(kube_client)
    write = custom.patch_namespaced_custom_object_status if "status" in patch else custom.patch_namespaced_custom_object
    with pytest.raises(ApiException) as err:
        await write(*KUEUE_V1BETA2, "train", patch, _content_type=MERGE)
    assert err.value.status == 422
    assert _status(err.value)["message"] == f'Workload.kueue.x-k8s.io "train" is invalid: {message}'
    rv = kube.get("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm")["metadata"]["resourceVersion"]
    ours = {"metadata": {"resourceVersion": rv, "annotations": {"autoscaler.dev/deactivated-by": "llm/tgi"}},
            "spec": {"active": False}}
    await custom.patch_namespaced_custom_object(*KUEUE_V1BETA2, "train", ours, _content_type=MERGE)
    assert kube.get("kueue.x-k8s.io/v1beta2", "Workload", "train", "llm")["spec"]["active"] is False


async def test_a_workload_created_with_a_priority_class_needs_its_priority(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """``WorkloadSpec``'s rule ``!has(self.priorityClassRef) || has(self.priority)`` (v1beta1: with
    ``priorityClassName``), and ``podSets`` between 1 and 8 items, are checked on create."""
    custom: Any = client.CustomObjectsApi(kube_client)
    wl = objects.workload("train", priority_class="low")
    with pytest.raises(ApiException) as err:
        await custom.create_namespaced_custom_object(*KUEUE_V1BETA2, wl)
    assert _status(err.value)["message"] == (
        'Workload.kueue.x-k8s.io "train" is invalid: spec: Invalid value: "object": priority should not be nil when '
        "priorityClassRef is set")
    wl["spec"]["priority"], wl["spec"]["podSets"] = 10, []
    with pytest.raises(ApiException) as err:
        await custom.create_namespaced_custom_object(*KUEUE_V1BETA2, wl)
    assert err.value.status == 422
    assert "spec.podSets in body should have at least 1 items" in _status(err.value)["message"]


async def test_a_write_that_changes_nothing_keeps_its_resource_version_and_tells_no_watch(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """etcd3's ``GuaranteedUpdate`` stores nothing when the updated object equals the stored one: the answer keeps
    the resourceVersion and no watch hears a MODIFIED. A server that bumped it would wake every watcher of the
    object (and a controller watching what it writes would wake itself) where a real one stays quiet."""
    kube.add(objects.deployment(annotations={"a": "1"}))
    before = kube.resource_version
    apps: Any = client.AppsV1Api(kube_client)
    answer = await apps.patch_namespaced_deployment(
        "tgi-gemma-deployment", "llm", {"metadata": {"annotations": {"a": "1"}}}, _content_type=MERGE)
    assert answer.metadata.resource_version == str(before)
    assert kube.resource_version == before
    changed = await apps.patch_namespaced_deployment(
        "tgi-gemma-deployment", "llm", {"metadata": {"annotations": {"a": "2"}}}, _content_type=MERGE)
    assert int(changed.metadata.resource_version) == before + 1
    events = []
    async with watch.Watch().stream(apps.list_namespaced_deployment, "llm", resource_version=str(before),
                                    timeout_seconds=1) as stream:
        async for event in stream:
            events.append(event["type"])
    assert events == ["MODIFIED"]


async def test_dry_run_takes_only_all(kube: Emulator, kube_client: client.ApiClient) -> None:
    """``dryRun`` has one value, ``All`` (apimachinery ``ValidatePatchOptions``): any other is 422 and nothing is
    written. A server that ignored an unknown value would store what the client meant to try."""
    kube.add(objects.deployment())
    api: Any = client.ApiClient(client.Configuration(host=kube.url))
    try:
        with pytest.raises(ApiException) as err:
            await api.call_api(
                "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale", "PATCH",
                query_params=[("dryRun", "true")], header_params={"Content-Type": MERGE},
                body={"spec": {"replicas": 5}}, response_types_map={200: "object"}, _return_http_data_only=True)
        await api.call_api(
            "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale", "PATCH",
            query_params=[("dryRun", "All")], header_params={"Content-Type": MERGE},
            body={"spec": {"replicas": 4}}, response_types_map={200: "object"}, _return_http_data_only=True)
    finally:
        await api.close()
    assert err.value.status == 422
    assert _status(err.value)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["true"]: supported values: "All"')
    assert kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        pytest.param({"annotations": {"autoscaler.dev/held for": "x"}},
                     'metadata.annotations: Invalid value: "autoscaler.dev/held for": name part must consist of',
                     id="annotation-key"),
        pytest.param({"annotations": {"autoscaler.dev/x": "y" * (256 * 1024)}},
                     "metadata.annotations: Too long: must have at most 262144 bytes", id="annotations-256KiB"),
        pytest.param({"labels": {"autoscaler.dev/owner": "llm/tgi"}},
                     'metadata.labels: Invalid value: "llm/tgi": a valid label must be', id="label-value"),
    ],
)
async def test_labels_and_annotations_are_validated(
    kube: Emulator, kube_client: client.ApiClient, metadata: dict[str, Any], message: str
) -> None:
    """``ValidateObjectMeta`` on every kind: label and annotation keys are qualified names, annotations hold at most
    256 KiB, label values at most 63 characters of ``[-A-Za-z0-9_.]``. Every annotation the controller writes
    (claims, deactivation records, checkpoint requests, HPA floors) passes through this in the suite."""
    kube.add(objects.deployment())
    apps: Any = client.AppsV1Api(kube_client)
    with pytest.raises(ApiException) as err:
        await apps.patch_namespaced_deployment("tgi-gemma-deployment", "llm", {"metadata": metadata},
                                               _content_type=MERGE)
    assert err.value.status == 422
    assert _status(err.value)["message"].startswith(
        f'Deployment.apps "tgi-gemma-deployment" is invalid: {message}')


async def test_warning_headers_are_written_as_the_server_writes_them(kube: Emulator) -> None:
    """``Warning: 299 - "<text>"`` with the text's quotes escaped (apimachinery ``NewWarningHeader``), and a
    deprecated CRD version warns on every request with apiextensions-apiserver's default text."""
    kube.add(objects.workload("train"))
    kube.deprecate("kueue.x-k8s.io", "v1beta1")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{kube.url}/apis/kueue.x-k8s.io/v1beta1/namespaces/llm/workloads/train") as got:
            assert got.status == 200
            assert got.headers.getall("Warning") == [
                '299 - "kueue.x-k8s.io/v1beta1 Workload is deprecated; use kueue.x-k8s.io/v1beta2 Workload"']
        async with session.patch(f"{kube.url}/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/workloads/train",
                                 json={"spec": {"activ": False}}, headers={"Content-Type": MERGE}) as got:
            assert got.headers.getall("Warning") == ['299 - "unknown field \\"spec.activ\\""']
    kube.warnings.clear()


async def test_names_are_dns_subdomains_and_an_hpa_s_bounds_are_checked(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """Every kind served here names its objects with ``NameIsDNSSubdomain`` (422 otherwise), Events included; an
    HPA's ``minReplicas`` is at least 1 and at most ``maxReplicas`` (``validateHorizontalPodAutoscalerSpec``),
    which the controller's floor must respect."""
    events: Any = client.EventsV1Api(kube_client)
    with pytest.raises(ApiException) as err:
        await events.create_namespaced_event("llm", {
            "metadata": {"name": "tgi-.1f2e", "namespace": "llm"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "autoscaler.dev/controller", "reportingInstance": "pod-a", "action": "scale",
            "reason": "ScaleUp", "type": "Normal", "regarding": {"namespace": "llm"}})
    assert err.value.status == 422
    assert _status(err.value)["message"].startswith(
        'Event.events.k8s.io "tgi-.1f2e" is invalid: metadata.name: Invalid value: "tgi-.1f2e": a lowercase RFC 1123 '
        "subdomain must consist of")
    kube.add(objects.hpa("tgi-hpa", min_replicas=1, max_replicas=3))
    autoscaling: Any = client.AutoscalingV2Api(kube_client)
    with pytest.raises(ApiException) as err:
        await autoscaling.patch_namespaced_horizontal_pod_autoscaler(
            "tgi-hpa", "llm", {"spec": {"minReplicas": 4}}, _content_type=MERGE)
    assert _status(err.value)["message"] == (
        'HorizontalPodAutoscaler.autoscaling "tgi-hpa" is invalid: spec.maxReplicas: Invalid value: 3: must be '
        "greater than or equal to `minReplicas`")


# --- audit4: third-party CRDs' defaults, types, enums and required fields ------------------------------------------


async def test_third_party_crds_default_what_their_schemas_default(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """apiextensions-apiserver fills a CRD's ``default``s in on every write: an LWS created without ``replicas`` or
    ``size`` has 1 of each (and its Scale says 1, not 0), a Workload without ``active`` is active, a podSet without
    ``count`` counts 1, a JobSet's replicated job without ``replicas`` has 1."""
    lws = objects.leader_worker_set()
    del lws["spec"]["replicas"], lws["spec"]["leaderWorkerTemplate"]["size"]
    kube.add(lws)
    stored = kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")
    assert (stored["spec"]["replicas"], stored["spec"]["leaderWorkerTemplate"]["size"]) == (1, 1)
    assert stored["spec"]["startupPolicy"] == "LeaderCreated"
    scale = await client.CustomObjectsApi(kube_client).get_namespaced_custom_object_scale(*LWS, "jetstream")
    assert scale["spec"]["replicas"] == 1
    wl = objects.workload("train")
    del wl["spec"]["podSets"][0]["count"]
    wl["spec"].pop("active", None)
    custom: Any = client.CustomObjectsApi(kube_client)
    created = await custom.create_namespaced_custom_object(*KUEUE_V1BETA2, wl)
    assert created["spec"]["active"] is True
    assert created["spec"]["podSets"][0]["count"] == 1
    # A merge patch that deletes a defaulted field gets the default back, as the server re-defaults the result.
    patched = await custom.patch_namespaced_custom_object(*KUEUE_V1BETA2, "train", {"spec": {"active": None}},
                                                          _content_type=MERGE)
    assert patched["spec"]["active"] is True
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": "llm"},
              "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {}}}]}}
    created = await custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "llm", "jobsets", jobset)
    assert created["spec"]["replicatedJobs"][0]["replicas"] == 1


def _lws_without(path: str) -> dict[str, Any]:
    lws = objects.leader_worker_set()
    *parents, last = path.split(".")
    node = lws
    for part in parents:
        node = node[part]
    del node[last]
    return lws


@pytest.mark.parametrize(
    ("plural", "body", "message"),
    [
        pytest.param("workloads", {"spec": {"active": "false"}},
                     'spec.active: Invalid value: "string": spec.active in body must be of type boolean: "string"',
                     id="workload-active-is-a-boolean"),
        pytest.param("workloads", {"spec": {"podSets": [{"name": "main", "count": -1, "template": {"spec": {}}}]}},
                     "spec.podSets[0].count: Invalid value: -1: spec.podSets[0].count in body should be greater than "
                     "or equal to 0", id="podset-count-not-negative"),
        pytest.param("workloads", {"spec": {"podSets": [{"name": "main", "count": "2", "template": {"spec": {}}}]}},
                     "spec.podSets[0].count in body must be of type integer", id="podset-count-is-an-integer"),
        pytest.param("workloads", {"spec": {"podSets": [{"name": "main", "count": 1}]}},
                     "spec.podSets[0].template: Required value", id="podset-template-required"),
        pytest.param("workloads", {"status": {"conditions": [{
                         "type": "Admitted", "status": "Yes", "reason": "R", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                     'status.conditions[0].status: Unsupported value: "Yes"', id="condition-status-enum"),
        pytest.param("workloads", {"status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "R"}]}},
                     "status.conditions[0].message: Required value", id="condition-fields-required"),
        pytest.param("leaderworkersets", {"spec": {"startupPolicy": "Eager"}},
                     'spec.startupPolicy: Unsupported value: "Eager"', id="lws-startup-policy-enum"),
        pytest.param("leaderworkersets", {"spec": {"replicas": 2.5}},
                     "spec.replicas in body must be of type integer", id="lws-replicas-is-an-integer"),
        pytest.param("clusterqueues", {"spec": {"resourceGroups": [{"coveredResources": [objects.GPU], "flavors": [
                         {"name": "f", "resources": [{"name": objects.GPU, "nominalQuota": "six"}]}]}]}},
                     "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota in body should match",
                     id="nominal-quota-is-a-quantity"),
        pytest.param("jobsets", {"spec": {"suspend": "true"}},
                     "spec.suspend in body must be of type boolean", id="jobset-suspend-is-a-boolean"),
    ],
)
async def test_third_party_crds_refuse_wrong_types_enums_and_missing_fields(
    kube: Emulator, kube_client: client.ApiClient, plural: str, body: dict[str, Any], message: str
) -> None:
    """The CRDs' structural schemas (kubebuilder markers: types, enums, minimums, required fields) refuse a write
    that breaks them with 422 ``Invalid`` and apiextensions-apiserver's text, whoever writes it; a test fixture that
    breaks them raises. What the controller writes (``spec.active`` true/false, annotations, ``/scale``) passes."""
    kube.webhooks.clear()
    kube.add(objects.workload("train"))
    kube.add(objects.leader_worker_set())
    kube.add(objects.cluster_queue())
    kube.add({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": "llm"},
              "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {}}}]}})
    where = {"workloads": (*KUEUE_V1BETA2, "train"), "leaderworkersets": (*LWS, "jetstream"),
             "jobsets": ("jobset.x-k8s.io", "v1alpha2", "llm", "jobsets", "js")}
    custom: Any = client.CustomObjectsApi(kube_client)
    if plural == "clusterqueues":
        write = functools.partial(custom.patch_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "clusterqueues",
                                  "cluster-queue")
    elif "status" in body:
        write = functools.partial(custom.patch_namespaced_custom_object_status, *where[plural])
    else:
        write = functools.partial(custom.patch_namespaced_custom_object, *where[plural])
    with pytest.raises(ApiException) as info:
        await write(body, _content_type=MERGE)
    assert info.value.status == 422
    assert message in _status(info.value)["message"]
    with pytest.raises(ValueError, match="schema refuses"):
        kube.add(_lws_without("spec.leaderWorkerTemplate.workerTemplate"))
    # The controller's own writes pass.
    await custom.patch_namespaced_custom_object(*KUEUE_V1BETA2, "train", {"spec": {"active": False}},
                                                _content_type=MERGE)
    await custom.patch_namespaced_custom_object_scale(*LWS, "jetstream", {"spec": {"replicas": 3}},
                                                      _content_type=MERGE)


def _jobset(*, suspend: bool) -> dict[str, Any]:
    pod = {"metadata": {"labels": {"app": "train"}}, "spec": {"containers": [objects.container()]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "llm"},
            "spec": {"suspend": suspend, "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"template": pod}}}]}}


@pytest.mark.parametrize(
    ("target", "patch", "denial"),
    [
        pytest.param("lws", {"metadata": {"annotations": {"autoscaler.dev/managed-by": "llm/p"}}}, None,
                     id="lws-claim-annotation-passes"),
        pytest.param("lws", {"spec": {"replicas": -1}}, "spec.replicas: Invalid value: -1: replicas must be equal or "
                     "greater than 0", id="lws-negative-replicas"),
        pytest.param("lws", {"spec": {"leaderWorkerTemplate": {"subGroupPolicy": {"subGroupSize": 2}}}},
                     "subGroupSize: Invalid value", id="lws-subgroup-size-immutable"),
        pytest.param("jobset", {"metadata": {"annotations": {"autoscaler.dev/checkpoint-requested": "now"}}}, None,
                     id="jobset-checkpoint-annotation-passes"),
        pytest.param("jobset", {"spec": {"replicatedJobs": [{"name": "workers", "replicas": 3, "template": {
                     "spec": {"template": {"spec": {"containers": [objects.container()]}}}}}]}},
                     'spec.replicatedJobs: Invalid value: "array": field is immutable',
                     id="jobset-replicated-jobs-immutable"),
        pytest.param("suspended-jobset", {"spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                     "spec": {"template": {"metadata": {"labels": {"app": "train"}}, "spec": {
                         "containers": [objects.container()], "nodeSelector": {"pool": "a"}}}}}}]}}, None,
                     id="suspended-jobset-takes-kueue-s-node-selector"),
    ],
)
async def test_lws_and_jobset_webhooks_refuse_what_theirs_refuse(
    kube: Emulator, kube_client: client.ApiClient, target: str, patch: dict[str, Any], denial: str | None
) -> None:
    """The LeaderWorkerSet and JobSet validating webhooks (``vleaderworkerset.kb.io``, ``vjobset.kb.io``) on an
    update: what the controller writes there (an annotation: its claim on an LWS, a checkpoint request on a JobSet)
    passes; a change their rules forbid is a 403 "admission webhook ... denied the request". A ``/scale`` write does
    not pass through the LWS webhook."""
    custom: Any = client.CustomObjectsApi(kube_client)
    if target == "lws":
        kube.add(objects.leader_worker_set())
        where: tuple[str, ...] = (*LWS, "jetstream")
    else:
        kube.add(_jobset(suspend=target.startswith("suspended")))
        where = ("jobset.x-k8s.io", "v1alpha2", "llm", "jobsets", "train")
    if denial is None:
        await custom.patch_namespaced_custom_object(*where, patch, _content_type=MERGE)
    else:
        with pytest.raises(ApiException) as info:
            await custom.patch_namespaced_custom_object(*where, patch, _content_type=MERGE)
        assert info.value.status == 403
        message = _status(info.value)["message"]
        assert message.startswith('admission webhook "v')
        assert "denied the request: " in message
        assert denial in message
    if target == "lws":
        await custom.patch_namespaced_custom_object_scale(*LWS, "jetstream", {"spec": {"replicas": 0}},
                                                          _content_type=MERGE)
