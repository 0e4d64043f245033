#!/usr/bin/env python3
"""Generate deploy/'s copies of the example policies it ships, from policies/ (the one source of truth).

kustomize loads no file from outside a kustomization's directory (its load restrictor), so `kubectl apply -k`
cannot read ../../policies/. deploy/base/policies/ holds generated copies instead; CI runs this script with
--check so a copy can never drift from its source.

    python3 scripts/sync_deploy.py           # rewrite the copies
    python3 scripts/sync_deploy.py --check   # exit 1 and name the stale file when a copy differs

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (source under policies/, copy under deploy/, {line in the source: line in the copy})
SHIPPED = (
    # The tutorial deploys TGI and the fine-tune Job to `llm`; the example says llm-mixed only so that it does
    # not clash with recommended.yaml under `autoscaler validate policies/`. The deployed copy uses `llm`, the
    # namespace deploy/components/namespaced binds.
    ("policies/tgi-finetune-6gpu.yaml", "deploy/base/policies/tgi-gemma.yaml",
     {"    namespace: llm-mixed": "    namespace: llm", "    - namespace: llm-mixed": "    - namespace: llm"}),
)


def render(source: str, replace: dict[str, str]) -> str:
    lines = (ROOT / source).read_text().splitlines()
    # The source's comment header speaks of llm-mixed: start the copy at its first object.
    first_object = next(i for i, ln in enumerate(lines) if ln.startswith("apiVersion:"))
    body = lines[first_object:]
    out = [replace.get(ln, ln) for ln in body]
    missing = [k for k in replace if k not in body]
    if missing:
        raise SystemExit(f"{source}: expected line(s) not found: {missing}; update scripts/sync_deploy.py")
    header = [
        f"# GENERATED from {source} by scripts/sync_deploy.py: edit the source, then run the script.",
        f"# Changed here: {', '.join(f'{a.strip()!r} -> {b.strip()!r}' for a, b in replace.items())}.",
        f"# What the policy does and how to adapt it: the comments in {source}.",
    ]
    return "\n".join(header + out) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, copy, replace in SHIPPED:
        want, path = render(source, replace), ROOT / copy
        if path.exists() and path.read_text() == want:
            continue
        if check:
            stale.append(copy)
        else:
            path.write_text(want)
            print(f"wrote {copy}")
    for copy in stale:
        print(f"{copy}: stale; run python3 scripts/sync_deploy.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
