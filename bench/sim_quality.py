"""Quality of our recommended policies on both shared traces, against HPA, static-peak and the oracle.

Run: ``python -m bench.sim_quality`` from the project root (both traces are bundled). Prints the table of
each trace and, per goal, whether it is met: ≥ 99 % SLO attainment at ≤ 1.15× the oracle's
accelerator-hours, better than ``hpa`` on attainment and cost at once, training goodput ≥ 0.9.
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
        ours, hpa = rows[pols[0][0]], rows["hpa"]
        goals = {
            "attainment ≥ 99%": ours["slo_attainment"] >= 0.99,
            "cost ≤ 1.15× oracle": ours["cost_vs_oracle"] <= 1.15,
            "beats hpa on attainment and cost": ours["slo_attainment"] > hpa["slo_attainment"]
            and ours["serving_accelerator_hours"] < hpa["serving_accelerator_hours"],
            "training goodput ≥ 0.9": (ours["training_goodput"] or 0) >= 0.9,
        }
        for goal, ok in goals.items():
            print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
