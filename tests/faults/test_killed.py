"""The controller killed at each step of a scale that preempts training (the tutorial: TGI beside a
fine-tune Job under a 6-GPU ClusterQueue), then a fresh replica (no state) takes over.

"Killed" is the evaluating task cancelled right after the API server answered that step's request: the
server has committed what it was sent, the controller never saw the answer (as SIGKILL, or an OOM kill).
Whatever the step: the training is stopped once, serving is scaled once, and when the load falls serving
goes back down and the training is resumed (nothing stranded, nothing done twice).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.workloads import DEACTIVATED_BY
from tests.controller.helpers import ManualClock, TgiMetrics, runtime, settle_serving, tutorial_cluster
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/workloads"
WORKLOAD = f"{WORKLOADS}/job-finetune-gemma-l4-3316f"
DEPLOYMENT = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment"
SCALE = f"{DEPLOYMENT}/scale"
EVENTS = "/apis/events.k8s.io/v1/namespaces/llm/events"

#: The requests of one scale-up pass, in order; the controller dies right after each one's answer.
STEPS = [
    pytest.param("GET", WORKLOADS, id="after-reading-the-workloads"),
    pytest.param("PATCH", WORKLOAD, id="after-deactivating-the-training"),
    pytest.param("GET", SCALE, id="after-reading-the-scale"),
    pytest.param("PATCH", DEPLOYMENT, id="after-claiming-the-target"),
    pytest.param("PATCH", SCALE, id="after-scaling"),
    pytest.param("POST", EVENTS, id="after-the-first-event"),
]


def replicas(kube: Emulator) -> int:
    return int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"])


def training(kube: Emulator) -> tuple[bool, str | None]:
    wl = kube.get("kueue.x-k8s.io/v1beta2", "Workload", "job-finetune-gemma-l4-3316f", "llm")
    return wl["spec"].get("active", True), (wl["metadata"].get("annotations") or {}).get(DEACTIVATED_BY)


def writes(kube: Emulator, path: str, key: str) -> list[object]:
    """Stored writes (a server-side dry run, the hand-off's check, stores nothing)."""
    return [
        r.body["spec"][key] for r in kube.writes()
        if r.path == path and r.status == 200 and r.query.get("dryRun") != "All"
    ]


@pytest.mark.fault("killed-mid-scale")
@pytest.mark.parametrize(("method", "path"), STEPS)
async def test_killed_at_each_step_nothing_is_repeated_or_stranded(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path,
    method: str, path: str,
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    clock = ManualClock()
    doomed = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, identity="doomed")
    doomed.store.reload()
    kube.clear_log()
    tgi.queue = 15  # needs 2 replicas = 4 GPUs: only fits once the training's 4 are released
    task = asyncio.create_task(doomed.controller.run_once())

    def kill() -> None:
        task.cancel()

    kube.after(method, path, kill)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert any(r.method == method and r.path.startswith(path) for r in kube.requests), "the step was reached"
    await doomed.observer.aclose()

    heir = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, identity="heir")
    heir.store.reload()
    for _ in range(3):
        settle_serving(kube, kueue)
        assert await heir.controller.run_once()
        clock.advance(15)
    settle_serving(kube, kueue)
    assert replicas(kube) == 2
    assert training(kube) == (False, "tgi-gemma")
    assert writes(kube, WORKLOAD, "active") == [False], "the training was stopped once"
    assert writes(kube, SCALE, "replicas") == [2], "serving was scaled once"

    tgi.queue = 3  # the load falls: after the 300 s window serving goes back to 1 and training resumes
    for _ in range(24):
        assert await heir.controller.run_once()
        settle_serving(kube, kueue)
        clock.advance(15)
    assert replicas(kube) == 1
    assert training(kube) == (True, None), "no stranded training"
    assert writes(kube, WORKLOAD, "active") == [False, True]
    assert writes(kube, SCALE, "replicas") == [2, 1]
    await heir.observer.aclose()
