"""The ``autoscaler validate`` sub-command: check policy files without a cluster.

Prints one line per problem, ``FILE:LINE:COL: field.path: what is wrong`` (the format compilers use, so
editors and CI annotators link to the spot), or a JSON document with ``--format json``. Exit status: 0
when every file is valid, 1 when any is not, 2 for a usage error (argparse's). Problems go to stdout,
which is the command's product; the one-line count of problems goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoscaler.policyfile import loader


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check ScalingPolicy files (no cluster needed)",
        description=(
            "Check ScalingPolicy YAML files: YAML syntax, fields and types, references between signals, "
            "and one policy per scale target across all the files given. Directories are searched for "
            "*.yaml and *.yml. Exit 0 when all are valid, 1 otherwise."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="policy files or directories")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when all files are valid")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (FILE:LINE:COL: ...) or json"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the policy models (pydantic) are most of start-up; `validate --help` does not need them.
    from autoscaler.policyfile import loader  # noqa: PLC0415

    try:
        result = loader.check(args.paths)
    except Exception as exc:  # the loader reports every known failure as a Problem; this is a last resort
        print(f"autoscaler validate: internal error: {type(exc).__name__}: {exc}; please report it", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(_as_json(result), indent=2))
        return 0 if result.ok else 1
    for problem in result.problems:
        print(problem)
    files, policies = _plural(len(result.files), "file"), _plural(len(result.policies), "policy")
    if result.ok:
        if not args.quiet:
            print(f"{files}, {policies}: ok")
        return 0
    bad = len({p.file for p in result.problems})
    print(f"autoscaler validate: {_plural(len(result.problems), 'problem')} in {_plural(bad, 'file')}",
          file=sys.stderr)
    return 1


def _as_json(result: loader.CheckResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "files": result.files,
        "policies": [
            {"name": claim.name, "target": claim.target, "file": claim.file, "line": claim.line}
            for claim in result.policies
        ],
        "problems": [
            {"file": p.file, "line": p.line, "column": p.column, "path": p.path, "message": p.message}
            for p in result.problems
        ],
    }


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"
