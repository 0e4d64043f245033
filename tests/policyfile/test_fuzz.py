"""Whatever the bytes, ``autoscaler validate`` answers with exit 0 or 1 and positioned problems, never a
traceback: random bytes, YAML-ish noise, mutations of a valid policy, and random trees of real field names.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler import cli
from autoscaler.policyfile import loader
from tests.policyfile.texts import BASE

#: CI runs a fixed sample; AUTOSCALER_FUZZ_EXAMPLES=5000 explores afresh (random seed) for a longer hunt.
_HUNT = int(os.environ.get("AUTOSCALER_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_HUNT or 150, deadline=None, derandomize=not _HUNT, suppress_health_check=[HealthCheck.too_slow]
)

YAML_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")

#: Characters that mean something to YAML, plus a few that PyYAML refuses.
YAML_ALPHABET = [*":-[]{}&*!|>#'\"\n\t ,?%@`~.0123456789abkey", "\x00", "\x85", "\ufeff", "é", "\U0001f600"]
TOKENS = ["apiVersion", "kind", "spec", "metadata", "ScalingPolicy", "&a", "*a", "<<", "!!str", "!!binary",
          "---", "...", "- ", ": ", "\n  ", "\n", "null", "~", "1e999", "0x1F", "2026-11-30", "yes"]
FIELDS = ["apiVersion", "kind", "metadata", "spec", "name", "target", "minReplicas", "maxReplicas", "signals",
          "policy", "type", "work", "metrics", "preset", "expr", "query", "capacity", "preemptible", "source",
          "scaleToZero", "metricSafety", "fallback", "behavior", "signal", "capacityPerReplica"]


def check(content: bytes) -> None:
    """Validate ``content`` as a file through the loader and the CLI; assert the invariants."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.yaml"
        path.write_bytes(content)
        result = loader.collect([path])
        # YAML also breaks lines at \r, NEL, LS and PS, and PyYAML's marks count them.
        n_lines = len(YAML_LINE_BREAK.findall(content.decode("utf-8", "replace"))) + 1
        for problem in result.problems:
            assert problem.file == str(path)
            assert 1 <= problem.line <= n_lines + 1, problem
            assert problem.column >= 1, problem
            assert "\n" not in str(problem), problem
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["validate", str(path)])
        assert code == (0 if result.ok else 1)
        if not result.ok:
            assert out.getvalue().splitlines() == [str(p) for p in result.problems]


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(content: bytes) -> None:
    check(content)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(YAML_ALPHABET), st.sampled_from(TOKENS)), max_size=120))
def test_yaml_ish_noise(parts: list[str]) -> None:
    check("".join(parts).encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.data())
def test_mutated_valid_policy(data: st.DataObject) -> None:
    lines = BASE.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["delete", "duplicate", "indent", "dedent", "token", "swap"]))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "indent":
            lines[i] = "  " + lines[i]
        elif op == "dedent":
            lines[i] = lines[i][2:]
        elif op == "token":
            at = data.draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + data.draw(st.sampled_from(TOKENS)) + lines[i][at:]
        elif op == "swap" and len(lines) > 1:
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    check(("\n".join(lines) + "\n").encode())


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["hpa", "queue", "kpa", "Deployment", "LeaderWorkerSet", "vllm.waiting", "a + b", "Pods"]),
)
trees: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(FIELDS), children, max_size=5)
    ),
    max_leaves=30,
)


@FUZZ
@given(trees)
def test_random_trees_of_real_field_names(spec: Any) -> None:
    doc = {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "f"},
           "spec": spec}
    check(yaml.safe_dump(doc, allow_unicode=True).encode())
