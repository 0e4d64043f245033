"""A PNG of a replay: each signal as the core saw it, and the replica counts below, on one time axis.

matplotlib takes about a second to import, so it is imported inside ``plot`` (with the Agg backend: no
display needed) and only when a plot is asked for.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.replay.engine import Replay
from autoscaler.replay.report import rfc3339

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: More signal panels than this make each one unreadable; the rest are listed in the title.
MAX_SIGNAL_PANELS = 4


def plot(replay: Replay, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - slow to import; only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    steps = replay.steps
    if not steps:
        return
    t0 = steps[0].time
    span = steps[-1].time - t0
    unit, scale = ("days", 86400.0) if span > 3 * 86400 else ("hours", 3600.0) if span > 3 * 3600 else ("minutes", 60.0)
    x = [(s.time - t0) / scale for s in steps]
    names = list(steps[0].decision.signals)
    shown = names[:MAX_SIGNAL_PANELS]
    fig, axes = plt.subplots(
        len(shown) + 1,
        1,
        sharex=True,
        figsize=(12.5, 2.0 * len(shown) + 3.4),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": [1.0] * len(shown) + [1.5]},
    )
    panels = [row[0] for row in axes]
    unknown = [any(not v.ok for v in s.decision.signals.values()) for s in steps]

    for ax, name in zip(panels, shown, strict=False):
        ys = [s.decision.signals[name].value for s in steps]
        ax.plot(x, [math.nan if y is None else y for y in ys], lw=1.0, color="tab:blue")
        ax.set_ylabel(name, rotation=0, ha="right", va="center")
        ax.grid(alpha=0.3)
        _shade(ax, x, [s.decision.signals[name].value is None for s in steps])

    ax = panels[-1]
    if any(s.recorded is not None for s in steps):
        # Wide and pale underneath, so the policy's line stays visible where the two agree.
        ax.step(
            x,
            [math.nan if s.recorded is None else s.recorded for s in steps],
            where="post",
            lw=3.5,
            alpha=0.45,
            color="tab:gray",
            label="recorded",
        )
    ax.step(x, [s.decision.desired for s in steps], where="post", lw=1.4, color="tab:red", label="desired (policy)")
    if replay.mode == "whatif":
        ax.step(
            x,
            [s.replicas.ready for s in steps],
            where="post",
            lw=1.0,
            color="tab:orange",
            ls="--",
            label="ready (what-if)",
        )
    _shade(ax, x, unknown, label="signal unknown (hold)")
    ax.set_ylabel("replicas", rotation=0, ha="right", va="center")
    highest = max(max(s.decision.desired, s.replicas.spec, s.recorded or 0) for s in steps)
    ax.set_ylim(0, max(highest, 1) * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    # Outside the plotting area, to the right: the legend never covers a line.
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False, borderaxespad=0.0)
    ax.set_xlabel(f"{unit} since {rfc3339(t0)}")
    hidden = names[MAX_SIGNAL_PANELS:]
    title = f"replay of {replay.policy} ({replay.target}), mode {replay.mode}: signals as the core saw them"
    if replay.mode == "whatif":
        title += " (perReplica ones rescaled to the policy's count)"
    if hidden:
        title += f"; not shown: {', '.join(hidden)}"
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)  # wrapped: a what-if title is longer than the figure
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _shade(ax: Axes, x: list[float], mask: list[bool], label: str | None = None) -> None:
    """Shade the runs of evaluations where ``mask`` holds (each covers one period after its point)."""
    step = x[1] - x[0] if len(x) > 1 else 1.0
    start: float | None = None
    for xi, m in zip([*x, x[-1] + step], [*mask, False], strict=True):
        if m and start is None:
            start = xi
        elif not m and start is not None:
            ax.axvspan(start, xi, color="tab:red", alpha=0.12, lw=0, label=label)
            label = None  # one legend entry
            start = None
