"""Speed without a figure moving: simulations side by side in forked processes, and the oracle's schedules run
without the servers' metrics, give the very output of one process keeping every metric."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from autoscaler import cli
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import forks, oracle, traces
from autoscaler.sim.simulation import RunResult, ScheduleController, Simulation

fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="forks run in the caller without os.fork")


def _square(x: int) -> int:
    return x * x


@fork_only
def test_values_come_back_in_the_order_asked_whoever_computed_them() -> None:
    tasks = [lambda x=x: (os.getpid(), _square(x)) for x in range(7)]
    with forks.Forks(tasks, 3) as running:
        got = [running.result(i) for i in (6, 0, 3, 1, 2, 5, 4)]
    assert [v for _, v in got] == [36, 0, 9, 1, 4, 25, 16]
    assert os.getpid() not in {pid for pid, _ in got}  # computed in children
    assert forks.run_all(tasks, 1)[2] == (os.getpid(), 4)  # one worker: in the caller


@fork_only
def test_a_task_that_raises_in_a_child_raises_in_the_caller_with_its_traceback() -> None:
    def boom() -> int:
        raise ValueError("no such fleet")

    with pytest.raises(forks.TaskFailed, match=r"(?s)task 1 failed.*ValueError: no such fleet"):
        forks.run_all([lambda: 1, boom, lambda: 3], 2)


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


def test_the_whole_run_is_the_same_in_one_process_and_in_several(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``autoscaler simulate --workers 1`` and ``--workers 3`` (the rows and the oracle's menu side by side)
    write the same table and the same files, byte for byte."""
    outs: list[dict[str, bytes]] = []
    for workers in (1, 3):
        out = tmp_path / f"w{workers}"
        args = ["simulate", "--duration", "600", "--start", "900", "--out", str(out), "--workers", str(workers)]
        assert cli.main(args) == 0
        printed = capsys.readouterr()
        files = {f: (out / f).read_bytes() for f in ("summary.json", "scale_events.jsonl", "timeline.png")}
        outs.append({"stdout": printed.out.replace(str(out), "OUT").encode(), "stderr": printed.err.encode(),
                     **files})
    assert outs[0] == outs[1]
    rows = json.loads(outs[0]["summary.json"])["policies"]
    assert list(rows) == ["static-peak", "hpa", "hpa-tuned", "keda", "kueue-only", "recommended"]


def test_the_oracles_menu_simulated_ahead_is_the_menu_simulated_in_turn() -> None:
    """The level menu's constant fleets, simulated side by side before the search asks for them, are the runs
    it would simulate itself: the same menu, the same answer, the same count of schedules simulated."""
    cl, tr = cluster_mod.load(), _trace(600.0)
    pool = cl.spec.pools[0]
    found = []
    for workers in (1, 2):
        search = oracle.Search(cluster=cl, trace=tr, pool=pool, slo_ttft_s=2.0, workers=workers)
        best = search.solve(0.99)
        found.append((search.level_menu().misses, best.candidate.schedule, best.candidate.chip_s,
                       best.candidate.attainment, search.evaluated, _fields(best.result)))
    assert found[0] == found[1]


def test_workers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--workers", "0"]) == 2
    assert "--workers must be ≥ 1" in capsys.readouterr().err

