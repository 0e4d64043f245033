"""``core.screen.quiet``: a screen that answers "could the decision change?" without deciding.

Properties on drawn policies, readings and states (histories with stabilization windows and rate limits):
a quiet observation's ``decide`` never changes the count, whatever the state; and each type's ``holds`` is
exactly "its raw recommendation is the current count" (so a screen skips ``decide`` only when ``decide``
would hold for the type's own reason).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
)
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.screen import quiet, screened
from autoscaler.core.spec import ScalingPolicy
from tests.core import test_engine_hpa_props as hpa_props

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm", "serving")
NOW = 10_000.0
SIGNALS: list[dict[str, Any]] = [
    {"name": "waiting", "query": "w"},
    {"name": "running", "query": "r"},
    {"name": "per_pod", "query": "p", "scope": "perReplica"},
    {"name": "kv", "query": "k", "aggregate": "max"},
]


def queue_policy(cfg: dict[str, Any], *, min_replicas: int, max_replicas: int, behavior: dict[str, Any] | None,
                 **spec: Any) -> ScalingPolicy:
    policy = {"type": "queue", "capacityPerReplica": 10, **cfg}
    if behavior is not None:
        policy["behavior"] = behavior
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "q"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm", "namespace": "serving"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "signals": SIGNALS,
            "policy": policy,
            **spec,
        },
    })


configs = st.fixed_dictionaries(
    {"work": st.sampled_from([["waiting"], ["waiting", "running"], ["per_pod"], ["running", "per_pod"]])},
    optional={
        "targetUtilization": st.sampled_from([0.5, 0.7, 1.0]),
        "saturation": st.just([{"signal": "kv", "threshold": 0.8}]),
    },
)
rules = st.fixed_dictionaries({}, optional={
    "stabilizationWindowSeconds": st.sampled_from([0, 30, 300]),
    "policies": st.just([{"type": "Pods", "value": 1, "periodSeconds": 60}]),
})
behaviors = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"scaleUp": rules, "scaleDown": rules}))
#: Values near the thresholds of capacityPerReplica 10 (multiples of 10 × utilization) and anywhere else.
values = st.one_of(st.integers(0, 120).map(float), st.floats(0, 120, allow_nan=False),
                   st.sampled_from([7.0, 8.0, 14.0, 20.0, 24.0, 30.0, 35.0, math.nan]))
histories = st.lists(st.tuples(st.floats(NOW - 600, NOW), st.integers(0, 12)), max_size=6).map(
    lambda xs: tuple(sorted(xs)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[ScalingPolicy, Observation, PolicyState]:
    min_replicas = draw(st.integers(1, 3))
    max_replicas = draw(st.integers(min_replicas, 10))
    pol = queue_policy(draw(configs), min_replicas=min_replicas, max_replicas=max_replicas,
                       behavior=draw(behaviors))
    spec = draw(st.integers(0, 12))
    ready = draw(st.integers(0, spec))
    starting = draw(st.integers(0, spec - ready))
    readings = {
        "waiting": SignalReading(draw(values), NOW - 1),
        "running": SignalReading(draw(values), NOW - 1),
        "per_pod": SignalReading(draw(values), NOW - 1),
        "kv": SignalReading(draw(st.sampled_from([0.5, 0.8, 0.95])), NOW - 1),
    }
    obs = Observation(target=TARGET, replicas=ReplicaStatus(spec, ready, starting), signals=readings)
    state = PolicyState(
        recommendations=draw(histories), scale_up_events=draw(histories), scale_down_events=draw(histories),
    )
    return pol, obs, state


def _quiet_changes_nothing(case: tuple[ScalingPolicy, Observation, PolicyState]) -> None:
    """A quiet observation's ``decide`` acts on nothing (the property both types' tests check)."""
    pol, obs, state = case
    cp = compile_policy(pol)
    if quiet(cp, obs, NOW, state):
        decisions, _ = decide(cp, obs, state, NOW)
        assert [d for d in decisions if not isinstance(d, ScaleDecision) or d.changes] == []


def _recommendation_and_holds(
    case: tuple[ScalingPolicy, Observation, PolicyState],
) -> tuple[Recommendation, bool, Observation]:
    """The type's raw recommendation for the case's reading, and what its ``holds`` answers for it."""
    pol, obs, _ = case
    cp = compile_policy(pol)
    signals = cp.judge.judge_all(cp.judge.combine(obs.signals, obs.replicas, NOW), NOW)
    ctx = Context(NOW, obs.target, obs.replicas, signals, pol.spec)
    rec, _ = cp.algorithm.recommend(ctx, None)
    return rec, cp.algorithm.holds(ctx), obs  # type: ignore[attr-defined]


@settings(max_examples=400, deadline=None)
@given(cases())
@example(  # on the scale-up edge: 30 needs 3 at 10/replica; held at 3, scaled at 2
    (queue_policy({"work": ["waiting"]}, min_replicas=1, max_replicas=10, behavior=None),
     Observation(TARGET, ReplicaStatus(2, 2, 0), {"waiting": SignalReading(30.0, NOW - 1)}), PolicyState()))
@example(  # on the scale-down edge: 3 replicas at 0.8 down-utilization hold 16 < work ≤ 24
    (queue_policy({"work": ["waiting"]}, min_replicas=1, max_replicas=10, behavior=None),
     Observation(TARGET, ReplicaStatus(3, 3, 0), {"waiting": SignalReading(16.0, NOW - 1)}), PolicyState()))
def test_a_quiet_observation_never_changes_the_count(case: tuple[ScalingPolicy, Observation, PolicyState]) -> None:
    _quiet_changes_nothing(case)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_holds_is_exactly_the_recommendation_at_the_current_count(
    case: tuple[ScalingPolicy, Observation, PolicyState],
) -> None:
    rec, holds, obs = _recommendation_and_holds(case)
    assert holds == (rec.replicas == obs.replicas.spec)


def test_quiet_on_the_edges_and_what_it_leaves_to_decide() -> None:
    pol = queue_policy({"work": ["waiting"]}, min_replicas=1, max_replicas=10, behavior=None)
    cp = compile_policy(pol)

    def obs(spec: int, waiting: float, at: float = NOW - 1) -> Observation:
        return Observation(TARGET, ReplicaStatus(spec, spec, 0), {"waiting": SignalReading(waiting, at)})

    assert quiet(cp, obs(3, 24.0), NOW)  # 3 replicas hold 16 < work ≤ 30 (0.8 down-, 1.0 up-utilization)
    assert quiet(cp, obs(3, 30.0), NOW)
    assert not quiet(cp, obs(3, 30.5), NOW)  # needs 4
    assert not quiet(cp, obs(3, 16.0), NOW)  # fits on 2 at 0.8
    assert not quiet(cp, obs(3, math.nan), NOW)  # unknown: decide holds and counts it (fallback)
    assert not quiet(cp, obs(3, 24.0, at=NOW - 3600), NOW)  # stale: unknown
    assert not quiet(cp, obs(11, 24.0), NOW)  # above maxReplicas: decide scales to 10
    stz = queue_policy({"work": ["waiting"]}, min_replicas=0, max_replicas=10, behavior=None,
                       scaleToZero={"enabled": True, "idleSeconds": 60,
                                    "activation": {"signal": "waiting", "threshold": 0}})
    assert not screened(compile_policy(stz))  # an idle timer may scale it to zero as time passes


@st.composite
def hpa_cases(draw: st.DrawFn) -> tuple[ScalingPolicy, Observation, PolicyState]:
    """hpa policies as ``test_engine_hpa_props`` draws them (behaviors, tolerances), with a Value or an
    AverageValue first metric and a Pods second one, readings near and far from their targets."""
    doc = draw(hpa_props.policy_docs())
    if draw(st.booleans()):
        doc["spec"]["policy"]["metrics"][0]["target"] = {"type": "Value", "value": 40}
    current = draw(st.integers(1, 40))
    load = draw(st.one_of(st.none(), st.floats(0, 500, allow_nan=False), st.sampled_from([10.0 * current, 40.0])))
    backlog = draw(st.one_of(st.none(), st.floats(0, 200, allow_nan=False), st.sampled_from([5.0 * current])))
    obs = hpa_props.observation(current, (load, backlog, draw(st.integers(0, 2))), NOW - 1)
    state = PolicyState(
        recommendations=draw(histories), scale_up_events=draw(histories), scale_down_events=draw(histories),
    )
    return ScalingPolicy.model_validate(doc), obs, state


def _legacy_case() -> tuple[ScalingPolicy, Observation, PolicyState]:
    """Found by the property below: without a ``behavior`` block HPA holds at the highest recommendation of
    its 300 s window, here 2 above the current 1, although this recommendation is 1."""
    doc = hpa_props.policy_docs_fixed(300)
    del doc["spec"]["policy"]["behavior"]
    doc["spec"]["maxReplicas"] = 2
    doc["spec"]["signals"].append({"name": "backlog", "query": "b"})
    doc["spec"]["policy"]["metrics"].append(
        {"signal": "backlog", "type": "Pods", "target": {"type": "AverageValue", "averageValue": 5}})
    obs = hpa_props.observation(1, (0.0, 1.0, 0), NOW - 1)
    return ScalingPolicy.model_validate(doc), obs, PolicyState(recommendations=((NOW - 300, 2),))


@settings(max_examples=400, deadline=None)
@given(hpa_cases())
@example(_legacy_case())
def test_a_quiet_hpa_observation_never_changes_the_count(case: tuple[ScalingPolicy, Observation, PolicyState]) -> None:
    _quiet_changes_nothing(case)


@settings(max_examples=400, deadline=None)
@given(hpa_cases())
def test_hpa_holds_is_the_recommendation_at_the_current_count(
    case: tuple[ScalingPolicy, Observation, PolicyState],
) -> None:
    """Exactly, when every metric is known; never True otherwise."""
    rec, holds, obs = _recommendation_and_holds(case)
    if rec.unknown_signals:
        assert not holds
    else:
        assert holds == (rec.replicas == obs.replicas.spec)


def test_quiet_hpa_within_tolerance_and_outside() -> None:
    doc = hpa_props.policy_docs_fixed(300)
    cp = compile_policy(ScalingPolicy.model_validate(doc))

    def obs(load: float, backlog: float) -> Observation:
        return hpa_props.observation(4, (load, backlog, 0), NOW - 1)

    assert quiet(cp, obs(40.0, 20.0), NOW)  # both metrics exactly at target for 4 replicas
    assert not quiet(cp, obs(60.0, 20.0), NOW)  # load needs 6


def test_quiet_on_hpas_legacy_path_reads_the_window_in_the_state() -> None:
    """Without a ``behavior`` block HPA holds at the highest recommendation of its 300 s window: quiet only
    with the state at hand and nothing in it above the current count."""
    pol, obs, _ = _legacy_case()
    cp = compile_policy(pol)
    current = obs.replicas.spec
    assert not quiet(cp, obs, NOW)  # no state: the window is unknown
    assert not quiet(cp, obs, NOW, PolicyState(recommendations=((NOW - 300, current + 1),)))
    assert quiet(cp, obs, NOW, PolicyState(recommendations=((NOW - 300, current), (NOW - 10, current))))
    assert quiet(cp, obs, NOW, PolicyState())
