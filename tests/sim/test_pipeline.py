"""Binding policy signals to simulated series, and the staleness the metric pipeline adds."""

from __future__ import annotations

import pytest

from autoscaler.core.spec import SignalSpec, Spec
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import ReplicaGauges


@pytest.mark.parametrize(
    ("signal", "preset"),
    [
        pytest.param({"preset": "jetstream.prefill_backlog"}, "jetstream.prefill_backlog", id="preset-backlog"),
        pytest.param({"preset": "vllm.kv_cache_usage"}, "vllm.kv_cache_usage", id="preset-kv"),
        pytest.param({"preset": "tgi.queue_size"}, "tgi.queue_size", id="preset-tgi"),
        pytest.param({"query": 'sum(vllm[:_]num_requests_waiting{namespace="x"})'}, "vllm.waiting",
                     id="query-colon-regex"),
        pytest.param({"query": "sum(vllm_num_requests_running)"}, "vllm.running", id="query-underscore"),
        pytest.param({"query": "avg(num_requests_waiting)"}, "jetstream.waiting", id="jetstream-waiting"),
        pytest.param({"metric": "tgi_batch_current_size"}, "tgi.batch_size", id="metric"),
        pytest.param({"query": 'max({__name__=~"vllm[:_](kv|gpu)_cache_usage_perc", namespace="v"})'},
                     "vllm.kv_cache_usage", id="name-regex"),
    ],
)
def test_preset_for(signal: dict[str, str], preset: str) -> None:
    assert pipeline.preset_for(SignalSpec.model_validate({"name": "s", **signal})).name == preset


def test_unknown_metric_is_a_clear_error() -> None:
    with pytest.raises(pipeline.BindingError, match="no simulated metric"):
        pipeline.preset_for(SignalSpec.model_validate({"name": "s", "query": "up"}))


def _spec(signals: list[dict[str, object]]) -> Spec:
    return Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 4,
        "signals": signals,
        "policy": {"type": "queue", "work": [signals[0]["name"]], "capacityPerReplica": 10},
    })


def _g(queued: int, running: int) -> ReplicaGauges:
    return ReplicaGauges(queued=queued, prefill_pending=0, running=running, decoding=running,
                         slots_used=running / 10, kv_usage=0.5)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({}, 5.0, id="queue-preset-sums"),
        pytest.param({"aggregate": "max"}, 4.0, id="aggregate-max"),
        pytest.param({"scope": "perReplica"}, 2.5, id="per-replica-average"),
        pytest.param({"scope": "perReplica", "aggregate": "max"}, 4.0, id="per-replica-explicit-max-wins"),
    ],
)
def test_aggregation(extra: dict[str, str], expected: float) -> None:
    spec = _spec([{"name": "q", "preset": "tgi.queue_size", **extra}])
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
    pipe.scrape(0.0, {"a": _g(1, 3), "b": _g(4, 3)})
    reading = pipe.visible(0.0)["q"]
    assert reading.value == expected
    assert reading.per_replica == {"a": 1.0, "b": 4.0}


def test_samples_are_visible_only_after_the_ingestion_delay() -> None:
    spec = _spec([{"name": "q", "preset": "tgi.queue_size"}])
    pipe = pipeline.MetricPipeline(
        PipelineSpec(scrape_interval_seconds=15, ingestion_delay_seconds=55), pipeline.bind(spec)
    )
    for k in range(10):
        pipe.scrape(15.0 * k, {"a": _g(k, 0)})
    assert pipe.visible(50.0) == {}
    seen = pipe.visible(100.0)["q"]
    # At 100 s the newest visible scrape is the one at 45 s (45 + 55 = 100).
    assert seen.timestamp == 45.0
    assert seen.value == 3.0


def test_no_ready_replica_is_missing_not_zero() -> None:
    spec = _spec([{"name": "q", "preset": "tgi.queue_size"}])
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
    pipe.scrape(0.0, {})
    assert pipe.visible(0.0)["q"].value is None
