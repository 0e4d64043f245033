"""Peak memory and time of a whole ``autoscaler replay`` process over long traces, with and without the plot.

Two traces are generated (synthetic, deterministic: a daily load cycle with noise and a recorded count that moves
every ten minutes):

1. ``long``: 13 weeks at 15 s with 10 signals (524,160 evaluations; goal: peak RSS under 300 MiB);
2. ``week``: the week of three signals ``bench.replay_speed`` writes (40,320 evaluations; goal: the whole
   command, plot included, in 1 s wall).

Each case runs ``python -m autoscaler.cli replay`` in a fresh interpreter (``--tree DIR`` runs another checkout,
e.g. an older commit, for a before/after); its peak resident memory, user+system CPU and wall time are the
operating system's accounting of the finished child (``os.wait4``). Progress goes to stderr.

Run: ``python -m bench.replay_memory [--cases long,week,week-no-plot] [--format csv|json] [--repeat N]``;
``--write DIR`` only writes the traces and policies (to time them with another tool).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.replay_speed import POLICY as WEEK_POLICY
from bench.replay_speed import write_week

START = 1_764_460_800  # 2025-11-30T00:00:00Z
STEP_S = 15
LONG_WEEKS = 13
LONG_SIGNALS = 10
GOAL_RSS_MIB = 300
GOAL_WEEK_S = 1.0


def long_policy(signals: int) -> dict[str, Any]:
    """An hpa policy on every signal: odd ones per replica (rescaled in whatif), even ones totals."""
    sigs = []
    metrics = []
    for i in range(signals):
        per_replica = i % 2 == 1
        sigs.append({"name": f"s{i}", "query": f"sum(s{i})", "scope": "perReplica" if per_replica else "total"})
        target = 0.8 if per_replica else 5.0 + i
        kind = "Pods" if per_replica else "External"
        metrics.append({"signal": f"s{i}", "type": kind, "target": {"type": "AverageValue", "averageValue": target}})
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "bench-long"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 40,
            "signals": sigs,
            "policy": {"type": "hpa", "metrics": metrics},
        },
    }


def _rows(weeks: int, signals: int, seed: int) -> Any:
    """(unix time, [signal values], recorded count) every STEP_S seconds."""
    rng = random.Random(seed)
    replicas = 8
    rows = weeks * 7 * 86400 // STEP_S
    for i in range(rows):
        t = START + i * STEP_S
        day = 0.5 + 0.45 * math.sin(2 * math.pi * (t % 86400) / 86400)
        load = max(0.0, day + rng.gauss(0, 0.08))
        if i % 40 == 0:
            replicas = max(2, round(20 * day))
        values = [
            min(1.0, load * 20 / replicas * (0.7 + 0.05 * j)) if j % 2 else max(0.0, (100 + 10 * j) * load - 50)
            for j in range(signals)
        ]
        yield t, values, replicas


def write_long_csv(path: Path, weeks: int = LONG_WEEKS, signals: int = LONG_SIGNALS, seed: int = 11) -> int:
    n = 0
    with path.open("w") as f:
        f.write(",".join(["timestamp", *(f"s{j}" for j in range(signals)), "replicas"]) + "\n")
        for t, values, replicas in _rows(weeks, signals, seed):
            f.write(f"{t}," + ",".join(f"{v:.3f}" for v in values) + f",{replicas}\n")
            n += 1
            if n % 100_000 == 0:
                print(f"  written {n:,} rows", file=sys.stderr)
    return n


def write_long_json(directory: Path, weeks: int = LONG_WEEKS, signals: int = LONG_SIGNALS, seed: int = 11) -> int:
    """One Prometheus query_range dump per signal and replicas.json, as `curl .../api/v1/query_range` saves them."""
    directory.mkdir(parents=True, exist_ok=True)
    handles = [(directory / f"s{j}.json").open("w") for j in range(signals)]
    rec = (directory / "replicas.json").open("w")
    head = '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"llm"},"values":['
    for f in [*handles, rec]:
        f.write(head)
    n = 0
    for t, values, replicas in _rows(weeks, signals, seed):
        sep = "," if n else ""
        for f, v in zip(handles, values, strict=True):
            f.write(f'{sep}[{t},"{v:.3f}"]')
        rec.write(f'{sep}[{t},"{replicas}"]')
        n += 1
        if n % 100_000 == 0:
            print(f"  written {n:,} samples per signal", file=sys.stderr)
    for f in [*handles, rec]:
        f.write("]}]}}\n")
        f.close()
    return n


def measure(argv: list[str], tree: str | None) -> tuple[float, float, float, int]:
    """(peak RSS MiB, CPU s, wall s, exit status) of one whole process."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        print(f"  exit {proc.returncode}: {err.strip()[:400]}", file=sys.stderr)
    return usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, wall, proc.returncode


def write_inputs(directory: Path, cases: list[str], fmt: str) -> dict[str, tuple[Path, Path]]:
    """Each case's (policy, metrics) under ``directory``."""
    out: dict[str, tuple[Path, Path]] = {}
    if any(c.startswith("week") for c in cases):
        policy = directory / "week-policy.yaml"
        policy.write_text(yaml.safe_dump(WEEK_POLICY))
        print("writing the week × 3 signals trace", file=sys.stderr)
        write_week(directory / "week.csv")
        for c in cases:
            if c.startswith("week"):
                out[c] = (policy, directory / "week.csv")
    if "long" in cases:
        policy = directory / "long-policy.yaml"
        policy.write_text(yaml.safe_dump(long_policy(LONG_SIGNALS)))
        print(f"writing the {LONG_WEEKS} weeks × {LONG_SIGNALS} signals trace ({fmt})", file=sys.stderr)
        if fmt == "csv":
            metrics = directory / "long.csv"
            write_long_csv(metrics)
        else:
            metrics = directory / "long"
            write_long_json(metrics)
        out["long"] = (policy, metrics)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="long,week,week-no-plot", help="long, week, week-no-plot (default all)")
    parser.add_argument("--format", choices=("csv", "json"), default="csv", help="the long trace's format")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each week case (the long one runs once)")
    parser.add_argument("--mode", choices=("recorded", "whatif"), default="recorded")
    parser.add_argument("--tree", metavar="DIR", help="run the replay from this checkout (PYTHONPATH)")
    parser.add_argument("--write", metavar="DIR", help="only write the traces and policies to DIR")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - {"long", "week", "week-no-plot"})
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}")

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.write) if args.write else Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        inputs = write_inputs(directory, cases, args.format)
        if args.write:
            print(json.dumps({c: [str(p), str(m)] for c, (p, m) in inputs.items()}, indent=2))
            return 0
        print(f"replay memory and time, whole process (load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores)")
        print(f"{'case':<14} {'peak RSS':>10} {'CPU':>8} {'wall':>8}")
        for case in cases:
            policy, metrics = inputs[case]
            command = [sys.executable, "-m", "autoscaler.cli", "replay", "--policy", str(policy), "--metrics",
                       str(metrics), "--mode", args.mode, "--out", str(Path(tmp) / f"out-{case}"), "-q"]
            if case == "week-no-plot":
                command.append("--no-plot")
            runs = 1 if case == "long" else args.repeat
            for k in range(runs):
                print(f"running {case} ({k + 1}/{runs})", file=sys.stderr)
                rss, cpu, wall, code = measure(command, args.tree)
                flag = "" if code == 0 else f"  (exit {code})"
                print(f"{case:<14} {rss:>7.0f} MiB {cpu:>7.2f}s {wall:>7.2f}s{flag}", flush=True)
    print(f"goals: long peak < {GOAL_RSS_MIB} MiB; week with plot ≤ {GOAL_WEEK_S:g} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
