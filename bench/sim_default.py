"""Speed of the default ``autoscaler simulate`` run: one hour of the conversation trace, every baseline
(static-peak, hpa, hpa-tuned's grid search, keda, kueue-only), the recommended policy and the oracle (its
search at the SLO target and its re-solves at each row's attainment), with the plot (the README's main-job
command).

Run: ``python -m bench.sim_default``. Prints wall-clock seconds per run and the stages of one run. The command
runs independent simulations side by side in as many processes as this one may use (``autoscaler.sim.forks``);
the CPU figure counts every process (this one and the children it waited for), so it is what the run costs on
one core.
"""

from __future__ import annotations

import contextlib
import io
import resource
import statistics
import sys
import tempfile
import time

from autoscaler import cli
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import forks, runner

RUNS = 3


def _cpu() -> float:
    """CPU seconds of this process and of the children it has waited for (the simulations run side by side)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    walls, cpus = [], []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
            t0, c0 = time.perf_counter(), _cpu()
            code = cli.main(["simulate", "--out", out])
            walls.append(time.perf_counter() - t0)
            cpus.append(_cpu() - c0)
        if code != 0:
            print(f"simulate exited {code}", file=sys.stderr)
            return code
    policies = [(p.metadata.name, p) for p in load_file(runner.default_policy_path())]
    t0 = time.perf_counter()
    outcome = runner.run(runner.Options(policies=policies, workers=forks.available_cpus()))
    total = time.perf_counter() - t0
    scored = " + ".join([*outcome.summary["policies"], "oracle"])
    print(f"default run (conv trace 1 h, {scored}, with plot): "
          f"min {min(walls):.2f}s, median {statistics.median(walls):.2f}s over {RUNS} runs (goal < 15 s) in "
          f"{forks.available_cpus()} processes; CPU {min(cpus):.2f}s, every process counted (what the run costs "
          "on one core)")
    oracle = outcome.summary["oracle"]
    tuned = outcome.summary.get("hpa_tuned", {}).get("runs", [])
    print(f"  without the plot: {total:.2f}s; oracle: {oracle['schedules_simulated']} schedules simulated; "
          f"hpa-tuned: {len(tuned)} HPA runs; {outcome.summary['trace']['requests']} requests per simulation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
