"""The simulation timeline people read: a series identical to another is still visible (dashed, shifted, and
the legend says so), legends sit outside the data, replica and chip axes are whole numbers from zero."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from autoscaler.sim import plot

STYLE: dict[str, Any] = {"color": "C0", "lw": 1.3}


def _ys(line: Any) -> list[float]:
    return [float(v) for v in line.get_ydata()]


def test_an_identical_series_is_shifted_dashed_and_labelled() -> None:
    fig, ax = plt.subplots()
    xs, ys = [0.0, 1.0, 2.0], [4.0, 5.0, 4.0]
    plot._draw(ax, [("a", STYLE, xs, ys), ("b", STYLE, xs, [3.0, 3.0, 3.0]), ("c", STYLE, xs, ys)], step=True)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"a", "b", "c (= a; drawn +0.03)"}
    shifted = lines["c (= a; drawn +0.03)"]
    assert _ys(shifted) != _ys(lines["a"])  # not hidden under "a"
    assert shifted.get_linestyle() == "--"
    assert lines["b"].get_linestyle() == "-"
    plt.close(fig)


def test_an_identical_series_on_a_log_axis_is_scaled() -> None:
    fig, ax = plt.subplots()
    xs, ys = [0.0, 1.0], [1.0, 2.0]
    plot._draw(ax, [("a", STYLE, xs, ys), ("b", STYLE, xs, ys)], step=False, log=True)
    (_, b) = ax.get_lines()
    assert b.get_label() == "b (= a; drawn ×1.06)"
    assert _ys(b) == [1.06, 2.12]
    plt.close(fig)


def test_the_timeline_keeps_legends_outside_and_axes_whole(tmp_path: Any, monkeypatch: Any) -> None:
    from autoscaler.sim import runner  # noqa: PLC0415

    saved: dict[str, Any] = {}
    real_savefig = Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> None:
        saved["fig"] = fig
        real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    monkeypatch.setattr(plt, "close", lambda *_: None)
    out = runner.run(runner.Options(duration_s=600, baselines=("static-peak",)))
    plot.timeline(tmp_path / "t.png", trace=out.trace, results=out.results, slo_ttft_s=out.slo_ttft_s, title="t")
    fig = saved["fig"]
    fig.canvas.draw()
    _, ax_rep, ax_ttft, ax_train = fig.axes[:4]
    for ax in (ax_rep, ax_ttft, ax_train):
        legend = ax.get_legend()
        assert legend is not None
        box, area = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= area.x1, "the legend must sit right of the plotting area"
    for ax in (ax_rep, ax_train):
        assert ax.get_ylim()[0] == 0
        assert all(float(t).is_integer() for t in ax.get_yticks())
    plt.close(fig)
