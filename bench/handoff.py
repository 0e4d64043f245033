"""The serving↔training hand-off against Kueue alone, in simulation: both bundled traces, rate-scales 0.5–1.5.

Run: ``python -m bench.handoff`` from the project root (needs ``../shared/traces``). For each trace and rate
scale it runs our recommended policy (its arbitration: ``core.arbitration``, the code the controller runs)
and ``kueue-only`` (the same policy without ``capacity``/``preemptible``: Kueue's own preemption decides) on
the same trace and cluster, and prints per row: SLO attainment, training work lost and kept (chip-hours),
preemptions, and the most times one job was stopped within any hour. The goals checked (issue 11): training
work lost ≤ ½ of kueue-only's, SLO attainment ≥ kueue-only's, no job stopped more than twice in an hour.
Whatever comes out is printed; nothing is tuned to it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import runner
from autoscaler.sim.simulation import RunResult

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
SCENARIOS = (
    ("conv", TRACES / "AzureLLMInferenceTrace_conv.csv", None, ROOT / "policies" / "recommended.yaml"),
    ("code", TRACES / "AzureLLMInferenceTrace_code.csv", cluster_mod.bundled("cluster-tpu.yaml"),
     ROOT / "policies" / "recommended-jetstream.yaml"),
)
RATE_SCALES = (0.5, 1.0, 1.5)


def max_per_hour(result: RunResult) -> int:
    """The most times one job was stopped within any 3,600 s window."""
    worst = 0
    for times in result.evictions.values():
        for i, t in enumerate(times):
            worst = max(worst, sum(1 for u in times[i:] if u - t < 3600.0))
    return worst


def main() -> int:
    print(f"{'trace':<6}{'rate':>5}  {'policy':<22}{'SLO att.':>9}{'lost ch-h':>11}{'kept ch-h':>11}"
          f"{'preempt':>9}{'max/job/h':>10}")
    verdicts: list[tuple[str, bool]] = []
    for name, trace, cluster, policy in SCENARIOS:
        if not trace.is_file():
            print(f"{name}: {trace} is absent; skipped")
            continue
        pols = [(p.metadata.name, p) for p in load_file(policy)]
        for rate in RATE_SCALES:
            out = runner.run(runner.Options(requests=trace, cluster=cluster, policies=pols,
                                            baselines=("kueue-only",), rate_scale=rate))
            rows = out.summary["policies"]
            by_name = {r.name: r for r in out.results}
            for policy_name in ("kueue-only", pols[0][0]):
                row, res = rows[policy_name], by_name[policy_name]
                print(f"{name:<6}{rate:>5g}  {policy_name:<22}{row['slo_attainment']:>9.2%}"
                      f"{row['training_lost_chip_hours']:>11.3f}{row['training_useful_chip_hours']:>11.3f}"
                      f"{res.preemptions:>9}{max_per_hour(res):>10}")
            ours, base = rows[pols[0][0]], rows["kueue-only"]
            label = f"{name} ×{rate:g}"
            lost_ok = ours["training_lost_chip_hours"] <= 0.5 * base["training_lost_chip_hours"] + 1e-9
            verdicts += [
                (f"{label}: lost ≤ ½ kueue-only's", lost_ok),
                (f"{label}: SLO ≥ kueue-only's", ours["slo_attainment"] >= base["slo_attainment"] - 1e-9),
                (f"{label}: ≤ 2 stops per job per hour", max_per_hour(by_name[pols[0][0]]) <= 2),
            ]
    for goal, ok in verdicts:
        print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
