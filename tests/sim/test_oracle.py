"""The yardstick can fail: on both bundled traces no simple competitor is cheaper than the oracle at equal or
better attainment, at every attainment a competitor reaches (collapsed runs that serve a quarter of the
requests included); a weakened oracle search, and the search without its per-window level family, are
caught by that very check; and the lower bound is below every run (competitors and every schedule the
oracle simulated).

Twenty-minute windows of each trace keep this to tens of seconds; the weakened-search tests show they still
discriminate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import baselines, oracle, runner, traces
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim.simulation import Controller, FixedController, PolicyController, Simulation
from tests.sim.conftest import CODE, CONV, ROOT, TPU_CLUSTER

WINDOW_S = 1200.0
POLICIES = ROOT / "policies"


@dataclass
class Run:
    name: str
    attainment: float
    chip_s: float
    initial: int


@dataclass
class Scenario:
    cluster: cluster_mod.Cluster
    pool: cluster_mod.PoolSpec
    trace: traces.Trace
    slo: float
    target: float
    n0: int
    competitors: list[Run]


def _variants(policy: ScalingPolicy) -> list[ScalingPolicy]:
    """A policy with its sizing parameter ±20 % (online controllers too): an HPA's metric targets, a queue
    policy's ``capacityPerReplica``, an slo policy's ``targetUtilization`` (the utilization at the SLO it
    starts from, at most 1)."""
    out = []
    for factor in (0.8, 1.2):
        doc = policy.model_dump(by_alias=True, exclude_none=True, mode="json")
        doc["metadata"]["name"] = f"{policy.metadata.name}-x{factor:g}"
        pol = doc["spec"]["policy"]
        if pol["type"] == "hpa":
            for metric in pol["metrics"]:
                for key in ("averageValue", "value"):
                    if key in metric["target"]:
                        metric["target"][key] *= factor
        elif pol["type"] == "queue":
            pol["capacityPerReplica"] *= factor
        elif pol["type"] == "slo":
            pol["targetUtilization"] = min(1.0, pol.get("targetUtilization", 0.8) * factor)
        else:
            raise AssertionError(f"{policy.metadata.name}: no sizing parameter known for type {pol['type']}")
        out.append(ScalingPolicy.model_validate(doc))
    return out


def with_token_signals(policy: ScalingPolicy) -> ScalingPolicy:
    """The shipped JetStream policy reading JetStream's token counters and TTFT histogram too (the variant
    docs/slo.md describes; the one that undercut the oracle when the Service's random routing was one
    shared stream, docs/simulate.md)."""
    doc = policy.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["metadata"]["name"] = f"{policy.metadata.name}-tokens"
    doc["spec"]["signals"] += [
        {"name": "prompt", "preset": "jetstream.prompt_tokens", "rate": {"windowSeconds": 60}, "maxAgeSeconds": 30},
        {"name": "generated", "preset": "jetstream.generation_tokens", "rate": {"windowSeconds": 60},
         "maxAgeSeconds": 30},
    ]
    if not any(s["name"] == "ttft" for s in doc["spec"]["signals"]):  # the shipped one reads it since 2026-12-07
        doc["spec"]["signals"].append({"name": "ttft", "preset": "jetstream.ttft",
                                       "quantile": {"q": 0.99, "windowSeconds": 60}, "maxAgeSeconds": 30})
    doc["spec"]["policy"]["signals"].update(promptTokens="prompt", generationTokens="generated", ttft="ttft")
    return ScalingPolicy.model_validate(doc)


#: Shipped policies the simulator cannot run on a one-pool cluster, and why (every other one is a competitor
#: on both clusters).
NOT_SIMULATED = {
    "jetstream-slots-used": "reads TPU memory (tpu.memory_used_ratio), which the simulator does not model",
    "qwen-pd": "type disaggregated: two pools (tests/sim/test_disagg.py runs it on the TPU7x codelab cluster)",
    "qwen-pd-variants": "type disaggregated over three LWSs (tests/sim/test_variants.py runs it on the codelab's "
    "variants cluster)",
}


def shipped_policies() -> list[ScalingPolicy]:
    """Every policy of ``policies/`` (each document of each file) the simulator can run on one pool."""
    out = [pol for path in sorted(POLICIES.glob("*.yaml")) for pol in load_file(path)]
    assert {p.metadata.name for p in out} >= set(NOT_SIMULATED)
    return [p for p in out if p.metadata.name not in NOT_SIMULATED]


def _scenario(trace_path: Path, cluster_file: Path | None, policies: list[ScalingPolicy]) -> Scenario:
    cluster = cluster_mod.load(cluster_file)
    pool = cluster.spec.pools[0]
    trace = traces.reshape(traces.load(trace_path), duration_s=WINDOW_S)
    slo, target = cluster.spec.slo.ttft_seconds, cluster.spec.slo.attainment
    # Every competitor starts with the fleet the oracle's family needs over the first cold start.
    n0 = oracle.warm_fleet(trace, cluster, pool)

    def simulate(name: str, ctl: Controller) -> Run:
        res = Simulation(cluster=cluster, trace=trace, pool=pool, controller=ctl, initial_replicas=n0).run()
        return Run(name, oracle.attainment(res, slo), res.serving_chip_s, n0)

    hi = min(pool.max_replicas, cluster.spec.quota.nominal // cluster.chips_per_replica(pool))
    runs = [simulate(f"fixed-{n}", FixedController(f"fixed-{n}", n)) for n in range(pool.min_replicas, hi + 1)]
    server = cluster.profile(pool).server
    for preset, lo, top, _ in baselines.TUNED_METRICS[server]:
        for share in (0.1, 0.3, 0.6):
            value = round(lo + share * (top - lo), 2)
            name = f"hpa-{preset.replace('_', '-')}-{value:g}"
            pol = baselines.hpa_policy(cluster, pool, preset=preset, target=value, name=name)
            runs.append(simulate(pol.metadata.name, PolicyController(compile_policy(pol), cluster.pipeline_for("hpa"),
                                                                     "hpa")))
    for ours in policies:
        for pol in (ours, *_variants(ours)):
            runs.append(simulate(pol.metadata.name, PolicyController(compile_policy(pol), cluster.pipeline_for(
                pol.metadata.name), "default")))
    return Scenario(cluster, pool, trace, slo, target, n0, runs)


@pytest.fixture(scope="module", params=[
    pytest.param((CONV, None), id="conv-l4-tgi"),
    pytest.param((CODE, TPU_CLUSTER), id="code-tpu-jetstream"),
])
def scenario(request: pytest.FixtureRequest) -> Scenario:
    """Every shipped policy that runs on one pool, on both clusters (a policy written for another server
    reads the equivalent simulated gauge), with ±20 % variants; and the JetStream token variant."""
    trace_path, cluster_file = request.param
    shipped = shipped_policies()
    jetstream = next(p for p in shipped if p.metadata.name == "recommended-jetstream")
    return _scenario(trace_path, cluster_file, [*shipped, with_token_signals(jetstream)])


@dataclass
class Solved:
    search: oracle.Search
    violations: list[str]


@pytest.fixture(scope="module")
def solved(scenario: Scenario) -> Solved:
    """The full search, solved as ``simulate`` solves it (shared by the tests that need it)."""
    search = _search(scenario)
    return Solved(search, violations(search, scenario))


def _search(sc: Scenario, *, weak: bool = False, levels: bool = True) -> oracle.Search:
    # The oracle starts with the competitors' fleet: the comparison is at equal footing.
    if weak:
        # One window length, a narrow utilization range, coarse steps, no constant fleets, no level family.
        return oracle.Search(cluster=sc.cluster, trace=sc.trace, pool=sc.pool, slo_ttft_s=sc.slo,
                             initial_replicas=sc.n0, windows_s=(120.0,), u_range=(0.5, 0.8), u_resolution=0.5,
                             constant_fleets=False, levels=False)
    return oracle.Search(cluster=sc.cluster, trace=sc.trace, pool=sc.pool, slo_ttft_s=sc.slo, initial_replicas=sc.n0,
                         levels=levels)


def violations(search: oracle.Search, sc: Scenario) -> list[str]:
    """Competitors cheaper than the oracle at equal or better attainment, solved as ``simulate`` solves it:
    the full search at the SLO target, then a re-solve at each competitor's own attainment."""
    search.solve(sc.target)
    out = []
    for run in sc.competitors:
        orc = search.at_equal_slo(run.attainment, run.chip_s, quick_windows=runner.RESOLVE_WINDOWS)
        if not orc.met_target:
            out.append(f"{run.name}: attainment {run.attainment:.4f} that no oracle schedule reaches "
                       f"(best {orc.candidate.attainment:.4f})")
        elif orc.candidate.chip_s > run.chip_s + 1e-6:
            out.append(f"{run.name}: {run.chip_s / 3600:.3f} accel-h at {run.attainment:.4f}, oracle "
                       f"{orc.candidate.chip_s / 3600:.3f} at {orc.candidate.attainment:.4f}")
    return out


def test_no_competitor_is_cheaper_than_the_oracle_at_equal_attainment(scenario: Scenario, solved: Solved) -> None:
    """At every attainment a competitor reaches, from collapsed runs to the top (no floor)."""
    assert len(scenario.competitors) >= 10
    attainments = [r.attainment for r in scenario.competitors]
    # The grid spans the whole range, collapsed runs included.
    assert min(attainments) < 0.5
    assert max(attainments) > 0.99
    assert solved.violations == [], "\n".join(solved.violations)


def test_a_weakened_oracle_search_fails_the_check(scenario: Scenario) -> None:
    """The check above can fail: one window length, a narrow utilization range, coarse steps, no constant
    fleets and no level family make the oracle dearer than some competitor (even with the deep re-solve,
    which it still runs)."""
    assert violations(_search(scenario, weak=True), scenario) != []


def test_without_the_level_family_the_check_fails() -> None:
    """The per-window level family is what makes the oracle the cheapest far below its target: without it
    (windowed utilization, constant and floored fleets only), the tutorials' kind of HPA that collapses to a
    quarter of the requests served undercuts it on the conversation trace. (On the code trace the older
    families happen to cover every competitor of this grid, at 1.4× the level family's cost at 95 %.)"""
    sc = _scenario(CONV, None, load_file(POLICIES / "recommended.yaml"))
    found = violations(_search(sc, levels=False), sc)
    assert found != []


def test_the_lower_bound_is_below_every_run(scenario: Scenario, solved: Solved) -> None:
    search = solved.search
    runs = [*scenario.competitors, *(
        Run(f"oracle {c.family} {c.window_s:g}s u={c.utilization:.3f}", c.attainment, c.chip_s,
            search.initial_for(c.schedule))
        for c in search._by_schedule.values() if c.exact
    )]
    assert len(runs) > len(scenario.competitors)
    assert any(c.family == "levels" for c in search._by_schedule.values() if c.exact)
    for run in runs:
        bound = oracle.lower_bound_chip_s(trace=scenario.trace, cluster=scenario.cluster, pool=scenario.pool,
                                          slo_ttft_s=scenario.slo, target=run.attainment,
                                          initial_replicas=run.initial)
        assert 0 < bound <= run.chip_s, f"{run.name}: bound {bound / 3600:.3f} h > {run.chip_s / 3600:.3f} h"


def test_lower_bound_counts_the_work_and_grows_with_attainment() -> None:
    """A hand-checkable case: one replica's worth of requests; dropping misses lowers the bound."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    prof = cluster.profile(pool)
    n = 100
    tr = traces.Trace("t", [float(i) for i in range(n)], [int(prof.prefill_tokens_per_second // 10)] * n, [1] * n)
    # Each request: 0.1 s of prefill, no decode; H = 99 s, SLO 2 s: the 98 arriving by 97 s count.
    b = oracle.work_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                 initial_replicas=1)
    assert b == pytest.approx(cluster.chips_per_replica(pool) * 98 * 0.1)
    lower = oracle.work_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=0.9,
                                     initial_replicas=1)
    assert lower == pytest.approx(cluster.chips_per_replica(pool) * 88 * 0.1)
    # The readiness bound is larger here: a request arriving at 96 s meets the SLO only if a replica is
    # ready by 99 s, and that replica has been held since 0 (initial) or since 99 s − a cold start (< 0).
    both = oracle.lower_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                     initial_replicas=1)
    assert both == pytest.approx(cluster.chips_per_replica(pool) * 96)


def test_readiness_bound_counts_a_cold_start_per_burst_and_replica() -> None:
    """A hand-checkable case of the prefill-deadline bound: two bursts 2000 s apart, each 30 prompts of 0.2 s
    of prefill within 0.3 s. Their 6 s of prefill must end within 1 s + the 2 s SLO of the burst's window,
    so 2 replicas are ready at some moment of each burst; each was held for a cold start (lead) before it,
    and the bursts are further apart than a lead: 2 replicas × 2 bursts × a lead. A run that may miss half
    the requests is forced to nothing by it."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    prof = cluster.profile(pool)
    tokens = int(prof.prefill_tokens_per_second * 0.2)
    burst = [t + i / 100 for t in (1000.0, 3000.0) for i in range(30)]
    tr = traces.Trace("bursts", [*burst, 3600.0], [tokens] * 60 + [1], [1] * 61)
    lead = cluster.lead_seconds(pool)
    full = oracle.readiness_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                         horizon_s=tr.duration_s)
    assert full == pytest.approx(cluster.chips_per_replica(pool) * 2 * 2 * lead)
    half = oracle.readiness_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=0.5,
                                         horizon_s=tr.duration_s)
    assert half == 0.0
    # The work bound alone sees 12 s of prefill; the combined bound takes the larger.
    both = oracle.lower_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                     initial_replicas=1)
    assert both == pytest.approx(full)


def test_schedule_starts_a_cold_start_early_and_keeps_short_gaps() -> None:
    load = [1.5, 0.5, 0.5, 1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.5]
    sched = oracle.schedule_for(load, utilization=1.0, window_s=10, cold_start_s=15, lo=1, hi=4)
    # A window needs ceil(max(its load, the previous one's)): 2 in windows 0-1, 3-4 and 9, else 1.
    # The 10 s gap between windows 1 and 3 is shorter than a cold start plus a window: the second replica
    # stays on from 0 to 50 s. The 40 s gap before window 9 is longer: it stops at 50 s and starts again a
    # cold start (15 s) before window 9, at 75 s.
    assert sched == [(0.0, 2), (50.0, 1), (75.0, 2)]


def test_bundled_default_cluster_has_a_meaningful_scenario() -> None:
    """The default run needs several replicas and shares the quota with training, so preemption matters."""
    out = runner.run(runner.Options(baselines=("oracle",), duration_s=900))
    orc = out.summary["oracle"]
    assert 2 <= orc["peak_replicas"] <= 8
    assert out.summary["cluster"]["training_jobs"] > 0
    c = cluster_mod.load()
    assert c.spec.quota.nominal > orc["peak_replicas"] * c.chips_per_replica(c.spec.pools[0])


@settings(max_examples=200, deadline=None)
@given(total=st.floats(0, 1e4), pairs=st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), max_size=30))
def test_the_work_bounds_multiplier_is_the_grids_best(total: float, pairs: list[tuple[float, float]]) -> None:
    """``_best_mix`` (sorted break points) is the grid maximum the docstring states, term by term."""
    slack, decode = [w for w, _ in pairs], [d for _, d in pairs]
    brute = max(
        [0.0, *(lam * total + sum(min(0.0, (1 - lam) * w - lam * d) for w, d in pairs)
                for lam in (s / oracle.LAMBDA_STEPS for s in range(oracle.LAMBDA_STEPS + 1)))]
    )
    assert oracle._best_mix(total, slack, decode) == pytest.approx(brute, rel=1e-9, abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 60), data=st.data())
def test_the_boundary_search_finds_the_first_pass_from_any_guess(n: int, data: st.DataObject) -> None:
    """``Search._boundary`` on a monotone predicate over 0..n (n passes): the first passing index, whatever
    the guess, in no more calls than a bisection plus two gallops; two calls when the guess is right."""
    first = data.draw(st.integers(0, n))
    guess = data.draw(st.integers(0, n))
    calls: list[int] = []

    def passes(i: int) -> bool:
        calls.append(i)
        return i >= first

    fail, ok = oracle.Search._boundary(passes, -1, n, guess)
    assert (fail, ok) == (first - 1, first)
    assert len(calls) <= 3 * max(1, n).bit_length() + 2
    if guess == first and 0 < first < n:
        assert len(calls) == 2


# --- added where a mutation run (docs/testing.md) showed a rule of the bound untested ---------------------------


def test_the_work_bound_drops_the_largest_requests_a_miss_allows() -> None:
    """100 requests 2 s apart, 1 s of prefill each, no decode; H = 198 s, SLO 2 s: the 99 arriving by 196 s
    count. One miss allowed (99 %): the bound drops the costliest request, so a trace whose first request
    takes 10 s has the same bound as one where it takes 1 s: 98 s of work, 2 chips."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    tps = int(cluster.profile(pool).prefill_tokens_per_second)
    arrivals = [2.0 * i for i in range(100)]
    short = traces.Trace("short", arrivals, [tps] * 100, [1] * 100)
    long_first = traces.Trace("long", arrivals, [10 * tps] + [tps] * 99, [1] * 100)
    chips = cluster.chips_per_replica(pool)
    for tr in (short, long_first):
        b = oracle.work_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=0.99,
                                     initial_replicas=1)
        assert b == pytest.approx(chips * 98.0), tr.name


def test_the_work_bound_adds_the_cold_starts_the_work_forces() -> None:
    """The same 99 s of work with no replica at the start: one replica started at 0 is ready after the
    cold start (lead), so it can do at most H − lead = 198 − lead s of it; 99 s needs ceil(99 / (198 − lead))
    replicas, each paid for its cold start. With one initial replica (ready from 0) none is forced."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    tps = int(cluster.profile(pool).prefill_tokens_per_second)
    tr = traces.Trace("t", [2.0 * i for i in range(100)], [tps] * 100, [1] * 100)
    chips, lead = cluster.chips_per_replica(pool), cluster.lead_seconds(pool)
    started = math.ceil(99.0 / (198.0 - lead))
    assert started == 2  # the bundled profile's lead (122 s): a case where H − lead, not H, decides
    cold = oracle.work_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                    initial_replicas=0)
    assert cold == pytest.approx(chips * (99.0 + started * lead))
    warm = oracle.work_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                    initial_replicas=1)
    assert warm == pytest.approx(chips * 99.0)


def test_the_readiness_bound_drops_the_longest_prefills_a_miss_allows() -> None:
    """The two bursts of ``test_readiness_bound_counts_a_cold_start_per_burst_and_replica`` with the first
    prompt 3 s instead of 0.2 s. Served in full, burst 1's 8.8 s of prefill needs 3 replicas ready within its
    1 s + 2 s SLO: (3 + 2) × a lead. One miss allowed (60 of 61): the 3 s prompt is the one dropped, and the
    bound is the all-short trace's, 2 replicas × 2 bursts × a lead."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    tps = cluster.profile(pool).prefill_tokens_per_second
    burst = [t + i / 100 for t in (1000.0, 3000.0) for i in range(30)]
    short = int(tps * 0.2)
    tr = traces.Trace("bursts", [*burst, 3600.0], [int(tps * 3.0)] + [short] * 59 + [1], [1] * 61)
    chips, lead = cluster.chips_per_replica(pool), cluster.lead_seconds(pool)
    full = oracle.readiness_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                         horizon_s=tr.duration_s)
    assert full == pytest.approx(chips * (3 + 2) * lead)
    one_miss = oracle.readiness_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=60 / 61,
                                             horizon_s=tr.duration_s)
    assert one_miss == pytest.approx(chips * 2 * 2 * lead)


def test_readiness_bound_stops_at_the_most_replicas_the_pool_may_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt of 2,000 s of prefill every 10 s asks for hundreds of ready replicas at some moment: no run of
    an 8-replica pool reaches that attainment, and the bound counts the levels up to 8 only (a valid, smaller
    sum). The walk had taken one pass over every requirement per level asked (667 here; 1.9 s of CPU)."""
    cluster = cluster_mod.load()
    pool = cluster.spec.pools[0]
    prof = cluster.profile(pool)
    tokens = int(prof.prefill_tokens_per_second * 2000)
    tr = traces.Trace("long", [10.0 * i for i in range(360)], [tokens] * 360, [1] * 360)
    reqs = oracle.ready_requirements(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                     horizon_s=tr.duration_s)
    cap = min(pool.max_replicas, cluster.capacity_chips // cluster.chips_per_replica(pool))
    assert max(r.replicas for r in reqs) > 50 * cap  # the scenario asks far beyond the pool
    levels: list[int] = []
    held = oracle._held_at_least

    def counted(requirements: list[oracle.ReadyRequirement], level: int, lead_s: float) -> float:
        levels.append(level)
        return held(requirements, level, lead_s)

    monkeypatch.setattr(oracle, "_held_at_least", counted)
    bound = oracle.readiness_bound_chip_s(trace=tr, cluster=cluster, pool=pool, slo_ttft_s=2.0, target=1.0,
                                          horizon_s=tr.duration_s)
    assert levels == list(range(1, cap + 1))
    lead = cluster.lead_seconds(pool)
    assert bound == pytest.approx(cluster.chips_per_replica(pool) * sum(held(reqs, k, lead) for k in levels))
