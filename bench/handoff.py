"""The serving↔training hand-off against Kueue alone, in simulation: both bundled traces, rate-scales 0.5–1.5.

Run: ``python -m bench.handoff`` from the project root (the traces bundled with the package: a plain clone
runs it; ``--seeds N``, default 3, each cell averaged over routing seeds 0..N-1). For each trace and rate
scale, on the same trace and cluster:

- ``kueue-only``: our recommended policy without ``capacity``/``preemptible`` (Kueue's own preemption);
- ``ours``: the recommended policy as shipped (its arbitration, ``core.arbitration``: the controller's code);
- ``ours+ask``: the same with ``capacity.checkpointRequestSeconds: 60`` (ask a victim to checkpoint first,
  wait up to 60 s: ``estimate``, a few times the bundled jobs' 20–30 s save) and trainers that honour it.

Twice: with the bundled trainers, which save a checkpoint on SIGTERM within their grace period (then Kueue's
own preemption loses nothing either), and with trainers that do not (``saveOnPreemption: false``: the work
since the last checkpoint is lost on every stop). Per row, the mean over the seeds: SLO attainment, training
work lost, kept (checkpointed) and unsaved when the window ends (computed, not lost: it is kept at the next
checkpoint), all in chip-hours, preemptions; and the most times one job was stopped within any hour (the
worst seed). Goals (issue 11): lost ≤ ½ of kueue-only's, SLO attainment ≥ kueue-only's, no job stopped more
than twice an hour. The seed moves the requests' routing (a ClusterIP Service picks replicas at random): one
seed's attainment differs from another's by up to ~0.4 pp on the same decisions, so a single seed cannot tell
a tenth of a point apart. Whatever comes out is printed; nothing is tuned to it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import runner
from autoscaler.sim.simulation import RunResult

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = (
    ("conv", cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"), cluster_mod.bundled("cluster.yaml"),
     ROOT / "policies" / "recommended.yaml"),
    ("code", cluster_mod.bundled("AzureLLMInferenceTrace_code.csv"), cluster_mod.bundled("cluster-tpu.yaml"),
     ROOT / "policies" / "recommended-jetstream.yaml"),
)
RUNS = ("kueue-only", "ours", "ours+ask")
METRICS = ("slo_attainment", "training_lost_chip_hours", "training_useful_chip_hours", "training_unsaved_chip_hours")
RATE_SCALES = (0.5, 1.0, 1.5)
ASK_SECONDS = 60.0


def max_per_hour(result: RunResult) -> int:
    """The most times one job was stopped within any 3,600 s window."""
    worst = 0
    for times in result.evictions.values():
        for i, t in enumerate(times):
            worst = max(worst, sum(1 for u in times[i:] if u - t < 3600.0))
    return worst


def with_ask(policy: ScalingPolicy) -> ScalingPolicy:
    doc = policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["spec"]["capacity"]["checkpointRequestSeconds"] = ASK_SECONDS
    return ScalingPolicy.model_validate(doc)


def cluster_file(source: Path, *, save_on_sigterm: bool, into: Path) -> Path:
    doc = yaml.safe_load(source.read_text())
    for t in doc["spec"]["training"]:
        t["checkpointOnRequest"] = True  # only ours+ask ever asks
        t["saveOnPreemption"] = save_on_sigterm
    out = into / f"{source.stem}-{'save' if save_on_sigterm else 'nosave'}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="routing seeds per cell (mean; default 3)")
    args = parser.parse_args(argv)
    print(f"{'trace':<6}{'trainers':<14}{'rate':>5}  {'run':<11}{'SLO att.':>9}{'lost ch-h':>11}{'kept ch-h':>11}"
          f"{'unsaved':>9}{'preempt':>9}{'max/job/h':>10}")
    verdicts: list[tuple[str, bool]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-handoff-"))
    for name, trace, cluster, policy_file in SCENARIOS:
        policy = load_file(policy_file)[0]
        for save in (True, False):
            cfile = cluster_file(cluster, save_on_sigterm=save, into=tmp)
            trainers = "save-on-TERM" if save else "no-save"
            for rate in RATE_SCALES:
                sums = {n: dict.fromkeys(METRICS, 0.0) for n in RUNS}
                preempt = dict.fromkeys(RUNS, 0.0)
                worst = dict.fromkeys(RUNS, 0)
                for seed in range(args.seeds):
                    out = runner.run(runner.Options(
                        requests=trace, cluster=cfile, policies=[("ours", policy), ("ours+ask", with_ask(policy))],
                        rate_scale=rate, baselines=("kueue-only",), seed=seed,
                    ))
                    rows, results = out.summary["policies"], {r.name: r for r in out.results}
                    for n in RUNS:
                        for m in METRICS:
                            sums[n][m] += rows[n][m] / args.seeds
                        preempt[n] += results[n].preemptions / args.seeds
                        worst[n] = max(worst[n], max_per_hour(results[n]))
                for n in RUNS:
                    row = sums[n]
                    print(f"{name:<6}{trainers:<14}{rate:>5g}  {n:<11}{row['slo_attainment']:>9.2%}"
                          f"{row['training_lost_chip_hours']:>11.3f}{row['training_useful_chip_hours']:>11.3f}"
                          f"{row['training_unsaved_chip_hours']:>9.3f}{preempt[n]:>9.1f}{worst[n]:>10}", flush=True)
                base = sums["kueue-only"]
                for n in ("ours", "ours+ask"):
                    tag = f"{name} {trainers} ×{rate:g} {n}"
                    verdicts += [
                        (f"{tag}: lost ≤ ½ kueue-only's",
                         sums[n]["training_lost_chip_hours"] <= 0.5 * base["training_lost_chip_hours"] + 1e-9),
                        (f"{tag}: SLO ≥ kueue-only's", sums[n]["slo_attainment"] >= base["slo_attainment"] - 1e-9),
                        (f"{tag}: ≤ 2 stops per job per hour", worst[n] <= 2),
                    ]
    for goal, ok in verdicts:
        print(f"  {'met' if ok else 'MISSED'}: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
