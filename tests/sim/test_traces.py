"""Trace loading and reshaping: both formats, errors with line numbers, skipping, scaling, determinism."""

from __future__ import annotations

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


def test_another_providers_layout_with_its_columns_named(tmp_path: Path) -> None:
    # BurstGPT's header (seconds from the trace's start): named with --requests-columns.
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,38,1125,Conversation log\n")
    p = _write(tmp_path, text)
    with pytest.raises(traces.TraceError, match="--requests-columns ARRIVAL,INPUT,OUTPUT"):
        traces.load(p)
    tr = traces.load(p, columns=traces.Columns.parse("Timestamp,Request tokens,Response tokens"))
    assert (tr.arrivals, tr.inputs, tr.outputs) == ([0.0, 40.0], [472, 1087], [18, 38])
    ms = _write(tmp_path, "t_ms,in,out\n1000,1,2\n2500,3,4\n")
    assert traces.load(ms, columns=traces.Columns.parse("t_ms,in,out", "ms")).arrivals == [0.0, 1.5]


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
