"""``replay.svg``: each signal as the core saw it, and the replica counts below, on one time axis.

The plot is built from ``Columns``, which the replay feeds one evaluation at a time and which keeps, per pixel
column of the plotting area, only the points that decide what that column shows (M4 aggregation: the first, last,
lowest and highest value of each series in it; Jugel et al., "M4: A Visualization-Oriented Time Series Data
Aggregation", VLDB 2014). A one-evaluation spike stays visible however long the trace, an unknown evaluation
still breaks the line and shades its column, and memory does not grow with the trace. A trace with no more
evaluations than pixel columns is drawn point for point.

The picture is SVG text written here (``write_svg``), not a raster drawn by a plotting library: importing
matplotlib took 0.5-0.7 s of CPU and rasterising a week's lines another 0.3-0.4 s, more than the rest of a
replay's budget, while the SVG of a week is a few hundred kilobytes written in a few tens of milliseconds, and
any browser opens it (and zooms it without blur). One panel per shown signal (the signal's name above it), the
replica counts below as step lines, axes with ticks and labels, grid lines, unknown columns shaded, a legend
right of the panels.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.core.model import SignalState
from autoscaler.replay.report import Info, rfc3339

if TYPE_CHECKING:
    from autoscaler.replay.engine import Block, Replay, Step

#: The file the command writes.
FILE_NAME = "replay.svg"
#: More signal panels than this make each one unreadable; the rest are listed in the title.
MAX_SIGNAL_PANELS = 4
#: Width of the plotting area in pixels: the data never spans more pixel columns than this.
PIXELS = 1000


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
        self._shown_appends: list[tuple[str, Callable[[float], None]]] = []
        self._other_appends: tuple[Callable[[float], None], ...] = ()

    def add(self, step: Step) -> None:
        d = step.decision
        signals = d.signals
        if self.names is None:
            self._begin(list(signals))
        nan = math.nan
        get = signals.get
        for name, append in self._shown_appends:
            v = get(name)
            value = v.value if v is not None else None
            append(nan if value is None else value)
        add_desired, add_recorded, add_ready, add_unknown = self._other_appends
        recorded = step.recorded
        desired = d.desired
        add_desired(desired)
        add_recorded(nan if recorded is None else recorded)
        replicas = step.replicas
        add_ready(replicas.ready)
        ok = SignalState.OK
        unknown = 0.0
        for v in signals.values():
            if v.state is not ok:  # ``not v.ok`` without the property's call
                unknown = 1.0
                break
        add_unknown(unknown)
        if recorded is not None:
            self.any_recorded = True
        self.highest = max(self.highest, desired, replicas.spec, recorded or 0)
        self.last_time = step.time
        self._k += 1
        if self._k - self._bin_start >= self.per_column:
            self._flush()

    def _begin(self, names: list[str]) -> None:
        self.names = names
        self.shown = names[:MAX_SIGNAL_PANELS]
        self.signals = [Line() for _ in self.shown]
        self._buffers = [[] for _ in range(len(self.shown) + 4)]
        # Once per replay: each shown signal's name with its column's append, and the other series' appends.
        self._shown_appends = [(name, buffers.append) for name, buffers in zip(self.shown, self._buffers,
                                                                               strict=False)]
        self._other_appends = tuple(b.append for b in self._buffers[len(self.shown):])

    def add_block(self, block: Block) -> None:
        """``add`` for every evaluation of ``block`` (the bulk path), column by column rather than one at a time:
        the same values in the same buffers, every signal known."""
        decided = block.decided
        n = len(block.times)
        if not n:
            return
        if self.names is None:
            self._begin(list(block.names))
        assert self.names == list(block.names)
        shown = [decided.values[block.names.index(name)] for name in self.shown]
        desired, ready, recorded = decided.desired, block.ready, block.recorded
        series = [*shown, desired, recorded if recorded is not None else [math.nan] * n, ready]
        buffers = self._buffers
        k = 0
        while k < n:
            take = min(self.per_column - (self._k - self._bin_start), n - k)
            end = k + take
            for buffer, values in zip(buffers, series, strict=False):
                buffer.extend(values[k:end])
            buffers[-1].extend([0.0] * take)  # no signal unknown
            self._k += take
            k = end
            if self._k - self._bin_start >= self.per_column:
                self._flush()
        if recorded is not None:
            self.any_recorded = True
            self.highest = max(self.highest, *desired, *block.spec, *recorded)
        else:
            self.highest = max(self.highest, *desired, *block.spec)
        self.last_time = block.times[-1]

    def start_at(self, k: int) -> None:
        """Count the evaluations added from evaluation ``k`` on (at a column's start: ``k`` a multiple of
        ``per_column``), for the columns of the evaluations from ``k`` (another process's, ``join``)."""
        assert k % self.per_column == 0
        self._k = self._bin_start = k

    def part(self) -> dict[str, Any]:
        """What ``join`` needs of these columns (finished), to send from another process."""
        return {"signals": self.signals, "lines": [self.desired, self.recorded, self.ready], "unknown": self.unknown,
                "any_recorded": self.any_recorded, "highest": self.highest, "last_time": self.last_time,
                "k": self._k}

    def join(self, later: dict[str, Any]) -> None:
        """Append the columns of the evaluations after these (``part`` of columns ``start_at`` the evaluation
        after this one's last, which ends a column): the same columns as one ``Columns`` of all."""
        assert self._k == self._bin_start  # the last column here is complete
        for line, more in zip([*self.signals, self.desired, self.recorded, self.ready],
                              [*later["signals"], *later["lines"]], strict=True):
            line.at.extend(more.at)
            line.values.extend(more.values)
        self.unknown.extend(later["unknown"])
        self.any_recorded = self.any_recorded or later["any_recorded"]
        self.highest = max(self.highest, later["highest"])
        self.last_time = later["last_time"]
        self._k = self._bin_start = later["k"]

    @property
    def added(self) -> int:
        """How many evaluations were added."""
        return self._k

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
        isnan = math.isnan
        per_signal = [any(map(isnan, buffers[j])) for j in range(n)]
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
    last = len(values) - 1
    keep = {0, last}
    if not any(map(math.isnan, values)):
        # The usual column, without a (value, index) pair per point: the first lowest and the last highest, as
        # the pairs' min and max below pick them.
        keep.add(values.index(min(values)))
        keep.add(last - values[::-1].index(max(values)))
    else:
        finite = [(v, i) for i, v in enumerate(values) if not math.isnan(v)]
        if finite:
            keep.add(min(finite)[1])
            keep.add(max(finite)[1])
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
    """Write ``columns`` (finished) to ``path`` as SVG; nothing when there was no evaluation."""
    if columns.names is None or columns.last_time is None:
        return
    path.write_text(svg(columns), encoding="utf-8")


#: Layout in pixels. Text widths are estimated (no font metrics in a browser-independent file): a character of a
#: sans-serif font is at most about 0.6 em wide for digits and lower case (an estimate, generous for most text).
_FONT = 12
_SMALL = 11
_EM_W = 0.6
_PAD = 10.0
_NAME_H = 18.0  # a panel's name, above its frame
_SIGNAL_H = 140.0
_REPLICAS_H = 210.0
_GAP = 16.0  # below a panel's frame (its lowest tick label spills half a line)
_TICK = 4.0
_LINE_H = 16.0
_SWATCH = 24.0
_BLUE, _RED, _GRAY, _ORANGE = "#1f77b4", "#d62728", "#7f7f7f", "#ff7f0e"


def escape(text: str) -> str:
    """``text`` as SVG character data (``xml.sax.saxutils.escape`` would import urllib's HTTP client)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoteattr(text: str) -> str:
    """``text`` as a double-quoted SVG attribute value."""
    return '"' + escape(text).replace('"', "&quot;") + '"'


def _text_w(text: str, size: float) -> float:
    return len(text) * _EM_W * size


def nice_ticks(lo: float, hi: float, most: int = 5) -> tuple[list[float], float]:
    """Round tick values covering [lo, hi], 1, 2, 2.5 or 5 × 10^k apart (at most ``most`` steps), and the step."""
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = hi / most - lo / most  # divided first: no overflow near the largest floats
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [k * step for k in range(first, last + 1)]
    if not all(map(math.isfinite, ticks)):  # rounded out beyond the largest float
        return [lo, hi], raw * most
    return ticks, step


def tick_labels(ticks: list[float], step: float) -> list[str]:
    """The shortest fixed-point labels that each read back as their tick (within a thousandth of a step);
    scientific notation for very large or very small values."""
    if max(abs(t) for t in ticks) >= 1e6 or step < 1e-4:
        digits = 1
        while digits < 15 and len({f"{t:.{digits}g}" for t in ticks}) < len(ticks):
            digits += 1
        labels = [f"{t:.{digits}g}" for t in ticks]
    else:
        decimals = 0
        while decimals < 6 and any(abs(float(f"{t:.{decimals}f}") - t) > step * 1e-3 for t in ticks):
            decimals += 1
        labels = [f"{t:.{decimals}f}" for t in ticks]
    return ["0" if label.lstrip("-").strip("0.") == "" else label for label in labels]


@dataclass
class _Panel:
    """One panel: where its frame is, its value range and ticks, and what it draws."""

    name: str
    top: float
    height: float
    ticks: list[float]
    labels: list[str]
    lines: list[tuple[str, Line, bool, str]]  # (series id, points, as steps, SVG style)
    unknown: list[bool]  # per pixel column: shaded

    @property
    def lo(self) -> float:
        return self.ticks[0]

    @property
    def hi(self) -> float:
        return self.ticks[-1]

    def y(self, value: float) -> float:
        # Halved first: no overflow when the range spans most of the floats.
        return self.top + self.height * (self.hi / 2 - value / 2) / (self.hi / 2 - self.lo / 2)


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _panels(columns: Columns) -> tuple[list[_Panel], list[tuple[str, str]]]:
    """The panels (value ranges, ticks, lines; placed later) and the legend's entries (label, line style)."""
    panels: list[_Panel] = []
    for j, name in enumerate(columns.shown):
        values = _finite(columns.signals[j].values)
        low, high = (min(0.0, *values), max(values)) if values else (0.0, 1.0)
        ticks, step = nice_ticks(low, high)
        panels.append(_Panel(name, 0.0, _SIGNAL_H, ticks, tick_labels(ticks, step),
                             [(f"signal:{name}", columns.signals[j], False, f'stroke="{_BLUE}" stroke-width="1"')],
                             [per[j] for _, _, _, per in columns.unknown]))
    ticks, step = nice_ticks(0.0, max(columns.highest, 1) * 1.08)
    if step < 1.0:  # replica counts are whole numbers
        ticks, step = [float(k) for k in range(math.ceil(ticks[-1]) + 1)], 1.0
    lines: list[tuple[str, Line, bool, str]] = []
    legend: list[tuple[str, str]] = []
    if columns.any_recorded:
        # Wide and pale underneath, so the policy's line stays visible where the two agree.
        style = f'stroke="{_GRAY}" stroke-width="3.5" stroke-opacity="0.45"'
        lines.append(("recorded", columns.recorded, True, style))
        legend.append(("recorded", style))
    style = f'stroke="{_RED}" stroke-width="1.4"'
    lines.append(("desired", columns.desired, True, style))
    legend.append(("desired (policy)", style))
    if columns.info.mode == "whatif":
        style = f'stroke="{_ORANGE}" stroke-width="1" stroke-dasharray="4 3"'
        lines.append(("ready", columns.ready, True, style))
        legend.append(("ready (what-if)", style))
    shaded = [any_unknown for _, _, any_unknown, _ in columns.unknown]
    if any(shaded):
        legend.append(("signal unknown (hold)", ""))
    panels.append(_Panel("replicas", 0.0, _REPLICAS_H, ticks, tick_labels(ticks, step), lines, shaded))
    return panels, legend


def svg(columns: Columns) -> str:
    """The SVG text of ``columns`` (finished, with at least one evaluation)."""
    info = columns.info
    assert columns.names is not None
    assert columns.last_time is not None
    n = max(columns.added, 1)
    t0 = columns.start
    span_s = n * info.period_s
    unit, scale = ("days", 86400.0) if span_s > 3 * 86400 else ("hours", 3600.0) if span_s > 3 * 3600 else (
        "minutes", 60.0)

    hidden = columns.names[MAX_SIGNAL_PANELS:]
    title = f"replay of {info.policy} ({info.target}), mode {info.mode}: signals as the core saw them"
    if info.mode == "whatif":
        title += " (perReplica ones rescaled to the policy's count)"
    if hidden:
        title += f"; not shown: {', '.join(hidden)}"
    if columns.per_column > 1:
        title += f"; {columns.per_column} evaluations per pixel column (lowest, highest, first and last drawn)"

    panels, legend = _panels(columns)

    # Horizontal layout: the widest tick label left of the panels, the legend right of them.
    ticks_w = max(_text_w(label, _SMALL) for p in panels for label in p.labels)
    left = _PAD + ticks_w + _TICK + 4.0
    legend_w = max(_text_w(label, _SMALL) for label, _ in legend) + _SWATCH + 8.0
    width = left + PIXELS + 12.0 + legend_w + _PAD
    title_lines = textwrap.wrap(title, max(40, int((width - 2 * _PAD) / (_EM_W * _FONT))))
    y = _PAD + _LINE_H * len(title_lines) + 6.0
    for panel in panels:
        panel.top = y + _NAME_H
        y = panel.top + panel.height + _GAP
    bottom = panels[-1].top + panels[-1].height
    height = bottom + _TICK + _LINE_H + _LINE_H + _PAD

    def x(k: float) -> float:
        return left + PIXELS * k / n

    x_ticks, x_step = nice_ticks(0.0, span_s / scale, most=8)
    x_ticks = [t for t in x_ticks if t <= span_s / scale * (1 + 1e-9)]
    x_labels = tick_labels(x_ticks, x_step)
    x_at = [x(t * scale / info.period_s) for t in x_ticks]

    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans, Arial, sans-serif" font-size="{_FONT}">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text class="title" x="{width / 2:.1f}" y="{_PAD + _FONT:.1f}" text-anchor="middle">'
        + "".join(f'<tspan x="{width / 2:.1f}" dy="{0 if i == 0 else _LINE_H:.0f}">{escape(t)}</tspan>'
                  for i, t in enumerate(title_lines))
        + "</text>",
    ]
    last = len(panels) - 1
    for index, panel in enumerate(panels):
        top, bottom_y = panel.top, panel.top + panel.height
        out.append(f"<g class=\"panel\" data-name={quoteattr(panel.name)}>")
        out.append(
            f'<text class="name" x="{left:.1f}" y="{top - 5:.1f}" font-weight="bold">{escape(panel.name)}</text>'
        )
        # Shaded columns first (underneath): runs of unknown pixel columns, each spanning its evaluations.
        for x0, x1 in _runs(columns.unknown, panel.unknown):
            out.append(f'<rect class="unknown" x="{x(x0):.1f}" y="{top:.1f}" width="{x(x1) - x(x0):.1f}" '
                       f'height="{panel.height:.1f}" fill="{_RED}" fill-opacity="0.12"/>')
        out.append('<g class="y-axis" stroke="#000" stroke-opacity="0.12">')
        for value in panel.ticks:
            yy = panel.y(value)
            out.append(f'<line x1="{left:.1f}" y1="{yy:.1f}" x2="{left + PIXELS:.1f}" y2="{yy:.1f}"/>')
        out.append("</g>")
        out.append('<g class="y-ticks" text-anchor="end">')
        for value, label in zip(panel.ticks, panel.labels, strict=True):
            yy = panel.y(value)
            out.append(f'<line x1="{left - _TICK:.1f}" y1="{yy:.1f}" x2="{left:.1f}" y2="{yy:.1f}" stroke="#000"/>'
                       f'<text x="{left - _TICK - 2:.1f}" y="{yy + 4:.1f}" font-size="{_SMALL}">{escape(label)}</text>')
        out.append("</g>")
        out.append('<g class="x-axis" stroke="#000" stroke-opacity="0.12">')
        for xx in x_at:
            out.append(f'<line x1="{xx:.1f}" y1="{top:.1f}" x2="{xx:.1f}" y2="{bottom_y:.1f}"/>')
        out.append("</g>")
        if index == last:
            out.append('<g class="x-ticks" text-anchor="middle">')
            for xx, label in zip(x_at, x_labels, strict=True):
                out.append(f'<line x1="{xx:.1f}" y1="{bottom_y:.1f}" x2="{xx:.1f}" y2="{bottom_y + _TICK:.1f}" '
                           f'stroke="#000"/><text x="{xx:.1f}" y="{bottom_y + _TICK + 12:.1f}" '
                           f'font-size="{_SMALL}">{escape(label)}</text>')
            out.append("</g>")
        for series, line, steps, style in panel.lines:
            d = _path(line, x, panel.y, steps, x(n))
            if d:
                out.append(f'<path class="series" data-series={quoteattr(series)} fill="none" {style} '
                           f'stroke-linejoin="round" d="{d}"/>')
        out.append(f'<rect class="frame" x="{left:.1f}" y="{top:.1f}" width="{PIXELS}" height="{panel.height:.1f}" '
                   'fill="none" stroke="#000" stroke-width="0.8"/>')
        out.append("</g>")
    out.append(f'<text class="x-label" x="{left + PIXELS / 2:.1f}" y="{bottom + _TICK + 2 * _LINE_H + 2:.1f}" '
               f'text-anchor="middle">{escape(f"{unit} since {rfc3339(t0)}")}</text>')
    # The legend right of the replicas panel: it never covers a line.
    lx = left + PIXELS + 12.0
    out.append(f'<g class="legend" font-size="{_SMALL}">')
    for i, (label, style) in enumerate(legend):
        ly = panels[-1].top + 10.0 + i * _LINE_H
        if style:
            swatch = f'<line x1="{lx:.1f}" y1="{ly:.1f}" x2="{lx + _SWATCH - 4:.1f}" y2="{ly:.1f}" {style}/>'
        else:
            swatch = (f'<rect x="{lx:.1f}" y="{ly - 5:.1f}" width="{_SWATCH - 4:.0f}" height="10" fill="{_RED}" '
                      'fill-opacity="0.12"/>')
        out.append(f'<g class="entry">{swatch}<text x="{lx + _SWATCH:.1f}" y="{ly + 4:.1f}">{escape(label)}</text></g>')
    out.append("</g>")
    out.append("</svg>\n")
    return "\n".join(out)


def _runs(spans: list[tuple[int, int, bool, list[bool]]], mask: list[bool]) -> list[tuple[int, int]]:
    """The runs of pixel columns where ``mask`` holds, as (first evaluation, end evaluation)."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    end = 0
    for (base, count, _, _), m in zip(spans, mask, strict=True):
        if m and start is None:
            start = base
        elif not m and start is not None:
            runs.append((start, base))
            start = None
        end = base + count
    if start is not None:
        runs.append((start, end))
    return runs


def _path(line: Line, x: Callable[[float], float], y: Callable[[float], float], steps: bool, end: float) -> str:
    """SVG path data of ``line``: a polyline, or a step line holding each value until the next point (and the last
    until ``end``); a NaN lifts the pen. Every kept point is drawn: the decimation is ``Columns``'."""
    parts: list[str] = []
    pen = False
    alone = False  # the pen is down on one point only: drawn as a short dash, or it would not show
    previous = math.nan
    for k, value in zip(line.at, line.values, strict=True):
        if math.isnan(value):
            if pen and steps:
                parts.append(f"H{x(k):.1f}")  # the last value holds until the unknown evaluation
            elif alone:
                parts.append("h1")
            pen = alone = False
            continue
        if not pen:
            parts.append(f"M{x(k):.1f} {y(value):.1f}")
            pen = alone = True
            previous = value
            continue
        alone = False
        if steps:
            if value != previous:
                parts.append(f"H{x(k):.1f}V{y(value):.1f}")
        else:
            parts.append(f"L{x(k):.1f} {y(value):.1f}")
        previous = value
    if pen and steps:
        parts.append(f"H{end:.1f}")
    elif alone:
        parts.append("h1")
    return "".join(parts)
