"""A replica someone else asks for, under the hand-off: Kueue preempts training for it, then our policy decides.

Where a serving replica waits for admission that our policy did not ask for itself (a ``kubectl scale``, a
rollout's surge pod, a restart of ours mid-hand-off), Kueue preempts a trainer for it; our policy, deciding next,
must not stop one more for the same replica (``arbitration.making_room``, docs/controller.md, "Kueue evicting for
one of our waiting replicas"). The hand-off bench's scenarios (``bench.handoff.SCENARIOS``: the GPU cluster with
the conversation trace, the TPU cluster with the code trace) with trainers that neither save on SIGTERM nor
honour requests, the first ``--duration`` seconds at rate ×1, routing seed 0, the recommended policy of each; one
replica is added at ``T`` seconds, for each ``T`` of ``--at`` (default: 25, 75, …, 875 s), one run per ``T``.

Prints one line per run (attainment, serving chip-h, training kept and lost chip-h, stops by us and by Kueue)
and the sums. Deterministic: compare two trees by running this file in each (``PYTHONPATH=<tree>``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from autoscaler.core.engine import compile_policy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces
from autoscaler.sim.oracle import attainment
from autoscaler.sim.simulation import PolicyController, RunResult, Simulation
from bench import handoff

SLO_S = 2.0


def run(scenario: str, at: float, duration_s: float) -> RunResult:
    """One run: ``scenario`` (``conv`` or ``code``) with one replica added by someone else at ``at`` seconds."""
    _, trace_file, cluster, policy_file = next(s for s in handoff.SCENARIOS if s[0] == scenario)
    cl = cluster_mod.load(handoff.cluster_file(cluster, trainers="neither", into=Path(tempfile.mkdtemp())))
    policy = load_file(policy_file)[0]
    pc = PolicyController(compile_policy(policy), cl.pipeline_for(policy.metadata.name), "default")
    trace = traces.reshape(traces.load(trace_file), time_scale=1.0, rate_scale=1.0, duration_s=duration_s,
                           start_s=0.0, seed=0)
    sim = Simulation(cluster=cl, trace=trace, controller=pc, initial_replicas=1, slo_ttft_s=SLO_S)

    def surge(now: float) -> None:
        sim.set_desired(len(sim.pool.live()) + 1, now, reason="external", message="one replica added by someone else")

    sim.every(at, surge)
    return sim.run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.handoff_surge", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=[s[0] for s in handoff.SCENARIOS], action="append",
                    help="conv and/or code (default: both)")
    ap.add_argument("--at", type=float, action="append", help="seconds at which the replica is added (repeatable)")
    ap.add_argument("--duration", type=float, default=900.0, help="seconds simulated (default 900)")
    args = ap.parse_args(argv)
    times = args.at or [25.0 + 50.0 * i for i in range(int(args.duration // 50))]
    for scenario in args.scenario or [s[0] for s in handoff.SCENARIOS]:
        ours = kueue = 0
        kept = lost = serving = 0.0
        for t in times:
            res = run(scenario, t, args.duration)
            stops = [s for seq in res.stops.values() for s in seq]
            by_us = sum(1 for s in stops if s.deactivated)
            ours, kueue = ours + by_us, kueue + len(stops) - by_us
            kept, lost = kept + res.training_useful_chip_s / 3600, lost + res.training_lost_chip_s / 3600
            serving += res.serving_chip_s / 3600
            print(f"{scenario} +1 at {t:g}s: attainment {attainment(res, SLO_S) * 100:.2f} %, serving "
                  f"{res.serving_chip_s / 3600:.2f} chip-h, training kept {res.training_useful_chip_s / 3600:.3f} "
                  f"lost {res.training_lost_chip_s / 3600:.3f} chip-h, stops by us {by_us}, by Kueue "
                  f"{len(stops) - by_us}", flush=True)
        print(f"{scenario}, {len(times)} runs: stops by us {ours}, by Kueue {kueue}; training kept {kept:.3f} lost "
              f"{lost:.3f} chip-h; serving {serving:.2f} chip-h", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
