"""A pass is observed in bulk: targets per namespace, every signal in one source read; an evaluation never
decides on a bulk read that another evaluation of its policy (which may have acted) has overtaken."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.runtime import Runtime
from autoscaler.core.model import ScaleDecision
from autoscaler.sources.base import Readings, SignalRequest
from autoscaler.sources.pool import SourcePool
from tests.controller.helpers import ManualClock, TgiMetrics, pool_on
from tests.controller.policies import tgi_policy
from tests.kube import objects
from tests.kube.emulator import Emulator

NAMES = ("tgi-a", "tgi-b", "tgi-c")


class Recording:
    """The real sources, recording how many requests each ``read`` carried."""

    def __init__(self, inner: SourcePool) -> None:
        self.inner = inner
        self.reads: list[int] = []

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        self.reads.append(len(requests))
        return await self.inner.read(requests, deadline_s=deadline_s)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def tgi() -> AsyncIterator[TgiMetrics]:
    server = TgiMetrics(queue=15)
    await server.start()
    yield server
    await server.stop()


def _runtime(kube: Emulator, api: client.ApiClient, tmp_path: Path, tgi: TgiMetrics) -> tuple[Runtime, Recording]:
    source = f"{{type: pods, endpoints: ['{tgi.url}']}}"
    for name in NAMES:
        kube.add(objects.deployment(name, replicas=1))
        (tmp_path / f"{name}.yaml").write_text(tgi_policy(name=name, target=name, source=source, capacity=False))
    clock = ManualClock()
    recording = Recording(pool_on(clock))
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}})
    rt = Runtime(api=api, config=cfg, policies_dir=tmp_path, clock=clock, namespace="autoscaler", source=recording)
    assert not rt.store.reload().rejected
    return rt, recording


async def test_a_pass_reads_every_signal_at_once_and_each_namespace_once(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, tgi: TgiMetrics
) -> None:
    rt, recording = _runtime(kube, kube_client, tmp_path, tgi)
    kube.clear_log()
    assert await rt.controller.run_once()
    assert recording.reads == [len(NAMES)], "one source read for the whole pass"
    # Observing: one list of the Deployments, one of their pods; then each scale re-reads its own target.
    acting = next(i for i, r in enumerate(kube.requests) if r.path.endswith("/scale"))
    observing = [(r.path, r.query.get("labelSelector")) for r in kube.requests[:acting]]
    assert sorted(observing) == [
        ("/api/v1/namespaces/llm/pods", "app in (gemma-server)"),
        ("/apis/apps/v1/namespaces/llm/deployments", None),
    ]
    assert {r.path for r in kube.writes() if r.path.endswith("/scale")} == {
        f"/apis/apps/v1/namespaces/llm/deployments/{n}/scale" for n in NAMES
    }, "queue 15 over 10 per replica: every target went to 2"
    await rt.observer.aclose()


async def test_an_evaluation_overtaken_since_the_bulk_read_observes_afresh(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, tgi: TgiMetrics
) -> None:
    rt, recording = _runtime(kube, kube_client, tmp_path, tgi)
    ctl = rt.controller
    policies = rt.store.policies
    prepared = await ctl.prepare(policies.values())
    for name in NAMES:  # the cluster moves on after the bulk read
        kube.modify("apps/v1", "Deployment", name, "llm", spec={"replicas": 2}, status={"readyReplicas": 2})

    def current(outcome_decisions: object) -> int:
        assert isinstance(outcome_decisions, tuple)
        (scale,) = [d for d in outcome_decisions if isinstance(d, ScaleDecision)]
        return scale.current

    # Nothing ran in between: the evaluation uses the pass's read (that is what a pass is).
    untouched = await ctl.evaluate(policies["tgi-a"], "period", prepared=prepared["tgi-a"])
    assert current(untouched.decisions) == 1
    # Another evaluation of tgi-b ran (and might have scaled): its bulk read is stale, it reads again.
    await ctl.evaluate(policies["tgi-b"], "watch")
    overtaken = await ctl.evaluate(policies["tgi-b"], "period", prepared=prepared["tgi-b"])
    assert current(overtaken.decisions) == 2
    assert recording.reads[0] == len(NAMES)
    await rt.observer.aclose()


async def test_a_target_that_cannot_be_read_fails_its_evaluation_only(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, tgi: TgiMetrics
) -> None:
    rt, _ = _runtime(kube, kube_client, tmp_path, tgi)
    kube.remove("apps/v1", "Deployment", "tgi-c", "llm")
    kube.clear_log()
    assert not await rt.controller.run_once()
    gets = [r.path for r in kube.requests if r.method == "GET"]
    assert "/apis/apps/v1/namespaces/llm/deployments/tgi-c" not in gets, "the failure is not read twice"
    scaled = {r.path.rsplit("/", 2)[-2] for r in kube.writes() if r.path.endswith("/scale")}
    assert scaled == {"tgi-a", "tgi-b"}
    await rt.observer.aclose()


async def test_a_pods_source_with_a_port_scrapes_each_serving_pod_by_its_ip(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, tgi: TgiMetrics
) -> None:
    port = int(tgi.url.rsplit(":", 1)[1].split("/")[0])
    kube.add(objects.deployment(replicas=1))
    kube.add(objects.pod("tgi-serving", ready=True, ip="127.0.0.1"))
    kube.add(objects.pod("tgi-pending", ready=False))  # no IP yet: not scraped, and not an error
    (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, port: {port}}}", capacity=False))
    clock = ManualClock()
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}})
    rt = Runtime(api=kube_client, config=cfg, policies_dir=tmp_path, clock=clock, namespace="autoscaler",
                 source=pool_on(clock))
    rt.store.reload()
    assert await rt.controller.run_once()
    assert tgi.scrapes == 1
    assert int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"]) == 2
    await rt.observer.aclose()
