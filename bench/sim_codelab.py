"""Issue 14's figures: the TPU7x dynamic-slicing codelab cluster in simulation (two 4x4x4 blocks, prefill and
decode LeaderWorkerSets of 2x2x2 groups, sub-slice and super-slice JobSets), scored by ``autoscaler simulate``.

Run: ``python -m bench.sim_codelab [POLICY_FILE ...]`` from a plain clone (default:
``policies/lws-prefill-decode.yaml``, the shipped two-policy example). Prints the table (every baseline, the
two-pool oracle re-solved at each row's attainment, the lower bound), each row's chip-hours per pool and
slice audit, and each goal met or MISSED:

* ≥ 99 % TTFT attainment at ≤ 1.15× the oracle's chip-hours at equal SLO;
* training work lost ≤ ½ of ``kueue-only``'s;
* every scale step a whole slice that fits (no audit violation in any row);
* at least as good as ``hpa-tuned`` (per pool, tuned with hindsight) on attainment and cost at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import report, runner

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")
DEFAULT_POLICY = ROOT / "policies" / "lws-prefill-decode.yaml"


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or [DEFAULT_POLICY]
    pols = [(p.metadata.name, p) for f in files for p in load_file(f)]
    out = runner.run(runner.Options(cluster=CLUSTER, policies=pols),
                     progress=None, announce=print)
    s = out.summary
    rows = {**s["policies"], "oracle": s["oracle"]}
    print(report.table(rows))
    print(f"lower bound at the SLO target: {s['lower_bound_accelerator_hours']:.2f} chip-h; warm start "
          f"{s['initial_by_pool']}; oracle found by {s['oracle']['found_by']} after "
          f"{s['oracle']['schedules_simulated']} schedule pairs")
    for name, row in rows.items():
        print(f"  {name}: chip-h per pool {row['pool_accelerator_hours']}, slices admitted "
              f"{row.get('slice_admissions')}, audit violations {len(row.get('slice_violations', []))}, "
              f"groups waiting for a place {row.get('unplaced_replica_hours')} h, lost training "
              f"{row['training_lost_chip_hours']} chip-h")
    ours_name = "+".join(n for n, _ in pols)
    ours, tuned, kueue = rows[ours_name], rows["hpa-tuned"], rows["kueue-only"]
    ratio = ours["cost_vs_oracle"]
    goals = {
        "TTFT attainment ≥ 99%": ours["slo_attainment"] >= 0.99,
        "cost ≤ 1.15× oracle at equal SLO": ratio is not None and ratio <= 1.15,
        "training lost ≤ ½ of kueue-only's": ours["training_lost_chip_hours"]
        <= 0.5 * kueue["training_lost_chip_hours"] + 1e-9,
        "every scale step a whole slice that fits (all rows)": all(
            not r.get("slice_violations") for r in rows.values()),
        "at least as good as hpa-tuned on attainment and cost": ours["slo_attainment"] >= tuned["slo_attainment"]
        and ours["serving_accelerator_hours"] <= tuned["serving_accelerator_hours"],
    }
    for goal, ok in goals.items():
        print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
