"""The ``behavior`` stage (``autoscaler.core.behavior``): HPA stabilization windows, rate policies, min/max.

Cases follow upstream's ``horizontal.go`` (``normalizeDesiredReplicas[WithBehaviors]``); sequences run through the
engine (``compile_policy`` + ``decide``) with syncs 15 s apart and the replica count following each decision.
The recommendation is made exact with an External AverageValue metric and tolerance 0:
``ceil(load / 10)`` replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.core import behavior
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
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.policies.hpa import BehaviorSpec
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import ScalingPolicy

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")
#: Rate policies loose enough to leave only what a case looks at.
UNLIMITED_UP: dict[str, Any] = {"policies": [{"type": "Pods", "value": 1000, "periodSeconds": 15}]}
IMMEDIATE_DOWN: dict[str, Any] = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
}


def policy_doc(
    *, behavior_block: dict[str, Any] | None = None, min_replicas: int = 1, max_replicas: int = 1000
) -> dict[str, Any]:
    hpa: dict[str, Any] = {
        "type": "hpa",
        "tolerance": 0,
        "metrics": [{"signal": "load", "type": "External", "target": {"type": "AverageValue", "averageValue": 10}}],
    }
    if behavior_block is not None:
        hpa["behavior"] = behavior_block
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "llm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "signals": [{"name": "load", "query": "sum(queue)"}],
            "policy": hpa,
        },
    }


def compiled(**kwargs: Any) -> CompiledPolicy:
    return compile_policy(ScalingPolicy.model_validate(policy_doc(**kwargs)))


def observe(current: int, load: float, now: float) -> Observation:
    return Observation(TARGET, ReplicaStatus(spec=current, ready=current), {"load": SignalReading(load, now)})


@dataclass
class Run:
    decisions: list[ScaleDecision]
    state: PolicyState

    @property
    def counts(self) -> list[int]:
        return [d.desired for d in self.decisions]


def run(policy: CompiledPolicy, start: int, loads: Sequence[float], *, t0: float = 0.0, period: float = 15.0) -> Run:
    """Closed loop: each sync sees the count the previous decision set."""
    state, current, out = PolicyState(), start, []
    for i, load in enumerate(loads):
        now = t0 + i * period
        decisions, state = decide(policy, observe(current, load, now), state, now)
        decision = decisions[0]
        assert isinstance(decision, ScaleDecision)
        out.append(decision)
        current = decision.desired
    return Run(out, state)


# --- one evaluation: limits and bounds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behavior_block", "max_replicas", "current", "load", "desired", "reason"),
    [
        pytest.param({}, 1000, 1, 900, 5, Reason.RATE_LIMITED, id="default-up-adds-4-pods-when-doubling-is-less"),
        pytest.param({}, 1000, 10, 900, 20, Reason.RATE_LIMITED, id="default-up-doubles-when-4-pods-is-less"),
        pytest.param(
            {"scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 15},
                                      {"type": "Percent", "value": 100, "periodSeconds": 15}]}},
            1000, 10, 2000, 110, Reason.RATE_LIMITED, id="select-max-takes-the-larger-pods-policy",
        ),
        pytest.param(
            {"scaleUp": {"selectPolicy": "Min",
                         "policies": [{"type": "Pods", "value": 100, "periodSeconds": 15},
                                      {"type": "Percent", "value": 100, "periodSeconds": 15}]}},
            1000, 10, 2000, 20, Reason.RATE_LIMITED, id="select-min-takes-the-smaller-percent-policy",
        ),
        pytest.param(
            {"scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 15}]}},
            1000, 1, 900, 2, Reason.RATE_LIMITED, id="percent-up-rounds-up-so-one-replica-still-grows",
        ),
        pytest.param({}, 8, 5, 900, 8, Reason.LIMITED_BY_MAX, id="max-below-the-rate-limit-is-too-many-replicas"),
        pytest.param({}, 8, 4, 900, 8, Reason.LIMITED_BY_MAX, id="max-equal-to-the-rate-limit-is-too-many-replicas"),
        pytest.param(
            {"scaleUp": {"selectPolicy": "Disabled"}}, 1000, 4, 900, 4, Reason.SCALING_DISABLED,
            id="scale-up-select-policy-disabled",
        ),
        pytest.param(
            {"scaleUp": UNLIMITED_UP}, 1000, 4, 95, 10, Reason.SCALE_UP, id="within-limits-passes-unchanged",
        ),
        pytest.param(
            {"scaleDown": IMMEDIATE_DOWN}, 1000, 10, 30, 3, Reason.SCALE_DOWN, id="scale-down-window-0-is-immediate",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0,
                           "policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}},
            1000, 5, 0, 2, Reason.RATE_LIMITED, id="percent-down-truncates-the-count-that-stays",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0,
                           "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60},
                                        {"type": "Percent", "value": 50, "periodSeconds": 60}]}},
            1000, 10, 0, 5, Reason.RATE_LIMITED, id="select-max-down-removes-the-most",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Min",
                           "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60},
                                        {"type": "Percent", "value": 50, "periodSeconds": 60}]}},
            1000, 10, 0, 9, Reason.RATE_LIMITED, id="select-min-down-removes-the-fewest",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled"}}, 1000, 10, 0, 10,
            Reason.SCALING_DISABLED, id="scale-down-select-policy-disabled",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0}}, 1000, 5, 10, 1, Reason.SCALE_DOWN,
            id="partial-scale-down-keeps-default-100-percent-policy",
        ),
    ],
)
def test_first_evaluation(
    behavior_block: dict[str, Any], max_replicas: int, current: int, load: float, desired: int, reason: Reason
) -> None:
    result = run(compiled(behavior_block=behavior_block, max_replicas=max_replicas), current, [load])
    assert (result.counts[0], result.decisions[0].reason) == (desired, reason)


def test_min_bound_with_behavior_is_too_few_replicas() -> None:
    result = run(compiled(behavior_block={"scaleDown": IMMEDIATE_DOWN}, min_replicas=3), 5, [0])
    assert (result.counts[0], result.decisions[0].reason) == (3, Reason.LIMITED_BY_MIN)
    assert "minReplicas 3" in result.decisions[0].message


# --- sequences: period-start accounting and stabilization windows -------------------------------------------


@pytest.mark.parametrize(
    ("behavior_block", "start", "loads", "counts"),
    [
        pytest.param(
            {}, 1, [900] * 4, [5, 10, 20, 40],
            id="default-up-events-exactly-one-period-old-no-longer-count",
        ),
        pytest.param(
            {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}},
            1, [900] * 6, [5, 5, 5, 5, 9, 9],
            id="pods-per-60s-counts-from-the-count-at-period-start",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0,
                           "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}},
            80, [0] * 6, [72, 72, 72, 72, 64, 64],
            id="percent-down-per-60s-80-to-72-then-64",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 0,
                           "policies": [{"type": "Pods", "value": 2, "periodSeconds": 30}]}},
            10, [0] * 5, [8, 8, 6, 6, 4],
            id="pods-down-per-30s-every-other-sync",
        ),
        pytest.param(
            {"scaleUp": {"stabilizationWindowSeconds": 60, **UNLIMITED_UP}},
            2, [20, 80, 80, 80, 80, 80], [2, 2, 2, 2, 8, 8],
            id="scale-up-window-takes-the-lowest-recommendation",
        ),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 45, "policies": [{"type": "Percent", "value": 100,
                                                                          "periodSeconds": 15}]}},
            10, [100, 20, 50, 20, 20, 20, 20], [10, 10, 10, 5, 5, 2, 2],
            id="scale-down-window-takes-the-highest-recommendation",
        ),
    ],
)
def test_sequences(behavior_block: dict[str, Any], start: int, loads: list[float], counts: list[int]) -> None:
    assert run(compiled(behavior_block=behavior_block), start, loads).counts == counts


def test_scale_down_waits_out_the_default_300s_window() -> None:
    # A behavior block without a scale-down window gets the controller's 300 s. The window excludes a
    # recommendation stamped exactly 300 s ago (upstream compares with After).
    result = run(compiled(behavior_block={}), 10, [100] + [20] * 21)
    times = [i * 15 for i in range(22)]
    first_down = next(t for t, d in zip(times, result.counts, strict=True) if d < 10)
    assert first_down == 300
    assert all(d.reason is Reason.STABILIZING for d in result.decisions[1:20])
    assert "300s scale-down stabilization window" in result.decisions[1].message


def test_legacy_window_keeps_a_recommendation_exactly_300s_old() -> None:
    # Without behavior the controller-wide window drops only recommendations *before* the cutoff.
    result = run(compiled(behavior_block=None), 10, [100] + [20] * 22)
    times = [i * 15 for i in range(23)]
    assert next(t for t, d in zip(times, result.counts, strict=True) if d < 10) == 315


def test_no_scale_down_in_the_first_window_after_a_start() -> None:
    # HPA starts its history with the current count (recordInitialRecommendation).
    result = run(compiled(behavior_block={}), 10, [20] * 21)
    assert result.counts[:20] == [10] * 20
    assert result.counts[20] == 2


@pytest.mark.parametrize(
    ("current", "load", "max_replicas", "desired", "reason"),
    [
        pytest.param(3, 900, 1000, 6, Reason.RATE_LIMITED, id="legacy-up-at-most-double"),
        pytest.param(1, 900, 1000, 4, Reason.RATE_LIMITED, id="legacy-up-at-least-4"),
        pytest.param(3, 900, 5, 5, Reason.LIMITED_BY_MAX, id="legacy-max-below-the-cap"),
        pytest.param(3, 900, 6, 6, Reason.LIMITED_BY_MAX, id="legacy-max-equal-to-the-cap-is-too-many"),
        pytest.param(3, 50, 1000, 5, Reason.SCALE_UP, id="legacy-within-the-cap-passes"),
    ],
)
def test_legacy_limits(current: int, load: float, max_replicas: int, desired: int, reason: Reason) -> None:
    result = run(compiled(behavior_block=None, max_replicas=max_replicas), current, [load])
    assert (result.counts[0], result.decisions[0].reason) == (desired, reason)


def test_behavior_default_differs_from_legacy_from_one_replica() -> None:
    # behavior: {} allows +4 pods (1 → 5); no behavior caps at max(2×1, 4) = 4.
    assert run(compiled(behavior_block={}), 1, [900]).counts == [5]
    assert run(compiled(behavior_block=None), 1, [900]).counts == [4]


def test_legacy_stabilization_can_raise_above_the_current_count() -> None:
    # Upstream's legacy path takes the highest recommendation of the window even above the current count.
    state = PolicyState(recommendations=((0.0, 9),))
    norm = behavior.normalize(
        behavior=None, min_replicas=1, max_replicas=20, current=4, recommended=2, state=state, now=60.0
    )
    assert (norm.desired, norm.reason) == (8, Reason.RATE_LIMITED)


# --- pure functions on explicit state -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("up_events", "down_events", "limit"),
    [
        pytest.param((), (), 14, id="no-events"),
        pytest.param(((50.0, 4),), (), 10, id="recent-scale-up-lowers-the-period-start"),
        pytest.param(((50.0, 4),), ((55.0, 2),), 12, id="recent-scale-down-raises-the-period-start"),
        pytest.param(((0.0, 4),), (), 14, id="event-exactly-one-period-old-is-outside"),
        pytest.param(((1.0, 4), (20.0, 2)), (), 8, id="events-add-up-within-the-period"),
    ],
)
def test_scale_up_limit_period_start(
    up_events: tuple[tuple[float, int], ...], down_events: tuple[tuple[float, int], ...], limit: int
) -> None:
    up, _ = behavior.effective_rules(
        BehaviorSpec.model_validate({"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}})
    )
    state = PolicyState(scale_up_events=up_events, scale_down_events=down_events)
    assert behavior.scale_up_limit(rules=up, current=10, state=state, now=60.0) == limit


def test_effective_rules_defaults() -> None:
    up, down = behavior.effective_rules(BehaviorSpec())
    assert (up.window_s, up.select, [p.describe() for p in up.policies]) == (0, "Max", ["4 pods/15s", "100%/15s"])
    assert (down.window_s, down.select, [p.describe() for p in down.policies]) == (300, "Max", ["100%/15s"])


def test_given_policies_replace_the_default_list() -> None:
    up, _ = behavior.effective_rules(
        BehaviorSpec.model_validate({"scaleUp": {"policies": [{"type": "Percent", "value": 50, "periodSeconds": 30}]}})
    )
    assert [p.describe() for p in up.policies] == ["50%/30s"]
    assert (up.window_s, up.select) == (0, "Max")


def test_history_is_pruned_to_what_a_window_can_still_see() -> None:
    result = run(compiled(behavior_block={}), 5, [50] * 200)
    # 300 s window at one sync per 15 s: at most 20 entries plus the newest.
    assert len(result.state.recommendations) <= 21
    assert all(t > 199 * 15 - 300 for t, _ in result.state.recommendations)


def test_scale_events_are_pruned() -> None:
    loads = [900, 0] * 150  # flaps every sync
    result = run(compiled(behavior_block={"scaleDown": IMMEDIATE_DOWN}, max_replicas=50), 1, loads)
    last = (len(loads) - 1) * 15
    events = result.state.scale_up_events + result.state.scale_down_events
    assert events
    assert all(t > last - 1800 for t, _ in events)


# --- the stage is generic: other policy types -----------------------------------------------------------------


@dataclass
class FixedAlgorithm:
    """A policy type that recommends a fixed count (a fake at the algorithm boundary)."""

    replicas: int
    uses_behavior: bool

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        return Recommendation(self.replicas, Reason.SCALE_DOWN, f"fixed {self.replicas}"), state


def other_type_policy(behavior_block: dict[str, Any] | None) -> ScalingPolicy:
    # The document only carries the behavior block; the algorithm is the fake above.
    return ScalingPolicy.model_validate(policy_doc(behavior_block=behavior_block))


@pytest.mark.parametrize(
    ("uses_behavior", "behavior_block", "desired", "reason"),
    [
        pytest.param(True, None, 10, Reason.STABILIZING, id="uses-behavior-without-block-gets-legacy-window"),
        pytest.param(True, {"scaleDown": IMMEDIATE_DOWN}, 2, Reason.SCALE_DOWN, id="uses-behavior-with-block"),
        pytest.param(True, {"scaleDown": {"stabilizationWindowSeconds": 0, "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 15}]}}, 9, Reason.RATE_LIMITED,
            id="uses-behavior-rate-policy-applies"),
        pytest.param(False, {"scaleDown": {"stabilizationWindowSeconds": 600}}, 2, Reason.SCALE_DOWN,
                     id="no-behavior-stage-only-clamps"),
    ],
)
def test_other_policy_types_share_the_stage(
    uses_behavior: bool, behavior_block: dict[str, Any] | None, desired: int, reason: Reason
) -> None:
    pol = other_type_policy(behavior_block)
    fake = CompiledPolicy(pol, FixedAlgorithm(2, uses_behavior), SignalJudge(pol.spec))
    decisions, _ = decide(fake, observe(10, 20, 0.0), PolicyState(), 0.0)
    decision = decisions[0]
    assert isinstance(decision, ScaleDecision)
    assert (decision.desired, decision.reason) == (desired, reason)


def test_clamp_bounds_without_behavior_stage() -> None:
    pol = other_type_policy(None)
    fake = CompiledPolicy(pol, FixedAlgorithm(5000, uses_behavior=False), SignalJudge(pol.spec))
    decisions, state = decide(fake, observe(10, 20, 0.0), PolicyState(), 0.0)
    decision = decisions[0]
    assert isinstance(decision, ScaleDecision)
    assert (decision.desired, decision.reason) == (1000, Reason.LIMITED_BY_MAX)
    assert state.recommendations == ()


# --- upstream's TestScalingWithRules and TestNormalizeDesiredReplicas tables, case by case -------------------

NOW = 10_000.0


def rules(pods: int, pods_period: int, percent: int, percent_period: int, window: int) -> dict[str, Any]:
    """Upstream's ``generateScalingRules``: a Pods and/or a Percent policy, selectPolicy Max."""
    policies = []
    if pods:
        policies.append({"type": "Pods", "value": pods, "periodSeconds": pods_period})
    if percent:
        policies.append({"type": "Percent", "value": percent, "periodSeconds": percent_period})
    return {"stabilizationWindowSeconds": window, "selectPolicy": "Max", "policies": policies}


def uniform(changes: list[int], period: int) -> tuple[tuple[float, int], ...]:
    """Upstream's ``generateEventsUniformDistribution``: events at the centres of equal segments of the period."""
    segment = period / len(changes)
    return tuple((NOW - int(period - segment * (i + 1) + segment / 2), c) for i, c in enumerate(changes))


LIMIT = Reason.RATE_LIMITED
MAX = Reason.LIMITED_BY_MAX
MIN = Reason.LIMITED_BY_MIN
WITHIN = None
E159 = uniform([1, 5, 9], 120)
E_OUTDATED = uniform([8, 12, 9, 11], 120)

SCALING_WITH_RULES = [
    # (up events, down events, min, max, up rules, down rules, current, desired, expected, reason)
    pytest.param((), (), 3, 8, None, None, 5, 7, 7, WITHIN, id="prenormalized-desired-replicas-within-range"),
    pytest.param((), (), 2, 8, None, None, 3, 1, 2, MIN, id="prenormalized-desired-replicas-below-min"),
    pytest.param((), (), 0, 10, None, None, 1, 0, 0, WITHIN, id="desired-within-range-when-min-replicas-is-0"),
    pytest.param((), (), 1, 10, None, None, 20, 1000, 10, MAX, id="max-replicas-is-the-limit-below-scale-up-limit"),
    pytest.param((), (), 100, 150, None, None, 100, 1000, 150, MAX, id="desired-more-than-max-replicas"),
    pytest.param((), (), 1, 2000, rules(0, 0, 1, 60, 0), None, 3, 1000, 4, LIMIT,
                 id="scale-up-limit-below-max-with-user-policies"),
    pytest.param((), (), 3, 2000, None, rules(20, 60, 0, 0, 0), 1000, 3, 980, LIMIT,
                 id="scale-down-limit-above-min-with-user-policies"),
    pytest.param((), (), 1, 1000, None, None, 10, 50, 20, LIMIT, id="scale-up-with-default-behavior"),
    pytest.param((), (), 1, 1000, rules(100, 60, 100, 60, 0), None, 10, 500, 110, LIMIT,
                 id="scale-up-with-pods-policy-larger-than-percent-policy"),
    pytest.param((), (), 1, 1000, rules(2, 60, 100, 60, 0), None, 10, 500, 20, LIMIT,
                 id="scale-up-with-percent-policy-larger-than-pods-policy"),
    pytest.param((), (), 1, 1000, rules(100, 60, 0, 0, 0), None, 10, 50, 50, WITHIN,
                 id="scale-up-within-a-large-pods-policy"),
    pytest.param((), (), 1, 1000, rules(10000, 60, 0, 0, 0), None, 10, 50, 50, WITHIN,
                 id="scale-up-within-a-very-large-pods-policy"),
    pytest.param((), (), 1, 1000, rules(30, 60, 0, 0, 0), None, 10, 50, 40, LIMIT,
                 id="scale-up-with-pod-policy-limitation"),
    pytest.param((), (), 1, 1000, rules(0, 0, 200, 60, 0), None, 10, 50, 30, LIMIT,
                 id="scale-up-with-percent-policy-limitation"),
    pytest.param((), (), 1, 1000, None, rules(20, 60, 1, 60, 300), 100, 2, 80, LIMIT,
                 id="scale-down-with-pods-policy-larger-than-percent-policy"),
    pytest.param((), (), 1, 1000, None, rules(2, 60, 1, 60, 300), 100, 2, 98, LIMIT,
                 id="scale-down-with-pod-policy-larger-than-percent-policy"),
    pytest.param((), (), 1, 1000, None, rules(100, 60, 0, 0, 300), 10, 0, 1, MIN,
                 id="scale-down-with-min-replicas-limitation-large-pod-policy"),
    pytest.param((), (), 5, 1000, None, rules(0, 0, 100, 60, 300), 10, 2, 5, MIN,
                 id="scale-down-with-min-replicas-limitation-large-percent-policy"),
    pytest.param((), (), 1, 1000, None, rules(5, 60, 0, 0, 300), 10, 2, 5, LIMIT,
                 id="scale-down-with-pod-policy-limitation"),
    pytest.param((), (), 1, 1000, None, rules(0, 0, 50, 60, 300), 10, 5, 5, WITHIN,
                 id="scale-down-with-percent-policy-at-the-limit"),
    pytest.param(E159, (), 1, 200, rules(300, 60, 0, 0, 0), None, 100, 500, 200, MAX,
                 id="scale-up-max-replicas-limitation-large-pod-policy-and-events"),
    pytest.param(E159, (), 1, 200, rules(0, 0, 10000, 60, 0), None, 100, 500, 200, MAX,
                 id="scale-up-max-replicas-limitation-large-percent-policy-and-events"),
    pytest.param(E159, (), 1, 1000, rules(5, 120, 0, 0, 0), None, 100, 500, 100, LIMIT,
                 id="scale-up-never-below-current-after-many-recent-scale-ups"),
    pytest.param(E159, (), 1, 1000, rules(150, 120, 0, 0, 0), None, 100, 500, 235, LIMIT,
                 id="scale-up-with-pod-policy-and-previous-scale-up-events"),
    pytest.param(E159, (), 1, 1000, rules(0, 0, 200, 120, 0), None, 100, 500, 255, LIMIT,
                 id="scale-up-with-percent-policy-and-previous-scale-up-events"),
    pytest.param(uniform([4], 120), uniform([2], 120), 1, 1000, rules(0, 0, 300, 300, 0), None, 6, 24, 16, LIMIT,
                 id="scale-up-with-percent-policy-and-previous-scale-up-and-down-events"),
    pytest.param((), E159, 1, 1000, None, None, 10, 5, 5, WITHIN,
                 id="scale-down-with-default-policy-and-previous-events"),
    pytest.param((), E159, 1, 1000, None, rules(115, 120, 0, 0, 300), 100, 0, 1, MIN,
                 id="scale-down-with-min-replicas-limitation-pod-policy-and-previous-events"),
    pytest.param((), E159, 5, 1000, None, rules(130, 120, 0, 0, 300), 100, 0, 5, MIN,
                 id="scale-down-with-min-5-limitation-pod-policy-and-previous-events"),
    pytest.param((), E159, 5, 1000, None, rules(0, 0, 100, 120, 300), 100, 2, 5, MIN,
                 id="scale-down-with-min-limitation-percent-policy-and-previous-events"),
    pytest.param((), E159, 1, 1000, None, rules(5, 120, 0, 0, 300), 100, 2, 100, LIMIT,
                 id="scale-down-with-pod-policy-limitation-and-previous-events"),
    pytest.param((), uniform([2, 4, 6], 120), 1, 1000, None, rules(0, 0, 50, 120, 300), 100, 0, 56, LIMIT,
                 id="scale-down-with-percent-policy-limitation-and-previous-events"),
    pytest.param(uniform([2], 120), uniform([4], 120), 1, 1000, None, rules(0, 0, 50, 180, 0), 10, 1, 6, LIMIT,
                 id="scale-down-with-percent-policy-and-previous-scale-up-and-down-events"),
    pytest.param((), uniform([10, 10, 10], 120), 1, 1000, None, rules(0, 0, 10, 120, 300), 100, 0, 100, LIMIT,
                 id="scale-down-never-above-current-after-many-recent-scale-downs"),
    pytest.param((), uniform([10, 10, 10], 120), 1, 1000, None, rules(0, 0, 1000, 120, 300), 10, 5, 5, WITHIN,
                 id="scale-down-with-previous-events-still-allowing-more"),
    pytest.param(E_OUTDATED, (), 1, 1000, rules(1000, 60, 0, 0, 0), None, 100, 200, 200, WITHIN,
                 id="up-events-outside-the-period-do-not-count"),
    pytest.param(E_OUTDATED, (), 1, 1000, rules(1000, 120, 100, 60, 0), None, 100, 200, 200, WITHIN,
                 id="up-events-counted-per-policy-period"),
    pytest.param((), E_OUTDATED, 1, 1000, None, rules(1000, 60, 0, 0, 300), 100, 5, 5, WITHIN,
                 id="down-events-outside-the-period-do-not-count"),
    pytest.param((), E_OUTDATED, 1, 1000, None, rules(1000, 120, 100, 60, 300), 100, 5, 5, WITHIN,
                 id="down-events-counted-per-policy-period"),
]


@pytest.mark.parametrize(
    ("up_events", "down_events", "min_replicas", "max_replicas", "up", "down", "current", "desired", "expected",
     "reason"),
    SCALING_WITH_RULES,
)
def test_upstream_scaling_with_rules(
    up_events: tuple[tuple[float, int], ...],
    down_events: tuple[tuple[float, int], ...],
    min_replicas: int,
    max_replicas: int,
    up: dict[str, Any] | None,
    down: dict[str, Any] | None,
    current: int,
    desired: int,
    expected: int,
    reason: Reason | None,
) -> None:
    spec = BehaviorSpec.model_validate({"scaleUp": up, "scaleDown": down})
    state = PolicyState(scale_up_events=up_events, scale_down_events=down_events)
    norm = behavior.normalize(
        behavior=spec, min_replicas=min_replicas, max_replicas=max_replicas, current=current,
        recommended=desired, state=state, now=NOW,
    )
    assert (norm.desired, norm.reason) == (expected, reason)


@pytest.mark.parametrize(
    ("history", "recommended", "stabilized"),
    [
        pytest.param((), 5, 5, id="empty-log"),
        pytest.param(((NOW - 120, 4), (NOW - 60, 5)), 3, 5, id="stabilize"),
        pytest.param(((NOW - 120, 1), (NOW - 60, 2)), 3, 3, id="no-stabilize"),
        pytest.param(((NOW - 600, 10), (NOW - 540, 9)), 3, 3, id="no-stabilize-old-recommendations"),
        pytest.param(((NOW - 600, 10), (NOW - 60, 4), (NOW - 120, 5), (NOW - 540, 9)), 3, 5,
                     id="stabilize-old-recommendations"),
    ],
)
def test_upstream_legacy_stabilization(
    history: tuple[tuple[float, int], ...], recommended: int, stabilized: int
) -> None:
    # Upstream's TestNormalizeDesiredReplicas (5 min window), with bounds and a current count that do not interfere.
    norm = behavior.normalize(
        behavior=None, min_replicas=1, max_replicas=100, current=stabilized, recommended=recommended,
        state=PolicyState(recommendations=history), now=NOW,
    )
    assert norm.desired == stabilized
    assert (NOW, recommended) in norm.state.recommendations
    assert all(t >= NOW - 300 for t, _ in norm.state.recommendations)
