"""A PNG of a replay: each signal as the core saw it, and the replica counts below, on one time axis.

The plot is built from ``Columns``, which the replay feeds one evaluation at a time and which keeps, per pixel
column of the figure, only the points that decide what that column shows (M4 aggregation: the first, last,
lowest and highest value of each series in it; Jugel et al., "M4: A Visualization-Oriented Time Series Data
Aggregation", VLDB 2014). A one-evaluation spike stays visible however long the trace, an unknown evaluation
still breaks the line and shades its column, and memory does not grow with the trace. A trace with no more
evaluations than pixel columns is drawn point for point.

matplotlib takes about half a second to import, so it is imported only when a plot is asked for, and then
by a child process started before the replay (``Painter``), which imports it on the other core while the replay
runs. The figure is drawn on matplotlib's Agg canvas without pyplot, with fixed margins measured from its text
(no constrained layout, which measures every artist's box several times), the shaded spans as one collection.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler import forked
from autoscaler.core.model import SignalState
from autoscaler.replay.report import Info, rfc3339

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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
        self._shown_appends: list[tuple[str, Callable[[float], None]]] = []
        self._other_appends: tuple[Callable[[float], None], ...] = ()

    def add(self, step: Step) -> None:
        d = step.decision
        signals = d.signals
        if self.names is None:
            self.names = list(signals)
            self.shown = self.names[:MAX_SIGNAL_PANELS]
            self.signals = [Line() for _ in self.shown]
            self._buffers = [[] for _ in range(len(self.shown) + 4)]
            # Once per replay: each shown signal's name with its column's append, and the other series' appends.
            self._shown_appends = [(name, buffers.append) for name, buffers in zip(self.shown, self._buffers,
                                                                                   strict=False)]
            self._other_appends = tuple(b.append for b in self._buffers[len(self.shown):])
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


@dataclass(frozen=True, slots=True)
class Facts:
    """What the drawing reads of ``Info``, as plain data: a ``Stream`` holds the live evaluations, which the
    drawing process is never sent."""

    policy: str
    target: str
    mode: str
    period_s: float
    notes: list[str] = field(default_factory=list)


def plot(columns: Columns, path: Path) -> None:
    """Draw ``columns`` (finished) to ``path`` in this process; nothing when there was no evaluation."""
    if columns.names is None or columns.last_time is None:
        return
    _draw(columns, path)


#: The figure's fixed margins, in pixels (what matplotlib's constrained layout found for this figure, without
#: its cost: it measures every artist's tight box, several times). Widths that depend on the text (signal names,
#: tick labels, the legend) are measured with the renderer's font metrics, one string at a time.
_PAD_PX = 8.0
_TICK_PX = 7.0 * DPI / 72  # tick length 3.5 pt + pad 3.5 pt (matplotlib's defaults)
_LABELPAD_PX = 4.0 * DPI / 72
#: Vertical room between panels, as a fraction of a panel's height (the y axis' offset text, e.g. "1e6", sits
#: there).
_HSPACE = 0.12


def _draw(columns: Columns, path: Path) -> None:
    """``figure(columns)`` as a PNG."""
    fig = figure(columns)
    # Fast zlib level: a plot is mostly flat colour, so the file is barely larger and written several times faster.
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})


def figure(columns: Columns) -> Figure:
    """One panel per shown signal, the replica counts below, on matplotlib's Agg canvas (no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - slow to import; only to draw
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.font_manager import FontProperties  # noqa: PLC0415

    info = columns.info
    t0 = columns.start
    assert columns.last_time is not None
    assert columns.names is not None
    span = columns.last_time - t0
    unit, scale = ("days", 86400.0) if span > 3 * 86400 else ("hours", 3600.0) if span > 3 * 3600 else ("minutes", 60.0)
    unit_per_eval = info.period_s / scale

    def xs(line: Line) -> list[float]:
        return [k * unit_per_eval for k in line.at]

    shown = columns.shown
    height_in = 2.0 * len(shown) + 3.4
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]  # untyped in matplotlib
    fonts: dict[float, FontProperties] = {}

    def extent(text: str, size: float) -> tuple[float, float]:
        """(width, height) in pixels of one line of ``text`` at ``size`` points."""
        prop = fonts.get(size) or fonts.setdefault(size, FontProperties(size=size))
        w, h, _ = renderer.get_text_width_height_descent(text, prop, ismath=False)
        return w, h

    hidden = columns.names[MAX_SIGNAL_PANELS:]
    title = f"replay of {info.policy} ({info.target}), mode {info.mode}: signals as the core saw them"
    if info.mode == "whatif":
        title += " (perReplica ones rescaled to the policy's count)"
    if hidden:
        title += f"; not shown: {', '.join(hidden)}"
    if columns.per_column > 1:
        title += f"; {columns.per_column} evaluations per pixel column (lowest, highest, first and last drawn)"
    title = textwrap.fill(title, 110)  # wrapped: a what-if title is longer than the figure
    line_px = extent("Ag", 10)[1] * 1.2
    top_px = _PAD_PX + line_px * (title.count("\n") + 1) + _PAD_PX
    tick_h = extent("0123456789", 10)[1]
    bottom_px = _PAD_PX + tick_h + _LABELPAD_PX + tick_h + _TICK_PX

    legend = ["recorded"] if columns.any_recorded else []
    legend.append("desired (policy)")
    if info.mode == "whatif":
        legend.append("ready (what-if)")
    if any(any_unknown for _, _, any_unknown, _ in columns.unknown):
        legend.append("signal unknown (hold)")
    # Handle 2 em, gap 0.8 em, border 0.4 em each side at 8 pt, and the anchor 0.5 % of the width right.
    right_px = max(extent(text, 8)[0] for text in legend) + 3.6 * 8 * DPI / 72 + 0.005 * WIDTH_IN * DPI + _PAD_PX

    axes = fig.subplots(
        len(shown) + 1, 1, sharex=True, squeeze=False,
        gridspec_kw={"height_ratios": [1.0] * len(shown) + [1.5], "hspace": _HSPACE},
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
    end = spans[-1][1] if spans else 1.0
    ax.set_xlim(-0.02 * end, 1.02 * end)

    # Each panel's tick labels as they will be drawn (the locator and formatter only, no tick artists), so the
    # left margin fits the widest label and tick text, and each signal's name sits beside its own ticks.
    offsets = []
    for ax in panels:
        lo, hi = ax.get_ylim()
        locs = ax.yaxis.get_majorticklocs()
        # Formatted together, as the axis formats them (the offset and precision depend on all of them).
        labels = ax.yaxis.get_major_formatter().format_ticks(locs)
        ticks_w = max((extent(text, 10)[0] for v, text in zip(locs, labels, strict=True) if lo <= v <= hi),
                      default=0.0)
        offsets.append(ticks_w + _TICK_PX + _LABELPAD_PX)
    names_w = [extent(name, 10)[0] for name in [*shown, "replicas"]]
    left_px = _PAD_PX + max(o + w for o, w in zip(offsets, names_w, strict=True))
    width_px, height_px = WIDTH_IN * DPI, height_in * DPI
    fig.subplots_adjust(
        left=left_px / width_px, right=1.0 - right_px / width_px, top=1.0 - top_px / height_px,
        bottom=bottom_px / height_px,
    )
    axes_w = width_px - left_px - right_px
    for ax, offset in zip(panels, offsets, strict=True):
        # Fixed label positions: matplotlib would otherwise place them from every tick label's box at each draw.
        ax.yaxis.set_label_coords(-offset / axes_w, 0.5)
    bottom_h = panels[-1].get_position().height * height_px
    panels[-1].xaxis.set_label_coords(0.5, -(_TICK_PX + tick_h + _LABELPAD_PX) / bottom_h)
    fig.suptitle(title, fontsize=10, y=1.0 - _PAD_PX / height_px, va="top")
    return fig


def _shade(ax: Axes, spans: list[tuple[float, float]], mask: list[bool], label: str | None = None) -> None:
    """Shade the runs of columns where ``mask`` holds (each column covers its evaluations' periods), as one
    collection of rectangles spanning the panel's height."""
    from matplotlib.collections import PolyCollection  # noqa: PLC0415 - only to draw

    runs: list[tuple[float, float]] = []
    start: float | None = None
    end = 0.0
    for (x0, x1), m in zip(spans, mask, strict=True):
        if m and start is None:
            start = x0
        elif not m and start is not None:
            runs.append((start, x0))
            start = None
        end = x1
    if start is not None:
        runs.append((start, end))
    if runs:
        rectangles = [[(x0, 0.0), (x0, 1.0), (x1, 1.0), (x1, 0.0)] for x0, x1 in runs]
        shade = PolyCollection(
            rectangles, transform=ax.get_xaxis_transform(), facecolors="tab:red", alpha=0.12, linewidths=0,
            label=label,
        )
        ax.add_collection(shade, autolim=False)


class Painter:
    """Draws ``replay.png`` in a child process that imports matplotlib while the replay runs.

    Importing matplotlib takes about half a second of CPU, drawing a few tenths: started before the replay,
    the child spends that time on the other core, and the parent only sends it the finished ``Columns`` (a few
    thousand points) and waits for the file. Where a child cannot be forked (no ``os.fork``, or other threads
    running, which a fork could catch holding a lock), or when it dies without an answer, ``draw`` draws in
    this process: the same function, the same file. Use as a context manager (the child ends with it).
    """

    def __init__(self) -> None:
        self._pid: int | None = None
        self._send = self._answer = -1
        #: Whether the last ``draw`` was the child's (else this process drew).
        self.by_child = False
        if not forked.can_fork():
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the child must not write the parent's buffered output a second time
        to_child, from_parent = os.pipe()[::-1]
        to_parent, from_child = os.pipe()[::-1]
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(to_child)
                os.close(from_child)
                code = _serve(from_parent, to_parent)
            finally:
                os._exit(code)
        os.close(from_parent)
        os.close(to_parent)
        self._pid, self._send, self._answer = pid, to_child, from_child

    def draw(self, columns: Columns, path: Path) -> None:
        """``plot(columns, path)``, by the child when there is one. Raises ``OSError`` as ``plot`` does."""
        if columns.names is None or columns.last_time is None:
            return
        if self._pid is None:
            _draw(columns, path)
            return
        info = columns.info
        sent = copy.copy(columns)
        sent.info = Facts(info.policy, info.target, info.mode, info.period_s, list(info.notes))
        sent._shown_appends, sent._other_appends = [], ()  # the finished columns' data only
        try:
            forked.write_all(self._send, pickle.dumps((sent, path), protocol=pickle.HIGHEST_PROTOCOL))
            os.close(self._send)
            self._send = -1
            answer = forked.read_all(self._answer)
        except OSError:
            answer = b""  # the child is gone (a broken pipe): draw here
        self.close()
        if not answer:
            _draw(columns, path)
            return
        outcome = pickle.loads(answer)  # our own child's answer, through our own pipe
        self.by_child = True
        if outcome[0] == "oserror":
            _, errno, strerror, filename = outcome
            raise OSError(errno, strerror, filename)
        if outcome[0] == "error":
            raise RuntimeError(f"drawing {path} failed: {outcome[1]}")

    def close(self) -> None:
        """End the child (it exits when its input closes without a picture) and reap it."""
        for fd in (self._send, self._answer):
            if fd >= 0:
                os.close(fd)
        self._send = self._answer = -1
        if self._pid is not None:
            os.waitpid(self._pid, 0)
            self._pid = None

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(source: int, answer: int) -> int:
    """The drawing child: import matplotlib at once, then draw what the parent sends (nothing if it sends
    nothing), and answer ``("ok",)``, ``("oserror", errno, strerror, filename)`` or ``("error", text)``."""
    import matplotlib.backends.backend_agg  # noqa: PLC0415 - the point of the child: imported meanwhile
    import matplotlib.figure  # noqa: F401, PLC0415

    data = forked.read_all(source)
    if not data:
        return 0
    columns, path = pickle.loads(data)  # our parent's data, through our own pipe
    outcome: tuple[object, ...]
    try:
        _draw(columns, path)
        outcome = ("ok",)
    except OSError as exc:
        outcome = ("oserror", exc.errno, exc.strerror, exc.filename)
    except Exception as exc:  # reported to the parent, which raises it
        outcome = ("error", f"{type(exc).__name__}: {exc}")
    forked.write_all(answer, pickle.dumps(outcome))
    return 0
