"""The simulated servers' queue time, as TGI (``tgi_request_queue_duration``), vLLM
(``vllm:request_queue_time_seconds``) and JetStream (``jetstream_queue_duration``) measure it: from arrival until
the request's prefill begins (it joins a batch), so a request behind another's prefill counts that wait; observed as
the request ends (TGI, vLLM) or as it joins the decode batch (JetStream). Sources: ``autoscaler.sim.model``'s
docstring."""

from __future__ import annotations

from bisect import bisect_left

import pytest

from autoscaler.core import counters
from autoscaler.core.spec import Spec
from autoscaler.sim import pipeline
from autoscaler.sim.model import HISTOGRAM_BOUNDS, JETSTREAM_QUEUE_BOUNDS, ReplicaGauges
from autoscaler.sim.simulation import Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import PROFILES, make_cluster

#: The profile of ``make_cluster``'s pool.
PREFILL_TPS = PROFILES["tgi-gemma2-9b-2xl4"].prefill_tokens_per_second

#: A long prompt at 0 s (1.4 s of prefill), then a short one at 0.2 s that finds a slot free at once and waits
#: behind the long prefill; the short one decodes 300 tokens (about 12 s).
LONG, SHORT = 7000, 100
BEHIND_S = LONG / PREFILL_TPS - 0.2
TRACE = Trace("behind-a-prefill", [0.0, 0.2], [LONG, SHORT], [2, 300])


class _Probe:
    """Keeps one replica; reads its gauges at ``at`` seconds, mid-run."""

    kind = "baseline"
    name = "probe"

    def __init__(self, at: float) -> None:
        self.at = at
        self.gauges: ReplicaGauges | None = None

    def start(self, sim: Simulation) -> None:
        def one(now: float) -> None:
            sim.set_desired(1, now)

        def look(now: float) -> None:
            self.gauges = sim.pool.gauges(sim.pool.ready()[0], now)

        sim.every(0.0, one)
        sim.every(self.at, look)


def _run(at: float) -> tuple[Simulation, ReplicaGauges]:
    probe = _Probe(at)
    sim = Simulation(cluster=make_cluster(initial=1), trace=TRACE, controller=probe, horizon_s=60.0)
    sim.run()
    assert probe.gauges is not None
    return sim, probe.gauges


def _counts(cumulative: tuple[int, ...]) -> list[int]:
    """Observations per bucket from a cumulative histogram."""
    return [c - (cumulative[i - 1] if i else 0) for i, c in enumerate(cumulative)]


def _one_at(value: float, bounds: tuple[float, ...] = HISTOGRAM_BOUNDS) -> list[int]:
    counts = [0] * (len(bounds) + 1)
    counts[bisect_left(bounds, value)] += 1
    return counts


def _two(first: float, second: float, bounds: tuple[float, ...] = HISTOGRAM_BOUNDS) -> list[int]:
    return [a + b for a, b in zip(_one_at(first, bounds), _one_at(second, bounds), strict=True)]


def test_a_request_behind_a_long_prefill_counts_that_wait_as_queue_time() -> None:
    sim, gauges = _run(50.0)
    req = sim.requests
    assert req.done[1] < 50.0, "both requests ended"
    # The short request took a slot on arrival and began its prefill when the long one's ended.
    assert req.started[1] - req.arrival[1] == pytest.approx(BEHIND_S)
    assert req.first_token[1] - req.started[1] == pytest.approx(SHORT / PREFILL_TPS)
    assert _counts(gauges.queue_time) == _two(0.0, BEHIND_S)
    assert _counts(gauges.queue_time_inserted) == _two(0.0, BEHIND_S, JETSTREAM_QUEUE_BOUNDS)


def test_queue_time_is_observed_as_the_request_ends_and_as_it_joins_the_decode_batch() -> None:
    """At 5 s the short request decodes: TGI and vLLM have not observed its queue time yet (they do as the response
    ends); JetStream has (as the prefilled request is inserted into a decode slot)."""
    sim, gauges = _run(5.0)
    req = sim.requests
    assert req.first_token[1] < 5.0 < req.done[1], "the short request decodes at 5 s"
    assert _counts(gauges.queue_time) == _one_at(0.0)
    assert _counts(gauges.queue_time_inserted) == _two(0.0, BEHIND_S, JETSTREAM_QUEUE_BOUNDS)


def test_jetstreams_queue_time_has_jetstreams_own_buckets() -> None:
    """``jetstream_queue_duration``'s buckets are JetStream's own, not its TTFT's (``JetstreamMetricsCollector``,
    jetstream/core/metrics/prometheus.py): an edge at 2.0 s where the TTFT buckets have 2.5 s. A quantile is
    interpolated within its bucket, so the edges decide what a policy reads near a 2 s objective: the p99 of the two
    waits here (0 s and 1.2 s) is 1.98 s in JetStream's (1, 2] and would be 2.47 s in (1, 2.5]."""
    assert pipeline.BOUNDS["queue_time_inserted"][:-1] == (
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0
    )
    _, gauges = _run(50.0)
    histogram = dict(zip(pipeline.BOUNDS["queue_time_inserted"], gauges.queue_time_inserted, strict=True))
    assert counters.histogram_quantile(0.99, histogram) == pytest.approx(1.98)
    assert pytest.approx(1.2) == BEHIND_S


@pytest.mark.parametrize(
    ("preset", "metric", "quantity"),
    [
        pytest.param("tgi.queue_time", "tgi_request_queue_duration", "queue_time", id="tgi"),
        pytest.param("vllm.queue_time", "vllm:request_queue_time_seconds", "queue_time", id="vllm"),
        pytest.param("jetstream.queue_time", "jetstream_queue_duration", "queue_time_inserted", id="jetstream"),
    ],
)
def test_each_servers_preset_reads_the_queue_time_observed_where_that_server_observes_it(
    preset: str, metric: str, quantity: str
) -> None:
    spec = Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [{"name": "q", "preset": preset, "quantile": {"q": 0.99, "windowSeconds": 60}}],
        "policy": {"type": "queue", "work": ["q"], "capacityPerReplica": 1},
    })
    binding = pipeline.bind(spec)[0]
    assert binding.metric == metric
    assert binding.preset.simulated == quantity
