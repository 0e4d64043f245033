"""Walking the one preset catalog: every preset is served by every source and by the simulator, or is marked
unavailable there, and then ``validate``, the source and ``simulate`` all say the catalog's reason.

"Served" is checked at the wire: Prometheus and GMP answer an HTTP fake with the series laid out as the
platform stores them (the preset's namespace/pod labels), the pods source scrapes an exposition naming the
metric, Cloud Monitoring answers the real async client from the in-process gRPC fake, and the simulator
exports the preset's quantity from a simulated replica.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
from google.cloud import monitoring_v3
from pydantic import ValidationError

from autoscaler.core import catalog
from autoscaler.core.catalog import Preset
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import PodStatus, ReplicaStatus, SignalReading
from autoscaler.core.sourcespec import (
    CloudMonitoringSourceSpec,
    GmpSourceSpec,
    PodsSourceSpec,
    PrometheusSourceSpec,
    SourceSpec,
)
from autoscaler.core.spec import KNOWN_PRESETS, ScalingPolicy, Spec
from autoscaler.policyfile import schema
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import ReplicaGauges
from autoscaler.sources.base import PodRef
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.pool import SourcePool
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.helpers import request
from tests.sources.realprom import TextServer
from tests.sources.test_cloud_monitoring import NOW, FakeMetricService, fake, series, source

__all__ = ["fake", "source"]  # the Cloud Monitoring fixtures, used below

NS = "llm"
POD = "srv-6b7c8d9f4-x2x7q"
NODE = "gke-pool-a"


#: How a signal reads each kind of preset.
FORMS: dict[str, dict[str, Any]] = {
    "gauge": {},
    "counter": {"rate": {"windowSeconds": 60}},
    "histogram": {"quantile": {"q": 0.5, "windowSeconds": 60}},
}


def signal(preset: str) -> dict[str, Any]:
    return {"preset": preset, **FORMS[catalog.get(preset).kind]}


def doc(preset: str, source: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "target": {"kind": "Deployment", "name": "srv", "namespace": NS},
        "maxReplicas": 4,
        "signals": [{"name": "s", **signal(preset)}],
        "policy": {"type": "queue", "work": ["s"], "capacityPerReplica": 10},
    }
    if source is not None:
        spec["source"] = source
    return {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"}, "spec": spec}


SPECS: dict[str, SourceSpec] = {
    "prometheus": PrometheusSourceSpec(type="prometheus", url="http://unused", timeout_seconds=1),
    "gmp": GmpSourceSpec(type="gmp", project="proj", cluster="c1", timeout_seconds=1),
    "cloud-monitoring": CloudMonitoringSourceSpec(type="cloud-monitoring", project="proj", cluster="c1"),
    "pods": PodsSourceSpec(type="pods", timeout_seconds=1),
}

CASES = [
    pytest.param(p, place, id=f"{p.name}@{place}") for p in catalog.PRESETS.values() for place in catalog.PLACES
]


def test_the_policy_language_knows_exactly_the_catalog() -> None:
    assert KNOWN_PRESETS == catalog.NAMES
    enum = schema.generate()["$defs"]["SignalSpec"]["properties"]["preset"]["enum"]
    assert [e for e in enum if e is not None] == list(catalog.NAMES)
    for p in catalog.PRESETS.values():
        assert set(p.unavailable) <= set(catalog.PLACES), p.name
        assert p.simulated is None or p.simulated in catalog.SIMULATED, p.name


def _vector(rows: list[tuple[dict[str, str], float, float]]) -> str:
    result: list[dict[str, Any]] = []
    for labels, value, stamp in rows:
        result.append({"metric": {**labels, "autoscaler_part": "value"}, "value": [stamp + 1, str(value)]})
        if "le" not in labels or labels["le"] == "+Inf":
            time_labels = {k: v for k, v in labels.items() if k != "le"}
            result.append({"metric": {**time_labels, "autoscaler_part": "time"}, "value": [stamp + 1, str(stamp)]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


#: One pod's bucket rates for histogram presets: half the observations at or below 0.5 s, all below 1 s.
BUCKETS = {"0.5": 2.0, "1": 4.0, "+Inf": 4.0}
MEDIAN = 0.5


def _judged(preset: Preset, reading: SignalReading) -> SignalReading:
    """The reading as the core combines it for the target (one ready pod)."""
    judge = compile_policy(ScalingPolicy.model_validate(doc(preset.name, None))).judge
    replicas = ReplicaStatus(1, 1, pods=(PodStatus(POD, True, 60.0),))
    return judge.combine({"s": reading}, replicas, (reading.timestamp or 0.0) + 1)["s"]


async def _prometheus(preset: Preset, place: str) -> None:
    server = TextServer(content_type="application/json")
    layout = preset.labels
    where = {layout.namespace: NS, layout.pod: POD}
    if preset.kind == "histogram":
        server.body = _vector([({**where, "le": le}, rate, 1000.0) for le, rate in BUCKETS.items()])
    else:
        server.body = _vector([(where, 0.25, 1000.0)])

    async def token() -> str:
        return "t"

    spec = SPECS[place]
    source = PrometheusSource(
        spec, base_url=server.base, token=token if place == "gmp" else None  # type: ignore[arg-type]
    )
    req = request(f"Deployment/{NS}/srv", spec, signal(preset.name))
    try:
        reading = (await source.read([req], deadline_s=2))[req.key]
    finally:
        await source.aclose()
        server.close()
    assert reading.error is None, reading.error
    got = _judged(preset, reading)
    assert (got.value, got.timestamp) == (MEDIAN if preset.kind == "histogram" else 0.25, 1000.0)
    query = urllib.parse.parse_qs(server.seen[0][3])["query"][0]
    suffix = "_bucket" if preset.kind == "histogram" else ""
    for name in preset.metrics + preset.denominator:
        assert f"{name}{suffix}{{" in query  # every spelling, by exact name
    if preset.kind != "gauge":
        assert "rate(" in query
        assert "[60s]" in query
    assert f'{layout.namespace}=~"{NS}"' in query
    if place == "gmp":
        assert 'cluster="c1"' in query


async def _pods(preset: Preset) -> None:
    clock = [1000.0]
    server = TextServer()
    source = PodsSource(clock=lambda: clock[0])
    pods = (PodRef(POD, url=server.url),)
    req = request(f"Deployment/{NS}/srv", SPECS["pods"], signal(preset.name), pods=pods)

    def body(scale: float) -> str:
        if preset.kind == "histogram":
            return "".join(f'{preset.metrics[0]}_bucket{{le="{le}"}} {n * scale}\n' for le, n in BUCKETS.items())
        lines = [f'{preset.metrics[0]}{{model_name="m"}} {3 * scale}']
        lines += [f"{name} 4" for name in preset.denominator[:1]]
        return "\n".join(lines) + "\n"

    try:
        server.body = body(1.0)
        reading = (await source.read([req], deadline_s=2))[req.key]
        if preset.kind != "gauge":  # a rate needs a second scrape
            clock[0] += 10.0
            server.body = body(11.0)
            reading = (await source.read([req], deadline_s=2))[req.key]
    finally:
        await source.aclose()
        server.close()
    assert reading.error is None, reading.error
    expected = {"gauge": 0.75 if preset.denominator else 3.0, "counter": 3.0, "histogram": MEDIAN}[preset.kind]
    assert _judged(preset, reading).value == pytest.approx(expected)


async def _cloud_monitoring(preset: Preset, service: FakeMetricService, source: CloudMonitoringSource) -> None:
    num, den = preset.cloud_monitoring_types()
    node_level = num[0].startswith("kubernetes.io/node/")
    if node_level:
        where = {"cluster_name": "c1", "node_name": NODE}
    elif num[0].startswith("prometheus.googleapis.com/"):
        where = {"cluster": "c1", "namespace": NS, "pod": POD, "instance": f"{POD}:9090"}
    else:
        where = {"cluster_name": "c1", "namespace_name": NS, "pod_name": POD, "container_name": "srv"}
    if preset.kind == "histogram":
        # What ALIGN_DELTA over 60 s returns: the observations of the period per bucket (120 = 2/s below 0.5 s).
        one = series(num[0], where, [(NOW - 20, 0.0)])
        one.points[0].value = monitoring_v3.TypedValue(distribution_value={
            "count": 240, "bucket_options": {"explicit_buckets": {"bounds": [0.5, 1.0]}},
            "bucket_counts": [120, 120, 0],
        })
        service.by_type = {num[0]: [one]}
    else:
        service.by_type = {num[0]: [series(num[0], where, [(NOW - 20, 3.0)])]}
    if den:
        service.by_type[den[0]] = [series(den[0], where, [(NOW - 20, 4.0)])]
    pods = (PodRef(POD, node=NODE),)
    req = request(f"Deployment/{NS}/srv", SPECS["cloud-monitoring"], signal(preset.name), pods=pods)
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.error is None, reading.error
    expected = {"gauge": 0.75 if den else 3.0, "counter": 3.0, "histogram": MEDIAN}[preset.kind]
    assert _judged(preset, reading).value == pytest.approx(expected)
    assert reading.timestamp == NOW - 20
    aligner = {"gauge": 0, "counter": monitoring_v3.Aggregation.Aligner.ALIGN_RATE,
               "histogram": monitoring_v3.Aggregation.Aligner.ALIGN_DELTA}[preset.kind]
    asked = service.requests[-1].aggregation
    assert asked.per_series_aligner == aligner
    if aligner:
        assert asked.alignment_period.seconds == 60


def _simulated(preset: Preset) -> None:
    spec = Spec.model_validate(doc(preset.name, None)["spec"])
    (binding,) = pipeline.bind(spec)
    assert binding.preset is preset
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=15), [binding])
    for t, n in ((0.0, 0), (15.0, 30)):
        hist = (0,) * 9 + (n // 2,) * 12 + (n,) * 2  # half the observations at or below 0.5 s
        tpot = (0,) * 5 + (n // 2,) * 13 + (n,) * 2  # vLLM's inter-token buckets (19 bounds and +Inf)
        plen = (0,) * 9 + (n // 2,) * 6 + (n,) * 2  # prompt lengths (16 bounds and +Inf): half at or below 500
        jq = (0,) * 5 + (n // 2,) * 7 + (n,) * 2  # JetStream's queue time (13 bounds and +Inf): half at or below 0.5 s
        gauges = ReplicaGauges(2, 1, 3, 3, 0.375, 0.5, prompt_tokens=10.0 * n, generation_tokens=20.0 * n,
                               ttft=hist, ttft_from_prefill=hist, queue_time=hist, queue_time_inserted=jq, tpot=tpot,
                               prompt_length=plen)
        # The router's own counters (router.* presets), which no replica exports.
        pipe.scrape(t, {POD: gauges}, pipeline.RouterCounts(n, 40.0 * n, 10.0 * n, 20.0 * n))
    readings = pipe.visible(15.0)
    replicas = ReplicaStatus(1, 1, pods=(PodStatus(POD, True, 60.0),))
    got = compile_policy(ScalingPolicy.model_validate(doc(preset.name, None))).judge.combine(readings, replicas, 15.0)
    value = got["s"].value
    assert value is not None
    assert value >= 0.0


@pytest.mark.parametrize(("preset", "place"), CASES)
async def test_every_preset_is_served_everywhere_or_says_why(
    preset: Preset, place: str, fake: tuple[FakeMetricService, str], source: CloudMonitoringSource
) -> None:
    why = preset.why_unavailable(place)
    if place == catalog.SIMULATOR:
        if why is None:
            _simulated(preset)
        else:
            with pytest.raises(pipeline.BindingError) as err:
                pipeline.bind(Spec.model_validate(doc(preset.name, None)["spec"]))
            assert why in str(err.value)
        return
    source_block = SPECS[place].model_dump(by_alias=True, exclude_none=True)
    if why is not None:
        # validate refuses it with the catalog's reason, and a source asked anyway says the same.
        with pytest.raises(ValidationError) as refused:
            ScalingPolicy.model_validate(doc(preset.name, source_block))
        assert why in str(refused.value)
        pool = SourcePool()
        req = request(f"Deployment/{NS}/srv", SPECS[place], signal(preset.name))
        reading = (await pool.read([req], deadline_s=1))[req.key]
        await pool.aclose()
        assert reading.value is None
        assert why in (reading.error or "")
        return
    ScalingPolicy.model_validate(doc(preset.name, source_block))
    if place in ("prometheus", "gmp"):
        await _prometheus(preset, place)
    elif place == "pods":
        await _pods(preset)
    else:
        await _cloud_monitoring(preset, fake[0], source)
