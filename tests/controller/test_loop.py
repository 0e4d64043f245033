"""The loop against the emulator: writes, failures answered sensibly, state committed only on success,
leadership checked before every write, and fast signals acting between periods.

The policy here has no ``capacity`` (no training arbitration): these tests are about the loop itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, TgiMetrics, deployment_runtime, replicas, runtime
from tests.kube import objects
from tests.kube.emulator import Emulator, Webhook

SCALE = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"
EVENTS = "/apis/events.k8s.io/v1/namespaces/llm/events*"


@pytest.fixture
async def rt(kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path) -> AsyncIterator[Runtime]:
    r = deployment_runtime(kube, kube_client, tmp_path, ManualClock(), endpoint=tgi.url)
    yield r
    await r.observer.aclose()


def scale_writes(kube: Emulator) -> list[tuple[str, str, int, int]]:
    return [(r.method, r.content_type, r.body["spec"]["replicas"], r.status) for r in kube.writes() if r.path == SCALE]


def notes(kube: Emulator, reason: str) -> list[str]:
    return [e["note"] for e in kube.list("events.k8s.io/v1", "Event", "llm") if e["reason"] == reason]


async def test_scale_up_is_one_patch_of_the_scale_subresource(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    kube.strict = True
    kube.expect_write("PATCH", SCALE, times=1)
    kube.expect_write("PATCH", SCALE.removesuffix("/scale"), times=1)  # the first action's managed-by claim
    kube.expect_write("POST", EVENTS)
    tgi.queue = 25
    assert await rt.controller.run_once()
    assert replicas(kube) == 3
    assert scale_writes(kube) == [("PATCH", "application/merge-patch+json", 3, 200)]
    # The Scale carried the resourceVersion it was read with (optimistic concurrency).
    assert next(r for r in kube.writes() if r.path == SCALE).body["metadata"]["resourceVersion"]
    assert notes(kube, "ScaleUp")


async def test_a_conflict_is_retried_after_a_fresh_read(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    kube.inject(409, SCALE, method="PATCH", times=1)
    tgi.queue = 25
    assert await rt.controller.run_once()
    assert [w[3] for w in scale_writes(kube)] == [409, 200]
    assert replicas(kube) == 3


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param(lambda k: k.deny("patch", "deployments/scale"),
                     'Forbidden: deployments.apps "tgi-gemma-deployment" is forbidden: User '
                     '"system:serviceaccount:autoscaler:autoscaler" cannot patch resource "deployments/scale" in API '
                     'group "apps" in the namespace "llm"', id="rbac-403"),
        pytest.param(lambda k: k.webhooks.append(Webhook(
            "replicas-cap.example.com", "apps", ("deployments/scale",),
            lambda new, _old: [f"spec.replicas: Invalid value: {new['spec']['replicas']}: at most 2"]
            if new["spec"]["replicas"] > 2 else [])),
            'Forbidden: admission webhook "replicas-cap.example.com" denied the request: spec.replicas: Invalid '
            'value: 3: at most 2', id="admission-webhook-403"),
        pytest.param(lambda k: k.inject(503, SCALE, method="PATCH", times=100), "ServerError", id="server-5xx"),
    ],
)
async def test_a_failed_write_keeps_the_old_state_and_warns(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics, setup: object, expected: str
) -> None:
    setup(kube)  # type: ignore[operator]
    tgi.queue = 25
    before = rt.controller.states.get("tgi-gemma")
    assert not await rt.controller.run_once()
    assert replicas(kube) == 1
    assert rt.controller.states.get("tgi-gemma") == before, "nothing half-applied: the state is not committed"
    (warning,) = notes(kube, "ActionFailed")
    assert expected in warning
    assert 'autoscaler_actions_total{action="scale",policy="tgi-gemma",result="error"} 1.0' in (
        rt.telemetry.exposition().decode()
    )


async def test_a_target_deleted_while_it_is_scaled_is_not_retried_and_warns(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    """Deleted between the Scale's read and the write: the real server answers 404 to what follows. A 404 lasts
    (not retried, unlike 409 and 5xx), nothing is committed, and one Warning says so."""
    deployment = SCALE.removesuffix("/scale")
    kube.after("GET", SCALE, lambda: kube.remove("apps/v1", "Deployment", "tgi-gemma-deployment", "llm"))
    tgi.queue = 25
    before = rt.controller.states.get("tgi-gemma")
    assert not await rt.controller.run_once()
    assert rt.controller.states.get("tgi-gemma") == before
    (warning,) = notes(kube, "ActionFailed")
    assert "NotFound" in warning
    assert [r.status for r in kube.requests if r.path.startswith(deployment)].count(404) == 1


async def test_another_autoscaler_owning_the_target_is_refused_with_a_warning(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    kube.add(objects.hpa("tgi-hpa"))
    kube.strict = True
    kube.expect_write("POST", EVENTS)
    tgi.queue = 25
    assert not await rt.controller.run_once()
    assert replicas(kube) == 1
    assert scale_writes(kube) == []
    (warning,) = notes(kube, "OwnershipConflict")
    assert "HorizontalPodAutoscaler tgi-hpa" in warning


async def test_unknown_signals_hold_and_say_why(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    await tgi.stop()  # the server is gone: the signal is unknown, never zero
    kube.strict = True
    kube.expect_write("POST", EVENTS)
    assert await rt.controller.run_once()
    assert scale_writes(kube) == []
    (warning,) = notes(kube, "MetricsUnknown")
    assert "holding 1" in warning


class Deposed:
    """A leadership that is lost: ``holds`` is what every write checks."""

    def holds(self) -> bool:
        return False

    def remaining(self) -> float:
        return 0.0

    async def wait_leading(self) -> None:
        return None


async def test_no_write_without_the_lease(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    rt.controller.leader = Deposed()
    kube.strict = True
    tgi.queue = 25
    assert not await rt.controller.run_once()
    assert kube.writes() == []
    assert "tgi-gemma" not in rt.controller.states


async def test_a_probe_acts_at_once_on_a_crossing_and_leaves_no_trace_otherwise(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    cp = rt.store.policies["tgi-gemma"]
    tgi.queue = 5
    outcome = await rt.controller.evaluate(cp, "probe", probe=True)
    assert not outcome.committed
    assert "tgi-gemma" not in rt.controller.states
    assert kube.writes() == []
    tgi.queue = 25  # crosses 10 per replica
    outcome = await rt.controller.evaluate(cp, "probe", probe=True)
    assert outcome.committed
    assert outcome.acted == ("scale",)
    assert replicas(kube) == 3


@pytest.mark.parametrize(
    ("setup", "edit", "method", "path", "content_type", "body"),
    [
        pytest.param(
            lambda k: k.add(objects.leader_worker_set("tgi-gemma-deployment", replicas=1)),
            lambda p: p.replace("kind: Deployment", "kind: LeaderWorkerSet"),
            "PATCH", "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/tgi-gemma-deployment/scale",
            "application/merge-patch+json", {"spec": {"replicas": 3}},
            id="lws-groups-merge-patch",
        ),
        pytest.param(
            lambda k: k.add(objects.stateful_set("tgi-gemma-deployment", replicas=1)),
            lambda p: p.replace("kind: Deployment", "kind: StatefulSet"),
            "PATCH", "/apis/apps/v1/namespaces/llm/statefulsets/tgi-gemma-deployment/scale",
            "application/merge-patch+json", {"spec": {"replicas": 3}},
            id="statefulset-merge-patch",
        ),
        pytest.param(
            lambda k: (k.add(objects.deployment(replicas=1)), k.add(objects.hpa("tgi-hpa"))),
            lambda p: p + "  actuation: {mode: hpaFloor, hpaName: tgi-hpa}\n",
            "PATCH", "/apis/autoscaling/v2/namespaces/llm/horizontalpodautoscalers/tgi-hpa",
            "application/merge-patch+json", {"spec": {"minReplicas": 3}},
            id="hpa-floor-merge-patch",
        ),
    ],
)
async def test_each_kind_of_target_gets_its_own_write(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path,
    setup: Any, edit: Any, method: str, path: str, content_type: str, body: dict[str, Any],
) -> None:
    setup(kube)
    r = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False)
    (tmp_path / "tgi.yaml").write_text(edit((tmp_path / "tgi.yaml").read_text()))
    r.store.reload()
    kube.strict = True
    kube.expect_write(method, path, times=1)
    if path.endswith("/scale"):
        kube.expect_write("PATCH", path.removesuffix("/scale"), times=1)  # the managed-by claim
    kube.expect_write("POST", EVENTS)
    tgi.queue = 25
    assert await r.controller.run_once()
    (write,) = [w for w in kube.writes() if w.path == path]
    assert (write.method, write.content_type) == (method, content_type)
    assert body["spec"].items() <= write.body["spec"].items()
    await r.observer.aclose()


async def test_a_failed_observation_holds_without_writing(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    kube.deny("list", "pods")
    kube.strict = True
    tgi.queue = 25
    assert not await rt.controller.run_once()
    assert kube.writes() == []
    assert 'autoscaler_errors_total{component="observe"} 1.0' in rt.telemetry.exposition().decode()
