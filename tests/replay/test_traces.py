"""Trace readers: CSV and Prometheus query_range JSON, good input and bad input with one-line errors."""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.replay import traces
from autoscaler.replay.traces import RawSignal, Series, TraceError

DATA = Path(__file__).parent / "data"


def _matrix(*series: list[list[Any]], labels: list[dict[str, str]] | None = None) -> dict[str, Any]:
    result = [{"metric": (labels or [{}] * len(series))[i], "values": s} for i, s in enumerate(series)]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _write(path: Path, content: str | dict[str, Any]) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


# ---------------------------------------------------------------- good input


def test_csv_unix_seconds_gaps_and_prometheus_spellings(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.csv",
        "timestamp,backlog,kv,replicas\n100,1,0.5,2\n115,,NaN,2\n130,+Inf,0.25,\n\n145,3,-1,3\n",
    )
    trace = traces.load([path])
    backlog = trace.signals["backlog"].series[0]
    assert list(backlog.times) == [100.0, 130.0, 145.0]  # the empty cell is a gap, not a zero
    assert backlog.values[0] == 1.0
    assert math.isinf(backlog.values[1])
    kv = trace.signals["kv"].series[0]
    assert math.isnan(kv.values[1])
    assert kv.values[3] == -1.0  # kept: the core judges negative values unknown
    assert trace.replicas is not None
    assert list(trace.replicas.times) == [100.0, 115.0, 145.0]
    assert list(trace.replicas.values) == [2.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2023-11-16T18:15:46Z", 1700158546.0, id="rfc3339-z"),
        pytest.param("2023-11-16T19:15:46+01:00", 1700158546.0, id="rfc3339-offset"),
        pytest.param("2023-11-16T18:15:46.5Z", 1700158546.5, id="rfc3339-fraction"),
        pytest.param("1700158546.25", 1700158546.25, id="unix-float"),
        pytest.param(" 1700158546 ", 1700158546.0, id="unix-int-spaces"),
    ],
)
def test_timestamps(text: str, expected: float) -> None:
    assert traces.parse_timestamp(text) == expected


def test_csv_header_is_case_insensitive_for_timestamp_and_a_bom_is_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", "\ufeffTIMESTAMP,backlog\n2023-11-16T18:15:46Z,4\n")
    trace = traces.load([path])
    assert list(trace.signals["backlog"].series[0].times) == [1700158546.0]
    assert trace.replicas is None


def test_query_range_directory_fixture() -> None:
    trace = traces.load([DATA / "prom_dump"])
    assert set(trace.signals) == {"backlog"}
    backlog = trace.signals["backlog"]
    assert len(backlog.series) == 2
    assert dict(backlog.series[1].labels)["pod"] == "jetstream-llama-1"
    assert trace.replicas is not None
    assert trace.replicas.values[0] == 1.0
    assert trace.replicas.values[-1] == 2.0


def test_query_range_single_files_and_csv_together(tmp_path: Path) -> None:
    kv = _write(tmp_path / "kv.json", _matrix([[10, "0.5"], [25, "0.75"]]))
    csv_path = _write(tmp_path / "t.csv", "timestamp,backlog,replicas\n10,3,1\n")
    trace = traces.load([kv, csv_path])
    assert set(trace.signals) == {"backlog", "kv"}
    assert list(trace.signals["kv"].series[0].values) == [0.5, 0.75]
    assert trace.replicas is not None


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        pytest.param("sum", [1.0, 5.0, 4.0], id="sum-of-series-present"),
        pytest.param("avg", [1.0, 2.5, 4.0], id="avg"),
        pytest.param("max", [1.0, 3.0, 4.0], id="max"),
    ],
)
def test_combine_several_series(how: str, expected: list[float]) -> None:
    raw = RawSignal("x", "f", (Series([0.0, 15.0], [1.0, 2.0]), Series([15.0, 30.0], [3.0, 4.0])))
    combined = traces.combine(raw, how)
    assert list(combined.times) == [0.0, 15.0, 30.0]
    assert list(combined.values) == expected


def test_combine_nan_in_one_series_makes_the_total_nan() -> None:
    raw = RawSignal("x", "f", (Series([0.0], [1.0]), Series([0.0], [math.nan])))
    assert math.isnan(traces.combine(raw, "sum").values[0])


# ---------------------------------------------------------------- bad input: one line, file and place


def _bad_csv(text: str) -> tuple[str, str | dict[str, Any]]:
    return "trace.csv", text


def _bad_json(doc: str | dict[str, Any], name: str = "backlog.json") -> tuple[str, str | dict[str, Any]]:
    return name, doc


BAD = [
    pytest.param(_bad_csv(""), "trace.csv: empty file", id="csv-empty"),
    pytest.param(_bad_csv("timestamp,backlog\n"), "trace.csv: no data rows", id="csv-header-only"),
    pytest.param(_bad_csv("time,backlog\n1,2\n"), "trace.csv:1: no 'timestamp' column", id="csv-no-timestamp"),
    pytest.param(_bad_csv("timestamp\n1\n"), "trace.csv:1: no signal columns", id="csv-no-signals"),
    pytest.param(_bad_csv("timestamp,a,a\n1,2,3\n"), "trace.csv:1: repeated column(s) a", id="csv-dup-column"),
    pytest.param(_bad_csv("timestamp\tb\n1\t2\n"), "trace.csv:1: the columns are separated by tabs; replay reads "
                 "comma-separated values", id="csv-tabs"),
    pytest.param(_bad_csv("timestamp;b\n1;2,5\n"), "trace.csv:1: the columns are separated by semicolons",
                 id="csv-semicolons"),
    pytest.param(_bad_csv("timestamp,queue depth\n1,2\n"), "trace.csv:1: column 'queue depth'", id="csv-bad-name"),
    pytest.param(_bad_csv("timestamp,b\n1,2\nyesterday,3\n"), "trace.csv:3: timestamp 'yesterday'", id="csv-bad-time"),
    pytest.param(
        _bad_csv("timestamp,b\n2023-11-16 18:15:46,3\n"), "trace.csv:2: timestamp", id="csv-time-without-zone"
    ),
    pytest.param(
        _bad_csv("timestamp,b\n1700158546000,1\n"),
        "trace.csv:2: timestamp '1700158546000' looks like milli",
        id="csv-ms",
    ),
    pytest.param(_bad_csv("timestamp,b\n10,1\n10,2\n"), "trace.csv:3: timestamp '10' is not after", id="csv-repeat"),
    pytest.param(_bad_csv("timestamp,b\n10,1\n20,lots\n"), "trace.csv:3: column 'b': 'lots'", id="csv-bad-number"),
    pytest.param(_bad_csv("timestamp,b\n10,1,2\n"), "trace.csv:2: 3 fields, the header has 2", id="csv-extra-field"),
    pytest.param(
        _bad_csv("timestamp,b,replicas\n10,1,2.5\n"), "trace.csv:2: column 'replicas': '2.5'", id="csv-replicas"
    ),
    pytest.param(
        _bad_json('{"status": "success",\n  "data": [}'), "backlog.json:2:12: not valid JSON", id="json-syntax"
    ),
    pytest.param(_bad_json([]), "backlog.json: $: expected the query_range", id="json-not-object"),  # type: ignore[arg-type]
    pytest.param(
        _bad_json({"status": "error", "errorType": "bad_data", "error": "parse error"}),
        "backlog.json: $.status: is 'error', not 'success': bad_data parse error",
        id="json-error-status",
    ),
    pytest.param(
        _bad_json({"status": "success", "data": {"resultType": "vector", "result": []}}),
        "$.data.resultType: is 'vector', expected 'matrix' (an instant query",
        id="json-vector",
    ),
    pytest.param(_bad_json(_matrix()), "backlog.json: $.data.result: no series", id="json-empty-result"),
    pytest.param(
        _bad_json(_matrix([[10, "1"], [25, 2]])),
        "backlog.json: $.data.result[0].values[1][1]: expected the value as a string, got a number",
        id="json-value-not-string",
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1"]], [[10, "x"]])),
        "backlog.json: $.data.result[1].values[0][1]: 'x' is not a number",
        id="json-value-not-number",
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1"], [10, "2"]])),
        "backlog.json: $.data.result[0].values[1][0]: time 10 is not after",
        id="json-time-repeat",
    ),
    pytest.param(
        _bad_json(_matrix([[1700158546000, "1"]])),
        "backlog.json: $.data.result[0].values[0][0]: time 1700158546000 looks like milliseconds",
        id="json-ms",
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1", "x"]])), "backlog.json: $.data.result[0].values[0]: expected [time", id="json-pair"
    ),
    pytest.param(
        _bad_json(
            _matrix([[10, "1"]], [[10, "2"]], labels=[{"deployment": "a"}, {"deployment": "b"}]), "replicas.json"
        ),
        "replicas.json: $.data.result: 2 series ({deployment=a}, {deployment=b}...) for the replica count",
        id="json-replicas-ambiguous",
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1.5"]]), "replicas.json"),
        "replicas.json: $.data.result[0].values[0][1]: 1.5 is not a replica count",
        id="json-replicas-fraction",
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1"]]), "queue-depth.json"), "queue-depth.json: the file name", id="json-name"
    ),
    pytest.param(
        _bad_json(_matrix([[10, "1"]], [[10, "7"]], labels=[{"pod": "a"}, {"pod": "a"}])),
        "backlog.json: $.data.result[1]: the series {pod=a} appears twice", id="json-series-twice",
    ),
]


@pytest.mark.parametrize(("file", "message"), BAD)
def test_bad_input(tmp_path: Path, file: tuple[str, str | dict[str, Any]], message: str) -> None:
    name, content = file
    path = _write(tmp_path / name, content)
    with pytest.raises(TraceError) as err:
        traces.load([path])
    text = str(err.value)
    assert "\n" not in text
    assert str(tmp_path) in text  # the file is named in full
    assert message in text


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file or directory"):
        traces.load([tmp_path / "nope.csv"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"empty: no \.json files"):
        traces.load([tmp_path / "empty"])


def test_same_signal_twice_is_an_error(tmp_path: Path) -> None:
    a = _write(tmp_path / "backlog.json", _matrix([[10, "1"]]))
    b = _write(tmp_path / "t.csv", "timestamp,backlog\n10,1\n")
    with pytest.raises(TraceError, match=r"t\.csv:backlog: signal 'backlog' is already read from .*backlog\.json"):
        traces.load([a, b])


def test_recorded_replicas_twice_is_an_error(tmp_path: Path) -> None:
    a = _write(tmp_path / "replicas.json", _matrix([[10, "1"]]))
    b = _write(tmp_path / "t.csv", "timestamp,backlog,replicas\n10,1,1\n")
    with pytest.raises(TraceError, match="recorded replicas are already read"):
        traces.load([a, b])


# ---------------------------------------------------------------- query_range dumps read as columns


def _same(a: list[Series], b: list[Series]) -> bool:
    """Equal series, NaN equal to NaN (compared by their bytes)."""
    return len(a) == len(b) and all(
        x.labels == y.labels and bytes(memoryview(array("d", x.times))) == bytes(memoryview(array("d", y.times)))
        and bytes(memoryview(array("d", x.values))) == bytes(memoryview(array("d", y.values)))
        for x, y in zip(a, b, strict=True)
    )


SAMPLE_TIME = st.one_of(
    st.integers(0, 2_000_000_000), st.floats(-1e12, 1e12), st.sampled_from([0, 1e11, -0.0, 1700000000.5])
)
SAMPLE_VALUE = st.one_of(
    st.floats().map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e3", " 2 ", "x", "1,5", "]", "1_0", "", "０"]),
    st.integers(-5, 5),  # not a string: an error of the full parse
)
LABEL = st.one_of(st.text(max_size=8), st.sampled_from(['"values":[[1,"2"]]', "\\", '\x00values 0', "],"]))


@settings(max_examples=300, deadline=None)
@given(
    series=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["pod", "namespace", "__name__"]), LABEL, max_size=2),
            st.lists(st.tuples(SAMPLE_TIME, SAMPLE_VALUE), max_size=8).map(lambda pairs: sorted(pairs, key=str)),
        ),
        max_size=3,
    ),
    indent=st.sampled_from([None, 1, 2]),
    sort=st.booleans(),
)
def test_the_columnar_read_of_a_dump_is_the_full_parse_or_declines(
    series: list[tuple[dict[str, str], list[tuple[Any, Any]]]], indent: int | None, sort: bool
) -> None:
    """On any dump, valid or not, oddly formatted or with labels that look like values: the columnar reader
    returns exactly what the full parse returns, or None (and the full parse then gives the answer or the error)."""
    doc = _matrix(*[[list(p) for p in pairs] for _, pairs in series], labels=[labels for labels, _ in series])
    text = json.dumps(doc, indent=indent, sort_keys=sort)
    fast = traces._columnar(text)
    if fast is None:
        return
    assert _same(fast, traces._parsed(text, "t.json"))


def test_a_dump_as_prometheus_writes_it_is_read_as_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump `curl .../api/v1/query_range` saves (compact, times as numbers, values as strings, NaN/Inf spelled
    as Prometheus does) takes the columnar path, and reads as the full parse reads it."""
    values = [[1700000000 + 15 * i + (0.5 if i % 3 else 0), v] for i, v in enumerate(["1", "NaN", "+Inf", "-1.5e-3"])]
    text = json.dumps(_matrix(values, values[:2], labels=[{"pod": "a"}, {"pod": "b"}]), separators=(",", ":"))
    fast = traces._columnar(text)
    assert fast is not None
    assert _same(fast, traces._parsed(text, "t.json"))
    assert list(fast[1].times) == [1700000000.0, 1700000015.5]
    path = _write(tmp_path / "b.json", text)
    monkeypatch.setattr(traces, "_parsed", lambda *_: pytest.fail("the whole document was parsed"))
    assert _same(traces.read_query_range(path), fast)
