"""The simulated servers' prompt-length histograms (TGI ``tgi_request_input_length``, vLLM
``vllm:request_prompt_tokens``, JetStream ``jetstream_request_input_length``): what they count, and that a policy
reads them through the catalog's presets in simulation, with the buckets the ``slo`` type sizes the prefill queue
from (``SignalValue.histogram``)."""

from __future__ import annotations

import math

import pytest

from autoscaler.core import sizing
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import SignalReading
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.sim import pipeline
from autoscaler.sim.model import PROMPT_BOUNDS
from autoscaler.sim.simulation import FixedController, Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import make_cluster
from tests.sim.test_pipeline import _Scraper


def test_each_prompt_served_is_counted_once_in_its_bucket() -> None:
    lengths = [3, 180, 200, 201, 1500, 7000]
    trace = Trace("sizes", [float(i) for i in range(len(lengths))], lengths, [2] * len(lengths))
    sim = Simulation(cluster=make_cluster(initial=1), trace=trace, controller=FixedController("one", 1),
                     horizon_s=60.0)
    sim.run()
    rep = sim.pool.ready()[0]
    cumulative = sim.pool.gauges(rep, sim.now).prompt_length
    assert len(cumulative) == len(PROMPT_BOUNDS) + 1
    for bound, count in zip(PROMPT_BOUNDS, cumulative, strict=False):
        # Prometheus buckets are cumulative "less than or equal": 200 is in le=200, 201 is not.
        assert count == sum(1 for x in lengths if x <= bound), bound
    assert cumulative[-1] == len(lengths)


def _spec(preset: str) -> Spec:
    return Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [{"name": "plen", "preset": preset, "quantile": {"q": 0.5, "windowSeconds": 120}}],
        "policy": {"type": "queue", "work": ["plen"], "capacityPerReplica": 1000},
    })


def _policy(spec: Spec) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"},
        "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
    })


@pytest.mark.parametrize(
    ("preset", "metric"),
    [
        pytest.param("tgi.prompt_length", "tgi_request_input_length", id="tgi"),
        pytest.param("vllm.prompt_length", "vllm:request_prompt_tokens", id="vllm"),
        pytest.param("jetstream.prompt_length", "jetstream_request_input_length", id="jetstream"),
    ],
)
def test_the_presets_are_served_under_their_real_names(preset: str, metric: str) -> None:
    binding = pipeline.bind(_spec(preset))[0]
    assert binding.metric == metric
    assert binding.preset.simulated == "prompt_length"


def test_a_policy_reads_the_distribution_served_through_the_pipeline() -> None:
    """Two replicas serve 600-token and 6,000-token prompts alternately: the judged signal carries both pods'
    summed buckets, whose moments are those of the prompts (within the buckets' resolution)."""
    n = 120
    arrivals = [i * 1.0 for i in range(n)]
    lengths = [600 if i % 2 else 6000 for i in range(n)]
    spec = _spec("tgi.prompt_length")
    scraper = _Scraper(spec, 2)
    sim = Simulation(cluster=make_cluster(initial=2), trace=Trace("two", arrivals, lengths, [2] * n),
                     controller=scraper, horizon_s=float(n))
    sim.run()
    judge = compile_policy(_policy(spec)).judge
    readings = judge.combine(scraper.last["readings"], scraper.last["status"], scraper.last["now"])
    value = judge.judge_all(readings, scraper.last["now"])["plen"]
    assert value.ok, value
    assert value.histogram is not None
    got = sizing.lengths_from_histogram(value.histogram)
    assert got is not None
    # 600 lies in (500, 1000], 6,000 in (5000, 10000]: half of the observations each, each bucket read at its
    # log-uniform mean (hi − lo)/ln 2.
    assert [length for length, _ in got.points] == pytest.approx([500 / math.log(2), 5000 / math.log(2)])
    assert [share for _, share in got.points] == pytest.approx([0.5, 0.5], abs=0.05)
    assert math.isclose(got.mean, (500 + 5000) / math.log(2) / 2, rel_tol=0.05)  # the buckets' resolution


def test_the_quantile_alone_has_no_buckets() -> None:
    """A reading without per-pod buckets (PromQL's histogram_quantile) is judged without a distribution."""
    judge = compile_policy(_policy(_spec("tgi.prompt_length"))).judge
    value = judge.judge_all({"plen": SignalReading(900.0, 100.0)}, 101.0)["plen"]
    assert value.ok
    assert value.histogram is None
