"""The yardstick: a provable lower bound on accelerator-hours, and the best perfect-foresight schedule found
by a thorough search, re-solved at each compared policy's own SLO attainment.

Two numbers, documented in ``docs/simulate.md`` ("The oracle and the lower bound"):

**Lower bound** (``lower_bound_chip_s``), a relaxation that holds for *every* controller in this model at a
given attainment ``A``. A replica is busy (prefilling or decoding) or idle, and chips are held at least
while it is busy. Prefills run one at a time, ``input / prefillTokensPerSecond`` each; a decode step of a
batch of ``b ≤ slots`` costs ``decodeStep(b)``, so a generated token costs at least
``decodeStep(slots) / slots`` replica-seconds (the step cost per token falls with the batch). A request
that meets the SLO and arrives before ``H − SLO`` (``H`` the billed horizon) had its prefill done inside the
horizon; once a request is decoding its replica is never idle until it finishes (prefill-first scheduling
only interleaves other work), and a replica decodes at most ``slots`` sequences. So with ``D`` the
``N − ⌈A·N⌉`` most expensive requests (the misses a run at ``A`` may afford, dropped outright), ``U`` the
requests still decoding at ``H`` and ``d_i = c·(output_i − 1)`` their decode cost::

    busy ≥ min over U of max( Σ cost − Σ_D cost − Σ_U d_i,  Σ_U (H − SLO − arrival_i) / slots )
         ≥ max over λ ∈ [0, 1] of  λ·(Σ cost − Σ_D cost) + Σ_i min(0, (1 − λ)(H − SLO − arrival_i) / slots − λ·d_i)

and every replica beyond the initial fleet ``n0`` is ready at most ``H − coldStart`` and pays
``coldStart`` of loading, so at least ``⌈(busy − n0·H) / (H − coldStart)⌉`` of them pay it. The bound is
``chips × (busy + extra × coldStart)`` (``work_bound_chip_s``). A second relaxation
(``readiness_bound_chip_s``) counts deadlines and cold starts: the requests of an arrival window
``[a, a + L)`` that meet the SLO end their prefill by ``a + L + SLO``, one prompt at a time per replica, so at
some moment of ``[a, a + L + SLO]`` at least ``⌈P / (L + SLO)⌉`` replicas are ready (``P`` their prefill
seconds less the window's ``N − ⌈A·N⌉`` longest); a replica ready at ``t`` has been held since ``t − lead``
(or 0), so ``k`` replicas are held over ``[t − lead, t]`` for each such window asking for ``≥ k``; over a
chain of windows that follow one another those stretches cover at least ``min(lead, s1) + Σ min(lead,
gap)``. The bound (``lower_bound_chip_s``) is the larger of the two. Both ignore queueing, KV limits,
routing and the metric pipeline, so they are loose; what they guarantee is that nothing (the oracle
included) can be cheaper.

**Oracle** (``Search``): the cheapest simulated schedule of three families of perfect-foresight schedules:

0. Per-window fleet levels (``LevelMenu``, ``Search._solve_levels``): per window of ``LEVEL_WINDOW_S`` a
   menu of fleet levels, each with its chip-seconds and the misses the constant fleet at that level has
   there; a Lagrangian sweep (dynamic programming over the windows, starts priced) traces the hull of
   (misses, cost); the cheapest hull plan that simulates to the attainment is found by a search that starts
   where the estimated misses point and gallops, then bisects (``Search._boundary``), and the gap to the
   plan before it is filled by mixing the two window by window (a deep re-solve also moves the last switch
   inside its window, ``LEVEL_SUBSTEPS``). This is the family that trades attainment for cost at every
   attainment (the two below only do so coarsely).
1. Demand. Each request's service cost in replica-seconds on a full batch:
   ``input / prefillTokensPerSecond + (output − 1) × decodeStep(slots) / slots``. Summed per window of ``W``
   seconds and divided by ``W``, it is the replicas that window keeps busy; a request started near the end
   of a window still runs in the next, so a window needs ``⌈max(load[w−1], load[w]) / u⌉`` replicas,
   ``u`` the utilization the schedule dares to run at.
2. Schedule. Replica ``k`` is needed in the windows needing ``≥ k``. It is started one cold start (plus the
   Kueue admission latency) before its first such window, so it is ready in time (its chips are paid while it
   loads), and kept through any gap shorter than that plus a window. Counts are bounded by the pool's
   min/max and by the quota.
3. Search. For each window length in ``WINDOWS_S`` and each attainment asked for, bisection on ``log u`` over
   ``U_RANGE`` until the bracket is narrower than ``U_RESOLUTION`` (attainment falls as ``u`` grows).
   Every schedule is simulated in the very same model as the policies (same Kueue, servers, routing, warm
   start), and cached by its replica counts (many ``u`` give the same schedule), so re-solving at another
   attainment mostly reuses simulations; one asking for far more than the cheapest schedule already found
   is not simulated (``PRUNE_MARGIN``). Constant fleets are searched too, by bisection on the count. A deep
   re-solve (when a compared run beat the first answer) also searches every window with a standing floor
   of one and two replicas below the smallest passing constant fleet.
   The answer for an attainment ``A`` is the cheapest schedule ever simulated
   whose attainment is ``≥ A``, whichever family, window or step found it.

The oracle is not a proof of optimality (a schedule outside the families may be cheaper); the lower bound is.
The tests check on both bundled traces that no simple competitor is cheaper than the oracle at equal or
better attainment, at every attainment, that a weakened search fails that check, and that the bound is below everything.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from autoscaler.sim import forks
from autoscaler.sim.cluster import Cluster, PoolSpec
from autoscaler.sim.simulation import RunResult, ScheduleController, Simulation
from autoscaler.sim.traces import Trace

#: Window lengths of the schedule family (seconds): short windows follow bursts, long ones avoid churn.
WINDOWS_S: tuple[float, ...] = (15.0, 30.0, 60.0, 120.0)
#: The utilization factor's search range: 0.2 (five times the work's replicas) to 4 (replicas packed past a
#: full batch's nominal throughput, which short windows and carry-over can sustain).
U_RANGE: tuple[float, float] = (0.2, 4.0)
#: Bisection stops when the bracket's ratio hi/lo is below 1 + this (≈ 7 steps over U_RANGE).
U_RESOLUTION = 0.02
#: Lengths (seconds) of the arrival windows whose prefill deadlines ``readiness_bound_chip_s`` counts, each
#: tiled twice (offset by half a window): any set of windows gives a valid bound, more windows a tighter one.
BOUND_WINDOWS_S: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
#: Grid of the lower bound's multiplier λ (any λ gives a valid bound; the grid picks the best of them).
LAMBDA_STEPS = 50
#: Window length of the per-window level family (seconds): its menu and its schedules change level only at
#: these boundaries.
LEVEL_WINDOW_S = 30.0
#: Sub-windows of a window where a deep re-solve moves the switch between two level plans (5 s steps).
LEVEL_SUBSTEPS = 6
#: When the hull's last plan (fewest estimated misses) fails an attainment, this many plans below it are
#: tried too (real misses are not monotone along the hull; trying them all would cost a simulation each).
LEVEL_WALK = 2
#: A schedule that asks for more than the cheapest one simulated at an attainment, by more than this factor
#: (what it asks for × this > that one's cost), is not simulated for it: it cannot win. Simulated costs stay
#: within 3 % of what the schedule asks for on both bundled traces (replicas waiting for preempted chips
#: are not paid); 0.9 leaves room for longer waits.
PRUNE_MARGIN = 0.9
#: The window the warm-start fleet is read from: the replicas that carry the first minute at utilization 1.
WARM_WINDOW_S = 60.0


@dataclass
class Candidate:
    """One simulated schedule of the family."""

    window_s: float
    utilization: float
    schedule: list[tuple[float, int]]
    attainment: float
    chip_s: float
    result: RunResult
    #: False when the simulation stopped early on failing: ``attainment`` is then only an upper bound.
    exact: bool = True
    #: The standing floor of a floored schedule (0: none).
    floor: int = 0
    #: Which family it belongs to: ``utilization`` (windowed demand over ``u``), ``constant`` or ``levels``
    #: (per-window fleet levels chosen from the menu, see ``LevelFamily``).
    family: str = "utilization"

    @property
    def peak(self) -> int:
        return max((c for _, c in self.schedule), default=0)


@dataclass
class OracleResult:
    """The cheapest candidate at an attainment (``met_target``), else the best attainment found."""

    candidate: Candidate
    target: float
    met_target: bool
    evaluated: int

    @property
    def result(self) -> RunResult:
        return self.candidate.result

    @property
    def utilization(self) -> float:
        return self.candidate.utilization

    @property
    def window_s(self) -> float:
        return self.candidate.window_s

    @property
    def peak(self) -> int:
        return self.candidate.peak

    @property
    def schedule(self) -> list[tuple[float, int]]:
        return self.candidate.schedule


@dataclass(frozen=True, slots=True)
class _ServiceCosts:
    """Per request, its prefill seconds; and the replica-seconds of one generated token on a full batch."""

    prefill_s: list[float]
    per_token_s: float


def _service_costs(trace: Trace, cluster: Cluster, pool: PoolSpec) -> _ServiceCosts:
    prof = cluster.profile(pool)
    per_token = prof.decode_step.seconds(prof.slots) / prof.slots
    tps = prof.prefill_tokens_per_second
    return _ServiceCosts([i / tps for i in trace.inputs], per_token)


def demand(trace: Trace, cluster: Cluster, pool: PoolSpec, window_s: float) -> list[float]:
    """Replica-equivalents of work per window (before the utilization factor)."""
    costs = _service_costs(trace, cluster, pool)
    prefill, per_token = costs.prefill_s, costs.per_token_s
    n = max(1, math.ceil((trace.duration_s + 1e-9) / window_s))
    load = [0.0] * n
    for a, p, o in zip(trace.arrivals, prefill, trace.outputs, strict=True):
        load[min(n - 1, int(a / window_s))] += p + (o - 1) * per_token
    return [x / window_s for x in load]


def warm_fleet(trace: Trace, cluster: Cluster, pool: PoolSpec) -> int:
    """An estimate of the warm start when the oracle is not computed: the most replicas the schedule family
    at utilization 1 needs in any window of the first cold start (nothing started later is ready sooner).
    With the oracle, runs start with the fleet the oracle's schedule holds at time 0 instead."""
    hi = min(pool.max_replicas, cluster.capacity_chips // cluster.chips_per_replica(pool))
    load = demand(trace, cluster, pool, WARM_WINDOW_S)
    lead = cluster.lead_seconds(pool)
    first = max(1, math.ceil(lead / WARM_WINDOW_S))
    need = max(*load[: first + 1], 0.0)
    return max(pool.min_replicas, min(hi, math.ceil(need - 1e-9)))


def schedule_for(
    load: list[float], *, utilization: float, window_s: float, cold_start_s: float, lo: int, hi: int, floor: int = 0
) -> list[tuple[float, int]]:
    """A replica schedule ``[(time, count)]`` meeting the windowed demand, started a cold start early, never
    below ``floor`` (standing capacity for bursts shorter than a cold start)."""
    need = [
        max(lo, floor, min(hi, math.ceil(max(load[w], load[w - 1] if w else 0.0) / utilization - 1e-9)))
        for w in range(len(load))
    ]
    return schedule_from_levels(need, window_s=window_s, lead_s=cold_start_s, lo=lo,
                                keep_gap_s=cold_start_s + window_s)


def schedule_from_levels(
    need: Sequence[int], *, window_s: float, lead_s: float, lo: int, keep_gap_s: float
) -> list[tuple[float, int]]:
    """The replica schedule ``[(time, count)]`` that has ``need[w]`` replicas ready in window ``w``: replica
    ``k`` (1-based) runs through the windows needing ``≥ k``, is asked for ``lead_s`` before its first such
    window (ready in time; its chips are paid while it starts) and is kept through gaps up to
    ``keep_gap_s`` (stopping and starting again would cost more). Replicas up to ``lo`` never stop."""
    top = max(need, default=0)
    end_s = len(need) * window_s
    changes: dict[float, int] = {}
    for k in range(1, top + 1):
        intervals: list[list[float]] = []
        for w, n in enumerate(need):
            if n < k:
                continue
            start, end = w * window_s, (w + 1) * window_s
            if intervals and start - intervals[-1][1] <= keep_gap_s:
                intervals[-1][1] = end
            else:
                intervals.append([start, end])
        for start, end in intervals:
            begin = max(0.0, start - lead_s) if k > lo else 0.0
            changes[begin] = changes.get(begin, 0) + 1
            if end < end_s:
                changes[end] = changes.get(end, 0) - 1
    schedule: list[tuple[float, int]] = []
    count = 0
    for t in sorted(changes):
        count += changes[t]
        if schedule and schedule[-1][0] == t:
            schedule[-1] = (t, count)
        elif not schedule or schedule[-1][1] != count:
            schedule.append((t, count))
    return schedule


def misses_per_window(result: RunResult, slo_ttft_s: float, window_s: float, windows: int) -> list[int]:
    """SLO misses (late, rejected, abandoned or unfinished) among the requests arriving in each window."""
    out = [0] * windows
    req = result.requests
    for a, f in zip(req.arrival, req.first_token, strict=True):
        if not f - a <= slo_ttft_s:  # NaN (never served) is a miss too
            out[min(windows - 1, int(a / window_s))] += 1
    return out


@dataclass(frozen=True)
class LevelPlan:
    """A fleet level per window, with its estimated cost (chip-seconds, starts included) and misses."""

    levels: tuple[int, ...]
    chip_s: float
    misses: float


class LevelMenu:
    """Per window, a menu of fleet levels, each with its chip-seconds and its SLO misses; a plan picks one
    level per window.

    The misses of level ``k`` in window ``w`` are those of the requests arriving in ``w`` when the constant
    fleet ``k`` serves the whole trace (simulated in the model, so routing, batching, server limits and
    queues built up at that level are in them), made non-increasing in ``k``. A level costs
    ``chips × k × window``; every replica added costs a start (``chips × lead``: cold start, Kueue's
    admission and the victims' exit, paid while it starts). For a multiplier ``λ`` (chip-seconds one miss
    is worth), ``plan`` minimises ``cost + λ × misses`` over every choice of levels by dynamic programming
    over the windows (state: the level), so starts and stops are priced exactly; sweeping ``λ`` traces the
    lower convex hull of (misses, cost): ``hull``. The misses are estimates (a window after a lower level
    inherits its queue); the search simulates each plan it uses.
    """

    def __init__(self, *, misses: dict[int, list[int]], window_s: float, chips: int, lead_s: float,
                 initial: int | None) -> None:
        self.levels = sorted(misses)
        self.window_s = window_s
        self.chips = chips
        self.lead_s = lead_s
        self.initial = initial
        windows = len(misses[self.levels[0]])
        # Non-increasing in the level: more replicas never miss more (a lower level's figure is the bound).
        self.misses: list[list[float]] = []
        for w in range(windows):
            row: list[float] = []
            for k in self.levels:
                row.append(min(float(misses[k][w]), row[-1]) if row else float(misses[k][w]))
            self.misses.append(row)

    def _start_cost(self, w: int) -> float:
        """Chip-seconds of adding one replica ready for window ``w``: a lead, or (warm start) since time 0."""
        if self.initial is None:
            return self.chips * min(self.lead_s, w * self.window_s)
        return self.chips * self.lead_s

    def plan(self, lam: float) -> LevelPlan:
        levels = self.levels
        n = len(levels)
        per_level = [self.chips * k * self.window_s for k in levels]
        # cost[i]: the cheapest cost + λ·misses of windows 0..w ending at level levels[i].
        c0 = self._start_cost(0)
        start = [0.0 if self.initial is None else c0 * max(0, k - self.initial) for k in levels]
        cost = [start[i] + per_level[i] + lam * self.misses[0][i] for i in range(n)]
        back: list[list[int]] = []
        for w in range(1, len(self.misses)):
            c = self._start_cost(w)
            # From a higher or equal level (stopping is free): suffix minimum.
            down = [0] * n
            best = n - 1
            for i in range(n - 1, -1, -1):
                if cost[i] <= cost[best]:
                    best = i
                down[i] = best
            # From a lower level: pay a start per replica added; prefix minimum of cost[j] − c·k_j.
            new: list[float] = []
            arg: list[int] = []
            up_best = -1
            row = self.misses[w]
            for i in range(n):
                j = down[i]
                value, src = cost[j], j
                if up_best >= 0:
                    via_up = cost[up_best] + c * (levels[i] - levels[up_best])
                    if via_up < value:
                        value, src = via_up, up_best
                if up_best < 0 or cost[i] - c * levels[i] < cost[up_best] - c * levels[up_best]:
                    up_best = i
                new.append(value + per_level[i] + lam * row[i])
                arg.append(src)
            back.append(arg)
            cost = new
        i = min(range(n), key=lambda k: cost[k])
        chosen = [i]
        for arg in reversed(back):
            i = arg[i]
            chosen.append(i)
        chosen.reverse()
        plan = tuple(levels[i] for i in chosen)
        return LevelPlan(plan, self.cost(plan), sum(self.misses[w][i] for w, i in enumerate(chosen)))

    def cost(self, plan: Sequence[int]) -> float:
        """Estimated chip-seconds of a plan: its levels, plus a start per replica added."""
        total = sum(self.chips * k * self.window_s for k in plan)
        prev = plan[0] if self.initial is None else self.initial
        for w, k in enumerate(plan):
            total += self._start_cost(w) * max(0, k - prev)
            prev = k
        return total

    def hull(self, max_vertices: int = 400) -> list[LevelPlan]:
        """Every vertex of the lower convex hull of (misses, cost) over all plans, cheapest first: the
        plans some ``λ`` makes optimal, found by splitting at the ``λ`` where two known vertices tie."""
        total = 1.0 + sum(row[0] for row in self.misses)
        cheapest = self.plan(self.chips * self.window_s / (2.0 * total))
        safest = self.plan(2.0 * self.chips * max(self.levels) * (len(self.misses) * self.window_s + self.lead_s))
        found = {cheapest.levels: cheapest, safest.levels: safest}
        stack = [(cheapest, safest)]
        while stack and len(found) < max_vertices:
            a, b = stack.pop()
            if a.misses <= b.misses or b.chip_s <= a.chip_s:
                continue
            lam = (b.chip_s - a.chip_s) / (a.misses - b.misses)
            p = self.plan(lam)
            line = a.chip_s + lam * a.misses
            if p.levels in found or p.chip_s + lam * p.misses >= line - 1e-9 * max(1.0, line):
                continue
            found[p.levels] = p
            stack += [(a, p), (p, b)]
        return sorted(found.values(), key=lambda p: (p.chip_s, p.misses))


def attainment(result: RunResult, slo_ttft_s: float) -> float:
    req = result.requests
    ok = sum(1 for f, a in zip(req.first_token, req.arrival, strict=True) if f - a <= slo_ttft_s)
    return ok / len(req.arrival) if req.arrival else 1.0


def misses_allowed(n: int, target: float) -> int:
    """Requests a run of ``n`` may miss and still reach attainment ``target``."""
    return n - math.ceil(target * n - 1e-9)


@dataclass(frozen=True)
class ReadyRequirement:
    """Some time in ``[start, end]`` has at least ``replicas`` replicas ready (forced by prefill deadlines)."""

    start: float
    end: float
    replicas: int


def ready_requirements(
    *, trace: Trace, cluster: Cluster, pool: PoolSpec, slo_ttft_s: float, target: float, horizon_s: float,
) -> list[ReadyRequirement]:
    """Per arrival window ``[a, a + L)``: the requests arriving in it that meet the SLO end their prefill by
    ``a + L + SLO``; prefills run one at a time on a ready replica, so ``∫ ready ≥ P`` over
    ``[a, a + L + SLO]`` (``P`` their prefill seconds) and at some moment ``⌈P / (L + SLO)⌉`` replicas are
    ready. A run at attainment ``A`` may miss ``N − ⌈A·N⌉`` requests anywhere, so each window drops its
    that-many longest prefills (valid for every choice of misses at once). Windows ending after the
    billed horizon are left out."""
    tps = cluster.profile(pool).prefill_tokens_per_second
    arrivals = trace.arrivals
    prefill = [i / tps for i in trace.inputs]
    misses = misses_allowed(len(arrivals), target)
    out: list[ReadyRequirement] = []
    for length in BOUND_WINDOWS_S:
        for offset in (0.0, length / 2):
            a = offset
            while a + length + slo_ttft_s <= horizon_s:
                lo, hi = bisect.bisect_left(arrivals, a), bisect.bisect_left(arrivals, a + length)
                if hi - lo > misses:
                    work = prefill[lo:hi]
                    total = sum(work) - (sum(heapq.nlargest(misses, work)) if misses else 0.0)
                    need = math.ceil(total / (length + slo_ttft_s) - 1e-9)
                    if need > 0:
                        out.append(ReadyRequirement(a, a + length + slo_ttft_s, need))
                a += length
    return out


def _held_at_least(requirements: list[ReadyRequirement], level: int, lead_s: float) -> float:
    """A lower bound on how long at least ``level`` replicas are held (paid for), from the requirements
    asking for ≥ ``level`` ready. A replica ready at ``t`` has been held since ``t − lead`` (its cold start,
    paid) or since 0 (an initial one), so ``level`` replicas are held over ``[max(0, t − lead), t]`` for some
    ``t`` in each such requirement. For requirements in a chain ``[s1, e1], [s2, e2], …`` with ``s(i+1) ≥ e(i)``,
    those stretches cover at least ``min(lead, s1) + Σ min(lead, s(i+1) − e(i))``; the best chain is found by
    dynamic programming over the requirements in order of start (earlier ones ending at least a lead before
    contribute a full lead, those ending within a lead their distance: a sliding-window maximum)."""
    reqs = sorted((r.start, r.end) for r in requirements if r.replicas >= level)
    ended: list[tuple[float, float]] = []  # (end, best) of processed requirements, a heap by end
    window: deque[tuple[float, float]] = deque()  # (end, best − end), ends within a lead before now; max first
    far_best = -math.inf  # the best chain among those ending a lead or more before now
    best_any = 0.0
    for start, end in reqs:
        while ended and ended[0][0] <= start:
            e, b = heapq.heappop(ended)
            while window and window[-1][1] <= b - e:
                window.pop()
            window.append((e, b - e))
        # Requirements ending a lead or more before this start leave the window for the far set.
        while window and window[0][0] <= start - lead_s:
            # Only the window's maximum is kept in order; a dropped non-maximum ended earlier than it, and
            # its chain value is at most the maximum's + (its end − the maximum's end) ≤ the maximum's.
            e, v = window.popleft()
            far_best = max(far_best, v + e)
        best = min(lead_s, start)
        if far_best > -math.inf:
            best = max(best, far_best + lead_s)
        if window:
            best = max(best, window[0][1] + start)
        heapq.heappush(ended, (end, best))
        best_any = max(best_any, best)
    return best_any


def lower_bound_chip_s(
    *, trace: Trace, cluster: Cluster, pool: PoolSpec, slo_ttft_s: float, target: float,
    initial_replicas: int, horizon_s: float | None = None,
) -> float:
    """Chip-seconds no controller can go below at attainment ``target``: the larger of the two relaxations
    of the module docstring (the work, and the prefill deadlines with cold starts)."""
    horizon = trace.duration_s if horizon_s is None else horizon_s
    return max(
        work_bound_chip_s(trace=trace, cluster=cluster, pool=pool, slo_ttft_s=slo_ttft_s, target=target,
                          initial_replicas=initial_replicas, horizon_s=horizon),
        readiness_bound_chip_s(trace=trace, cluster=cluster, pool=pool, slo_ttft_s=slo_ttft_s, target=target,
                               horizon_s=horizon),
    )


def work_bound_chip_s(
    *, trace: Trace, cluster: Cluster, pool: PoolSpec, slo_ttft_s: float, target: float,
    initial_replicas: int, horizon_s: float | None = None,
) -> float:
    """The work relaxation: busy time at full-batch efficiency, plus the cold starts the work forces."""
    prof = cluster.profile(pool)
    chips = cluster.chips_per_replica(pool)
    horizon = trace.duration_s if horizon_s is None else horizon_s
    costs = _service_costs(trace, cluster, pool)
    prefill, per_token = costs.prefill_s, costs.per_token_s
    # Requests arriving after H − SLO can meet the SLO with no work inside the billed horizon.
    inside = [i for i, a in enumerate(trace.arrivals) if a + slo_ttft_s <= horizon]
    decode = [(trace.outputs[i] - 1) * per_token for i in inside]
    cost = [prefill[i] + d for i, d in zip(inside, decode, strict=True)]
    dropped = sum(sorted(cost, reverse=True)[: misses_allowed(len(trace.arrivals), target)])
    total = max(0.0, sum(cost) - dropped)
    # Requests still decoding at H (a set U) need not have their decode counted, but each keeps a replica
    # busy from its first token (≤ arrival + SLO) to H, and a replica holds at most ``slots`` of them:
    # busy ≥ max(total − Σ_U decode, Σ_U (H − SLO − arrival) / slots). For every λ in [0, 1] the max is
    # ≥ the λ-mix, whose minimum over U takes each request into U exactly when that lowers the mix.
    slack = [(horizon - slo_ttft_s - trace.arrivals[i]) / prof.slots for i in inside]
    busy = _best_mix(total, slack, decode)
    cold = cluster.lead_seconds(pool)
    extra = 0
    if busy > initial_replicas * horizon and horizon > cold:
        extra = math.ceil((busy - initial_replicas * horizon) / (horizon - cold) - 1e-9)
    return chips * (busy + extra * cold)


def _best_mix(total: float, slack: Sequence[float], decode: Sequence[float]) -> float:
    """``max over λ`` on the grid ``LAMBDA_STEPS`` of ``λ·total + Σ_i min(0, (1 − λ)·w_i − λ·d_i)`` (and 0).

    Term ``i`` is ``w_i − λ·(w_i + d_i)`` where negative, i.e. for ``λ`` above ``w_i / (w_i + d_i)``: sorted by
    that break point with prefix sums, each ``λ`` of the grid costs a bisection, not a pass over every
    request (the run scores the bound at every row's attainment)."""
    points = sorted((w / (w + d), w, w + d) for w, d in zip(slack, decode, strict=True) if w + d > 0)
    breaks = [b for b, _, _ in points]
    sum_w = [0.0, *accumulate(w for _, w, _ in points)]
    sum_s = [0.0, *accumulate(s for _, _, s in points)]
    busy = 0.0
    for step in range(LAMBDA_STEPS + 1):
        lam = step / LAMBDA_STEPS
        k = bisect.bisect_left(breaks, lam)  # the terms whose break point is below λ are negative
        busy = max(busy, lam * total + sum_w[k] - lam * sum_s[k])
    return busy


def readiness_bound_chip_s(
    *, trace: Trace, cluster: Cluster, pool: PoolSpec, slo_ttft_s: float, target: float, horizon_s: float,
) -> float:
    """Chip-seconds forced by prefill deadlines and cold starts (the module docstring's second relaxation):
    ``chips × Σ_k`` (how long at least ``k`` replicas must be held) over every level ``k`` a requirement asks
    for, up to the most replicas the pool may hold (``maxReplicas`` and the quota, ``Search.hi``). Valid whatever
    the initial fleet (an initial replica is held from 0).

    The cap: a requirement above it means no run within it reaches ``target`` at all, so for every run that
    does (its attainment is where rows are scored) nothing above it is asked and the sum is unchanged; at an
    attainment no such run reaches (the SLO target of an infeasible scenario) the bound stops at the levels a
    run could hold, which is still a lower bound (a smaller sum of the same non-negative terms). Without it
    the walk took one pass over the requirements per level asked: a slow profile with long prompts asked for
    thousands of levels (1.9 s of CPU at 667 levels here, 2026-12-07; linear in the levels)."""
    reqs = ready_requirements(trace=trace, cluster=cluster, pool=pool, slo_ttft_s=slo_ttft_s, target=target,
                              horizon_s=horizon_s)
    lead = cluster.lead_seconds(pool)
    chips = cluster.chips_per_replica(pool)
    cap = min(pool.max_replicas, cluster.capacity_chips // chips)
    top = min(max((r.replicas for r in reqs), default=0), cap)
    return chips * math.fsum(_held_at_least(reqs, k, lead) for k in range(1, top + 1))


def eviction_seconds(cluster: Cluster) -> float:
    """The longest a preempted training job holds its chips: Kueue's reconcile, then its checkpoint save
    (when it saves on SIGTERM within its grace period) or its whole grace period. 0 without training."""
    holds = [t.checkpoint_save_seconds if t.save_on_preemption and t.checkpoint_save_seconds
             <= t.termination_grace_period_seconds else t.termination_grace_period_seconds
             for t in cluster.spec.training]
    return cluster.spec.kueue.admission_seconds + max(holds) if holds else 0.0


class Search:
    """The oracle's schedule search over one trace, cluster and pool, with every simulation cached."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        trace: Trace,
        pool: PoolSpec,
        slo_ttft_s: float,
        initial_replicas: int | None = None,
        windows_s: Sequence[float] = WINDOWS_S,
        u_range: tuple[float, float] = U_RANGE,
        u_resolution: float = U_RESOLUTION,
        simulate: Callable[[list[tuple[float, int]]], Simulation] | None = None,
        progress: Callable[[str], None] | None = None,
        routing: str | None = None,
        seed: int = 0,
        constant_fleets: bool = True,
        levels: bool = True,
        level_window_s: float = LEVEL_WINDOW_S,
        workers: int = 1,
    ) -> None:
        self.cluster = cluster
        self.trace = trace
        self.pool = pool
        self.slo = slo_ttft_s
        self.initial_replicas = initial_replicas
        self.windows = tuple(windows_s)
        self.u_range = u_range
        self.u_resolution = u_resolution
        self.progress = progress
        self._simulate = simulate
        self.routing = routing
        self.seed = seed
        self.constant_fleets = constant_fleets
        self.levels = levels
        self.level_window_s = level_window_s
        chips = cluster.chips_per_replica(pool)
        self.hi = min(pool.max_replicas, cluster.capacity_chips // chips)
        self.lo = pool.min_replicas
        # A replica is ready a cold start plus Kueue's admission after it is asked for.
        self.lead_s = cluster.lead_seconds(pool)
        # A level schedule also waits for the chips of the training it preempts: their exit after Kueue's
        # reconcile (the checkpoint save, or the whole grace period).
        self.level_lead_s = self.lead_s + eviction_seconds(cluster)
        self._menu: LevelMenu | None = None
        self._hull: list[LevelPlan] | None = None
        self._loads = {w: demand(trace, cluster, pool, w) for w in self.windows}
        self._by_schedule: dict[tuple[tuple[float, int], ...], Candidate] = {}
        #: Processes that simulate the menu's constant fleets side by side (``forks``).
        self.workers = workers
        #: Runs simulated ahead of need, by (schedule, miss budget): ``_cached`` takes one instead of simulating
        #: it again (a simulation is a deterministic function of these two), so the search is the same either way.
        self._ahead: dict[tuple[tuple[tuple[float, int], ...], int | None], RunResult] = {}
        #: Per (window, floor): (u, candidate) sorted by u.
        self._by_window: dict[tuple[float, int], list[tuple[float, Candidate]]] = {(w, 0): [] for w in self.windows}
        self.evaluated = 0
        #: Windows where even the cheapest end of ``u_range`` met an attainment asked for (the range was too
        #: narrow there: reported so a search that stops at its own edge is seen).
        self.edge_hits: set[float] = set()

    # ----- one schedule ---------------------------------------------------------------------------------
    def initial_for(self, sched: list[tuple[float, int]]) -> int:
        """The warm start of a schedule: the replicas it holds at time 0 (every replica it needs within its
        first cold start is started at 0, so a perfect-foresight operator has them running already)."""
        if self.initial_replicas is not None:
            return self.initial_replicas
        return sched[0][1] if sched and sched[0][0] == 0.0 else self.lo

    def _simulation(self, sched: list[tuple[float, int]], stop_after: int | None) -> Simulation:
        if self._simulate is not None:
            return self._simulate(sched)
        sim = Simulation(cluster=self.cluster, trace=self.trace, pool=self.pool,
                         controller=ScheduleController("oracle", sched), initial_replicas=self.initial_for(sched),
                         slo_ttft_s=self.slo, stop_after_misses=stop_after, routing=self.routing, seed=self.seed)
        sim.pool.keep_no_metrics()  # a schedule reads no metric: the servers' histograms cost a fifth of a run
        return sim

    def _cached(self, sched: list[tuple[float, int]], target: float | None, *, window_s: float, u: float,
                floor: int = 0, family: str = "utilization", label: str = "") -> Candidate:
        """Simulate ``sched`` once (cached by its replica counts; again only when a run that stopped early is
        needed in full, or might pass ``target``).

        With ``target``, the simulation stops as soon as the schedule has missed more requests than
        ``target`` allows: all a bisection step needs to know is that it fails.
        """
        key = tuple(sched)
        cand = self._by_schedule.get(key)
        if cand is None or (not cand.exact and (target is None or cand.attainment >= target)):
            self.evaluated += 1
            n = len(self.trace.arrivals)
            stop_after = misses_allowed(n, target) if target is not None else None
            ahead = self._ahead.pop((key, stop_after), None)
            res = ahead if ahead is not None else self._simulation(sched, stop_after).run()
            # Stopped early, only an upper bound is known: at least ``late`` requests missed.
            att = (1.0 - res.late / max(n, 1)) if res.stopped_early else attainment(res, self.slo)
            cand = Candidate(window_s, u, sched, att, res.serving_chip_s, res, exact=not res.stopped_early,
                             floor=floor, family=family)
            self._by_schedule[key] = cand
            if self.progress is not None:
                what = f"attainment {att:.4f}" if cand.exact else f"attainment < {att:.4f} (stopped early)"
                self.progress(f"oracle: {label or family}: {what}")
        return cand

    def _simulate_ahead(self, scheds: list[list[tuple[float, int]]], stop_after: int | None) -> None:
        """Simulate, side by side in ``workers`` processes, the schedules not simulated yet that the search is
        about to ask for, each with miss budget ``stop_after``: ``_cached`` then takes their runs as they are."""
        todo = [s for s in scheds if tuple(s) not in self._by_schedule and self._simulate is None]
        if self.workers <= 1 or len(todo) < 2:
            return
        runs = forks.run_all([lambda s=s: self._simulation(s, stop_after).run() for s in todo],  # type: ignore[misc]
                             self.workers)
        for s, res in zip(todo, runs, strict=True):
            self._ahead[(tuple(s), stop_after)] = res

    def evaluate(self, window_s: float, u: float, *, target: float | None = None, floor: int = 0) -> Candidate:
        """Simulate the schedule of ``(window_s, u)`` (see ``_cached``)."""
        sched = schedule_for(self._loads[window_s], utilization=u, window_s=window_s, cold_start_s=self.lead_s,
                             lo=self.lo, hi=self.hi, floor=floor)
        cand = self._cached(sched, target, window_s=window_s, u=u, floor=floor,
                            label=f"window {window_s:g}s, utilization {u:.3f}")
        entries = self._by_window.setdefault((window_s, floor), [])
        bisect.insort(entries, (u, cand), key=lambda e: e[0])
        return cand

    def _passes(self, window_s: float, u: float, target: float, floor: int = 0) -> bool:
        """Whether the schedule of ``(window_s, u)`` reaches ``target``; a schedule too dear to win counts
        as passing unsimulated (a bisection then moves on to cheaper ones)."""
        sched = schedule_for(self._loads[window_s], utilization=u, window_s=window_s, cold_start_s=self.lead_s,
                             lo=self.lo, hi=self.hi, floor=floor)
        if self._too_dear(sched, target):
            return True
        cand = self.evaluate(window_s, u, target=target, floor=floor)
        return cand.exact and cand.attainment >= target

    def requested_chip_s(self, sched: list[tuple[float, int]]) -> float:
        """The chip-seconds a schedule asks for over the billed span (a simulation pays within a few % of
        it: replicas waiting for chips are not paid, draining ones are)."""
        ends = [t for t, _ in sched[1:]] + [self.trace.duration_s]
        chips = self.cluster.chips_per_replica(self.pool)
        return chips * sum(n * max(0.0, min(end, self.trace.duration_s) - t)
                           for (t, n), end in zip(sched, ends, strict=True))

    def _too_dear(self, sched: list[tuple[float, int]], target: float) -> bool:
        """True when ``sched`` asks for so much more than the cheapest schedule already simulated at
        ``target`` that it cannot be the answer (``PRUNE_MARGIN`` below what it asks for)."""
        if tuple(sched) in self._by_schedule:
            return False  # already simulated: the cache answers
        known = [c.chip_s for c in self._by_schedule.values() if c.exact and c.attainment >= target]
        return bool(known) and self.requested_chip_s(sched) * PRUNE_MARGIN > min(known)

    # ----- one attainment -------------------------------------------------------------------------------
    def _bisect(self, window_s: float, target: float, floor: int = 0) -> None:
        """Bisection on log u: the largest u (cheapest) whose schedule still reaches ``target``."""
        u_lo, u_hi = self.u_range
        entries = self._by_window.setdefault((window_s, floor), [])
        # Start from what the cache already brackets (simulations done for other attainments).
        passing = [u for u, c in entries if c.exact and c.attainment >= target and u_lo <= u <= u_hi]
        lo = max(passing) if passing else None
        failing = [u for u, c in entries if c.attainment < target and u_lo <= u <= u_hi and (lo is None or u > lo)]
        hi = min(failing) if failing else None
        if lo is None:
            # The most generous schedule runs to the end, pass or fail: it is the fallback when none passes
            # (unless a cheaper schedule already reaches the target: then it is not needed).
            first_sched = schedule_for(self._loads[window_s], utilization=u_lo, window_s=window_s,
                                       cold_start_s=self.lead_s, lo=self.lo, hi=self.hi, floor=floor)
            if not self._too_dear(first_sched, target):
                first = self.evaluate(window_s, u_lo, floor=floor)
                if first.attainment < target:
                    return  # not even the most generous schedule of this window reaches it
            lo = u_lo
        if hi is None:
            if self._passes(window_s, u_hi, target, floor):
                self.edge_hits.add(window_s)
                return  # the whole range passes: the cheapest is at its edge
            hi = u_hi
        while hi / lo > 1 + self.u_resolution:
            mid = math.sqrt(lo * hi)
            if self._passes(window_s, mid, target, floor):
                lo = mid
            else:
                hi = mid

    def window_order(self, target: float) -> list[float]:
        """Windows by their cheapest schedule simulated so far at ``target`` (unknown ones last)."""
        def key(w: float) -> float:
            costs = [c.chip_s for _, c in self._by_window[(w, 0)] if c.exact and c.attainment >= target]
            return min(costs) if costs else math.inf
        return sorted(self.windows, key=key)

    def _constant(self, n: int, target: float | None) -> Candidate:
        """A constant fleet of ``n`` (the family's degenerate member: no window follows the load)."""
        return self._cached([(0.0, n)], target, window_s=0.0, u=0.0, family="constant", label=f"constant {n}")

    def _bisect_constant(self, target: float) -> None:
        """The smallest constant fleet reaching ``target`` (attainment grows with the fleet)."""
        lo, hi = self.lo - 1, self.hi  # lo fails (or is below the pool's minimum), hi is the largest allowed
        while hi - lo > 1:
            mid = (lo + hi) // 2
            c = self._constant(mid, target)
            if c.exact and c.attainment >= target:
                hi = mid
            else:
                lo = mid
        self._constant(hi, target)

    # ----- the level family -----------------------------------------------------------------------------
    def level_menu(self) -> LevelMenu:
        """The menu: every constant fleet from the pool's minimum to the most the quota allows, simulated to
        the end once, its misses counted per window."""
        if self._menu is None:
            windows = max(1, math.ceil((self.trace.duration_s + 1e-9) / self.level_window_s))
            self._simulate_ahead([[(0.0, k)] for k in range(self.lo, self.hi + 1)], None)
            misses = {k: misses_per_window(self._constant(k, None).result, self.slo, self.level_window_s, windows)
                      for k in range(self.lo, self.hi + 1)}
            self._menu = LevelMenu(misses=misses, window_s=self.level_window_s,
                                   chips=self.cluster.chips_per_replica(self.pool), lead_s=self.level_lead_s,
                                   initial=self.initial_replicas)
        return self._menu

    def level_hull(self) -> list[LevelPlan]:
        if self._hull is None:
            self._hull = self.level_menu().hull()
        return self._hull

    def _level_passes(self, levels: Sequence[int], target: float | None, label: str) -> bool:
        sched = schedule_from_levels(levels, window_s=self.level_window_s, lead_s=self.level_lead_s, lo=self.lo,
                                     keep_gap_s=self.level_lead_s)
        if target is not None and self._too_dear(sched, target):
            return True
        cand = self._cached(sched, target, window_s=self.level_window_s, u=0.0, family="levels",
                            label=f"levels {label}")
        return target is not None and cand.exact and cand.attainment >= target

    def _solve_levels(self, target: float, *, refine: bool = False) -> None:
        """The cheapest level plan reaching ``target``: along the hull (cheapest first) the first vertex whose
        simulation passes, then between it and the failing vertex before it, plans that take the passing
        vertex's levels in the first ``T`` windows where the two differ and the failing one's elsewhere, the
        smallest passing ``T``: the hull's vertices are far apart where the estimated misses jump (a level
        that collapses under its queue), and these mixes fill the gap (serve well, then shed load).

        The vertex search starts where the menu's estimated misses say the answer is and gallops from there
        (``_boundary``): it finds a passing vertex whose predecessor fails, as a bisection would, in about two
        simulations when the estimate is right, and in a bisection's count when it is not."""
        hull = self.level_hull()
        last = len(hull) - 1
        n = max(1, len(self.trace.arrivals))
        allowed = misses_allowed(n, target)

        def vertex(i: int) -> bool:
            return self._level_passes(hull[i].levels, target, f"hull {i}/{last}")

        guess = next((i for i, p in enumerate(hull) if p.misses <= allowed), last)
        failed: set[int] = set()
        ok: int | None = None
        i, step = guess, 1
        while ok is None:  # up from the estimate to a passing vertex
            if vertex(i):
                ok = i
            else:
                failed.add(i)
                if i == last:
                    break
                i, step = min(last, i + step), step * 2
        if ok is None:
            # The plan with the fewest estimated misses need not simulate best (estimates ignore the queue a
            # window inherits): the next ones down are tried too, while their estimate still reaches the target.
            for i in range(last - 1, last - 1 - LEVEL_WALK, -1):
                if i < 0 or 1.0 - hull[i].misses / n < target:
                    return  # no vertex expected to reach it does
                if vertex(i):
                    ok = i
                    break
            else:
                return
        fail, ok = self._boundary(vertex, max((f for f in failed if f < ok), default=-1), ok, ok - 1)
        if fail < 0:
            return  # the cheapest vertex passes
        low, high = hull[fail].levels, hull[ok].levels
        differ = [w for w, (x, y) in enumerate(zip(low, high, strict=True)) if x != y]

        def mixed(t: int) -> list[int]:
            chosen = set(differ[:t])
            return [high[w] if w in chosen else low[w] for w in range(len(low))]

        def mix(t: int) -> bool:
            return self._level_passes(mixed(t), target,
                                      f"hull {ok} in its first {t} of {len(differ)} differing windows")

        # ``high`` in the first ``t`` differing windows, ``low`` elsewhere: t = 0 fails, t = len(differ) passes.
        # Plain bisection: a mix's estimated misses are poor (its windows inherit the other plan's queues).
        _, t_ok = self._boundary(mix, 0, len(differ), len(differ))
        if refine:
            self._refine_switch(low, high, differ, t_ok, target)

    def _refine_switch(self, low: Sequence[int], high: Sequence[int], differ: list[int], t_ok: int,
                       target: float) -> None:
        """Finer than a window: the passing mix takes ``high`` in its last differing window ``w`` and the
        failing one ``low``; switch inside ``w`` instead, after ``j`` of ``LEVEL_SUBSTEPS`` sub-windows,
        bisection on ``j`` (a controller may stop or start a replica at any moment, not only at a window's
        edge)."""
        w = differ[t_ok - 1]
        taken = set(differ[: t_ok - 1])
        base = [high[v] if v in taken else low[v] for v in range(len(low))]
        sub = LEVEL_SUBSTEPS

        def fine(j: int) -> list[int]:
            out = [lvl for lvl in base for _ in range(sub)]
            out[w * sub: w * sub + j] = [high[w]] * j
            return out

        j_fail, j_ok = 0, sub
        while j_ok - j_fail > 1:
            j = (j_fail + j_ok) // 2
            sched = schedule_from_levels(fine(j), window_s=self.level_window_s / sub, lead_s=self.level_lead_s,
                                         lo=self.lo, keep_gap_s=self.level_lead_s)
            if self._too_dear(sched, target):
                j_ok = j
                continue
            cand = self._cached(sched, target, window_s=self.level_window_s, u=0.0, family="levels",
                                label=f"levels switching {j}/{sub} into window {w}")
            if cand.exact and cand.attainment >= target:
                j_ok = j
            else:
                j_fail = j

    @staticmethod
    def _boundary(passes: Callable[[int], bool], fail: int, ok: int, guess: int) -> tuple[int, int]:
        """``(f, f + 1)`` with ``passes(f + 1)`` and not ``passes(f)``, for ``fail < f + 1 ≤ ok`` (``fail``
        known to fail or below the range, ``ok`` known to pass): tries ``guess`` first, gallops from it
        (steps 1, 2, 4, … toward the side it points to), then bisects what is left."""
        guess = min(max(guess, fail + 1), ok)
        if guess < ok:
            if passes(guess):
                ok, step = guess, 1
                while ok - fail > 1:  # down
                    probe = max(fail + 1, ok - step)
                    if passes(probe):
                        ok, step = probe, step * 2
                    else:
                        fail = probe
                        break
            else:
                fail, step = guess, 1
                while ok - fail > 1:  # up
                    probe = min(ok - 1, fail + step)
                    if passes(probe):
                        ok = probe
                        break
                    fail, step = probe, step * 2
        while ok - fail > 1:
            mid = (fail + ok) // 2
            if passes(mid):
                ok = mid
            else:
                fail = mid
        return fail, ok

    def solve(self, target: float, *, windows: int | None = None, deep: bool = False) -> OracleResult:
        """The cheapest simulated schedule with attainment ≥ ``target``.

        Bisects the constant fleet, and ``u`` in every window length or, with ``windows``, in the
        ``windows`` lengths whose schedules have been cheapest so far at ``target`` (re-solving at another
        attainment after a full solve). ``deep`` adds floored schedules: every window length again with a
        standing floor of one and two replicas below the smallest constant fleet that reaches ``target``
        (the shape bursts shorter than a cold start call for).
        """
        if self.levels:
            self._solve_levels(target, refine=deep)  # first: its menu simulates every constant fleet in full
        if self.constant_fleets:
            self._bisect_constant(target)
        order = self.window_order(target) if windows is not None and not deep else list(self.windows)
        for w in order[: windows if windows is not None and not deep else len(order)]:
            self._bisect(w, target)
        if deep:
            fleets = [c.schedule[0][1] for c in self._by_schedule.values()
                      if len(c.schedule) == 1 and c.exact and c.attainment >= target]
            if fleets:
                smallest = min(fleets)
                for floor in (smallest - 1, smallest - 2):
                    if floor > self.lo:
                        for w in self.windows:
                            self._bisect(w, target, floor)
        return self.best(target)

    def at_equal_slo(self, attainment_: float, chip_s: float, *, quick_windows: int = 1) -> OracleResult:
        """The oracle for a compared run: re-solved at the run's own attainment in the ``quick_windows``
        window lengths cheapest so far; if the run is still cheaper, deeply (every window, floored too)."""
        found = self.solve(attainment_, windows=quick_windows)
        if found.met_target and found.candidate.chip_s > chip_s:
            found = self.solve(attainment_, deep=True)
        return found

    def best(self, target: float) -> OracleResult:
        """The cheapest candidate simulated so far at ``target``; else the one with the best attainment."""
        cands = [c for c in self._by_schedule.values() if c.exact]
        if not cands:
            raise ValueError("no schedule simulated to the end yet")
        passing = [c for c in cands if c.attainment >= target]
        if passing:
            chosen = min(passing, key=lambda c: (c.chip_s, -c.attainment))
            return OracleResult(chosen, target, True, self.evaluated)
        chosen = max(cands, key=lambda c: (c.attainment, -c.chip_s))
        return OracleResult(chosen, target, False, self.evaluated)


def solve(
    *,
    cluster: Cluster,
    trace: Trace,
    pool: PoolSpec,
    slo_ttft_s: float,
    target: float,
    initial_replicas: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> OracleResult:
    """Search the cheapest schedule meeting ``target`` attainment (see the module docstring)."""
    search = Search(cluster=cluster, trace=trace, pool=pool, slo_ttft_s=slo_ttft_s,
                    initial_replicas=initial_replicas, progress=progress)
    return search.solve(target)
