"""The CSV reader's plain chunks (``traces._plain_rows``) read what the row-by-row path reads, or leave it to it.

Random CSV traces (gaps, quotes, CRLF, blank lines, RFC 3339 times, NaN and infinities, bad numbers, bad replica
counts, times out of order, rows with a field too many or too few, a missing final newline), read with small
chunks (so that the switch to the row-by-row path falls mid-file) and read row by row only: the same series, or
the same one-line error with the same row number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.replay import traces

plain_cells = st.one_of(st.sampled_from(["1", "0.5", "2.675", "NaN", "+Inf", "-Inf", "-1", " 3 ", "1e-7", "1_0"]),
                        st.floats(0, 100).map(repr))
odd_cells = st.sampled_from(["", "x", '"4"', "  "])


DEFECTS = ["time-repeat", "time-back", "time-fraction", "time-rfc3339", "time-empty", "time-ms", "time-nan",
           "cell", "replicas", "field-more", "field-less", "fields-both", "blank"]


@st.composite
def csv_text(draw: st.DrawFn) -> str:
    """Plain rows, with at most two defects (one in most files), so that plain chunks come before and after."""
    width = draw(st.integers(1, 3))
    header = ["timestamp"] + [f"s{i}" for i in range(width)] + (["replicas"] if draw(st.booleans()) else [])
    lines = [",".join(header)]
    rows = draw(st.integers(0, 60))
    where = st.integers(0, max(rows - 1, 0))
    defects = {draw(where): draw(st.sampled_from(DEFECTS)) for _ in range(draw(st.integers(0, 2)))}
    t = 1_764_460_800
    for r in range(rows):
        defect = defects.get(r)
        t += {"time-repeat": 0, "time-back": -7}.get(defect or "", 15)
        stamp = {"time-fraction": f"{t}.5", "time-rfc3339": "2025-11-30T00:00:00Z", "time-empty": "",
                 "time-ms": "1e12", "time-nan": "NaN"}.get(defect or "", str(t))
        row = [stamp] + [draw(plain_cells) for _ in range(width)]
        if defect == "cell":
            row[-1] = draw(odd_cells)
        if "replicas" in header:
            row.append(draw(st.sampled_from(["-1", "2.5", "", "NaN"])) if defect == "replicas" else "3")
        if defect in ("field-more", "fields-both"):
            row.append("9")
        if defect == "field-less":
            row.pop()
        if defect == "fields-both" and r > 0:
            lines[-1] = lines[-1].rsplit(",", 1)[0]  # one field too few in the row before, one too many here
        lines.append(",".join(row))
        if defect == "blank":
            lines.append("")
    end = draw(st.sampled_from(["\n", "\n", "\n", "\r\n"]))
    return end.join(lines) + (end if draw(st.integers(0, 5)) else "")


def _read(path: Path) -> Any:
    try:
        trace = traces.read_csv(path)
    except traces.TraceError as exc:
        return str(exc)
    series = {name: [(list(s.times), list(s.values)) for s in raw.series] for name, raw in trace.signals.items()}
    replicas = (list(trace.replicas.times), list(trace.replicas.values)) if trace.replicas is not None else None
    return repr(series), repr(replicas)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=csv_text(), chunk=st.sampled_from([1, 40, 200, 1 << 20]))
def test_plain_chunks_read_what_rows_read(
    text: str, chunk: int, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path_factory.mktemp("csv") / "trace.csv"
    path.write_bytes(text.encode())
    with monkeypatch.context() as m:
        m.setattr(traces, "CSV_CHUNK_BYTES", chunk)
        chunked = _read(path)
    with monkeypatch.context() as m:
        m.setattr(traces, "_plain_rows", lambda *args: None)
        rows = _read(path)
    assert chunked == rows


def test_a_plain_file_is_read_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench week is read by plain chunks only (the row-by-row path never runs)."""
    from bench.replay_speed import write_week  # noqa: PLC0415

    path = tmp_path / "week.csv"
    write_week(path)
    seen: list[bool] = []
    real = traces._plain_rows

    def spy(*args: Any) -> Any:
        table = real(*args)
        seen.append(table is not None)
        return table

    monkeypatch.setattr(traces, "_plain_rows", spy)
    trace = traces.read_csv(path)
    assert seen
    assert all(seen)
    assert len(trace.signals["backlog"].series[0].times) == 40_320


ONE_DEFECT = {
    "time-repeat": "1764460830,0.5,3",
    "time-back": "1764460820,0.5,3",
    "time-fraction": "1764460845.5,0.5,3",
    "time-rfc3339": "2025-11-30T00:00:45Z,0.5,3",
    "time-ms": "1764460845000,0.5,3",
    "time-nan": "NaN,0.5,3",
    "gap": "1764460845,,3",
    "not-a-number": "1764460845,x,3",
    "quoted": '1764460845,"0.5",3',
    "replicas-fraction": "1764460845,0.5,2.5",
    "replicas-negative": "1764460845,0.5,-1",
    "replicas-nan": "1764460845,0.5,NaN",
    "field-more": "1764460845,0.5,3,9",
    "field-less": "1764460845,0.5",
    "blank": "",
}


@pytest.mark.parametrize("defect", list(ONE_DEFECT), ids=list(ONE_DEFECT))
@pytest.mark.parametrize("chunk", [1, 30, 1 << 20])
def test_each_defect_reads_as_row_by_row(defect: str, chunk: int, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain rows, one defect among them (and the pair "a field too few, then one too many"), chunked or not."""
    before = ["timestamp,s0,replicas", "1764460815,0.5,3", "1764460830,0.5,3"]
    after = [f"{1764460860 + 15 * i},0.5,3" for i in range(4)]
    texts = ["\n".join([*before, ONE_DEFECT[defect], *after]) + "\n"]
    if defect == "field-more":
        texts.append("\n".join([*before[:-1], "1764460830,0.5", ONE_DEFECT[defect], *after]) + "\n")
    for text in texts:
        path = tmp_path / "trace.csv"
        path.write_text(text)
        with monkeypatch.context() as m:
            m.setattr(traces, "CSV_CHUNK_BYTES", chunk)
            chunked = _read(path)
        with monkeypatch.context() as m:
            m.setattr(traces, "_plain_rows", lambda *args: None)
            rows = _read(path)
        assert chunked == rows
