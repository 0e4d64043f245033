"""``autoscaler simulate``: score policies, HPA, Kueue-only preemption and an oracle on a request trace.

With no arguments: the bundled conversation trace (Azure LLM inference trace 2023, CC BY 4.0), the bundled
cluster (TGI Gemma-2-9B on 2×L4 sharing a 16-GPU Kueue quota with fine-tuning), the recommended policy and
every baseline. Prints one table (a row per policy) and writes ``summary.json`` and ``timeline.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from autoscaler.sim import BASELINES

PROG = "autoscaler simulate"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="closed-loop simulation of policies vs HPA, Kueue-only and an oracle on a request trace",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=Path, metavar="FILE",
                        help="request trace: CSV with a header (Azure's TIMESTAMP,ContextTokens,GeneratedTokens, "
                             "BurstGPT's Timestamp,Request tokens,Response tokens or arrival_s,input_tokens,"
                             "output_tokens, in any order, other columns ignored) or JSON Lines (Mooncake's "
                             "timestamp in ms, input_length, output_length); another layout with --requests-columns "
                             "(default: the bundled conversation trace)")
    parser.add_argument("--requests-columns", metavar="ARRIVAL,INPUT,OUTPUT",
                        help="the header names (JSON Lines: the keys) of the trace's arrival, prompt-token and "
                             "output-token columns (e.g. 't,prompt,completion'); an arrival is seconds (see "
                             "--requests-time-unit) or an ISO 8601 date-time")
    parser.add_argument("--requests-time-unit", choices=("s", "ms", "us"),
                        help="unit of a numeric arrival in the --requests-columns layout (default: s)")
    parser.add_argument("--cluster", type=Path, metavar="FILE", help="SimulatedCluster YAML (default: bundled)")
    parser.add_argument("--policy", type=Path, metavar="FILE", nargs="+", action="extend", dest="policies",
                        help="ScalingPolicy file(s) to score (default: policies/recommended.yaml)")
    parser.add_argument("--baselines", default=",".join(BASELINES), metavar="LIST",
                        help="comma-separated: " + ",".join(BASELINES) + ", or 'none' (default: all)")
    parser.add_argument("--slo-ttft", type=float, metavar="S", help="TTFT SLO in seconds (default: the cluster's)")
    parser.add_argument("--out", type=Path, default=Path("out/simulate"), metavar="DIR",
                        help="where summary.json, scale_events.jsonl and timeline.png go (default: out/simulate)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of --rate-scale sampling")
    parser.add_argument("--rate-scale", type=float, metavar="X", help="multiply the arrival rate (default: cluster's)")
    parser.add_argument("--time-scale", type=float, metavar="X", help="compress time X-fold (default: cluster's)")
    parser.add_argument("--duration", type=float, metavar="S", help="simulate only the first S seconds")
    parser.add_argument("--start", type=float, default=0.0, metavar="S", help="skip the first S seconds of the trace")
    parser.add_argument("--pool", metavar="NAME", help="the cluster's serving pool the trace drives (default: first)")
    parser.add_argument("--initial-replicas", type=int, metavar="N",
                        help="replicas ready at the start (default: the cluster's initialReplicas, else the warm "
                             "start: the fleet the oracle's schedule family holds at the start of the window)")
    parser.add_argument("--routing", choices=("service", "least-request"),
                        help="how requests reach replicas: service (a ClusterIP Service, random) or least-request "
                             "(an inference gateway); default: the pool's routing (service)")
    parser.add_argument("--skip-bad-rows", action="store_true", help="skip malformed trace rows (counted)")
    parser.add_argument("--no-plot", action="store_true", help="do not write timeline.png")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="processes that run independent simulations side by side (default: the CPUs this "
                             "process may use; 1: all in one); the output is the same whatever N")
    parser.set_defaults(func=run)


def _fail(message: str, code: int = 1) -> int:
    # One line, always: the first problem, and how many more there are.
    first, *more = message.strip().splitlines() or [""]
    extra = f" (and {len(more)} more; autoscaler validate FILE lists them)" if more else ""
    print(f"{PROG}: {first}{extra}", file=sys.stderr)
    return code


class _Progress:
    """One overwritten status line on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()

    def __call__(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[K{PROG}: {text}")
            sys.stderr.flush()

    def announce(self, line: str) -> None:
        """A line for stdout (the run's header) while the status line may be showing."""
        self.done()
        print(line, flush=True)

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `autoscaler simulate --help` then costs no policy models (pydantic), no
    # simulator and no plotting, and the command line builds only the parser of the command it runs.
    from autoscaler.policyfile.loader import PolicyFileError, load_file  # noqa: PLC0415
    from autoscaler.sim import forks, plot, report, runner  # noqa: PLC0415
    from autoscaler.sim.pipeline import BindingError  # noqa: PLC0415
    from autoscaler.sim.traces import TraceError  # noqa: PLC0415
    from autoscaler.sim.yamldoc import SimFileError  # noqa: PLC0415

    wanted = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    if wanted == ("none",):
        wanted = ()
    unknown = [b for b in wanted if b not in BASELINES]
    if unknown:
        choices = ",".join(BASELINES)
        return _fail(f"unknown baseline(s) {', '.join(unknown)}; choose from {choices} or none", 2)
    for flag, value in (("--slo-ttft", args.slo_ttft), ("--rate-scale", args.rate_scale),
                        ("--time-scale", args.time_scale), ("--duration", args.duration)):
        if value is not None and not 0 < value < math.inf:
            return _fail(f"{flag} must be a positive, finite number, got {value:g}", 2)
    if args.initial_replicas is not None and args.initial_replicas < 0:
        return _fail(f"--initial-replicas must be ≥ 0, got {args.initial_replicas}", 2)
    if args.workers is not None and args.workers < 1:
        return _fail(f"--workers must be ≥ 1, got {args.workers}", 2)
    if args.start < 0:
        return _fail(f"--start must be ≥ 0, got {args.start:g}", 2)
    columns = None
    if args.requests_columns is not None:
        from autoscaler.sim.traces import Columns  # noqa: PLC0415

        try:
            columns = Columns.parse(args.requests_columns, args.requests_time_unit or "s")
        except ValueError as exc:
            return _fail(f"--requests-columns: {exc}", 2)
    elif args.requests_time_unit is not None:
        return _fail("--requests-time-unit applies to a layout named with --requests-columns", 2)

    paths: list[Path] = args.policies or [runner.default_policy_path()]
    policies = []
    try:
        for path in paths:
            for pol in load_file(path):
                policies.append((pol.metadata.name, pol))
    except PolicyFileError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot read policy file: {exc}")
    names = [n for n, _ in policies]
    clash = sorted({n for n in names if names.count(n) > 1 or n in BASELINES or n == "static-peak"})
    if clash:
        return _fail(f"policy name(s) {', '.join(clash)} used twice or by a baseline; rename metadata.name")

    opts = runner.Options(
        requests=args.requests, cluster=args.cluster, policies=policies, baselines=wanted,
        slo_ttft_s=args.slo_ttft, seed=args.seed, rate_scale=args.rate_scale, time_scale=args.time_scale,
        duration_s=args.duration, start_s=args.start, skip_bad_rows=args.skip_bad_rows, requests_columns=columns,
        pool=args.pool,
        initial_replicas=args.initial_replicas, routing=args.routing,
        workers=args.workers if args.workers is not None else forks.available_cpus(),
    )
    progress = _Progress()
    try:
        outcome = runner.run(opts, progress=progress, announce=progress.announce)
    except (TraceError, SimFileError) as exc:
        progress.done()
        return _fail(f"{exc}")
    except BindingError as exc:
        progress.done()
        return _fail(f"{exc}; use a preset or a metric the simulator exports")
    except ValueError as exc:
        progress.done()
        return _fail(f"{exc}")
    progress.done()

    summary = outcome.summary
    rows = dict(summary["policies"])
    if "oracle" in summary:
        rows["oracle"] = summary["oracle"]
    tr = summary["trace"]
    print(report.table(rows))
    for name, row in rows.items():
        for note in row.get("notes", []):
            print(f"note: {note}", file=sys.stderr)
        if row.get("unserved_requests"):
            print(f"note: {name}: {row['unserved_requests']} requests never got a first token "
                  f"({row.get('rejected_requests', 0)} rejected by a server, {row.get('abandoned_requests', 0)} "
                  "abandoned by their client)", file=sys.stderr)
    if "oracle" in summary and not summary["oracle"]["met_target"]:
        print(f"note: no oracle schedule met the {summary['slo']['attainment_target']:.0%} attainment target; "
              "the oracle row is the best attainment found", file=sys.stderr)
    out: Path = args.out
    try:
        report.write_summary(out / "summary.json", summary)
        report.write_scale_events(out / "scale_events.jsonl", outcome.results)
        if not args.no_plot:
            plot.timeline(out / "timeline.png", trace=outcome.trace, results=outcome.results,
                          slo_ttft_s=outcome.slo_ttft_s,
                          title=f"{tr['name']} on {summary['cluster']['name']} (SLO TTFT ≤ {outcome.slo_ttft_s:g}s)")
    except OSError as exc:
        return _fail(f"cannot write to {out}: {exc}; pass --out DIR")
    written = ["summary.json", "scale_events.jsonl", *([] if args.no_plot else ["timeline.png"])]
    print(f"wrote {', '.join(written)} to {out}")
    return 0
