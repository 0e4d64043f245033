"""Each HPA form of Google's JetStream autoscaling guide (seed tutorial 004), with the platform's real label layout.

The guide scales ``maxengine-server`` (namespace ``default``) on ``jetstream_prefill_backlog_size``,
``jetstream_slots_used_percentage`` and TPU ``memory_used``, through Managed Prometheus and through Cloud
Monitoring. Here:

- a real Prometheus scrapes the JetStream pods with the target labels Managed Prometheus attaches (``namespace``,
  ``pod``, ``cluster``) and the TPU device plugin as the guide's PodMonitoring does, in ``kube-system``: the
  plugin labels its series with the workload's ``namespace``, ``pod`` and ``container``, which the scrape's own
  ``namespace``/``pod`` override, so they are stored as ``exported_namespace``/``exported_pod``;
- the Cloud Monitoring fake serves what Managed Prometheus stored (``prometheus.googleapis.com/memory_used/gauge``
  on a ``prometheus_target`` in ``kube-system``, the guide's Stackdriver-adapter form) and the GKE system metric
  ``kubernetes.io/node/accelerator/memory_used`` per node (the guide's recommendation), read for the nodes of the
  target's pods.

Each form is read through the sources and decided by the core like the guide's HPA (AverageValue per pod).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import Observation, PodStatus, PolicyState, ReplicaStatus, ScaleDecision, SignalReading
from autoscaler.core.sourcespec import CloudMonitoringSourceSpec, PrometheusSourceSpec, SourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources.base import PodRef
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.helpers import request
from tests.sources.realprom import Exporter, PrometheusServer, ScrapeTarget, have_prometheus, running
from tests.sources.test_cloud_monitoring import NOW, FakeMetricService, fake, series, source

__all__ = ["fake", "source"]  # the Cloud Monitoring fixtures

PODS = ("maxengine-server-6b7c8d9f4-aaaaa", "maxengine-server-6b7c8d9f4-bbbbb")
NODES = ("gke-tpu-node-1", "gke-tpu-node-2")
CLUSTER = "tpu-cluster"
TARGET = "Deployment/default/maxengine-server"


@dataclass
class Platform:
    servers: dict[str, Exporter]
    plugins: list[Exporter]
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def platform() -> Iterator[Platform]:
    if not have_prometheus():
        pytest.skip("no prometheus binary (apt-get install prometheus)")
    servers = {pod: Exporter(fmt="negotiate") for pod in PODS}
    for pod, (backlog, slots) in zip(PODS, ((6.0, 0.5), (10.0, 0.75)), strict=True):
        servers[pod].set("jetstream_prefill_backlog_size", backlog, id="0")
        for idx in ("0", "1"):
            servers[pod].set("jetstream_slots_used_percentage", slots, id="0", idx=idx)
    # One device plugin per node, each reporting the JetStream pod on its node (two chips each).
    plugins = [Exporter(fmt="text") for _ in NODES]
    for plugin, pod, used in zip(plugins, PODS, (60.0, 90.0), strict=True):
        for chip in ("0", "1"):
            labels = {"namespace": "default", "pod": pod, "container": "jetstream-http", "accelerator_id": chip}
            plugin.set("memory_used", used, **labels)
            plugin.set("memory_total", 100.0, **labels)
    targets = [ScrapeTarget(e.address, {"namespace": "default", "pod": pod, "cluster": CLUSTER})
               for pod, e in servers.items()]
    system = {"namespace": "kube-system", "cluster": CLUSTER}
    targets += [ScrapeTarget(p.address, {**system, "pod": f"tpu-device-plugin-{i}"}) for i, p in enumerate(plugins)]
    try:
        with running(targets) as prom:
            prom.wait_for("up", lambda r: len(r) == 4 and all(s["value"][1] == "1" for s in r), timeout_s=60)
            prom.wait_for('memory_used{exported_namespace="default"}', lambda r: len(r) == 4, timeout_s=30)
            prom.wait_for("jetstream_slots_used_percentage", lambda r: len(r) == 4, timeout_s=30)
            yield Platform(servers, plugins, prom)
    finally:
        for e in [*servers.values(), *plugins]:
            e.close()


def policy(signal: dict[str, Any], average: float, source: SourceSpec) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "jetstream-hpa"},
        "spec": {
            "target": {"kind": "Deployment", "name": "maxengine-server", "namespace": "default"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "source": source.model_dump(by_alias=True, exclude_none=True),
            "signals": [{"name": "m", "scope": "perReplica", **signal}],
            "policy": {
                "type": "hpa",
                "metrics": [
                    {"signal": "m", "type": "Pods", "target": {"type": "AverageValue", "averageValue": average}}
                ],
            },
        },
    })


def decided(p: ScalingPolicy, reading: SignalReading, now: float) -> tuple[float | None, int]:
    replicas = ReplicaStatus(2, 2, pods=tuple(PodStatus(pod, True, 600.0) for pod in PODS))
    cp = compile_policy(p)
    decisions, _ = decide(cp, Observation(p.spec.target.ref(), replicas, {"m": reading}), PolicyState(), now)
    (scale,) = (d for d in decisions if isinstance(d, ScaleDecision))
    return cp.judge.combine({"m": reading}, replicas, now)["m"].value, scale.desired


async def prometheus_reading(platform: Platform, p: ScalingPolicy) -> SignalReading:
    spec = p.spec.source
    assert isinstance(spec, PrometheusSourceSpec)
    src = PrometheusSource(spec.model_copy(update={"url": platform.prometheus.url}))
    pods = tuple(PodRef(pod, node=node) for pod, node in zip(PODS, NODES, strict=True))
    req = request(TARGET, spec, p.spec.signals[0].model_dump(by_alias=True, exclude_none=True), name="m", pods=pods)
    try:
        return (await src.read([req], deadline_s=5))[req.key]
    finally:
        await src.aclose()


PROM = PrometheusSourceSpec(type="prometheus", url="http://replaced", cluster=CLUSTER)


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("signal", "average", "value", "desired"),
    [
        # backlog 6 + 10 = 16 over 2 pods vs 5 per pod -> ceil(2 * 1.6) = 4
        pytest.param({"preset": "jetstream.prefill_backlog"}, 5.0, 8.0, 4, id="prefill-backlog"),
        # slots 0.5 and 0.75 (two idx each) averaged: 0.625 vs 0.5 -> ceil(2 * 1.25) = 3
        pytest.param({"preset": "jetstream.slots_used"}, 0.5, 0.625, 3, id="slots-used"),
        # TPU memory from the device plugin in kube-system: 0.6 and 0.9 -> 0.75 vs 0.5 -> 3
        pytest.param({"preset": "tpu.memory_used_ratio", "labels": {"container": "jetstream-http"}}, 0.5, 0.75, 3,
                     id="tpu-memory-managed-prometheus"),
    ],
)
async def test_guide_forms_through_managed_prometheus(
    platform: Platform, signal: dict[str, Any], average: float, value: float, desired: int
) -> None:
    p = policy(signal, average, PROM)
    reading = await prometheus_reading(platform, p)
    assert reading.error is None, reading.error
    seen, want = decided(p, reading, (reading.timestamp or 0.0) + 1)
    assert seen == pytest.approx(value)
    assert want == desired


@pytest.mark.prometheus
async def test_selecting_device_plugin_series_by_namespace_finds_nothing(platform: Platform) -> None:
    # What the preset did before: namespace="default" on series stored with namespace="kube-system".
    assert platform.prometheus.query('memory_used{namespace="default"}') == []
    assert len(platform.prometheus.query('memory_used{exported_namespace="default", cluster="tpu-cluster"}')) == 4


CM = CloudMonitoringSourceSpec(type="cloud-monitoring", project="my-project", cluster="prod-1")


def _prometheus_target(pod: str, chip: str) -> tuple[dict[str, str], dict[str, str]]:
    resource = {"project_id": "my-project", "location": "us-central2", "cluster": "prod-1",
                "namespace": "kube-system", "job": "tpu-device-plugin", "instance": "tpu-device-plugin-x:2112"}
    metric = {"exported_namespace": "default", "exported_pod": pod, "container": "jetstream-http",
              "accelerator_id": chip}
    return resource, metric


async def test_guide_tpu_memory_through_cloud_monitoring_as_the_stackdriver_adapter_reads_it(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    used = "prometheus.googleapis.com/memory_used/gauge"
    rows = []
    for pod, value in zip(PODS, (60.0, 90.0), strict=True):
        for chip in ("0", "1"):
            resource, metric = _prometheus_target(pod, chip)
            one = series(used, resource, [(NOW - 20, value)], **metric)
            one.resource.type = "prometheus_target"
            rows.append(one)
    service.by_type = {used: rows}
    labels = {"container": "jetstream-http", "exported_namespace": "default"}
    signal = {"metric": used, "aggregate": "avg", "labels": labels}
    p = policy(signal, 50.0, CM)
    req = request(TARGET, CM, signal, name="m")
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.error is None, reading.error
    assert dict(reading.per_replica or {}) == {PODS[0]: 60.0, PODS[1]: 90.0}
    (flt,) = service.filters
    assert 'metric.labels.exported_namespace = "default"' in flt
    assert "resource.labels.namespace " not in flt  # the resource's namespace is kube-system
    seen, want = decided(p, reading, NOW)
    assert seen == pytest.approx(75.0)
    assert want == 3  # 75 vs 50 per pod


async def test_guide_tpu_memory_through_cloud_monitoring_system_metrics_per_node(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    used, total = "kubernetes.io/node/accelerator/memory_used", "kubernetes.io/node/accelerator/memory_total"
    service.by_type = {used: [], total: []}
    for node, value in zip((*NODES, "gke-other-node"), (60.0, 90.0, 10.0), strict=True):
        where = {"cluster_name": "prod-1", "node_name": node}
        for chip in ("0", "1"):
            service.by_type[used].append(series(used, where, [(NOW - 40, value)], accelerator_id=chip))
            service.by_type[total].append(series(total, where, [(NOW - 40, 100.0)], accelerator_id=chip))
    signal = {"preset": "tpu.node_memory_used_ratio", "maxAgeSeconds": 180}
    p = policy(signal, 0.5, CM)
    # The controller reads each pod's spec.nodeName: the target's nodes, and only those.
    pods = tuple(PodRef(pod, node=node) for pod, node in zip(PODS, NODES, strict=True))
    req = request(TARGET, CM, signal, name="m", pods=pods)
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.error is None, reading.error
    assert dict(reading.per_replica or {}) == pytest.approx({NODES[0]: 0.6, NODES[1]: 0.9})
    assert all('node_name = one_of("gke-tpu-node-1", "gke-tpu-node-2")' in f for f in service.filters)
    # Per node, not per pod: the count of reporting nodes stands for the pods (one JetStream pod per TPU node).
    judge = compile_policy(p).judge
    combined = judge.combine({"m": reading}, ReplicaStatus(2, 2), NOW)["m"]
    assert combined.value == pytest.approx(0.75)
