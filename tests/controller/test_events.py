"""Kubernetes Events: the right API, path and body; repeats aggregated into a series; failures never raise."""

from __future__ import annotations

import time

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from autoscaler.controller.config import EventsConfig
from autoscaler.controller.events import EventRecorder, ObjectRef
from tests.kube.emulator import Emulator

TARGET = ObjectRef("apps/v1", "Deployment", "llm", "tgi-gemma-deployment", "uid-1")


def recorder(api: client.ApiClient, api_version: str = "events.k8s.io/v1", errors: list[int] | None = None
             ) -> EventRecorder:
    config = EventsConfig.model_validate({"api": api_version})
    return EventRecorder(api, config=config, instance="pod-a", wall=time.time,
                         on_error=(lambda: errors.append(1)) if errors is not None else None)


async def test_events_v1_create_then_series(kube: Emulator, kube_client: client.ApiClient) -> None:
    rec = recorder(kube_client)
    for _ in range(3):
        await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="queue 30 > 10/replica: 1 -> 3",
                         action="scale")
    writes = kube.writes()
    assert [(w.method, w.path.rsplit("/", 1)[0] if w.method == "PATCH" else w.path) for w in writes] == [
        ("POST", "/apis/events.k8s.io/v1/namespaces/llm/events"),
        ("PATCH", "/apis/events.k8s.io/v1/namespaces/llm/events"),
        ("PATCH", "/apis/events.k8s.io/v1/namespaces/llm/events"),
    ]
    assert writes[1].content_type == "application/merge-patch+json"
    body = writes[0].body
    assert body["reason"] == "ScaleUp"
    assert body["type"] == "Normal"
    assert body["action"] == "scale"
    assert body["regarding"] == {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "llm",
                                 "name": "tgi-gemma-deployment", "uid": "uid-1"}
    assert body["reportingController"] == "autoscaler.dev/controller"
    assert body["reportingInstance"] == "pod-a"
    (event,) = kube.list("events.k8s.io/v1", "Event", "llm")
    assert event["series"]["count"] == 3
    assert event["note"] == "queue 30 > 10/replica: 1 -> 3"


async def test_a_different_message_is_a_new_event(kube: Emulator, kube_client: client.ApiClient) -> None:
    rec = recorder(kube_client)
    await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="1 -> 2", action="scale")
    await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="2 -> 3", action="scale")
    assert len(kube.list("events.k8s.io/v1", "Event", "llm")) == 2


async def test_core_v1_events_count_repeats(kube: Emulator, kube_client: client.ApiClient) -> None:
    rec = recorder(kube_client, "v1")
    for _ in range(2):
        await rec.record(TARGET, type_="Warning", reason="MetricsUnknown", message="holding 1", action="scale")
    assert [w.path.split("/events")[0] for w in kube.writes()] == ["/api/v1/namespaces/llm"] * 2
    (event,) = kube.list("v1", "Event", "llm")
    assert event["count"] == 2
    assert event["involvedObject"]["name"] == "tgi-gemma-deployment"
    assert event["type"] == "Warning"
    assert event["message"] == "holding 1"


async def test_an_expired_event_starts_a_new_series(kube: Emulator, kube_client: client.ApiClient) -> None:
    rec = recorder(kube_client)
    await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="m", action="scale")
    (event,) = kube.list("events.k8s.io/v1", "Event", "llm")
    kube.remove("events.k8s.io/v1", "Event", event["metadata"]["name"], "llm")  # the 1 h event TTL
    await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="m", action="scale")
    assert len(kube.list("events.k8s.io/v1", "Event", "llm")) == 1


@pytest.mark.parametrize("code", [pytest.param(403, id="rbac-forbidden"), pytest.param(500, id="server-error")])
async def test_failures_are_counted_not_raised(kube: Emulator, kube_client: client.ApiClient, code: int) -> None:
    errors: list[int] = []
    rec = recorder(kube_client, errors=errors)
    kube.inject(code, "/apis/events.k8s.io/v1/namespaces/llm/events", times=1)
    await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="m", action="scale")
    assert errors == [1]
    assert kube.list("events.k8s.io/v1", "Event", "llm") == []


@pytest.mark.parametrize(
    "message",
    [
        pytest.param("x" * 5000, id="ascii"),
        # 1,026 bytes in 1,013 characters: the case cut by characters sent past the limit.
        pytest.param("é" * 13 + "x" * 1000, id="two-byte-characters-under-1024-chars"),
        pytest.param("x" * 1020 + "€" * 10, id="three-byte-character-across-the-cut"),
    ],
)
async def test_long_messages_are_cut_to_the_api_limit_in_bytes(
    kube: Emulator, kube_client: client.ApiClient, message: str
) -> None:
    await recorder(kube_client).record(TARGET, type_="Normal", reason="ScaleUp", message=message, action="s")
    (event,) = kube.list("events.k8s.io/v1", "Event", "llm")
    note = event["note"]
    assert len(note.encode()) <= 1024
    assert len(note.encode()) >= 1024 - 3 - 2  # cut at most one character short of the limit
    assert note.endswith("…")
    assert message.startswith(note[:-1])


async def test_a_long_pod_name_still_reports(kube: Emulator, kube_client: client.ApiClient) -> None:
    """The instance is the pod name (up to 253 characters); events.k8s.io/v1 refuses a ``reportingInstance`` over
    128 bytes with 422, and every Event of the controller would be lost. It is cut to the limit."""
    errors: list[int] = []
    config = EventsConfig.model_validate({"api": "events.k8s.io/v1"})
    rec = EventRecorder(kube_client, config=config, instance="tgi-autoscaler-" + "x" * 200, wall=time.time,
                        on_error=lambda: errors.append(1))
    for _ in range(2):
        await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="queue 30 > 10/replica: 1 -> 3",
                         action="scale")
    assert errors == []
    (event,) = kube.list("events.k8s.io/v1", "Event", "llm")
    assert event["reportingInstance"] == ("tgi-autoscaler-" + "x" * 200)[:128]
    assert event["series"]["count"] == 2


@pytest.mark.parametrize("api_version", ["events.k8s.io/v1", "v1"])
async def test_an_event_of_a_long_named_object_has_a_valid_name(
    kube: Emulator, kube_client: client.ApiClient, api_version: str
) -> None:
    """An Event's name is ``<object name>.<hash>``, a DNS subdomain like every name (the server answers 422
    otherwise). An object name may be 253 characters: cut to 200, it may end in ``-`` or ``.``, and ``x-.<hash>``
    is no subdomain, so every Event of that object would be lost. The cut drops a trailing ``-`` or ``.``."""
    errors: list[int] = []
    long_named = ObjectRef("apps/v1", "Deployment", "llm", "a" * 199 + "-" + "b" * 53, "uid-2")
    await recorder(kube_client, api_version, errors).record(long_named, type_="Normal", reason="ScaleUp",
                                                            message="1 -> 2", action="scale")
    assert errors == []
    (event,) = kube.list(api_version if api_version != "v1" else "v1", "Event", "llm")
    assert event["metadata"]["name"].startswith("a" * 199 + ".")


async def test_a_refused_event_is_logged_with_the_server_s_message(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """An Event the server refuses is counted and logged, never raised; the log names what the server said (the
    authorizer's verb and resource here), not only the HTTP reason phrase."""
    kube.deny("create", "events")
    errors: list[int] = []
    config = EventsConfig.model_validate({"api": "events.k8s.io/v1"})
    rec = EventRecorder(kube_client, config=config, instance="pod-a", wall=time.time, on_error=lambda: errors.append(1))
    with capture_logs() as logs:
        await rec.record(TARGET, type_="Normal", reason="ScaleUp", message="queue 30", action="scale")
    assert errors == [1]
    (log,) = [e for e in logs if e["event"] == "event_write_failed"]
    assert log["status"] == 403
    assert log["error"] == (
        '403 Forbidden: events.events.k8s.io is forbidden: User "system:serviceaccount:autoscaler:autoscaler" '
        'cannot create resource "events" in API group "events.k8s.io" in the namespace "llm"')
