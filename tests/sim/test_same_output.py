"""Speed without a figure moving: the oracle's schedules run without the servers' metrics give the very runs
they give with them."""

from __future__ import annotations

import dataclasses
import math

import pytest

from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import traces
from autoscaler.sim.simulation import RunResult, ScheduleController, Simulation


def _trace(duration: float) -> traces.Trace:
    return traces.reshape(traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv")),
                          time_scale=1.0, rate_scale=1.0, duration_s=duration, start_s=600.0, seed=0)


def _fields(res: RunResult) -> dict[str, object]:
    """Everything a run reports, NaN made comparable."""
    out = dataclasses.asdict(res)
    req = res.requests
    out["requests"] = {k: [None if isinstance(v, float) and math.isnan(v) else v for v in getattr(req, k)]
                       for k in ("started", "first_token", "done", "outcome")}
    return out


@pytest.mark.parametrize("sched", [[(0.0, 2)], [(0.0, 3), (120.0, 5), (400.0, 2)]], ids=["short", "scaling"])
def test_a_schedule_run_without_the_servers_metrics_reports_the_same_run(sched: list[tuple[float, int]]) -> None:
    """The oracle's schedules keep no server histograms (``ServingPool.keep_no_metrics``): every field of the
    run is the same as with them, stopping early included; and scraping such a pool is refused."""
    cl, tr = cluster_mod.load(), _trace(600.0)
    pool = cl.spec.pools[0]
    runs = []
    for keep in (True, False):
        for stop in (None, 3):
            sim = Simulation(cluster=cl, trace=tr, pool=pool, controller=ScheduleController("oracle", sched),
                             initial_replicas=sched[0][1], slo_ttft_s=2.0, stop_after_misses=stop, seed=0)
            if not keep:
                sim.pool.keep_no_metrics()
            runs.append(_fields(sim.run()))
            if not keep:
                with pytest.raises(RuntimeError, match="keeps no metrics"):
                    sim.pool.gauges(sim.pool.replicas[0], sim.now)
    assert runs[0] == runs[2]
    assert runs[1] == runs[3]

