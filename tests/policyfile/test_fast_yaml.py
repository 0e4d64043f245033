"""The loader's fast path (libyaml, and one walk that builds plain documents) answers exactly what the
line-tracking path answers: the same policies, the same problems at the same FILE:LINE:COL, same words.

``slow`` turns both shortcuts off (``FAST_YAML`` False: PyYAML's pure-Python parser, then ``_check_graph`` and
PyYAML's constructor for every document), which is how every file was loaded before. ``no_native`` turns off
only the native parser (``plainyaml``) that is tried before both: every comparison runs all three ways.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.policyfile import loader
from tests.policyfile.test_fuzz import FUZZ, TOKENS, YAML_ALPHABET, trees
from tests.policyfile.test_validate_cases import CASES
from tests.policyfile.texts import BASE

ROOT = Path(__file__).resolve().parent.parent.parent
pytestmark = pytest.mark.skipif(not loader.FAST_YAML, reason="PyYAML without libyaml: there is no fast path")


@contextlib.contextmanager
def slow() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "FAST_YAML", False)
        mp.setattr(loader, "NATIVE_YAML", False)
        yield


@contextlib.contextmanager
def no_native() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "NATIVE_YAML", False)
        yield


def outcome(path: Path) -> tuple[list[str], list[Any]]:
    result = loader.collect([path])
    return [str(p) for p in result.problems], [(lp.policy, lp.file, lp.line) for lp in result.policies]


def same_both_ways(tmp_path: Path, content: bytes) -> tuple[list[str], list[Any]]:
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    fast = outcome(path)
    with no_native():
        assert outcome(path) == fast
    with slow():
        assert outcome(path) == fast
    return fast


@pytest.mark.parametrize(("content", "expected"), CASES)
def test_every_bad_input_case(content: str | bytes, expected: object, tmp_path: Path) -> None:
    problems, _ = same_both_ways(tmp_path, content if isinstance(content, bytes) else content.encode())
    assert problems


@pytest.mark.parametrize("path", sorted((ROOT / "policies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_policy(path: Path, tmp_path: Path) -> None:
    problems, policies = same_both_ways(tmp_path, path.read_bytes())
    assert not problems
    assert policies


def test_the_fast_path_is_taken() -> None:
    """Guards the figure: a plain policy goes through libyaml and the one-walk builder."""
    state = loader._FileState("p.yaml", [])
    assert loader._fast_yaml_ok(BASE)
    ((_, data),) = loader._compose(BASE, state)
    assert data == yaml.safe_load(BASE)


def test_loading_makes_no_reference_cycles() -> None:
    """Loading pauses the cyclic collector and hands what it built to the oldest generation: a cycle made per
    document (a recursive closure's cell, say) would pile up until a full collection. None is made."""
    loader.collect([ROOT / "policies"])  # imports and caches first
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        result = loader.collect([ROOT / "policies"])
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
    assert result.ok
    assert result.policies


@pytest.mark.parametrize(
    "text", ["a: &x [1, 2]\nb: *x\n", "a: &x 1\nb: *x\n", "a: &x {k: 1}\nb: [*x, *x]\n", "a: &x\n  - 1\nb: *x\n"]
)
def test_an_alias_is_left_to_the_full_checks(text: str) -> None:
    """The one walk never expands an alias (a YAML bomb expands to 10⁹ nodes before any count could stop it):
    a text with an anchor is walked remembering every node, and an alias sends it to ``_check_graph``."""
    assert loader._compose_fast(text, loader._FileState("p.yaml", [])) is None


@FUZZ
@given(trees)
def test_the_walk_without_anchors_builds_what_the_full_walk_builds(spec: Any) -> None:
    doc = {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "f"}, "spec": spec}
    text = yaml.safe_dump(doc, allow_unicode=True)
    for node in yaml.compose_all(text, Loader=yaml.CSafeLoader):
        assert isinstance(node, yaml.MappingNode)
        assert loader._plain_data(node, anchors=False) == loader._plain_data(node, anchors=True)


def test_nesting_too_deep_for_libyaml_never_reaches_it() -> None:
    assert not loader._fast_yaml_ok("a: " + "[" * 2000 + "]" * 2000)
    assert not loader._fast_yaml_ok("a:\n" + " " * 2000 + "b: 1\n")


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(YAML_ALPHABET), st.sampled_from(TOKENS)), max_size=120))
def test_yaml_ish_noise(parts: list[str]) -> None:
    with _tmp() as tmp:
        same_both_ways(tmp, "".join(parts).encode("utf-8", "surrogatepass"))


@FUZZ
@given(trees)
def test_random_trees(spec: Any) -> None:
    doc = {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "f"}, "spec": spec}
    with _tmp() as tmp:
        same_both_ways(tmp, yaml.safe_dump(doc, allow_unicode=True).encode())


@contextlib.contextmanager
def _tmp() -> Iterator[Path]:
    import tempfile  # noqa: PLC0415 - hypothesis tests cannot take the tmp_path fixture per example

    with tempfile.TemporaryDirectory() as d:
        yield Path(d)
