"""The pods source's exposition parser: its plain-text fast path gives exactly what prometheus-client's parser
gives (the reference), on every input, including the forms it hands over to the reference."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.sources.pods import Exposition, Sample, _plain, parse

NAMES = st.sampled_from(["a", "tgi_queue_size", "vllm:num_requests_waiting", "x_total", "h_bucket", "9bad", "a-b"])
LABEL_NAMES = st.sampled_from(["le", "model_name", "__name__", "_x", "a", "pod", "b c"])
VALUES = st.sampled_from(["0", "3", "-1", "+2", "1.5", "1e3", "NaN", "+Inf", "-Inf", "Nan", "1_0", "x", "", "0x1"])
LABEL_VALUES = st.sampled_from(["", "x", "+Inf", "0.5", "a,b", "a}b", 'q\\"', "a\\nb", "a=b", " s "])


@st.composite
def lines(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["sample", "sample", "sample", "type", "help", "comment", "blank", "junk"]))
    name = draw(NAMES)
    if kind == "type":
        return f"# TYPE {name} {draw(st.sampled_from(['counter', 'gauge', 'histogram', 'summary', 'untyped', '']))}"
    if kind == "help":
        return f"# HELP {name} some help"
    if kind == "comment":
        return "# just a comment"
    if kind == "blank":
        return draw(st.sampled_from(["", "  "]))
    if kind == "junk":
        return draw(st.sampled_from(["<html>", "}", "{", "a b c d", "a{} 1 2 3", "a 1 # {x=\"y\"} 2", "a\t1"]))
    pairs: list[tuple[str, str]] = draw(st.lists(st.tuples(LABEL_NAMES, LABEL_VALUES), max_size=3))
    sep = draw(st.sampled_from([",", ", ", " ,"]))
    labels = sep.join(f'{k}="{v}"' for k, v in pairs)
    trailing: bool = draw(st.booleans())
    empty_braces: bool = draw(st.booleans())
    if pairs and trailing:
        labels += ","
    braces = f"{{{labels}}}" if pairs or empty_braces else ""
    stamp = draw(st.sampled_from(["", " 1700000000000", " 17.5", " x"]))
    gap = draw(st.sampled_from([" ", "  "]))
    return f"{name}{braces}{gap}{draw(VALUES)}{stamp}"


def reference(text: str, wanted: frozenset[str] | None) -> Exposition | str:
    """prometheus-client's answer (``parse`` with the fast path bypassed), or 'error'."""
    try:
        return _reference(text, wanted)
    except ValueError:
        return "error"


def _reference(text: str, wanted: frozenset[str] | None) -> Exposition:
    out: Exposition = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if wanted is None or s.name in wanted:
                    stamp = s.timestamp
                    assert stamp is None or isinstance(stamp, float)  # the classic text parser's seconds
                    out.setdefault(s.name, []).append(Sample(dict(s.labels), float(s.value), stamp))
    except Exception as exc:
        raise ValueError(str(exc)) from None
    return out


def same(a: Exposition | str, b: Exposition | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if a.keys() != b.keys():
        return False
    for name in a:
        if len(a[name]) != len(b[name]):
            return False
        for (la, va, ta), (lb, vb, tb) in zip(a[name], b[name], strict=True):
            if la != lb or ta != tb or not (va == vb or (math.isnan(va) and math.isnan(vb))):
                return False
    return True


WANTED = st.sampled_from([None, frozenset({"a", "x_total", "h_bucket", "tgi_queue_size"})])


@settings(max_examples=200, deadline=None)
@given(st.lists(lines(), max_size=8), WANTED)
@example(["# TYPE x counter", "x 3"], None)  # a counter without _total is named with it
@example(['a{le="1",le="2"} 1'], None)  # a label named twice is refused
@example(['a{b="x}y"} 1'], None)  # a brace inside a value
@example(["a 1 1700000000000"], frozenset({"a"}))  # a timestamp in milliseconds
@example(["a 1_0"], None)  # Python reads 1_0 as 10; the reference refuses it
@example(["a 0", "b 0 x"], frozenset({"a"}))  # garbage on a line not wanted still makes it unreadable
def test_the_fast_path_parses_as_the_reference_does(body: list[str], wanted: frozenset[str] | None) -> None:
    text = "\n".join(body) + "\n"
    try:
        got: Exposition | str = parse(text, "text/plain; version=0.0.4", wanted)
    except ValueError:
        got = "error"
    assert same(got, reference(text, wanted)), (text, got, reference(text, wanted))


def test_plain_text_takes_the_fast_path_and_the_rest_does_not() -> None:
    assert _plain('# TYPE q gauge\nq{model="m"} 5\n', None) == {"q": [({"model": "m"}, 5.0, None)]}
    assert _plain('q{model="a\\"b"} 5\n', None) is None  # an escape: the reference parser reads it
    assert _plain('q 5 # {trace="1"} 1\n', None) is None  # an exemplar
    assert _plain("<html>oops</html>\n", None) is None  # garbage: the reference parser refuses it
