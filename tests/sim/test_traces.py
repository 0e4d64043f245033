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
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,1\nx,1,1\n", 3, "could not convert", id="bad-number"),
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
