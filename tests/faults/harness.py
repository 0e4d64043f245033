"""A small world for fault scenarios: N serving Deployments, one policy each (own namespace ``ns-<i>``), an
in-process metric source whose answers the test breaks per target, and the assembled ``Runtime``.

Everything runs on the event loop's clock: under ``@pytest.mark.looptime`` a scenario's minutes take
milliseconds, and the controller's deadlines, periods and backoffs are the virtual ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from autoscaler.core.model import SignalReading
from autoscaler.sources.base import Readings, SignalRequest
from tests.kube import objects
from tests.kube.emulator import Emulator

Mode = Literal["ok", "down", "nan", "stale", "missing", "future"]


@dataclass
class Signals:
    """The metric source of the world: ``queue[target]`` per target, answered as ``mode[target]`` says.

    ``down``: the source errs (Prometheus unreachable); ``nan``: NaN; ``stale``: a sample 10 min old;
    ``missing``: an empty result (a partial answer: this target's series is absent); ``future``: stamped
    an hour ahead (the source's clock jumped). ``skew`` shifts every timestamp (a clock jump at the source).
    """

    wall: Callable[[], float]
    queue: dict[str, float] = field(default_factory=dict)
    mode: dict[str, Mode] = field(default_factory=dict)
    skew: float = 0.0
    reads: dict[str, int] = field(default_factory=dict)

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        out: Readings = {}
        now = self.wall() + self.skew
        for req in requests:
            name = req.target.name
            self.reads[name] = self.reads.get(name, 0) + 1
            mode = self.mode.get(name, "ok")
            value = self.queue.get(name, 0.0)
            if mode == "down":
                out[req.key] = SignalReading(None, None, source="test", error="connection refused")
            elif mode == "nan":
                out[req.key] = SignalReading(math.nan, now, source="test")
            elif mode == "stale":
                out[req.key] = SignalReading(value, now - 600, source="test")
            elif mode == "missing":
                out[req.key] = SignalReading(None, None, source="test")
            elif mode == "future":
                out[req.key] = SignalReading(value, now + 3600, source="test")
            else:
                out[req.key] = SignalReading(value, now, source="test")
        return out

    async def aclose(self) -> None:
        return None


def policy_text(
    i: int, *, period: float = 15, max_replicas: int = 5, capacity: bool = False, name: str | None = None,
    per_replica: float = 10, down_window: float | None = None,
) -> str:
    """A queue policy on ``svc-<i>`` in ``ns-<i>``: ``per_replica`` queued requests per replica, 1..max."""
    text = f"""\
apiVersion: autoscaler.dev/v1alpha1
kind: ScalingPolicy
metadata:
  name: {name or f"svc-{i}"}
spec:
  target: {{kind: Deployment, name: svc-{i}, namespace: ns-{i}}}
  minReplicas: 1
  maxReplicas: {max_replicas}
  evaluationPeriodSeconds: {period}
  source: {{type: prometheus, url: "http://prometheus.invalid:9090"}}
  signals:
    - name: queue
      preset: tgi.queue_size
  policy:
    type: queue
    work: [queue]
    capacityPerReplica: {per_replica}
"""
    if down_window is not None:
        text += f"""\
    behavior: {{scaleDown: {{stabilizationWindowSeconds: {down_window:g}}}}}
"""
    if capacity:
        text += f"""\
  capacity: {{clusterQueue: cluster-queue, resource: nvidia.com/gpu, perReplica: 2}}
  preemptible:
    - namespace: ns-{i}
      selector: {{matchLabels: {{app: finetune-job}}}}
"""
    return text


def deployment_path(i: int) -> str:
    return f"/apis/apps/v1/namespaces/ns-{i}/deployments/svc-{i}"


@dataclass
class World:
    kube: Emulator
    api: client.ApiClient
    policies: Path
    clock: LoopClock
    signals: Signals
    runtimes: list[Runtime] = field(default_factory=list)

    def add_services(self, n: int, *, replicas: int = 1, queue: float = 5.0, **policy: Any) -> None:
        for i in range(n):
            self.kube.add(objects.deployment(f"svc-{i}", f"ns-{i}", replicas=replicas))
            (self.policies / f"svc-{i}.yaml").write_text(policy_text(i, **policy))
            self.queue(i, queue)

    def queue(self, i: int, value: float) -> None:
        self.signals.queue[f"svc-{i}"] = value

    def replicas(self, i: int) -> int:
        return int(self.kube.get("apps/v1", "Deployment", f"svc-{i}", f"ns-{i}")["spec"]["replicas"])

    def runtime(self, *, identity: str = "controller-a", seed: int = 1, **config: Any) -> Runtime:
        """A controller (leader election off unless ``leaderElection`` is given), on the loop clock."""
        cfg = ControllerConfig.model_validate({
            "leaderElection": {"enabled": False}, "fastPollSeconds": 0, "reloadPollSeconds": 2, **config,
        })
        rt = Runtime(api=self.api, config=cfg, policies_dir=self.policies, clock=self.clock, identity=identity,
                     namespace="autoscaler", source=self.signals, rng=random.Random(seed))
        self.runtimes.append(rt)
        return rt

    @contextlib.asynccontextmanager
    async def running(self, rt: Runtime) -> AsyncIterator[asyncio.Task[None]]:
        """``rt.serve`` in a task for the duration of the block; stopped (as by SIGTERM) at the end."""
        stop = asyncio.Event()
        task = asyncio.create_task(rt.serve(stop))
        while rt.telemetry.last_tick is None and not task.done():
            await asyncio.sleep(0)
        try:
            yield task
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def decisions(rt: Runtime, policy: str) -> int:
    """How many evaluations of ``policy`` reached a decision (the decisions counter, every reason)."""
    return int(sum(
        s.value for m in rt.telemetry.decisions.collect() for s in m.samples
        if s.name.endswith("_total") and s.labels.get("policy") == policy
    ))


def events(kube: Emulator, i: int, reason: str) -> list[str]:
    return [e["note"] for e in kube.list("events.k8s.io/v1", "Event", f"ns-{i}") if e["reason"] == reason]


def scale_puts(kube: Emulator, i: int) -> list[Any]:
    return [r for r in kube.requests if r.method in ("PUT", "PATCH") and r.path == deployment_path(i) + "/scale"]


async def sample(every_s: float, duration_s: float, probe: Callable[[], Any]) -> list[Any]:
    """``probe()`` every ``every_s`` virtual seconds for ``duration_s``: the timeline the scenario asserts on."""
    out = []
    loop = asyncio.get_running_loop()
    end = loop.time() + duration_s
    while loop.time() < end:
        out.append(probe())
        await asyncio.sleep(every_s)
    return out


@pytest.fixture
async def world(kube: Emulator, kube_client: client.ApiClient, tmp_path: Path) -> AsyncIterator[World]:
    policies = tmp_path / "policies"
    policies.mkdir()
    clock = LoopClock()
    w = World(kube, kube_client, policies, clock, Signals(wall=clock.wall))
    yield w
    for rt in w.runtimes:
        await rt.observer.aclose()
