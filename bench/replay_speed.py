"""How long ``autoscaler replay`` takes over a week of metrics at 15 s resolution with three signals.

Goal: under 2 s on a 2-core machine, excluding the plot. The week is generated synthetically (a daily load
cycle with deterministic noise, written as a CSV with a recorded replica count), then read, and replayed in both
modes with each evaluation streamed to the writers (decisions.jsonl, the summary), each stage timed; then
``decide`` alone and the replay's fast path for hpa (``fast.hpa_decider``) alone on the same observations. The whole
command with and without the plot, and its memory: ``bench.replay_memory``.
Run: ``python -m bench.replay_speed [--repeat N] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import math
import os
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

from autoscaler.core import screen
from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.fast import hpa_decider
from autoscaler.core.model import Observation, PolicyState
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine, report, traces

WEEK_S = 7 * 86400
STEP_S = 15.0
GOAL_S = 2.0

POLICY = {
    "apiVersion": "autoscaler.dev/v1alpha1",
    "kind": "ScalingPolicy",
    "metadata": {"name": "bench-week"},
    "spec": {
        "target": {"kind": "Deployment", "name": "llm"},
        "minReplicas": 1,
        "maxReplicas": 40,
        "signals": [
            {"name": "backlog", "query": "sum(backlog)", "scope": "total"},
            {"name": "slots_used", "query": "avg(slots)", "scope": "perReplica"},
            {"name": "kv_cache", "query": "avg(kv)", "scope": "perReplica"},
        ],
        "policy": {
            "type": "hpa",
            "metrics": [
                {"signal": "backlog", "type": "External", "target": {"type": "AverageValue", "averageValue": 5}},
                {"signal": "slots_used", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}},
                {"signal": "kv_cache", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.7}},
            ],
        },
    },
}


def clock() -> float:
    """CPU seconds of this process: on a shared 2-core machine the wall clock measures the neighbours too."""
    return time.process_time()


def write_week(path: Path, seed: int = 7) -> int:
    """A week of three signals and a recorded count; returns the row count."""
    rng = random.Random(seed)
    start = 1_764_460_800.0  # 2025-11-30T00:00:00Z
    rows = int(WEEK_S / STEP_S)
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["timestamp", "backlog", "slots_used", "kv_cache", "replicas"])
        replicas = 8
        for i in range(rows):
            t = start + i * STEP_S
            day = 0.5 + 0.45 * math.sin(2 * math.pi * (t % 86400) / 86400)
            load = max(0.0, day + rng.gauss(0, 0.08))
            if i % 40 == 0:  # the recorded controller moved every 10 minutes
                replicas = max(2, round(20 * day))
            w.writerow(
                [
                    f"{t:.0f}",
                    f"{max(0.0, 120 * load - 60 + rng.gauss(0, 5)):.1f}",
                    f"{min(1.0, load * 20 / replicas):.3f}",
                    f"{min(1.0, 0.8 * load * 20 / replicas):.3f}",
                    replicas,
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument("--profile", action="store_true", help="print the 20 hottest functions of one replay")
    args = parser.parse_args(argv)

    compiled = compile_policy(ScalingPolicy.model_validate(yaml.safe_load(yaml.safe_dump(POLICY))))
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "week.csv"
        rows = write_week(csv_path)
        results: dict[str, list[float]] = {}
        for mode in ("recorded", "whatif"):
            best: list[float] | None = None
            for _ in range(args.repeat):
                t0 = clock()
                trace = traces.load([csv_path])
                t1 = clock()
                # As `autoscaler replay` runs: each evaluation to the writers as it is made (the plot excluded).
                stream = engine.stream(
                    compiled, trace, engine.Options(mode=mode, actuation_delay_s=60.0 * (mode == "whatif"))
                )
                counts = report.Tally(stream)
                with report.DecisionWriter(Path(tmp) / "decisions.jsonl", stream.target) as writer:
                    for step in stream.steps:
                        writer.add(step)
                        counts.add(step)
                report.write_summary(counts.summary(trace.files), Path(tmp) / "summary.json")
                t2 = clock()
                times = [t1 - t0, t2 - t1, t2 - t0]
                if best is None or times[-1] < best[-1]:
                    best = times
            assert best is not None
            results[mode] = best
        # The core alone: the same decide() calls on the observations the replay built, without the loop.
        trace = traces.load([csv_path])
        replay = engine.run(compiled, trace, engine.Options())
        target = compiled.policy.spec.target.ref()
        observations = [(s.time, Observation(target, s.replicas, s.readings)) for s in replay.steps]
        core = math.inf
        for _ in range(args.repeat):
            state = PolicyState()
            t0 = clock()
            for now, obs in observations:
                _, state = decide(compiled, obs, state, now)
            core = min(core, clock() - t0)
        # The same through the replay's fast path (``fast.hpa_decider``; ``decide`` where it does not answer).
        fast = hpa_decider(compiled)
        assert fast is not None
        fused = math.inf
        taken = 0
        for _ in range(args.repeat):
            state = PolicyState()
            taken = 0
            t0 = clock()
            for now, obs in observations:
                done = fast(obs, state, now)
                if done is None:
                    done = decide(compiled, obs, state, now)
                else:
                    taken += 1
                state = done[1]
            fused = min(fused, clock() - t0)
        # How often the controller's screen (``core.screen.quiet``: "this reading cannot change the count") would
        # answer for these evaluations: where it does, a replay could skip the behavior stage (not the message).
        quiet_at = sum(screen.quiet(compiled, obs, now) for now, obs in observations)
        if args.profile:
            trace = traces.load([csv_path])
            prof = cProfile.Profile()
            prof.runcall(engine.run, compiled, trace, engine.Options(mode="whatif"))
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(20)

    load = os.getloadavg()[0]
    print(f"replay speed: one week at {STEP_S:g} s, 3 signals, {rows} evaluations (best of {args.repeat})")
    print(f"CPU seconds (load average {load:.1f} on {os.cpu_count()} cores while measuring)")
    print(f"{'mode':<9} {'read':>7} {'replay+write':>13} {'total':>7}  evaluations/s")
    for mode, (read, rep, total) in results.items():
        print(f"{mode:<9} {read:>6.2f}s {rep:>12.2f}s {total:>6.2f}s  {rows / rep:>10,.0f}")
    print(f"core decide() alone, recorded observations: {core:.2f}s ({core / rows * 1e6:.0f} µs per evaluation)")
    print(f"the fast path (fast.hpa_decider) on the same: {fused:.2f}s ({fused / rows * 1e6:.0f} µs per evaluation; "
          f"taken at {taken:,} of {len(observations):,} evaluations)")
    print(f"core.screen.quiet answers 'no change' at {quiet_at:,} of {len(observations):,} evaluations "
          f"(screened: {'yes' if screen.screened(compiled) else 'no, the legacy stabilization without behavior'})")
    worst = max(r[-1] for r in results.values())
    verdict = "meets" if worst < GOAL_S else "MISSES"
    print(f"slowest total {worst:.2f} s: {verdict} the {GOAL_S:g} s goal (plot excluded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
