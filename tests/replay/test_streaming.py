"""Streaming replay changes nothing: the engine that makes each evaluation when asked, and the writers that keep
only counters and a few points per pixel column, give exactly what a straightforward loop over a list gives.

The reference below is written plainly on purpose: it looks every signal up by bisection at every evaluation,
keeps every step in a list, and counts the summary from that list, as the replay did before it streamed. The
streaming path (``engine.stream`` → ``report.DecisionWriter`` / ``report.Tally`` / ``plot.Columns``) must write the
same ``decisions.jsonl`` bytes and the same ``summary.json`` on generated traces (gaps, NaN, infinities, negative
values, per-pod series, recorded counts that move or are absent, both modes, actuation delays).
"""

from __future__ import annotations

import io
import math
import re
import tracemalloc
from bisect import bisect_right
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.engine import CompiledPolicy, compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SignalState,
    SignalValue,
    TargetKind,
    TargetRef,
)
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine, plot, report, traces
from autoscaler.replay.traces import RawSignal, Series, Trace

PERIOD = 15.0
TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")


def policy(*, per_pod: bool) -> CompiledPolicy:
    """An hpa policy on a total backlog and a perReplica signal (a per-pod preset when ``per_pod``), with a
    scale-up rate limit (it reads the scale history) and a scale-down window (it keeps the policy's memory)."""
    per_replica: dict[str, Any] = (
        {"name": "kv", "preset": "vllm.kv_cache_usage"}
        if per_pod
        else {"name": "kv", "query": "avg(kv)", "scope": "perReplica"}
    )
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "stream"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 12,
            "evaluationPeriodSeconds": PERIOD,
            "signals": [{"name": "backlog", "query": "sum(q)"}, per_replica],
            "metricSafety": {"maxAgeSeconds": 60},
            "policy": {
                "type": "hpa",
                "metrics": [
                    {"signal": "backlog", "type": "External", "target": {"type": "AverageValue", "averageValue": 10}},
                    {"signal": "kv", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.6}},
                ],
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                    },
                    "scaleDown": {"stabilizationWindowSeconds": 45},
                },
            },
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))


# ------------------------------------------------------------------------------------------- the reference loop


def reference_steps(compiled: CompiledPolicy, trace: Trace, options: engine.Options) -> list[engine.Step]:
    """Every evaluation, in a list, each signal looked up by bisection (the replay's rules as docs/replay.md
    states them)."""
    spec = compiled.policy.spec
    inputs = engine.prepare(compiled, trace, options.mode).inputs
    rec = trace.replicas if trace.replicas is not None and len(trace.replicas.times) else None
    start = min(i.series.times[0] for i in inputs)
    end = max(i.series.times[-1] for i in inputs)
    period = spec.evaluation_period_seconds
    count = math.floor((end - start) / period + 1e-9) + 1
    first_recorded = int(rec.values[0]) if rec is not None else options.initial_replicas
    before_first = options.initial_replicas if options.initial_replicas is not None else first_recorded
    if options.initial_replicas is not None:
        initial = options.initial_replicas
    elif first_recorded is not None:
        initial = first_recorded
    else:
        initial = spec.min_replicas
    fleet = engine.Fleet(initial, options.actuation_delay_s)
    whatif = options.mode == "whatif"
    rec_known = rec is not None or options.initial_replicas is not None
    state = PolicyState()
    ups: tuple[tuple[float, int], ...] = ()
    downs: tuple[tuple[float, int], ...] = ()
    last: float | None = None
    previous: int | None = None
    steps: list[engine.Step] = []
    for k in range(count):
        now = start + k * period
        if rec is not None:
            i = bisect_right(list(rec.times), now) - 1
            rec_now = before_first if i < 0 else int(rec.values[i] or 0)
        else:
            rec_now = before_first
        assert rec_now is not None or whatif
        status = fleet.status(now) if whatif else ReplicaStatus(spec=rec_now or 0, ready=rec_now or 0, starting=0)
        readings: dict[str, SignalReading] = {}
        for inp in inputs:
            reading: SignalReading | None = None
            if inp.pods is None:
                i = bisect_right(list(inp.series.times), now) - 1
                if i >= 0:
                    reading = SignalReading(inp.series.values[i], inp.series.times[i], source=inp.origin)
            else:
                values: dict[str, float] = {}
                stamps: dict[str, float] = {}
                seen = False
                for pod, series in inp.pods.items():
                    i = bisect_right(list(series.times), now) - 1
                    seen = seen or i >= 0
                    if i >= 0 and now - series.times[i] <= inp.max_age_s:
                        values[pod], stamps[pod] = series.values[i], series.times[i]
                if values:
                    total = traces.total(values.values())  # display only; NaN for +Inf with -Inf
                    reading = SignalReading(total, min(stamps.values()), inp.origin, None, values, stamps)
                elif seen:
                    reading = SignalReading(None, None, inp.origin, None, {}, {})
            if reading is None:
                continue
            rescale = whatif and inp.per_replica and rec_now is not None and rec_now != status.ready
            if rescale and reading.value is not None:
                assert rec_now is not None
                value = reading.value * rec_now / max(status.ready, 1)
                reading = SignalReading(value, reading.timestamp, source=reading.source)
            readings[inp.name] = reading
        decisions, new_state = decide(compiled, Observation(spec.target.ref(), status, readings), state, now)
        decision = decisions[0]
        assert isinstance(decision, ScaleDecision)
        steps.append(engine.Step(now, status, rec_now if rec_known else None, decision, readings))
        if whatif:
            fleet.apply(decision.desired, now)
            state = new_state
            continue
        if previous is not None and rec_now is not None and rec_now != previous:
            ups = tuple(e for e in ups if e[0] > now - engine.EVENT_HORIZON_S)
            downs = tuple(e for e in downs if e[0] > now - engine.EVENT_HORIZON_S)
            if rec_now > previous:
                ups = (*ups, (now, rec_now - previous))
            else:
                downs = (*downs, (now, previous - rec_now))
            last = now
        state = new_state.with_scale_history(ups, downs, last)
        previous = rec_now
    return steps


def reference_summary(steps: list[engine.Step], flap_window_s: float) -> dict[str, Any]:
    """The summary numbers counted from the whole list (docs/replay.md's definitions)."""
    events: list[tuple[float, bool]] = []  # (time, up)
    flaps = 0
    previous = steps[0].decision.current
    for s in steps:
        if s.decision.desired != previous:
            up = s.decision.desired > previous
            if events and events[-1][1] != up and s.time - events[-1][0] <= flap_window_s:
                flaps += 1
            events.append((s.time, up))
            previous = s.decision.desired
    desired = [s.decision.desired for s in steps]
    unknown = sum(1 for s in steps if any(v.state is not SignalState.OK for v in s.decision.signals.values()))
    recorded = None
    if all(s.recorded is not None for s in steps):
        recorded = 0.0
        for s in steps:
            assert s.recorded is not None
            recorded += s.recorded * PERIOD
    reasons = Counter(s.decision.reason.value for s in steps)
    return {
        "start": report.rfc3339(steps[0].time),
        "end": report.rfc3339(steps[-1].time),
        "evaluations": len(steps),
        "scale_ups": sum(1 for _, up in events if up),
        "scale_downs": sum(1 for _, up in events if not up),
        "flaps": flaps,
        "replica_seconds": sum(desired) * PERIOD,
        "recorded_replica_seconds": recorded,
        "min_replicas": min(desired),
        "max_replicas": max(desired),
        "time_at_count_s": {str(n): c * PERIOD for n, c in sorted(Counter(desired).items())},
        "evaluations_with_unknown_signals": unknown,
        "decisions_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


# ------------------------------------------------------------------------------------------- generated traces

VALUE = st.one_of(
    st.floats(0, 200, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, -3.0, 0.0]),
)


@st.composite
def series(draw: st.DrawFn, *, scale: float = 1.0) -> Series:
    """Samples at irregular times (jitter, gaps longer than maxAgeSeconds), values including non-finite."""
    n = draw(st.integers(1, 60))
    gaps = draw(st.lists(st.sampled_from([1.0, 7.0, 15.0, 15.0, 15.0, 30.0, 95.0]), min_size=n, max_size=n))
    offset = draw(st.sampled_from([0.0, 3.0, 20.0]))
    times = [offset + sum(gaps[: i + 1]) for i in range(n)]
    values = [v * scale if math.isfinite(v) else v for v in draw(st.lists(VALUE, min_size=n, max_size=n))]
    return Series(times, values)


@st.composite
def gen_traces(draw: st.DrawFn, *, per_pod: bool) -> Trace:
    backlog = draw(series())
    if per_pod:
        pods = draw(st.lists(series(scale=0.005), min_size=1, max_size=3))
        kv = RawSignal(
            "kv", "gen:kv", tuple(Series(p.times, p.values, (("pod", f"llm-{i}"),)) for i, p in enumerate(pods))
        )
    else:
        kv = RawSignal("kv", "gen:kv", (draw(series(scale=0.005)),))
    replicas: Series | None = None
    if draw(st.booleans()):
        n = draw(st.integers(1, 12))
        times = sorted(set(draw(st.lists(st.floats(0, 900), min_size=n, max_size=n))))
        counts = draw(st.lists(st.integers(0, 9), min_size=len(times), max_size=len(times)))
        replicas = Series(times, [float(c) for c in counts])
    signals = {"backlog": RawSignal("backlog", "gen:backlog", (backlog,)), "kv": kv}
    return Trace(signals, replicas, "gen:replicas", ("gen",))


OPTIONS = st.builds(
    engine.Options,
    mode=st.sampled_from(["recorded", "whatif"]),
    actuation_delay_s=st.sampled_from([0.0, 20.0, 45.0]),
    initial_replicas=st.one_of(st.none(), st.integers(0, 6)),
)

COMPILED = {per_pod: policy(per_pod=per_pod) for per_pod in (False, True)}


def streamed(
    compiled: CompiledPolicy, trace: Trace, options: engine.Options, out: Path, flap_window_s: float, pixels: int = 7
) -> tuple[report.Tally, plot.Columns]:
    """What ``autoscaler replay`` does: each evaluation to every writer as it is made (decisions.jsonl to ``out``)."""
    replay = engine.stream(compiled, trace, options)
    counts = report.Tally(replay, flap_window_s=flap_window_s)
    columns = plot.Columns(replay, evaluations=replay.evaluations, start=replay.start, pixels=pixels)
    with report.DecisionWriter(out, replay.target) as writer:
        for step in replay.steps:
            writer.add(step)
            counts.add(step)
            columns.add(step)
    columns.finish()
    return counts, columns


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), per_pod=st.booleans(), options=OPTIONS, flap_window_s=st.sampled_from([30.0, 300.0]))
def test_streaming_writes_what_the_reference_loop_decides(
    tmp_path: Path, data: st.DataObject, per_pod: bool, options: engine.Options, flap_window_s: float
) -> None:
    trace = data.draw(gen_traces(per_pod=per_pod))
    compiled = COMPILED[per_pod]
    if trace.replicas is None and options.initial_replicas is None and (options.mode == "recorded" or not per_pod):
        # No count to start from, or none to rescale a perReplica signal by: refused before any evaluation.
        with pytest.raises(traces.TraceError, match="no recorded replica count"):
            engine.stream(compiled, trace, options)
        return
    steps = reference_steps(compiled, trace, options)
    counts, columns = streamed(compiled, trace, options, tmp_path / "decisions.jsonl", flap_window_s)
    lines, summary = (tmp_path / "decisions.jsonl").read_bytes(), counts.summary()

    expected = b"".join(orjson.dumps(report.decision_record(s, compiled.policy.spec.target.ref().key)) + b"\n"
                        for s in steps)
    assert lines == expected
    assert {k: summary[k] for k in reference_summary(steps, flap_window_s)} == reference_summary(steps, flap_window_s)
    # The table: the first scale events as the reference sees them, and the count of the rest.
    table = io.StringIO()
    report.print_table(counts, summary, table, width=100)
    rows = [line for line in table.getvalue().splitlines() if re.match(r"  \d{4}-\d\d-\d\dT", line)]
    assert len(rows) == min(summary["scale_ups"] + summary["scale_downs"], report.TABLE_EVENTS)

    # The plot's columns: in each pixel column the lowest and highest desired count drawn are the true ones, and a
    # column is shaded when any of its evaluations had an unknown signal.
    for base, n, any_unknown, _ in columns.unknown:
        inside = steps[base:base + n]
        drawn = [v for k, v in zip(columns.desired.at, columns.desired.values, strict=True) if base <= k < base + n]
        assert min(drawn) == min(s.decision.desired for s in inside)
        assert max(drawn) == max(s.decision.desired for s in inside)
        assert any_unknown == any(not v.ok for s in inside for v in s.decision.signals.values())
    assert sum(n for _, n, _, _ in columns.unknown) == len(steps)


def test_a_spike_of_one_evaluation_survives_the_plot_downsampling() -> None:
    """One evaluation at 50 among 10,000 at 1, drawn on 100 pixel columns: the 50 is drawn, in its column."""
    steps = []
    for k in range(10_000):
        value = 50.0 if k == 6_543 else 1.0
        sig = {"q": SignalValue("q", SignalState.OK, value, "")}
        decision = ScaleDecision(TARGET, 2, 2 + (k == 6_543), Reason.STEADY, "", sig)
        steps.append(engine.Step(k * 15.0, ReplicaStatus(2, 2), 2, decision, {}))
    replay = engine.Replay("p", TARGET.key, "recorded", 15.0, steps)
    columns = plot.Columns(replay, evaluations=len(steps), start=0.0, pixels=100)
    for step in steps:
        columns.add(step)
    columns.finish()
    assert len(columns.signals[0].values) <= 4 * 100
    assert 50.0 in columns.signals[0].values
    assert columns.signals[0].at[columns.signals[0].values.index(50.0)] == 6_543
    assert max(columns.desired.values) == 3


def test_memory_does_not_grow_with_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python allocations at their peak while streaming 500 and then 2,000 evaluations (the trace is built
    before counting, decisions.jsonl goes out every 100 lines, the plot keeps at most five points for each of
    its 20 pixel columns here):
    the 1,500 more add nothing that stays; keeping every step would add about 2 MB. A first run fills the cache
    of formatted times of day (``report._clock``, at most a day's 86,400), which is not the replay's to count."""
    compiled = COMPILED[False]
    monkeypatch.setattr(report.DecisionWriter, "BATCH", 100)

    def peak(n: int) -> int:
        times = [PERIOD * i for i in range(n)]
        trace = Trace(
            {
                "backlog": RawSignal("backlog", "m:backlog", (Series(times, [float(i % 97) for i in range(n)]),)),
                "kv": RawSignal("kv", "m:kv", (Series(times, [0.3 + (i % 7) / 10 for i in range(n)]),)),
            },
            Series(times, [float(2 + i // 500 % 4) for i in range(n)]),
            "m:replicas",
            ("m",),
        )
        tracemalloc.start()
        try:
            streamed(compiled, trace, engine.Options(mode="whatif"), tmp_path / f"d{n}.jsonl", 300.0, 20)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(2_000)
    small, large = peak(500), peak(2_000)
    assert large - small < 300_000, (small, large)
