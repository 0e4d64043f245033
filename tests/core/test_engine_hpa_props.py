"""Invariants of the engine with the ``hpa`` policy type and the behavior stage (hypothesis).

- every decision stays within [minReplicas, maxReplicas] (current count in range or not);
- the same inputs give the same decision and state;
- no scale-down goes below a recommendation still inside the scale-down stabilization window;
- an unknown metric never makes the target smaller.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")
PERIOD = 15.0
AVERAGE_VALUE = 10.0

policies_st = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Pods", "Percent"]),
        "value": st.integers(1, 200),
        "periodSeconds": st.sampled_from([15, 30, 60, 120]),
    }
)
rules_st = st.fixed_dictionaries(
    {},
    optional={
        "stabilizationWindowSeconds": st.sampled_from([0, 15, 45, 60, 300]),
        "selectPolicy": st.sampled_from(["Max", "Min", "Disabled"]),
        "policies": st.lists(policies_st, min_size=1, max_size=3),
        "tolerance": st.sampled_from([0.0, 0.05, 0.1, 0.3]),
    },
)
behavior_st = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"scaleUp": rules_st, "scaleDown": rules_st}),
)


@st.composite
def policy_docs(draw: st.DrawFn) -> dict[str, Any]:
    min_replicas = draw(st.integers(1, 5))
    max_replicas = draw(st.integers(min_replicas, 40))
    hpa: dict[str, Any] = {
        "type": "hpa",
        "tolerance": draw(st.sampled_from([0.0, 0.1])),
        "metrics": [
            {"signal": "load", "type": "External", "target": {"type": "AverageValue", "averageValue": AVERAGE_VALUE}},
            {"signal": "backlog", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 5}},
        ],
    }
    behavior = draw(behavior_st)
    if behavior is not None:
        hpa["behavior"] = behavior
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "llm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "signals": [{"name": "load", "query": "a"}, {"name": "backlog", "query": "b"}],
            "policy": hpa,
        },
    }


#: One sync: load (None = unknown), backlog (None = unknown), starting replicas.
sync_st = st.tuples(
    st.one_of(st.none(), st.floats(0, 500, allow_nan=False)),
    st.one_of(st.none(), st.floats(0, 200, allow_nan=False)),
    st.integers(0, 2),
)


def observation(current: int, sync: tuple[float | None, float | None, int], now: float) -> Observation:
    load, backlog, starting = sync
    signals = {}
    if load is not None:
        signals["load"] = SignalReading(load, now)
    if backlog is not None:
        signals["backlog"] = SignalReading(backlog, now)
    starting = min(starting, current)
    replicas = ReplicaStatus(spec=current, ready=current - starting, starting=starting)
    return Observation(TARGET, replicas, signals)


def step(
    policy: CompiledPolicy, current: int, sync: Any, state: PolicyState, now: float
) -> tuple[ScaleDecision, PolicyState]:
    decisions, state = decide(policy, observation(current, sync, now), state, now)
    decision = decisions[0]
    assert isinstance(decision, ScaleDecision)
    return decision, state


@settings(max_examples=150, deadline=None)
@given(doc=policy_docs(), start=st.integers(1, 60), syncs=st.lists(sync_st, min_size=1, max_size=25))
def test_decisions_stay_within_bounds(doc: dict[str, Any], start: int, syncs: list[Any]) -> None:
    policy = compile_policy(ScalingPolicy.model_validate(doc))
    spec = policy.policy.spec
    state, current = PolicyState(), start
    for i, sync in enumerate(syncs):
        decision, state = step(policy, current, sync, state, i * PERIOD)
        if spec.min_replicas <= current <= spec.max_replicas:
            assert spec.min_replicas <= decision.desired <= spec.max_replicas, decision.message
        else:
            # Out of range: HPA goes straight to the violated bound.
            assert decision.desired == min(max(current, spec.min_replicas), spec.max_replicas)
        current = decision.desired


@settings(max_examples=100, deadline=None)
@given(doc=policy_docs(), start=st.integers(1, 40), syncs=st.lists(sync_st, min_size=2, max_size=15))
def test_same_inputs_same_decision(doc: dict[str, Any], start: int, syncs: list[Any]) -> None:
    policy = compile_policy(ScalingPolicy.model_validate(doc))
    state, current = PolicyState(), start
    for i, sync in enumerate(syncs[:-1]):
        decision, state = step(policy, current, sync, state, i * PERIOD)
        current = decision.desired
    now = (len(syncs) - 1) * PERIOD
    first = step(policy, current, syncs[-1], state, now)
    again = step(compile_policy(ScalingPolicy.model_validate(doc)), current, syncs[-1], state, now)
    assert first == again


@settings(max_examples=150, deadline=None)
@given(
    window=st.sampled_from([15, 45, 60, 300]),
    start=st.integers(1, 30),
    loads=st.lists(st.floats(0, 400, allow_nan=False), min_size=2, max_size=30),
)
def test_no_scale_down_below_a_recommendation_inside_the_window(window: int, start: int, loads: list[float]) -> None:
    # Tolerance 0 and External AverageValue make the raw recommendation exactly ceil(load / averageValue).
    doc = policy_docs_fixed(window)
    policy = compile_policy(ScalingPolicy.model_validate(doc))
    state, current = PolicyState(), start
    raw: list[tuple[float, int]] = []
    for i, load in enumerate(loads):
        now = i * PERIOD
        raw.append((now, math.ceil(round(load * 1000) / (AVERAGE_VALUE * 1000))))
        decision, state = step(policy, current, (load, None, 0), state, now)
        if decision.desired < current:
            in_window = [r for t, r in raw if t > now - window]
            assert decision.desired >= max(in_window), (now, raw, decision.message)
        current = decision.desired


def policy_docs_fixed(window: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "llm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 100,
            "signals": [{"name": "load", "query": "a"}],
            "policy": {
                "type": "hpa",
                "tolerance": 0,
                "metrics": [
                    {"signal": "load", "type": "External",
                     "target": {"type": "AverageValue", "averageValue": AVERAGE_VALUE}},
                ],
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 1000, "periodSeconds": 15}]},
                    "scaleDown": {"stabilizationWindowSeconds": window},
                },
            },
        },
    }


@settings(max_examples=150, deadline=None)
@given(
    doc=policy_docs(),
    start=st.integers(1, 40),
    history=st.lists(sync_st, max_size=15),
    known=st.floats(0, 500, allow_nan=False),
    unknown_is_load=st.booleans(),
)
def test_an_unknown_metric_never_shrinks_the_target(
    doc: dict[str, Any], start: int, history: list[Any], known: float, unknown_is_load: bool
) -> None:
    policy = compile_policy(ScalingPolicy.model_validate(doc))
    spec = policy.policy.spec
    state, current = PolicyState(), start
    for i, sync in enumerate(history):
        decision, state = step(policy, current, sync, state, i * PERIOD)
        current = decision.desired
    sync = (None, known, 0) if unknown_is_load else (known, None, 0)
    decision, _ = step(policy, current, sync, state, len(history) * PERIOD)
    if current <= spec.max_replicas:
        assert decision.desired >= current, decision.message
    if decision.desired == current:
        assert decision.reason is not Reason.SCALE_DOWN
