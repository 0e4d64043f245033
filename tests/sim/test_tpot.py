"""The simulated servers' per-token latency histogram (vLLM's ``inter_token_latency_seconds``): what it counts,
and that a policy's ``vllm.time_per_output_token`` signal reads it in simulation as it would in a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import TPOT_BOUNDS
from autoscaler.sim.simulation import FixedController, PolicyController, Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import PROFILES, make_cluster, poisson_trace
from tests.sim.test_pipeline import _Scraper

#: tgi-gemma2-9b-2xl4 (the test cluster's profile): a decode step of 38 ms + 0.75 ms per sequence, 5,000 prompt
#: tokens/s.
PROF = PROFILES["tgi-gemma2-9b-2xl4"]


def _step(n: int) -> float:
    return (PROF.decode_step.base_ms + PROF.decode_step.per_sequence_ms * n) / 1000.0


def _bucket(seconds: float) -> int:
    return next(i for i, b in enumerate(TPOT_BOUNDS) if seconds <= b)


def _histogram(trace: Trace, horizon: float) -> list[int]:
    """One replica serving ``trace``; its per-token histogram (per bucket, not cumulative) at the horizon."""
    sim = Simulation(cluster=make_cluster(initial=1), trace=trace, controller=FixedController("one", 1),
                     horizon_s=horizon)
    sim.pool.count_per_token_latency()
    sim.run()
    rep = sim.pool.ready()[0]
    cumulative = sim.pool.gauges(rep, sim.now).tpot
    assert len(cumulative) == len(TPOT_BOUNDS) + 1
    return [c - (cumulative[i - 1] if i else 0) for i, c in enumerate(cumulative)]


def test_a_lone_sequence_counts_one_step_per_token() -> None:
    """101 output tokens: the first comes from prefill, the other 100 one decode step apart each."""
    per_bucket = _histogram(Trace("one", [0.0], [800], [101]), 30.0)
    assert sum(per_bucket) == 100
    assert per_bucket[_bucket(_step(1))] == 100


def test_a_prefill_pause_is_one_long_interval_of_each_paused_sequence() -> None:
    """B's prompt arrives while A decodes: its prefill (800 / 5,000 tokens/s = 0.16 s) pauses A, so one of A's
    100 intervals is the pause plus a step; every other token of A and B is one ordinary step apart."""
    per_bucket = _histogram(Trace("two", [0.0, 1.0], [800, 800], [101, 51]), 30.0)
    long_interval = 800 / PROF.prefill_tokens_per_second + _step(1)
    assert _bucket(long_interval) != _bucket(_step(2))
    assert per_bucket[_bucket(long_interval)] == 1
    assert per_bucket[_bucket(_step(2))] == 100 - 1 + 50
    assert sum(per_bucket) == 150


def _tpot_spec(q: float) -> Spec:
    return Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"},
        "maxReplicas": 8,
        "signals": [
            {"name": "tpot", "preset": "vllm.time_per_output_token", "quantile": {"q": q, "windowSeconds": 60}},
        ],
        "policy": {"type": "queue", "work": ["tpot"], "capacityPerReplica": 1},
    })


def _policy(spec: Spec) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"},
        "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
    })


def _read(spec: Spec, rate: float, replicas: int) -> tuple[float, Any]:
    scraper = _Scraper(spec, replicas)
    sim = Simulation(cluster=make_cluster(initial=replicas), trace=poisson_trace(rate, 300), controller=scraper,
                     horizon_s=300)
    sim.pool.count_per_token_latency()
    sim.run()
    judge = compile_policy(_policy(spec)).judge
    readings = judge.combine(scraper.last["readings"], scraper.last["status"], scraper.last["now"])
    value = readings["tpot"].value
    assert value is not None, readings["tpot"]
    return value, sim


def test_the_tpot_preset_is_served_by_the_simulator_under_its_real_name() -> None:
    binding = pipeline.bind(_tpot_spec(0.5))[0]
    assert binding.metric == "vllm:inter_token_latency_seconds"
    assert binding.preset.simulated == "tpot"


@pytest.mark.parametrize(("rate", "replicas"), [pytest.param(0.5, 2, id="light"), pytest.param(6.0, 2, id="busy")])
def test_the_tpot_median_is_the_decode_step_of_the_batch_served(rate: float, replicas: int) -> None:
    """The median per-token latency read through the pipeline lies between one step of a batch of one and one
    step of a full batch, and a busier server (larger batches) reads a longer one."""
    median, _ = _read(_tpot_spec(0.5), rate, replicas)
    assert _step(1) * 0.5 <= median <= _step(PROF.slots)


def test_busier_decode_reads_a_longer_time_per_output_token() -> None:
    light, _ = _read(_tpot_spec(0.9), 0.5, 2)
    busy, _ = _read(_tpot_spec(0.9), 6.0, 2)
    assert busy > light


def test_a_policy_reading_tpot_makes_its_pool_count_it() -> None:
    """The histogram is kept only where a policy reads it (it costs simulation time): a policy controller
    reading ``vllm.time_per_output_token`` turns it on for its pool; one that does not leaves it off."""
    reads = PolicyController(compile_policy(_policy(_tpot_spec(0.5))), PipelineSpec(scrape_interval_seconds=5),
                             "default")
    other = _policy(Spec.model_validate({
        "target": {"kind": "Deployment", "name": "d"}, "maxReplicas": 8,
        "signals": [{"name": "q", "preset": "vllm.waiting"}],
        "policy": {"type": "queue", "work": ["q"], "capacityPerReplica": 4},
    }))
    ignores = PolicyController(compile_policy(other), PipelineSpec(scrape_interval_seconds=5), "default")
    for ctl, counted in ((reads, True), (ignores, False)):
        sim = Simulation(cluster=make_cluster(initial=1), trace=Trace("one", [0.0], [800], [101]), controller=ctl,
                         horizon_s=30.0)
        sim.run()
        rep = sim.pool.ready()[0]
        assert sim.pool.gauges(rep, sim.now).tpot[-1] == (100 if counted else 0)
