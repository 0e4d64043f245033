"""The ``kpa`` policy type: Knative's stable and panic windows.

Unit cases drive ``KpaAlgorithm.recommend`` over a sequence of evaluations (state threaded through);
engine cases go through ``compile_policy`` + ``decide``. Properties: the sample window is pruned, no
scale-down while panicking, determinism, bounds through the engine.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core.engine import compile_policy, decide
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
from autoscaler.core.policies import kpa
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import ScalingPolicy

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")
T0 = 50_000.0
TICK = 2.0  # Knative's autoscaler tick


def policy(cfg: dict[str, Any] | None = None, scope: str = "total", **spec: Any) -> ScalingPolicy:
    return ScalingPolicy.model_validate(
        {
            "apiVersion": "autoscaler.dev/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "k"},
            "spec": {
                "target": {"kind": "Deployment", "name": "llm"},
                "maxReplicas": spec.pop("maxReplicas", 1000),
                "signals": [{"name": "concurrency", "query": "c", "scope": scope}],
                "policy": {"type": "kpa", "signal": "concurrency", "targetPerReplica": 10, **(cfg or {})},
                **spec,
            },
        }
    )


class Driver:
    """Feeds one load value per evaluation to the algorithm and applies its recommendation instantly."""

    def __init__(self, cfg: dict[str, Any] | None = None, replicas: int = 1, scope: str = "total") -> None:
        self.policy = policy(cfg, scope)
        assert isinstance(self.policy.spec.policy, kpa.KpaPolicyConfig)
        self.algorithm = kpa.build(self.policy.spec.policy)
        self.judge = SignalJudge(self.policy.spec)
        self.state: object | None = None
        self.replicas = replicas
        self.now = T0

    def step(self, load: float | None, dt: float = TICK, ready: int | None = None) -> Recommendation:
        self.now += dt
        reading = SignalReading(load, self.now - 0.5) if load is not None else None
        signals = self.judge.judge_all({"concurrency": reading} if reading else {}, self.now)
        ready = self.replicas if ready is None else ready
        ctx = Context(self.now, TARGET, ReplicaStatus(self.replicas, ready), signals, self.policy.spec)
        rec, self.state = self.algorithm.recommend(ctx, self.state)
        if rec.replicas is not None:
            self.replicas = rec.replicas
        return rec

    @property
    def kstate(self) -> kpa.KpaState:
        assert isinstance(self.state, kpa.KpaState)
        return self.state


def test_defaults_are_knatives() -> None:
    cfg = policy().spec.policy
    assert isinstance(cfg, kpa.KpaPolicyConfig)
    assert (cfg.stable_window_seconds, cfg.panic_window_seconds, cfg.panic_threshold) == (60.0, 6.0, 2.0)
    assert (cfg.max_scale_up_rate, cfg.max_scale_down_rate, cfg.scale_down_delay_seconds) == (1000.0, 2.0, 0.0)
    assert kpa.build(cfg).uses_behavior is False


@pytest.mark.parametrize(
    ("cfg", "error"),
    [
        pytest.param({"panicWindowSeconds": 90}, "must not exceed stableWindowSeconds", id="panic-longer-than-stable"),
        pytest.param({"panicThreshold": 1.0}, "greater than 1", id="threshold-not-above-one"),
        pytest.param({"maxScaleUpRate": 1.0}, "greater than 1", id="up-rate-one"),
        pytest.param({"maxScaleDownRate": 0.5}, "greater than 1", id="down-rate-below-one"),
        pytest.param({"scaleDownDelaySeconds": -1}, "greater than or equal to 0", id="negative-delay"),
        pytest.param({"targetPerReplica": 0}, "greater than 0", id="zero-target"),
        pytest.param({"panicWindow": 6}, "Extra inputs", id="unknown-field"),
    ],
)
def test_invalid_config(cfg: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        policy(cfg)


def test_steady_load_follows_the_stable_window() -> None:
    d = Driver(replicas=3)
    for _ in range(40):
        rec = d.step(30.0)
    assert (rec.replicas, rec.reason) == (3, Reason.STEADY)
    assert not d.kstate.panicking
    assert "avg 30 over 60s → 3" in rec.message


def test_burst_enters_panic_and_scales_on_the_panic_window() -> None:
    d = Driver(replicas=1)
    for _ in range(30):
        d.step(10.0)
    assert d.replicas == 1
    # Load jumps to 80: the 6 s window sees it within one tick, the 60 s window barely.
    first = d.step(80.0)
    # panic window (t-4, t-2, t]: (10 + 10 + 80) / 3 = 33.3 → 4 ≥ 2 × 1 ready: panic.
    assert (first.replicas, first.reason) == (4, Reason.PANIC)
    assert "panicking: 4 ≥ 2 × 1 ready, no scale-down → 4 replica(s)" in first.message
    assert d.kstate.panicking
    second = d.step(80.0, ready=1)
    third = d.step(80.0, ready=1)
    assert [second.replicas, third.replicas] == [6, 8]


def test_no_scale_down_while_panicking_and_exit_after_a_stable_window() -> None:
    d = Driver(replicas=1)
    for _ in range(30):
        d.step(10.0)
    for _ in range(3):
        d.step(80.0, ready=1)  # ready stays 1: the new replicas are still starting
    assert d.replicas == 8
    last_trigger = d.kstate.panic_trigger
    assert last_trigger == d.now
    counts = []
    # The burst ends; replicas are ready now, so the panic trigger no longer fires.
    while d.now + TICK - last_trigger <= 60.0:
        rec = d.step(0.0)
        counts.append(rec.replicas)
        assert rec.reason is Reason.PANIC
    assert counts == [8] * 30
    # More than a stable window without the trigger: panic is over; scale-down is rate limited to ready / 2.
    after = d.step(0.0)
    assert not d.kstate.panicking
    assert (after.replicas, after.reason) == (4, Reason.SCALE_DOWN)
    assert "max scale rates allow 4..8000" in after.message
    assert [d.step(0.0).replicas for _ in range(3)] == [2, 1, 0]


def test_panic_is_extended_while_the_trigger_holds() -> None:
    d = Driver(replicas=1)
    d.step(10.0)
    d.step(50.0, ready=1)
    assert d.kstate.panicking
    first_trigger = d.kstate.panic_trigger
    for _ in range(40):
        d.step(50.0, ready=1)  # still 1 ready: 5 ≥ 2 × 1 keeps triggering
    assert d.kstate.panic_trigger is not None
    assert first_trigger is not None
    assert d.kstate.panic_trigger > first_trigger


def test_max_scale_up_rate_caps_a_burst() -> None:
    d = Driver({"maxScaleUpRate": 2.0}, replicas=2)
    d.step(20.0)
    rec = d.step(1000.0, dt=10.0)  # only this sample is in the 6 s window: 100 replicas wanted
    assert (rec.replicas, rec.reason) == (4, Reason.PANIC)


def test_scale_down_delay_holds_the_highest_recent_count() -> None:
    d = Driver({"scaleDownDelaySeconds": 30, "stableWindowSeconds": 6, "panicWindowSeconds": 6}, replicas=4)
    d.step(40.0)
    held = [d.step(10.0) for _ in range(14)]  # 28 s: 4 is still in the 30 s delay window
    assert {(r.replicas, r.reason) for r in held[2:]} == {(4, Reason.STABILIZING)}
    assert "scale-down delay 30s holds 4" in held[-1].message
    released = d.step(10.0, dt=4.0)
    assert released.replicas in (1, 2)
    assert released.reason is Reason.SCALE_DOWN


def test_per_replica_signal_is_multiplied_by_ready() -> None:
    d = Driver(replicas=3, scope="perReplica")
    rec = d.step(20.0)  # 20 per replica × 3 ready = 60 → 6; 6 ≥ 2 × 3: panic
    assert rec.replicas == 6
    assert "avg 60 over 60s" in rec.message


def test_per_replica_signal_without_ready_replicas_is_unknown() -> None:
    d = Driver(replicas=3, scope="perReplica")
    rec = d.step(20.0, ready=0)
    assert (rec.replicas, rec.reason) == (None, Reason.METRICS_UNKNOWN)
    assert "no replica is ready" in rec.message


def test_unknown_holds_and_records_nothing() -> None:
    d = Driver(replicas=3)
    d.step(30.0)
    before = d.state
    rec = d.step(None)
    assert (rec.replicas, rec.reason, rec.unknown_signals) == (None, Reason.METRICS_UNKNOWN, ("concurrency",))
    assert d.state == before


def test_foreign_state_is_replaced() -> None:
    d = Driver(replicas=3)
    d.state = ("not", "kpa")
    rec = d.step(30.0)
    assert rec.replicas == 3
    assert isinstance(d.state, kpa.KpaState)


# --- properties ---------------------------------------------------------------------------------------------

loads = st.lists(
    st.tuples(st.one_of(st.none(), st.floats(0, 5_000)), st.floats(0.5, 30), st.integers(0, 40)),
    min_size=1,
    max_size=40,
)


@given(steps=loads, stable=st.sampled_from([6.0, 30.0, 60.0]))
def test_window_is_pruned_and_panic_never_scales_down(
    steps: list[tuple[float | None, float, int]], stable: float
) -> None:
    d = Driver({"stableWindowSeconds": stable, "panicWindowSeconds": min(6.0, stable)}, replicas=5)
    for load, dt, ready in steps:
        before = d.replicas
        rec = d.step(load, dt, ready=min(ready, d.replicas))
        if rec.replicas is None:
            continue
        s = d.kstate
        assert all(d.now - stable < t <= d.now for t, _ in s.samples)
        if rec.reason is Reason.PANIC:
            assert rec.replicas >= before
            assert rec.replicas >= s.max_panic or s.max_panic == rec.replicas


@given(steps=loads)
def test_same_inputs_same_outputs(steps: list[tuple[float | None, float, int]]) -> None:
    runs = []
    for _ in range(2):
        d = Driver(replicas=2)
        out = [d.step(load, dt, ready=min(ready, d.replicas)) for load, dt, ready in steps]
        runs.append((out, d.state))
    assert runs[0] == runs[1]


@given(steps=loads)
def test_engine_keeps_bounds(steps: list[tuple[float | None, float, int]]) -> None:
    compiled = compile_policy(policy(minReplicas=2, maxReplicas=7))
    state, now, current = PolicyState(), T0, 3
    for load, dt, ready in steps:
        now += dt
        readings = {} if load is None else {"concurrency": SignalReading(load, now - 1)}
        obs = Observation(TARGET, ReplicaStatus(current, min(ready, current)), readings)
        decisions, state = decide(compiled, obs, state, now)
        decision = decisions[0]
        assert isinstance(decision, ScaleDecision)
        assert 2 <= decision.desired <= 7, decision.message
        current = decision.desired


def test_engine_sequence_burst_then_quiet() -> None:
    compiled = compile_policy(policy(maxReplicas=20))
    state, now, current = PolicyState(), T0, 2
    seen: list[tuple[int, Reason]] = []
    for i in range(120):
        now += TICK
        load = 200.0 if 30 <= i < 40 else 15.0
        obs = Observation(TARGET, ReplicaStatus(current, current), {"concurrency": SignalReading(load, now - 1)})
        decisions, state = decide(compiled, obs, state, now)
        decision = decisions[0]
        assert isinstance(decision, ScaleDecision)
        seen.append((decision.desired, decision.reason))
        current = decision.desired
    assert seen[29] == (2, Reason.STEADY)
    assert seen[30][1] is Reason.PANIC
    assert max(n for n, _ in seen) == 20  # capped by maxReplicas
    assert (20, Reason.LIMITED_BY_MAX) in seen or (20, Reason.PANIC) in seen
    assert seen[-1] == (2, Reason.STEADY)  # back to the stable count once panic ended
