"""The ``disaggregated`` policy type in the simulator: one controller sees both pools (``Observation.members``),
reads each signal from its own pool, and sends each scale decision to the pool of its target."""

from __future__ import annotations

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces
from autoscaler.sim.simulation import PolicyController, Simulation
from bench import sim_codelab

CODELAB = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")


def codelab_policy() -> ScalingPolicy:
    """The shipped example as ``bench.sim_codelab`` runs it (the codelab's namespace, every signal)."""
    return sim_codelab.adapted_joint_policy(sim_codelab.JOINT_POLICY)


def test_one_controller_sizes_both_pools_in_whole_slices() -> None:
    cl = cluster_mod.load(CODELAB)
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    trace = traces.reshape(raw, time_scale=1.0, rate_scale=10.0, duration_s=600.0, start_s=0.0, seed=0)
    pol = codelab_policy()
    pipe_name = cl.pipeline_name_for("default")
    ctl = PolicyController(compile_policy(pol), cl.spec.metric_pipelines[pipe_name], pipe_name)
    sim = Simulation(cluster=cl, trace=trace, controller=ctl, initial_by_pool={"prefill": 1, "decode": 1},
                     slo_ttft_s=2.0)
    res = sim.run()
    assert set(res.pool_chip_s) == {"prefill", "decode"}
    assert res.slice_violations == []
    # Both pools were decided by the one policy: each got scale steps from it (the message names the pool).
    pools = {message.split(":", 1)[0] for _, _, _, _, message in res.scale_events}
    assert pools == {"prefill", "decode"}, res.scale_events[:5]
    for _, before, after, _, message in res.scale_events:
        assert "tokens/s" in message or "holding" in message
        assert before != after
    # Decode's per-token latency is read from the simulated servers' histogram, not dropped: every decode
    # step after the first window names it, and none calls it unknown.
    decode = [m for t, _, _, _, m in res.scale_events if m.startswith("decode:") and t >= 60.0]
    assert decode, res.scale_events
    assert all("time per output token" in m and "unknown: tpot" not in m for m in decode), decode


def test_on_full_blocks_the_policy_grows_both_pools_by_stopping_training_slices() -> None:
    """At the codelab bench's warm start (2 + 2 groups and twelve 2x2x2 Workloads: every region held), with
    the conversation trace at 2× the bench's rate, decode's token demand and then prefill's TTFT at risk ask for
    more: the policy must grow both pools, stopping one 2x2x2 Workload per group added.
    (Once the simulator fed the slice inventory, it never did: its fit check saw no training able to yield,
    so no new group ever fitted.)"""
    cl = cluster_mod.load(CODELAB)
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    trace = traces.reshape(raw, time_scale=1.0, rate_scale=20.0, duration_s=150.0, start_s=0.0, seed=0)
    pipe_name = cl.pipeline_name_for("default")
    ctl = PolicyController(compile_policy(codelab_policy()), cl.spec.metric_pipelines[pipe_name], pipe_name)
    sim = Simulation(cluster=cl, trace=trace, controller=ctl, initial_by_pool={"prefill": 2, "decode": 2},
                     slo_ttft_s=2.0)
    quota = sim.quota_status()
    assert quota.slices is not None
    assert len(quota.slices.inventory.occupants) == 16  # the blocks are full
    res = sim.run()
    grown = {message.split(":", 1)[0] for _, before, after, _, message in res.scale_events if after > before}
    assert grown == {"prefill", "decode"}, res.scale_events
    added = sum(len(pool.live()) - 2 for pool in sim.pools)
    assert sim.deactivations == added  # one 2x2x2 Workload stopped per group added, by the policy
    assert res.slice_violations == []
