"""A PNG of a replay: each signal as the core saw it, and the replica counts below, on one time axis.

The plot is built from ``Columns``, which the replay feeds one evaluation at a time and which keeps, per pixel
column of the figure, only the points that decide what that column shows (M4 aggregation: the first, last,
lowest and highest value of each series in it; Jugel et al., "M4: A Visualization-Oriented Time Series Data
Aggregation", VLDB 2014). A one-evaluation spike stays visible however long the trace, an unknown evaluation
still breaks the line and shades its column, and memory does not grow with the trace. A trace with no more
evaluations than pixel columns is drawn point for point.

matplotlib takes most of a second to import, so it is imported inside ``plot`` (with the Agg backend: no
display needed) and only when a plot is asked for.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.replay.report import Info, rfc3339

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from autoscaler.replay.engine import Replay, Step

#: More signal panels than this make each one unreadable; the rest are listed in the title.
MAX_SIGNAL_PANELS = 4
#: Figure size and resolution; the data never spans more pixel columns than the figure is wide.
WIDTH_IN = 12.5
DPI = 100
#: Evaluations per pixel column are chosen so that there are at most this many columns.
PIXELS = int(WIDTH_IN * DPI)


@dataclass
class Line:
    """One series as drawn: (evaluation index, value) points, NaN where the line breaks (unknown)."""

    at: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class Columns:
    """What the plot draws, collected one evaluation at a time (``add``) and reduced per pixel column.

    ``per_column`` evaluations go to one pixel column (at least one; ``evaluations`` ÷ ``PIXELS`` rounded up), and
    of each series only its first, last, lowest and highest point in the column are kept (and its first NaN, so
    a gap still shows). Besides, per column: whether any signal was unknown in it (shaded, as "hold").
    """

    def __init__(self, info: Info, *, evaluations: int, start: float, pixels: int = PIXELS) -> None:
        self.info = info
        self.start = start
        self.evaluations = evaluations
        self.per_column = max(1, math.ceil(evaluations / pixels))
        self.names: list[str] | None = None  # every signal of the decision, in its order (from the first step)
        self.shown: list[str] = []
        self.signals: list[Line] = []
        self.desired = Line()
        self.recorded = Line()
        self.ready = Line()
        self.any_recorded = False
        self.highest = 0
        #: Per column: (first evaluation index, evaluations in it, any signal unknown, each shown signal unknown).
        self.unknown: list[tuple[int, int, bool, list[bool]]] = []
        self.last_time: float | None = None
        self._k = 0  # evaluations added
        self._bin_start = 0
        self._buffers: list[list[float]] = []  # the current column: one list per series, signals first

    def add(self, step: Step) -> None:
        d = step.decision
        signals = d.signals
        if self.names is None:
            self.names = list(signals)
            self.shown = self.names[:MAX_SIGNAL_PANELS]
            self.signals = [Line() for _ in self.shown]
            self._buffers = [[] for _ in range(len(self.shown) + 4)]
        buffers = self._buffers
        nan = math.nan
        for j, name in enumerate(self.shown):
            v = signals.get(name)
            value = v.value if v is not None else None
            buffers[j].append(nan if value is None else value)
        n = len(self.shown)
        recorded = step.recorded
        buffers[n].append(d.desired)
        buffers[n + 1].append(nan if recorded is None else recorded)
        buffers[n + 2].append(step.replicas.ready)
        unknown = False
        for v in signals.values():
            if not v.ok:
                unknown = True
                break
        buffers[n + 3].append(1.0 if unknown else 0.0)
        if recorded is not None:
            self.any_recorded = True
        self.highest = max(self.highest, d.desired, step.replicas.spec, recorded or 0)
        self.last_time = step.time
        self._k += 1
        if self._k - self._bin_start >= self.per_column:
            self._flush()

    def finish(self) -> None:
        """Reduce the last, partly filled column."""
        if self._k > self._bin_start:
            self._flush()

    def _flush(self) -> None:
        base = self._bin_start
        buffers = self._buffers
        n = len(self.shown)
        lines = [*self.signals, self.desired, self.recorded, self.ready]
        for line, values in zip(lines, buffers, strict=False):
            _m4(line, base, values)
        mask = buffers[n + 3]
        count = len(mask)
        per_signal = [any(math.isnan(x) for x in buffers[j]) for j in range(n)]
        self.unknown.append((base, count, any(mask), per_signal))
        for values in buffers:
            values.clear()
        self._bin_start = self._k


def _m4(line: Line, base: int, values: list[float]) -> None:
    """Append to ``line`` the points of ``values`` (evaluations ``base``…) that a pixel column shows: the first,
    last, lowest and highest, and the first NaN (the line breaks there), in time order."""
    if len(values) == 1:
        line.at.append(base)
        line.values.append(values[0])
        return
    keep = {0, len(values) - 1}
    finite = [(v, i) for i, v in enumerate(values) if not math.isnan(v)]
    if finite:
        keep.add(min(finite)[1])
        keep.add(max(finite)[1])
    if len(finite) < len(values):
        keep.add(next(i for i, v in enumerate(values) if math.isnan(v)))
    for i in sorted(keep):
        line.at.append(base + i)
        line.values.append(values[i])


def columns_of(replay: Replay) -> Columns:
    """The plot columns of a replay kept in memory (``engine.run``)."""
    start = replay.steps[0].time if replay.steps else 0.0
    cols = Columns(replay, evaluations=len(replay.steps), start=start)
    for step in replay.steps:
        cols.add(step)
    cols.finish()
    return cols


def plot(columns: Columns, path: Path) -> None:
    """Draw ``columns`` (finished) to ``path``; nothing when there was no evaluation."""
    if columns.names is None or columns.last_time is None:
        return
    import matplotlib  # noqa: PLC0415 - slow to import; only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    info = columns.info
    t0 = columns.start
    period = info.period_s
    span = columns.last_time - t0
    unit, scale = ("days", 86400.0) if span > 3 * 86400 else ("hours", 3600.0) if span > 3 * 3600 else ("minutes", 60.0)
    unit_per_eval = period / scale

    def xs(line: Line) -> list[float]:
        return [k * unit_per_eval for k in line.at]

    shown = columns.shown
    fig, axes = plt.subplots(
        len(shown) + 1,
        1,
        sharex=True,
        figsize=(WIDTH_IN, 2.0 * len(shown) + 3.4),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": [1.0] * len(shown) + [1.5]},
    )
    panels = [row[0] for row in axes]
    spans = [(k * unit_per_eval, (k + n) * unit_per_eval) for k, n, _, _ in columns.unknown]

    for j, (ax, name) in enumerate(zip(panels, shown, strict=False)):
        line = columns.signals[j]
        ax.plot(xs(line), line.values, lw=1.0, color="tab:blue")
        ax.set_ylabel(name, rotation=0, ha="right", va="center")
        ax.grid(alpha=0.3)
        _shade(ax, spans, [per[j] for _, _, _, per in columns.unknown])

    ax = panels[-1]
    if columns.any_recorded:
        # Wide and pale underneath, so the policy's line stays visible where the two agree.
        rec = columns.recorded
        ax.step(xs(rec), rec.values, where="post", lw=3.5, alpha=0.45, color="tab:gray", label="recorded")
    desired = columns.desired
    ax.step(xs(desired), desired.values, where="post", lw=1.4, color="tab:red", label="desired (policy)")
    if info.mode == "whatif":
        ready = columns.ready
        ax.step(xs(ready), ready.values, where="post", lw=1.0, color="tab:orange", ls="--", label="ready (what-if)")
    _shade(ax, spans, [any_unknown for _, _, any_unknown, _ in columns.unknown], label="signal unknown (hold)")
    ax.set_ylabel("replicas", rotation=0, ha="right", va="center")
    ax.set_ylim(0, max(columns.highest, 1) * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    # Outside the plotting area, to the right: the legend never covers a line.
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False, borderaxespad=0.0)
    ax.set_xlabel(f"{unit} since {rfc3339(t0)}")
    assert columns.names is not None
    hidden = columns.names[MAX_SIGNAL_PANELS:]
    title = f"replay of {info.policy} ({info.target}), mode {info.mode}: signals as the core saw them"
    if info.mode == "whatif":
        title += " (perReplica ones rescaled to the policy's count)"
    if hidden:
        title += f"; not shown: {', '.join(hidden)}"
    if columns.per_column > 1:
        title += f"; {columns.per_column} evaluations per pixel column (lowest, highest, first and last drawn)"
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)  # wrapped: a what-if title is longer than the figure
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _shade(ax: Axes, spans: list[tuple[float, float]], mask: list[bool], label: str | None = None) -> None:
    """Shade the runs of columns where ``mask`` holds (each column covers its evaluations' periods)."""
    start: float | None = None
    end = 0.0
    for (x0, x1), m in zip(spans, mask, strict=True):
        if m and start is None:
            start = x0
        elif not m and start is not None:
            ax.axvspan(start, x0, color="tab:red", alpha=0.12, lw=0, label=label)
            label = None  # one legend entry
            start = None
        end = x1
    if start is not None:
        ax.axvspan(start, end, color="tab:red", alpha=0.12, lw=0, label=label)
