"""Loading many policies: ``autoscaler validate`` (and the controller's start and reload) over 5,000 policies.

Goal: ≤ 2 s for 5,000 policies. The policies are the bundled examples (``policies/*.yaml``), each renamed
(``metadata.name`` and the target's name) so that every copy is its own policy for its own target, written
one policy per file (how a policy directory mounted from ConfigMaps looks) into a temporary directory.
``loader.collect`` (the policies' models kept) and ``loader.check`` (what ``autoscaler validate`` runs: the files
split over a forked child on a machine with two cores) are then timed ``--repeat`` times in this process (CPU
seconds of both processes, since the machine is shared, and wall seconds), printed as min / median / max. The
whole command, interpreter start-up included, is measured with ``python3 -m autoscaler.cli validate -q DIR`` over
a directory ``write`` filled, timed as a whole process over several runs (``/usr/bin/time``; quote the median).

Run: ``python -m bench.policy_load [--policies N] [--repeat N] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from autoscaler import forked
from autoscaler.policyfile import loader

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 2.0


def examples() -> list[str]:
    """The bundled example policies, one YAML text each, with ``NAME`` and ``TARGET`` placeholders."""
    out = []
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "ScalingPolicy":
                continue
            doc["metadata"]["name"] = "NAME"
            _rename_targets(doc["spec"], doc["spec"]["target"]["name"], {})
            out.append(yaml.safe_dump(doc, sort_keys=False))
    return out


def _rename_targets(node: object, primary: str, names: dict[str, str]) -> None:
    """Every target named under ``node`` (``spec.target``, and each variant's of a policy with several
    targets) renamed after the copy: ``TARGET`` for ``spec.target``'s name, ``TARGET-vN`` for the others."""
    if isinstance(node, dict):
        if isinstance(node.get("target"), dict) and isinstance(node["target"].get("name"), str):
            old = node["target"]["name"]
            new = "TARGET" if old == primary else names.setdefault(old, f"TARGET-v{len(names) + 1}")
            node["target"]["name"] = new
        for value in node.values():
            _rename_targets(value, primary, names)
    elif isinstance(node, list):
        for item in node:
            _rename_targets(item, primary, names)


def write(directory: Path, count: int) -> None:
    texts = examples()
    for i in range(count):
        text = texts[i % len(texts)].replace("NAME", f"policy-{i:05d}").replace("TARGET", f"app-{i:05d}")
        (directory / f"policy-{i:05d}.yaml").write_text(text)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policies", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        write(directory, args.policies)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            loader.collect([directory])
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            return 0
        cpu, wall = [], []
        check_cpu, check_wall = [], []
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            result = loader.collect([directory])
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            if not result.ok or len(result.policies) != args.policies:
                raise SystemExit(f"not all policies loaded: {result.problems[:3]}")
            # What `autoscaler validate` runs: the files split over a forked child when there are 2 cores.
            c0, w0 = time.process_time(), time.perf_counter()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            checked = loader.check([directory])
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            child_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
            check_cpu.append(time.process_time() - c0 + child_cpu)
            check_wall.append(time.perf_counter() - w0)
            if not checked.ok or len(checked.policies) != args.policies:
                raise SystemExit(f"not all policies checked: {checked.problems[:3]}")
    print(f"{args.policies} policies in {args.policies} files, C YAML parser: {loader.FAST_YAML}, "
          f"native parser building plain values (yaml_rs): {loader.NATIVE_YAML}")
    print(f"collect (models kept), cpu s  min / median / max: {spread(cpu)}")
    print(f"collect (models kept), wall s min / median / max: {spread(wall)}")
    print(f"check ({forked.cores()} cores; validate's), cpu s (both processes) min / median / max: {spread(check_cpu)}")
    print(f"check ({forked.cores()} cores; validate's), wall s min / median / max: {spread(check_wall)}")
    print(f"goal: ≤ {GOAL_S} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
