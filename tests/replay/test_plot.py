"""``replay.svg``: written as SVG text (no plotting library), it parses, holds one panel per shown signal and the
replica panel with their axes, series and legend, and its lines keep every pixel column's lowest and highest value
(the decimation's whole point: a spike stays visible however long the trace)."""

from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from autoscaler.core.model import Reason, ReplicaStatus, ScaleDecision, SignalState, SignalValue, TargetKind, TargetRef
from autoscaler.replay import engine, plot

ROOT = Path(__file__).resolve().parents[2]
TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")
SVG = "{http://www.w3.org/2000/svg}"


def columns(names: list[str], *, scale: float = 1.0, mode: str = "recorded", evaluations: int = 3_000,
            unknown_every: int = 0) -> plot.Columns:
    """The plot's columns of a synthetic replay: a daily cycle on every signal, some evaluations unknown."""
    steps = []
    for k in range(evaluations):
        value = scale * (1.0 + math.sin(k / 200.0))
        known = not (unknown_every and k % unknown_every < 3)
        signals = {
            name: SignalValue(name, SignalState.OK, value * (j + 1), "") if known
            else SignalValue(name, SignalState.UNKNOWN, None, "stale")
            for j, name in enumerate(names)
        }
        desired = 2 + round(3 * value / scale)
        decision = ScaleDecision(TARGET, 3, desired, Reason.STEADY, "", signals)
        steps.append(engine.Step(k * 15.0, ReplicaStatus(3, 3), 3, decision, {}))
    replay = engine.Replay("a-policy", TARGET.key, mode, 15.0, steps)  # type: ignore[arg-type]
    return plot.columns_of(replay)


def parsed(columns: plot.Columns) -> ET.Element:
    return ET.fromstring(plot.svg(columns))


def number(text: str | None) -> float:
    assert text is not None
    return float(text)


def test_the_svg_parses_with_panels_axes_series_and_legend(tmp_path: Path) -> None:
    """Long signal names, large values, a what-if title, hidden signals and shaded spans."""
    names = ["a_rather_long_signal_name_for_prefill_backlog_tokens", "kv", "s3", "s4", "s5"]
    cols = columns(names, scale=3.7e6, mode="whatif", unknown_every=400)
    plot.plot(cols, tmp_path / plot.FILE_NAME)
    root = ET.parse(tmp_path / plot.FILE_NAME).getroot()
    assert root.tag == f"{SVG}svg"
    width, height = number(root.get("width")), number(root.get("height"))
    title = root.find(f"{SVG}title")
    assert title is not None
    assert title.text is not None
    assert "mode whatif" in title.text
    assert "not shown: s5" in title.text
    panels = root.findall(f"{SVG}g[@class='panel']")
    assert [p.get("data-name") for p in panels] == [*names[: plot.MAX_SIGNAL_PANELS], "replicas"]
    for index, panel in enumerate(panels):
        series = [p.get("data-series") for p in panel.findall(f"{SVG}path[@class='series']")]
        if index < plot.MAX_SIGNAL_PANELS:
            assert series == [f"signal:{names[index]}"]
        else:
            assert series == ["recorded", "desired", "ready"]
        ticks = panel.find(f"{SVG}g[@class='y-ticks']")
        assert ticks is not None
        labels = [t.text for t in ticks.findall(f"{SVG}text")]
        assert len(labels) >= 3, labels
        assert len(set(labels)) == len(labels), labels
        assert panel.findall(f"{SVG}rect[@class='unknown']")  # the shaded unknown spans
        assert (panel.find(f"{SVG}g[@class='x-ticks']") is not None) == (index == len(panels) - 1)
    legend = root.find(f"{SVG}g[@class='legend']")
    assert legend is not None
    assert [t.text for t in legend.iter(f"{SVG}text")] == [
        "recorded", "desired (policy)", "ready (what-if)", "signal unknown (hold)"
    ]
    x_label = root.find(f"{SVG}text[@class='x-label']")
    assert x_label is not None
    assert x_label.text is not None
    assert x_label.text.startswith("hours since ")
    # Every text's anchor, and every element's coordinates, inside the picture.
    for element in root.iter():
        for name in ("x", "x1", "x2"):
            if element.get(name) is not None and not element.get(name, "").endswith("%"):
                assert 0.0 <= number(element.get(name)) <= width, (element.tag, element.attrib)
        for name in ("y", "y1", "y2"):
            if element.get(name) is not None and not element.get(name, "").endswith("%"):
                assert 0.0 <= number(element.get(name)) <= height, (element.tag, element.attrib)
    # Right-aligned tick labels end left of the panels, left-aligned legend text starts right of them.
    frame = panels[0].find(f"{SVG}rect[@class='frame']")
    assert frame is not None
    left, right = number(frame.get("x")), number(frame.get("x")) + number(frame.get("width"))
    for panel in panels:
        ticks = panel.find(f"{SVG}g[@class='y-ticks']")
        assert ticks is not None
        assert all(number(t.get("x")) < left for t in ticks.findall(f"{SVG}text"))
    assert all(number(t.get("x")) > right for t in legend.iter(f"{SVG}text"))
    # The widest label fits left of its anchor at the estimated width of a character.
    widest = max(len(t.text or "") for p in panels for t in p.iter(f"{SVG}text") if t.get("font-size"))
    assert widest * plot._EM_W * plot._SMALL <= left


_COMMAND = re.compile(r"([MLHVh])([-\d.]+)(?: ([-\d.]+))?")


def subpaths(d: str) -> list[list[tuple[float, float]]]:
    """The vertices of an SVG path as ``plot._path`` writes it (M, L with x y; H x; V y; h dx), per subpath."""
    paths: list[list[tuple[float, float]]] = []
    x = y = math.nan
    for op, a, b in _COMMAND.findall(d):
        if op in "ML":
            x, y = float(a), float(b)
        elif op == "H":
            x = float(a)
        elif op == "V":
            y = float(a)
        else:
            x += float(a)
        if op == "M":
            paths.append([])
        paths[-1].append((x, y))
    return paths


def drawn(root: ET.Element, series: str) -> list[list[tuple[float, float]]]:
    path = next((p for p in root.iter(f"{SVG}path") if p.get("data-series") == series), None)
    return [] if path is None else subpaths(path.get("d", ""))


def heights_between(paths: list[list[tuple[float, float]]], x0: float, x1: float) -> set[float]:
    """The y of every vertex within [x0, x1] and of every horizontal segment crossing it."""
    ys = set()
    for points in paths:
        ys |= {y for x, y in points if x0 <= x <= x1}
        for (xa, ya), (xb, yb) in itertools.pairwise(points):
            if ya == yb and xa <= x1 and xb >= x0:
                ys.add(ya)
    return ys


def replay_of(values: list[float], desired: list[int]) -> engine.Replay:
    steps = []
    for k, (value, count) in enumerate(zip(values, desired, strict=True)):
        signal = (SignalValue("s", SignalState.OK, value, "") if not math.isnan(value)
                  else SignalValue("s", SignalState.UNKNOWN, None, "stale"))
        decision = ScaleDecision(TARGET, 3, count, Reason.STEADY, "", {"s": signal})
        steps.append(engine.Step(k * 15.0, ReplicaStatus(3, 3), 3, decision, {}))
    return engine.Replay("p", TARGET.key, "recorded", 15.0, steps)


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(st.one_of(st.floats(-1e9, 1e9), st.just(math.nan)), st.integers(0, 40)),
                  min_size=1, max_size=300),
    pixels=st.integers(1, 40),
)
@example(data=[(1.0, 3), (5.0, 9), (2.0, 4), (0.5, 1)], pixels=1)  # one column: its spike and its dip
@example(data=[(2.0, 3), (math.nan, 3), (7.0, 5), (1.0, 2), (math.nan, 4), (3.0, 1)], pixels=2)
def test_the_drawn_lines_keep_every_pixel_columns_extremes(data: list[tuple[float, int]], pixels: int) -> None:
    """However many evaluations share a pixel column, the drawn vertices of the signal's line and of the desired
    count's step line within that column reach its lowest and its highest value (as y coordinates of the picture,
    by the panel's own value → y mapping), and none leaves the panel's frame."""
    values = [v for v, _ in data]
    desired = [float(c) for _, c in data]
    replay = replay_of(values, [c for _, c in data])
    cols = plot.Columns(replay, evaluations=len(data), start=0.0, pixels=pixels)
    for step in replay.steps:
        cols.add(step)
    cols.finish()
    root = parsed(cols)
    elements = root.findall(f"{SVG}g[@class='panel']")
    mappings, _ = plot._panels(cols)
    n = len(data)
    per = cols.per_column
    for element, mapping, series, raw in ((elements[0], mappings[0], "signal:s", values),
                                          (elements[1], mappings[1], "desired", desired)):
        frame = element.find(f"{SVG}rect[@class='frame']")
        assert frame is not None
        left, mapping.top, mapping.height = number(frame.get("x")), number(frame.get("y")), number(frame.get("height"))
        paths = drawn(root, series)
        if all(math.isnan(v) for v in raw):
            assert paths == []
            continue
        low, high = mapping.top - 0.05, mapping.top + mapping.height + 0.05
        assert all(low <= y <= high for points in paths for _, y in points), series
        for base in range(0, n, per):
            column = [v for v in raw[base:base + per] if not math.isnan(v)]
            if not column:
                continue
            x0, x1 = (round(left + plot.PIXELS * k / n, 1) for k in (base, min(base + per, n) - 1))
            ys = heights_between(paths, x0 - 0.2, x1 + 0.2)
            for value in (min(column), max(column)):
                assert round(mapping.y(value), 1) in ys, (series, base, value, sorted(ys))


def test_matplotlib_is_not_imported_to_plot(tmp_path: Path) -> None:
    """The whole command with its plot, in a fresh interpreter: no plotting library is imported, nor the standard
    library's HTTP client (``xml.sax.saxutils`` would bring ``urllib.request`` and ``http.client``)."""
    code = (
        "import sys; from autoscaler import cli; "
        f"code = cli.main(['replay', '--example', '-q', '--out', {str(tmp_path)!r}]); "
        "print(code, 'matplotlib' in sys.modules, 'http.client' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["0", "False", "False"], done.stderr
    assert ET.parse(tmp_path / plot.FILE_NAME).getroot().tag == f"{SVG}svg"


def reference_m4(base: int, values: list[float]) -> tuple[list[int], list[float]]:
    """The points a pixel column keeps, as first written: (value, index) pairs, their min and max, the first NaN."""
    if len(values) == 1:
        return [base], [values[0]]
    keep = {0, len(values) - 1}
    finite = [(v, i) for i, v in enumerate(values) if not math.isnan(v)]
    if finite:
        keep.add(min(finite)[1])
        keep.add(max(finite)[1])
    if len(finite) < len(values):
        keep.add(next(i for i, v in enumerate(values) if math.isnan(v)))
    return [base + i for i in sorted(keep)], [values[i] for i in sorted(keep)]


@settings(max_examples=500, deadline=None)
@given(values=st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, 2.0, math.nan, 3]), st.floats(allow_nan=True)),
                       min_size=1, max_size=40))
@example(values=[1.0, 2.0, 2.0, 1.0])  # ties: the first lowest, the last highest
@example(values=[0.0, -0.0, math.nan, -0.0])
def test_a_column_keeps_the_points_the_reference_keeps(values: list[float]) -> None:
    line = plot.Line()
    plot._m4(line, 7, values)
    at, kept = reference_m4(7, values)
    assert line.at == at
    assert [repr(v) for v in line.values] == [repr(v) for v in kept]
