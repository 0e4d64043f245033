"""The ``disaggregated`` policy type in the simulator: one controller sees both pools (``Observation.members``),
reads each signal from its own pool, and sends each scale decision to the pool of its target."""

from __future__ import annotations

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces
from autoscaler.sim.simulation import PolicyController, Simulation
from bench import sim_codelab_disagg

CODELAB = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")


def codelab_policy() -> ScalingPolicy:
    """The shipped example as ``bench.sim_codelab_disagg`` runs it (the codelab's namespace, no TPOT)."""
    return ScalingPolicy.model_validate(sim_codelab_disagg.simulated_policy())


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
