"""Metric safety of the decision core, through the public API (``compile_policy`` + ``decide``).

Unknown (missing, stale, NaN, infinite, negative, errored) signals hold the current count or, after
``failureThreshold`` consecutive failures, fall back as KEDA does; scale-to-zero happens only when enabled,
with an activation threshold and an idle period; composite signals propagate unknowns. Property tests check,
for every policy type: bounds, determinism, and that no combination of unknown signals shrinks a target.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core.engine import CompiledPolicy, compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
)
from autoscaler.core.spec import ScalingPolicy

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm", "serving")
NOW = 10_000.0

QUEUE: dict[str, Any] = {"type": "queue", "work": ["waiting", "running"], "capacityPerReplica": 10}
KPA: dict[str, Any] = {"type": "kpa", "signal": "waiting", "targetPerReplica": 10}
HPA: dict[str, Any] = {
    "type": "hpa",
    "metrics": [{"signal": "waiting", "type": "External", "target": {"type": "AverageValue", "averageValue": 10}}],
}
SIGNALS: list[dict[str, Any]] = [{"name": "waiting", "query": "w"}, {"name": "running", "query": "r"}]


def make_policy(
    policy: dict[str, Any],
    *,
    signals: list[dict[str, Any]] | None = None,
    min_replicas: int = 1,
    max_replicas: int = 10,
    **spec: Any,
) -> ScalingPolicy:
    return ScalingPolicy.model_validate(
        {
            "apiVersion": "autoscaler.dev/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "p"},
            "spec": {
                "target": {"kind": "Deployment", "name": "llm", "namespace": "serving"},
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "signals": signals if signals is not None else SIGNALS,
                "policy": policy,
                **spec,
            },
        }
    )


def compiled(policy: dict[str, Any], **kw: Any) -> CompiledPolicy:
    try:
        return compile_policy(make_policy(policy, **kw))
    except NotImplementedError:  # pragma: no cover - only while a policy type is being written
        pytest.skip(f"policy type {policy['type']} is not implemented yet")


def fresh(value: float, now: float = NOW) -> SignalReading:
    return SignalReading(value=value, timestamp=now - 1.0, source="test")


def observe(
    spec: int, ready: int | None = None, starting: int = 0, **signals: SignalReading | None
) -> Observation:
    readings = {k: v for k, v in signals.items() if v is not None}
    return Observation(TARGET, ReplicaStatus(spec, spec if ready is None else ready, starting), readings)


def run(
    cp: CompiledPolicy, obs: Observation, state: PolicyState | None = None, now: float = NOW
) -> tuple[ScaleDecision, PolicyState]:
    decisions, new_state = decide(cp, obs, state or PolicyState(), now)
    first = decisions[0]
    assert isinstance(first, ScaleDecision)
    return first, new_state


# --- unknown means hold, never zero -------------------------------------------------------------------------

UNKNOWN_READINGS = [
    pytest.param(None, "missing", id="missing"),
    pytest.param(SignalReading(None, NOW, error="connection refused"), "source error", id="source-error"),
    pytest.param(SignalReading(None, NOW), "empty result", id="empty-result"),
    pytest.param(SignalReading(math.nan, NOW), "NaN", id="nan"),
    pytest.param(SignalReading(math.inf, NOW), "infinite", id="infinite"),
    pytest.param(SignalReading(-math.inf, NOW), "infinite", id="minus-infinite"),
    pytest.param(SignalReading(-3.0, NOW), "negative", id="negative"),
    pytest.param(SignalReading(5.0, NOW - 121.0), "stale", id="stale-default-120s"),
    pytest.param(SignalReading(5.0, None), "no timestamp", id="no-timestamp"),
    pytest.param(SignalReading(5.0, NOW + 60.0), "future", id="from-the-future"),
]


@pytest.mark.parametrize("policy", [pytest.param(QUEUE, id="queue"), pytest.param(KPA, id="kpa")])
@pytest.mark.parametrize(("reading", "why"), UNKNOWN_READINGS)
def test_unknown_signal_holds_the_current_count(
    policy: dict[str, Any], reading: SignalReading | None, why: str
) -> None:
    cp = compiled(policy)
    # Zero load elsewhere would scale down to 1 if the unknown signal were read as 0.
    decision, state = run(cp, observe(6, waiting=reading, running=fresh(0.0)))
    assert (decision.desired, decision.reason) == (6, Reason.METRICS_UNKNOWN)
    assert why in decision.message
    assert "waiting" in decision.message
    assert state.consecutive_failures == 1


def test_per_signal_age_limit_overrides_the_default() -> None:
    signals = [{"name": "waiting", "query": "w", "maxAgeSeconds": 30}, {"name": "running", "query": "r"}]
    cp = compiled(QUEUE, signals=signals)
    old = SignalReading(0.0, NOW - 31.0)
    decision, _ = run(cp, observe(6, waiting=old, running=SignalReading(0.0, NOW - 100.0)))
    assert (decision.desired, decision.reason) == (6, Reason.METRICS_UNKNOWN)
    assert "stale: 31s old > maxAgeSeconds 30" in decision.message


# --- fallback (KEDA) ----------------------------------------------------------------------------------------

FALLBACKS = [
    pytest.param("static", 3, 6, id="static-below"),
    pytest.param("static", 8, 6, id="static-above"),
    pytest.param("currentReplicas", 3, 3, id="current-below"),
    pytest.param("currentReplicas", 8, 8, id="current-above"),
    pytest.param("currentReplicasIfHigher", 3, 6, id="if-higher-current-lower-takes-fallback"),
    pytest.param("currentReplicasIfHigher", 8, 8, id="if-higher-current-higher-keeps-current"),
    pytest.param("currentReplicasIfLower", 3, 3, id="if-lower-current-lower-keeps-current"),
    pytest.param("currentReplicasIfLower", 8, 6, id="if-lower-current-higher-takes-fallback"),
]


@pytest.mark.parametrize(("behavior", "current", "expected"), FALLBACKS)
def test_fallback_behaviors_match_keda(behavior: str, current: int, expected: int) -> None:
    safety = {"fallback": {"failureThreshold": 1, "behavior": behavior, "replicas": 6}}
    cp = compiled(QUEUE, metricSafety=safety)
    obs = observe(current, waiting=None, running=fresh(1.0))
    state = PolicyState()
    first, state = run(cp, obs, state)
    assert (first.desired, first.reason) == (current, Reason.METRICS_UNKNOWN)
    second, state = run(cp, obs, state, NOW + 15)
    assert f"fallback ({behavior}) to {expected}: unknown for more than failureThreshold 1" in second.message
    if expected >= current:
        assert (second.desired, second.reason) == (expected, Reason.FALLBACK)
    else:
        # Down goes through the behavior stage like any recommendation: the queue type's 300 s window first.
        assert (second.desired, second.reason) == (current, Reason.STABILIZING)
        for i in range(2, 23):
            later, state = run(cp, obs, state, NOW + 15 * i)  # the outage goes on; the count is still `current`
        assert later.desired == expected


def test_fallback_waits_until_failures_pass_the_threshold() -> None:
    # KEDA falls back once the failure count *passes* failureThreshold (NumberOfFailures > threshold).
    cp = compiled(QUEUE, metricSafety={"fallback": {"failureThreshold": 3, "replicas": 7}})
    obs = observe(4, waiting=SignalReading(math.nan, NOW), running=fresh(1.0))
    state = PolicyState()
    reasons = []
    for i in range(5):
        decision, state = run(cp, obs, state, NOW + 15 * i)
        reasons.append((decision.desired, decision.reason))
    assert reasons == [(4, Reason.METRICS_UNKNOWN)] * 3 + [(7, Reason.FALLBACK)] * 2


def test_a_known_evaluation_resets_the_failure_count() -> None:
    cp = compiled(QUEUE, metricSafety={"fallback": {"failureThreshold": 2, "replicas": 9}})
    bad = observe(4, waiting=None, running=fresh(35.0))
    good = observe(4, waiting=fresh(5.0), running=fresh(35.0))
    state = PolicyState()
    for i, obs in enumerate([bad, bad, good, bad, bad]):
        decision, state = run(cp, obs, state, NOW + 15 * i)
        assert decision.reason is not Reason.FALLBACK, i
    assert state.consecutive_failures == 2


def test_fallback_is_kept_within_min_and_max() -> None:
    cp = compiled(QUEUE, max_replicas=5, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 50}})
    obs = observe(3, waiting=None, running=fresh(1.0))
    _, state = run(cp, obs)
    decision, _ = run(cp, obs, state, NOW + 15)
    assert decision.desired == 5
    assert "fallback (static) to 50" in decision.message


@pytest.mark.parametrize(
    "fallback",
    [
        pytest.param({"failureThreshold": 3}, id="static-without-replicas"),
        pytest.param({"failureThreshold": 3, "behavior": "currentReplicasIfHigher"}, id="if-higher-without-replicas"),
        pytest.param({"failureThreshold": 3, "behavior": "currentReplicasIfLower"}, id="if-lower-without-replicas"),
        pytest.param({"failureThreshold": 0, "replicas": 3}, id="zero-threshold"),
        pytest.param({"failureThreshold": 3, "replicas": 3, "behavior": "cached"}, id="unknown-behavior"),
    ],
)
def test_invalid_fallback_is_rejected(fallback: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        make_policy(QUEUE, metricSafety={"fallback": fallback})


# --- scale-to-zero ------------------------------------------------------------------------------------------

STZ: dict[str, Any] = {"enabled": True, "activation": {"signal": "waiting", "threshold": 0}, "idleSeconds": 300}


def test_without_scale_to_zero_idle_never_goes_below_one() -> None:
    cp = compiled({**QUEUE, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}})
    state, spec = PolicyState(), 3
    for i in range(40):
        now = NOW + 60 * i
        decision, state = run(cp, observe(spec, waiting=fresh(0.0, now), running=fresh(0.0, now)), state, now)
        assert decision.desired >= 1
        spec = decision.desired
    assert spec == 1


@pytest.mark.parametrize(
    ("min_replicas", "spec"),
    [
        pytest.param(0, {}, id="min-zero-without-scale-to-zero"),
        pytest.param(0, {"scaleToZero": {"enabled": True}}, id="enabled-without-activation"),
        pytest.param(
            0,
            {"scaleToZero": {**STZ, "activation": {"signal": "nope", "threshold": 0}}},
            id="activation-on-undefined-signal",
        ),
        pytest.param(
            0,
            {"scaleToZero": {**STZ, "activation": {"signal": "waiting", "threshold": -1}}},
            id="negative-activation-threshold",
        ),
    ],
)
def test_scale_to_zero_needs_explicit_config(min_replicas: int, spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        make_policy(QUEUE, min_replicas=min_replicas, **spec)


def stz_policy(**overrides: Any) -> CompiledPolicy:
    stz = {**STZ, **overrides}
    return compiled({**QUEUE, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}},
                    min_replicas=0, scaleToZero=stz)


def idle_obs(now: float, spec: int = 2, waiting: SignalReading | None = None) -> Observation:
    return observe(spec, waiting=waiting or fresh(0.0, now), running=fresh(0.0, now))


def test_scales_to_zero_only_after_the_idle_period() -> None:
    cp = stz_policy()
    state = PolicyState()
    decisions = []
    for t in (0, 100, 299, 300):
        decision, state = run(cp, idle_obs(NOW + t), state, NOW + t)
        decisions.append((t, decision.desired, decision.reason))
    assert [d[1] for d in decisions[:3]] == [1, 1, 1]
    assert decisions[3][1:] == (0, Reason.SCALE_TO_ZERO)


def test_activity_above_the_threshold_restarts_the_idle_period() -> None:
    cp = stz_policy(activation={"signal": "waiting", "threshold": 2})
    state = PolicyState()
    # 2.0 is not above the threshold (idle since 0); 2.5 at 200 is activity: the idle period restarts at 250.
    for t, waiting in [(0, 2.0), (200, 2.5), (250, 1.0), (549, 0.0)]:
        decision, state = run(cp, idle_obs(NOW + t, waiting=fresh(waiting, NOW + t)), state, NOW + t)
        assert decision.desired != 0, t
    decision, state = run(cp, idle_obs(NOW + 550), state, NOW + 550)
    assert (decision.desired, decision.reason) == (0, Reason.SCALE_TO_ZERO)
    assert "for 300s (idleSeconds 300)" in decision.message


def test_unknown_activation_interrupts_the_idle_period() -> None:
    # Idle from 0 to 100, unknown from 100 to 299, idle again at 300: the target has not been *known* to be
    # idle for 300 s, so it must not scale to zero at 300.
    cp = stz_policy()
    state = PolicyState()
    decision, state = run(cp, idle_obs(NOW), state, NOW)
    for t in (100, 200, 299):
        decision, state = run(cp, idle_obs(NOW + t, waiting=SignalReading(math.nan, NOW + t)), state, NOW + t)
        assert decision.reason is Reason.METRICS_UNKNOWN
    decision, state = run(cp, idle_obs(NOW + 300), state, NOW + 300)
    assert decision.desired != 0
    decision, state = run(cp, idle_obs(NOW + 599), state, NOW + 599)
    assert decision.desired != 0
    decision, state = run(cp, idle_obs(NOW + 600), state, NOW + 600)
    assert (decision.desired, decision.reason) == (0, Reason.SCALE_TO_ZERO)


def test_at_zero_stays_at_zero_at_or_below_the_threshold() -> None:
    cp = stz_policy(activation={"signal": "waiting", "threshold": 3})
    decision, _ = run(cp, observe(0, waiting=fresh(3.0), running=fresh(0.0)))
    assert (decision.desired, decision.reason) == (0, Reason.STEADY)


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "waiting", "expected"),
    [
        pytest.param(0, 10, 1.0, 1, id="small-load-activates-one"),
        pytest.param(0, 10, 45.0, 5, id="large-load-activates-what-it-needs"),
        pytest.param(0, 4, 450.0, 4, id="activation-respects-max"),
        pytest.param(2, 10, 1.0, 2, id="activation-goes-to-min-replicas"),
    ],
)
def test_activation_from_zero(min_replicas: int, max_replicas: int, waiting: float, expected: int) -> None:
    cp = compiled(QUEUE, min_replicas=min_replicas, max_replicas=max_replicas, scaleToZero=STZ)
    decision, _ = run(cp, observe(0, waiting=fresh(waiting), running=fresh(0.0)))
    assert (decision.desired, decision.reason) == (expected, Reason.ACTIVATE_FROM_ZERO)
    assert f"{waiting:g} > activation threshold 0" in decision.message


def test_a_known_activation_wakes_the_target_even_when_the_policy_signals_are_unknown() -> None:
    # As KEDA: any active trigger activates; an erroring one does not veto it. Upward, so it is safe.
    cp = compiled({**QUEUE, "work": ["running"]}, min_replicas=0, scaleToZero=STZ)
    decision, state = run(cp, observe(0, waiting=fresh(4.0), running=None))
    assert (decision.desired, decision.reason) == (1, Reason.ACTIVATE_FROM_ZERO)
    assert "running missing" in decision.message
    assert state.consecutive_failures == 1


def test_unknown_at_zero_stays_at_zero() -> None:
    cp = stz_policy()
    decision, _ = run(cp, observe(0, waiting=None, running=fresh(0.0)))
    assert (decision.desired, decision.reason) == (0, Reason.METRICS_UNKNOWN)


# --- composite signals through the engine -------------------------------------------------------------------

COMPOSITE_SIGNALS: list[dict[str, Any]] = [
    *SIGNALS,
    {"name": "kv", "query": "k"},
    {"name": "load", "expr": "max(waiting + running, kv / 0.8 * 10)"},
]


@pytest.mark.parametrize(
    ("waiting", "running", "kv", "expected"),
    [
        pytest.param(30.0, 25.0, 0.1, 6, id="work-dominates"),
        pytest.param(3.0, 2.0, 0.8, 1, id="kv-dominates-one-replica"),
        pytest.param(3.0, 2.0, 2.4, 3, id="kv-dominates-three"),
    ],
)
def test_queue_on_a_composite_signal(waiting: float, running: float, kv: float, expected: int) -> None:
    cp = compiled({**QUEUE, "work": ["load"]}, signals=COMPOSITE_SIGNALS)
    decision, _ = run(cp, observe(1, waiting=fresh(waiting), running=fresh(running), kv=fresh(kv)))
    assert decision.desired == expected


def test_composite_with_an_unknown_input_holds() -> None:
    cp = compiled({**QUEUE, "work": ["load"]}, signals=COMPOSITE_SIGNALS)
    decision, _ = run(cp, observe(5, waiting=fresh(0.0), running=fresh(0.0), kv=SignalReading(0.5, NOW - 500)))
    assert (decision.desired, decision.reason) == (5, Reason.METRICS_UNKNOWN)
    assert "depends on unknown signal(s): kv: stale" in decision.message


def test_composite_division_by_zero_holds() -> None:
    signals = [*SIGNALS, {"name": "ratio", "expr": "waiting / running"}]
    cp = compiled({**KPA, "signal": "ratio"}, signals=signals)
    decision, _ = run(cp, observe(5, waiting=fresh(10.0), running=fresh(0.0)))
    assert (decision.desired, decision.reason) == (5, Reason.METRICS_UNKNOWN)
    assert "division by zero" in decision.message


# --- properties for every policy type -----------------------------------------------------------------------

#: A composite on top: ``load`` depends on both raw signals, so an unknown one makes it unknown.
KPA_ON_COMPOSITE: dict[str, Any] = {
    **KPA,
    "signal": "load",
    "_signals": [*SIGNALS, {"name": "load", "expr": "waiting + running / 2"}],
}
POLICY_TYPES = [
    pytest.param(QUEUE, id="queue"),
    pytest.param(KPA, id="kpa"),
    pytest.param(HPA, id="hpa"),
    pytest.param(KPA_ON_COMPOSITE, id="kpa-on-a-composite"),
]


def typed(policy: dict[str, Any], **kw: Any) -> CompiledPolicy:
    """``compiled`` for a POLICY_TYPES entry (which may carry its own signal list)."""
    body = {k: v for k, v in policy.items() if k != "_signals"}
    if "_signals" in policy:
        kw["signals"] = policy["_signals"]
    return compiled(body, **kw)

bad_readings = st.sampled_from(
    [
        None,
        SignalReading(math.nan, NOW),
        SignalReading(math.inf, NOW),
        SignalReading(-1.0, NOW),
        SignalReading(3.0, NOW - 10_000),
        SignalReading(None, NOW, error="boom"),
        SignalReading(3.0, None),
    ]
)
good_readings = st.floats(0, 1e6, allow_nan=False).map(fresh)
readings = st.one_of(good_readings, bad_readings)


@st.composite
def replica_status(draw: st.DrawFn, low: int = 1, high: int = 10) -> tuple[int, int, int]:
    spec = draw(st.integers(low, high))
    ready = draw(st.integers(0, spec))
    starting = draw(st.integers(0, spec - ready))
    return spec, ready, starting


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("policy", POLICY_TYPES)
@PROPERTY
@given(
    steps=st.lists(st.tuples(replica_status(2, 8), readings, readings, st.floats(0, 120)), min_size=1, max_size=12)
)
def test_desired_is_within_bounds(
    policy: dict[str, Any], steps: list[tuple[tuple[int, int, int], SignalReading | None, SignalReading | None, float]]
) -> None:
    safety = {"fallback": {"failureThreshold": 2, "replicas": 9}}
    cp = typed(policy, min_replicas=2, max_replicas=8, metricSafety=safety)
    state, now = PolicyState(), NOW
    for (spec, ready, starting), waiting, running, dt in steps:
        now += dt
        decision, state = run(cp, observe(spec, ready, starting, waiting=waiting, running=running), state, now)
        assert 2 <= decision.desired <= 8, decision.message


@pytest.mark.parametrize("policy", POLICY_TYPES)
@PROPERTY
@given(status=replica_status(), waiting=readings, running=readings, history=st.lists(good_readings, max_size=5))
def test_decisions_are_deterministic(
    policy: dict[str, Any],
    status: tuple[int, int, int],
    waiting: SignalReading | None,
    running: SignalReading | None,
    history: list[SignalReading],
) -> None:
    cp_a, cp_b = typed(policy), typed(policy)
    spec, ready, starting = status
    results = []
    for cp in (cp_a, cp_b):
        state = PolicyState()
        for i, reading in enumerate(history):
            _, state = run(cp, observe(spec, ready, starting, waiting=reading, running=reading), state, NOW + 2 * i)
        decisions, state = decide(cp, observe(spec, ready, starting, waiting=waiting, running=running), state, NOW + 20)
        results.append((decisions, state))
    assert results[0] == results[1]


@pytest.mark.parametrize("policy", POLICY_TYPES)
@PROPERTY
@given(
    status=replica_status(),
    history=st.lists(good_readings, max_size=6),
    unknown=st.sampled_from(["waiting", "running", "both"]),
    bad=bad_readings,
    other=good_readings,
)
def test_unknown_signals_never_shrink_the_target(
    policy: dict[str, Any],
    status: tuple[int, int, int],
    history: list[SignalReading],
    unknown: str,
    bad: SignalReading | None,
    other: SignalReading,
) -> None:
    cp = typed(policy)
    pspec = cp.policy.spec
    read = {dep for ref in pspec.policy.signal_refs() for dep in (pspec.signal(ref).expression_names() or {ref})}
    if unknown == "running" and "running" not in read:
        unknown = "both"  # this type does not read "running": make a signal it uses unknown
    spec, ready, starting = status
    state = PolicyState()
    for i, reading in enumerate(history):
        # The history may have scaled anywhere; what matters is the count when the signals go unknown.
        _, state = run(cp, observe(spec, ready, starting, waiting=reading, running=reading), state, NOW + 2 * i)
    waiting = bad if unknown in ("waiting", "both") else other
    running = bad if unknown in ("running", "both") else other
    decision, _ = run(cp, observe(spec, ready, starting, waiting=waiting, running=running), state, NOW + 20)
    assert decision.desired >= spec, decision.message


@PROPERTY
@given(
    status=replica_status(high=20),
    extra=st.integers(1, 10),
    waiting=st.floats(0, 500),
    running=st.floats(0, 500),
    kv=st.floats(0, 1),
    unknown=st.sampled_from([None, "waiting", "kv"]),
)
def test_queue_more_starting_replicas_never_raise_desired(
    status: tuple[int, int, int], extra: int, waiting: float, running: float, kv: float, unknown: str | None
) -> None:
    # Same spec count, so the behavior stage starts from the same place: only the starting count differs.
    signals = [*SIGNALS, {"name": "kv", "query": "k"}]
    policy = {**QUEUE, "saturation": [{"signal": "kv", "threshold": 0.8}]}
    cp = compiled(policy, signals=signals, max_replicas=50)
    spec, ready, starting = status
    values = {"waiting": fresh(waiting), "running": fresh(running), "kv": fresh(kv)}
    if unknown is not None:
        values[unknown] = SignalReading(math.nan, NOW)
    fewer, _ = run(cp, observe(spec, ready, starting, **values))
    more, _ = run(cp, observe(spec, ready, starting + extra, **values))
    assert more.desired <= fewer.desired, (fewer.message, more.message)
