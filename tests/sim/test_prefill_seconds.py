"""The simulated servers' prefill time (vLLM ``vllm:request_prefill_time_seconds``, TGI
``tgi_batch_forward_duration{method="prefill"}``, read as their running sums' rates): what they count, and that the
``slo`` type measures each replica's prefill rate from it through the pipeline, as from a real server."""

from __future__ import annotations

import pytest

from autoscaler.core import sizing
from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.sim import pipeline
from autoscaler.sim.simulation import FixedController, Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import PROFILES, make_cluster, poisson_trace
from tests.sim.test_pipeline import _Scraper

#: The profile of ``make_cluster``'s pool.
PREFILL_TPS = PROFILES["tgi-gemma2-9b-2xl4"].prefill_tokens_per_second


def test_each_prefill_served_counts_its_seconds() -> None:
    lengths = [3, 180, 1500, 7000]
    trace = Trace("sizes", [float(i) for i in range(len(lengths))], lengths, [2] * len(lengths))
    sim = Simulation(cluster=make_cluster(initial=1), trace=trace, controller=FixedController("one", 1),
                     horizon_s=60.0)
    sim.run()
    gauges = sim.pool.gauges(sim.pool.ready()[0], sim.now)
    assert gauges.prefill_seconds == pytest.approx(sum(lengths) / PREFILL_TPS)
    assert gauges.prompt_tokens == sum(lengths)


@pytest.mark.parametrize(
    ("preset", "metric"),
    [
        pytest.param("tgi.prefill_seconds", "tgi_batch_forward_duration_sum", id="tgi"),
        pytest.param("vllm.prefill_seconds", "vllm:request_prefill_time_seconds_sum", id="vllm"),
    ],
)
def test_the_presets_are_served_under_their_real_names(preset: str, metric: str) -> None:
    spec = Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [{"name": "f", "preset": preset, "rate": {"windowSeconds": 60}}],
        "policy": {"type": "queue", "work": ["f"], "capacityPerReplica": 1},
    })
    binding = pipeline.bind(spec)[0]
    assert binding.metric == metric
    assert binding.preset.simulated == "prefill_seconds"


def test_the_prefill_rate_measured_through_the_pipeline_is_the_servers() -> None:
    """Two replicas serve Poisson traffic; the prompt tokens' rate over the prefill seconds' rate, as the
    policy judges both signals, is the profile's prefill rate (the prior the shipped policy states is 80 % of
    it), and the prefill was busy enough to be measured."""
    spec = Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [
            {"name": "prompt", "preset": "tgi.prompt_tokens", "rate": {"windowSeconds": 60}},
            {"name": "prefill", "preset": "tgi.prefill_seconds", "labels": {"method": "prefill"},
             "rate": {"windowSeconds": 60}},
        ],
        "policy": {"type": "queue", "work": ["prompt"], "capacityPerReplica": 1000},
    })
    scraper = _Scraper(spec, 2)
    sim = Simulation(cluster=make_cluster(initial=2), trace=poisson_trace(3.0, 300), controller=scraper,
                     horizon_s=300.0)
    sim.run()
    policy = ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"},
        "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
    })
    judge = compile_policy(policy).judge
    readings = judge.combine(scraper.last["readings"], scraper.last["status"], scraper.last["now"])
    values = judge.judge_all(readings, scraper.last["now"])
    assert values["prompt"].ok
    assert values["prefill"].ok
    busy = values["prefill"].value
    assert busy is not None
    assert busy >= sizing.MIN_PREFILL_BUSY
    measured = sizing.measured_prefill_rate(values["prompt"].value, busy)
    assert measured == pytest.approx(PREFILL_TPS, rel=0.02)
