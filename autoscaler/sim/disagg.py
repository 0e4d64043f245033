"""``autoscaler simulate`` on a disaggregated cluster: prefill and decode pools sharing one budget, scored
together.

A row is a set of controllers, one per pool (a policy file's documents each drive the pool their target
names); every row runs in one simulation of both pools, Kueue and the training, and is scored on the
client's TTFT (arrival to the decode group taking the request) and on both pools' chip-hours together.

Rows: ``hpa`` (the tutorials' HPA on each pool), ``hpa-tuned`` (per pool, with hindsight: the prefill HPA
tuned with the decode HPA at the tutorials' setting, then the decode HPA tuned with the prefill one chosen),
``keda`` (per pool), ``kueue-only`` (our policies without their capacity blocks), ``static-peak`` (each pool
at the oracle's peak), the policies, and the oracle.

The oracle for two pools (``PairSearch``): the single-pool schedule family per pool, each with its own demand
(prefill: prompt tokens / prefill rate; decode: generated tokens at a full batch's cost per token) and its
own utilization factor, so a schedule is a pair ``(u_prefill, u_decode)`` per window length. The pools share
the blocks: a schedule whose groups do not fit waits in the simulation like any policy's. The search per
window length: a joint bisection on a common ``u``, then a bisection on each pool's ``u`` with the other
held, plus the constant fleets ``(n_p, n_d)``; every schedule simulated in the same model, cached, and the
answer for an attainment is the cheapest simulated pair reaching it. Re-solved at each row's attainment
when the row is cheaper than every pair found so far. A role served by several pools (variants: other slice
shapes) gets the variant dimension the policy has: per window its need, in groups of its primary pool, is
carried by the mix of shapes on the fewest chips (``PairSearch.mix``), each pool's groups scheduled a cold
start ahead; constant fleets likewise.

The lower bound for two pools (``pair_lower_bound_chip_s``): prefill busy time (one prompt at a time per
group) for every request that must get its first token inside the window, plus decode slot-time: a request
holds a slot from its first token (at most arrival + SLO) until it is done or the window ends, at least
``(output − 1) × decodeStep(1)`` (no step is faster than a batch of one), and a group has ``slots`` slots;
the ``N − ⌈A·N⌉`` requests with the largest combined cost may be missed and are dropped. Each pool also
holds at least its ``minReplicas`` all the time; the bound is the larger of the two sums. Provable, loose.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim import baselines, oracle, report, traces
from autoscaler.sim.cluster import Cluster, PoolSpec
from autoscaler.sim.simulation import Controller, PolicyController, RunResult, Simulation

#: Window lengths of the pair search (two of the single-pool search's four: each costs ~20 simulations here).
PAIR_WINDOWS_S = (30.0, 60.0)
U_RANGE = (0.2, 4.0)
U_RESOLUTION = 0.02


class CombinedController:
    """Several controllers in one run, each driving the pool its target names."""

    def __init__(self, name: str, kind: str, parts: Sequence[Controller]) -> None:
        self.name = name
        self.kind = kind
        self.parts = list(parts)
        self.pipeline_name = ",".join(sorted({getattr(p, "pipeline_name", "") for p in parts} - {""}))

    def start(self, sim: Simulation) -> None:
        for part in self.parts:
            part.start(sim)


class PairScheduleController:
    """A precomputed schedule per pool (the oracle, static-peak)."""

    def __init__(self, name: str, schedules: dict[str, list[tuple[float, int]]], kind: str = "oracle") -> None:
        self.name = name
        self.kind = kind
        self.schedules = schedules

    def start(self, sim: Simulation) -> None:
        for pool in sim.pools:
            sched = self.schedules.get(pool.name, [])
            if not sched:
                continue
            steps = iter(sched)
            current = [next(steps)]

            def fn(now: float, _pool: Any = pool, _it: Any = steps, _cur: list[Any] = current) -> float | None:
                sim.set_desired(_cur[0][1], now, reason="Schedule", message="perfect-foresight schedule", pool=_pool)
                nxt = next(_it, None)
                if nxt is None:
                    return None
                _cur[0] = nxt
                return float(nxt[0])

            sim.every(sched[0][0], fn)


def role_capacity(cluster: Cluster, pool: PoolSpec, role: str) -> float:
    """What one group of ``pool`` serves in its role, in the units ``pool_demand`` counts: prompt tokens/s for
    prefill, generated tokens/s at a full batch for decode (its profile's figures)."""
    prof = cluster.profile(pool)
    if role == "prefill":
        return prof.prefill_tokens_per_second
    return prof.slots / prof.decode_step.seconds(prof.slots)


def pool_demand(trace: traces.Trace, cluster: Cluster, pool: PoolSpec, role: str, window_s: float) -> list[float]:
    """Replica-equivalents of one role's work per window (before the utilization factor)."""
    prof = cluster.profile(pool)
    n = max(1, math.ceil((trace.duration_s + 1e-9) / window_s))
    load = [0.0] * n
    if role == "prefill":
        tps = prof.prefill_tokens_per_second
        for a, i in zip(trace.arrivals, trace.inputs, strict=True):
            load[min(n - 1, int(a / window_s))] += i / tps
    else:
        per_token = prof.decode_step.seconds(prof.slots) / prof.slots
        for a, o in zip(trace.arrivals, trace.outputs, strict=True):
            load[min(n - 1, int(a / window_s))] += max(0, o - 1) * per_token
    return [x / window_s for x in load]


def pair_lower_bound_chip_s(trace: traces.Trace, cluster: Cluster, slo_ttft_s: float, target: float) -> float:
    """A provable floor on both pools' serving chip-seconds at attainment ``target`` (module docstring)."""
    pair = cluster.disaggregated
    assert pair is not None
    prefill, decode = pair
    pp, dp = cluster.profile(prefill), cluster.profile(decode)
    cp, cd = cluster.chips_per_replica(prefill), cluster.chips_per_replica(decode)
    horizon = trace.duration_s
    step1 = dp.decode_step.seconds(1)
    costs = []
    for a, i, o in zip(trace.arrivals, trace.inputs, trace.outputs, strict=True):
        inside = horizon - a - slo_ttft_s
        if inside < 0:
            costs.append(0.0)  # its first token may come after the window: no work is forced inside it
            continue
        pre = cp * i / pp.prefill_tokens_per_second
        dec = cd * min(max(0, o - 1) * step1, inside) / dp.slots
        costs.append(pre + dec)
    n = len(costs)
    drop = oracle.misses_allowed(n, target)
    kept = sorted(costs)[: n - drop] if drop > 0 else costs
    floor = horizon * (prefill.min_replicas * cp + decode.min_replicas * cd)
    return max(sum(kept), floor)


@dataclass
class PairCandidate:
    schedules: dict[str, list[tuple[float, int]]]
    attainment: float
    chip_s: float
    exact: bool
    label: str
    result: RunResult | None = None

    @property
    def peaks(self) -> dict[str, int]:
        return {name: max((n for _, n in s), default=0) for name, s in self.schedules.items()}


@dataclass
class PairOracle:
    target: float
    candidate: PairCandidate
    met_target: bool
    schedules_simulated: int = 0

    @property
    def result(self) -> RunResult:
        assert self.candidate.result is not None
        return self.candidate.result


@dataclass
class PairSearch:
    cluster: Cluster
    trace: traces.Trace
    slo_ttft_s: float
    routing: str | None = None
    seed: int = 0
    progress: Callable[[str], None] | None = None
    windows: tuple[float, ...] = PAIR_WINDOWS_S
    u_range: tuple[float, float] = U_RANGE
    #: Search the constant pairs too (the family's degenerate members); off only to weaken it in a test.
    constant_fleets: bool = True
    evaluated: int = 0
    _cache: dict[tuple[Any, ...], PairCandidate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pair = self.cluster.disaggregated
        assert pair is not None
        self.prefill, self.decode = pair
        #: Role -> its pools, the primary first, then its variants (other slice shapes of the same role).
        self.roles: dict[str, list[PoolSpec]] = self.cluster.role_pools or {
            "prefill": [self.prefill], "decode": [self.decode]}
        cap = self.cluster.capacity_chips
        self.bounds = {
            p.name: (p.min_replicas, min(p.max_replicas, cap // self.cluster.chips_per_replica(p)))
            for pools in self.roles.values() for p in pools
        }
        self.lead = {p.name: self.cluster.lead_seconds(p) for pools in self.roles.values() for p in pools}
        #: What one group of each pool carries, in groups of its role's primary pool (1.0 for the primary).
        self.group_capacity = {
            p.name: role_capacity(self.cluster, p, role) / role_capacity(self.cluster, pools[0], role)
            for role, pools in self.roles.items() for p in pools
        }
        self.loads = {
            (w, role): pool_demand(self.trace, self.cluster, p, role, w)
            for w in self.windows for role, p in (("prefill", self.prefill), ("decode", self.decode))
        }

    # ----- one pair of schedules --------------------------------------------------------------------
    def initial(self, schedules: dict[str, list[tuple[float, int]]]) -> dict[str, int]:
        """The schedules' fleet at time 0, within the chips serving may hold (larger slices kept first, as
        placed): a schedule asking for more at time 0 asks for the rest at once, and it waits like any
        policy's groups."""
        out = {}
        for name, sched in schedules.items():
            lo = self.bounds[name][0]
            out[name] = sched[0][1] if sched and sched[0][0] == 0.0 else lo
        left = self.cluster.capacity_chips
        for name in sorted(out, key=lambda k: -self.cluster.chips_per_replica(self.cluster.pool_named(k))):
            chips = self.cluster.chips_per_replica(self.cluster.pool_named(name))
            out[name] = min(out[name], left // chips)
            left -= out[name] * chips
        return out

    def simulate(self, schedules: dict[str, list[tuple[float, int]]], label: str, stop: int | None,
                 name: str = "oracle") -> PairCandidate:
        key = tuple((k, tuple(v)) for k, v in sorted(schedules.items()))
        hit = self._cache.get(key)
        # A run asked for whole (``stop`` None) is re-run when the frontier dropped its details.
        if hit is not None and (stop is not None or (hit.exact and hit.result is not None)):
            return hit
        sim = Simulation(cluster=self.cluster, trace=self.trace, controller=PairScheduleController(name, schedules),
                         initial_by_pool=self.initial(schedules), slo_ttft_s=self.slo_ttft_s,
                         stop_after_misses=stop, routing=self.routing, seed=self.seed)
        res = sim.run()
        self.evaluated += 1
        n = max(1, len(self.trace.arrivals))
        att = (1.0 - res.late / n) if res.stopped_early else oracle.attainment(res, self.slo_ttft_s)
        cand = PairCandidate(schedules, att, res.serving_chip_s, not res.stopped_early, label,
                             res if not res.stopped_early else None)
        self._cache[key] = cand
        self._prune()
        if self.progress is not None:
            self.progress(f"oracle: {label}: attainment {att:.4f}, {res.serving_chip_s / 3600:.2f} chip-h")
        return cand

    def _prune(self) -> None:
        """Keep full results only on the cost/attainment frontier (a run holds every request's times)."""
        exact = sorted((c for c in self._cache.values() if c.exact), key=lambda c: (c.chip_s, -c.attainment))
        best_att = -1.0
        for c in exact:
            if c.attainment > best_att:
                best_att = c.attainment
            else:
                c.result = None

    def schedules_for(self, window_s: float, u_p: float, u_d: float) -> dict[str, list[tuple[float, int]]]:
        out = {}
        for role, u in (("prefill", u_p), ("decode", u_d)):
            pools = self.roles[role]
            if len(pools) == 1:
                pool = pools[0]
                lo, hi = self.bounds[pool.name]
                out[pool.name] = oracle.schedule_for(self.loads[(window_s, role)], utilization=u,
                                                     window_s=window_s, cold_start_s=self.lead[pool.name],
                                                     lo=lo, hi=hi)
                continue
            load = self.loads[(window_s, role)]
            levels = self.mix_levels(role, [max(x, load[w - 1] if w else 0.0) / u for w, x in enumerate(load)])
            for pool in pools:
                lead = self.lead[pool.name]
                out[pool.name] = oracle.schedule_from_levels(
                    levels[pool.name], window_s=window_s, lead_s=lead, lo=self.pool_floor(pool, role),
                    keep_gap_s=lead + window_s)
        return out

    def mix(self, role: str, need: float, previous: dict[str, int] | None = None) -> dict[str, int]:
        """The groups per pool of ``role`` that carry ``need`` (in groups of its primary pool) on the fewest
        chips, then the fewest changes from ``previous``, then the fewest groups; the most capacity within the
        bounds when nothing carries it. One shape only: that pool's own count."""
        pools = self.roles[role]
        # With variants the primary's minReplicas is the role's (a variant may replace its last group): the
        # cluster file allows minReplicas 0 on variants only, and a policy may move the role off the primary.
        ranges = [range(self.pool_floor(p, role), self.bounds[p.name][1] + 1) for p in pools]
        best: tuple[Any, ...] | None = None
        for counts in itertools.product(*ranges):
            if sum(counts) < self.bounds[pools[0].name][0]:
                continue
            carried = sum(self.group_capacity[p.name] * n for p, n in zip(pools, counts, strict=True))
            chips = sum(self.cluster.chips_per_replica(p) * n for p, n in zip(pools, counts, strict=True))
            changes = sum(abs(n - (previous or {}).get(p.name, n)) for p, n in zip(pools, counts, strict=True))
            short = max(0.0, need - carried - 1e-9)
            key = (short > 0, -carried if short > 0 else chips, changes, sum(counts), counts)
            if best is None or key < best:
                best = key
        assert best is not None
        return {p.name: n for p, n in zip(pools, best[-1], strict=True)}

    def pool_floor(self, pool: PoolSpec, role: str) -> int:
        """The fewest groups ``pool`` holds on its own (0 for a role's primary pool that has variants)."""
        return 0 if len(self.roles[role]) > 1 else self.bounds[pool.name][0]

    def mix_levels(self, role: str, need: Sequence[float]) -> dict[str, list[int]]:
        """Per window, the groups per pool of ``role`` (``mix``), each window's mix the closest to the
        previous one among the cheapest (a shape flipping back and forth would pay cold starts for nothing)."""
        levels: dict[str, list[int]] = {p.name: [] for p in self.roles[role]}
        previous: dict[str, int] | None = None
        for n in need:
            previous = self.mix(role, n, previous)
            for name, count in previous.items():
                levels[name].append(count)
        return levels

    def constant(self, role: str, groups: int) -> dict[str, list[tuple[float, int]]]:
        """A constant fleet of ``role`` carrying ``groups`` of its primary pool, at its cheapest mix."""
        return {name: [(0.0, n)] for name, n in self.mix(role, float(groups)).items()}

    def _passes(self, window_s: float, u_p: float, u_d: float, target: float) -> bool:
        stop = oracle.misses_allowed(len(self.trace.arrivals), target)
        c = self.simulate(self.schedules_for(window_s, u_p, u_d),
                          f"W={window_s:g}s u=({u_p:.3f},{u_d:.3f})", stop)
        return c.exact and c.attainment >= target

    def _bisect(self, ok: Callable[[float], bool], lo: float, hi: float) -> float | None:
        """The largest u in [lo, hi] (log scale) with ok(u), assuming ok is monotone decreasing; None if not
        even ok(lo)."""
        if not ok(lo):
            return None
        if ok(hi):
            return hi
        a, b = math.log(lo), math.log(hi)
        while b - a > U_RESOLUTION:
            mid = (a + b) / 2
            if ok(math.exp(mid)):
                a = mid
            else:
                b = mid
        return math.exp(a)

    # ----- the search -------------------------------------------------------------------------------
    def solve(self, target: float, *, windows: Sequence[float] | None = None) -> PairOracle:
        lo_u, hi_u = self.u_range
        for w in windows or self.windows:
            def joint(x: float, _w: float = w) -> bool:
                return self._passes(_w, x, x, target)

            u = self._bisect(joint, lo_u, hi_u)
            if u is None:
                continue

            def prefill_only(x: float, _w: float = w, _u: float = u) -> bool:
                return self._passes(_w, x, _u, target)

            u_p = self._bisect(prefill_only, u, hi_u) or u

            def decode_only(x: float, _w: float = w, _p: float = u_p) -> bool:
                return self._passes(_w, _p, x, target)

            self._bisect(decode_only, u, hi_u)
        if self.constant_fleets:
            self._constant_fleets(target)
        return self.best(target)

    def _constant_fleets(self, target: float) -> None:
        """Constant pairs (n_p, n_d): for each prefill count, the fewest decode groups that pass (counted in
        groups of each role's primary pool, each role at its cheapest mix of shapes)."""
        stop = oracle.misses_allowed(len(self.trace.arrivals), target)
        lo_p, hi_p = self.role_bounds("prefill")
        lo_d, hi_d = self.role_bounds("decode")
        best = self.best(target)
        horizon = self.trace.duration_s

        def chips(role: str, n: int) -> int:
            return sum(self.cluster.chips_per_replica(self.cluster.pool_named(k)) * c
                       for k, c in self.mix(role, float(n)).items())

        for n_p in range(lo_p, hi_p + 1):
            if best.met_target and (chips("prefill", n_p) + chips("decode", lo_d)) * horizon >= best.candidate.chip_s:
                break

            def passes(n_d: int, _n_p: int = n_p) -> bool:
                c = self.simulate({**self.constant("prefill", _n_p), **self.constant("decode", n_d)},
                                  f"constant ({_n_p}, {n_d})", stop)
                return c.exact and c.attainment >= target

            if not passes(hi_d):
                continue
            a, b = lo_d - 1, hi_d  # passes(b), not known for a
            while b - a > 1:
                mid = (a + b) // 2
                if mid >= lo_d and passes(mid):
                    b = mid
                else:
                    a = mid
            best = self.best(target)

    def role_bounds(self, role: str) -> tuple[int, int]:
        """The fewest and most groups of the role's primary pool its pools together carry."""
        pools = self.roles[role]
        lo = math.ceil(sum(self.group_capacity[p.name] * self.bounds[p.name][0] for p in pools) - 1e-9)
        hi = math.floor(sum(self.group_capacity[p.name] * self.bounds[p.name][1] for p in pools) + 1e-9)
        return lo, hi

    def best(self, target: float) -> PairOracle:
        ok = [c for c in self._cache.values() if c.exact and c.attainment >= target]
        if ok:
            cand = min(ok, key=lambda c: (c.chip_s, -c.attainment))
            met = True
        else:
            exact = [c for c in self._cache.values() if c.exact]
            if exact:
                cand = max(exact, key=lambda c: (c.attainment, -c.chip_s))
            else:
                # Every pair stopped early (none reached the target): the most each pool may hold, run whole,
                # is the best found, so the oracle row still has a run to show (a hard trace, not a crash).
                top = {name: [(0.0, hi)] for name, (_, hi) in self.bounds.items()}
                cand = self.simulate(top, "constant at maxReplicas (target not reached)", None)
            met = False
        if cand.result is None and cand.schedules:
            cand = self.simulate(cand.schedules, cand.label, None)  # the frontier dropped its details
            self._cache[tuple((k, tuple(v)) for k, v in sorted(cand.schedules.items()))] = cand
        return PairOracle(target, cand, met, self.evaluated)

    def at_equal_slo(self, attainment: float, chip_s: float) -> PairOracle:
        found = self.best(attainment)
        if found.met_target and found.candidate.chip_s <= chip_s:
            return found
        # The row is cheaper than every pair simulated so far at its attainment: search again, at it.
        cheapest_window = min(self.windows)
        return self.solve(attainment, windows=[cheapest_window])


# ----- the rows ---------------------------------------------------------------------------------------
def _policy_controllers(cluster: Cluster, policies: Sequence[ScalingPolicy], name: str, kind: str,
                        pipeline_of: Callable[[ScalingPolicy], str]) -> CombinedController:
    parts: list[Controller] = []
    for pol in policies:
        pipe = pipeline_of(pol)
        parts.append(PolicyController(compile_policy(pol), cluster.spec.metric_pipelines[pipe], pipe, kind=kind,
                                      name=f"{name}/{pol.metadata.name}"))
    return CombinedController(name, kind, parts)


def policy_rows(policies: Sequence[tuple[str, ScalingPolicy]]) -> list[list[tuple[str, ScalingPolicy]]]:
    """Policies in rows that run together: consecutive documents join a row until one scales a target the row
    already scales (``lws-prefill-decode.yaml``'s two policies are one row; another file driving the same
    pools is a row of its own)."""
    rows: list[list[tuple[str, ScalingPolicy]]] = []
    taken: set[str] = set()
    for name, pol in policies:
        key = pol.spec.target.ref().key
        if not rows or key in taken:
            rows.append([])
            taken = set()
        rows[-1].append((name, pol))
        taken.add(key)
    return rows


def _hpa_pipe(cluster: Cluster) -> Callable[[ScalingPolicy], str]:
    return lambda _pol: cluster.pipeline_name_for("hpa")


def run_rows(
    *, cluster: Cluster, trace: traces.Trace, policies: Sequence[tuple[str, ScalingPolicy]], wanted: Sequence[str],
    slo: float, target: float, routing: str | None, seed: int, progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """Every row of a disaggregated run; returns the summary pieces and the results (for the plot)."""
    pair = cluster.disaggregated
    assert pair is not None
    prefill, decode = pair
    search = PairSearch(cluster=cluster, trace=trace, slo_ttft_s=slo, routing=routing, seed=seed, progress=progress)
    orc: PairOracle | None = None
    if "oracle" in wanted or "static-peak" in wanted:
        orc = search.solve(target)
    # Warm start: both pools' initialReplicas when the file fixes them, else the oracle's fleet at time 0.
    if prefill.initial_replicas is not None and decode.initial_replicas is not None:
        n0 = {prefill.name: prefill.initial_replicas, decode.name: decode.initial_replicas}
    elif orc is not None and orc.candidate.schedules:
        n0 = search.initial(orc.candidate.schedules)
    else:
        n0 = {p.name: p.initial_replicas if p.initial_replicas is not None else p.min_replicas for p in pair}

    def simulate(ctl: Controller, stop: int | None = None) -> RunResult:
        if progress is not None:
            progress(f"{ctl.name}: simulating")
        return Simulation(cluster=cluster, trace=trace, controller=ctl, initial_by_pool=n0, slo_ttft_s=slo,
                          routing=routing, seed=seed, stop_after_misses=stop).run()

    results: list[RunResult] = []
    tuned_info: dict[str, Any] | None = None
    if "static-peak" in wanted and orc is not None:
        peaks = orc.candidate.peaks
        results.append(simulate(PairScheduleController(
            "static-peak", {name: [(0.0, n)] for name, n in peaks.items()}, kind="baseline")))
    if "hpa" in wanted:
        hpas = [baselines.hpa_policy(cluster, p, name=f"hpa-{p.name}") for p in pair]
        results.append(simulate(_policy_controllers(cluster, hpas, "hpa", "baseline", _hpa_pipe(cluster))))
    if "hpa-tuned" in wanted:
        tuned_run = _tune_pair(cluster, trace, pair, slo, target, simulate, progress)
        tuned_info = tuned_run.info
        results.append(tuned_run.result)
    if "keda" in wanted:
        keda = baselines.keda_pipeline(cluster)
        keda_name, keda_pipe = keda.name, keda.spec
        parts: list[Controller] = [
            PolicyController(compile_policy(baselines.keda_policy(cluster, p)), keda_pipe, keda_name,
                             kind="baseline", name=f"keda/{p.name}") for p in pair
        ]
        results.append(simulate(CombinedController("keda", "baseline", parts)))
    for i, group in enumerate(policy_rows(policies)):
        pols = [pol for _, pol in group]
        label = "+".join(name for name, _ in group)
        if "kueue-only" in wanted:
            # The same policies with training left to Kueue; the first row's twin is plain ``kueue-only``.
            stripped = [baselines.kueue_only_policy(p) or p for p in pols]
            results.append(simulate(_policy_controllers(
                cluster, stripped, "kueue-only" if i == 0 else f"kueue-only ({label})", "baseline",
                lambda p: cluster.pipeline_name_for(p.metadata.name))))
        results.append(simulate(_policy_controllers(cluster, pols, label, "policy",
                                                    lambda p: cluster.pipeline_name_for(p.metadata.name))))

    rows: dict[str, Any] = {}
    for r in results:
        att = oracle.attainment(r, slo)
        at_equal = search.at_equal_slo(att, r.serving_chip_s) if "oracle" in wanted else None
        rows[r.name] = _row(r, slo, at_equal, pair_lower_bound_chip_s(trace, cluster, slo, att))
        rows[r.name]["tuned_with_hindsight"] = r.name == "hpa-tuned"
    out: dict[str, Any] = {"policies": rows, "results": results, "initial_by_pool": n0}
    if tuned_info is not None:
        out["hpa_tuned"] = tuned_info
    if orc is not None and "oracle" in wanted:
        final = search.best(target)
        o = _row(final.result, slo, final, pair_lower_bound_chip_s(trace, cluster, slo, target))
        o.update({
            "method": "cheapest simulated pair of perfect-foresight schedules (prefill, decode) meeting the "
                      "attainment target: per window length a joint bisection on the utilization factor, then "
                      "one per pool, plus constant pairs (docs/simulate.md)",
            "attainment_target": target,
            "met_target": final.met_target,
            "found_by": final.candidate.label,
            "peak_replicas": final.candidate.peaks,
            "schedules_simulated": search.evaluated,
            "search": {"windows_s": list(search.windows), "utilization_range": list(search.u_range),
                       "utilization_resolution": U_RESOLUTION},
        })
        out["oracle"] = o
        results.append(final.result)
    out["lower_bound_accelerator_hours"] = round(pair_lower_bound_chip_s(trace, cluster, slo, target) / 3600, 4)
    return out


def _row(r: RunResult, slo: float, at_equal: PairOracle | None, bound: float) -> dict[str, Any]:
    row = report.score(r, slo_ttft_s=slo, oracle=None, lower_bound_chip_s=bound)
    if at_equal is not None:
        if at_equal.met_target and at_equal.candidate.chip_s > 0:
            row["oracle_hours_at_equal_slo"] = round(at_equal.candidate.chip_s / 3600, 4)
            row["cost_vs_oracle"] = round(r.serving_chip_s / at_equal.candidate.chip_s, 4)
        else:
            row["oracle_attainment_gap"] = round(at_equal.target - at_equal.candidate.attainment, 6)
    row["pool_accelerator_hours"] = {k: round(v / 3600, 4) for k, v in r.pool_chip_s.items()}
    return row


def _tune_pair(
    cluster: Cluster, trace: traces.Trace, pair: tuple[PoolSpec, PoolSpec], slo: float, target: float,
    simulate: Callable[[Controller, int | None], RunResult], progress: Callable[[str], None] | None,
) -> baselines.TunedRun:
    """``hpa-tuned`` per pool, with hindsight: the prefill HPA tuned with the decode HPA at the tutorials'
    setting, then the decode HPA tuned with the chosen prefill HPA (each ``baselines.tune_hpa``'s grid)."""
    hpa_pipe = cluster.pipeline_name_for("hpa")
    pipe = cluster.spec.metric_pipelines[hpa_pipe]
    chosen: dict[str, ScalingPolicy] = {p.name: baselines.hpa_policy(cluster, p, name=f"hpa-{p.name}") for p in pair}
    full: dict[int, RunResult] = {}
    runs: list[dict[str, Any]] = []
    n = max(1, len(trace.arrivals))

    for pool in pair:
        def evaluate(pol: ScalingPolicy, stop: int | None, _pool: PoolSpec = pool) -> baselines.Trial:
            parts: list[Controller] = [
                PolicyController(compile_policy(pol if p.name == _pool.name else chosen[p.name]), pipe, hpa_pipe,
                                 kind="baseline", name=f"hpa-tuned/{p.name}") for p in pair
            ]
            res = simulate(CombinedController("hpa-tuned", "baseline", parts), stop)
            att = (1.0 - res.late / n) if res.stopped_early else oracle.attainment(res, slo)
            if not res.stopped_early:
                full[id(pol)] = res
            metric = pol.spec.policy.metrics[0]  # type: ignore[union-attr]
            runs.append({"pool": _pool.name, "preset": pol.spec.signals[0].preset,
                         "average_value": metric.target.average_value, "slo_attainment": round(att, 6),
                         "serving_accelerator_hours": round(res.serving_chip_s / 3600, 4),
                         "stopped_early": res.stopped_early})
            if progress is not None:
                progress(f"hpa-tuned {_pool.name}: {pol.spec.signals[0].preset} {metric.target.average_value:g}: "
                         f"attainment {att:.4f}")
            return baselines.Trial(att, res.serving_chip_s, not res.stopped_early)

        best = baselines.tune_hpa(cluster, pool, attainment_target=target, evaluate=evaluate,
                                  misses_allowed=oracle.misses_allowed(n, target)).policy
        chosen[pool.name] = best
        last = full[id(best)]
    info = {
        "tuned_with_hindsight": True,
        "method": "per pool, bisection on each HPA metric's target for the cheapest run reaching the attainment "
                  "target, on this very trace: prefill first (decode at the tutorials' HPA), then decode "
                  "(prefill at its chosen HPA)",
        "chosen": {name: {"preset": pol.spec.signals[0].preset,
                          "average_value": pol.spec.policy.metrics[0].target.average_value}  # type: ignore[union-attr]
                   for name, pol in chosen.items()},
        "runs": runs,
    }
    last.name = "hpa-tuned"
    return baselines.TunedRun(last, info)
