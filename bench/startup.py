"""Start-up: how long ``autoscaler <command> --help`` takes, beside a bare interpreter's start.

Goal: ≤ 0.25 s to ``--help`` for ``validate``, ``replay`` and ``simulate``. Each command runs in a fresh
interpreter ``--repeat`` times; wall seconds and CPU seconds (user + system of the child, from
``getrusage``) are printed as min / median / max. What each command imports is a structural test
(``tests/test_startup.py``), not part of this figure.

Run: ``python -m bench.startup [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.25
CASES = {
    "python (floor)": [sys.executable, "-c", "pass"],
    **{
        f"autoscaler {c} --help": [sys.executable, "-m", "autoscaler.cli", c, "--help"]
        for c in ("validate", "replay", "simulate", "run", "observe")
    },
}


def once(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'command':32} {'wall s min/median/max':>26} {'cpu s min/median/max':>26}")
    for name, argv in CASES.items():
        once(argv)  # warm the file cache
        runs = [once(argv) for _ in range(args.repeat)]
        print(f"{name:32} {spread([w for w, _ in runs]):>26} {spread([c for _, c in runs]):>26}")
    print(f"goal: ≤ {GOAL_S} s wall for validate, replay and simulate --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
