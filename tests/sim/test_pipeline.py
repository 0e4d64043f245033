"""Binding policy signals to simulated series, and the staleness the metric pipeline adds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autoscaler.core import counters
from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy, SignalSpec, Spec
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import HISTOGRAM_BOUNDS, ReplicaGauges
from autoscaler.sim.simulation import Simulation
from tests.sim.test_model import make_cluster, poisson_trace


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
        pytest.param({"metric": "tgi_batch_current_max_tokens"}, "tgi.batch_max_tokens", id="metric-tgi-tokens"),
        pytest.param({"query": "sum(tgi_batch_current_max_tokens)"}, "tgi.batch_max_tokens", id="query-tgi-tokens"),
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


def test_the_tgi_batch_tokens_sum_over_the_replicas() -> None:
    """``tgi.batch_max_tokens`` exports each replica's batch reservation (tokens), summed for the target like the
    batch size: the policy divides it by the stated budget per ready replica."""
    spec = _spec([{"name": "kvtok", "preset": "tgi.batch_max_tokens"}])
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
    a = ReplicaGauges(0, 0, 3, 3, 0.3, 0.2, batch_tokens=12000.0)
    b = ReplicaGauges(2, 0, 5, 5, 0.5, 0.9, batch_tokens=60000.0)
    pipe.scrape(0.0, {"a": a, "b": b})
    reading = pipe.visible(0.0)["kvtok"]
    assert reading.per_replica == {"a": 12000.0, "b": 60000.0}
    assert reading.value == 72000.0


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


# --- counters and histograms: what simulated servers count from the requests they serve --------------------


class _Scraper:
    """Keeps a fixed fleet and scrapes it every 5 s into a metric pipeline; remembers when it scraped."""

    kind = "baseline"

    def __init__(self, spec: Spec, replicas: int) -> None:
        self.name = "scraper"
        self.replicas = replicas
        self.pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
        self.times: list[float] = []
        self.last: dict[str, Any] = {}

    def start(self, sim: Any) -> None:
        def fixed(now: float) -> None:
            sim.set_desired(self.replicas, now)

        def scrape(now: float) -> float:
            self.pipe.scrape(now, {r.name: sim.pool.gauges(r, now) for r in sim.pool.ready()})
            self.times.append(now)
            self.last = {"status": sim.replica_status(now), "readings": self.pipe.visible(now), "now": now}
            return now + 5.0

        sim.every(0.0, fixed)
        sim.every(0.0, scrape)


def test_simulated_counters_and_histograms_match_the_requests_served() -> None:
    spec = Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [
            {"name": "prompt", "preset": "tgi.prompt_tokens", "rate": {"windowSeconds": 60}},
            {"name": "queue", "preset": "tgi.queue_time", "quantile": {"q": 0.9, "windowSeconds": 60}},
            {"name": "ttft", "preset": "vllm.ttft", "quantile": {"q": 0.5, "windowSeconds": 60}},
        ],
        "policy": {"type": "queue", "work": ["prompt"], "capacityPerReplica": 1000},
    })
    scraper = _Scraper(spec, 2)
    trace = poisson_trace(4.0, 600)
    sim = Simulation(cluster=make_cluster(initial=2), trace=trace, controller=scraper, horizon_s=600)
    sim.run()
    now = scraper.last["now"]
    judge = compile_policy(ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"},
        "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
    })).judge
    readings = judge.combine(scraper.last["readings"], scraper.last["status"], now)
    # The window: the scrapes within 60 s of the newest (at least two).
    t0 = min(t for t in scraper.times if t >= now - 60)
    req = sim.requests
    served = [i for i, ft in enumerate(req.first_token) if t0 < ft <= now]
    assert served, "the window saw requests"
    truth = sum(req.inputs[i] for i in served) / (now - t0)
    assert readings["prompt"].value == pytest.approx(truth)
    ttfts = sorted(req.first_token[i] - req.arrival[i] for i in served)
    median = ttfts[len(ttfts) // 2]
    # The quantile is interpolated inside the bucket holding the true median.
    value = readings["ttft"].value
    assert value is not None
    bounds = (0.0, *HISTOGRAM_BOUNDS)
    bucket = next(b for b in HISTOGRAM_BOUNDS if median <= b)
    assert bounds[bounds.index(bucket) - 1] <= value <= bucket
    queue = readings["queue"].value
    assert queue is not None
    assert queue >= 0.0


@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.integers(0, 40), min_size=0, max_size=12, unique=True),
    values=st.lists(st.lists(st.integers(0, 50) | st.floats(0, 1e6, allow_nan=False), min_size=3, max_size=3),
                    min_size=12, max_size=12),
    window=st.sampled_from([5.0, 10.0, 60.0]),
)
@example(times=[0, 5, 10], values=[[3, 0, 9], [1, 4, 9], [2, 5, 12]] + [[0, 0, 0]] * 9, window=60.0)
# Fractional counts without a reset, where summing the steps rounds differently from newest minus oldest.
@example(times=[0, 5, 10], values=[[0.3, 0, 1], [4.3, 1, 2], [8.4, 2, 3]] + [[0, 0, 0]] * 9, window=60.0)
def test_bucket_rates_are_each_buckets_rate(times: list[int], values: list[list[float]], window: float) -> None:
    """The pipeline rates a histogram's buckets in one pass (``counters.rates``): each equals ``counters.rate``
    of that bucket alone, exactly (fractional counts too), resets included (the example has one in the first
    bucket)."""
    points = [(float(t), [float(v) for v in values[i]]) for i, t in enumerate(sorted(times))]
    together = counters.rates(points, window)
    alone = [counters.rate([(t, v[i]) for t, v in points], window) for i in range(3)]
    if together is None:
        assert alone == [None, None, None]
    else:
        assert together == alone
