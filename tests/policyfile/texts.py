"""Policy texts shared by the policyfile tests: a valid base and a one-line editor."""

from __future__ import annotations

#: A valid policy; the cases edit one line of it, so its line numbers are the ones expected in messages.
BASE = """\
apiVersion: autoscaler.dev/v1alpha1
kind: ScalingPolicy
metadata:
  name: web
spec:
  target:
    kind: Deployment
    name: web
  minReplicas: 1
  maxReplicas: 4
  signals:
    - name: waiting
      preset: vllm.waiting
  policy:
    type: queue
    work: [waiting]
    capacityPerReplica: 10
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    """``text`` with the one line ``old`` replaced by ``new`` (which may span several lines)."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip("\n") == old]
    assert len(hits) == 1, f"{old!r} must be exactly one line of the text"
    lines[hits[0]] = new + "\n"
    return "".join(lines)


def policy(name: str, target: str, namespace: str = "default") -> str:
    """A valid policy with the given name and target Deployment."""
    named = edit("  name: web", f"  name: {name}")
    return edit("    name: web", f"    name: {target}\n    namespace: {namespace}", named)
