"""The oracle is a lower bound in practice: on both shared traces no online controller is cheaper at equal or
better SLO attainment, and the oracle meets its attainment target."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import oracle, runner
from autoscaler.sim.simulation import FixedController, Simulation
from tests.sim.conftest import CODE, CONV, ROOT, TPU_CLUSTER, shared_trace

CASES = [
    pytest.param(CONV, None, ROOT / "policies" / "recommended.yaml", True, id="conv-l4-tgi"),
    # On the bursty code trace HPA is cheaper than our policy only because it under-provisions (≈ 80 %
    # attainment); ours buys its ≥ 99 % with standing capacity (docs/simulate.md).
    pytest.param(CODE, TPU_CLUSTER, ROOT / "policies" / "recommended-jetstream.yaml", False, id="code-tpu-jetstream"),
]


@pytest.mark.parametrize(("trace", "cluster_file", "policy", "cheaper_than_hpa"), CASES)
def test_no_online_controller_beats_the_oracle(
    trace: Path, cluster_file: Path | None, policy: Path, cheaper_than_hpa: bool
) -> None:
    ours_policy = load_file(policy)[0]
    # Variants of our policy sized tighter and looser are online controllers too.
    variants = []
    for factor in (0.8, 1.25):
        doc = ours_policy.model_dump(by_alias=True, exclude_none=True)
        doc["metadata"]["name"] = f"variant-{factor:g}"
        doc["spec"]["policy"]["capacityPerReplica"] *= factor
        variants.append((doc["metadata"]["name"], ScalingPolicy.model_validate(doc)))
    opts = runner.Options(
        requests=shared_trace(trace), cluster=cluster_file,
        policies=[(ours_policy.metadata.name, ours_policy), *variants],
    )
    out = runner.run(opts)
    orc = out.summary["oracle"]
    assert orc["met_target"], "the oracle meets the attainment target on both traces"
    assert orc["slo_attainment"] >= out.summary["slo"]["attainment_target"]
    rows = dict(out.summary["policies"])
    # Every constant replica count is an online controller too. From the oracle's peak up, a constant count
    # holds at least as many replicas as the oracle at every moment, so only the counts below can be cheaper.
    pool = out.cluster.spec.pools[0]
    for n in range(pool.min_replicas, orc["peak_replicas"]):
        res = Simulation(cluster=out.cluster, trace=out.trace, controller=FixedController(f"fixed-{n}", n)).run()
        rows[f"fixed-{n}"] = {
            "slo_attainment": oracle.attainment(res, out.slo_ttft_s),
            "serving_accelerator_hours": res.serving_chip_s / 3600,
        }
    for name, row in rows.items():
        if row["slo_attainment"] >= orc["slo_attainment"]:
            assert row["serving_accelerator_hours"] >= orc["serving_accelerator_hours"], (
                f"{name} is cheaper than the oracle at equal or better SLO attainment: {row} vs {orc}"
            )
    ours = rows[opts.policies[0][0]]
    assert ours["slo_attainment"] >= out.summary["slo"]["attainment_target"]
    assert ours["slo_attainment"] > rows["hpa"]["slo_attainment"]
    if cheaper_than_hpa:
        assert ours["serving_accelerator_hours"] < rows["hpa"]["serving_accelerator_hours"]


def test_schedule_starts_a_cold_start_early_and_keeps_short_gaps() -> None:
    load = [1.5, 0.5, 0.5, 1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.5]
    sched = oracle.schedule_for(load, utilization=1.0, window_s=10, cold_start_s=15, lo=1, hi=4)
    # A window needs ceil(max(its load, the previous one's)): 2 in windows 0-1, 3-4 and 9, else 1.
    # The 10 s gap between windows 1 and 3 is shorter than a cold start plus a window: the second replica
    # stays on from 0 to 50 s. The 40 s gap before window 9 is longer: it stops at 50 s and starts again a
    # cold start (15 s) before window 9, at 75 s.
    assert sched == [(0.0, 2), (50.0, 1), (75.0, 2)]


def test_bundled_default_cluster_has_a_meaningful_scenario() -> None:
    """The default run needs several replicas and shares the quota with training, so preemption matters."""
    out = runner.run(runner.Options(baselines=("oracle",), duration_s=900))
    orc = out.summary["oracle"]
    assert 2 <= orc["peak_replicas"] <= 8
    assert out.summary["cluster"]["training_jobs"] > 0
    c = cluster_mod.load()
    assert c.spec.quota.nominal > orc["peak_replicas"] * c.chips_per_replica(c.spec.pools[0])
