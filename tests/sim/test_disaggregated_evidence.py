"""The ``disaggregated`` type's rule 1d and rule 3's need history sized now, in the codelab simulation (the
one-policy example as ``bench.sim_codelab`` runs it, at the warm starts of the pair oracle on these windows)."""

from __future__ import annotations

from autoscaler.core.engine import compile_policy
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces
from autoscaler.sim.simulation import PolicyController, RunResult, Simulation
from bench import sim_codelab

CODELAB = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")
BUMP = "TTFT at risk (0.8 of its objective): at least one more group"


def run(start_s: float, duration_s: float, initial: dict[str, int]) -> RunResult:
    cl = cluster_mod.load(CODELAB)
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    trace = traces.reshape(raw, time_scale=1.0, rate_scale=10.0, duration_s=duration_s, start_s=start_s, seed=0)
    pol = sim_codelab.adapted_joint_policy(sim_codelab.JOINT_POLICY)
    pipe_name = cl.pipeline_name_for(pol.metadata.name)
    ctl = PolicyController(compile_policy(pol), cl.spec.metric_pipelines[pipe_name], pipe_name)
    return Simulation(cluster=cl, trace=trace, controller=ctl, initial_by_pool=initial, slo_ttft_s=2.0).run()


def prefill_steps(res: RunResult) -> list[tuple[float, int, int, str]]:
    return [(t, b, a, m) for t, b, a, _, m in res.scale_events if m.startswith("prefill:")]


def test_a_ttft_quantile_still_holding_fewer_groups_adds_no_group() -> None:
    # conv ×10, min 15-28: the third prefill group (asked for at 225 s) serves from 690 s. The 60 s TTFT p99
    # read at 705 s (2.32 s) still holds the minute on two groups; it used to add a fourth group on it (and
    # cut c to 0.53). Now the fourth comes only on what the three groups serve: the token need (at 720 s
    # before waitForAdmission kept c from falling while the third group waited for admission), or a TTFT at
    # risk over a minute of three groups only (at 780 s since).
    steps = prefill_steps(run(900.0, 840.0, {"prefill": 2, "decode": 2}))
    assert [(b, a) for _, b, a, _ in steps] == [(2, 3), (3, 4)], steps
    t, _, _, message = steps[1]
    assert t >= 690.0 + 60.0 - 30.0, steps  # never the stale quantile at 705 s
    if BUMP in message:
        assert t >= 690.0 + 60.0, steps  # the quantile's window holds no minute before the third group served


def test_past_needs_sized_at_the_utilization_learned_since_let_prefill_go_sooner() -> None:
    # conv ×10, min 30-53: prefill's c is learned up from 0.70 to 0.81 over the window. Needs remembered as
    # divided by the c of their moment kept the 600 s peak just above what two groups carry (with the 20 %
    # headroom) until 1,560 s; the same loads sized at the c learned now let the third group go at 1,350 s.
    steps = prefill_steps(run(1800.0, 1400.0, {"prefill": 3, "decode": 2}))
    downs = [(t, b, a) for t, b, a, _ in steps if a < b]
    assert downs, steps
    assert downs[0][1:] == (3, 2), steps
    assert downs[0][0] < 1400.0, steps
