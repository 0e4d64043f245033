"""One ``autoscaler simulate`` run: every policy and baseline on the same trace and cluster, side by side.

Kept apart from the command line so benchmarks and tests drive exactly what the command does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim import BASELINES, baselines, disagg, forks, oracle, report, traces
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim.simulation import Controller, FixedController, PolicyController, RunResult, Simulation

#: Window lengths searched again when the oracle is re-solved at a compared run's attainment (the full search
#: at the SLO target covers every window length; see docs/simulate.md).
RESOLVE_WINDOWS = 1


#: A feasibility share above this prints a warning before the run.
FEASIBILITY_WARN = 0.01


def feasibility(trace: traces.Trace, cluster: cluster_mod.Cluster, pool: cluster_mod.PoolSpec,
                slo_ttft_s: float) -> dict[str, float]:
    """What no autoscaler can fix on this profile: requests whose prefill alone exceeds the SLO, and
    requests longer than the server's context (rejected)."""
    prof = cluster.profile(pool)
    n = max(1, len(trace.arrivals))
    slow = sum(1 for i in trace.inputs if i / prof.prefill_tokens_per_second > slo_ttft_s)
    ctx = prof.context_tokens
    long = 0 if ctx is None else sum(1 for i, o in zip(trace.inputs, trace.outputs, strict=True) if i + o > ctx)
    return {"prefill_over_slo_fraction": round(slow / n, 6), "over_context_fraction": round(long / n, 6)}


def feasibility_warnings(feas: dict[str, float], profile: str, slo_ttft_s: float) -> list[str]:
    out = []
    if feas["prefill_over_slo_fraction"] > FEASIBILITY_WARN:
        out.append(f"warning: {feas['prefill_over_slo_fraction']:.1%} of requests need more than the "
                   f"{slo_ttft_s:g}s SLO for their prefill alone on profile {profile}: no fleet meets the SLO "
                   "for them")
    if feas["over_context_fraction"] > FEASIBILITY_WARN:
        out.append(f"warning: {feas['over_context_fraction']:.1%} of requests exceed the context of profile "
                   f"{profile} (contextTokens): the server rejects them")
    return out


def default_policy_path() -> Path:
    """``policies/recommended.yaml`` of the checkout, else the copy bundled in the package."""
    repo = Path(__file__).resolve().parents[2] / "policies" / "recommended.yaml"
    return repo if repo.is_file() else cluster_mod.bundled("recommended.yaml")


@dataclass
class Options:
    requests: Path | None = None
    cluster: Path | None = None
    policies: list[tuple[str, ScalingPolicy]] = field(default_factory=list)
    baselines: tuple[str, ...] = BASELINES
    slo_ttft_s: float | None = None
    seed: int = 0
    rate_scale: float | None = None
    time_scale: float | None = None
    duration_s: float | None = None
    start_s: float = 0.0
    skip_bad_rows: bool = False
    #: The trace's arrival and token columns; None: the Azure or the generic layout, found by name.
    requests_columns: traces.Columns | None = None
    pool: str | None = None
    #: Replicas ready at the start; None = the cluster's ``initialReplicas``, else the warm start.
    initial_replicas: int | None = None
    #: ``service`` or ``least-request``; None = the pool's ``routing``.
    routing: str | None = None
    #: Processes that run independent simulations side by side (``forks``); 1: all in this one. The output is
    #: the same whatever the number.
    workers: int = 1


@dataclass
class Outcome:
    summary: dict[str, Any]
    results: list[RunResult]
    trace: traces.Trace
    cluster: cluster_mod.Cluster
    slo_ttft_s: float


def _tune_hpa(
    cluster: cluster_mod.Cluster, trace: traces.Trace, pool: cluster_mod.PoolSpec, slo: float, target: float,
    n0: int, routing: str, seed: int, progress: Callable[[str], None] | None,
) -> baselines.TunedRun:
    """``hpa-tuned``: the grid search of ``baselines.tune_hpa``, every run in the very same model."""
    full: dict[int, RunResult] = {}

    def evaluate(pol: ScalingPolicy, stop: int | None) -> baselines.Trial:
        ctl = PolicyController(compile_policy(pol), cluster.pipeline_for("hpa"), cluster.pipeline_name_for("hpa"),
                               kind="baseline")
        res = Simulation(cluster=cluster, trace=trace, controller=ctl, pool=pool, initial_replicas=n0,
                         routing=routing, seed=seed, slo_ttft_s=slo, stop_after_misses=stop).run()
        n = max(1, len(trace.arrivals))
        att = (1.0 - res.late / n) if res.stopped_early else oracle.attainment(res, slo)
        if not res.stopped_early:
            full[id(pol)] = res
        if progress is not None:
            progress(f"hpa-tuned: {pol.spec.signals[0].preset} target "
                     f"{pol.spec.policy.metrics[0].target.average_value:g}: attainment {att:.4f}")  # type: ignore[union-attr]
        return baselines.Trial(att, res.serving_chip_s, not res.stopped_early)

    tuned = baselines.tune_hpa(cluster, pool, attainment_target=target, evaluate=evaluate,
                               misses_allowed=oracle.misses_allowed(len(trace.arrivals), target))
    chosen, tried = tuned.policy, tuned.tried
    result = full[id(chosen)]
    metric = chosen.spec.policy.metrics[0]  # type: ignore[union-attr]
    info = {
        "tuned_with_hindsight": True,
        "method": "per metric, bisection on the HPA target over its grid for the cheapest run reaching the "
                  "attainment target, on this very trace (docs/simulate.md)",
        "chosen": {"preset": chosen.spec.signals[0].preset, "average_value": metric.target.average_value},
        "grid": {preset: {"from": lo, "to": hi, "step": step}
                 for preset, lo, hi, step in baselines.TUNED_METRICS[cluster.profile(pool).server]},
        "runs": [{"preset": c.preset, "average_value": c.target, "slo_attainment": round(c.attainment, 6),
                  "serving_accelerator_hours": round(c.chip_s / 3600, 4), "stopped_early": not c.exact}
                 for c in tried],
    }
    return baselines.TunedRun(result, info)


@dataclass
class _Row:
    """One row's simulation, and for ``hpa-tuned`` how its grid search went."""

    result: RunResult
    tuned_info: dict[str, Any] | None = None


def _tuned_row(
    cluster: cluster_mod.Cluster, trace: traces.Trace, pool: cluster_mod.PoolSpec, slo: float, target: float,
    n0: int, routing: str, seed: int, progress: Callable[[str], None] | None,
) -> _Row:
    tuned = _tune_hpa(cluster, trace, pool, slo, target, n0, routing, seed, progress)
    return _Row(tuned.result, tuned.info)


def _row(ctl: Controller, cluster: cluster_mod.Cluster, trace: traces.Trace, pool: cluster_mod.PoolSpec, n0: int,
         routing: str, seed: int, progress: Callable[[str], None] | None) -> _Row:
    if progress is not None:
        progress(f"{ctl.name}: simulating")
    sim = Simulation(cluster=cluster, trace=trace, controller=ctl, pool=pool, initial_replicas=n0,
                     routing=routing, seed=seed)
    tick = None
    if progress is not None:
        def tick(t: float, _name: str = ctl.name, _h: float = sim.horizon) -> None:
            progress(f"{_name}: {t:.0f}/{_h:.0f} s")
    return _Row(sim.run(tick))


def header(trace: traces.Trace, cluster: cluster_mod.Cluster, pool: cluster_mod.PoolSpec, slo_ttft_s: float,
           routing: str) -> list[str]:
    """What the run is about and what no autoscaler can fix on it, printed before the run."""
    tr = trace.describe()
    feas = feasibility(trace, cluster, pool, slo_ttft_s)
    lines = [
        f"trace {tr['name']}: {tr['requests']} requests over {tr['duration_s']:.0f}s "
        f"({tr['mean_rate_rps']:.2f} req/s; rate-scale {tr['rate_scale']:g}, time-scale {tr['time_scale']:g}"
        + (f", {tr['skipped_rows']} bad rows skipped" if tr["skipped_rows"] else "")
        + f"); cluster {cluster.name}, pool {pool.name}, routing {routing}; SLO TTFT ≤ {slo_ttft_s:g}s",
        f"feasibility on {pool.profile}: prefill alone over the SLO {feas['prefill_over_slo_fraction']:.2%}, "
        f"over the context {feas['over_context_fraction']:.2%} of requests",
    ]
    return lines + feasibility_warnings(feas, pool.profile, slo_ttft_s)


def _run_disaggregated(opts: Options, cluster: cluster_mod.Cluster, trace: traces.Trace, slo: float, target: float,
                       routing: str, progress: Callable[[str], None] | None) -> Outcome:
    """Both pools of a disaggregated cluster in every run (``autoscaler.sim.disagg``)."""
    pair = cluster.disaggregated
    assert pair is not None
    out = disagg.run_rows(cluster=cluster, trace=trace, policies=opts.policies, wanted=opts.baselines, slo=slo,
                          target=target, routing=routing, seed=opts.seed, progress=progress)
    results: list[RunResult] = out.pop("results")
    summary: dict[str, Any] = dict(out)
    summary["feasibility"] = feasibility(trace, cluster, pair[0], slo)
    summary["routing"] = routing
    summary["initial_replicas"] = sum(out["initial_by_pool"].values())
    summary["trace"] = trace.describe()
    summary["cluster"] = {
        "name": cluster.name,
        "source": cluster.source,
        "pools": {p.name: {"role": role, "profile": p.profile, "chips_per_replica": cluster.chips_per_replica(p),
                           "lead_s": cluster.lead_seconds(p)}
                  for role, p in zip(("prefill", "decode"), pair, strict=True)},
        "capacity_chips": cluster.capacity_chips,
        "quota_chips": cluster.spec.quota.nominal,
        "topology": cluster.spec.topology.model_dump(by_alias=True) if cluster.spec.topology else None,
        "kv_transfer": (cluster.spec.disaggregation.kv_transfer.model_dump(by_alias=True)
                        if cluster.spec.disaggregation else None),
        "training_jobs": sum(t.count for t in cluster.spec.training),
        "pipelines": {name: spec.model_dump(by_alias=True) for name, spec in cluster.spec.metric_pipelines.items()},
    }
    summary["slo"] = {"ttft_s": slo, "attainment_target": target}
    summary["seed"] = opts.seed
    return Outcome(summary, results, trace, cluster, slo)


def run(opts: Options, *, progress: Callable[[str], None] | None = None,
        announce: Callable[[str], None] | None = None) -> Outcome:
    """Load everything, run every controller, score. Raises the loaders' errors on bad input.

    ``announce`` receives the header lines (trace, feasibility and its warnings) before any simulation."""
    cluster = cluster_mod.load(opts.cluster)
    scen = cluster.spec.scenario
    requests = opts.requests or cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv")
    raw = traces.load(requests, skip_bad_rows=opts.skip_bad_rows, columns=opts.requests_columns)
    trace = traces.reshape(
        raw,
        time_scale=opts.time_scale if opts.time_scale is not None else scen.time_scale,
        rate_scale=opts.rate_scale if opts.rate_scale is not None else scen.rate_scale,
        duration_s=opts.duration_s if opts.duration_s is not None else scen.duration_seconds,
        start_s=opts.start_s,
        seed=opts.seed,
    )
    pool = cluster.spec.pools[0]
    if opts.pool is not None:
        match = [p for p in cluster.spec.pools if p.name == opts.pool]
        if not match:
            raise ValueError(
                f"no pool {opts.pool!r} in {cluster.source}; pools: {', '.join(p.name for p in cluster.spec.pools)}"
            )
        pool = match[0]
    pair = cluster.disaggregated
    if pair is not None:
        pool = pair[0]  # the trace arrives at the prefill pool
    slo = opts.slo_ttft_s if opts.slo_ttft_s is not None else cluster.spec.slo.ttft_seconds
    target = cluster.spec.slo.attainment
    routing = opts.routing or pool.routing
    if announce is not None:
        for line in header(trace, cluster, pool, slo, routing):
            announce(line)
        if pair is not None:
            announce(f"disaggregated: prefill pool {pair[0].name}, decode pool {pair[1].name} "
                     f"({cluster.chips_per_replica(pair[1])} chips per group); every row sizes both, "
                     "scored together")
    if pair is not None:
        for flag, value in (("--initial-replicas", opts.initial_replicas), ("--pool", opts.pool)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to a disaggregated cluster ({cluster.source}): every run "
                                 "drives both pools; set initialReplicas on each pool in the file instead")
        return _run_disaggregated(opts, cluster, trace, slo, target, routing, progress)

    controllers: list[Controller] = []
    for name, pol in opts.policies:
        compiled = compile_policy(pol)
        pipe_name = cluster.pipeline_name_for(pol.metadata.name)
        controllers.append(PolicyController(compiled, cluster.pipeline_for(pol.metadata.name), pipe_name, name=name))
    first = opts.policies[0][1] if opts.policies else None
    kueue_only = baselines.kueue_only_policy(first) if first is not None else None
    if "kueue-only" in opts.baselines and first is not None and kueue_only is not None:
        # The metric pipeline of the policy it copies: only the arbitration differs.
        pipe = first.metadata.name
        controllers.insert(0, PolicyController(compile_policy(kueue_only), cluster.pipeline_for(pipe),
                                               cluster.pipeline_name_for(pipe), kind="baseline"))
    if "keda" in opts.baselines:
        keda = baselines.keda_pipeline(cluster)
        keda_pipe_name, keda_pipe = keda.name, keda.spec
        controllers.insert(0, PolicyController(compile_policy(baselines.keda_policy(cluster, pool)), keda_pipe,
                                               keda_pipe_name, kind="baseline"))
    if "hpa" in opts.baselines:
        hpa = baselines.hpa_policy(cluster, pool)
        controllers.insert(0, PolicyController(compile_policy(hpa), cluster.pipeline_for("hpa"),
                                               cluster.pipeline_name_for("hpa"), kind="baseline"))

    # Warm start: a fixed fleet if asked for; else every run starts with the fleet the oracle (at the SLO
    # target) holds at time 0, and each oracle schedule with its own.
    if opts.initial_replicas is not None and opts.initial_replicas > pool.max_replicas:
        # 10^8 ready replicas ran for ever (robust2's sweep); no controller may hold more than maxReplicas.
        raise ValueError(f"--initial-replicas {opts.initial_replicas} is more than pool {pool.name}'s maxReplicas "
                         f"({pool.max_replicas}, {cluster.source})")
    fixed_n0 = opts.initial_replicas if opts.initial_replicas is not None else pool.initial_replicas
    search = oracle.Search(cluster=cluster, trace=trace, pool=pool, slo_ttft_s=slo, initial_replicas=fixed_n0,
                           progress=progress, routing=routing, seed=opts.seed, workers=opts.workers)
    orc: oracle.OracleResult | None = None
    # The oracle also sizes static-peak, so it is computed whenever either is asked for.
    if "oracle" in opts.baselines or "static-peak" in opts.baselines:
        orc = search.solve(target)
    if fixed_n0 is not None:
        n0 = fixed_n0
    elif orc is not None:
        n0 = search.initial_for(orc.schedule)
    else:
        n0 = oracle.warm_fleet(trace, cluster, pool)
    if "static-peak" in opts.baselines and orc is not None:
        controllers.insert(0, FixedController("static-peak", orc.peak))

    # Every row is one simulation (hpa-tuned a grid search of them), independent of the others: they run side
    # by side in ``opts.workers`` processes (``forks``) while this one re-solves the oracle at each row's
    # attainment, in table order, as the rows come in.
    row_progress = progress if opts.workers <= 1 else None
    names: list[str] = []
    tasks: list[Callable[[], _Row]] = []
    if "hpa-tuned" in opts.baselines:
        names.append("hpa-tuned")
        tasks.append(lambda: _tuned_row(cluster, trace, pool, slo, target, n0, routing, opts.seed, row_progress))
    for ctl in controllers:
        names.append(ctl.name)
        tasks.append(lambda _ctl=ctl: _row(_ctl, cluster, trace, pool, n0, routing, opts.seed,  # type: ignore[misc]
                                           row_progress))
    if progress is not None and opts.workers > 1:
        progress(f"{', '.join(names)}: simulating in {min(opts.workers, len(tasks))} processes")

    bounds: dict[tuple[float, int], float] = {}

    def bound(att: float, initial: int = n0) -> float:
        # Rows of equal attainment (kueue-only and the policy it copies, often) share one computation.
        if (att, initial) not in bounds:
            bounds[(att, initial)] = oracle.lower_bound_chip_s(trace=trace, cluster=cluster, pool=pool,
                                                               slo_ttft_s=slo, target=att, initial_replicas=initial)
        return bounds[(att, initial)]

    # Table order: the baselines as listed in BASELINES, then the policies.
    order = {name: i for i, name in enumerate(BASELINES)}
    in_table = sorted(range(len(tasks)), key=lambda i: order.get(names[i], len(order)))
    with_oracle = "oracle" in opts.baselines
    rows = {}
    results: list[RunResult] = []
    tuned_info: dict[str, Any] | None = None
    with forks.Forks(tasks, opts.workers) as running:
        for i in in_table:
            row = running.result(i)
            r = row.result
            results.append(r)
            if row.tuned_info is not None:
                tuned_info = row.tuned_info
            att = oracle.attainment(r, slo)
            # Re-solved at this run's own attainment, in the window length cheapest so far there.
            at_equal = (search.at_equal_slo(att, r.serving_chip_s, quick_windows=RESOLVE_WINDOWS) if with_oracle
                        else None)
            rows[r.name] = report.score(r, slo_ttft_s=slo, oracle=at_equal, lower_bound_chip_s=bound(att))
            rows[r.name]["tuned_with_hindsight"] = r.name == "hpa-tuned"
    summary: dict[str, Any] = {"policies": rows}
    if tuned_info is not None:
        summary["hpa_tuned"] = tuned_info
    if orc is not None and with_oracle:
        o = report.score(orc.result, slo_ttft_s=slo, oracle=orc,
                         lower_bound_chip_s=bound(target, search.initial_for(orc.schedule)))
        o.update({
            "method": "cheapest simulated perfect-foresight schedule meeting the attainment target: per-window "
                      "fleet levels chosen by a Lagrangian sweep over a menu of levels, bisection on the "
                      "utilization factor per window length, and constant fleets (docs/simulate.md)",
            "family": orc.candidate.family,
            "attainment_target": target,
            "met_target": orc.met_target,
            "utilization": round(orc.utilization, 4),
            "window_s": orc.window_s,
            "peak_replicas": orc.peak,
            "schedules_simulated": search.evaluated,
            "search": {
                "windows_s": list(search.windows),
                "utilization_range": list(search.u_range),
                "utilization_resolution": search.u_resolution,
                "range_edge_reached_in_windows_s": sorted(search.edge_hits),
                "level_window_s": search.level_window_s if search.levels else None,
                "level_lead_s": search.level_lead_s,
                "level_hull_plans": len(search.level_hull()) if search.levels else 0,
            },
        })
        summary["oracle"] = o
        results.append(orc.result)
    summary["lower_bound_accelerator_hours"] = round(bound(target) / 3600, 4)
    summary["feasibility"] = feasibility(trace, cluster, pool, slo)
    summary["routing"] = routing
    summary["initial_replicas"] = n0
    summary["trace"] = trace.describe()
    summary["cluster"] = {
        "name": cluster.name,
        "source": cluster.source,
        "pool": pool.name,
        "profile": pool.profile,
        "chips_per_replica": cluster.chips_per_replica(pool),
        "cold_start_s": cluster.profile(pool).cold_start.total,
        "quota_chips": cluster.spec.quota.nominal,
        "training_jobs": sum(t.count for t in cluster.spec.training),
        "pipelines": {name: spec.model_dump(by_alias=True) for name, spec in cluster.spec.metric_pipelines.items()},
    }
    summary["slo"] = {"ttft_s": slo, "attainment_target": target}
    summary["seed"] = opts.seed
    return Outcome(summary, results, trace, cluster, slo)
