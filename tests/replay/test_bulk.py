"""The replay's bulk path (``engine._bulk``, ``core.fast.HpaScan``) writes what the plain path writes, byte for byte.

The plain path here is ``core.engine.decide`` at every evaluation: the fast path (``hpa_decider``) and the bulk path
both switched off. The bulk path must give the same ``decisions.jsonl``, ``summary.json`` and ``replay.svg`` over
random hpa policies (one to three metrics of every kind, perReplica and total signals, tolerances, bounds, periods)
and random traces (values on and near the milli-unit and tolerance edges, samples off the evaluation grid, ages up
to the signals' maximum, recorded counts that move, recorded ready replicas). Clean traces must take the bulk path
(else the comparison would be vacuous); traces with gaps, stale, negative or missing readings must not, and are
compared all the same.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autoscaler import forked
from autoscaler.cli import main
from autoscaler.core import fast
from autoscaler.core.engine import compile_policy
from autoscaler.replay import command, engine, traces

START = 1_764_460_800

#: Values a signal takes: on and near whole milli-units (``hpa.milli``'s rounding band), at tolerance edges of the
#: targets below, small and large.
SPECIAL = [0.0, 0.001, 0.0010000004, 0.0009999996, 0.0010000009, 0.1, 0.7, 0.77, 0.8, 0.88, 0.72, 1.0, 5.0, 5.5,
           4.5, 1e-7, 123456.789, 2.675, 0.959]
values = st.one_of(st.sampled_from(SPECIAL), st.floats(0.0, 2.0), st.floats(0.0, 200.0))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    n_metrics = draw(st.integers(1, 3))
    min_replicas = draw(st.integers(1, 4))
    max_replicas = draw(st.integers(min_replicas, 30))
    period = draw(st.sampled_from([15, 15, 30, 10]))
    sigs, metrics, targets = [], [], []
    for i in range(n_metrics):
        kind = draw(st.sampled_from(["Pods", "External-Average", "External-Value"]))
        scope = draw(st.sampled_from(["perReplica", "total"]))
        target = draw(st.sampled_from([0.8, 0.7, 5, 1, 0.5, 10]))
        targets.append(target)
        sigs.append({"name": f"s{i}", "query": f"sum(s{i})", "scope": scope, "maxAgeSeconds": 60})
        if kind == "Pods":
            metrics.append(
                {"signal": f"s{i}", "type": "Pods", "target": {"type": "AverageValue", "averageValue": target}}
            )
        elif kind == "External-Average":
            metrics.append(
                {"signal": f"s{i}", "type": "External", "target": {"type": "AverageValue", "averageValue": target}}
            )
        else:
            metrics.append({"signal": f"s{i}", "type": "External", "target": {"type": "Value", "value": target}})
    hpa: dict[str, Any] = {"type": "hpa", "metrics": metrics}
    tolerance = draw(st.sampled_from([None, 0.1, 0.0, 0.25]))
    if tolerance is not None:
        hpa["tolerance"] = tolerance
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "bulk"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "evaluationPeriodSeconds": period,
            "signals": sigs,
            "policy": hpa,
        },
    }
    clean = draw(st.booleans())
    rows = draw(st.integers(1, 120))
    step = draw(st.sampled_from([period, period, 7, 20]))  # samples off the evaluation grid too
    ready_column = draw(st.booleans())
    # A recording may start out of the policy's bounds too (a count set by hand before the policy took over).
    count = draw(st.integers(min_replicas, max_replicas) if clean else st.integers(0, max_replicas + 3))
    offset = draw(st.sampled_from([0, 0, 0, 0.25, 0.0006, 0.1237]))  # evaluation times with a fraction too
    lines = ["timestamp," + ",".join(f"s{i}" for i in range(n_metrics)) + ",replicas"
             + (",replicas_ready" if ready_column else "")]
    at = 0.0
    for r in range(rows):
        if r and not clean and draw(st.integers(0, 12)) == 0:
            at += step * draw(st.integers(2, 12))  # a gap in the recording: stale, then missing readings
        else:
            at += step if r else 0
        if draw(st.integers(0, 9)) == 0:
            count = draw(st.integers(min_replicas, max_replicas) if clean else st.integers(0, max_replicas + 3))
        cells = []
        for i in range(n_metrics):
            v = draw(values)
            if draw(st.integers(0, 3)) == 0:
                # On a tolerance edge (or the target itself), per replica or over the whole count.
                factor = draw(st.sampled_from([0.9, 1.1, 0.75, 1.25, 1.0, 0.5]))
                v = round(targets[i] * factor * draw(st.sampled_from([1, count])), 3)
            if not clean and draw(st.integers(0, 15)) == 0:
                cells.append(draw(st.sampled_from(["", "NaN", "-1", "+Inf"])))
            else:
                cells.append(repr(v))
        jitter = draw(st.sampled_from([0, 0, 0, 0, 0.5, 0.0004, 0.1237]))  # ages with a fraction of a second
        line = f"{START + offset + at + jitter}," + ",".join(cells) + f",{count}"
        if ready_column:
            line += f",{draw(st.integers(0, count) if not clean else st.integers(max(count - 2, 1), count))}"
        lines.append(line)
    mode = draw(st.sampled_from(["recorded", "whatif"]))
    return {"policy": doc, "csv": "\n".join(lines) + "\n", "clean": clean, "ready": ready_column, "rows": rows,
            "mode": mode}


def _replay(tmp: Path, case: dict[str, Any], out: str) -> dict[str, Any]:
    policy = tmp / "policy.yaml"
    policy.write_text(yaml.safe_dump(case["policy"]))
    trace = tmp / "trace.csv"
    trace.write_text(case["csv"])
    code = main(["replay", "--policy", str(policy), "--metrics", str(trace), "--out", str(tmp / out), "-q",
                 "--mode", case.get("mode", "recorded")])
    written = {name: (tmp / out / name).read_bytes() for name in ("decisions.jsonl", "summary.json", "replay.svg")
               if (tmp / out / name).exists()}
    return {"code": code, **written}


def _child_fails(*args: Any) -> Any:
    raise RuntimeError("the forked child gives no answer")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(), block=st.sampled_from([8192, 1, 7, 40]), split=st.sampled_from(["no", "yes", "child fails"]),
       shortest=st.sampled_from([1, 1, 3, 64]))
def test_the_bulk_path_writes_what_decide_writes(case: dict[str, Any], block: int, split: str, shortest: int,
                                                  tmp_path_factory: pytest.TempPathFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of every size (one evaluation, a few, all), in one process or split over two (``command._in_bulk``:
    the later half decided by a forked child from the policy's memory there, or, when the child gives no
    answer, by this process); traces with gaps, stale, negative and non-finite readings and counts out of bounds
    decided in bulk between the evaluations decided one at a time (stretches in bulk from ``shortest`` on)."""
    tmp = tmp_path_factory.mktemp("bulk")
    taken: list[bool] = []
    declined: list[int] = []
    real = engine._bulk

    def spy(*args: Any, **kwargs: Any) -> Any:
        blocks = real(*args, **kwargs)
        taken.append(blocks is not None)
        if blocks is not None:
            declined.append(blocks.declined)
        return blocks

    with monkeypatch.context() as m:
        m.setattr(engine, "_bulk", spy)
        m.setattr(engine, "BLOCK", block)
        m.setattr(engine, "MIN_RUN", shortest)
        m.setattr(command, "SPLIT_FROM", 2 if split != "no" else 10**9)
        m.setattr(forked, "cores", lambda: 2)
        # The split forks only in a process without other threads. Other suites' session-scoped servers (the
        # exporters of tests/sources, and the threads their scrapes start) may still run in this one when it ran
        # them first: the child touches none of them, so the fork is let be then. Alone, or in the suite's order,
        # the strict rule stands and the assertion below checks that nothing here started a thread.
        if threading.active_count() > 1:
            m.setattr(forked, "can_fork", lambda: hasattr(os, "fork"))
        if split == "child fails":
            m.setattr(command, "_later", _child_fails)
        else:
            assert forked.can_fork()
        bulk = _replay(tmp, case, "bulk")
    assert not list((tmp / "bulk").glob(".decisions*")), "the child's part is removed"
    with monkeypatch.context() as m:
        # The plain path: ``decide`` at every evaluation, neither the fast path nor the bulk path.
        m.setattr(engine, "hpa_decider", lambda compiled: None)
        m.setattr(engine, "hpa_scan", lambda compiled: None)
        plain = _replay(tmp, case, "plain")
    assert bulk.keys() == plain.keys()
    event(f"{case['mode']}, " + ("plain path" if taken != [True] else "bulk path with evaluations declined"
                                 if declined[0] else "bulk path"))
    if taken == [True] and split != "no":
        event("bulk path, split over two processes" if case["rows"] > 1 else "bulk path, one evaluation")
    if plain["code"] == 0:
        assert taken == [True] or not case["clean"] or _unusable(case), "a clean trace must take the bulk path"
    for name in plain:
        assert bulk[name] == plain[name], name


def _unusable(case: dict[str, Any]) -> bool:
    """A clean trace the fast path may still decline somewhere: in recorded mode with recorded ready replicas, a
    scale-up with starting ones (HPA's unready-pod adjustment), which the bulk path must decline too."""
    return bool(case["ready"]) and case["mode"] == "recorded"


def _load(case: dict[str, Any]) -> Any:
    from autoscaler.core.spec import ScalingPolicy  # noqa: PLC0415

    return ScalingPolicy.model_validate(case["policy"])


def test_the_bench_week_takes_the_bulk_path(tmp_path: Path) -> None:
    """The week of ``bench.replay_memory`` (recorded mode, hpa without behavior) is decided in bulk, in blocks."""
    from bench.replay_speed import POLICY, write_week  # noqa: PLC0415

    csv = tmp_path / "week.csv"
    write_week(csv)
    compiled = compile_policy(_load({"policy": POLICY}))
    stream = engine.stream(compiled, traces.load([csv]), engine.Options())
    assert stream.blocks is not None
    blocks = list(stream.blocks)
    assert all(isinstance(b, engine.Block) for b in blocks)
    assert sum(len(b.times) for b in blocks if isinstance(b, engine.Block)) == stream.evaluations == 40_320


def test_range_max_matches_slices() -> None:
    import numpy as np  # noqa: PLC0415

    values = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], dtype=np.int64)
    low = np.array([0, 1, 2, 5, 0, 10, 3], dtype=np.int64)
    high = np.array([0, 4, 9, 5, 10, 10, 7], dtype=np.int64)
    got = fast._range_max(values, low, high).tolist()
    assert got == [max(values[lo : hi + 1].tolist()) for lo, hi in zip(low.tolist(), high.tolist(), strict=True)]
    assert not math.isnan(float(got[0]))


@pytest.mark.parametrize("period", [15, 10, 7, 300])
def test_warm_at_is_what_the_blocks_before_leave(tmp_path: Path, period: int) -> None:
    """``Bulk.warm_at(a)``, from the few evaluations before ``a``, equals what deciding every evaluation before
    ``a`` leaves: the recommendation history and the last desired count, at every ``a``."""
    import random  # noqa: PLC0415

    rng = random.Random(period)
    rows = ["timestamp,load,replicas"]
    for r in range(160):
        rows.append(f"{START + r * period},{rng.choice([0.1, 0.5, 2.0, 8.0, 30.0])},{rng.randint(2, 20)}")
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "warm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 40,
            "evaluationPeriodSeconds": period,
            "signals": [{"name": "load", "query": "sum(load)", "scope": "total", "maxAgeSeconds": 600}],
            "policy": {"type": "hpa", "metrics": [
                {"signal": "load", "type": "External", "target": {"type": "AverageValue", "averageValue": 1}}
            ]},
        },
    }
    compiled = compile_policy(_load({"policy": doc}))
    bulk = engine.stream(compiled, traces.load([trace]), engine.Options()).bulk
    assert bulk is not None
    for a in range(1, bulk.count):
        *_, last = bulk.blocks(0, a)
        decided, left = bulk.scan.decide(bulk.prepared.input(0, a), ())
        assert decided.desired[-1] == last.decided.desired[-1]
        assert bulk.warm_at(a) == (left, decided.desired[-1]), a


@pytest.mark.parametrize("seed", range(6))
def test_own_counts_are_the_decisions_one_at_a_time(tmp_path: Path, seed: int) -> None:
    """whatif: ``HpaScan.own_counts`` (from one change to the next, in stretches) gives each evaluation the count
    deciding the evaluations one at a time gives it (the previous desired count), on loads that swing widely
    enough to scale up against the legacy cap, hold in the window and scale down."""
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    rng = random.Random(seed)
    rows = ["timestamp,load,kv,replicas"]
    for r in range(700):
        load = rng.choice([0.1, 0.5, 2.0, 8.0, 30.0, 90.0]) if r % rng.randint(1, 40) == 0 else 1.0
        rows.append(f"{START + r * 15},{load},{rng.choice([0.2, 0.7, 0.95, 1.6])},{rng.randint(2, 20)}")
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "own"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 60,
            "signals": [
                {"name": "load", "query": "sum(load)", "scope": "total"},
                {"name": "kv", "query": "avg(kv)", "scope": "perReplica"},
            ],
            "policy": {"type": "hpa", "metrics": [
                {"signal": "load", "type": "External", "target": {"type": "AverageValue", "averageValue": 1}},
                {"signal": "kv", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}},
            ]},
        },
    }
    compiled = compile_policy(_load({"policy": doc}))
    bulk = engine.stream(compiled, traces.load([trace]), engine.Options(mode="whatif")).bulk
    assert bulk is not None
    assert bulk.own is not None
    raw = bulk.prepared.input(0, bulk.count)
    counts = bulk.scan.own_counts(raw, bulk.own.rescale, bulk.own.initial, ())
    expected: list[int] = []
    count = bulk.own.initial
    history: fast.History = ()
    for k in range(bulk.count):
        one = bulk.scan.with_own(fast._slice(raw, k, k + 1), bulk.own.rescale, np.array([count]))
        decided, history = bulk.scan.decide(one, history)
        expected.append(count)
        count = decided.desired[0]
    assert counts.tolist() == expected
    assert len(set(expected)) > 5, "the counts move"


def test_a_failure_in_the_first_half_leaves_no_part_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The later half's file (written by the child) is removed when this process fails while the child runs."""
    import os  # noqa: PLC0415

    from autoscaler.replay import report  # noqa: PLC0415
    from bench.replay_speed import POLICY, write_week  # noqa: PLC0415

    write_week(tmp_path / "week.csv")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(POLICY))
    parent = os.getpid()
    real = report.Tally.add_block

    def fails_here(self: report.Tally, block: engine.Block) -> None:
        if os.getpid() == parent and block.times[0] > START + 86400:
            raise OSError(28, "No space left on device")  # after the child has started writing
        real(self, block)

    monkeypatch.setattr(report.Tally, "add_block", fails_here)
    monkeypatch.setattr(engine, "BLOCK", 1024)
    monkeypatch.setattr(forked, "cores", lambda: 2)
    code = main(["replay", "--policy", str(tmp_path / "policy.yaml"), "--metrics", str(tmp_path / "week.csv"),
                 "--out", str(tmp_path / "out"), "-q"])
    assert code == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["decisions.jsonl"]


def _gappy(tmp_path: Path, seed: int, *, bounds: tuple[int, int] = (2, 30)) -> Path:
    """A recorded trace as real ones are: mostly plain, with gaps (stale, then missing readings), NaN, negative
    and empty cells, and counts that move, now and then out of ``bounds``, with recorded ready replicas."""
    import random  # noqa: PLC0415

    rng = random.Random(seed)
    rows = ["timestamp,load,kv,replicas,replicas_ready"]
    at, count = 0, 5
    for _ in range(600):
        at += 15 if rng.random() > 0.03 else 15 * rng.randint(2, 30)
        if rng.random() < 0.08:
            count = rng.randint(bounds[0] - 1, bounds[1] + 2) if rng.random() < 0.2 else rng.randint(*bounds)
        load = rng.choice([0.1, 0.5, 2.0, 8.0, 30.0]) if rng.random() < 0.1 else 3.0
        cells = [repr(load), repr(rng.choice([0.2, 0.7, 0.95, 1.6]))]
        if rng.random() < 0.02:
            cells[rng.randint(0, 1)] = rng.choice(["", "NaN", "-1"])
        ready = count if rng.random() > 0.05 else max(0, count - rng.randint(1, 3))
        rows.append(f"{START + at},{','.join(cells)},{count},{ready}")
    trace = tmp_path / f"gappy-{seed}.csv"
    trace.write_text("\n".join(rows) + "\n")
    return trace


GAPPY_POLICY = {
    "apiVersion": "autoscaler.dev/v1alpha1",
    "kind": "ScalingPolicy",
    "metadata": {"name": "gappy"},
    "spec": {
        "target": {"kind": "Deployment", "name": "llm"},
        "minReplicas": 2,
        "maxReplicas": 30,
        "signals": [
            {"name": "load", "query": "sum(load)", "scope": "total", "maxAgeSeconds": 60},
            {"name": "kv", "query": "avg(kv)", "scope": "perReplica", "maxAgeSeconds": 60},
        ],
        "metricSafety": {"fallback": {"failureThreshold": 2, "behavior": "currentReplicasIfHigher", "replicas": 6}},
        "policy": {"type": "hpa", "metrics": [
            {"signal": "load", "type": "External", "target": {"type": "AverageValue", "averageValue": 1}},
            {"signal": "kv", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}},
        ]},
    },
}


@pytest.mark.parametrize("mode", ["recorded", "whatif"])
@pytest.mark.parametrize("seed", range(5))
def test_resuming_carries_the_policys_memory_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                                     mode: engine.Mode) -> None:
    """Where the bulk path hands over to the evaluations decided one at a time and back (``Bulk.evaluations``),
    and where a split's later half starts (``Bulk.memory_at``), the policy's memory is the state ``decide`` at
    every evaluation has there, field by field (recommendations, scale events, failure counts, times), and in
    whatif mode the count it set."""
    compiled = compile_policy(_load({"policy": GAPPY_POLICY}))
    trace = traces.load([_gappy(tmp_path, seed)])
    options = engine.Options(mode=mode)
    monkeypatch.setattr(engine, "MIN_RUN", 1)
    monkeypatch.setattr(engine, "BLOCK", 16)
    with monkeypatch.context() as m:
        # The plain path: decide at every evaluation, its state after each.
        m.setattr(engine, "hpa_decider", lambda compiled: None)
        stream = engine.stream(compiled, trace, options, bulk=False)
        inputs = engine.prepare(compiled, trace, mode).inputs
        memo: list[Any] = [None]
        states, desired = [], []
        for step in engine._steps(compiled, inputs, stream.recorded, options, stream.start, stream.evaluations, None,
                                  trace.ready if mode == "recorded" else None, memo=memo):
            states.append(memo[0])
            desired.append(step.decision.desired)
    bulk = engine.stream(compiled, trace, options).bulk
    assert bulk is not None
    assert 0 < bulk.declined < bulk.count / 2, "evaluations decided both ways"
    handed: list[tuple[int, engine.Memory]] = []
    for name in ("_in_blocks", "_one_at_a_time"):
        real = getattr(engine.Bulk, name)

        def spy(self: engine.Bulk, a: int, b: int, memory: engine.Memory, real: Any = real) -> Any:
            after = yield from real(self, a, b, memory)
            handed.append((b, after))
            return after

        monkeypatch.setattr(engine.Bulk, name, spy)
    made = list(bulk.evaluations())
    assert len(handed) > 10, "many hand-overs"
    assert {type(item) for item in made} == {engine.Block, engine.Step}
    for b, memory in handed:
        assert memory.state == states[b - 1], b
        if mode == "whatif":
            assert memory.replicas == desired[b - 1], b
    if mode == "recorded":
        warm = [a for a in range(1, bulk.count) if bulk.warmable(a)]
        assert len(warm) > 100
        for a in warm:
            assert bulk.memory_at(a) == (engine.Memory(states[a - 1], desired[a - 1]), desired[a - 1]), a


@pytest.mark.parametrize("shortest", [1, 8])
@pytest.mark.parametrize("seed", range(3))
def test_a_gappy_trace_split_in_two_writes_what_decide_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              seed: int, shortest: int) -> None:
    """A recorded trace with gaps, split over two processes: each half decides its stretches in bulk and its
    declined evaluations one at a time (the later half from ``Bulk.memory_at``), the same files as ``decide``."""
    case = {"policy": GAPPY_POLICY, "csv": _gappy(tmp_path, seed).read_text()}
    monkeypatch.setattr(engine, "MIN_RUN", shortest)
    monkeypatch.setattr(engine, "BLOCK", 64)
    compiled = compile_policy(_load(case))
    bulk = engine.stream(compiled, traces.load([tmp_path / f"gappy-{seed}.csv"]), engine.Options()).bulk
    assert bulk is not None
    half = command._halves(bulk, None)
    assert half is not None
    assert any(a >= half for a, _ in bulk.plain), "the later half declines evaluations too"
    assert any(a < half for a, _ in bulk.plain), "the first half declines evaluations too"
    with monkeypatch.context() as m:
        m.setattr(command, "SPLIT_FROM", 2)
        m.setattr(forked, "cores", lambda: 2)
        split = _replay(tmp_path, case, "split")
    with monkeypatch.context() as m:
        m.setattr(engine, "hpa_decider", lambda compiled: None)
        m.setattr(engine, "hpa_scan", lambda compiled: None)
        plain = _replay(tmp_path, case, "plain")
    assert split["code"] == plain["code"] == 0
    assert not list((tmp_path / "split").glob(".decisions*"))
    for name in plain:
        assert split[name] == plain[name], name


@pytest.mark.parametrize("first_count", [0, 14])
def test_whatif_from_a_count_out_of_bounds_decides_what_decide_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        first_count: int) -> None:
    """whatif from a recorded count out of the policy's bounds: above maxReplicas ``decide`` brings it within and
    the blocks go on; at 0 (a target scaled to zero by hand) ``decide`` keeps it there (HPA's "scaling disabled"),
    every evaluation after, which the blocks must not decide from the count they would otherwise start at."""
    policy = {
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "bulk"},
        "spec": {"target": {"kind": "Deployment", "name": "llm"}, "minReplicas": 1, "maxReplicas": 10,
                 "evaluationPeriodSeconds": 15,
                 "signals": [{"name": "s0", "query": "sum(s0)", "scope": "perReplica", "maxAgeSeconds": 60}],
                 "policy": {"type": "hpa", "metrics": [
                     {"signal": "s0", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}}]}},
    }
    rows = [f"{START + 15 * k},{0.5 + (k % 40) / 20},{first_count}" for k in range(400)]
    case = {"policy": policy, "csv": "timestamp,s0,replicas\n" + "\n".join(rows) + "\n", "mode": "whatif"}
    taken: list[bool] = []
    real = engine._bulk

    def spy(*args: Any, **kwargs: Any) -> Any:
        blocks = real(*args, **kwargs)
        taken.append(blocks is not None)
        return blocks

    with monkeypatch.context() as m:
        m.setattr(engine, "_bulk", spy)
        bulk = _replay(tmp_path, case, "bulk")
    with monkeypatch.context() as m:
        m.setattr(engine, "hpa_decider", lambda compiled: None)
        m.setattr(engine, "hpa_scan", lambda compiled: None)
        plain = _replay(tmp_path, case, "plain")
    assert taken == [True], "the bulk path is taken (the first evaluation decided one at a time)"
    assert plain["code"] == 0
    for name in plain:
        assert bulk[name] == plain[name], name
