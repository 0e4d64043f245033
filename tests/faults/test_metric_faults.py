"""Metric sources failing: down, partial (a target's series missing), stale, NaN, stamped in the future.

Each faulty service runs at 3 replicas with an idle queue that would scale it down; a healthy control service
with the same queue does scale down. Unknown is never zero: the faulty ones hold, say why (``MetricsUnknown``),
and the control shows the test could have seen a scale-down. A second scenario runs a real Prometheus
(``tests.sources.realprom``): NaN from the exporter, then Prometheus killed.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from tests.faults.harness import Mode, World, events, policy_text, scale_puts
from tests.kube import objects
from tests.kube.emulator import Emulator
from tests.sources.realprom import Exporter, PrometheusServer, ScrapeTarget, have_prometheus


@pytest.mark.looptime
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("down", marks=pytest.mark.fault("prometheus-down"), id="down"),
        pytest.param("missing", marks=pytest.mark.fault("prometheus-partial"), id="partial"),
        pytest.param("stale", marks=pytest.mark.fault("prometheus-stale"), id="stale"),
        pytest.param("nan", marks=pytest.mark.fault("prometheus-nan"), id="nan"),
        pytest.param("future", marks=pytest.mark.fault("clock-jump-source"), id="source-clock-ahead"),
    ],
)
async def test_unknown_metrics_never_scale_down(world: World, mode: Mode) -> None:
    world.add_services(2, replicas=3, queue=0, down_window=0)
    world.signals.mode["svc-0"] = mode  # svc-1 is the control: same load, healthy source
    rt = world.runtime()
    async with world.running(rt):
        await asyncio.sleep(300)
        assert rt.telemetry.healthy()
    assert world.replicas(1) == 1, "the control scaled down: the test could see a scale-down"
    assert world.replicas(0) == 3, "unknown data is never read as idle"
    assert scale_puts(world.kube, 0) == []
    (note,) = events(world.kube, 0, "MetricsUnknown")  # aggregated: one Event, its series counting repeats
    assert "holding 3" in note


TGI_PODS = ("tgi-77f8c9-aaaaa", "tgi-77f8c9-bbbbb", "tgi-77f8c9-ccccc")


async def _once(api: client.ApiClient, policies: Path, url: str) -> Runtime:
    (policies / "tgi.yaml").write_text(
        policy_text(0, down_window=0).replace('"http://prometheus.invalid:9090"', f'"{url}", timeoutSeconds: 2')
        .replace("svc-0, namespace: ns-0", "tgi, namespace: llm")
    )
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "fastPollSeconds": 0})
    rt = Runtime(api=api, config=cfg, policies_dir=policies, clock=LoopClock(), identity="a", namespace="x")
    rt.store.reload()
    return rt


def _replicas(kube: Emulator) -> int:
    return int(kube.get("apps/v1", "Deployment", "tgi", "llm")["spec"]["replicas"])


@pytest.mark.prometheus
@pytest.mark.fault("prometheus-real-nan-and-down")
async def test_a_real_prometheus_serving_nan_then_down_holds_the_target(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    if not have_prometheus():
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus)")
    kube.add(objects.deployment("tgi", "llm", replicas=3))
    exporters = [Exporter(labels={"namespace": "llm", "pod": pod}) for pod in TGI_PODS]
    for e in exporters:
        e.set("tgi_queue_size", 0)
    prom = PrometheusServer([ScrapeTarget(e.address, e.labels) for e in exporters])
    prom.start()
    try:
        query = "tgi_queue_size"
        await asyncio.to_thread(prom.wait_for, query, lambda r: len(r) == len(TGI_PODS))
        rt = await _once(kube_client, tmp_path, prom.url)
        assert await rt.controller.run_once()
        assert _replicas(kube) == 1, "control: a real idle queue does scale down"
        await rt.observer.aclose()
        kube.modify("apps/v1", "Deployment", "tgi", "llm", spec={"replicas": 3})
        writes = len(kube.writes())
        exporters[0].set("tgi_queue_size", math.nan)  # one pod of three
        await asyncio.to_thread(prom.wait_for, f"{query} != 0", bool)  # NaN != 0 holds: the NaN is stored
        rt = await _once(kube_client, tmp_path, prom.url)
        assert await rt.controller.run_once()
        assert _replicas(kube) == 3, "NaN is not idle"
        await rt.observer.aclose()
        prom.stop()  # Prometheus is gone: connection refused
        rt = await _once(kube_client, tmp_path, prom.url)
        assert await rt.controller.run_once()
        assert _replicas(kube) == 3, "a dead Prometheus is not idle"
        notes = [e["note"] for e in kube.list("events.k8s.io/v1", "Event", "llm") if e["reason"] == "MetricsUnknown"]
        # The source drops a pod's NaN sample: that pod did not report, the reading is partial, hence unknown.
        assert any("NaN" in n or "2 of 3 ready pods" in n for n in notes)
        assert any("cannot reach" in n for n in notes)
        assert any("holding 3" in n for n in notes)
        await rt.observer.aclose()
        assert [w for w in kube.writes()[writes:] if "/scale" in w.path] == []
    finally:
        prom.stop()
        for e in exporters:
            e.close()
