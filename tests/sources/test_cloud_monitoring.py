"""The Cloud Monitoring source with the real google-cloud-monitoring async client against an in-process
gRPC server implementing ``MetricService.ListTimeSeries`` (paging, permission denied, deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcAsyncIOTransport

from autoscaler.core.sourcespec import CloudMonitoringSourceSpec
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from tests.sources.helpers import request

NOW = 1_800_000_000.0
SPEC = CloudMonitoringSourceSpec(type="cloud-monitoring", project="my-project", cluster="prod-1")


def series(metric_type: str, resource: dict[str, str], points: list[tuple[float, float]], **labels: str) -> Any:
    kind = "k8s_node" if "node_name" in resource and "pod_name" not in resource else "k8s_container"
    return monitoring_v3.TimeSeries(
        metric={"type": metric_type, "labels": labels},
        resource={"type": kind, "labels": resource},
        points=[{"interval": {"end_time": {"seconds": int(t)}}, "value": {"double_value": v}} for t, v in points],
    )


def container(ns: str, pod: str) -> dict[str, str]:
    return {"cluster_name": "prod-1", "namespace_name": ns, "pod_name": pod, "container_name": "server"}


@dataclass
class FakeMetricService:
    """Serves the configured series for each metric type, ``page_size`` per page."""

    by_type: dict[str, list[Any]] = field(default_factory=dict)
    page_size: int = 100
    abort: grpc.StatusCode | None = None
    message: str = ""
    delay_s: float = 0.0
    filters: list[str] = field(default_factory=list)
    #: Every request, for tests of what was asked (aggregation of counters and distributions).
    requests: list[Any] = field(default_factory=list)

    async def list_time_series(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.filters.append(request.filter)
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.abort is not None:
            await context.abort(self.abort, self.message)
        metric_type = request.filter.split('"')[1]
        found = self.by_type.get(metric_type, [])
        start = int(request.page_token or 0)
        page = found[start : start + self.page_size]
        token = str(start + self.page_size) if start + self.page_size < len(found) else ""
        return monitoring_v3.ListTimeSeriesResponse(time_series=page, next_page_token=token)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeMetricService, str]]:
    service = FakeMetricService()
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "google.monitoring.v3.MetricService",
        {
            "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                service.list_time_series,
                request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield service, f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.fixture
async def source(fake: tuple[FakeMetricService, str]) -> AsyncIterator[CloudMonitoringSource]:
    transport = MetricServiceGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(fake[1]))
    src = CloudMonitoringSource(
        SPEC, client=monitoring_v3.MetricServiceAsyncClient(transport=transport), clock=lambda: NOW
    )
    yield src
    await src.aclose()


USED = "kubernetes.io/container/accelerator/memory_used"
TOTAL = "kubernetes.io/container/accelerator/memory_total"


async def test_tpu_memory_ratio_per_pod_then_averaged(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    service.by_type = {
        USED: [
            series(USED, container("tpu", "jet-0"), [(NOW - 30, 60.0), (NOW - 90, 10.0)], accelerator_id="0"),
            series(USED, container("tpu", "jet-0"), [(NOW - 30, 20.0)], accelerator_id="1"),
            series(USED, container("tpu", "jet-0-1"), [(NOW - 40, 50.0)], accelerator_id="0"),
            series(USED, container("tpu", "other-0"), [(NOW - 30, 99.0)], accelerator_id="0"),
        ],
        TOTAL: [
            series(TOTAL, container("tpu", "jet-0"), [(NOW - 30, 100.0)], accelerator_id="0"),
            series(TOTAL, container("tpu", "jet-0"), [(NOW - 30, 100.0)], accelerator_id="1"),
            series(TOTAL, container("tpu", "jet-0-1"), [(NOW - 40, 100.0)], accelerator_id="0"),
            series(TOTAL, container("tpu", "other-0"), [(NOW - 30, 100.0)], accelerator_id="0"),
        ],
    }
    req = request("LeaderWorkerSet/tpu/jet", SPEC, {"preset": "tpu.memory_used_ratio"})

    reading = (await source.read([req], deadline_s=2))[req.key]

    # jet-0: (60+20)/200 = 0.4 (newest points); its worker jet-0-1: 0.5; other-0 belongs to another LWS.
    assert reading.error is None
    assert reading.value == pytest.approx(0.45)
    assert reading.timestamp == NOW - 40
    assert dict(reading.per_replica or {}) == pytest.approx({"jet-0": 0.4, "jet-0-1": 0.5})
    scope = 'AND resource.labels.namespace_name = one_of("tpu") AND resource.labels.cluster_name = "prod-1"'
    assert sorted(service.filters) == [f'metric.type = "{t}" {scope}' for t in (TOTAL, USED)]


async def test_pages_are_followed(fake: tuple[FakeMetricService, str], source: CloudMonitoringSource) -> None:
    service, _ = fake
    duty = "kubernetes.io/container/accelerator/duty_cycle"
    service.page_size = 2
    service.by_type = {
        duty: [series(duty, container("llm", f"srv-6b7c8d-{i:05d}"), [(NOW - 10, 10.0 * i)]) for i in range(5)]
    }
    req = request("Deployment/llm/srv", SPEC, {"metric": duty, "aggregate": "avg"})

    reading = (await source.read([req], deadline_s=2))[req.key]

    assert reading.value == pytest.approx(20.0)
    assert source.calls == 3
    assert len(service.filters) == 3


async def test_node_metrics_need_and_use_the_targets_nodes(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    duty = "kubernetes.io/node/accelerator/duty_cycle"
    node = {"cluster_name": "prod-1", "node_name": "gke-tpu-a"}
    service.by_type = {duty: [series(duty, node, [(NOW - 50, 80.0)])]}
    with_nodes = request("Deployment/llm/srv", SPEC, {"metric": duty}, name="a", nodes=("gke-tpu-a",))
    without = request("Deployment/llm/other", SPEC, {"metric": duty}, name="b")

    readings = await source.read([with_nodes, without], deadline_s=2)

    assert readings[with_nodes.key].value == 80.0
    assert "needs the nodes of the target's pods" in (readings[without.key].error or "")


async def test_serving_presets_read_managed_prometheus_series(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    stored = "prometheus.googleapis.com/vllm:num_requests_waiting/gauge"
    target = {"cluster": "prod-1", "namespace": "llm", "job": "vllm", "instance": "vllm-6b7c8d-aaaaa:8000"}
    service.by_type = {stored: [series(stored, target, [(NOW - 5, 3.0)])]}
    req = request("Deployment/llm/vllm", SPEC, {"preset": "vllm.waiting"})

    reading = (await source.read([req], deadline_s=2))[req.key]

    assert reading.value == 3.0
    assert any('resource.labels.namespace = one_of("llm")' in f for f in service.filters)


@pytest.mark.parametrize(
    ("abort", "message", "delay_s", "reason"),
    [
        pytest.param(
            grpc.StatusCode.PERMISSION_DENIED,
            "Permission monitoring.timeSeries.list denied (or it may not exist).",
            0.0,
            "permission denied on projects/my-project",
            id="denied",
        ),
        pytest.param(None, "", 2.0, "within the 0.3s deadline", id="deadline"),
        pytest.param(grpc.StatusCode.UNAVAILABLE, "try again later", 0.0, "try again later", id="unavailable"),
    ],
)
async def test_failures_are_unknown_with_a_reason(
    fake: tuple[FakeMetricService, str],
    source: CloudMonitoringSource,
    abort: grpc.StatusCode | None,
    message: str,
    delay_s: float,
    reason: str,
) -> None:
    service, _ = fake
    service.abort, service.message, service.delay_s = abort, message, delay_s
    req = request("Deployment/llm/vllm", SPEC, {"preset": "tpu.memory_used_ratio"})

    reading = (await source.read([req], deadline_s=0.3))[req.key]

    assert reading.value is None
    assert reason in (reading.error or "").lower()


async def test_empty_is_missing(source: CloudMonitoringSource) -> None:
    req = request("Deployment/llm/vllm", SPEC, {"preset": "tpu.memory_used_ratio"})
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert (reading.value, reading.error) == (None, None)


KV = "prometheus.googleapis.com/vllm:kv_cache_usage_perc/gauge"
#: vLLM with two API-server processes (prometheus-client's multiprocess mode): each engine's KV gauge once per
#: process, labelled ``pid`` (tests/sources/test_real_formats.py's COPIES): the largest copy per engine (0.9,
#: 0.4) is the engine's value, as the pods and Prometheus sources read it.
KV_COPIES = {"101": {"0": 0.9, "1": 0.2}, "102": {"0": 0.3, "1": 0.4}}


async def test_a_gauges_copies_per_process_are_read_as_one_series(
    fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    service, _ = fake
    target = {"cluster": "prod-1", "namespace": "llm", "job": "vllm", "instance": "vllm-6b7c8d-aaaaa:8000"}
    service.by_type = {KV: [
        series(KV, target, [(NOW - 5 - int(pid) % 2 * 20, value)], engine=engine, model_name="m", pid=pid)
        for pid, engines in KV_COPIES.items() for engine, value in engines.items()
    ] + [series(KV, target, [(NOW - 5, float("nan"))], engine="2", model_name="m", pid="101"),
         series(KV, target, [(NOW - 5, 0.5)], engine="2", model_name="m", pid="102")]}
    avg = request("Deployment/llm/vllm", SPEC, {"preset": "vllm.kv_cache_usage"}, name="avg")
    total = request("Deployment/llm/vllm", SPEC, {"preset": "vllm.kv_cache_usage", "aggregate": "sum"}, name="sum")

    readings = await source.read([avg, total], deadline_s=2)

    # Engines 0.9, 0.4 and 0.5 (a NaN copy loses to a number): averaged 0.6, added 1.8. Reading every copy as
    # its own series gave the average of six copies (NaN) and a sum of 2.3 plus NaN.
    assert readings[avg.key].value == pytest.approx(0.6)
    assert readings[total.key].value == pytest.approx(1.8)
