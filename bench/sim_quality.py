"""Quality of our recommended policies on both bundled traces, on the yardstick of ``autoscaler simulate``.

Run: ``python -m bench.sim_quality`` from a plain clone (both traces are bundled). Prints each trace's table
(every baseline, the oracle re-solved at each row's attainment, the lower bound) and, per goal, whether it
is met: ≥ 99 % SLO attainment at ≤ 1.15× the oracle's accelerator-hours at that attainment, at least as good
as ``hpa-tuned`` (the best HPA, tuned with hindsight) on attainment and cost at once, training goodput ≥ 0.9.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import report, runner

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = (
    ("conv", cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"), None, ROOT / "policies" / "recommended.yaml"),
    ("code", cluster_mod.bundled("AzureLLMInferenceTrace_code.csv"), cluster_mod.bundled("cluster-tpu.yaml"),
     ROOT / "policies" / "recommended-jetstream.yaml"),
)


def main() -> int:
    for name, trace, cluster, policy in SCENARIOS:
        if not trace.is_file():
            print(f"{name}: {trace} is missing (a broken install?)", file=sys.stderr)
            return 1
        pols = [(p.metadata.name, p) for p in load_file(policy)]
        out = runner.run(runner.Options(requests=trace, cluster=cluster, policies=pols))
        rows = {**out.summary["policies"], "oracle": out.summary["oracle"]}
        c = out.summary["cluster"]
        print(f"\n== {name} trace on {c['name']} ({c['profile']}, cold start {c['cold_start_s']:g}s), "
              f"SLO TTFT ≤ {out.slo_ttft_s:g}s")
        print(report.table(rows))
        print(f"lower bound at the SLO target: {out.summary['lower_bound_accelerator_hours']:.2f} accel-h; "
              f"routing {out.summary['routing']}; feasibility {out.summary['feasibility']}")
        ours, tuned = rows[pols[0][0]], rows["hpa-tuned"]
        ratio = ours["cost_vs_oracle"]
        goals = {
            "attainment ≥ 99%": ours["slo_attainment"] >= 0.99,
            "cost ≤ 1.15× oracle at equal SLO": ratio is not None and ratio <= 1.15,
            "at least as good as hpa-tuned on attainment and cost": ours["slo_attainment"] >= tuned["slo_attainment"]
            and ours["serving_accelerator_hours"] <= tuned["serving_accelerator_hours"],
            "training goodput ≥ 0.9": (ours["training_goodput"] or 0) >= 0.9,
        }
        for goal, ok in goals.items():
            print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
