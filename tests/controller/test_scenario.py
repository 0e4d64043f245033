"""The mixed training/serving tutorial (seed 000) as a scenario, checked from the API requests.

TGI serves 1 replica (2 GPUs) beside a fine-tuning Job (2 pods × 2 GPUs) under a 6-GPU ClusterQueue. The
queue rises to 15 (10 per replica): serving must go to 2 replicas, which only fits once the training
Workload is deactivated, so the controller deactivates it first and scales when Kueue has released the
quota. The queue falls: after the 300 s scale-down window serving goes back to 1, then the training is
reactivated. Signals come from the real pods source scraping a local TGI-like /metrics endpoint.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client

from autoscaler.controller.runtime import Runtime
from autoscaler.controller.workloads import DEACTIVATED_BY
from tests.controller.helpers import ManualClock, TgiMetrics, runtime, settle_serving, tutorial_cluster
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

WORKLOAD = "/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/workloads/job-finetune-gemma-l4-3316f"
SCALE = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"
EVENTS = "/apis/events.k8s.io/v1/namespaces/llm/events*"


def replicas(kube: Emulator) -> int:
    return int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"])


def training(kube: Emulator) -> dict[str, object]:
    wl = kube.get("kueue.x-k8s.io/v1beta2", "Workload", "job-finetune-gemma-l4-3316f", "llm")
    annotations = wl["metadata"].get("annotations") or {}
    return {"active": wl["spec"].get("active", True), "by": annotations.get(DEACTIVATED_BY),
            "admitted": bool((wl.get("status") or {}).get("admission"))}


def actions(kube: Emulator) -> list[tuple[str, str, tuple[str, object]]]:
    """The writes that change the cluster (not Events), as (method, content type, (field, value)); a
    server-side dry run shows as method ``PATCH?dryRun``."""
    out: list[tuple[str, str, tuple[str, object]]] = []
    for r in kube.writes():
        if r.path == SCALE:
            method = f"{r.method}?dryRun" if r.query.get("dryRun") == "All" else r.method
            out.append((method, r.content_type, ("replicas", r.body["spec"]["replicas"])))
        elif r.path == WORKLOAD:
            out.append((r.method, r.content_type, ("active", r.body["spec"]["active"])))
    return out


async def passes(rt: Runtime, kube: Emulator, kueue: Kueue, clock: ManualClock, n: int, step: float = 15) -> None:
    """``n`` evaluation passes ``step`` seconds apart, the cluster reacting in between."""
    for _ in range(n):
        ok = await rt.controller.run_once()
        assert ok
        settle_serving(kube, kueue)
        clock.advance(step)


def strict(kube: Emulator) -> None:
    kube.strict = True
    kube.expect_write("PATCH", SCALE)
    kube.expect_write("PATCH", SCALE.removesuffix("/scale"), times=1)  # the first scale's managed-by claim
    kube.expect_write("PATCH", WORKLOAD)
    kube.expect_write("POST", EVENTS)
    kube.expect_write("PATCH", EVENTS)


async def test_tutorial_timeline(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    clock = ManualClock()
    rt = runtime(kube_client, tmp_path, clock, endpoint=tgi.url)
    rt.store.reload()
    strict(kube)
    kube.clear_log()

    tgi.queue = 5  # 1 replica is enough
    await passes(rt, kube, kueue, clock, 2)
    assert replicas(kube) == 1
    assert training(kube)["active"] is True
    assert actions(kube) == []

    tgi.queue = 15  # needs 2 replicas = 4 GPUs; training holds 4 of the 6
    await passes(rt, kube, kueue, clock, 3)
    assert replicas(kube) == 2
    assert training(kube) == {"active": False, "by": "tgi-gemma", "admitted": False}
    # Check the scale (server-side dry run), deactivate (merge patch on Workload.spec.active), then scale.
    assert actions(kube) == [
        ("PATCH?dryRun", "application/merge-patch+json", ("replicas", 2)),
        ("PATCH", "application/merge-patch+json", ("active", False)),
        ("PATCH", "application/merge-patch+json", ("replicas", 2)),
    ]
    kube.clear_log()

    tgi.queue = 3  # 1 replica is enough again; the scale-down window is 300 s
    await passes(rt, kube, kueue, clock, 19)  # 19 × 15 s = 285 s: still inside the window
    assert replicas(kube) == 2
    assert actions(kube) == []
    await passes(rt, kube, kueue, clock, 4)
    assert replicas(kube) == 1
    assert training(kube) == {"active": True, "by": None, "admitted": True}
    # Scale down first, then reactivate.
    assert actions(kube) == [
        ("PATCH", "application/merge-patch+json", ("replicas", 1)),
        ("PATCH", "application/merge-patch+json", ("active", True)),
    ]
    await rt.observer.aclose()


def _reasons(kube: Emulator) -> list[tuple[str, str]]:
    return [(e["regarding"]["kind"], e["reason"]) for e in kube.list("events.k8s.io/v1", "Event", "llm")]


async def test_tutorial_events_explain_each_action(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    clock = ManualClock()
    rt = runtime(kube_client, tmp_path, clock, endpoint=tgi.url)
    rt.store.reload()
    tgi.queue = 15
    await passes(rt, kube, kueue, clock, 3)
    reasons = _reasons(kube)
    assert ("Workload", "DeactivateTraining") in reasons
    assert ("Deployment", "ScaleUp") in reasons
    scale_up = next(e for e in kube.list("events.k8s.io/v1", "Event", "llm") if e["reason"] == "ScaleUp")
    assert "15" in scale_up["note"]  # the decision's message carries the numbers
    await rt.observer.aclose()


async def test_dry_run_decides_and_reports_but_writes_nothing_but_events(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    clock = ManualClock()
    rt = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, dry_run=True)
    rt.store.reload()
    kube.strict = True
    kube.expect_write("POST", EVENTS)
    kube.expect_write("PATCH", EVENTS)
    tgi.queue = 25
    await passes(rt, kube, kueue, clock, 3)
    assert replicas(kube) == 1
    assert training(kube)["active"] is True
    notes = [e["note"] for e in kube.list("events.k8s.io/v1", "Event", "llm")]
    assert notes
    assert all(n.startswith("(dry run, nothing changed)") for n in notes)
    exposition = rt.telemetry.exposition().decode()
    assert 'autoscaler_actions_total{action="deactivate",policy="tgi-gemma",result="dry_run"}' in exposition
    await rt.observer.aclose()




async def test_restart_between_deactivating_training_and_scaling_serving(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """The scale path fails (503) while serving needs to grow: the hand-off's check (a server-side dry run of
    the scale) fails first, so the training is never stopped for a scale that cannot happen. A fresh controller
    (no state), once the API server is healthy, stops it once and scales. (Killed between the deactivation and
    the scale: tests/controller/test_handoff.py.)"""
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    clock = ManualClock()
    first = runtime(kube_client, tmp_path, clock, endpoint=tgi.url)
    first.store.reload()
    kube.clear_log()
    kube.inject(503, SCALE, method="PATCH", times=1000)  # every scale write fails from now on
    tgi.queue = 15
    for _ in range(2):
        await first.controller.run_once()
        settle_serving(kube, kueue)
        clock.advance(15)
    assert training(kube) == {"active": True, "by": None, "admitted": True}
    assert replicas(kube) == 1
    await first.observer.aclose()
    assert any(r.path == SCALE and r.status == 503 for r in kube.requests), "the scale was attempted and failed"
    kube.clear_faults()  # the API server is healthy again; a new controller starts

    second = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, identity="controller-b")
    second.store.reload()
    await passes(second, kube, kueue, clock, 2)
    assert replicas(kube) == 2
    assert training(kube)["active"] is False
    workload_writes = [a for a in actions(kube) if a[2][0] == "active"]
    assert workload_writes == [("PATCH", "application/merge-patch+json", ("active", False))], "stopped once"
    assert actions(kube)[-1] == ("PATCH", "application/merge-patch+json", ("replicas", 2))
    await second.observer.aclose()
