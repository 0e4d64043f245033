"""How far the quantile ``ttftAfterQueue`` reads is from the truth, window by window, on one TPU grid row.

Run: ``python -m bench.sum_quantile_error --policy FILE --trace code --rate 0.5 --window 30-45`` from the project
root (one simulation of the row with the policy alone; about a minute for a quarter-hour on 2 idle cores).

JetStream exports two histograms, ``jetstream_queue_duration`` and ``jetstream_time_to_first_token`` (from the
prefill's start), not the pairs; ``ttftAfterQueue`` reads the p99 of their sum as the convolution of the two,
independent, each uniform within its buckets (``sizing.quantile_of_sum``). The simulator knows every request's
pair, so for every 60 s window (ending every 5 s, at least 20 first tokens in it, and some wait or a p99 above
1 s) this prints, against the true p99 of queue time + TTFT of the window's requests (arrival to first token):

- ``exact-independent``: the convolution of the exact values, each pair broken (independence, no buckets);
- ``ttft-buckets``: the convolution read from histograms with the TTFT's buckets for both (what the simulator
  exported for JetStream's queue time before 2026-12-07 19:00 UTC);
- ``jetstream-buckets``: with JetStream's own queue-time buckets (``model.JETSTREAM_QUEUE_BOUNDS``);
- ``jetstream-exponential``: the same histograms, each bucket read as an exponential fitted from its neighbours'
  counts (``sizing.quantile_of_sum(within="exponential")``, the ``slo`` type's ``bucketReading: exponential``);

each at the p99 and at the rank the window supports (``latencyEvidence``), with the count of false alarms (read
over the objective, true within it) and misses (the reverse), and the median and 90th percentile of the error.
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from autoscaler.core import sizing
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import runner
from autoscaler.sim.model import HISTOGRAM_BOUNDS, JETSTREAM_QUEUE_BOUNDS
from bench import slo_grid, synthetic

WINDOW_S = 60.0
STEP_S = 5.0
MIN_REQUESTS = 20
Q = 0.99


def _histogram(values: Sequence[float], bounds: Sequence[float]) -> dict[float, float]:
    """Cumulative observations per second of the window at or below each bound, +Inf last."""
    ordered = sorted(values)
    out = {b: bisect.bisect_right(ordered, b) / WINDOW_S for b in bounds}
    out[math.inf] = len(ordered) / WINDOW_S
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", type=Path, required=True)
    ap.add_argument("--trace", default="code", help="conv, code or a synthetic shape")
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--window", default="hour", help="hour, 0-15, 15-30, 30-45 or 45-60")
    ap.add_argument("--objective", type=float, default=2.0, help="seconds (the TPU rows' TTFT objective)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace = (slo_grid._bundled_trace(args.trace) if args.trace in ("conv", "code")
                 else synthetic.write_all(Path(tmp), "tpu")[args.trace])
        return _report(args, trace)


def _report(args: argparse.Namespace, trace: Path) -> int:
    start, duration = (0.0, 3600.0) if args.window == "hour" else (float(args.window.split("-")[0]) * 60, 900.0)
    policies = [(p.metadata.name, p) for p in load_file(args.policy)]
    out = runner.run(runner.Options(
        requests=trace, cluster=cluster_mod.bundled("cluster-tpu.yaml"), policies=policies, baselines=(),
        rate_scale=args.rate, start_s=start, duration_s=duration,
    ))
    req = out.results[0].requests
    served = sorted(
        (req.first_token[i], req.started[i] - req.arrival[i], req.first_token[i] - req.started[i])
        for i in range(len(req.arrival)) if not math.isnan(req.first_token[i])
    )
    times = [s[0] for s in served]
    names = ("exact-independent", "ttft-buckets", "jetstream-buckets", "jetstream-exponential")
    errors: dict[str, list[float]] = {f"{n}{at}": [] for n in names for at in ("", " @supported")}
    false_alarms = dict.fromkeys(errors, 0)
    misses = dict.fromkeys(errors, 0)
    t = times[0] + WINDOW_S if times else math.inf
    while t <= (times[-1] if times else -math.inf):
        window = served[bisect.bisect_right(times, t - WINDOW_S):bisect.bisect_right(times, t)]
        t += STEP_S
        n = len(window)
        if n < MIN_REQUESTS:
            continue
        queue = [w[1] for w in window]
        ttft = [w[2] for w in window]
        sums = sorted(a + b for a, b in zip(queue, ttft, strict=True))
        k = sizing.supported_rank(n, Q)
        true = {"": sums[math.ceil(Q * n) - 1], " @supported": sums[k - 1] if k > 0 else math.nan}
        if max(true.values()) <= 1.0 and max(queue) <= 1.0:
            continue
        broken = sorted(a + b for a in queue for b in ttft)
        m = len(broken)
        read = {
            "exact-independent": broken[math.ceil(Q * m) - 1],
            "exact-independent @supported": broken[max(0, math.ceil(k / n * m) - 1)],
        }
        readings: tuple[tuple[str, Sequence[float], sizing.Within], ...] = (
            ("ttft-buckets", HISTOGRAM_BOUNDS, "uniform"), ("jetstream-buckets", JETSTREAM_QUEUE_BOUNDS, "uniform"),
            ("jetstream-exponential", JETSTREAM_QUEUE_BOUNDS, "exponential"),
        )
        for name, bounds, within in readings:
            hq, ht = _histogram(queue, bounds), _histogram(ttft, HISTOGRAM_BOUNDS)
            read[name] = sizing.quantile_of_sum(hq, ht, Q, within=within)
            supported = sizing.supported_quantile_of_sum(hq, ht, Q, WINDOW_S, within=within)
            read[name + " @supported"] = supported[0] if supported else math.nan
        for key, value in read.items():
            truth = true[" @supported" if key.endswith("@supported") else ""]
            errors[key].append(value - truth)
            false_alarms[key] += value > args.objective >= truth
            misses[key] += value <= args.objective < truth
    judged = len(errors["exact-independent"])
    print(f"{args.trace} ×{args.rate:g} {args.window}, policy {args.policy.name}: {judged} windows of {WINDOW_S:g} s "
          f"(every {STEP_S:g} s, ≥ {MIN_REQUESTS} first tokens, some wait or p99 above 1 s); objective "
          f"{args.objective:g} s")
    for key, errs in errors.items():
        if not errs:
            continue
        e = sorted(errs)
        print(f"  {key:30s} false alarms {false_alarms[key]:4d}  misses {misses[key]:4d}  error median "
              f"{e[len(e) // 2]:+.3f} s, p90 {e[int(0.9 * len(e))]:+.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
