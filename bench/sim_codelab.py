"""Issue 14's figures: the TPU7x dynamic-slicing codelab cluster in simulation (two 4x4x4 blocks, prefill and
decode LeaderWorkerSets of 2x2x2 groups, sub-slice and super-slice JobSets), scored by ``autoscaler simulate``.

Run: ``python -m bench.sim_codelab [POLICY_FILE ...]`` from a plain clone (default:
``policies/lws-prefill-decode.yaml``, the shipped two-policy example, and, when present,
``policies/tpu7x-disaggregated.yaml``, the one policy sizing both pools, adapted to the codelab's namespace;
its decode pool reads the simulated servers' per-token latency histogram like every other signal). Each file
is a row.
Prints the table (every baseline, the two-pool oracle re-solved at each row's attainment, the lower bound),
each row's chip-hours per pool and slice audit, and, per policy row, each goal met or MISSED:

* ≥ 99 % TTFT attainment at ≤ 1.15× the oracle's chip-hours at equal SLO;
* training work lost ≤ ½ of ``kueue-only``'s;
* every scale step a whole slice that fits (no audit violation in any row);
* at least as good as ``hpa-tuned`` (per pool, tuned with hindsight) on attainment and cost at once.

Another trace or window (to check rules chosen on the default one): ``--requests FILE`` (an Azure-format CSV,
e.g. ``autoscaler/data/sim/AzureLLMInferenceTrace_code.csv``), ``--rate-scale``, ``--start`` and ``--duration``
(seconds) override the cluster file's scenario.

``--variants``: resize through variants (issue 14, item 4): ``cluster-tpu7x-codelab-variants.yaml`` (the decode
role served by a 2x2x2 and a 2x4x4 LeaderWorkerSet) with ``policies/tpu7x-disaggregated-variants.yaml``; the
pair oracle carries each window's decode need on the cheapest mix of the two shapes (``disagg.PairSearch.mix``),
so the cost against it is at equal choice; the HPA/KEDA baselines size the 2x2x2 pools only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import disagg, report, runner

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")
VARIANTS_CLUSTER = cluster_mod.bundled("cluster-tpu7x-codelab-variants.yaml")
DEFAULT_POLICY = ROOT / "policies" / "lws-prefill-decode.yaml"
JOINT_POLICY = ROOT / "policies" / "tpu7x-disaggregated.yaml"
VARIANTS_POLICY = ROOT / "policies" / "tpu7x-disaggregated-variants.yaml"
CODELAB_NAMESPACE = "llm-d-pd-disaggregation"


def adapted_joint_policy(path: Path, namespace: str = "llm-d-pd-joint", *,
                         slot_occupancy: bool | None = None) -> ScalingPolicy:
    """A one-policy example in the codelab's namespace (each ships in its own so that the examples validate
    side by side), every signal kept; ``slot_occupancy``: decode's rule 0c set so (None: as shipped)."""
    text = path.read_text(encoding="utf-8").replace(namespace, CODELAB_NAMESPACE)
    doc = yaml.safe_load(text)
    if slot_occupancy is not None:
        doc["spec"]["policy"]["decode"]["slotOccupancy"] = slot_occupancy
    return ScalingPolicy.model_validate(doc)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_codelab", description=__doc__.split("\n\n")[0])
    ap.add_argument("policies", nargs="*", type=Path, help="policy files, one row each (default: the examples)")
    ap.add_argument("--requests", type=Path, help="another trace (Azure CSV) instead of the cluster's")
    ap.add_argument("--rate-scale", type=float, help="requests ×N (default: the cluster file's)")
    ap.add_argument("--start", type=float, default=0.0, help="seconds into the trace to start at")
    ap.add_argument("--duration", type=float, help="seconds simulated (default: the cluster file's)")
    ap.add_argument("--variants", action="store_true",
                    help="the decode role on a 2x2x2 and a 2x4x4 LWS, with the variants example policy")
    ap.add_argument("--slot-occupancy", action=argparse.BooleanOptionalAction, default=None,
                    help="the one-policy examples with decode's rule 0c on or off (default: as shipped, on)")
    args = ap.parse_args(argv)
    cluster = VARIANTS_CLUSTER if args.variants else CLUSTER
    slots: bool | None = args.slot_occupancy
    if args.policies:
        pols = [(p.metadata.name, p) for a in args.policies for p in load_file(a)]
    elif args.variants:
        variants = adapted_joint_policy(VARIANTS_POLICY, "llm-d-pd-variants", slot_occupancy=slots)
        pols = [(variants.metadata.name, variants)]
    else:
        pols = [(p.metadata.name, p) for p in load_file(DEFAULT_POLICY)]
        if JOINT_POLICY.is_file():
            joint = adapted_joint_policy(JOINT_POLICY, slot_occupancy=slots)
            pols.append((joint.metadata.name, joint))
    options = runner.Options(cluster=cluster, policies=pols, requests=args.requests, rate_scale=args.rate_scale,
                             start_s=args.start, duration_s=args.duration)
    out = runner.run(options, progress=None, announce=print)
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
    for i, group in enumerate(disagg.policy_rows(pols)):
        ours_name = "+".join(n for n, _ in group)
        ours, tuned = rows[ours_name], rows["hpa-tuned"]
        kueue = rows["kueue-only" if i == 0 else f"kueue-only ({ours_name})"]
        ratio = ours.get("cost_vs_oracle")
        goals = {
            "TTFT attainment ≥ 99%": ours["slo_attainment"] >= 0.99,
            "cost ≤ 1.15× oracle at equal SLO": ratio is not None and ratio <= 1.15,
            "training lost ≤ ½ of its kueue-only twin's": ours["training_lost_chip_hours"]
            <= 0.5 * kueue["training_lost_chip_hours"] + 1e-9,
            "every scale step a whole slice that fits (all rows)": all(
                not r.get("slice_violations") for r in rows.values()),
            "at least as good as hpa-tuned on attainment and cost": ours["slo_attainment"] >= tuned["slo_attainment"]
            and ours["serving_accelerator_hours"] <= tuned["serving_accelerator_hours"],
        }
        print(f"{ours_name}:")
        for goal, ok in goals.items():
            print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
