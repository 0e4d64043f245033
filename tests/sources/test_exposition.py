"""The pods source's exposition parser against prometheus-client's parser (the reference).

The contract: when ``_picked`` (the wanted names' own lines only) answers, its answer is the reference's on
those lines; otherwise ``parse`` gives exactly what the reference gives on the whole body (``_plain``, the
line scanner, gives it or hands the body over). The one difference from the reference (and from Prometheus,
which refuses a whole scrape with one bad line): garbage on a line no signal reads no longer makes the read
values unknown. On real expositions (vLLM, TGI, JetStream, a TPU host) the answer is the
reference's on the whole body, and the plain ones take ``_picked``."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.sources.pods import Exposition, Sample, _picked, _plain, parse
from tests.sources import test_pods
from tests.sources.expositions import vllm_v1

NAMES = st.sampled_from(["a", "tgi_queue_size", "vllm:num_requests_waiting", "x", "x_total", "h_bucket", "9bad", "a-b"])
LABEL_NAMES = st.sampled_from(["le", "model_name", "__name__", "_x", "a", "pod", "b c"])
VALUES = st.sampled_from(["0", "3", "-1", "+2", "1.5", "1e3", "NaN", "+Inf", "-Inf", "Nan", "1_0", "x", "", "0x1"])
LABEL_VALUES = st.sampled_from(["", "x", "+Inf", "0.5", "a,b", "a}b", 'q\\"', "a\\nb", "a=b", " s "])


@st.composite
def lines(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["sample", "sample", "sample", "type", "help", "comment", "blank", "junk", "indented"]))
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
        return draw(st.sampled_from(
            ["<html>", "}", "{", "a b c d", "a{} 1 2 3", "a 1 # {x=\"y\"} 2", "a\t1", "a=1", "a"]
        ))
    if kind == "indented":
        return draw(st.sampled_from([" ", "  ", "\u00a0"])) + draw(NAMES) + " " + draw(VALUES)
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
    """With one change: a sample keeps the name it is written with, as Prometheus stores it. prometheus-client
    renames the samples ``x`` of a family typed ``# TYPE x counter`` to ``x_total``; that is undone here."""
    out: Exposition = {}
    typed: dict[str, str] = {}  # the family a TYPE line names -> its type, as the parser reads comment lines
    for raw in text.split("\n"):
        parts = raw.strip().split(None, 3)
        if len(parts) == 4 and parts[0] == "#" and parts[1] == "TYPE":
            typed[parts[2]] = parts[3]
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = s.name
                if family.type == "counter" and typed.get(family.name) == "counter" and name == family.name + "_total":
                    name = family.name  # written bare under a bare TYPE line
                if wanted is None or name in wanted:
                    stamp = s.timestamp
                    assert stamp is None or isinstance(stamp, float)  # the classic text parser's seconds
                    out.setdefault(name, []).append(Sample(dict(s.labels), float(s.value), stamp))
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
@example(["# TYPE x counter", "x 3"], None)  # a counter typed without _total keeps its name (TGI)
@example(['a{le="1",le="2"} 1'], None)  # a label named twice is refused
@example(['a{b="x}y"} 1'], None)  # a brace inside a value
@example(["a 1 1700000000000"], frozenset({"a"}))  # a timestamp in milliseconds
@example(["a 1_0"], None)  # Python reads 1_0 as 10; the reference refuses it
@example(["a 0", "b 0 x"], frozenset({"a"}))  # garbage on a line not wanted still makes it unreadable
@example(["a 0", "b 0 x"], frozenset({"a"}))  # garbage on a line not wanted: the wanted line is read
@example(["# TYPE x counter", "x 3"], frozenset({"x_total"}))  # not renamed: no x_total sample
@example(["# TYPE x counter", "x 3"], frozenset({"x"}))  # read by its own name
@example(["# TYPE x counter", "x 3", 'b{a="\\\\"} 1'], None)  # the same through the reference parser
@example(["x_total 1", "# TYPE x counter", "x 3"], frozenset({"x_total"}))
@example([" a 1", "a 2"], frozenset({"a"}))  # a line after blanks: left to ``_plain``
@example(['a{le="1",le="2"} 1', "a 2"], frozenset({"a"}))  # a label named twice on a wanted line
@example(["a 1 1700000000000", "a NaN", "a +Inf"], frozenset({"a"}))
@example(['a{b="a\\nb"} 1'], frozenset({"a"}))  # an escape in a wanted line: the reference reads it
def test_the_fast_paths_parse_as_the_reference_does(body: list[str], wanted: frozenset[str] | None) -> None:
    text = "\n".join(body) + "\n"
    try:
        got: Exposition | str = parse(text, "text/plain; version=0.0.4", wanted)
    except ValueError:
        got = "error"
    picked = _picked(text, wanted) if wanted is not None else None
    if picked is not None:
        # Its answer is the reference's on the wanted names' lines alone.
        own = "".join(line + "\n" for line in body if _names_wanted(line, wanted))
        assert same(got, reference(own, wanted)), (text, got, reference(own, wanted))
    else:
        assert same(got, reference(text, wanted)), (text, got, reference(text, wanted))
    plain = _plain(text, wanted)
    if plain is not None:
        assert picked is None or same(picked, plain), "where the line scanner answers, the answer is unchanged"


def _names_wanted(line: str, wanted: frozenset[str] | None) -> bool:
    """Whether a line is a sample line of a wanted name (its name, then a label set or a blank)."""
    stripped = line.strip()
    return wanted is not None and any(
        stripped.startswith(w) and stripped[len(w):len(w) + 1] in ("{", " ") for w in wanted
    )


def test_plain_text_takes_the_fast_path_and_the_rest_does_not() -> None:
    assert _plain('# TYPE q gauge\nq{model="m"} 5\n', None) == {"q": [({"model": "m"}, 5.0, None)]}
    assert _plain('q{model="a\\"b"} 5\n', None) is None  # an escape: the reference parser reads it
    assert _plain('q 5 # {trace="1"} 1\n', None) is None  # an exemplar
    assert _plain("<html>oops</html>\n", None) is None  # garbage: the reference parser refuses it


REAL = [
    pytest.param(vllm_v1(), id="vllm-v1-whole"),
    pytest.param(vllm_v1(waiting=float("nan"), running=float("inf"), kv=0.0), id="vllm-v1-nan-inf"),
    pytest.param(test_pods.fill(test_pods.VLLM_V1, running=2, waiting=3, kv=0.5), id="vllm-v1-escapes"),
    pytest.param(test_pods.fill(test_pods.VLLM_OLD, waiting=3, kv=0.5), id="vllm-old"),
    pytest.param(test_pods.fill(test_pods.JETSTREAM, backlog=5, slots0=0.5, slots1=1.0), id="jetstream"),
    pytest.param(test_pods.fill(test_pods.TGI, queue=4), id="tgi"),
    pytest.param(test_pods.fill(test_pods.TGI, queue="4 1700000000123"), id="tgi-timestamp"),
    pytest.param(test_pods.fill(test_pods.TPU_HOST, used0="+Inf", used1="-1.5e3"), id="tpu-host"),
]
READ = [
    frozenset({"vllm:num_requests_waiting"}),
    frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}),
    frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting"}),
    frozenset({"vllm:time_to_first_token_seconds_bucket"}),
    frozenset({"vllm:prompt_tokens_total", "vllm:generation_tokens_total"}),
    frozenset({"vllm:request_success_total", "vllm:num_preemptions_total"}),
    frozenset({"jetstream_prefill_backlog_size"}),
    frozenset({"jetstream_slots_used_percentage", "jetstream_time_to_first_token_bucket"}),
    frozenset({"tgi_queue_size"}),
    frozenset({"tgi_request_queue_duration_bucket", "tgi_request_queue_duration_count"}),
    frozenset({"memory_used", "memory_total"}),
]


@pytest.mark.parametrize("text", REAL)
def test_real_expositions_parse_as_the_reference_does_and_plain_ones_take_the_picked_path(text: str) -> None:
    """The servers' own expositions, whole (the reference reads every line), for each signal's names: the
    same answer, with escapes (left to the reference), timestamps, NaN and +Inf values, histograms' buckets,
    counters written ``x_total`` under ``# TYPE x_total counter``; the plain ones are read by ``_picked``."""
    served = 0
    fast_seen: list[bool] = []
    for wanted in READ:
        expected = reference(text, wanted)
        assert isinstance(expected, dict)
        if not expected:
            continue
        served += 1
        assert same(parse(text, "text/plain; version=0.0.4; charset=utf-8", wanted), expected), wanted
        # Escapes (a backslash in a label value) are the reference's to read; every other wanted line here is
        # in ``_picked``'s grammar.
        plain = not any("\\" in line for line in text.splitlines() if _names_wanted(line, wanted))
        assert (_picked(text, wanted) is not None) == plain, wanted
        fast_seen.append(plain)
    assert served > 0
    assert any(fast_seen)


def test_the_picked_path_reads_past_longer_names_and_leaves_a_body_without_the_name_to_the_full_parse() -> None:
    """``x_total``, ``x_bucket`` lines are other names, not a reason to leave ``x`` to the slower parse; a body
    with no sample of any wanted name (an error page answered 200) goes to the full parse, which says it is
    unreadable rather than that the pod lacks the metric."""
    assert _picked("x_total 2\nx_created 1\nx 1\n", frozenset({"x"})) == {"x": [({}, 1.0, None)]}
    assert _picked("<html>oops</html>\n", frozenset({"a"})) is None
    with pytest.raises(ValueError, match="unparseable"):
        parse("<html>oops</html>\n", "text/plain", frozenset({"a"}))
