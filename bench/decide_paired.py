"""``decide``'s CPU cost per evaluation on two or more source trees, measured in pairs, alternating.

On a shared machine two runs minutes apart measure the neighbours as much as the code: a change of 10 % in
``decide`` hides in the spread of separate runs. Here every tree gets its own long-lived child process (its own
``autoscaler`` on ``PYTHONPATH``) that builds the same observations once (``bench.replay_speed``'s week,
replayed in recorded mode: 40,320 evaluations of a 3-metric hpa policy) and then, on each request, runs
``decide`` over all of them from a fresh state and reports the CPU seconds of that loop alone
(``time.process_time``). The parent asks the trees in turn, reversing the order every round (A B, B A, ...), so
a burst of load falls on both sides of a pair; the figure to read is the per-round ratio to the first tree
(median and range over the rounds), beside each tree's min and median in µs per evaluation.

Each child also hashes every decision it made (count, reason, message) and the final state: the line "same
decisions" says whether every tree decided byte-identically on the week.

A tree is a directory (used as it is) or a git revision of this repository (exported with ``git archive``).
Run: ``python -m bench.decide_paired [--rounds N] TREE [TREE ...]``, e.g. ``python -m bench.decide_paired main .``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The child: the tree's own code builds the observations and decides; it reads "run" lines and answers each
# with the loop's CPU seconds, then the decisions' digest.
CHILD = r"""
import hashlib, sys, tempfile, time
from pathlib import Path
from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import Observation, PolicyState
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine, traces
import bench.replay_speed as week

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "week.csv"
    week.write_week(path)
    compiled = compile_policy(ScalingPolicy.model_validate(week.POLICY))
    replay = engine.run(compiled, traces.load([path]), engine.Options())
    target = compiled.policy.spec.target.ref()
    observations = [(s.time, Observation(target, s.replicas, s.readings)) for s in replay.steps]
    del replay

digest = hashlib.sha256()
state = PolicyState()
for now, obs in observations:
    decisions, state = decide(compiled, obs, state, now)
    for d in decisions:
        digest.update(repr((getattr(d, "desired", None), str(getattr(d, "reason", "")), d.message)).encode())
digest.update(repr((state.recommendations, state.scale_up_events, state.scale_down_events)).encode())
print(len(observations), digest.hexdigest()[:16], flush=True)

for line in sys.stdin:
    state = PolicyState()
    t0 = time.process_time()
    for now, obs in observations:
        _, state = decide(compiled, obs, state, now)
    print(time.process_time() - t0, flush=True)
"""


def _tree(spec: str, tmp: Path) -> Path:
    """A directory as given, or a revision exported into ``tmp``."""
    path = Path(spec)
    if path.is_dir() and (path / "autoscaler").is_dir():
        return path.resolve()
    out = tmp / spec.replace("/", "_")
    out.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", spec], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(out, filter="data")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="directories or git revisions; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=20, help="runs of each tree, alternating (default 20)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        roots = [_tree(spec, Path(tmp)) for spec in args.trees]
        children = []
        for root in roots:
            env = {**os.environ, "PYTHONPATH": str(root)}
            children.append(
                subprocess.Popen(
                    [sys.executable, "-c", CHILD], cwd=root, env=env, text=True,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                )
            )
        heads = []
        times: list[list[float]] = [[] for _ in roots]
        try:
            for spec, child in zip(args.trees, children, strict=True):
                assert child.stdout is not None
                head = child.stdout.readline().split()
                if len(head) != 2:
                    raise SystemExit(f"{spec}: the child failed before its first run (its error is above)")
                heads.append((int(head[0]), head[1]))
            for r in range(args.rounds):
                order = range(len(roots)) if r % 2 == 0 else reversed(range(len(roots)))
                for i in order:
                    child = children[i]
                    assert child.stdin is not None
                    assert child.stdout is not None
                    child.stdin.write("run\n")
                    child.stdin.flush()
                    times[i].append(float(child.stdout.readline()) / heads[i][0])
        finally:
            for child in children:
                assert child.stdin is not None
                child.stdin.close()
                child.wait()

    print(f"decide() CPU µs per evaluation, {heads[0][0]} evaluations, {args.rounds} alternating rounds, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'tree':<24} {'min':>7} {'median':>7}  ratio to the first: median [min, max] per round")
    for spec, series in zip(args.trees, times, strict=True):
        ratios = [a / b for a, b in zip(series, times[0], strict=True)]
        print(f"{spec:<24} {min(series) * 1e6:>7.1f} {statistics.median(series) * 1e6:>7.1f}  "
              f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
    same = len({digest for _, digest in heads}) == 1
    print("same decisions on every tree" if same else "DECISIONS DIFFER: " + ", ".join(d for _, d in heads))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
