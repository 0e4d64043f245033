"""The JSON Schema of ``kind: ScalingPolicy``, generated from ``core.spec.ScalingPolicy``.

The models are the one source of truth; ``policies/schema.json`` is their by-alias (camelCase) JSON Schema,
written with sorted keys so a regenerated file diffs cleanly, and checked in CI for drift (as KEDA does
for its scaler metadata). Editors use it through a modeline in each policy file::

    # yaml-language-server: $schema=./schema.json

Usage::

    python -m autoscaler.policyfile.schema policies/schema.json           # (re)write it
    python -m autoscaler.policyfile.schema --check policies/schema.json   # exit 1 when it is out of date
    python -m autoscaler.policyfile.schema -                              # print it
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from autoscaler.core.spec import ScalingPolicy

DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Lines of unified diff shown by ``--check`` before it says how many more there are.
DIFF_LINES = 40


def generate() -> dict[str, Any]:
    """The schema as a dict: pydantic's by-alias schema plus the dialect and a title."""
    schema = ScalingPolicy.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = DIALECT
    schema["title"] = "ScalingPolicy (autoscaler.dev/v1alpha1)"
    return schema


def render() -> str:
    """The exact text of ``policies/schema.json``."""
    return json.dumps(generate(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class Checked(NamedTuple):
    """``check``'s answer: whether the file is current, and a message saying what to do when it is not."""

    ok: bool
    message: str


def check(path: Path) -> Checked:
    """Whether ``path`` holds the current schema, and a message saying what to do when it does not."""
    expected = render()
    try:
        actual = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Checked(False, f"{path}: cannot read ({exc}); generate it with: {_command(path)}")
    if actual == expected:
        return Checked(True, f"{path}: up to date")
    diff = list(
        difflib.unified_diff(
            actual.splitlines(), expected.splitlines(), f"{path} (checked in)", f"{path} (from the models)",
            lineterm="", n=1,
        )
    )
    shown = diff[:DIFF_LINES]
    more = f"\n... {len(diff) - DIFF_LINES} more diff lines" if len(diff) > DIFF_LINES else ""
    return Checked(False, (
        f"{path} is out of date with autoscaler.core.spec; regenerate it with: {_command(path)}\n"
        + "\n".join(shown) + more
    ))


def _command(path: Path) -> str:
    return f"python -m autoscaler.policyfile.schema {path}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.policyfile.schema",
        description="Write (or check) the JSON Schema of ScalingPolicy documents.",
    )
    parser.add_argument("path", help="the schema file, e.g. policies/schema.json; '-' prints it")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the models")
    args = parser.parse_args(argv)
    if args.path == "-":
        sys.stdout.write(render())
        return 0
    path = Path(args.path)
    if args.check:
        checked = check(path)
        print(checked.message, file=sys.stdout if checked.ok else sys.stderr)
        return 0 if checked.ok else 1
    try:
        path.write_text(render(), encoding="utf-8")
    except OSError as exc:
        print(f"autoscaler schema: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
