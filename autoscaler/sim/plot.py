"""The PNG timeline of a simulation: arrivals, replicas, TTFT and training, one line per policy.

Training preemptions and deactivations are marked on each run's replica line (triangles); the training panel
draws the quota, the ceiling of serving + training chips.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from autoscaler.sim.report import percentile
from autoscaler.sim.simulation import RunResult
from autoscaler.sim.traces import Trace, rate_series

BIN_S = 30.0


def _ttft_p99_by_bin(result: RunResult, bin_s: float, nbins: int) -> list[float]:
    bins: list[list[float]] = [[] for _ in range(nbins)]
    req = result.requests
    for f, a in zip(req.first_token, req.arrival, strict=True):
        b = min(nbins - 1, int(a / bin_s))
        bins[b].append(f - a if not math.isnan(f) else math.inf)
    return [percentile(v, 99) if v else math.nan for v in bins]


#: How far a series identical to one already drawn is shifted so that both stay visible (the legend says so):
#: a fraction of a linear axis's span, or a factor on the log TTFT axis.
LINEAR_SHIFT = 0.015
LOG_SHIFT = 1.06


def _draw(ax: Any, series: list[tuple[str, dict[str, Any], list[float], list[float]]], *, step: bool,
          log: bool = False) -> None:
    """Draw every series; one identical to an earlier one is drawn dashed and shifted, and labelled so."""
    finite = [y for _, _, _, ys in series for y in ys if not math.isnan(y) and not math.isinf(y)]
    span = (max(finite) - min(finite)) if finite else 1.0
    first: dict[tuple[tuple[float, ...], tuple[float, ...]], str] = {}
    repeats: dict[str, int] = {}
    for name, base, xs, ys in series:
        key = (tuple(xs), tuple(ys))
        label, shown, style = name, ys, base
        if key in first:
            same = first[key]
            k = repeats[same] = repeats.get(same, 0) + 1
            if log:
                shown = [y * LOG_SHIFT**k for y in ys]
                label = f"{name} (= {same}; drawn ×{LOG_SHIFT**k:.2f})"
            else:
                delta = LINEAR_SHIFT * k * max(span, 1.0)
                shown = [y + delta for y in ys]
                label = f"{name} (= {same}; drawn +{delta:.2g})"
            style = {**style, "ls": (0, (4, 2)), "lw": 1.8}
        else:
            first[key] = name
        if step:
            ax.step(xs, shown, where="post", label=label, **style)
        else:
            ax.plot(xs, shown, label=label, **style)


def _legend(ax: Any) -> None:
    """Outside the plotting area, to the right: it never covers data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False, borderaxespad=0.0)


def _replicas_at(result: RunResult, t: float) -> int:
    """The desired replica count of a run's timeline at time ``t`` (the last sample at or before it)."""
    count = result.timeline[0].replicas if result.timeline else 0
    for p in result.timeline:
        if p.t > t:
            break
        count = p.replicas
    return count


def timeline(path: Path, *, trace: Trace, results: list[RunResult], slo_ttft_s: float, title: str) -> None:
    # Imported here: matplotlib costs about a second to import, which --no-plot runs and tests skip.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: PLC0415

    horizon = max(r.horizon_s for r in results) if results else trace.duration_s
    fig, axes = plt.subplots(4, 1, figsize=(14, 11.5), sharex=True, layout="constrained")
    ax_rate, ax_rep, ax_ttft, ax_train = axes
    rates = rate_series(trace, BIN_S, horizon)
    xs = [(i + 0.5) * BIN_S / 60 for i in range(len(rates))]
    ax_rate.plot(xs, rates, color="black", lw=1.2)
    ax_rate.set_ylabel(f"arrivals\n(req/s, {BIN_S:g}s bins)")
    ax_rate.set_ylim(bottom=0)
    fig.suptitle(textwrap.fill(title, 120), fontsize=10)
    nbins = len(rates)
    replicas, ttft, training = [], [], []
    for i, r in enumerate(results):
        # One color per policy in every panel; the oracle dashed (it is a bound, not a controller).
        style: dict[str, Any] = {"color": f"C{i % 10}", "lw": 1.3}
        if r.kind == "oracle":
            style.update(ls="--", lw=1.8)
        ts = [p.t / 60 for p in r.timeline]
        replicas.append((r.name, style, ts, [float(p.replicas) for p in r.timeline]))
        p99 = _ttft_p99_by_bin(r, BIN_S, nbins)
        ttft.append((r.name, style, xs, [min(v, 1e4) for v in p99]))
        training.append((r.name, style, ts, [float(p.training_chips) for p in r.timeline]))
    _draw(ax_rep, replicas, step=True)
    _draw(ax_ttft, ttft, step=False, log=True)
    _draw(ax_train, training, step=True)
    # Preemptions and deactivations: a triangle on the run's replica line when training was stopped.
    for (_, style, _, _), r in zip(replicas, results, strict=True):
        if r.preemption_times:
            ax_rep.plot([t / 60 for t in r.preemption_times], [_replicas_at(r, t) for t in r.preemption_times],
                        "v", color=style["color"], ms=6, ls="none")
    if any(r.preemption_times for r in results):
        ax_rep.plot([], [], "v", color="grey", ls="none", label="training preempted")
    quota = max((r.quota for r in results), default=0)
    if quota:
        ax_train.axhline(quota, color="black", lw=1.0, ls="--", label=f"quota ({quota} chips)")
    ax_rep.set_ylabel("serving replicas\n(desired)")
    ax_rep.set_ylim(bottom=0)
    ax_rep.yaxis.set_major_locator(MaxNLocator(integer=True))  # replicas come whole: no half steps
    ax_ttft.axhline(slo_ttft_s, color="red", lw=0.9, ls=":", label=f"SLO {slo_ttft_s:g}s")
    ax_ttft.set_yscale("log")
    ax_ttft.yaxis.set_major_locator(LogLocator(base=10, numticks=6))
    ax_ttft.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax_ttft.yaxis.set_minor_formatter(NullFormatter())
    ax_ttft.set_ylabel(f"TTFT p99 per {BIN_S:g}s\n(s, log; gaps: no arrivals)")
    ax_train.set_ylabel("training chips\nrunning")
    ax_train.set_ylim(bottom=0)  # from zero: a drop to zero must look like one
    ax_train.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_train.set_xlabel("minutes")
    for ax in (ax_rep, ax_ttft, ax_train):
        _legend(ax)
    for ax in axes:
        ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
