"""Test doubles at the edges: an explicit clock, a TGI-like /metrics server, and the tutorial's cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.runtime import Runtime
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.sources.base import MetricSource
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.pool import SourcePool, default_factory
from tests.controller.policies import tgi_policy
from tests.kube import objects
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

#: 2026-11-30T10:00:00Z: the scenario's wall clock starts here.
T0 = 1796032800.0


@dataclass
class ManualClock:
    """An explicit clock: time moves only when the test says so."""

    mono: float = 1000.0
    offset: float = T0 - 1000.0

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.offset + self.mono

    def advance(self, seconds: float) -> None:
        self.mono += seconds


async def serve_get(
    path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> tuple[web.AppRunner, str]:
    """A stand-in server answering GET ``path`` with ``handler`` on a free port of 127.0.0.1: its runner (to
    clean up) and the URL of ``path``."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}{path}"


@dataclass
class MetricsServer:
    """A stand-in model server's ``/metrics`` on a free port; a subclass says what it serves (``_metrics``)."""

    url: str = field(default="", kw_only=True)
    _runner: web.AppRunner | None = field(default=None, repr=False, kw_only=True)

    async def start(self) -> str:
        self._runner, self.url = await serve_get("/metrics", self._metrics)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        raise NotImplementedError


@dataclass
class TgiMetrics(MetricsServer):
    """A stand-in TGI server: ``/metrics`` serves ``tgi_queue_size`` (what the pods source scrapes)."""

    queue: float = 0.0
    scrapes: int = 0

    async def _metrics(self, _: web.Request) -> web.Response:
        self.scrapes += 1
        text = (
            "# HELP tgi_queue_size Current queue size\n# TYPE tgi_queue_size gauge\n"
            f"tgi_queue_size {self.queue}\n"
            "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 4\n"
        )
        return web.Response(text=text, content_type="text/plain")


def pool_on(clock: ManualClock) -> SourcePool:
    """The real sources, with the pods source stamping samples on the test's clock."""

    def factory(spec: SourceSpec) -> MetricSource:
        if spec.type == "pods":
            return PodsSource(clock=clock.wall)
        return default_factory(spec)

    return SourcePool(factory)


def tutorial_cluster(kube: Emulator, kueue: Kueue) -> dict[str, Any]:
    """TGI serving 1 replica (2 GPUs) beside a fine-tune Job (2 pods × 2 GPUs), a 6-GPU ClusterQueue."""
    kube.add(objects.cluster_queue())
    kube.add(objects.local_queue())
    kube.add(objects.deployment(replicas=1))
    job = kube.add(objects.job())
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=job, priority=20))
    kube.add(objects.workload("pod-tgi-gemma-deployment-0", pods=1, priority=30))
    kueue.admit("pod-tgi-gemma-deployment-0")
    kueue.admit("job-finetune-gemma-l4-3316f")
    return {"job": job}


def settle_serving(kube: Emulator, kueue: Kueue) -> None:
    """What the Deployment controller, the kubelet and Kueue do between two passes, in one explicit step:
    Kueue evicts deactivated Workloads; every TGI replica is a one-pod Workload admitted if it fits; a
    scale-down deletes the newest replica's Workload; ready replicas = admitted TGI Workloads; then Kueue
    admits what is pending and fits (the reactivated training)."""
    kueue.sync()
    want = int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"])
    tgi = sorted(w["metadata"]["name"] for w in kube.list(objects.KUEUE_V1BETA2, "Workload", "llm")
                 if w["metadata"]["name"].startswith("pod-tgi"))
    for i in range(len(tgi), want):
        kube.add(objects.workload(f"pod-tgi-gemma-deployment-{i}", pods=1, priority=30))
    for name in tgi[want:]:
        kube.remove(objects.KUEUE_V1BETA2, "Workload", name, "llm")
    kueue.sync()
    kueue.admit_pending()
    admitted = [w for w in kube.list(objects.KUEUE_V1BETA2, "Workload", "llm")
                if w["metadata"]["name"].startswith("pod-tgi") and (w.get("status") or {}).get("admission")]
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm",
                status={"replicas": want, "readyReplicas": len(admitted)})


def runtime(
    api: client.ApiClient, policies: Path, clock: ManualClock, *, endpoint: str, dry_run: bool = False,
    identity: str = "controller-a", capacity: bool = True, **config: Any,
) -> Runtime:
    policy = tgi_policy(source=f"{{type: pods, endpoints: ['{endpoint}']}}", capacity=capacity)
    (policies / "tgi.yaml").write_text(policy)
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, **config})
    return Runtime(api=api, config=cfg, policies_dir=policies, clock=clock, dry_run=dry_run, identity=identity,
                   namespace="autoscaler", source=pool_on(clock))


def deployment_runtime(
    kube: Emulator, api: client.ApiClient, policies: Path, clock: ManualClock, *, endpoint: str
) -> Runtime:
    """The tutorial's TGI Deployment (1 replica) and a controller whose policy has no ``capacity`` (no training
    arbitration) reading ``endpoint``, its policies loaded: the set-up of the loop's own tests."""
    kube.add(objects.deployment(replicas=1))
    r = runtime(api, policies, clock, endpoint=endpoint, capacity=False)
    r.store.reload()
    return r


def runtime_of_many(
    kube: Emulator, api: client.ApiClient, policies: Path, clock: ManualClock, *, endpoint: str, n: int,
    replicas: Callable[[int], int] = lambda i: 1,
) -> Runtime:
    """A controller with ``n`` policies ``p0``… in namespace ``llm``, each on its own Deployment ``t0``… (with
    ``replicas(i)`` replicas) and no ``capacity``, their pods scraped at ``endpoint``; the policies loaded."""
    docs = [tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False,
                       source=f"{{type: pods, endpoints: ['{endpoint}']}}") for i in range(n)]
    for i in range(n):
        kube.add(objects.deployment(f"t{i}", "llm", replicas=replicas(i)))
    r = runtime(api, policies, clock, endpoint=endpoint, capacity=False)
    (policies / "tgi.yaml").unlink()
    (policies / "many.yaml").write_text("---\n".join(docs))
    r.store.reload()
    return r


async def stop_watching(r: Runtime) -> None:
    """End a runtime's watches and its observer: the teardown of the fixtures that ran them."""
    for _, task in r.watchers.values():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await r.observer.aclose()


def replicas(kube: Emulator, name: str = "tgi-gemma-deployment") -> int:
    """The Deployment's ``spec.replicas`` as the API server holds it."""
    return int(kube.get("apps/v1", "Deployment", name, "llm")["spec"]["replicas"])


@pytest.fixture
async def tgi() -> AsyncIterator[TgiMetrics]:
    """A stand-in TGI server (``/metrics``) on a free port (registered by the controller and fault conftests)."""
    server = TgiMetrics()
    await server.start()
    yield server
    await server.stop()

