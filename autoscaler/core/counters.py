"""Counters and histograms as the core reads them: rates from cumulative samples and quantiles from buckets.

Pure functions over plain numbers, shared by every place that turns cumulative series into a signal:
the pods source (deltas between its successive scrapes), the simulator (its servers' counters) and the core
itself (a histogram's quantile over the buckets of the pods that reported). Prometheus does the same
server-side with ``rate`` and ``histogram_quantile``; these follow its rules:

- a counter that goes down was reset (a restarted server): the increase across the reset is the new value;
- the rate is the increase over the samples within the window divided by the time they span (no
  extrapolation to the window's edges, unlike PromQL's ``rate``: with scrapes every few seconds the two
  differ by at most one scrape interval's worth);
- a quantile interpolates linearly inside the bucket holding the rank; in the ``+Inf`` bucket it is the
  highest finite bound; with no observations it is NaN (unknown, never zero).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

#: The upper bound of the catch-all bucket.
INF = math.inf


#: A sample (time, one value or one value per counter), as ``rate`` and ``rates`` take them.
_Sample = TypeVar("_Sample", tuple[float, float], tuple[float, Sequence[float]])


def increase(points: Sequence[tuple[float, float]]) -> float:
    """The counter's increase over ``points`` ((time, cumulative value), oldest first), resets handled."""
    return _increase([value for _, value in points])


def _increase(values: Sequence[float]) -> float:
    """The increase of one counter's successive ``values``. Without a reset it is the newest minus the oldest
    (one subtraction: ``rate`` and ``rates`` then give the same figure to the last bit); only a series with a
    reset is summed step by step."""
    if not values:
        return 0.0
    if all(map(operator.ge, values[1:], values)):
        return values[-1] - values[0]
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


@dataclass(frozen=True, slots=True)
class _Window(Generic[_Sample]):
    """The samples within a rate window of the newest, oldest first, and the time they span (> 0)."""

    samples: list[_Sample]
    span: float


def _window(points: Sequence[_Sample], window_s: float) -> _Window[_Sample] | None:
    """The samples within ``window_s`` of the newest and the time they span; None when fewer than two samples
    span a positive time (no rate can be told)."""
    if len(points) < 2:
        return None
    newest = points[-1][0]
    inside = [p for p in points if p[0] >= newest - window_s]
    if len(inside) < 2:
        return None
    span = inside[-1][0] - inside[0][0]
    return _Window(inside, span) if span > 0 else None


def rate(points: Sequence[tuple[float, float]], window_s: float) -> float | None:
    """Per-second rate over the samples within ``window_s`` of the newest; None with fewer than two."""
    found = _window(points, window_s)
    if found is None:
        return None
    inside, span = found.samples, found.span
    return increase(inside) / span


def rates(points: Sequence[tuple[float, Sequence[float]]], window_s: float) -> list[float] | None:
    """``rate`` of several counters scraped together (a histogram's buckets): ``points`` are (time, one
    cumulative value per counter), oldest first. The same rules and arithmetic as ``rate`` per counter (equal to
    the last bit); one pass over the samples instead of one per bucket, and no list per sample."""
    found = _window(points, window_s)
    if found is None:
        return None
    inside, span = found.samples, found.span
    width = len(inside[0][1])
    ge = operator.ge
    monotone = True
    for (_, before), (_, after) in itertools.pairwise(inside):
        if len(after) != width:
            raise ValueError(f"samples of {width} and {len(after)} counters")
        if monotone and not all(map(ge, after, before)):
            monotone = False
    if monotone:  # the usual case: no counter was reset inside the window (one pass, no lists per sample)
        return [(newest - oldest) / span for oldest, newest in zip(inside[0][1], inside[-1][1], strict=True)]
    # Some counter was reset: each by ``rate``'s own rule (rare: a server restarted inside the window).
    return [_increase(column) / span for column in zip(*(values for _, values in inside), strict=True)]


def add_buckets(into: dict[float, float], buckets: Mapping[float, float]) -> None:
    """Sum ``buckets`` (upper bound -> cumulative count or rate) into ``into`` (several pods' histograms)."""
    for bound, count in buckets.items():
        into[bound] = into.get(bound, 0.0) + count


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """The ``q`` quantile of cumulative ``buckets`` (upper bound -> count of observations <= it), as PromQL's
    ``histogram_quantile``; NaN without a ``+Inf`` bucket or without observations."""
    if INF not in buckets or not 0 <= q <= 1:
        return math.nan
    bounds = sorted(buckets)
    counts: list[float] = []
    running = 0.0
    for bound in bounds:
        running = max(running, buckets[bound])  # cumulative counts never decrease (scrapes are not atomic)
        counts.append(running)
    total = counts[-1]
    if total <= 0:
        return math.nan
    rank = q * total
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(bounds) - 1:
        return bounds[-2] if len(bounds) > 1 else math.nan
    upper = bounds[index]
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = bounds[index - 1], counts[index - 1]
    inside = counts[index] - below
    if inside <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / inside
