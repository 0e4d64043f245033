"""Trace loading and reshaping: both formats, errors with line numbers, skipping, scaling, determinism."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_bundled_azure_trace_loads() -> None:
    tr = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    assert len(tr) == 19366
    assert tr.arrivals[0] == 0.0
    assert tr.duration_s == pytest.approx(3501.7, abs=0.1)
    assert all(b >= a for a, b in zip(tr.arrivals, tr.arrivals[1:], strict=False))


def test_a_gzip_trace_is_read_as_the_plain_one(tmp_path: Path) -> None:
    """Traces are often published compressed: read decompressed, within the trace limit (robust3)."""
    bundled = cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv")
    packed = tmp_path / "conv.csv.gz"
    packed.write_bytes(gzip.compress(bundled.read_bytes()))
    plain, unpacked = traces.load(bundled), traces.load(packed)
    assert (unpacked.arrivals, unpacked.inputs, unpacked.outputs) == (plain.arrivals, plain.inputs, plain.outputs)


def test_azure_fraction_of_100ns(tmp_path: Path) -> None:
    p = _write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.0000001,10,2")
    tr = traces.load(p)
    assert tr.arrivals[1] == pytest.approx(0.3194101, abs=1e-6)
    assert tr.inputs == [374, 10]
    assert tr.outputs == [44, 2]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,1\nx,1,1\n", 3, "neither a number", id="bad-number"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,1\n1,2\n", 3, "expected 3 columns", id="columns"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,-5,1\n", 2, "negative", id="negative-tokens"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,1\nnan,1,1\n", 3, "not a finite", id="nan"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-01 00:00:00.1,1,1\n", 2, "bad row",
                     id="azure-bad-date"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(traces.TraceError) as err:
        traces.load(p)
    assert f"{p}:{line}:" in str(err.value)
    assert fragment in str(err.value)
    assert "--skip-bad-rows" in str(err.value)


def test_skip_bad_rows_counts_them(tmp_path: Path) -> None:
    p = _write(tmp_path, "arrival_s,input_tokens,output_tokens\n0,1,1\nx,1,1\n2,3\n5,7,8\n")
    tr = traces.load(p, skip_bad_rows=True)
    assert tr.skipped_rows == 2
    assert tr.arrivals == [0.0, 5.0]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a,b,c\n1,2,3\n", id="unknown-header"),
        pytest.param("", id="empty"),
    ],
)
def test_unknown_header(tmp_path: Path, text: str) -> None:
    with pytest.raises(traces.TraceError, match="unknown header"):
        traces.load(_write(tmp_path, text))


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(traces.TraceError, match="no such file"):
        traces.load(tmp_path / "nope.csv")


def _generic(n: int, gap: float) -> traces.Trace:
    return traces.Trace("g", [i * gap for i in range(n)], [100] * n, [10] * n)


@pytest.mark.parametrize("scale", [pytest.param(2.0, id="x2"), pytest.param(0.5, id="half"),
                                   pytest.param(2.5, id="x2.5")])
def test_rate_scale_multiplies_requests_not_time(scale: float) -> None:
    tr = _generic(4000, 1.0)
    out = traces.reshape(tr, rate_scale=scale, seed=3)
    assert len(out) == pytest.approx(4000 * scale, rel=0.05)
    assert out.duration_s <= tr.duration_s + 1.0


def test_time_scale_compresses() -> None:
    out = traces.reshape(_generic(100, 2.0), time_scale=4.0)
    assert out.duration_s == pytest.approx(99 * 2.0 / 4.0)
    assert len(out) == 100


def test_duration_and_start_cut_a_window() -> None:
    out = traces.reshape(_generic(100, 1.0), start_s=10, duration_s=20)
    assert len(out) == 20
    assert out.arrivals[0] == 0.0


def test_reshape_is_deterministic_per_seed() -> None:
    tr = _generic(500, 1.0)
    a = traces.reshape(tr, rate_scale=1.7, seed=1)
    b = traces.reshape(tr, rate_scale=1.7, seed=1)
    c = traces.reshape(tr, rate_scale=1.7, seed=2)
    assert a.arrivals == b.arrivals
    assert a.arrivals != c.arrivals


def test_empty_window_is_an_error() -> None:
    with pytest.raises(traces.TraceError, match="no requests left"):
        traces.reshape(_generic(10, 1.0), start_s=100)


# --- other layouts: columns by name, in any order; date-times; another provider's names ----------------------

CANONICAL = "arrival_s,input_tokens,output_tokens\n0,374,44\n4.5,396,109\n"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("output_tokens,arrival_s,input_tokens\n44,0,374\n109,4.5,396\n", id="reordered"),
        pytest.param("id,arrival_s,model,input_tokens,output_tokens\na,0,m,374,44\nb,4.5,m,396,109\n", id="extra"),
        pytest.param("\ufeff" + CANONICAL, id="bom"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,374.0,44\n4.5,396,109.0\n", id="whole-floats"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,374,44\n"
                     "2024-05-10 00:00:04.500000+00:00,396,109\n", id="azure-with-an-offset"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10T02:00:00+02:00,374,44\n"
                     "2024-05-10T00:00:04.5Z,396,109\n", id="iso-t-zones"),
    ],
)
def test_a_layout_read_by_column_names(tmp_path: Path, text: str) -> None:
    tr = traces.load(_write(tmp_path, text))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 4.5], [374, 396], [44, 109])


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("arrival_s\tinput_tokens\toutput_tokens\n0\t374\t44\n4.5\t396\t109\n", id="tabs"),
        pytest.param("arrival_s;input_tokens;output_tokens\n0;374;44\n4.5;396;109\n", id="semicolons"),
        pytest.param("arrival_s,input_tokens,output_tokens\r\n0,374,44\r\n4.5,396,109", id="crlf-no-last-newline"),
    ],
)
def test_a_separator_other_than_a_comma_is_taken_from_the_header(tmp_path: Path, text: str) -> None:
    tr = traces.load(_write(tmp_path, text))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 4.5], [374, 396], [44, 109])


def test_a_column_read_twice_in_the_header_is_refused(tmp_path: Path) -> None:
    # Which of the two is meant cannot be told; the first was read silently.
    p = _write(tmp_path, "arrival_s,input_tokens,output_tokens,input_tokens\n0,5,3,9\n")
    with pytest.raises(traces.TraceError, match=r":1: column 'input_tokens' appears more than once in the header"):
        traces.load(p)


def test_a_token_count_that_is_no_number_says_so(tmp_path: Path) -> None:
    p = _write(tmp_path, "arrival_s,input_tokens,output_tokens\n0,0x10,3\n")
    with pytest.raises(traces.TraceError, match=r":2: bad row '0,0x10,3': input_tokens '0x10' is not a number of"):
        traces.load(p)


def test_a_token_count_beyond_any_context_is_refused(tmp_path: Path) -> None:
    # A fifth of the rows at 10^15 tokens made simulate run for ever (its lower bound's replica levels).
    p = _write(tmp_path, "arrival_s,input_tokens,output_tokens\n0,5,3\n1,1000000000000000,3\n")
    with pytest.raises(traces.TraceError, match=r":3: bad row .*input_tokens 1,000,000,000,000,000 is more tokens"):
        traces.load(p)
    assert traces.load(_write(tmp_path, "arrival_s,input_tokens,output_tokens\n0,100000000,3\n")).inputs == [10**8]


def test_burstgpt_is_read_by_its_column_names(tmp_path: Path) -> None:
    # BurstGPT's header as its README's "Schema" lists it (Timestamp in seconds from the first day's 0:00);
    # a failed request (Response tokens 0, kept in BurstGPT_1.csv) is a request with one output token.
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n")
    tr = traces.load(_write(tmp_path, text))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 40.0], [472, 1087], [18, 1])


def test_another_providers_layout_with_its_columns_named(tmp_path: Path) -> None:
    text = "t,prompt,completion\n5,472,18\n45,1087,38\n"
    p = _write(tmp_path, text)
    with pytest.raises(traces.TraceError, match="--requests-columns ARRIVAL,INPUT,OUTPUT"):
        traces.load(p)
    tr = traces.load(p, columns=traces.Columns.parse("t,prompt,completion"))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 40.0], [472, 1087], [18, 38])
    ms = _write(tmp_path, "t_ms,in,out\n1000,1,2\n2500,3,4\n")
    assert traces.load(ms, columns=traces.Columns.parse("t_ms,in,out", "ms")).arrivals == [0.0, 1.5]


#: The first lines of Mooncake's FAST25-release/traces/conversation_trace.jsonl (hash_ids shortened).
MOONCAKE = (
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3]}\n'
    '{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14, 15]}\n'
    '{"timestamp": 3000, "input_length": 13544, "output_length": 71, "hash_ids": [0, 219]}\n'
)


def test_mooncake_json_lines_are_read_in_milliseconds(tmp_path: Path) -> None:
    tr = traces.load(_write(tmp_path, MOONCAKE))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 0.0, 3.0], [6758, 7322, 13544], [500, 490, 71])
    # Blank lines, CRLF, a BOM and keys in another order are the same trace.
    other = "\ufeff" + MOONCAKE.replace('"timestamp": 3000, ', "").replace(
        '"output_length": 71,', '"output_length": 71, "timestamp": 3000,').replace("\n", "\r\n\r\n")
    again = traces.load(_write(tmp_path, other))
    assert (again.arrivals, again.inputs, again.outputs) == (tr.arrivals, tr.inputs, tr.outputs)


def test_json_lines_with_other_keys_named(tmp_path: Path) -> None:
    p = _write(tmp_path, '{"at": "2024-05-10T00:00:00Z", "in": 3, "out": 4.0}\n'
                         '{"at": 1715299201.5, "in": 5, "out": 6}\n')
    with pytest.raises(traces.TraceError, match=r":1: bad row .*no key 'timestamp'.*--requests-columns"):
        traces.load(p)
    tr = traces.load(p, columns=traces.Columns.parse("at,in,out"))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 1.5], [3, 5], [4, 6])


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        pytest.param('{"timestamp": 0, "timestamp": 5, "input_length": 1, "output_length": 2}',
                     "key 'timestamp' written twice", id="duplicate-key"),
        pytest.param('{"timestamp": true, "input_length": 1, "output_length": 2}',
                     "arrival true is neither a number nor a date-time", id="bool-arrival"),
        pytest.param('{"timestamp": 1, "input_length": true, "output_length": 2}',
                     "input_length true is not a number of tokens", id="bool-tokens"),
        pytest.param('{"timestamp": NaN, "input_length": 1, "output_length": 2}', "not a finite number", id="nan"),
        pytest.param('{"timestamp": 1e400, "input_length": 1, "output_length": 2}', "not a finite number",
                     id="overflow"),
        pytest.param('{"timestamp": 1, "input_length": null, "output_length": 2}', "null is not a number of tokens",
                     id="null"),
        pytest.param('{"timestamp": 1, "input_length": 1.5, "output_length": 2}', "not a whole number", id="half"),
        pytest.param('{"timestamp": 1, "input_length": -3, "output_length": 2}', "negative", id="negative"),
        pytest.param('[1, 2, 3]', "a JSON list, expected one object per line", id="not-an-object"),
        pytest.param('{"timestamp": 2, "input', "not JSON: Unterminated string", id="cut-short"),
        pytest.param('{"timestamp": 1, "input_length": 1e300, "output_length": 2}',
                     "input_length a 301-digit number is more tokens than any model takes", id="1e300-tokens"),
        pytest.param('{"timestamp": 1, "input_length": "", "output_length": 2}', "'' is not a number of tokens",
                     id="empty-string-tokens"),
        pytest.param('{"timestamp": "NaN", "input_length": 1, "output_length": 2}', "not a finite number",
                     id="nan-string"),
    ],
)
def test_a_bad_json_line_names_file_line_and_what(tmp_path: Path, line: str, fragment: str) -> None:
    p = _write(tmp_path, MOONCAKE + line + "\n")
    with pytest.raises(traces.TraceError) as err:
        traces.load(p)
    assert str(err.value).startswith(f"{p}:4: bad row "), err.value
    assert fragment in str(err.value)
    assert len(traces.load(p, skip_bad_rows=True)) == 3


def test_json_numbers_written_as_strings_are_the_same_numbers(tmp_path: Path) -> None:
    """A JSON Lines trace whose numbers are quoted (an export that wrote every cell as text) is read as the CSV
    cell with that text is: the arrival ``"3000"`` is 3000 ms, as 3000 is (an arrival may be a date-time string
    anyway, so a string arrival is no sign of a wrong file); tokens ``"6758"`` are 6758. A quoted text that is no
    number is refused at its line (``test_a_bad_json_line_names_file_line_and_what``)."""
    quoted = MOONCAKE.replace(": 3000,", ': "3000",').replace(": 6758,", ': "6758",')
    assert quoted != MOONCAKE
    a, b = traces.load(_write(tmp_path, MOONCAKE)), traces.load(_write(tmp_path, quoted))
    assert (a.arrivals, a.inputs, a.outputs) == (b.arrivals, b.inputs, b.outputs)


def test_a_json_array_is_refused_with_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(traces.TraceError, match=r":1: a JSON array; write the requests as JSON Lines"):
        traces.load(_write(tmp_path, "[" + MOONCAKE.replace("}\n", "},").rstrip(",") + "]"))


@pytest.mark.parametrize(
    ("text", "columns", "fragment"),
    [
        pytest.param("a,b,c\n0,1,1\n", "a,b,x", "no column 'x' in the header (a,b,c)", id="missing-column"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,374.5,1\n", None, "not a whole number", id="half-token"),
        pytest.param("arrival_s,input_tokens,output_tokens\nyesterday,1,1\n", None, "neither a number of seconds",
                     id="not-a-time"),
        pytest.param("arrival_s,input_tokens,output_tokens\n2024-05-10 25:00:00,1,1\n", None, "hour", id="bad-hour"),
        pytest.param("arrival_s,input_tokens,output_tokens,x\n0,1,1\n", None, "expected 4 columns as in the header",
                     id="short-row"),
    ],
)
def test_a_layout_that_cannot_be_read_names_file_line_and_what(
    tmp_path: Path, text: str, columns: str | None, fragment: str
) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(traces.TraceError) as err:
        traces.load(p, columns=traces.Columns.parse(columns) if columns else None)
    assert str(err.value).startswith(f"{p}:"), err.value
    assert fragment in str(err.value)


def test_columns_spec_is_three_names_and_a_known_unit() -> None:
    assert traces.Columns.parse('"a,b",c, d').names() == ("a,b", "c", "d")
    for bad in ("a,b", "a,b,c,d", "a,,c"):
        with pytest.raises(ValueError, match="three column names"):
            traces.Columns.parse(bad)
    with pytest.raises(ValueError, match="time unit"):
        traces.Columns.parse("a,b,c", "h")
