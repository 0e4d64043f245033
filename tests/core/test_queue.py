"""The ``queue`` policy type: replicas from outstanding work over per-replica capacity.

Unit cases drive ``QueueAlgorithm.recommend`` directly (the raw recommendation, before behavior and bounds);
engine cases go through ``compile_policy`` + ``decide``. Properties: starting replicas never raise the
recommendation, a count it chose is a fixed point (no flapping at steady load), determinism.
"""

from __future__ import annotations

import math
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
from autoscaler.core.policies import queue
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import ScalingPolicy

TARGET = TargetRef(TargetKind.LEADER_WORKER_SET, "llm", "serving")
NOW = 1_000.0
SIGNALS: list[dict[str, Any]] = [
    {"name": "waiting", "query": "w"},
    {"name": "running", "query": "r"},
    {"name": "per_pod", "query": "p", "scope": "perReplica"},
    {"name": "kv", "query": "k", "aggregate": "max"},
]
BASE: dict[str, Any] = {"type": "queue", "work": ["waiting", "running"], "capacityPerReplica": 10}


def policy(cfg: dict[str, Any] | None = None, **spec: Any) -> ScalingPolicy:
    return ScalingPolicy.model_validate(
        {
            "apiVersion": "autoscaler.dev/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "q"},
            "spec": {
                "target": {"kind": "LeaderWorkerSet", "name": "llm", "namespace": "serving"},
                "maxReplicas": 100,
                "signals": SIGNALS,
                "policy": {**BASE, **(cfg or {})},
                **spec,
            },
        }
    )


def recommend(
    cfg: dict[str, Any] | None, spec: int, ready: int, starting: int = 0, **values: float | None
) -> Recommendation:
    pol = policy(cfg)
    readings = {
        k: SignalReading(math.nan if v is None else v, NOW - 1) for k, v in values.items()
    }
    signals = SignalJudge(pol.spec).judge_all(readings, NOW)
    ctx = Context(NOW, TARGET, ReplicaStatus(spec, ready, starting), signals, pol.spec)
    assert isinstance(pol.spec.policy, queue.QueuePolicyConfig)
    rec, state = queue.build(pol.spec.policy).recommend(ctx, None)
    assert state is None  # stateless: the behavior stage keeps the windows
    return rec


CASES = [
    # (config, spec, ready, starting, signals, expected replicas, reason, words in the message)
    pytest.param(None, 2, 2, 0, {"waiting": 40, "running": 17}, 6, Reason.SCALE_UP,
                 ["work 57 (waiting 40 + running 17)", "needs 6", "2 ready + 0 starting", "scaling to 6"],
                 id="scale-up-from-total-work"),
    pytest.param(None, 6, 2, 4, {"waiting": 40, "running": 17}, 6, Reason.WAITING_FOR_STARTING,
                 ["needs 6", "2 ready + 4 starting", "not scaling again"], id="starting-replicas-cover-the-need"),
    pytest.param(None, 6, 2, 4, {"waiting": 60, "running": 17}, 8, Reason.SCALE_UP,
                 ["needs 8", "2 ready + 4 starting"], id="more-than-starting-can-absorb"),
    pytest.param(None, 4, 4, 0, {"waiting": 0, "running": 39}, 4, Reason.STEADY,
                 ["holding 4"], id="steady-at-target"),
    pytest.param(None, 5, 5, 0, {"waiting": 0, "running": 39}, 5, Reason.STEADY,
                 ["fewer would run above 0.8 utilization"], id="band-holds-above-down-threshold"),
    pytest.param(None, 5, 5, 0, {"waiting": 0, "running": 32}, 4, Reason.SCALE_DOWN,
                 ["fits on 4 replica(s) at ≤ 0.8 utilization (8/replica)", "scaling down to 4"],
                 id="scale-down-when-it-fits-with-headroom"),
    pytest.param(None, 10, 10, 0, {"waiting": 0, "running": 12}, 2, Reason.SCALE_DOWN, ["down to 2"],
                 id="scale-down-several-at-once"),
    pytest.param(None, 3, 3, 0, {"waiting": 0, "running": 0}, 0, Reason.SCALE_DOWN, ["down to 0"],
                 id="no-work-recommends-zero"),
    pytest.param(None, 0, 0, 0, {"waiting": 0, "running": 0}, 0, Reason.STEADY, ["holding 0"],
                 id="at-zero-without-work"),
    pytest.param(None, 0, 0, 0, {"waiting": 1, "running": 0}, 1, Reason.SCALE_UP, ["scaling to 1"],
                 id="from-zero-with-work"),
    pytest.param(None, 10, 2, 8, {"waiting": 0, "running": 12}, 2, Reason.SCALE_DOWN, ["down to 2"],
                 id="load-gone-while-starting-cancels-them"),
    pytest.param({"targetUtilization": 0.5}, 2, 2, 0, {"waiting": 20, "running": 10}, 6, Reason.SCALE_UP,
                 ["at 5/replica (10 × 0.5)"], id="target-utilization"),
    pytest.param({"scaleDownUtilization": 0.5}, 6, 6, 0, {"waiting": 0, "running": 24}, 5, Reason.SCALE_DOWN,
                 ["≤ 0.5 utilization", "down to 5"], id="custom-down-threshold"),
    pytest.param({"work": ["per_pod"]}, 3, 3, 0, {"per_pod": 20}, 6, Reason.SCALE_UP,
                 ["per_pod 60 (20/replica × 3)"], id="per-replica-signal-times-ready"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 3, 3, 0,
                 {"waiting": 0, "running": 10, "kv": 0.85}, 4, Reason.SCALE_UP,
                 ["saturated: kv 0.85 ≥ 0.8 ⇒ at least 4"], id="saturated-adds-one"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 4, 3, 1,
                 {"waiting": 0, "running": 10, "kv": 0.85}, 4, Reason.WAITING_FOR_STARTING,
                 ["1 starting will absorb it"], id="saturated-but-a-replica-is-starting"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 5, 5, 0,
                 {"waiting": 0, "running": 5, "kv": 0.8}, 6, Reason.SCALE_UP, ["kv 0.8 ≥ 0.8"],
                 id="saturation-at-threshold-counts"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 5, 5, 0,
                 {"waiting": 0, "running": 5, "kv": 0.5}, 1, Reason.SCALE_DOWN, ["down to 1"],
                 id="not-saturated-scales-down"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 6, 5, 1,
                 {"waiting": 0, "running": 5, "kv": 0.9}, 6, Reason.WAITING_FOR_STARTING, [],
                 id="saturation-blocks-scale-down"),
]


@pytest.mark.parametrize(("cfg", "spec", "ready", "starting", "values", "expected", "reason", "words"), CASES)
def test_recommendation(
    cfg: dict[str, Any] | None,
    spec: int,
    ready: int,
    starting: int,
    values: dict[str, float],
    expected: int,
    reason: Reason,
    words: list[str],
) -> None:
    rec = recommend(cfg, spec, ready, starting, **values)
    assert (rec.replicas, rec.reason) == (expected, reason), rec.message
    for word in words:
        assert word in rec.message


UNKNOWN_CASES = [
    pytest.param(None, 2, 2, 0, {"waiting": 45, "running": None}, 5, Reason.SCALE_UP,
                 ["at least 5", "unknown: running"], id="known-part-alone-needs-more"),
    pytest.param(None, 6, 6, 0, {"waiting": 45, "running": None}, None, Reason.METRICS_UNKNOWN,
                 ["unknown: running"], id="known-part-fits-hold"),
    pytest.param(None, 2, 2, 4, {"waiting": 45, "running": None}, None, Reason.METRICS_UNKNOWN, [],
                 id="known-part-covered-by-starting-hold"),
    pytest.param(None, 6, 6, 0, {"waiting": None, "running": None}, None, Reason.METRICS_UNKNOWN,
                 ["unknown: waiting, running"], id="all-unknown"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 4, 4, 0,
                 {"waiting": 0, "running": 0, "kv": None}, None, Reason.METRICS_UNKNOWN, ["unknown: kv"],
                 id="unknown-saturation-blocks-scale-down"),
    pytest.param({"saturation": [{"signal": "kv", "threshold": 0.8}]}, 4, 4, 0,
                 {"waiting": None, "running": 10, "kv": 0.9}, 5, Reason.SCALE_UP, ["at least 5"],
                 id="known-saturation-scales-up-with-unknown-work"),
    pytest.param({"work": ["per_pod"]}, 3, 0, 0, {"per_pod": 5}, None, Reason.METRICS_UNKNOWN,
                 ["unknown: per_pod"], id="per-replica-average-with-no-ready-replica"),
]


@pytest.mark.parametrize(("cfg", "spec", "ready", "starting", "values", "expected", "reason", "words"), UNKNOWN_CASES)
def test_unknown_work(
    cfg: dict[str, Any] | None,
    spec: int,
    ready: int,
    starting: int,
    values: dict[str, float | None],
    expected: int | None,
    reason: Reason,
    words: list[str],
) -> None:
    rec = recommend(cfg, spec, ready, starting, **values)
    assert (rec.replicas, rec.reason) == (expected, reason), rec.message
    if expected is None:
        assert rec.unknown_signals
    for word in words:
        assert word in rec.message


def test_float_noise_does_not_add_a_replica() -> None:
    # 1.1 / 0.1 is 11.000000000000002 in floating point.
    assert queue.replicas_for(1.1, 0.1) == 11
    assert queue.replicas_for(1.1000001, 0.1) == 12
    assert queue.replicas_for(0.0, 0.1) == 0


# --- config -------------------------------------------------------------------------------------------------


def test_behavior_defaults_are_fast_up_and_slow_down() -> None:
    cfg = policy().spec.policy
    assert isinstance(cfg, queue.QueuePolicyConfig)
    assert cfg.behavior is not None
    assert cfg.behavior.scale_up == queue.DEFAULT_SCALE_UP
    assert cfg.behavior.scale_up.stabilization_window_seconds == 0
    assert cfg.behavior.scale_down == queue.DEFAULT_SCALE_DOWN
    assert cfg.behavior.scale_down.stabilization_window_seconds == 300
    assert cfg.down_utilization == pytest.approx(0.8)


def test_a_given_behavior_keeps_its_fields_and_takes_queue_defaults_for_the_rest() -> None:
    cfg = policy({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}).spec.policy
    assert isinstance(cfg, queue.QueuePolicyConfig)
    assert cfg.behavior is not None
    assert cfg.behavior.scale_up == queue.DEFAULT_SCALE_UP
    assert cfg.behavior.scale_down is not None
    assert cfg.behavior.scale_down.stabilization_window_seconds == 60
    assert cfg.behavior.scale_down.policies == queue.DEFAULT_SCALE_DOWN.policies


@pytest.mark.parametrize(
    ("cfg", "error"),
    [
        pytest.param(
            {"targetUtilization": 0.8, "scaleDownUtilization": 0.9}, "must be below targetUtilization",
            id="band-inverted",
        ),
        pytest.param({"scaleDownUtilization": 1.0}, "must be below targetUtilization", id="band-empty"),
        pytest.param({"targetUtilization": 0}, "greater than 0", id="zero-target"),
        pytest.param({"targetUtilization": 1.5}, "less than or equal to 1", id="target-above-one"),
        pytest.param({"capacityPerReplica": 0}, "greater than 0", id="zero-capacity"),
        pytest.param({"work": []}, "at least 1", id="no-work"),
        pytest.param({"work": ["waiting", "waiting"]}, "more than once", id="work-twice"),
        pytest.param({"work": ["nope"]}, "undefined signal", id="undefined-work"),
        pytest.param({"saturation": [{"signal": "nope", "threshold": 0.8}]}, "undefined signal",
                     id="undefined-saturation"),
        pytest.param({"saturation": [{"signal": "kv", "threshold": 0}]}, "greater than 0", id="zero-threshold"),
        pytest.param({"capacity": 3}, "Extra inputs", id="unknown-field"),
    ],
)
def test_invalid_config(cfg: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        policy(cfg)


# --- properties ---------------------------------------------------------------------------------------------

work = st.floats(0, 10_000, allow_nan=False)


@st.composite
def replicas(draw: st.DrawFn) -> tuple[int, int, int]:
    spec = draw(st.integers(0, 60))
    ready = draw(st.integers(0, spec))
    return spec, ready, draw(st.integers(0, spec - ready))


SATURATED = {"saturation": [{"signal": "kv", "threshold": 0.8}]}


@given(status=replicas(), extra=st.integers(1, 20), waiting=work, running=work, kv=st.floats(0, 1),
       missing=st.sampled_from([None, "waiting", "kv"]))
def test_starting_replicas_never_raise_the_recommendation(
    status: tuple[int, int, int], extra: int, waiting: float, running: float, kv: float, missing: str | None
) -> None:
    spec, ready, starting = status
    values: dict[str, float | None] = {"waiting": waiting, "running": running, "kv": kv}
    if missing:
        values[missing] = None
    base = recommend(SATURATED, spec, ready, starting, **values)
    more = recommend(SATURATED, spec, ready, starting + extra, **values)
    # Also when the new replicas were requested too (spec grows with them): never more than before or spec.
    requested = recommend(SATURATED, spec + extra, ready, starting + extra, **values)
    low = spec if base.replicas is None else base.replicas
    assert (more.replicas if more.replicas is not None else spec) <= low
    assert (requested.replicas if requested.replicas is not None else spec + extra) <= max(low, spec + extra)


@given(status=replicas(), waiting=work, running=work,
       down=st.sampled_from([None, 0.3, 0.6, 0.9]), target=st.sampled_from([1.0, 0.95, 0.7]))
def test_a_chosen_count_is_stable_at_the_same_load(
    status: tuple[int, int, int], waiting: float, running: float, down: float | None, target: float
) -> None:
    spec, ready, starting = status
    cfg: dict[str, Any] = {"targetUtilization": target}
    if down is not None and down < target:
        cfg["scaleDownUtilization"] = down
    first = recommend(cfg, spec, ready, starting, waiting=waiting, running=running)
    assert first.replicas is not None
    n = first.replicas
    again = recommend(cfg, n, n, 0, waiting=waiting, running=running)
    # Once all replicas are up, the same load keeps the same count: no flapping.
    assert (again.replicas, again.reason) == (n, Reason.STEADY), again.message


@given(status=replicas(), waiting=work, running=work)
def test_recommendation_is_absolute_not_a_ratio(status: tuple[int, int, int], waiting: float, running: float) -> None:
    spec, ready, starting = status
    rec = recommend(None, spec, ready, starting, waiting=waiting, running=running)
    assert rec.replicas is not None
    up = queue.replicas_for(waiting + running, 10)
    down = queue.replicas_for(waiting + running, 8)
    # Either the count the work needs (up), the count that fits with headroom (down), or the current count
    # when the current count lies in between.
    assert rec.replicas in (up, down, spec)
    assert up <= max(rec.replicas, 0)
    if up <= spec <= down:
        assert rec.replicas == spec


# --- through the engine -------------------------------------------------------------------------------------


def engine_step(
    pol: ScalingPolicy, state: PolicyState, now: float, spec: int, ready: int, starting: int, load: float
) -> tuple[ScaleDecision, PolicyState]:
    obs = Observation(
        TARGET,
        ReplicaStatus(spec, ready, starting),
        {"waiting": SignalReading(load, now - 1), "running": SignalReading(0.0, now - 1)},
    )
    decisions, state = decide(compile_policy(pol), obs, state, now)
    first = decisions[0]
    assert isinstance(first, ScaleDecision)
    return first, state


def test_burst_while_replicas_load_the_model_scales_once() -> None:
    """The cascading over-scale: HPA keeps adding while new replicas load; queue adds once and waits."""
    pol = policy(minReplicas=1)
    state = PolicyState()
    spec, ready, starting = 2, 2, 0
    history = []
    # The burst: 60 waiting; new replicas take 120 s to load; the queue keeps the same level meanwhile.
    for t in range(0, 240, 15):
        now = NOW + t
        decision, state = engine_step(pol, state, now, spec, ready, starting, 60.0)
        history.append((t, decision.desired, decision.reason))
        if decision.desired > spec:
            starting += decision.desired - spec
            spec = decision.desired
        if t >= 120 and starting:
            ready, starting = ready + starting, 0
    assert history[0][1:] == (6, Reason.SCALE_UP)
    assert [h[1] for h in history] == [6] * len(history)
    assert Reason.WAITING_FOR_STARTING in {h[2] for h in history}


def test_scale_down_waits_for_the_default_stabilization_window() -> None:
    pol = policy()
    state = PolicyState()
    decision, state = engine_step(pol, state, NOW, 6, 6, 0, 58.0)
    assert decision.desired == 6
    downs = []
    for t in (15, 150, 299, 300, 301):
        decision, state = engine_step(pol, state, NOW + t, 6, 6, 0, 10.0)
        downs.append(decision.desired)
    # The recommendation drops to 2 at once; the 300 s window (HPA semantics) holds 6 until it has passed.
    assert downs[:3] == [6, 6, 6]
    assert downs[-1] == 2


def test_scale_up_is_not_throttled_by_hpa_defaults() -> None:
    # HPA's default would allow 1 → 5 (4 pods / 15 s); the queue default allows ×10.
    decision, _ = engine_step(policy(), PolicyState(), NOW, 1, 1, 0, 95.0)
    assert (decision.desired, decision.reason) == (10, Reason.SCALE_UP)
