"""The simulated router's own counters (the endpoint picker's ``router.requests`` and ``router.request_bytes``):
counted from the requests the router receives, on arrival, not from what the pools serve."""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.core import catalog
from autoscaler.core.spec import Spec
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.simulation import Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import make_cluster, poisson_trace


def _spec(signals: list[dict[str, Any]]) -> Spec:
    return Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": signals,
        "policy": {"type": "queue", "work": [signals[0]["name"]], "capacityPerReplica": 1000},
    })


@pytest.mark.parametrize("preset", ["router.requests", "router.request_bytes", "router.input_tokens",
                                    "router.output_tokens"])
def test_the_router_presets_are_simulated(preset: str) -> None:
    p = catalog.get(preset)
    assert p.why_unavailable(catalog.SIMULATOR) is None
    assert p.simulated in pipeline.ROUTER_COUNTERS
    assert p.labels.pool_wide  # one series for the model, selected by labels, never per pod
    (binding,) = pipeline.bind(_spec([{"name": "s", "preset": preset, "rate": {"windowSeconds": 15}}]))
    assert binding.preset.name == preset


def test_the_router_counts_what_arrived_whether_or_not_it_was_served() -> None:
    # Ten prompts of 100 tokens arrive at 1..10 s on one replica; none has been answered at 10 s.
    trace = Trace("t", [float(i) for i in range(1, 11)], [100] * 10, [50] * 10)
    sim = Simulation(cluster=make_cluster(initial=1), trace=trace, controller=_Idle(), horizon_s=10)
    assert sim.router_counts(0.5) == pipeline.RouterCounts(0.0, 0.0)
    counts = sim.router_counts(10.0)
    assert counts.requests == 10.0
    assert counts.body_bytes == 10 * 100 * pipeline.BYTES_PER_PROMPT_TOKEN


def test_the_router_counts_answered_tokens_itself_as_requests_complete() -> None:
    """``router.input_tokens`` is the endpoint picker's one series, counted as each response ends: not a sum of
    the pods' per-replica rates (a pod started within the window would count its short span as the whole)."""
    trace = poisson_trace(4.0, 120)
    sim = Simulation(cluster=make_cluster(initial=2), trace=trace, controller=_Idle(), horizon_s=120)
    sim.run()
    req = sim.requests
    done = [i for i, d in enumerate(req.done) if not math.isnan(d)]  # completed
    assert done
    counts = sim.router_counts(10**6)
    assert counts.answered_prompt_tokens == sum(req.inputs[i] for i in done)
    assert counts.answered_output_tokens == sum(req.outputs[i] for i in done)


def test_a_router_reading_is_one_series_and_missing_without_a_router() -> None:
    spec = _spec([{"name": "arr", "preset": "router.requests", "rate": {"windowSeconds": 10}}])
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
    pipe.scrape(0.0, {}, pipeline.RouterCounts(100.0, 0.0))
    pipe.scrape(5.0, {}, pipeline.RouterCounts(130.0, 0.0))
    pipe.scrape(10.0, {}, pipeline.RouterCounts(200.0, 0.0))
    reading = pipe.visible(10.0)["arr"]
    assert reading.value == pytest.approx(10.0)  # (200 − 100) / 10 s, with no ready replica at all
    assert reading.per_replica is None
    alone = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
    alone.scrape(0.0, {})
    alone.scrape(5.0, {})
    assert alone.visible(5.0)["arr"].value is None  # no router: unknown, never zero


class _Idle:
    name = "idle"
    kind = "baseline"

    def start(self, sim: Any) -> None:
        pass


class _Reader:
    """Holds one replica and keeps what a policy reading the router and the served counter would see."""

    name = "reader"
    kind = "baseline"

    def __init__(self) -> None:
        spec = _spec([
            {"name": "arriving", "preset": "router.request_bytes", "rate": {"windowSeconds": 30}},
            {"name": "served", "preset": "router.input_tokens", "rate": {"windowSeconds": 30}},
        ])
        self.pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=5), pipeline.bind(spec))
        self.seen: list[tuple[float, float | None, float | None]] = []

    def start(self, sim: Simulation) -> None:
        def scrape(now: float) -> float:
            self.pipe.scrape(now, {r.name: sim.pool.gauges(r, now) for r in sim.pool.ready()},
                             sim.router_counts(now))
            got = self.pipe.visible(now)
            self.seen.append((now, got["arriving"].value, got["served"].value))
            return now + 5.0

        sim.every(0.0, scrape)


def test_a_burst_shows_in_the_arrivals_while_the_served_rate_stops_at_capacity() -> None:
    """The reason the router's arrival counters exist: one replica offered several times what it serves. The
    served prompt tokens (what the endpoint picker counts once answered) stop at the replica's capacity; the
    bytes the router received keep the whole offered load."""
    trace = poisson_trace(40.0, 300, inp=800)
    reader = _Reader()
    sim = Simulation(cluster=make_cluster(initial=1, pool={"maxReplicas": 1}), trace=trace, controller=reader,
                     horizon_s=300)
    sim.run()
    offered = sum(trace.inputs) / 300.0
    late = [(a, s) for t, a, s in reader.seen if 120 <= t <= 300 and a is not None and s is not None]
    assert late
    for arriving, served in late:
        tokens = arriving / pipeline.BYTES_PER_PROMPT_TOKEN
        assert tokens == pytest.approx(offered, rel=0.3)
        assert served < 0.5 * tokens
