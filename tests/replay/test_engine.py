"""The replay loop on small hand-made traces: evaluation times, recorded vs what-if, staleness, rescaling.

Every decision comes from the real core (``compile_policy``/``decide``) with the ``hpa`` policy type; these
tests check what the loop feeds it and what it does with the answers.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import Reason
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine
from autoscaler.replay.traces import RawSignal, Series, Trace, TraceError


def policy(
    *,
    metrics: list[dict[str, Any]] | None = None,
    signals: list[dict[str, Any]] | None = None,
    scale_up_pods: int = 2,
    scale_up_period: int = 15,
    max_age: float = 120.0,
    min_replicas: int = 1,
    scale_down_window: int = 300,
) -> CompiledPolicy:
    """An hpa policy on ``backlog`` (External, AverageValue 10) with a scale-up cap of N pods per period."""
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "t"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": min_replicas,
            "maxReplicas": 20,
            "evaluationPeriodSeconds": 15,
            "signals": signals or [{"name": "backlog", "query": "sum(q)"}],
            "metricSafety": {"maxAgeSeconds": max_age},
            "policy": {
                "type": "hpa",
                "metrics": metrics
                or [{"signal": "backlog", "type": "External", "target": {"type": "AverageValue", "averageValue": 10}}],
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Pods", "value": scale_up_pods, "periodSeconds": scale_up_period}],
                    },
                    "scaleDown": {"stabilizationWindowSeconds": scale_down_window},
                },
            },
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))


def trace(
    times: list[float], replicas: list[float] | None = None, **signals: list[float] | tuple[list[float], list[float]]
) -> Trace:
    """Signals as values on ``times``, or as their own (times, values)."""
    raw = {}
    for name, data in signals.items():
        ts, vs = data if isinstance(data, tuple) else (times, data)
        raw[name] = RawSignal(name, f"test:{name}", (Series(list(ts), list(vs)),))
    rec = Series(list(times), list(replicas)) if replicas is not None else None
    return Trace(raw, rec, "test:replicas", ("test",))


STEP_TIMES = [15.0 * i for i in range(8)]
#: backlog steps from 20 to 100 at t=60: with AverageValue 10 the policy wants 10 replicas from then on.
STEP_BACKLOG = [20.0] * 4 + [100.0] * 4


def desired(replay: engine.Replay) -> list[int]:
    return [s.decision.desired for s in replay.steps]


def test_evaluation_times_and_the_sample_seen() -> None:
    compiled = policy()
    tr = trace([], backlog=([0.0, 7.0, 50.0], [10.0, 10.0, 10.0]))
    replay = engine.run(compiled, tr, engine.Options(initial_replicas=1))
    assert [s.time for s in replay.steps] == [0.0, 15.0, 30.0, 45.0]  # every period, first to last sample
    seen = [(s.readings["backlog"].timestamp, s.decision.signals["backlog"].age_s) for s in replay.steps]
    assert seen == [(0.0, 0.0), (7.0, 8.0), (7.0, 23.0), (7.0, 38.0)]  # latest at or before t, its own time


@pytest.mark.parametrize(
    ("mode", "scale_up_period", "expected"),
    [
        # The recorded count stays 2: every evaluation starts from 2 and is capped at 2 + 2.
        pytest.param("recorded", 15, [2, 2, 2, 2, 4, 4, 4, 4], id="recorded-step-capped-from-recorded"),
        # The decisions not taken must not count against the rate limit (no phantom scale events).
        pytest.param("recorded", 60, [2, 2, 2, 2, 4, 4, 4, 4], id="recorded-no-phantom-events"),
        # The policy's own count climbs by 2 per evaluation until ceil(100 / 10).
        pytest.param("whatif", 15, [2, 2, 2, 2, 4, 6, 8, 10], id="whatif-step-climbs"),
        # Only 2 pods per 60 s: held at 4 until the period has passed.
        pytest.param("whatif", 60, [2, 2, 2, 2, 4, 4, 4, 4], id="whatif-rate-limited-per-minute"),
    ],
)
def test_backlog_step(mode: engine.Mode, scale_up_period: int, expected: list[int]) -> None:
    compiled = policy(scale_up_period=scale_up_period)
    tr = trace(STEP_TIMES, replicas=[2.0] * 8, backlog=STEP_BACKLOG)
    replay = engine.run(compiled, tr, engine.Options(mode=mode))
    assert desired(replay) == expected
    currents = [s.decision.current for s in replay.steps]
    if mode == "recorded":
        assert currents == [2] * 8
    else:
        assert currents == [2, *expected[:-1]]  # each decision became the next current count
    assert replay.steps[4].decision.reason in (Reason.SCALE_UP, Reason.RATE_LIMITED)


def test_recorded_follows_the_recorded_count() -> None:
    compiled = policy(scale_up_pods=100)
    tr = trace(STEP_TIMES, replicas=[2, 2, 2, 2, 10, 10, 10, 10], backlog=STEP_BACKLOG)
    replay = engine.run(compiled, tr, engine.Options(mode="recorded"))
    assert [s.replicas.spec for s in replay.steps] == [2, 2, 2, 2, 10, 10, 10, 10]
    assert [s.recorded for s in replay.steps] == [2, 2, 2, 2, 10, 10, 10, 10]
    # At t=60 the recorded count already followed the step, so the policy agrees: no change wanted.
    assert desired(replay) == [2, 2, 2, 2, 10, 10, 10, 10]
    assert all(s.decision.current == s.decision.desired for s in replay.steps)


def test_whatif_actuation_delay_keeps_new_replicas_starting() -> None:
    compiled = policy(scale_up_pods=100)
    tr = trace(STEP_TIMES, replicas=[2.0] * 8, backlog=STEP_BACKLOG)
    replay = engine.run(compiled, tr, engine.Options(mode="whatif", actuation_delay_s=30.0))
    status = [(s.replicas.spec, s.replicas.ready, s.replicas.starting) for s in replay.steps]
    # Decided 10 at t=60; ready at t=90.
    assert status == [(2, 2, 0)] * 5 + [(10, 2, 8), (10, 10, 0), (10, 10, 0)]
    # Starting replicas count toward AverageValue (ready + starting): no second scale-up while they start.
    assert desired(replay)[4:] == [10, 10, 10, 10]


def test_whatif_scale_down_cancels_starting_replicas_first() -> None:
    compiled = policy(scale_up_pods=100, scale_down_window=0)
    times = [15.0 * i for i in range(4)]
    # Up to 10 at t=15, down to 5 at t=30 while the 8 new replicas are still starting (delay 600 s).
    tr = trace(times, replicas=[2.0] * 4, backlog=[20, 100, 50, 50])
    replay = engine.run(compiled, tr, engine.Options(mode="whatif", actuation_delay_s=600.0))
    status = [(s.replicas.spec, s.replicas.ready, s.replicas.starting) for s in replay.steps]
    assert desired(replay) == [2, 10, 5, 5]
    # The 5 removed at t=30 are starting ones: the 2 ready replicas stay and 3 are still starting.
    assert status == [(2, 2, 0), (2, 2, 0), (10, 2, 8), (5, 2, 3)]


def test_whatif_rescales_per_replica_signals_only() -> None:
    compiled = policy(
        signals=[
            {"name": "slots", "query": "avg(s)", "scope": "perReplica"},
            {"name": "backlog", "query": "sum(q)", "scope": "total"},
        ],
        metrics=[
            {"signal": "slots", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}},
            {"signal": "backlog", "type": "External", "target": {"type": "AverageValue", "averageValue": 10}},
        ],
        scale_up_pods=100,
    )
    tr = trace([0.0, 15.0], replicas=[4.0, 4.0], slots=[0.6, 0.6], backlog=[5.0, 5.0])
    replay = engine.run(compiled, tr, engine.Options(mode="whatif", initial_replicas=2))
    first = replay.steps[0]
    assert first.replicas.spec == 2
    assert first.readings["slots"].value == pytest.approx(1.2)  # 0.6 × 4 recorded ÷ 2 own: load conserved
    assert first.readings["backlog"].value == 5.0  # a total is taken as recorded
    # 1.2 per replica vs 0.8 → ceil(1.5 × 2) = 3; with 3 the load spreads to 0.8 → steady.
    assert desired(replay) == [3, 3]
    assert replay.steps[1].readings["slots"].value == pytest.approx(0.8)
    recorded = engine.run(compiled, tr, engine.Options(mode="recorded"))
    assert recorded.steps[0].readings["slots"].value == 0.6  # recorded mode: as read


def test_stale_gap_holds_with_metrics_unknown() -> None:
    compiled = policy(max_age=60.0, scale_up_pods=100)
    # Samples every 15 s up to t=60, then nothing until t=180 (a scrape outage), then a high value.
    ts = [0.0, 15.0, 30.0, 45.0, 60.0, 180.0]
    tr = trace([0.0], replicas=[3.0], backlog=(ts, [30, 30, 30, 30, 30, 200]))
    replay = engine.run(compiled, tr, engine.Options(mode="whatif"))
    by_time = {s.time: s.decision for s in replay.steps}
    assert by_time[120.0].signals["backlog"].ok  # exactly maxAgeSeconds old is still fresh
    assert by_time[120.0].desired == 3
    for t in (135.0, 150.0, 165.0):  # 75 s and older > maxAgeSeconds 60
        d = by_time[t]
        assert d.reason is Reason.METRICS_UNKNOWN
        assert d.desired == d.current == 3
        assert "stale" in d.signals["backlog"].reason
    assert by_time[180.0].reason is Reason.SCALE_UP
    assert by_time[180.0].desired == 20


def test_missing_signals_are_listed_and_composites_are_not_read() -> None:
    compiled = policy(
        signals=[
            {"name": "waiting", "query": "sum(w)"},
            {"name": "running", "query": "sum(r)"},
            {"name": "backlog", "expr": "waiting + running"},
        ]
    )
    with pytest.raises(
        TraceError, match=r"no data for signal\(s\) waiting, running of policy 't' \(the trace has: kv\)"
    ):
        engine.run(compiled, trace([0.0], replicas=[1], kv=[1.0]), engine.Options())
    replay = engine.run(compiled, trace([0.0], replicas=[1], waiting=[15.0], running=[15.0]), engine.Options())
    assert replay.steps[0].decision.signals["backlog"].value == 30.0
    assert desired(replay) == [3]


def test_recorded_mode_needs_recorded_replicas() -> None:
    with pytest.raises(TraceError, match="mode recorded needs it, or pass --initial-replicas"):
        engine.run(policy(), trace([0.0], backlog=[1.0]), engine.Options(mode="recorded"))


def test_whatif_per_replica_needs_a_recorded_count() -> None:
    compiled = policy(
        signals=[{"name": "slots", "query": "avg(s)", "scope": "perReplica"}],
        metrics=[{"signal": "slots", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 0.8}}],
    )
    with pytest.raises(TraceError, match="rescale perReplica signals"):
        engine.run(compiled, trace([0.0], slots=[0.5]), engine.Options(mode="whatif"))


@pytest.mark.parametrize(
    ("options", "expected_start"),
    [
        pytest.param(engine.Options(mode="whatif"), 4, id="first-recorded"),
        pytest.param(engine.Options(mode="whatif", initial_replicas=7), 7, id="flag-wins"),
    ],
)
def test_whatif_initial_count(options: engine.Options, expected_start: int) -> None:
    replay = engine.run(policy(), trace([0.0, 15.0], replicas=[4, 4], backlog=[1, 1]), options)
    assert replay.steps[0].decision.current == expected_start


def test_whatif_without_recorded_replicas_starts_at_min_replicas() -> None:
    replay = engine.run(policy(min_replicas=3), trace([0.0], backlog=[30.0]), engine.Options(mode="whatif"))
    assert replay.steps[0].decision.current == 3
    assert replay.steps[0].recorded is None


def test_recorded_with_initial_replicas_and_no_recorded_count() -> None:
    replay = engine.run(policy(), trace([0.0, 15.0], backlog=[50.0, 50.0]), engine.Options(initial_replicas=5))
    assert [s.replicas.spec for s in replay.steps] == [5, 5]
    assert any("taken as 5 throughout" in n for n in replay.notes)


def test_several_series_are_combined_by_scope_and_noted() -> None:
    compiled = policy(scale_up_pods=100)
    raw = RawSignal("backlog", "dump/backlog.json", (Series([0.0], [40.0]), Series([0.0], [20.0])))
    tr = Trace({"backlog": raw}, Series([0.0], [2.0]), "r", ("dump",))
    replay = engine.run(compiled, tr, engine.Options())
    assert replay.steps[0].readings["backlog"].value == 60.0
    assert desired(replay) == [6]
    assert any("2 series" in n and "combined by sum" in n for n in replay.notes)


def test_progress_is_reported_for_every_evaluation() -> None:
    seen: list[int] = []
    totals: list[int] = []
    times = [15.0 * i for i in range(1200)]
    engine.run(
        policy(),
        trace(times, replicas=[1] * 1200, backlog=[5.0] * 1200),
        engine.Options(),
        progress=seen.append,
        total=totals.append,
    )
    assert totals == [1200]
    assert seen == [1000, 200]  # batched, not one call per evaluation


@settings(max_examples=25, deadline=None)
@given(
    backlog=st.lists(st.one_of(st.floats(0, 500), st.just(math.nan)), min_size=1, max_size=30),
    delay=st.sampled_from([0.0, 15.0, 40.0]),
    start=st.integers(1, 20),
)
def test_whatif_invariants(backlog: list[float], delay: float, start: int) -> None:
    """Whatever the load: the count stays within bounds, each decision is the next current count, and
    spec = ready + starting with nothing starting once the delay has passed."""
    times = [15.0 * i for i in range(len(backlog))]
    replay = engine.run(
        policy(scale_down_window=0),
        trace(times, backlog=backlog),
        engine.Options(mode="whatif", actuation_delay_s=delay, initial_replicas=start),
    )
    assert len(replay.steps) == len(backlog)
    previous = start
    for step in replay.steps:
        r = step.replicas
        assert step.decision.current == r.spec == previous
        assert r.spec == r.ready + r.starting
        assert r.ready >= 0
        assert r.starting >= 0
        assert 1 <= step.decision.desired <= 20
        if delay == 0:
            assert r.starting == 0
        previous = step.decision.desired


@pytest.mark.parametrize(
    ("delay", "actions", "expected"),
    [
        pytest.param(0.0, [(0.0, 5)], [(5, 5, 0)], id="no-delay-ready-at-once"),
        pytest.param(30.0, [(0.0, 5)], [(5, 2, 3)], id="delay-starting"),
        pytest.param(30.0, [(0.0, 5), (30.0, 5)], [(5, 2, 3), (5, 5, 0)], id="delay-passed"),
        # Two batches started at 0 and 15; a scale-down by 4 removes the newest batch (3) and 1 of the first.
        pytest.param(60.0, [(0.0, 4), (15.0, 7), (20.0, 3)], [(4, 2, 2), (7, 2, 5), (3, 2, 1)], id="cancel-newest"),
        pytest.param(60.0, [(0.0, 4), (10.0, 1)], [(4, 2, 2), (1, 1, 0)], id="below-ready"),
    ],
)
def test_fleet(delay: float, actions: list[tuple[float, int]], expected: list[tuple[int, int, int]]) -> None:
    fleet = engine.Fleet(2, delay)
    seen = []
    for now, desired in actions:
        fleet.apply(desired, now)
        r = fleet.status(now)
        seen.append((r.spec, r.ready, r.starting))
    assert seen == expected


def test_an_empty_column_is_an_error() -> None:
    with pytest.raises(TraceError, match="test:backlog: signal 'backlog' has no samples"):
        engine.run(policy(), trace([0.0], replicas=[1.0], backlog=([], [])), engine.Options())


def test_absurd_span_is_refused_before_running() -> None:
    # Two samples ten years apart: 21 million evaluations at 15 s.
    tr = trace([0.0], replicas=[1.0], backlog=([0.0, 10 * 365 * 86400.0], [1.0, 1.0]))
    with pytest.raises(TraceError, match=r"evaluations every 15s .* are some timestamps wrong"):
        engine.run(policy(), tr, engine.Options())


class _BrokenAlgorithm:
    """A policy type with a bug: the replay must say at which evaluation it failed."""

    uses_behavior = False

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        if ctx.now >= 30.0:
            raise KeyError("no such thing")
        return Recommendation(1, Reason.STEADY, "fine"), state


def test_a_failure_inside_the_core_names_the_evaluation() -> None:
    good = policy()
    broken = CompiledPolicy(good.policy, _BrokenAlgorithm(), good.judge)
    with pytest.raises(engine.EvaluationError) as err:
        engine.run(broken, trace(STEP_TIMES, replicas=[1.0] * 8, backlog=STEP_BACKLOG), engine.Options())
    assert err.value.time == 30.0
    assert isinstance(err.value.error, KeyError)


def test_a_policy_with_several_targets_replays_whatif_with_one_fleet_per_pool() -> None:
    from tests.core.test_disaggregated import policy_doc  # noqa: PLC0415 - one fixture for both areas

    compiled = compile_policy(ScalingPolicy.model_validate(policy_doc(budget=None)))
    # Prompt tokens rise 4000 → 20000 at t=60; the decode signals stay quiet. The recorded rate is what the
    # recorded fleet served: one settled prefill group of 8000 declared tokens/s serving 20000 has at least 2.5×
    # that capacity (the policy's learned κ, rule 0), so prefill grows 1 → 2 groups (20000 / 0.7 / 2.5 = 11429).
    quiet = {"pwait": [0.0] * 8, "ttft": [0.5] * 8, "gen": [1000.0] * 8, "kv": [0.3] * 8, "tpot": [0.02] * 8}
    tr = trace(STEP_TIMES, prompt=[4000.0] * 4 + [20000.0] * 4, **quiet)
    with pytest.raises(TraceError, match="whatif mode only"):
        engine.run(compiled, tr, engine.Options(mode="recorded", initial_replicas=1))
    replay = engine.run(compiled, tr, engine.Options(mode="whatif", initial_replicas=1))
    # The report follows spec.target (decode): it stays at 1 while prefill's own fleet grows.
    assert desired(replay) == [1] * 8
    assert "every pool starts from the same count" in " ".join(replay.notes)
    prefill = [s.decision.message for s in replay.steps][4]
    assert "together prefill 2×2x2x2 + decode 1×2x2x2 = 24 chips" in prefill
