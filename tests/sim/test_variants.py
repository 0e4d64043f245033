"""Resize through variants in the simulator (issue 14, item 4): ``cluster-tpu7x-codelab-variants.yaml`` serves
the decode role from a 2x2x2 and a 2x4x4 LeaderWorkerSet; the router spreads the role's requests over the ready
groups of both, and the variants example policy shifts decode between the two shapes in whole slices."""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.core.engine import compile_policy
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import disagg, traces
from autoscaler.sim.cluster import SimulatedCluster
from autoscaler.sim.simulation import FixedController, PolicyController, Simulation
from bench import sim_codelab

VARIANTS = cluster_mod.bundled("cluster-tpu7x-codelab-variants.yaml")


def _trace(rate_scale: float, duration: float) -> traces.Trace:
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    return traces.reshape(raw, time_scale=1.0, rate_scale=rate_scale, duration_s=duration, start_s=0.0, seed=0)


class _Idle(FixedController):
    """Changes nothing: the warm start is the fleet."""

    def start(self, sim: Any) -> None:
        return None


def test_one_role_on_two_slice_shapes_serves_every_request_once() -> None:
    """One 2x2x2 and one 2x4x4 decode group: every request's first token comes from exactly one decode group
    of either LWS, and the 2x4x4 group (4x the slots) takes the larger share (fewest outstanding per slot)."""
    cl = cluster_mod.load(VARIANTS)
    trace = _trace(10.0, 300.0)
    sim = Simulation(cluster=cl, trace=trace, controller=_Idle("idle", 0),
                     initial_by_pool={"prefill": 3, "decode": 1, "decode-2x4x4": 1}, slo_ttft_s=2.0)
    res = sim.run()
    small, big = (next(p for p in sim.pools if p.name == n) for n in ("decode", "decode-2x4x4"))
    assert small.req is big.req  # one request stream for the role
    served = sum(1 for t in res.requests.first_token if not math.isnan(t))
    assert small.completed + big.completed == served == len(trace.arrivals)
    # Per slot: about 4:1 (routing by outstanding requests alone gave 1.8:1 here).
    assert 0 < 3 * small.completed < big.completed
    assert res.pool_chip_s["decode-2x4x4"] == pytest.approx(32 * res.horizon_s)  # held the whole run
    assert res.slice_violations == []


def test_the_policy_shifts_decode_to_the_larger_slice_and_back_in_whole_slices() -> None:
    """The variants example on the codelab's conversation trace ×20: when decode needs ~51,000 tokens/s, one
    2x4x4 group (32 chips) carries it cheaper than five 2x2x2 (40): it is started first, and the 2x2x2 groups are
    removed only once it serves; every group is a whole slice of its own shape."""
    cl = cluster_mod.load(VARIANTS)
    pol = sim_codelab.adapted_joint_policy(sim_codelab.VARIANTS_POLICY, "llm-d-pd-variants")
    pipe = cl.pipeline_name_for("default")
    ctl = PolicyController(compile_policy(pol), cl.spec.metric_pipelines[pipe], pipe)
    sim = Simulation(cluster=cl, trace=_trace(20.0, 1200.0), controller=ctl,
                     initial_by_pool={"prefill": 3, "decode": 2}, slo_ttft_s=2.0)
    res = sim.run()
    events = [(t, before, after, message.split(":", 1)[0]) for t, before, after, _, message in res.scale_events]
    big_up = next(t for t, before, after, pool in events if pool == "decode-2x4x4" and after > before)
    small_down = [t for t, before, after, pool in events if pool == "decode" and after < before]
    assert small_down, events
    assert min(small_down) > big_up + sim.pools[2].cold_start_s, events
    assert res.pool_chip_s["decode-2x4x4"] > 0
    assert res.slice_violations == []


def test_a_variant_pool_must_name_a_pool_and_only_variants_may_hold_zero() -> None:
    doc = cluster_mod.load(VARIANTS).doc.model_dump(by_alias=True, mode="json")
    bad = {**doc, "spec": {**doc["spec"], "disaggregation": {**doc["spec"]["disaggregation"],
                                                             "decodeVariants": ["nope"]}}}
    with pytest.raises(ValueError, match="decodeVariants names unknown pool 'nope'"):
        SimulatedCluster.model_validate(bad)
    spec = doc["spec"]
    zero = {**doc, "spec": {**spec, "disaggregation": {**spec["disaggregation"], "decodeVariants": []}}}
    with pytest.raises(ValueError, match="minReplicas 0 is only for a disaggregation variant pool"):
        SimulatedCluster.model_validate(zero)


@pytest.mark.parametrize(("need", "mix"), [
    pytest.param(1.0, {"decode": 1, "decode-2x4x4": 0}, id="one-small-group"),
    pytest.param(4.4, {"decode": 0, "decode-2x4x4": 1}, id="one-large-group-not-five-small"),
    pytest.param(5.4, {"decode": 1, "decode-2x4x4": 1}, id="large-plus-small"),
    pytest.param(8.8, {"decode": 0, "decode-2x4x4": 2}, id="two-large-not-nine-small"),
    pytest.param(12.0, {"decode": 4, "decode-2x4x4": 2}, id="large-at-its-max-then-small"),
])
def test_the_pair_oracle_carries_a_role_at_its_cheapest_mix_of_shapes(need: float, mix: dict[str, int]) -> None:
    """The oracle has the variant dimension the policy has: a need (in 2x2x2 groups) is carried by the mix of
    shapes with the fewest chips (a 2x4x4 group carries ~4.43 2x2x2 groups' tokens on 4x the chips)."""
    search = disagg.PairSearch(cluster=cluster_mod.load(VARIANTS), trace=_trace(30.0, 60.0), slo_ttft_s=2.0)
    assert search.group_capacity["decode-2x4x4"] == pytest.approx(4.43, abs=0.01)
    assert search.mix("decode", need) == mix


def test_the_pair_oracle_schedules_the_larger_shape() -> None:
    """At ×30 the decode need (4–7 2x2x2 groups' worth) is carried partly on 2x4x4 groups in the oracle's own
    schedules, and its run pays chips on that pool; its fleet at time 0 (every row's warm start) fits the
    blocks, larger slices kept first."""
    cl = cluster_mod.load(VARIANTS)
    search = disagg.PairSearch(cluster=cl, trace=_trace(30.0, 300.0), slo_ttft_s=2.0, windows=(60.0,))
    schedules = search.schedules_for(60.0, 0.7, 0.7)
    assert max(n for _, n in schedules["decode-2x4x4"]) >= 1
    run = search.simulate(schedules, "u=0.7", None)
    assert run.result is not None
    assert run.result.pool_chip_s["decode-2x4x4"] > 0
    start = search.initial(schedules)
    assert start["decode-2x4x4"] >= 1
    crowded = search.initial({"prefill": [(0.0, 8)], "decode": [(0.0, 8)], "decode-2x4x4": [(0.0, 2)]})
    assert crowded == {"prefill": 8, "decode": 0, "decode-2x4x4": 2}  # 128 chips: the 2x4x4s first
