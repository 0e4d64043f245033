"""``replay.png``: drawn by a child process that imported matplotlib during the replay, the same file as drawn in
process, errors reported as the in-process drawing raises them, and every text inside the figure with the fixed
margins (no layout engine measures them at draw time)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from matplotlib.text import Text

from autoscaler.core.model import Reason, ReplicaStatus, ScaleDecision, SignalState, SignalValue, TargetKind, TargetRef
from autoscaler.replay import engine, plot

ROOT = Path(__file__).resolve().parents[2]
TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")


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


def drawn_tick_labels(axis: Any, limits: tuple[float, float]) -> list[Any]:
    """The tick labels an axis draws: visible, with text, at a tick inside the view limits."""
    lo, hi = sorted(limits)
    return [
        tick.label1 for tick in axis.get_major_ticks()
        if lo <= tick.get_loc() <= hi and tick.label1.get_visible() and tick.label1.get_text()
    ]


def test_every_text_is_inside_the_figure_and_each_name_left_of_its_ticks() -> None:
    """Long signal names, large values, a what-if title, hidden signals and shaded spans: nothing is cut off, no
    name runs into its panel's tick labels, and the legend is right of the panels (the margins are fixed, so a
    wrong measurement shows here)."""
    names = ["a_rather_long_signal_name_for_prefill_backlog_tokens", "kv", "s3", "s4", "s5"]
    fig = plot.figure(columns(names, scale=3.7e6, mode="whatif", unknown_every=400))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox
    texts = [t for t in fig.findobj(Text) if t.get_text().startswith("replay of a-policy")]  # the title
    assert len(texts) == 1
    panels = fig.axes
    assert len(panels) == plot.MAX_SIGNAL_PANELS + 1
    for ax in panels:
        label = ax.yaxis.label
        ticks = drawn_tick_labels(ax.yaxis, ax.get_ylim())
        assert ticks
        texts += [label, *ticks]
        right_of_name = label.get_window_extent(renderer).x1
        assert right_of_name <= min(t.get_window_extent(renderer).x0 for t in ticks), label.get_text()
        texts += drawn_tick_labels(ax.xaxis, ax.get_xlim())
    texts.append(panels[-1].xaxis.label)
    legend = panels[-1].get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "recorded", "desired (policy)", "ready (what-if)", "signal unknown (hold)"
    ]
    texts += legend.get_texts()
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert box.x0 <= extent.x0, text.get_text()
        assert extent.x1 <= box.x1, text.get_text()
        assert box.y0 <= extent.y0, text.get_text()
        assert extent.y1 <= box.y1, text.get_text()
    assert legend.get_window_extent(renderer).x0 >= panels[-1].get_window_extent(renderer).x1


_CHILD = """
import errno, json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.replay.test_plot import columns
from autoscaler.replay import plot

out = Path(sys.argv[2])
cols = columns(["backlog", "kv_cache"], unknown_every=500)
result = {}
with plot.Painter() as painter:
    result["forked"] = painter._pid is not None
    painter.draw(cols, out / "child.png")
    result["by_child"] = painter.by_child
plot.plot(cols, out / "here.png")
result["same"] = (out / "child.png").read_bytes() == (out / "here.png").read_bytes()

(out / "dir.png").mkdir()
with plot.Painter() as painter:
    try:
        painter.draw(cols, out / "dir.png")
        result["error"] = None
    except OSError as exc:
        result["error"] = [exc.errno, exc.strerror]

with plot.Painter() as painter:  # the child dies before it is sent anything: drawn here instead
    os.kill(painter._pid, 9)
    painter.draw(cols, out / "fallback.png")
    result["fallback_by_child"] = painter.by_child
result["fallback"] = (out / "fallback.png").read_bytes() == (out / "here.png").read_bytes()
print(json.dumps(result))
"""


def test_the_child_draws_the_same_file_and_reports_errors_as_drawing_here(tmp_path: Path) -> None:
    """In a fresh interpreter (one thread, so the painter forks; pytest's process may hold other threads)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT), str(tmp_path)], capture_output=True, text=True, timeout=100,
        check=False, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["forked"]
    assert result["by_child"]
    assert not result["fallback_by_child"]
    assert result["same"]
    assert result["error"] == [21, os.strerror(21)]  # EISDIR, as savefig raises it in process
    assert result["fallback"]


def test_without_a_child_the_painter_draws_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    cols = columns(["backlog"])
    with plot.Painter() as painter:
        assert painter._pid is None
        painter.draw(cols, tmp_path / "a.png")
    plot.plot(cols, tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


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
