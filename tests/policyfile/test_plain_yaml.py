"""The native parser (``plainyaml``, ``yaml_rs``) is used only where it reads a text as PyYAML's safe loader does.

``yaml_rs`` reads YAML 1.2 and PyYAML YAML 1.1, and the two parsers part at the edges: each case below is one
where they give different values (or one refuses what the other takes), and ``plainyaml.load`` must leave every
one of them to the usual path. Random texts then check the rule itself: whatever ``load`` answers is what
PyYAML answers, types included. The loader-level comparisons (every validate case, the bundled policies, random
trees, three ways) are in test_fast_yaml.py; here the file-level pieces the native path adds: the document's
line, and where names and targets are written when policies clash (found again by reading the file).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.policyfile import loader, plainyaml
from tests.policyfile.test_fuzz import FUZZ
from tests.policyfile.test_split import fill
from tests.policyfile.texts import BASE, edit, policy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not plainyaml.AVAILABLE, reason="yaml_rs is not installed: no native path")


def native(text: str) -> Any:
    parsed = plainyaml.load(text, max_depth=loader.MAX_DEPTH, max_nodes=loader.MAX_NODES)
    return None if parsed is None else parsed.value


def pyyaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return "refused"


#: Texts where yaml_rs (YAML 1.2, saphyr) and PyYAML (YAML 1.1) part, found by comparing them (2026-12-01).
PARTING = [
    "a: 012\n",  # 1.1 octal 10, 1.2 decimal 12
    "a: 09\n",  # 1.1 a string, 1.2 the integer 9
    "a: 0o12\n",  # 1.1 a string, 1.2 octal 10
    "a: 0X1F\n",  # 1.1 a string, yaml_rs 31
    "a: 1e3\n",  # 1.1 a string (a float needs a dot), 1.2 1000.0
    "a: 1.0e3\n",  # 1.1 a string (its exponent needs a sign), 1.2 1000.0
    "a: -.5\n",  # 1.1 a string, 1.2 -0.5
    "a: .inF\n",  # 1.1 a string, yaml_rs inf
    "a: _6\n",  # 1.1 a string, yaml_rs 6
    "a: yes\n",  # 1.1 true, 1.2 a string
    "a: Off\n",
    "a: 12:30\n",  # 1.1 sexagesimal 750, 1.2 a string
    "a: 2026-12-01\n",  # 1.1 a date
    "<<: {a: 1}\nb: 2\n",  # 1.1 merges, 1.2 a key '<<'
    "a: !Ref x\n",  # PyYAML refuses an unknown tag; yaml_rs drops it
    "a: &x 1\nb: *x\n",
    "a: >\n",  # an empty folded scalar: '' against '\n'
    "a: [:x]\n",  # PyYAML refuses a flow scalar starting with ':'
    "a: [b?c]\n",  # PyYAML refuses '?' in a flow scalar
    "a: [>b]\n",
    "a: {   x y z\n- nox: 1b\n\n/}\n",  # flow collections over several lines
    "a: {v5e-81\n  ;\n- null0.5<<ak:}\n",
    "[a]: 1\n",  # a list as a key
    "a: 1\n---\nb: 2\n",  # two documents
]


@pytest.mark.parametrize("text", PARTING)
def test_where_the_parsers_part_the_native_path_steps_aside(text: str) -> None:
    assert native(text) is None


@pytest.mark.parametrize(
    "text",
    [
        BASE,
        "a: 1\nb: -2\nc: 0.5\nd: 10.25\ne: true\nf: ~\ng:\nh: 'yes please'\ni: \"x y\"\n",
        "a: {b: 1, c: [d, e, {f: g}]}\nh: x{a=\"b\"}\n",  # a brace inside a word is no flow collection
        "# a comment\n\n  # another\napiVersion: x\n",
        "a: v5e-8\nb: app-00012\n",
    ],
)
def test_plain_texts_take_the_native_path(text: str) -> None:
    """Guards the figure: plain texts, and the bundled policies' flow mappings, are read natively."""
    assert native(text) == yaml.safe_load(text)


def test_the_native_path_is_taken_for_a_valid_policy() -> None:
    state = loader._FileState("p.yaml", [])
    loaded = loader._valid_plain_policy(BASE, state)
    assert loaded is not None
    assert loaded.claim.spots is None  # found only when a clash must be reported
    assert not state.problems


PIECES = ["a", "b c", "x: 1", "- ", ": ", "  ", "\n", "\r", "\n  ", "\n- ", "'", '"', "''", "#", " #c", "[", "]",
          "{", "}", ", ", "1", "0.5", "-1", "+2", "true", "null", "~", "no", "e", "v5e-8", "'q: r'", '"s t"', "k:",
          "x y z", "<<", "=", "@", "`", "%", ";", "12", "1.5", "012", "1e3", ".5", "_", "x{a=\"b\"}"]
SCALAR = "0123456789._+-eExXoObB:~nNiIfFaAtTyYsSlL \"'#,[]{}?|>"


@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=16), st.sampled_from(["", "a: ", "k:\n  ", "k: ["]))
def test_what_the_native_path_answers_is_what_pyyaml_answers(parts: list[str], prefix: str) -> None:
    text = prefix + "".join(parts)
    value = native(text)
    if value is not None:
        assert repr(value) == repr(pyyaml(text))


@FUZZ
@given(st.text(SCALAR, min_size=1, max_size=7), st.sampled_from(["a: {}\n", "a:\n- {}\n", "{}: 1\n", "a: [{}]\n"]))
def test_scalars_read_natively_read_alike(token: str, form: str) -> None:
    text = form.format(token)
    value = native(text)
    if value is not None:
        assert repr(value) == repr(pyyaml(text))


@pytest.mark.parametrize(
    "text", ["a: [x,\ry]\n", "a: 1\r---\rb: 2\r", "a: 1\r%YAML 1.1\r", "a: 1\r\nb: [2]\r\n", "a: b\r  c\r"]
)
def test_a_lone_carriage_return_breaks_lines_for_the_checks_too(text: str) -> None:
    value = native(text)
    assert value is None or repr(value) == repr(pyyaml(text))


def _nodes(node: yaml.Node) -> int:
    """PyYAML's node count of a composed document: one per value and one per key."""
    if isinstance(node, yaml.MappingNode):
        return 1 + sum(_nodes(k) + _nodes(v) for k, v in node.value)
    if isinstance(node, yaml.SequenceNode):
        return 1 + sum(_nodes(child) for child in node.value)
    return 1


@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=16), st.sampled_from(["", "a: ", "k:\n  ", "k: ["]))
def test_the_native_count_is_pyyaml_s_node_count(parts: list[str], prefix: str) -> None:
    """What ``load`` counts is what the usual path counts against ``MAX_NODES``."""
    text = prefix + "".join(parts)
    parsed = plainyaml.load(text, max_depth=loader.MAX_DEPTH, max_nodes=loader.MAX_NODES)
    if parsed is not None:
        composed = yaml.compose(text)
        assert composed is not None
        assert parsed.count == _nodes(composed)


@pytest.mark.parametrize(
    ("text", "depth"),
    [("a: 1\n", 1), ("a: {b: {c: 1}}\n", 3), ("a: [[1]]\n", 3), ("a: [{b: [x]}]\n", 4), ("a: {}\n", 1),
     ("a: {b: []}\n", 2)],
)
def test_values_deeper_than_the_limit_are_refused(text: str, depth: int) -> None:
    """``depth``: how deep the deepest value is (the top mapping's values are 1 deep), as ``_check_graph``
    measures; the usual path refuses a value deeper than ``max_depth``, so the native path steps aside."""
    assert plainyaml.load(text, max_depth=depth, max_nodes=100) is not None
    assert plainyaml.load(text, max_depth=depth - 1, max_nodes=100) is None


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("a: 1\nq: 2.5\nb: {q: -3}\nc: [{q: 1000000000000000}]\n", True),
        ("q: ~\nflag: true\nname: x\n", True),  # null, and a bool or a string under a key not watched
        ("a: {q: true}\n", False),
        ("q: false\n", False),
        ("q: '1e300'\n", False),  # a string: pydantic would read it as a number
        ("a: [{q: 1000000000000001}]\n", False),  # out of range
        ("q: -1000000000000001\n", False),
        ("q: [1]\n", False),  # not a number at all: the check runs, the type check refuses it
    ],
)
def test_watched_keys_are_plain_numbers_only_when_they_are(text: str, plain: bool) -> None:
    parsed = plainyaml.load(text, max_depth=10, max_nodes=100, watch=frozenset({"q"}), bound=1e15)
    assert parsed is not None
    assert parsed.watched_plain is plain


def test_deep_nesting_is_refused_not_crashed() -> None:
    assert native("a: " + "[" * 5000 + "]" * 5000) is None
    deep = "a:\n" + "".join(" " * (i + 1) + "b:\n" for i in range(600))
    assert native(deep) is None  # deeper than MAX_DEPTH: the usual path reports it


def test_without_yaml_rs_there_is_no_native_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plainyaml, "AVAILABLE", False)
    assert native(BASE) is None


@pytest.mark.parametrize("lead", ["", "\n\n", "# c\n", "# c\n\n   # d\n", "  \n#x\n"])
def test_the_document_line_is_pyyaml_s(lead: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(lead + BASE)
    (fast,) = loader.collect([path]).policies
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "NATIVE_YAML", False)
        (usual,) = loader.collect([path]).policies
    assert fast.line == usual.line == lead.count("\n") + 1


def test_clashes_are_placed_as_before(tmp_path: Path) -> None:
    """A clash across files says where the later policy writes its name or target: the native path kept no
    place, so it reads the file again; the problems are the usual path's, word for word."""
    fill(tmp_path)
    for name in ("tpu7x-disaggregated.yaml", "tpu7x-disaggregated-variants.yaml"):
        shutil.copy(ROOT / "policies" / name, tmp_path / f"zz-{name}")  # each of their targets clashes
    (tmp_path / "zzz-indented.yaml").write_text(
        "# leading\n\n" + edit("    kind: Deployment", "    kind: Deployment\n    # moved", policy("owner", "shared"))
    )
    native_result = loader.check([tmp_path], split=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "NATIVE_YAML", False)
        usual = loader.check([tmp_path], split=False)
    clashes = [str(p) for p in usual.problems if "already" in p.message]
    assert len(clashes) >= 6
    assert [str(p) for p in native_result.problems] == [str(p) for p in usual.problems]
    assert {c.name for c in native_result.policies} == {c.name for c in usual.policies}


def test_a_file_gone_since_is_placed_at_its_document(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(policy("same", "one"))
    (tmp_path / "b.yaml").write_text("\n" + policy("same", "two"))
    claims = loader.check([tmp_path], split=False)
    assert [str(p) for p in claims.problems] == [f"{tmp_path / 'b.yaml'}:5:9: metadata.name: policy name 'same' "
                                                  f"is already used at {tmp_path / 'a.yaml'}:1"]
    loaded = [loader._Loaded(lp.policy, lp.file, lp.line, loader._claim(lp.policy, lp.file, lp.line, None))
              for lp in loader.collect([tmp_path / "a.yaml"]).policies]
    (tmp_path / "a.yaml").unlink()
    assert loader._spots(loaded[0].claim) == loader._Spots((1, 1), (1, 1))


def test_comment_lines_are_not_read_by_the_checks() -> None:
    """Hand-written files carry prose in comments (dates, versions, ``>=``): it must not send them the usual way."""
    text = "# seen 2026-12-01 06:35 UTC, e.g. prometheus-client >= 0.20 [docs]\n" + BASE + "  # 012, 1e3 | x\n"
    assert native(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ["a: 'x\n  # y'\n", 'a: "x\n  # y"\n', "a: 'x\n  # y\n  z'\n"])
def test_a_comment_like_line_inside_a_quoted_scalar_is_read_by_the_checks(text: str) -> None:
    assert "# y" in plainyaml._view(text)
    value = native(text)
    assert value is None or repr(value) == repr(pyyaml(text))


def _first_content_line(text: str) -> int:
    """``_document_line``'s plain definition: the first line that is not blank or a comment."""
    for number, line in enumerate(text.splitlines(), 1):
        content = line.lstrip(" ")
        if content and content[0] != "#":
            return number
    return 1


@FUZZ
@given(st.text(" #\n\r\x0b\x0c\x1c\x85\u2028\ta:", max_size=12))
def test_the_document_line_is_the_first_content_line(text: str) -> None:
    assert loader._document_line(text) == _first_content_line(text)
