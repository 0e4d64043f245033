"""Sizing a serving fleet to a latency objective: the pieces the ``slo`` and ``disaggregated`` policy types share.

Pure functions of numbers (no signals, no configs): each policy type reads its own signals and passes the
quantities here, so one rule serves both, and a change to a rule changes both.

- **Learned capacity** (``queued_on_every_replica``, ``capacity_alpha``, ``learn_capacity_scale``): what a
  replica (an LWS group) serves while requests wait on every one of them is its capacity.
- **Utilization at the SLO from the latency headroom** (``learn_utilization``): the fraction of the learned
  capacity a replica may run at and keep the objective, lowered while the measured quantile is at risk,
  recovered and probed upward while it is comfortably met.
- **The prefill queue per replica** (``lengths_from_histogram``, ``prefill_utilization_at_objective``): behind
  random routing each replica's prefill is an M/G/1 queue whose service times are the prompt lengths over the
  prefill rate; the Pollaczek–Khinchine waiting time gives the utilization at which the objective holds.
- **Demand over the cold start** (``trend_and_burst``, ``largest_rise``, ``seasonal``, ``lookback``): the
  forecast that may only add capacity ahead of need, and the largest rise a released replica would miss.
- **The quantile of a sum of independent latencies** (``quantile_of_sum``, ``supported_quantile_of_sum``): what users
  feel when a server's TTFT starts after its queue time (JetStream), from the two histograms.
- **Demand's recurrence against the lead** (``recurrence``): how often, how soon and at what cost in missed
  requests demand needing a replica came back after it fell below it; the ``slo`` type's opt-in scale-down rule.

This module deliberately knows nothing of a policy's config or state types: those stay with the type.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from autoscaler.core import counters, fast

#: A latency quantile at or above this fraction of its objective puts the SLO at risk. Design constant:
#: the loop must act before the target is crossed, since the quantile is measured over a trailing window.
RISK_FRACTION = 0.8
#: At or below this fraction of the objective the SLO is comfortably met and ``c`` may recover.
RELAX_FRACTION = 0.5
#: Time constant (s) of the capacity average over saturated samples: converges within a few minutes.
CAPACITY_TAU_S = 60.0
#: Time constant (s) of ``c`` recovering toward ``targetUtilization`` once the SLO is comfortably met.
RECOVER_TAU_S = 300.0
#: Time constant (s) of ``c`` dropping while the SLO is at risk (at an excess of 1.0 over the risk line).
DROP_TAU_S = 30.0
#: The learned capacity scale stays within these bounds of the prior (a broken metric cannot run it away).
CAPACITY_SCALE_BOUNDS = (0.2, 5.0)
#: The utilization at the SLO never drops below this (a queue that never drains would otherwise ask for
#: unbounded replicas; ``maxReplicas`` bounds it too).
MIN_UTILIZATION = 0.2
#: The upward probe of ``c`` stops here: a replica planned at most at the capacity the model has learned.
PROBE_MAX_UTILIZATION = 1.0
#: Saturation must hold this many evaluations in a row before it teaches capacity (a moment's queue does not).
SATURATED_EVALUATIONS = 3
#: Saturated: at least this many requests waiting per ready replica.
SATURATED_WAITING_PER_REPLICA = 1.0
#: The ready count must have held this long before served rates count as a replica's capacity (rates are
#: averaged over a trailing window; a fresh replica's share is not in it yet).
SETTLE_S = 60.0
#: The largest rise within a cold start is looked for over this many cold starts, and at least
#: ``LOOKBACK_MIN_S``: long enough to have seen the traffic's usual swings (the largest of ~15 rises, not of 5:
#: with 5 the estimate misses the swings that come back every half hour), short enough to forget a day-old one.
LOOKBACK_COLD_STARTS = 15.0
LOOKBACK_MIN_S = 1800.0
#: The short window of burst detection.
BURST_SHORT_S = 20.0
#: Ratios this close to an integer count as that integer (float noise must not add a replica).
EPSILON = 1e-9


def ceil_count(x: float) -> int:
    """Replicas for ``x`` replica-equivalents: the ceiling, with float noise at an integer not adding one."""
    return max(0, math.ceil(x - EPSILON * max(1.0, x))) if x > 0 else 0


# ---------------------------------------------------------------------------------------------------------
# Learned capacity


def queued_on_every_replica(
    waiting: float | None, ready: int, per_replica: Mapping[str, float] | None = None
) -> bool:
    """Requests wait on every ready replica (at least ``SATURATED_WAITING_PER_REPLICA`` each): one sample of
    saturation; ``SATURATED_EVALUATIONS`` in a row make the replicas' served rate their capacity.

    With each replica's own count (``per_replica``, what a pods source scrapes) that is checked replica by
    replica: behind random routing (a ClusterIP Service) a total of ``ready`` waiting is as often a few prompts
    stacked on one replica while the others have room, and the served rate of replicas with room is their
    demand, not their capacity. Without it the total stands for the per-replica counts (an average)."""
    if waiting is None or ready <= 0 or waiting < SATURATED_WAITING_PER_REPLICA * ready:
        return False
    if per_replica:
        return min(per_replica.values()) >= SATURATED_WAITING_PER_REPLICA
    return True


def capacity_alpha(samples: int, dt: float) -> float:
    """The step of the capacity average over ``dt`` seconds (time constant ``CAPACITY_TAU_S``); the first
    saturated sample is taken whole."""
    return 1.0 - math.exp(-dt / CAPACITY_TAU_S) if samples else 1.0


def learn_capacity_scale(kappa: float, *, saturated: bool, served: float | None, settled: bool, alpha: float) -> float:
    """One capacity scale κ (capacity over the prior): ``served`` is what one ready replica serves over its
    prior (tokens/s ÷ prior tokens/s). Saturated, the served rate *is* the capacity: κ moves toward it by
    ``alpha``; not saturated, it is a lower bound: κ rises to it at once. Only on a ``settled`` ready count
    (the rates are trailing averages); kept within ``CAPACITY_SCALE_BOUNDS``. The ``disaggregated`` type
    learns one κ per role the same way."""
    if settled and served is not None:
        if saturated and served > 0:
            kappa += alpha * (served - kappa)
        elif not saturated and served > kappa:
            kappa = served
    low, high = CAPACITY_SCALE_BOUNDS
    return min(high, max(low, kappa))


#: Time constant (s) of the measured prefill rate rising toward what the servers report (estimate: the rate
#: windows are a minute, so three time constants, 95 %, are reached within about three minutes).
PREFILL_RATE_TAU_S = 60.0
#: Prefill seconds per second (summed over the target's replicas) below which the measured rate is unknown:
#: the ratio of two small counters read from different moments of a request (tokens counted at admission or at
#: scheduling, prefill time at its end) is noise (estimate: 3 s of prefill within a one-minute window).
MIN_PREFILL_BUSY = 0.05


def measured_prefill_rate(prompt_tps: float | None, prefill_busy: float | None) -> float | None:
    """Prompt tokens per second of prefill, from what the servers report: the prompt tokens served per second
    over the prefill seconds spent per second (vLLM ``vllm:request_prefill_time_seconds``, TGI
    ``tgi_batch_forward_duration{method="prefill"}``: each histogram's running sum read as a rate). None when
    either is unknown or the prefill was too little busy to measure (``MIN_PREFILL_BUSY``)."""
    if prompt_tps is None or prefill_busy is None or not math.isfinite(prompt_tps) or not math.isfinite(prefill_busy):
        return None
    if prefill_busy < MIN_PREFILL_BUSY or prompt_tps <= 0:
        return None
    return prompt_tps / prefill_busy


def learn_prefill_rate(last: float, measured: float | None, *, prior: float, dt: float) -> float:
    """The prefill rate (prompt tokens/s of one replica while prefilling) the queue model uses. It starts at the
    conservative prior; a measurement above it is approached with time constant ``PREFILL_RATE_TAU_S`` (within
    minutes), one below it is taken at once: the rate is never above what was last measured. An unknown
    measurement keeps the last value. At most ``CAPACITY_SCALE_BOUNDS``' upper bound times the prior (a broken
    metric cannot run it away); no lower bound but what was measured (lower is only safer)."""
    rate = last
    if measured is not None:
        if measured <= last:
            rate = measured
        else:
            rate = last + (1.0 - math.exp(-max(0.0, dt) / PREFILL_RATE_TAU_S)) * (measured - last)
    return min(CAPACITY_SCALE_BOUNDS[1] * prior, rate)


# ---------------------------------------------------------------------------------------------------------
# Utilization at the SLO from the latency headroom


@dataclass(frozen=True, slots=True)
class Headroom:
    """What the latency loop learned this evaluation."""

    #: ``c``: the utilization (of the learned capacity) a replica may run at and keep the objective.
    utilization: float
    #: The highest load per ready replica at which the quantile was comfortably met on a settled count.
    proven: float
    #: ``admitting``: a risk the model was content with would have lowered ``c``, and did not because replicas
    #: asked for wait for Kueue's admission (for the message: what held it).
    held_for_admission: bool = False


def learn_utilization(
    utilization: float,
    proven: float,
    *,
    target: float,
    ratio: float | None,
    latency_unknown: bool,
    demand_zero: bool,
    load: float,
    served_load: float,
    ready: int,
    starting: int,
    settled: bool,
    near_short: bool,
    hysteresis: float,
    dt: float,
    judged_load: float | None = None,
    risk_load: float | None = None,
    spare_evidence: bool = True,
    admitting: int = 0,
) -> Headroom:
    """``c`` after ``dt`` seconds, from the measured latency against the objective (the ``slo`` type's rule 3).

    - ``ratio``: the worst measured quantile over its objective (``None``: no latency configured or known);
      ``latency_unknown``: a configured quantile is unknown (then ``c`` neither recovers nor probes).
    - ``load``/``served_load``: replica-equivalents of learned capacity (with and without the backlog);
      ``ready``/``starting`` replicas; ``settled``: the ready count held for ``SETTLE_S`` with nothing starting.
    - ``near_short``: the served load is near one at which a count was found short (no upward probe there).
    - ``target``: ``targetUtilization``, where ``c`` starts and recovers to; ``hysteresis`` the scale-down band.

    At risk (``ratio ≥ RISK_FRACTION``) with nothing starting and a model that thought the ready replicas
    enough, ``c`` drops in proportion to the excess and to the time elapsed (the quantile lags by its window:
    a per-evaluation step would crash ``c`` before new capacity could show in it). A risk the model already
    explains (it asks for more) is under-provisioning, not a model error. Comfortably met (``≤
    RELAX_FRACTION``, or no demand at all), ``c`` recovers toward ``target`` (``RECOVER_TAU_S``) and probes
    upward to ``proven / (1 − hysteresis)`` (at most ``PROBE_MAX_UTILIZATION``), so a scale-down goes at most to
    a utilization seen to hold the objective. A risk withdraws what was proven.
    ``judged_load``: the load the quantile is evidence of, when it is not ``load`` (the ``slo`` type's
    ``proveOverWindow``: the lowest load over the quantile's window); only it may be proven.
    ``risk_load``: the load a quantile at risk is judged at, when it is not ``load`` (the ``slo`` type's
    ``breachOverWindow``: the highest load over the quantile's window); the model is content when it needed no more
    than the ready replicas there.
    ``spare_evidence``: False while the measured quantile is no evidence of capacity to spare (the ``slo`` type's
    ``observedAtEnd``: requests that waited have not all been observed yet); then ``c`` neither recovers nor probes,
    and a risk still lowers it.
    ``admitting``: replicas asked for that wait for Kueue's admission (the ``slo`` type's ``waitForAdmission``).
    Like starting ones they are the answer to the risk already given: until they serve, a risk persisting is the
    same evidence again, not a new measure of ``c``, so ``c`` does not fall (it still recovers and probes)."""
    c = utilization
    at_risk = ratio is not None and ratio >= RISK_FRACTION
    h = hysteresis
    model_content = ceil_count((load if risk_load is None else risk_load) / c) <= ready
    would_drop = at_risk and starting == 0 and model_content
    if would_drop and admitting == 0 and ratio is not None:
        c *= math.exp(-(dt / DROP_TAU_S) * min(1.0, ratio - RISK_FRACTION))
    elif (
        spare_evidence
        and not latency_unknown
        and ((ratio is not None and ratio <= RELAX_FRACTION) or (ratio is None and demand_zero))
    ):
        if c < target:
            c = target - (target - c) * math.exp(-dt / RECOVER_TAU_S)
        # The upward probe: a conservative prior (or targetUtilization) is never corrected by saturation,
        # since the policy avoids it. Where the quantile is comfortably met while the replicas run in the
        # upper part of the hysteresis band (load per replica above c·(1 − hysteresis)), c may rise to
        # what that utilization allows, so that a scale-down goes at most to a utilization seen to hold
        # the objective. Bounded: never above 1 (the learned capacity), only on a settled count with
        # nothing starting, never near a load where a count was found short.
        if ratio is not None and settled and not near_short:
            proven = max(proven, (load if judged_load is None else judged_load) / ready)
            ceiling = min(PROBE_MAX_UTILIZATION, proven / (1.0 - h))
            if ceiling > c:
                c = ceiling - (ceiling - c) * math.exp(-dt / RECOVER_TAU_S)
    if at_risk and ready > 0:
        # A utilization at risk is not proven: the probe restarts below it.
        proven = min(proven, load / ready * (1.0 - h))
    c = min(max(target, PROBE_MAX_UTILIZATION), max(MIN_UTILIZATION, c))
    return Headroom(c, proven, held_for_admission=would_drop and admitting > 0)


# ---------------------------------------------------------------------------------------------------------
# What a latency window is evidence of (``latencyEvidence``)

#: One-sided confidence with which a window's observations must support a latency quantile before it counts as
#: measured: the conventional 95 % of a one-sided test (estimate; no trace was looked at to choose it).
QUANTILE_CONFIDENCE = 0.95


@fast.memoized(maxsize=1024)
def supported_rank(n: int, q: float, confidence: float = QUANTILE_CONFIDENCE) -> int:
    """The largest rank ``k`` (1-based, 0 when none) of ``n`` observations whose order statistic ``X_(k)`` is at
    most the true ``q`` quantile with probability at least ``confidence``: ``P(X_(k) ≤ ξ_q) = P(Binomial(n, q)
    ≥ k)`` whatever the distribution (the distribution-free confidence bound of a quantile by order statistics;
    source: David and Nagaraja, *Order Statistics*, 3rd ed., §7.1). The tail is summed in log space from the top."""
    if n <= 0 or not 0 < q < 1:
        return 0
    lq, lp = math.log(q), math.log1p(-q)
    lgn = math.lgamma(n + 1)
    tail = 0.0
    for k in range(n, 0, -1):
        tail += math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lp)
        if tail >= confidence:
            return k
    return 0


def supported_quantile(
    histogram: Mapping[float, float], q: float, window_s: float, confidence: float = QUANTILE_CONFIDENCE
) -> float | None:
    """The ``q`` quantile that a window's observations support at ``confidence``: the lower confidence bound
    ``X_(k)`` (``supported_rank``) read from cumulative ``histogram`` buckets (upper bound -> observations per
    second at or below it, ``+Inf`` included) as ``histogram_quantile`` reads a rank, the counts being the rates
    times ``window_s``. With many observations it is the point estimate's within a few ranks; with few, a
    ``p99`` is no longer the largest one: one slow request among twenty is what a 1 % tail gives by chance
    (``P = 1 − 0.99²⁰ ≈ 18 %``), two are not. None without observations, or when even the smallest of them is
    not supported (then nothing is measured)."""
    total = histogram.get(math.inf, 0.0)
    n = round(total * window_s)
    if not total > 0 or n <= 0 or window_s <= 0:
        return None
    k = supported_rank(n, q, confidence)
    if k <= 0:
        return None
    value = counters.histogram_quantile(k / n, histogram)
    return None if math.isnan(value) else value


# ---------------------------------------------------------------------------------------------------------
# The quantile of a sum of two independent latencies (``ttftAfterQueue``)


@dataclass(frozen=True, slots=True)
class _Bucket:
    """One histogram bucket with observations: ``(lo, hi]`` and its share of them."""

    lo: float
    hi: float
    share: float


def _buckets(histogram: Mapping[float, float]) -> tuple[tuple[_Bucket, ...], float]:
    """The finite buckets with observations of cumulative ``histogram`` (the first is ``(0, hi]``, as
    ``counters.histogram_quantile`` reads it) and the share of the observations above the last finite bound."""
    total = histogram.get(math.inf, 0.0)
    out: list[_Bucket] = []
    lo = below = 0.0
    for hi in sorted(histogram):
        if math.isinf(hi):
            break
        here = max(0.0, histogram[hi] - below)
        below = max(below, histogram[hi])
        if here > 0 and total > 0:
            out.append(_Bucket(min(lo, hi), hi, here / total))
        lo = hi
    return tuple(out), max(0.0, total - below) / total if total > 0 else 0.0


def _at_or_below(z: float, w1: float, w2: float) -> float:
    """``P(U + V ≤ z)`` for ``U`` uniform on ``[0, w1]`` and ``V`` on ``[0, w2]``, independent (a width of 0: a
    point)."""
    if z <= 0:
        return 0.0
    if z >= w1 + w2:
        return 1.0
    if w1 <= 0 or w2 <= 0:
        return z / (w1 + w2)

    def area(t: float) -> float:  # the integral of min(max(τ, 0), w2) dτ up to t
        return 0.0 if t <= 0 else t * t / 2 if t <= w2 else w2 * w2 / 2 + w2 * (t - w2)

    return (area(z) - area(z - w1)) / (w1 * w2)


def _sum_at_or_below(x: float, first: tuple[_Bucket, ...], second: tuple[_Bucket, ...]) -> float:
    """The share of ``X + Y`` at or below ``x``, ``X`` and ``Y`` independent, each uniform within its buckets."""
    return sum(
        a.share * b.share * _at_or_below(x - a.lo - b.lo, a.hi - a.lo, b.hi - b.lo) for a in first for b in second
    )


def quantile_of_sum(
    first: Mapping[float, float], second: Mapping[float, float], fraction: float, *, within: Within = "uniform"
) -> float:
    """The ``fraction`` quantile of ``X + Y`` where ``X`` and ``Y`` are independent with the distributions of
    cumulative histograms ``first`` and ``second`` (upper bound -> observations or their rate at or below it, ``+Inf``
    included), each uniform within its buckets: the model ``histogram_quantile`` reads one histogram with (linear
    within a bucket), applied to the sum (a convolution). NaN without observations in either. A rank in the
    observations above the last finite bounds gives the sum of those bounds (as ``histogram_quantile`` gives the
    last finite bound).

    Why independent: a server's queue is FIFO ahead of the request's own service (JetStream's prefill backlog ahead
    of its prefill thread), so the wait is a function of the requests ahead of it and not of its own prompt
    (Lindley's recursion, ``W(n+1) = max(0, W(n) + S(n) − A(n+1))``); the per-request pairs are not exported,
    only the two histograms. Where the two are positively dependent (a long prompt also waits longer, e.g. for KV
    room) the quantile of the sum is higher than this.

    ``within="exponential"`` reads each bucket as an exponential fitted from its neighbours' counts
    (``bucket_pieces``) in place of uniform."""
    if within != "uniform":
        return _quantile_of_sum_pieces(first, second, fraction, within)
    a, a_inf = _buckets(first)
    b, b_inf = _buckets(second)
    if (not a and not a_inf) or (not b and not b_inf):
        return math.nan
    a_top = max((x.hi for x in a), default=0.0)
    b_top = max((x.hi for x in b), default=0.0)
    top = a_top + b_top
    if not a or not b or _sum_at_or_below(top, a, b) < fraction - 1e-12:
        return top
    # The share at or below x is continuous and non-decreasing: bracket the rank between bucket edges, then bisect.
    edges = sorted({x.lo + y.lo for x in a for y in b} | {x.hi + y.hi for x in a for y in b}
                   | {x.lo + y.hi for x in a for y in b} | {x.hi + y.lo for x in a for y in b})
    i = bisect.bisect_left(edges, fraction, key=lambda e: _sum_at_or_below(e, a, b))
    hi = edges[min(i, len(edges) - 1)]
    lo = edges[i - 1] if i > 0 else 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _sum_at_or_below(mid, a, b) < fraction:
            lo = mid
        else:
            hi = mid
    return hi


def supported_quantile_of_sum(
    first: Mapping[float, float], second: Mapping[float, float], q: float, window_s: float,
    confidence: float = QUANTILE_CONFIDENCE, *, within: Within = "uniform",
) -> tuple[float, int] | None:
    """``supported_quantile`` for the sum of two independent latencies (``quantile_of_sum``): the ``q`` quantile
    of ``X + Y`` that a window's observations support at ``confidence``, and their number. The number is the smaller
    of the two histograms' (each request is observed once in each; the one observed later has fewer of the window's
    requests). None without observations, or when even the smallest is not supported."""
    n = round(min(first.get(math.inf, 0.0), second.get(math.inf, 0.0)) * window_s)
    if n <= 0 or window_s <= 0:
        return None
    k = supported_rank(n, q, confidence)
    if k <= 0:
        return None
    value = quantile_of_sum(first, second, k / n, within=within)
    return None if math.isnan(value) else (value, n)


# ---------------------------------------------------------------------------------------------------------
# The reading within a bucket: an exponential fitted from the neighbouring buckets' counts

#: How ``quantile_of_sum`` reads the observations within a histogram bucket. ``"uniform"``: spread evenly, as
#: ``histogram_quantile`` reads a bucket. ``"exponential"``: a density ``∝ e^(−θx)`` within the bucket (falling
#: for ``θ > 0``, rising for ``θ < 0``), ``θ`` fitted from the counts of the bucket and its two neighbours
#: (``fitted_rate``), the bucket's own count kept: a latency's density falls through its tail, and a wide bucket
#: read flat puts its observations too high where it does (docs/slo.md, Session 29).
Within = Literal["uniform", "exponential"]
#: A bucket read as exponential is cut, for the convolution, at this many equal shares and at this many equal
#: widths (both sets of cuts), each stretch read uniform within itself: the reading's discretization, not a model
#: parameter (estimate: with 8 each quantile within the bucket stays within 1 % of the bucket's width of the exact
#: exponential's for θ × width up to 6, ``tests/core/test_sizing.py``; equal shares alone leave the last stretch
#: wide where the density falls steeply).
EXPONENTIAL_PIECES = 8
#: The fitted ``θ`` is searched within ±this over the span of the cells it is fitted on (``e^±40``: as steep as
#: counts can say; an optimum at the bound means all of the bucket's observations at one of its ends).
_RATE_SPAN_BOUND = 40.0


@dataclass(frozen=True, slots=True)
class _Cell:
    """A histogram bucket ``(lo, hi]`` and its observations (counts or rates: the fit is the same for both)."""

    lo: float
    hi: float
    n: float


def _log_integral(theta: float, width: float) -> float:
    """``log ∫_0^width e^(−θt) dt``, stable for either sign of ``θ`` and for ``θ`` near 0."""
    x = theta * width
    if abs(x) < 1e-12:
        return math.log(width)
    if theta > 0:
        return math.log(-math.expm1(-x)) - math.log(theta)
    return -x + math.log(-math.expm1(x)) - math.log(-theta)


def _log_likelihood(theta: float, cells: Sequence[_Cell]) -> float:
    """The log-likelihood of the cells' counts under a density ``∝ e^(−θx)`` on their span (multinomial)."""
    x0 = cells[0].lo
    logs = [-theta * (c.lo - x0) + _log_integral(theta, c.hi - c.lo) for c in cells]
    top = max(logs)
    total = top + math.log(sum(math.exp(v - top) for v in logs))
    return sum(c.n * (v - total) for c, v in zip(cells, logs, strict=True) if c.n > 0)


def fitted_rate(cells: Sequence[tuple[float, float, float]]) -> float:
    """The rate ``θ`` (1/s) of a density ``∝ e^(−θx)`` on contiguous ``cells`` (``(lo, hi, observations)``, lowest
    first, each of positive width), fitted to their counts by maximum likelihood (the multinomial of grouped
    observations; source: Kulldorff, *Contributions to the theory of estimation from grouped and partially grouped
    samples*, 1961, which treats the exponential). Golden-section search on ``θ × span`` within
    ``±_RATE_SPAN_BOUND`` (the likelihood was unimodal in θ in 20,000 random bucket layouts and counts; a
    property test checks the optimum against a grid). 0 with no observation, or one cell only (nothing to
    fit a slope on: the uniform reading)."""
    cs = [_Cell(lo, hi, n) for lo, hi, n in cells if hi > lo]
    if len(cs) < 2 or not sum(c.n for c in cs) > 0:
        return 0.0
    span = cs[-1].hi - cs[0].lo
    lo, hi = -_RATE_SPAN_BOUND, _RATE_SPAN_BOUND
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = _log_likelihood(a / span, cs), _log_likelihood(b / span, cs)
    while hi - lo > 1e-4:  # θ to 1e-4 / span: the shares it gives change by less than 1e-4 of the bucket's
        if fa < fb:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = _log_likelihood(b / span, cs)
        else:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = _log_likelihood(a / span, cs)
    return (lo + hi) / 2 / span


@dataclass(frozen=True, slots=True)
class _Piece:
    """A stretch of a histogram read uniform within itself: ``(lo, hi]`` and its share of the observations."""

    lo: float
    hi: float
    share: float


def _exponential_pieces(lo: float, hi: float, share: float, theta: float) -> list[_Piece]:
    """A bucket ``(lo, hi]`` holding ``share``, read with a density ``∝ e^(−θx)``, cut at ``EXPONENTIAL_PIECES``
    equal shares and as many equal widths into stretches each read uniform, with the exponential's share."""
    w = hi - lo
    if w <= 0 or abs(theta * w) < 1e-9:
        return [_Piece(lo, hi, share)]
    m = EXPONENTIAL_PIECES
    whole = math.expm1(-theta * w)

    def below(x: float) -> float:  # the truncated exponential's share of the bucket at or below x
        return math.expm1(-theta * (x - lo)) / whole

    cuts = {lo - math.log1p(j / m * whole) / theta for j in range(1, m)} | {lo + j * w / m for j in range(1, m)}
    edges = [lo, *sorted(c for c in cuts if lo < c < hi), hi]
    out: list[_Piece] = []
    for x, y in itertools.pairwise(edges):
        if y - x > 1e-12 * w:
            out.append(_Piece(x, y, share * (below(y) - below(x))))
    return out


def bucket_pieces(histogram: Mapping[float, float], within: Within) -> tuple[tuple[_Piece, ...], float]:
    """Cumulative ``histogram``'s finite buckets with observations as stretches read uniform (one per bucket for
    ``"uniform"``; ``EXPONENTIAL_PIECES`` per bucket for ``"exponential"``, with the bucket's ``θ`` fitted on
    it and its two neighbours, empty ones included), and the share above the last finite bound. The first bucket
    is ``(0, hi]``, as ``counters.histogram_quantile`` reads it."""
    total = histogram.get(math.inf, 0.0)
    cells: list[_Cell] = []
    lo = below = 0.0
    for hi in sorted(histogram):
        if math.isinf(hi):
            break
        here = max(0.0, histogram[hi] - below)
        below = max(below, histogram[hi])
        cells.append(_Cell(min(lo, hi), hi, here))
        lo = hi
    if not total > 0:
        return (), 0.0
    out: list[_Piece] = []
    for i, c in enumerate(cells):
        if not c.n > 0:
            continue
        share = c.n / total
        if within == "uniform":
            out.append(_Piece(c.lo, c.hi, share))
            continue
        near = cells[max(0, i - 1):i + 2]
        theta = fitted_rate([(x.lo, x.hi, x.n) for x in near])
        out.extend(_exponential_pieces(c.lo, c.hi, share, theta))
    return tuple(out), max(0.0, total - below) / total


class _Integrated:
    """``G(t) = ∫_−∞^t F(s) ds`` of the distribution of ``pieces`` (sorted, not overlapping): with it the share of
    ``X + Y`` at or below ``x`` for ``X`` uniform on ``(a, b]`` is ``(G(x − a) − G(x − b)) / (b − a)``."""

    __slots__ = ("_f", "_g", "_lo", "_pieces")

    def __init__(self, pieces: Sequence[_Piece]) -> None:
        self._pieces = pieces
        self._lo = [p.lo for p in pieces]
        self._f: list[float] = []
        self._g: list[float] = []
        f = g = 0.0
        last = pieces[0].lo if pieces else 0.0
        for p in pieces:
            g += f * (p.lo - last)  # across a gap F is flat
            self._f.append(f)
            self._g.append(g)
            g += f * (p.hi - p.lo) + p.share * (p.hi - p.lo) / 2
            f += p.share
            last = p.hi

    def cdf(self, t: float) -> float:
        j = bisect.bisect_right(self._lo, t) - 1
        if j < 0:
            return 0.0
        p = self._pieces[j]
        if t >= p.hi:
            return self._f[j] + p.share
        return self._f[j] + p.share * (t - p.lo) / (p.hi - p.lo)

    def at(self, t: float) -> float:
        j = bisect.bisect_right(self._lo, t) - 1
        if j < 0:
            return 0.0
        p = self._pieces[j]
        f, g = self._f[j], self._g[j]
        if t <= p.hi:
            return g + f * (t - p.lo) + (p.share * (t - p.lo) ** 2 / (2 * (p.hi - p.lo)) if p.hi > p.lo else 0.0)
        return g + f * (p.hi - p.lo) + p.share * (p.hi - p.lo) / 2 + (f + p.share) * (t - p.hi)


def _quantile_of_sum_pieces(first: Mapping[float, float], second: Mapping[float, float], fraction: float,
                            within: Within) -> float:
    """``quantile_of_sum`` with each histogram read ``within`` its buckets (``bucket_pieces``): the share of the sum
    at or below ``x`` is ``Σ_a share_a × E[F_Y(x − U_a)]`` over ``X``'s stretches ``a`` (``U_a`` uniform on one),
    from ``Y``'s integrated distribution (``_Integrated``); bisected to the rank."""
    a, a_inf = bucket_pieces(first, within)
    b, b_inf = bucket_pieces(second, within)
    if (not a and not a_inf) or (not b and not b_inf):
        return math.nan
    top = max((p.hi for p in a), default=0.0) + max((p.hi for p in b), default=0.0)
    if len(b) < len(a):
        a, b = b, a  # the cost is the outer one's stretches
    if not a or not b:
        return top
    y = _Integrated(b)

    y_lo, y_hi, y_all = b[0].lo, b[-1].hi, sum(p.share for p in b)

    def at_or_below(x: float) -> float:
        total = 0.0
        for p in a:
            if x - p.lo <= y_lo:
                break  # this stretch and those above it: the sum is not yet reached
            if x - p.hi >= y_hi:
                total += p.share * y_all
            elif p.hi > p.lo:
                total += p.share * (y.at(x - p.lo) - y.at(x - p.hi)) / (p.hi - p.lo)
            else:
                total += p.share * y.cdf(x - p.lo)
        return total

    if at_or_below(top) < fraction - 1e-12:
        return top
    lo, hi = 0.0, top
    while hi - lo > 1e-6:  # bisected to a microsecond
        mid = (lo + hi) / 2
        if at_or_below(mid) < fraction:
            lo = mid
        else:
            hi = mid
    return hi


# ---------------------------------------------------------------------------------------------------------
# The prefill queue per replica (M/G/1, Pollaczek–Khinchine)


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length distribution (tokens) read from a histogram's buckets."""

    #: Per bucket with observations: (representative length, share of the observations).
    points: tuple[tuple[float, float], ...]
    #: E[L] and E[L²].
    mean: float
    second: float
    #: Observations per second the buckets held (the histogram's ``+Inf`` rate).
    rate: float


def lengths_from_histogram(histogram: Mapping[float, float]) -> Lengths | None:
    """The distribution in cumulative ``histogram`` buckets (upper bound -> observations at or below it, ``+Inf``
    included), or None without observations. Within a bucket ``(lo, hi]`` the lengths are taken as uniform on a
    log scale (density ∝ 1/L: mean ``(hi − lo) / ln(hi/lo)``, second moment ``(hi² − lo²) / (2·ln(hi/lo))``), the
    shape geometric buckets (vLLM's 1-2-5, JetStream's powers of two) are laid out for and that right-skewed
    prompt lengths have within a bucket; for narrow linear buckets (TGI's) it is the uniform one within a
    fraction of a percent. An estimate either way, off by at most the bucket's width. The first bucket ``(0, hi]``
    as uniform; the ``+Inf`` bucket as its lower bound (an under-estimate: servers bound it by the context)."""
    total = histogram.get(math.inf, 0.0)
    if not total > 0:
        return None
    points: list[tuple[float, float]] = []
    mean = second = 0.0
    lo, below = 0.0, 0.0
    for hi in sorted(histogram):
        here = max(0.0, histogram[hi] - below)
        below = max(below, histogram[hi])
        if here > 0:
            share = here / total
            if math.isinf(hi):
                mid, sq = lo, lo * lo
            elif lo > 0:
                span = math.log(hi / lo)
                mid, sq = (hi - lo) / span, (hi * hi - lo * lo) / (2 * span)
            else:
                mid, sq = hi / 2, hi * hi / 3
            points.append((mid, share))
            mean += share * mid
            second += share * sq
        if not math.isinf(hi):
            lo = hi
    if not mean > 0:
        return None
    return Lengths(tuple(points), mean, second, total)


def prefill_miss(
    rho: float, lengths: Lengths, tokens_per_second: float, ttft_s: float, burstiness: float = 1.0
) -> float:
    """The share of requests whose TTFT exceeds ``ttft_s`` on one replica whose prefill runs at utilization
    ``rho``, its own prefill plus its wait in the prefill queue, modelled as M/G/1 (Poisson arrivals: a random
    share of a Poisson stream behind random routing is Poisson; service ``L / tokens_per_second`` for a prompt
    of ``L`` tokens, one prompt at a time), or as G/G/1 with ``burstiness`` > 1 (below).

    The wait: ``P(W > 0) = ρ`` (exact for M/G/1), and, waiting, exponential with the Pollaczek–Khinchine mean
    ``E[S²] / (2·E[S]·(1 − ρ))`` (exact for exponential service; the standard approximation of the M/G/1 tail:
    Kingman, "On queues in heavy traffic", 1962): ``P(W > t) ≈ ρ·exp(−t·(1 − ρ) / r)`` with
    ``r = E[S²] / (2·E[S])``. A request misses when its wait exceeds what its own prefill leaves of ``ttft_s``,
    so the sum runs over the prompt lengths: long prompts have less slack. Other delays (decode steps, a slot)
    are the latency loop's (``learn_utilization``).

    Bursty arrivals (G/G/1): Kingman's approximation of the mean wait, ``E[W] ≈ ρ/(1 − ρ) · E[S] · (c_a² +
    c_s²)/2`` (J. F. C. Kingman, "The single server queue in heavy traffic", Proc. Cambridge Philosophical
    Society 57(4), 1961), is the Pollaczek–Khinchine mean times ``(c_a² + c_s²)/(1 + c_s²)``. Measured as the
    prompt work's index of dispersion over its compound-Poisson value (``burstiness``, ``work_burstiness``:
    ``c_a² + c_s² ≈ I_w / E[S]``, the index of dispersion for work of K. W. Fendick and W. Whitt,
    "Measurements and approximations to describe the offered traffic and predict the average workload in a
    single-server queue", Proc. IEEE 77(1), 1989), that factor is ``burstiness`` itself: it scales ``r``."""
    residual = max(1.0, burstiness) * lengths.second / (2.0 * lengths.mean * tokens_per_second)
    miss = 0.0
    for length, share in lengths.points:
        slack = ttft_s - length / tokens_per_second
        if slack < 0:
            miss += share
        elif rho > 0:
            miss += share * min(1.0, rho * math.exp(-slack * (1.0 - rho) / residual))
    return miss


def prefill_utilization_at_objective(
    lengths: Lengths, tokens_per_second: float, ttft_s: float, percentile: float, burstiness: float = 1.0
) -> float:
    """The highest prefill utilization of one replica (``prefill_miss``) at which at most ``1 − percentile`` of
    requests miss ``ttft_s``, beyond those whose own prefill alone exceeds it (no replica count helps them).
    Bisection on ρ (``prefill_miss`` grows with ρ); at least ``MIN_UTILIZATION``, at most 1. Cached on what the
    miss depends on (the shares and moments, not the observation rate): successive evaluations usually read the
    same window's buckets."""
    return _utilization_at_objective(
        Lengths(lengths.points, lengths.mean, lengths.second, 0.0), tokens_per_second, ttft_s, percentile,
        max(1.0, burstiness),
    )


@fast.memoized(maxsize=256)
def _utilization_at_objective(
    lengths: Lengths, tokens_per_second: float, ttft_s: float, percentile: float, burstiness: float
) -> float:
    budget = (1.0 - percentile) + prefill_miss(0.0, lengths, tokens_per_second, ttft_s)
    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        if prefill_miss(mid, lengths, tokens_per_second, ttft_s, burstiness) <= budget:
            low = mid
        else:
            high = mid
    return max(MIN_UTILIZATION, low)


# ---------------------------------------------------------------------------------------------------------
# Bursty arrivals: the prompt work's index of dispersion, measured


#: Time constant (s) of the burstiness averaged over the measurements (``estimate``: one measurement is a few
#: dozen window differences, so a few of them are averaged; and a few cold starts, so that a burst's measurement
#: outlives the burst by more than a replica takes to start).
BURSTINESS_TAU_S = 300.0
#: The burstiness before it is measured (``estimate``: the conservative prior, twice the compound-Poisson
#: dispersion; the measurement replaces it within a few ``BURSTINESS_TAU_S``).
BURSTINESS_PRIOR = 2.0
#: The prompt work of the last this many seconds measures the burstiness (``estimate``: long enough for a few
#: dozen window differences, short enough to follow the traffic's hour).
BURSTINESS_SPAN_S = 300.0
#: Window differences below which the burstiness is not measured (``estimate``: fewer are noise).
MIN_BURST_DIFFERENCES = 12


@dataclass(frozen=True, slots=True)
class WorkSample:
    """The prompt tokens that arrived within one short window ending at ``t`` (a counter's rate times its window)."""

    t: float
    tokens: float


def work_burstiness(samples: Sequence[WorkSample], window_s: float, lengths: Lengths) -> float | None:
    """The prompt work's dispersion over what a Poisson stream of the same prompts would have: the Allan
    factor of the tokens per window, ``E[(X(t) − X(t − w))²] / (2·E[X])`` over windows ``w`` apart (so that they
    do not overlap; a level that changes slowly cancels in the difference: D. W. Allan, "Statistics of atomic
    frequency standards", Proc. IEEE 54(2), 1966; as the Allan factor of point-process counts in S. B. Lowen and
    M. C. Teich, "Fractal-Based Point Processes", Wiley 2005), over its compound-Poisson value ``E[L²]/E[L]``
    (the prompt lengths' moments from the histogram). 1 for Poisson arrivals of any prompt lengths; above 1 when
    prompts come in bursts within the window. None with fewer than ``MIN_BURST_DIFFERENCES`` pairs or no work."""
    if not (window_s > 0 and lengths.mean > 0):
        return None
    pairs: list[float] = []
    mean_sum = 0.0
    j = 0
    for x in samples:
        # The newest earlier sample at least one window before x (samples are oldest first).
        while j + 1 < len(samples) and samples[j + 1].t <= x.t - window_s + EPSILON:
            j += 1
        y = samples[j]
        if y.t <= x.t - window_s + EPSILON and x.t - y.t < 2 * window_s:
            pairs.append((x.tokens - y.tokens) ** 2)
            mean_sum += (x.tokens + y.tokens) / 2
    if len(pairs) < MIN_BURST_DIFFERENCES or not mean_sum > 0:
        return None
    allan = math.fsum(pairs) / (2.0 * mean_sum)
    return allan / (lengths.second / lengths.mean)


def learn_burstiness(last: float, measured: float | None, *, dt: float) -> float:
    """The burstiness the queue models use: an average of the measurements with time constant
    ``BURSTINESS_TAU_S`` (one measurement is noisy: taking each rise at once would keep the largest noise);
    an unknown measurement keeps the last. Never below 1 (Poisson's: missing or low data never means less
    capacity than the M/G/1 model gave)."""
    b = last
    if measured is not None and math.isfinite(measured):
        b = last + (1.0 - math.exp(-max(0.0, dt) / BURSTINESS_TAU_S)) * (measured - last)
    return max(1.0, b)


def split_burstiness(burstiness: float, replicas: int) -> float:
    """The burstiness of one replica's share when a Service spreads the stream at random over ``replicas``:
    ``1 + (b − 1)/n`` (a random split of a stream: its share ``p = 1/n`` has index of dispersion
    ``p·I + (1 − p)`` relative to Poisson; W. Whitt, "The Queueing Network Analyzer", Bell System Technical
    Journal 62(9), 1983, the splitting equation)."""
    return 1.0 + (max(1.0, burstiness) - 1.0) / max(1, replicas)


def peaked_occupancy(
    servers: float, peakedness: float, percentile: float, occupancy: Callable[[int, float], float]
) -> float:
    """The mean occupancy of ``servers`` at which at most ``1 − percentile`` of arrivals find them all taken, for
    an occupancy of variance ``peakedness`` times its mean (1: Poisson): Hayward's approximation, ``z·A(servers /
    z)`` with ``A`` the Poisson occupancy at the objective (``occupancy``; A. A. Fredericks, "Congestion in
    blocking systems — a simple approximation technique", Bell System Technical Journal 59(6), 1980)."""
    z = max(1.0, peakedness)
    if z == 1.0:
        return occupancy(max(1, math.floor(servers + EPSILON)), percentile)
    units = math.floor(servers / z + EPSILON)
    return z * occupancy(units, percentile) if units >= 1 else 0.0


# ---------------------------------------------------------------------------------------------------------
# A wait for a slot, priced against the TTFT slack (M/M/n, Erlang C)


#: Time constant (s) of the slot release rate averaged over its measurements (``estimate``: the prompt-token
#: rate it is measured from is itself a 60 s window; a minute's average keeps one moment's gauge from moving it).
RELEASE_TAU_S = 60.0


def erlang_c(servers: int, offered: float) -> float:
    """The probability that an arrival waits in an M/M/n queue with ``servers`` servers and ``offered`` load
    (``λ/μ``, the mean number of busy servers): Erlang's C formula, through the stable recursion of Erlang's B
    (``B(0) = 1``, ``B(k) = a·B(k−1) / (k + a·B(k−1))``; ``C = n·B / (n − a·(1 − B))``; L. Kleinrock,
    "Queueing Systems", vol. 1, Wiley 1975, §3.5). 1 at or above saturation (``offered ≥ servers``)."""
    if offered <= 0:
        return 0.0
    if servers <= 0 or offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    return min(1.0, servers * b / (servers - offered * (1.0 - b)))


def slot_wait_miss(
    offered: float, servers: int, release_rate: float, slacks: Sequence[tuple[float, float]]
) -> float:
    """The share of requests whose wait for a slot exceeds what the objective leaves them, on one replica with
    ``servers`` usable slots holding ``offered`` sequences on average, each slot freed at ``release_rate`` (per
    slot per second: sequences finishing per running sequence per second, ``1 / time in a slot``).

    M/M/n (Poisson arrivals: a random share of a Poisson stream behind random routing is Poisson; a slot's
    holding time taken as exponential): ``P(wait > t) = C(n, a)·exp(−(n·μ − λ)·t) = C(n, a)·exp(−(n − a)·μ·t)``
    (Kleinrock, as ``erlang_c``). A request meets the TTFT objective if its wait is within its slack, the
    objective less its own prefill (``slacks``: ``(slack seconds, share of requests)``, one per prompt length);
    one whose slack is negative misses whatever the count (no replica helps it). Every wait for a slot counted
    as a miss is the case ``t = 0``, ``C(n, a)``."""
    c = erlang_c(servers, offered)
    miss = 0.0
    for slack, share in slacks:
        if slack < 0:
            miss += share
        elif c > 0:
            miss += share * min(1.0, c * math.exp(-(servers - offered) * release_rate * slack))
    return miss


def occupancy_at_wait_objective(
    servers: int, percentile: float, release_rate: float, slacks: tuple[tuple[float, float], ...]
) -> float:
    """The largest mean occupancy ``a`` (sequences) of ``servers`` slots at which at most ``1 − percentile`` of
    requests wait for a slot longer than their slack (``slot_wait_miss``), beyond those whose own prefill alone
    exceeds the objective. Bisection on ``a`` (the miss grows with ``a``); below ``servers``. Cached: successive
    evaluations ask with the same learned numbers."""
    return _occupancy_at_wait_objective(max(0, servers), percentile, max(0.0, release_rate), slacks)


@fast.memoized(maxsize=512)
def _occupancy_at_wait_objective(
    servers: int, percentile: float, release_rate: float, slacks: tuple[tuple[float, float], ...]
) -> float:
    if servers <= 0:
        return 0.0
    budget = (1.0 - percentile) + math.fsum(share for slack, share in slacks if slack < 0)
    low, high = 0.0, float(servers)
    for _ in range(50):
        mid = (low + high) / 2
        if slot_wait_miss(mid, servers, release_rate, slacks) <= budget:
            low = mid
        else:
            high = mid
    return low


def ttft_slacks(lengths: Lengths, tokens_per_second: float, ttft_s: float) -> tuple[tuple[float, float], ...]:
    """What the objective leaves each prompt length to wait for a slot: ``ttft_s − L / tokens_per_second`` (its
    own prefill at the replica's prefill rate), with the share of requests of that length. Rounded to the
    millisecond and to a thousandth of a share so that successive evaluations of the same buckets ask the cached
    bisection the same question (an estimate off by at most a millisecond)."""
    rate = max(tokens_per_second, EPSILON)
    return tuple((round(ttft_s - length / rate, 3), round(share, 3)) for length, share in lengths.points)


def slot_release_rate(arrivals: float | None, running: float | None) -> float | None:
    """Sequences finishing per running sequence per second: in steady state as many finish as arrive, so
    ``arrivals / running`` (Little's law: the time in a slot is ``running / arrivals``). None when either is
    unknown or not positive (nothing is measured from an idle or unknown pool)."""
    if arrivals is None or running is None or not (arrivals > 0 and running > 0):
        return None
    if not (math.isfinite(arrivals) and math.isfinite(running)):
        return None
    return arrivals / running


def learn_release_rate(last: float | None, measured: float | None, *, dt: float) -> float | None:
    """The slot release rate the wait model uses: an exponential average of the measurements with time constant
    ``RELEASE_TAU_S``, starting at the first one; an unknown measurement keeps the last; None until measured
    (then the slot model counts every wait as a miss: no capacity is taken away on data not seen)."""
    if measured is None:
        return last
    if last is None:
        return measured
    return last + (1.0 - math.exp(-max(0.0, dt) / RELEASE_TAU_S)) * (measured - last)


# ---------------------------------------------------------------------------------------------------------
# Demand over the cold start


@dataclass(frozen=True, slots=True)
class Forecast:
    """The trend and burst forecast of ``trend_and_burst``."""

    #: The load expected at ``now + horizon`` (never below the load now).
    value: float
    #: What raised it, for the message ("" when nothing did).
    text: str
    #: The last time a burst was detected.
    burst_at: float | None
    #: The same forecast extrapolated to ``now + reach`` (never below ``value``).
    further: float
    #: What the forecast grows from: the fitted line's value now when a trend was fitted, never below the load now
    #: (a sample below the line is a dip, not a lower level to grow from); else the load now.
    level: float = 0.0


def lookback(horizon: float) -> float:
    """How far back the largest rise within one cold start is looked for: several cold starts, 10 min at least."""
    return max(LOOKBACK_MIN_S, LOOKBACK_COLD_STARTS * horizon)


def largest_rise(
    history: Sequence[tuple[float, float]], horizon: float, *, from_level: float | None = None,
    ends: Sequence[bool] | None = None, from_below: bool = False,
) -> float:
    """The largest increase of the load within ``horizon`` seconds anywhere in ``history`` (``(t, load)``,
    oldest first; the result is ≥ 0); with ``from_level``, only increases that start from a load at least that,
    and with ``from_below`` also those that start below it, for their part above it.

    What the load did within one cold start before is what it may do again: a replica released now would
    be missing for that long. One pass from the newest sample back, with a monotonic deque of the running
    maximum of the following ``horizon`` seconds.

    ``from_level`` (the ``slo`` type passes the load now): a rise is measured against the level it starts from.
    A climb out of a trough below the load now has partly happened already (from the trough up to now), and
    adding the whole of it to the load now counts that part twice; what the load did within a cold start from
    where it is now, or higher, is what a replica released now is exposed to. The same holds for an occupancy
    gauge filling from empty (servers that start with no sequences climb to their steady occupancy, arrival
    rate × time in system, within the sequences' lifetime: Little's law): that climb starts from nothing, not
    from the load now. At a load higher than any in the history the rise is 0: the hold window's peak and the
    forecast still keep the level now.

    ``ends`` (aligned with ``history``): only rises that end at a sample marked True count (the ``slo`` type's
    ``scaleDown.riseAbsorbed`` splits the rises by whether the count then absorbed them, ``absorbing_counts``).

    ``from_below``: of a climb out of a trough below the load now, the part up to the load now has happened and the
    part above it has not: it counts for its peak less the load now, not for nothing. Work that arrives in bursts
    separated by silence climbs from near zero each time, and a reading at the first samples of the next burst
    (a load a little above the trough) must not forget what the last bursts reached. A gauge that filled from
    empty up to the load now and stays there adds nothing (its peak is the load now).
    """
    best = 0.0
    floor = -math.inf if from_level is None else from_level
    ahead: deque[tuple[float, float]] = deque()  # (t, v) after the current sample, values decreasing
    for i in range(len(history) - 1, -1, -1):
        t, v = history[i]
        while ahead and ahead[0][0] > t + horizon:
            ahead.popleft()
        start = max(v, floor) if from_below else v
        if start >= floor and ahead and ahead[0][1] - start > best:
            best = ahead[0][1] - start
        if ends is None or ends[i]:
            while ahead and ahead[-1][1] <= v:
                ahead.pop()
            ahead.append((t, v))
    return best


def absorbing_counts(
    times: Sequence[float], held: Sequence[bool], ready: Sequence[int], *, before: float, after: float,
) -> list[int | None]:
    """For each sample ``j`` of a history (oldest first): the count that absorbed what the load did up to it, or
    None. A rise ending at ``j`` (within ``before`` seconds: a cold start) was absorbed when every evaluation from
    ``before`` seconds before ``j`` to ``after`` seconds after it (the latency quantile's window, in which the
    requests that arrived at ``j`` are observed) held the SLO (``held``: measured, not missed, no queue held on
    every replica), no two of them further apart than ``after`` (a gap of unknown evaluations is evidence only
    as far as the quantile's window that follows it covers it), and the history reaches that far; the count is
    the highest ready over ``before`` seconds up to ``j`` (a replica that became ready
    during the rise took part in absorbing it). A rise the ready replicas carried with the SLO held is evidence
    that they carry that rise, as a scale-down's count keeps it for (``scaleDown.riseAbsorbed``).

    One pass with two pointers, prefix counts of the evaluations that did not hold, and a monotonic deque of the
    window's highest ready count."""
    n = len(times)
    bad = [0] * (n + 1)  # bad[i]: evaluations before i that did not hold
    for i, ok in enumerate(held):
        gap = i > 0 and times[i] - times[i - 1] > after
        bad[i + 1] = bad[i] + (0 if ok and not gap else 1)
    out: list[int | None] = [None] * n
    lo = hi = 0
    top: deque[int] = deque()  # indices in [lo, j], ready decreasing
    for j in range(n):
        while lo < j and times[lo] < times[j] - before:
            lo += 1
        while top and top[0] < lo:
            top.popleft()
        while top and ready[top[-1]] <= ready[j]:
            top.pop()
        top.append(j)
        while hi < n and times[hi] < times[j] + after:
            hi += 1
        if hi == n:
            continue  # not yet observed for the whole window after it
        if bad[hi + 1] - bad[lo] == 0:
            out[j] = ready[top[0]]
    return out


@dataclass(frozen=True, slots=True)
class Recurrence:
    """How soon demand that needs one more replica comes back after it falls below it (``recurrence``), from
    the policy's own demand history: the k-th replica's case, with ``threshold`` the load ``k − 1`` replicas
    carry at the SLO utilization."""

    #: The load above which the replica is needed.
    threshold: float
    #: Seconds the demand has been at or below ``threshold`` now (0: above it now; a lower bound when the whole
    #: history is below it).
    age: float
    #: Past falls below ``threshold`` that lasted longer than ``age`` and ended (a return was seen): the falls
    #: in which a release now would have been made.
    falls: int
    #: Of those, the ones whose demand came back within ``age + lead``: a release then would have flapped.
    within_lead: int
    #: Had the replica been released after ``age`` in each of those falls, the demand over ``threshold`` (up to
    #: one replica's ``step``) from each return until a replacement was ready (``lead`` later), as a fraction of
    #: all the history's demand: the share of requests the releases would have cost.
    missed: float
    #: The mean seconds from such a release to the return (None: no fall lasted that long): the idle time a
    #: kept replica would have had.
    idle: float | None


def recurrence(
    history: Sequence[tuple[float, float]], *, threshold: float, step: float, lead: float, now: float
) -> Recurrence:
    """Demand's recurrence against the lead time, for releasing the replica needed above ``threshold``.

    ``history`` is ``(t, load)``, oldest first, in replica-equivalents. A *fall* is a run of samples at or below
    ``threshold`` between two above it (a run the history starts in is skipped: its start is unknown; the run
    the history ends in is the one being decided, ``age``). A release made ``age`` seconds into a fall that
    lasts ``g > age`` is followed, at the return, by a replacement that is ready ``lead`` seconds later (it is
    started when the need is seen: the policy scales up on the load, not ahead of a return it cannot see);
    meanwhile the demand above ``threshold`` misses, up to ``step`` (the released replica's share; what a
    further replica would have carried is not this release's doing). Missed demand is counted as missed
    requests, the demand in replica-equivalents standing for the request rate (estimate: the load is the
    largest of its parts, each proportional to the arrivals at a fixed mix). Each sample stands for the time
    to the next one, at most ``lead`` (an unknown stretch in the history is not demand); the last for the
    spacing before it. Counting every fall that outlasts ``age``, not only those that return within the lead,
    covers what the largest rise within a cold start covered: a rise from a lull is a return too.
    """
    n = len(history)
    if n == 0:
        return Recurrence(threshold, 0.0, 0, 0, 0.0, None)
    times = [t for t, _ in history]
    spans = [min(max(0.0, times[i + 1] - times[i]), lead) for i in range(n - 1)]
    spans.append(spans[-1] if spans else 0.0)
    demand = math.fsum(max(0.0, v) * d for (_, v), d in zip(history, spans, strict=True))
    # The demand each sample misses with one replica fewer than needed above ``threshold``.
    over = [min(step, max(0.0, v - threshold)) * d for (_, v), d in zip(history, spans, strict=True)]
    prefix = [0.0]
    for x in over:
        prefix.append(prefix[-1] + x)
    falls: list[tuple[float, int]] = []  # (length, index of the return)
    start: float | None = None
    seen_above = False
    for i, (t, v) in enumerate(history):
        if v > threshold:
            if start is not None:
                falls.append((t - start, i))
            start, seen_above = None, True
        elif start is None and seen_above:
            start = t
    last_below = history[-1][1] <= threshold
    if not last_below:
        age = 0.0
    elif start is not None:
        age = max(0.0, now - start)
    else:  # below for the whole history: at least that long
        age = max(0.0, now - times[0])
    counted = [(g, j) for g, j in falls if g > age]
    within = sum(1 for g, _ in counted if g <= age + lead)
    missed = 0.0
    for _, j in counted:
        end = bisect.bisect_left(times, times[j] + lead, lo=j)
        missed += prefix[end] - prefix[j]
    share = missed / demand if demand > EPSILON else 0.0
    idle = math.fsum(g - age for g, _ in counted) / len(counted) if counted else None
    return Recurrence(threshold, age, len(counted), within, share, idle)


def trend_span(horizon: float) -> float:
    """The window the trend is fitted over and the burst compared with: two cold starts (30 s at least)."""
    return 2 * max(horizon, 30.0)


def fitted_level(samples: Sequence[tuple[float, float]], now: float) -> float | None:
    """The value at ``now`` of the least-squares line through ``samples`` (``(t, load)``), never below 0: the
    estimate of the load's mean now that a ramp does not lag; None with fewer than 4 samples or all at one time
    (as ``trend_and_burst`` fits nothing then)."""
    if len(samples) < 4:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mf = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return None
    slope = sum((t - mt) * (v - mf) for t, v in samples) / var
    return max(0.0, mf + slope * (now - mt))


@dataclass(frozen=True, slots=True)
class RampTrend:
    """A slow ramp's trend (``ramp_trend``): the rise its slope predicts over one cold start."""

    #: The rise over ``horizon`` at the fitted slope (replica-equivalents, > 0).
    rise: float
    #: The window it was fitted over (seconds), its slope and that slope's lower bound (per second).
    window: float
    slope: float
    low: float
    #: The effective number of independent samples (``n·(1 − r1)/(1 + r1)``) the standard error used.
    effective: float


def _autocorrelated_fit(samples: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """The least-squares slope through ``samples`` (``(t, load)``, oldest first), its standard error corrected for
    the residuals' lag-1 autocorrelation ``r1``, and the effective number of samples; None when no slope or no
    error can be had (fewer than 4 samples, all at one time, or an effective count of 2 or fewer).

    An occupancy gauge read every few seconds is not a series of independent draws: a sequence that holds a slot
    for tens of seconds is in many consecutive samples, so the residuals about a line are positively correlated
    and the textbook error of the slope (``σ/√Σ(t − t̄)²``, independent samples) is too small. The standard
    correction for an AR(1) residual (Bartlett 1935; Santer et al. 2000, J. Geophys. Res. 105(D6), eq. 6) replaces
    ``n`` by ``n·(1 − r1)/(1 + r1)`` in the residual variance's degrees of freedom. A negative ``r1`` is taken as
    0 (no credit for anti-correlation)."""
    n = len(samples)
    if n < 4:
        return None
    mt = math.fsum(t for t, _ in samples) / n
    mv = math.fsum(v for _, v in samples) / n
    var = math.fsum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return None
    slope = math.fsum((t - mt) * (v - mv) for t, v in samples) / var
    resid = [v - (mv + slope * (t - mt)) for t, v in samples]
    ss = math.fsum(e * e for e in resid)
    if ss <= EPSILON:  # on the line (within rounding): no noise to correct for
        return slope, 0.0, float(n)
    r1 = max(0.0, math.fsum(a * b for a, b in itertools.pairwise(resid)) / ss)
    effective = n * (1.0 - r1) / (1.0 + r1)
    if effective <= 2.0:
        return None
    return slope, math.sqrt(ss / (effective - 2.0) / var), effective


def ramp_trend(samples: Sequence[tuple[float, float]], now: float, horizon: float, observed: float) -> RampTrend | None:
    """A slow ramp's rise over one cold start ``horizon``, from the trend of ``samples`` (``(t, load)``, oldest
    first, the calm ones) over windows longer than ``trend_and_burst``'s; None: no ramp the samples show.

    ``trend_and_burst`` fits two cold starts. Its slope's standard error falls as the window's length to the power
    3/2, so a ramp that adds a fraction of a replica per cold start is lost in the noise of an occupancy gauge
    over two of them (docs/slo.md, Session 17: +0.03 replica-equivalents a minute against ±0.4 at 2 σ), though it
    is plain over a few more. The windows here double from that span: 4, 8, … cold starts, as long as the history
    kept (``lookback``) and observed (``observed``, seconds since the history began) covers them. In each, the
    least-squares slope with its standard error corrected for autocorrelation (``_autocorrelated_fit``). A window
    shows a ramp when its slope less 2 standard errors is positive (``trend_and_burst``'s bound: noise alone adds
    nothing); the shortest such window speaks (the most recent evidence of one). Its rise is the fitted slope times
    the cold start: once the bound has shown that there is a ramp, the slope is the estimate of how fast it rises,
    and the bound again would discount the same noise twice, under-forecasting every real ramp by 2 standard errors
    (a ramp too slow for the short trend has no other margin). Unless the last two cold starts contradict it: when
    their own slope plus 2 of its standard errors is below the slope, the ramp has turned (the top of a swing), and
    nothing is forecast. No constant fitted to a trace: the windows are multiples of the cold start, the bound the
    trend's own."""
    span = trend_span(horizon)
    recent = _autocorrelated_fit([(t, v) for t, v in samples if t > now - span])
    ceiling = None if recent is None else recent[0] + 2.0 * recent[1]
    window = 2.0 * span
    reach = min(lookback(horizon), observed)
    while window <= reach:
        fit = _autocorrelated_fit([(t, v) for t, v in samples if t > now - window])
        if fit is not None:
            slope, se, effective = fit
            low = slope - 2.0 * se
            if low > 0:
                if ceiling is not None and ceiling < slope:
                    return None
                return RampTrend(slope * horizon, window, slope, low, effective)
        window *= 2.0
    return None


def trend_and_burst(
    history: Sequence[tuple[float, float]],
    now: float,
    load: float,
    horizon: float,
    burst_ratio: float,
    burst_at: float | None,
    *,
    trend_samples: Sequence[tuple[float, float]] | None = None,
    reach: float | None = None,
) -> Forecast:
    """The trend forecast at ``now + horizon`` (never below ``load``, at most twice it) and burst detection
    over ``history`` (``(t, load)``, oldest first); ``trend_samples`` (default ``history``) are the samples the
    trend is fitted on; ``further`` is the same forecast extrapolated to ``now + reach`` (default ``horizon``)."""
    # The trend is fitted over two cold starts and extrapolated one ahead, from the fitted line's value now.
    # Only its lower confidence bound counts (slope − 2 standard errors): noise alone must not add replicas.
    # Never further ahead than the history spans: the confidence bound covers the noise around a line within
    # what was observed, not whether the load keeps to a line beyond it. A history shorter than the cold start
    # (a fresh controller; servers filling from empty toward their steady occupancy, arrival rate × time in
    # system by Little's law, which no line continues) would otherwise have a minute's climb extrapolated over
    # a whole cold start. The history's span, not the fitted samples': ``trend_samples`` may leave out
    # stretches of the history (samples with a queue on every replica), and a ramp observed throughout is
    # evidence throughout.
    span = trend_span(horizon)
    window = [(t, v) for t, v in history if t > now - span]
    forecast, text = load, ""
    further = level = load
    mv = sum(v for _, v in window) / len(window) if window else load
    fit = [(t, v) for t, v in (history if trend_samples is None else trend_samples) if t > now - span]
    if len(fit) >= 4:
        n = len(fit)
        mt = sum(t for t, _ in fit) / n
        mf = sum(v for _, v in fit) / n
        var = sum((t - mt) ** 2 for t, _ in fit)
        if var > 0:
            slope = sum((t - mt) * (v - mf) for t, v in fit) / var
            resid = sum((v - (mf + slope * (t - mt))) ** 2 for t, v in fit) / (n - 2)
            low = slope - 2.0 * math.sqrt(resid / var)
            observed = now - history[0][0]
            level = max(load, mf + slope * (now - mt))
            if low > 0:
                ahead = min(2.0 * max(load, mf), mf + slope * (now - mt) + low * min(horizon, observed))
                if ahead > forecast:
                    forecast = ahead
                    text = f" (trend ≥ +{low * 60:.2f}/min" + (
                        f", over the {observed:.0f}s observed)" if observed < horizon else ")"
                    )
                further = min(2.0 * max(load, mf), mf + slope * (now - mt) + low * min(reach or horizon, observed))
    if len(window) >= 4:
        short = [v for t, v in window if t > now - BURST_SHORT_S]
        mean_long = mv
        if short and mean_long > 0 and sum(short) / len(short) >= burst_ratio * mean_long:
            # In a burst the load swings within seconds: its highest point of the short window is the floor.
            burst_at = now
            forecast = max(forecast, *short)
            text += f" (burst: {sum(short) / len(short):.2f} ≥ {burst_ratio:g}× the {mean_long:.2f} average)"
    return Forecast(forecast, text, burst_at, max(forecast, further), level)


def seasonal(
    profile: tuple[tuple[float, float], ...],
    period: float,
    buckets: int,
    now: float,
    horizon: float,
    load: float | None,
) -> tuple[tuple[tuple[float, float], ...], float | None]:
    """Update the per-phase profile (per bucket ``(load, time last seen)``) with ``load`` and read the phase at
    ``now + horizon`` seen a period ago (``None`` when that phase was not seen in an earlier period)."""
    slots = list(profile) if len(profile) == buckets else [(0.0, -math.inf)] * buckets
    width = period / buckets
    here = int((now % period) // width)
    if load is not None:
        old, seen = slots[here]
        # Within the same phase of the same period, keep the maximum (a floor should hold the phase's peak).
        slots[here] = (max(old, load) if now - seen < width else load, now)
    ahead = int(((now + horizon) % period) // width)
    value, seen = slots[ahead]
    # Only a phase seen in an earlier period forecasts: the current one is already in the load.
    usable = seen > -math.inf and now + horizon - seen >= period - width
    return tuple(slots), (value if usable else None)


__all__ = [
    "BURSTINESS_PRIOR",
    "BURSTINESS_SPAN_S",
    "BURSTINESS_TAU_S",
    "BURST_SHORT_S",
    "CAPACITY_SCALE_BOUNDS",
    "CAPACITY_TAU_S",
    "DROP_TAU_S",
    "EPSILON",
    "LOOKBACK_COLD_STARTS",
    "LOOKBACK_MIN_S",
    "MIN_BURST_DIFFERENCES",
    "MIN_PREFILL_BUSY",
    "MIN_UTILIZATION",
    "PREFILL_RATE_TAU_S",
    "PROBE_MAX_UTILIZATION",
    "QUANTILE_CONFIDENCE",
    "RECOVER_TAU_S",
    "RELAX_FRACTION",
    "RELEASE_TAU_S",
    "RISK_FRACTION",
    "SATURATED_EVALUATIONS",
    "SATURATED_WAITING_PER_REPLICA",
    "SETTLE_S",
    "Forecast",
    "Headroom",
    "Lengths",
    "RampTrend",
    "Recurrence",
    "WorkSample",
    "capacity_alpha",
    "ceil_count",
    "erlang_c",
    "fitted_level",
    "largest_rise",
    "learn_burstiness",
    "learn_capacity_scale",
    "learn_prefill_rate",
    "learn_release_rate",
    "learn_utilization",
    "lengths_from_histogram",
    "lookback",
    "measured_prefill_rate",
    "occupancy_at_wait_objective",
    "peaked_occupancy",
    "prefill_miss",
    "prefill_utilization_at_objective",
    "queued_on_every_replica",
    "ramp_trend",
    "recurrence",
    "seasonal",
    "slot_release_rate",
    "slot_wait_miss",
    "split_burstiness",
    "supported_quantile",
    "supported_rank",
    "trend_and_burst",
    "trend_span",
    "ttft_slacks",
    "work_burstiness",
]
