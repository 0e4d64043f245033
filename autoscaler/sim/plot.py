"""The PNG timeline of a simulation: arrivals, replicas, TTFT and training, one line per policy."""

from __future__ import annotations

import math
from pathlib import Path

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


def timeline(path: Path, *, trace: Trace, results: list[RunResult], slo_ttft_s: float, title: str) -> None:
    # Imported here: matplotlib costs about a second to import, which --no-plot runs and tests skip.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt  # noqa: PLC0415

    horizon = max(r.horizon_s for r in results) if results else trace.duration_s
    fig, axes = plt.subplots(4, 1, figsize=(12, 11), sharex=True)
    ax_rate, ax_rep, ax_ttft, ax_train = axes
    rates = rate_series(trace, BIN_S, horizon)
    xs = [(i + 0.5) * BIN_S / 60 for i in range(len(rates))]
    ax_rate.plot(xs, rates, color="black", lw=1.2)
    ax_rate.set_ylabel(f"arrivals (req/s, {BIN_S:g}s bins)")
    ax_rate.set_title(title, fontsize=10)
    nbins = len(rates)
    for r in results:
        style = {"ls": "--", "lw": 1.8} if r.kind == "oracle" else {"lw": 1.3}
        ts = [p.t / 60 for p in r.timeline]
        ax_rep.step(ts, [p.replicas for p in r.timeline], where="post", label=r.name, **style)
        p99 = _ttft_p99_by_bin(r, BIN_S, nbins)
        ax_ttft.plot(xs, [min(v, 1e4) for v in p99], label=r.name, **style)
        ax_train.step(ts, [p.training_chips for p in r.timeline], where="post", label=r.name, **style)
    ax_rep.set_ylabel("serving replicas (desired)")
    ax_rep.legend(loc="upper right", fontsize=8, ncol=3)
    ax_ttft.axhline(slo_ttft_s, color="red", lw=0.8, ls=":", label="SLO")
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel(f"TTFT p99 per {BIN_S:g}s (s)")
    ax_ttft.legend(loc="upper right", fontsize=8, ncol=3)
    ax_train.set_ylabel("training chips running")
    ax_train.set_xlabel("minutes")
    ax_train.legend(loc="upper right", fontsize=8, ncol=3)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
