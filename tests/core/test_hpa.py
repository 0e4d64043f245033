"""Parity of the ``hpa`` policy type with the Kubernetes HPA controller (``replica_calculator.go``,
``computeReplicasForMetrics``, ``reconcileAutoscaler``), through the engine API.

Each case is one evaluation with a behavior that neither stabilizes nor rate-limits, so the decision is the
replica calculator's count clamped to min/max. Expected counts are worked out by hand from upstream's rules;
the case names say which rule they show.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.core.engine import CompiledPolicy, compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PodStatus,
    PolicyState,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
)
from autoscaler.core.policies.hpa import (
    PodsUsage,
    Tolerances,
    average_value_replicas,
    milli,
    pods_replicas,
    value_replicas,
)
from autoscaler.core.spec import ScalingPolicy

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")
NOW = 1_000.0
NEUTRAL_BEHAVIOR: dict[str, Any] = {
    "scaleUp": {"policies": [{"type": "Pods", "value": 10_000, "periodSeconds": 15}]},
    "scaleDown": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    },
}


def pods(target: float, signal: str = "backlog") -> dict[str, Any]:
    return {"signal": signal, "type": "Pods", "target": {"type": "AverageValue", "averageValue": target}}


def external(kind: str, target: float, signal: str = "queue", metric_type: str = "External") -> dict[str, Any]:
    key = "value" if kind == "Value" else "averageValue"
    return {"signal": signal, "type": metric_type, "target": {"type": kind, key: target}}


def hpa_policy(
    metrics: list[dict[str, Any]],
    *,
    behavior: dict[str, Any] | None = None,
    tolerance: float | None = None,
    min_replicas: int = 1,
    max_replicas: int = 100,
    scopes: dict[str, str] | None = None,
    min_reporting_fraction: float | None = None,
) -> CompiledPolicy:
    config: dict[str, Any] = {"type": "hpa", "metrics": metrics, "behavior": behavior or NEUTRAL_BEHAVIOR}
    if tolerance is not None:
        config["tolerance"] = tolerance
    names = sorted({m["signal"] for m in metrics})
    signals: list[dict[str, Any]] = [
        {"name": n, "query": f"q_{n}", "scope": (scopes or {}).get(n, "total")} for n in names
    ]
    if min_reporting_fraction is not None:
        # HPA's own missing-pod rules only see partial data when the signal accepts it (else it is unknown).
        for sig in signals:
            sig["minReportingFraction"] = min_reporting_fraction
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "llm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "signals": signals,
            "policy": config,
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))


def reading(value: float | None, per_pod: dict[str, float] | None = None, age: float = 0.0) -> SignalReading:
    return SignalReading(value, NOW - age, source="test", per_replica=per_pod)


def evaluate(
    policy: CompiledPolicy,
    replicas: ReplicaStatus,
    signals: dict[str, SignalReading],
    state: PolicyState | None = None,
) -> ScaleDecision:
    decisions, _ = decide(policy, Observation(TARGET, replicas, signals), state or PolicyState(), NOW)
    decision = decisions[0]
    assert isinstance(decision, ScaleDecision)
    return decision


def ready(n: int, starting: int = 0, spec: int | None = None) -> ReplicaStatus:
    return ReplicaStatus(spec=n + starting if spec is None else spec, ready=n, starting=starting)


def pod_list(*specs: str) -> tuple[PodStatus, ...]:
    """``"a"`` ready, ``"a-"`` not ready, ``"a!"`` being deleted."""
    out = []
    for s in specs:
        name = s.rstrip("-!")
        out.append(PodStatus(name=name, ready=not s.endswith("-"), deleting=s.endswith("!")))
    return tuple(out)


# --- Pods metrics without per-pod readings --------------------------------------------------------------------

POD_CASES = [
    pytest.param(pods(10), ready(3), 37.0, "total", 4, Reason.SCALE_UP, id="pods-total-over-ready-count-ceil-up"),
    pytest.param(pods(10), ready(4), 15.0, "perReplica", 6, Reason.SCALE_UP, id="pods-per-replica-scope-average"),
    pytest.param(pods(10), ready(4), 11.0, "perReplica", 4, Reason.WITHIN_TOLERANCE, id="pods-ratio-1.1-is-within"),
    pytest.param(pods(10), ready(4), 11.01, "perReplica", 5, Reason.SCALE_UP, id="pods-ratio-just-over-1.1-scales"),
    pytest.param(pods(10), ready(4), 9.0, "perReplica", 4, Reason.WITHIN_TOLERANCE, id="pods-ratio-0.9-is-within"),
    pytest.param(pods(10), ready(4), 8.99, "perReplica", 4, Reason.STEADY,
                 id="pods-ratio-just-under-0.9-but-ceil-keeps-4"),
    pytest.param(pods(10), ready(4), 5.0, "perReplica", 2, Reason.SCALE_DOWN, id="pods-half-the-target-halves"),
    pytest.param(pods(0.003), ready(3), 0.010, "total", 3, Reason.WITHIN_TOLERANCE,
                 id="pods-average-is-an-integer-milli-division"),
    pytest.param(pods(10), ready(2, starting=2), 30.0, "total", 4, Reason.STEADY,
                 id="pods-starting-count-as-0-on-scale-up-and-a-flip-holds"),
    pytest.param(pods(10), ready(2, starting=1), 60.0, "total", 6, Reason.SCALE_UP,
                 id="pods-starting-count-as-0-on-scale-up"),
    pytest.param(pods(10), ready(2, starting=2), 6.0, "total", 1, Reason.SCALE_DOWN,
                 id="pods-starting-left-out-on-scale-down"),
    pytest.param(pods(10), ready(3, spec=5), 45.0, "total", 5, Reason.STEADY,
                 id="pods-uses-ready-count-not-spec"),
]


@pytest.mark.parametrize(("metric", "replicas", "value", "scope", "desired", "reason"), POD_CASES)
def test_pods_metric(
    metric: dict[str, Any], replicas: ReplicaStatus, value: float, scope: str, desired: int, reason: Reason
) -> None:
    policy = hpa_policy([metric], scopes={"backlog": scope})
    decision = evaluate(policy, replicas, {"backlog": reading(value)})
    assert (decision.desired, decision.reason) == (desired, reason)


def test_pods_message_has_the_numbers() -> None:
    decision = evaluate(hpa_policy([pods(10)]), ready(3), {"backlog": reading(37.0)})
    assert decision.message == (
        "backlog 37 over 3 ready replicas = 12.33 per replica vs target 10 (ratio 1.23 > 1.1 tolerance): 3 → 4"
    )


def test_pods_with_no_ready_replica_is_unknown() -> None:
    decision = evaluate(hpa_policy([pods(10)]), ready(0, starting=3), {"backlog": reading(50.0)})
    assert (decision.desired, decision.reason) == (3, Reason.METRICS_UNKNOWN)
    assert "no ready replicas" in decision.message


# --- Pods metrics with per-pod readings (missing and unready pods) --------------------------------------------

PER_POD_CASES = [
    pytest.param(pod_list("a", "b", "c", "d"), {"a": 2, "b": 2}, 3, Reason.SCALE_DOWN,
                 id="missing-pods-count-at-target-on-scale-down"),
    pytest.param(pod_list("a", "b", "c", "d"), {"a": 30, "b": 30}, 6, Reason.SCALE_UP,
                 id="missing-pods-count-as-0-on-scale-up"),
    pytest.param(pod_list("a", "b"), {"a": 12}, 2, Reason.STEADY,
                 id="missing-pod-flips-scale-up-into-a-hold"),
    pytest.param(pod_list("a", "b"), {"a": 8}, 2, Reason.WITHIN_TOLERANCE,
                 id="missing-pod-at-target-brings-scale-down-within-tolerance"),
    pytest.param(pod_list("a", "b", "c-"), {"a": 30, "b": 30}, 6, Reason.SCALE_UP,
                 id="unready-pod-without-value-counted-0-on-scale-up"),
    pytest.param(pod_list("a", "b", "c-"), {"a": 30, "b": 30, "c": 99}, 16, Reason.SCALE_UP,
                 id="unready-pod-with-a-value-counts-as-upstream-custom-metrics"),
    pytest.param(pod_list("a", "b", "c-", "d-"), {"a": 2, "b": 2}, 1, Reason.SCALE_DOWN,
                 id="unready-pods-left-out-on-scale-down"),
    pytest.param(pod_list("a", "b", "c!"), {"a": 20, "b": 20, "c": 500}, 4, Reason.SCALE_UP,
                 id="deleting-pod-ignored"),
    pytest.param(pod_list("a", "b", "c"), {"a": 20, "b": 20, "c": math.nan}, 4, Reason.SCALE_UP,
                 id="nan-per-pod-value-counts-as-a-missing-pod"),
    pytest.param(pod_list("a", "b"), {"a": 20, "b": 20, "ghost": 20}, 4, Reason.SCALE_UP,
                 id="values-of-pods-not-listed-average-in-but-ready-count-is-listed-pods"),
    # The cases below were added where a mutation run (scripts/mutate.sh) showed the rule untested: each fails
    # when the rule its name states is broken (docs/testing.md, "Mutation testing").
    pytest.param(pod_list("a", "b", "c-"), {"a": 16, "b": 16}, 3, Reason.WITHIN_TOLERANCE,
                 id="unready-pod-at-0-brings-scale-up-within-tolerance"),
    pytest.param(pod_list("a", "b", "c-"), {"a": 16.5, "b": 16.501}, 3, Reason.WITHIN_TOLERANCE,
                 id="adjusted-average-is-an-integer-milli-division"),
    pytest.param(pod_list("a", "b", "c"), {"a": 11, "b": 11, "c": 11.002}, 3, Reason.WITHIN_TOLERANCE,
                 id="per-pod-average-is-an-integer-milli-division"),
    pytest.param(pod_list("a", "b"), {"a": 0, "b": 5}, 1, Reason.SCALE_DOWN,
                 id="a-pod-reporting-0-is-idle-not-missing"),
    pytest.param(pod_list("a", "b"), {"a": -5, "b": 5}, 2, Reason.STEADY,
                 id="a-negative-per-pod-value-counts-as-a-missing-pod"),
    pytest.param(pod_list("a", "b", "c-", "d-"), {"a": 21, "b": 21}, 4, Reason.WITHIN_TOLERANCE,
                 id="every-unready-pod-counts-at-0-on-scale-up"),
    pytest.param(pod_list("a", "b", "c-", "d-"), {"a": 10, "b": 10}, 4, Reason.WITHIN_TOLERANCE,
                 id="ratio-exactly-1-with-unready-pods-is-no-scale-up-and-holds"),
]


@pytest.mark.parametrize(("pod_statuses", "values", "desired", "reason"), PER_POD_CASES)
def test_pods_metric_per_pod(
    pod_statuses: tuple[PodStatus, ...], values: dict[str, float], desired: int, reason: Reason
) -> None:
    current = len(pod_statuses)
    replicas = ReplicaStatus(spec=current, ready=sum(p.ready for p in pod_statuses), pods=pod_statuses)
    policy = hpa_policy([pods(10)], min_reporting_fraction=0.01)  # HPA's own missing-pod rules
    decision = evaluate(policy, replicas, {"backlog": reading(1.0, values)})
    assert (decision.desired, decision.reason) == (desired, reason)


@pytest.mark.parametrize(
    ("spec", "pod_statuses", "values", "desired", "reason"),
    [
        # Upstream's last guard: after the missing/unready adjustment a count that moved against the direction
        # the metric points to is discarded. Only reachable when the target's count differs from its pods.
        pytest.param(2, pod_list("a", "b", "c"), {"a": 8, "b": 8}, 2, Reason.STEADY,
                     id="scale-down-evidence-never-scales-up"),
        pytest.param(5, pod_list("a", "b", "c-"), {"a": 20, "b": 20}, 5, Reason.STEADY,
                     id="scale-up-evidence-never-scales-down"),
    ],
)
def test_adjusted_count_never_moves_against_the_metric(
    spec: int, pod_statuses: tuple[PodStatus, ...], values: dict[str, float], desired: int, reason: Reason
) -> None:
    replicas = ReplicaStatus(spec=spec, ready=sum(p.ready for p in pod_statuses), pods=pod_statuses)
    policy = hpa_policy([pods(10)], min_reporting_fraction=0.01)
    decision = evaluate(policy, replicas, {"backlog": reading(1.0, values)})
    assert (decision.desired, decision.reason) == (desired, reason)


def test_per_pod_values_without_a_pod_list_use_the_aggregate() -> None:
    # Replay and some sources carry per-pod values but no pod list: the aggregate rule decides, as without them.
    decision = evaluate(hpa_policy([pods(10)]), ready(3), {"backlog": reading(37.0, {"a": 12.0, "b": 12.0, "c": 13.0})})
    assert (decision.desired, decision.reason) == (4, Reason.SCALE_UP)


@pytest.mark.parametrize(
    ("pod_statuses", "values", "message"),
    [
        # 2 pods at 30 = ratio 3; on a scale-up the silent ready pod and the not-ready one count at 0, so 60 over
        # 4 pods = ratio 1.5, ceil(1.5 x 4) = 6.
        pytest.param(pod_list("a", "b", "c", "d-"), {"a": 30, "b": 30},
                     "backlog averages 30 over 2 pods vs target 10 (ratio 3 > 1.1 tolerance); counting 1 pod "
                     "without a value and 1 not-ready pod at 0: ratio 1.5: 4 → 6", id="scale-up-missing-and-unready"),
        # Ratio 1.6; 32 over 3 pods = 1.07, within the tolerance: hold.
        pytest.param(pod_list("a", "b", "c-"), {"a": 16, "b": 16},
                     "backlog averages 16 over 2 pods vs target 10 (ratio 1.6 > 1.1 tolerance); counting 1 "
                     "not-ready pod at 0: ratio 1.07: 3 → 3", id="scale-up-unready-within-tolerance"),
        # On a scale-down the silent ready pod counts at the target and the not-ready one is left out (not "at 0").
        pytest.param(pod_list("a", "b", "c", "d-"), {"a": 2, "b": 2},
                     "backlog averages 2 over 2 pods vs target 10 (ratio 0.2 < 0.9 tolerance); counting 1 pod "
                     "without a value: ratio 0.467: 4 → 2", id="scale-down-missing-unready-left-out"),
    ],
)
def test_per_pod_message_names_the_adjustment(
    pod_statuses: tuple[PodStatus, ...], values: dict[str, float], message: str
) -> None:
    replicas = ReplicaStatus(spec=len(pod_statuses), ready=sum(p.ready for p in pod_statuses), pods=pod_statuses)
    policy = hpa_policy([pods(10)], min_reporting_fraction=0.01)
    decision = evaluate(policy, replicas, {"backlog": reading(1.0, values)})
    assert decision.message == message


def test_per_replica_scope_message_has_the_numbers() -> None:
    policy = hpa_policy([pods(10)], scopes={"backlog": "perReplica"})
    decision = evaluate(policy, ready(4), {"backlog": reading(15.0)})
    assert decision.message == (
        "backlog 15 per ready replica over 4 ready vs target 10 (ratio 1.5 > 1.1 tolerance): 4 → 6"
    )


@pytest.mark.parametrize(
    ("pod_statuses", "values", "fraction", "reason"),
    [
        pytest.param(pod_list("a", "b", "c"), {"a": 2}, None, "partial: 1 of 3 ready pods reported", id="1-of-3"),
        pytest.param(pod_list("a", "b", "c"), {"a": 2, "b": 2}, 0.9, "partial: 2 of 3 ready pods reported",
                     id="2-of-3-below-fraction"),
        pytest.param(pod_list("a", "b", "c"), {"a": 2, "b": 2, "c": math.nan}, None, "partial: 2 of 3",
                     id="nan-is-no-report"),
        pytest.param(pod_list("a", "b", "c-"), {"a": 2, "c": 1}, None, "partial: 1 of 2 ready pods",
                     id="an-unready-pod-does-not-stand-in-for-a-ready-one"),
    ],
)
def test_partial_data_is_unknown_and_never_scales_down(
    pod_statuses: tuple[PodStatus, ...], values: dict[str, float], fraction: float | None, reason: str
) -> None:
    # Three pods at 2 against a target of 10 per pod would scale 3 -> 1; with pods missing it must hold.
    current = len(pod_statuses)
    replicas = ReplicaStatus(spec=current, ready=sum(p.ready for p in pod_statuses), pods=pod_statuses)
    policy = hpa_policy([pods(10)], min_reporting_fraction=fraction)
    decision = evaluate(policy, replicas, {"backlog": reading(1.0, values)})
    assert (decision.desired, decision.reason) == (current, Reason.METRICS_UNKNOWN)
    assert reason in decision.message


def test_enough_pods_reporting_under_min_reporting_fraction_decides() -> None:
    replicas = ReplicaStatus(spec=3, ready=3, pods=pod_list("a", "b", "c"))
    policy = hpa_policy([pods(10)], min_reporting_fraction=0.6)
    decision = evaluate(policy, replicas, {"backlog": reading(1.0, {"a": 30, "b": 30})})
    assert decision.desired > 3


def test_per_pod_without_any_value_is_unknown() -> None:
    replicas = ReplicaStatus(spec=2, ready=1, pods=pod_list("a", "b-"))
    policy = hpa_policy([pods(10)], min_reporting_fraction=0.01)
    decision = evaluate(policy, replicas, {"backlog": reading(5.0, {"c!": math.inf})})
    assert (decision.desired, decision.reason) == (2, Reason.METRICS_UNKNOWN)
    assert "partial: 0 of 1 ready pods reported" in decision.message


def test_per_pod_values_of_a_stale_signal_are_not_used() -> None:
    replicas = ReplicaStatus(spec=2, ready=2, pods=pod_list("a", "b"))
    decision = evaluate(hpa_policy([pods(10)]), replicas, {"backlog": reading(50.0, {"a": 50, "b": 50}, age=600)})
    assert (decision.desired, decision.reason) == (2, Reason.METRICS_UNKNOWN)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        pytest.param(PodsUsage(total=60000, count=2, ready=2, missing=2), (6, 3.0, 1.5), id="missing-on-scale-up"),
        pytest.param(PodsUsage(total=24000, count=2, ready=2, missing=2), (2, 1.2, 0.6),
                     id="missing-on-scale-up-flipping-direction-holds"),
        pytest.param(PodsUsage(total=10000, count=1, ready=1, missing=1), (2, 1.0, 1.0),
                     id="ratio-exactly-1-adds-no-missing-pod"),
    ],
)
def test_pods_replicas_function(usage: PodsUsage, expected: tuple[int, float, float | None]) -> None:
    tol = Tolerances(down=0.1, up=0.1)
    got = pods_replicas(current=2, usage=usage, target=10000, tol=tol)
    assert (got.replicas, round(got.ratio, 6), None if got.adjusted is None else round(got.adjusted, 6)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(0.1, 100, id="no-float-noise"),
        pytest.param(12.3456, 12346, id="sub-milli-rounds-up"),
        pytest.param(0.0, 0, id="zero"),
    ],
)
def test_milli_value(value: float, expected: int) -> None:
    assert milli(value) == expected


# --- External and Object metrics -----------------------------------------------------------------------------

VALUE_CASES = [
    pytest.param(external("Value", 20), ready(3), 100.0, 15, Reason.SCALE_UP, id="external-value-ratio-times-ready"),
    pytest.param(external("Value", 10), ready(2, starting=2), 30.0, 6, Reason.SCALE_UP,
                 id="external-value-uses-ready-not-spec"),
    pytest.param(external("Value", 20), ready(4), 21.0, 4, Reason.WITHIN_TOLERANCE,
                 id="external-value-within-tolerance-keeps-current"),
    pytest.param(external("Value", 20), ready(4), 10.0, 2, Reason.SCALE_DOWN, id="external-value-scale-down"),
    pytest.param(external("Value", 20), ready(0, starting=3), 100.0, 1, Reason.LIMITED_BY_MIN,
                 id="external-value-with-no-ready-replica-proposes-zero-as-upstream"),
    pytest.param(external("AverageValue", 10), ready(5), 95.0, 10, Reason.SCALE_UP,
                 id="external-average-value-ceil-total-over-target"),
    pytest.param(external("AverageValue", 10), ready(5), 52.0, 5, Reason.WITHIN_TOLERANCE,
                 id="external-average-value-within-tolerance"),
    pytest.param(external("AverageValue", 10), ready(3, starting=2), 54.0, 5, Reason.WITHIN_TOLERANCE,
                 id="external-average-value-counts-starting-replicas"),
    pytest.param(external("AverageValue", 10), ready(5), 12.0, 2, Reason.SCALE_DOWN,
                 id="external-average-value-scale-down"),
    pytest.param(external("Value", 5, metric_type="Object"), ready(2), 20.0, 8, Reason.SCALE_UP,
                 id="object-value-like-external"),
    pytest.param(external("AverageValue", 5, metric_type="Object"), ready(2), 33.0, 7, Reason.SCALE_UP,
                 id="object-average-value-like-external"),
]


@pytest.mark.parametrize(("metric", "replicas", "value", "desired", "reason"), VALUE_CASES)
def test_external_and_object(
    metric: dict[str, Any], replicas: ReplicaStatus, value: float, desired: int, reason: Reason
) -> None:
    decision = evaluate(hpa_policy([metric]), replicas, {"queue": reading(value)})
    assert (decision.desired, decision.reason) == (desired, reason)


TOL = Tolerances(down=0.1, up=0.1)


@pytest.mark.parametrize(
    ("current", "ready", "usage", "expected"),
    [
        pytest.param(0, 0, 10500, 2, id="value-from-zero-ignores-tolerance-and-ready-count"),
        pytest.param(0, 0, 0, 0, id="value-from-zero-stays-at-zero-without-load"),
        pytest.param(3, 3, 10500, 3, id="value-within-tolerance"),
    ],
)
def test_value_replicas(current: int, ready: int, usage: int, expected: int) -> None:
    assert value_replicas(current=current, ready=ready, usage=usage, target=10000, tol=TOL).replicas == expected


@pytest.mark.parametrize(
    ("status", "usage", "expected"),
    [
        pytest.param(0, 25000, 3, id="average-value-with-no-replicas-divides-by-target"),
        pytest.param(0, 0, 0, id="average-value-with-no-replicas-and-no-load"),
        pytest.param(4, 41000, 4, id="average-value-within-tolerance-keeps-status-count"),
    ],
)
def test_average_value_replicas(status: int, usage: int, expected: int) -> None:
    assert average_value_replicas(status_replicas=status, usage=usage, target=10000, tol=TOL).replicas == expected


# --- several metrics and unknown ones --------------------------------------------------------------------------

TWO = [pods(10, "backlog"), external("Value", 40, "queue")]


@pytest.mark.parametrize(
    ("backlog", "queue", "desired", "reason"),
    [
        pytest.param(40.0, 60.0, 6, Reason.SCALE_UP, id="max-over-metrics"),
        pytest.param(40.0, 40.0, 4, Reason.WITHIN_TOLERANCE, id="all-metrics-within-tolerance"),
        pytest.param(80.0, 20.0, 8, Reason.SCALE_UP, id="max-over-metrics-other-order"),
        pytest.param(None, 80.0, 8, Reason.SCALE_UP, id="one-unknown-still-scales-up-on-the-other"),
        pytest.param(None, 20.0, 4, Reason.METRICS_UNKNOWN, id="one-unknown-never-scales-down"),
        pytest.param(None, 40.0, 4, Reason.WITHIN_TOLERANCE, id="one-unknown-and-other-at-current-is-no-hold"),
        pytest.param(None, None, 4, Reason.METRICS_UNKNOWN, id="all-unknown-holds"),
    ],
)
def test_multiple_metrics(backlog: float | None, queue: float | None, desired: int, reason: Reason) -> None:
    decision = evaluate(hpa_policy(TWO), ready(4), {"backlog": reading(backlog), "queue": reading(queue)})
    assert (decision.desired, decision.reason) == (desired, reason)


def test_hold_names_the_unknown_signal() -> None:
    decision = evaluate(hpa_policy(TWO), ready(4), {"queue": reading(20.0)})
    assert decision.message.startswith("holding 4 replicas: backlog missing")


def test_one_unknown_scale_up_message_names_it() -> None:
    decision = evaluate(hpa_policy(TWO), ready(4), {"queue": reading(80.0)})
    assert "backlog is unknown" in decision.message


# --- tolerance ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerance", "behavior_tolerances", "value", "desired"),
    [
        pytest.param(None, {}, 10.8, 10, id="default-tolerance-holds-ratio-1.08"),
        pytest.param(0.0, {}, 10.1, 11, id="zero-tolerance-scales-on-1-percent"),
        pytest.param(None, {"scaleUp": 0.05}, 10.8, 11, id="scale-up-tolerance-0.05"),
        pytest.param(None, {"scaleDown": 0.2}, 8.5, 10, id="scale-down-tolerance-0.2-holds-ratio-0.85"),
        pytest.param(None, {"scaleDown": 0.2}, 10.8, 10, id="scale-down-tolerance-leaves-scale-up-default"),
        pytest.param(0.01, {"scaleDown": 0.2}, 10.8, 11, id="controller-tolerance-is-the-default-per-direction"),
    ],
)
def test_tolerance(tolerance: float | None, behavior_tolerances: dict[str, float], value: float, desired: int) -> None:
    behavior = {
        "scaleUp": {**NEUTRAL_BEHAVIOR["scaleUp"]},
        "scaleDown": {**NEUTRAL_BEHAVIOR["scaleDown"]},
    }
    for direction, tol in behavior_tolerances.items():
        behavior[direction]["tolerance"] = tol
    policy = hpa_policy([pods(1)], behavior=behavior, tolerance=tolerance, scopes={"backlog": "perReplica"})
    decision = evaluate(policy, ready(10), {"backlog": reading(value / 10)})
    assert decision.desired == desired


# --- engine: current count out of range (reconcileAutoscaler) -------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "signals", "desired", "reason"),
    [
        pytest.param(ready(0), {"backlog": reading(500.0)}, 0, Reason.SCALING_DISABLED,
                     id="zero-replicas-without-scale-to-zero-disables-scaling"),
        pytest.param(ready(150), {"backlog": reading(5000.0)}, 100, Reason.LIMITED_BY_MAX,
                     id="above-max-goes-to-max-before-metrics"),
        pytest.param(ready(150), {}, 100, Reason.LIMITED_BY_MAX, id="above-max-goes-to-max-even-with-unknown-metrics"),
        pytest.param(ready(1), {"backlog": reading(0.0)}, 2, Reason.LIMITED_BY_MIN,
                     id="below-min-goes-to-min-before-metrics"),
    ],
)
def test_current_out_of_range(
    replicas: ReplicaStatus, signals: dict[str, SignalReading], desired: int, reason: Reason
) -> None:
    decision = evaluate(hpa_policy([pods(10)], min_replicas=2), replicas, signals)
    assert (decision.desired, decision.reason) == (desired, reason)


def test_scale_events_recorded_for_rate_policies() -> None:
    policy = hpa_policy([pods(10)])
    decisions, state = decide(policy, Observation(TARGET, ready(3), {"backlog": reading(90.0)}), PolicyState(), NOW)
    assert isinstance(decisions[0], ScaleDecision)
    assert decisions[0].desired == 9
    assert state.scale_up_events == ((NOW, 6),)
    assert state.recommendations[-1] == (NOW, 9)


# --- upstream's replica_calculator_test.go, custom-metric cases (milli levels as given there) -----------------


def obj(kind: str, target: float) -> dict[str, Any]:
    return external(kind, target, metric_type="Object")


def milli_pods(levels: list[int], unready: tuple[int, ...] = ()) -> tuple[ReplicaStatus, dict[str, float]]:
    names = [f"pod-{i}" for i in range(len(levels))]
    statuses = tuple(PodStatus(name=n, ready=i not in unready) for i, n in enumerate(names))
    ready_count = len(levels) - len(unready)
    return ReplicaStatus(spec=len(levels), ready=ready_count, pods=statuses), {
        n: level / 1000 for n, level in zip(names, levels, strict=True)
    }


@pytest.mark.parametrize(
    ("levels", "unready", "target", "expected"),
    [
        pytest.param([20000, 10000, 30000], (), 15000, 4, id="TestReplicaCalcScaleUpCM"),
        pytest.param([50000, 10000, 30000], (2,), 15000, 6, id="TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale"),
        pytest.param([50000, 15000, 30000], (0, 2), 15000, 7,
                     id="TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown"),
        pytest.param([8600], (), 4400, 2, id="TestReplicaCalcScaleUpCMExternalNoLabels"),
        pytest.param([12000] * 5, (), 20000, 3, id="TestReplicaCalcScaleDownCM"),
        pytest.param([20000, 21000, 21000], (), 20000, 3, id="TestReplicaCalcToleranceCM"),
    ],
)
def test_upstream_pods_metric_cases(levels: list[int], unready: tuple[int, ...], target: int, expected: int) -> None:
    replicas, values = milli_pods(levels, unready)
    decision = evaluate(hpa_policy([pods(target / 1000)]), replicas, {"backlog": reading(0.0, values)})
    assert decision.desired == expected


@pytest.mark.parametrize(
    ("metric", "replicas", "level", "expected"),
    [
        pytest.param(obj("Value", 15), ready(3), 20000, 4, id="TestReplicaCalcScaleUpCMObject"),
        pytest.param(obj("Value", 10), ready(1, starting=2), 50000, 5,
                     id="TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods"),
        pytest.param(obj("Value", 20), ready(5), 12000, 3, id="TestReplicaCalcScaleDownCMObject"),
        pytest.param(obj("Value", 20), ready(3), 20666, 3, id="TestReplicaCalcToleranceCMObject"),
        pytest.param(obj("AverageValue", 5), ready(3), 20000, 4,
                     id="TestReplicaCalcScaleUpCMPerPodObject"),
        pytest.param(obj("AverageValue", 2), ready(5), 6000, 3,
                     id="TestReplicaCalcScaleDownPerPodCMObject"),
        pytest.param(obj("AverageValue", 5), ready(4), 20166, 4,
                     id="TestReplicaCalcTolerancePerPodCMObject"),
        pytest.param(external("Value", 4.4), ready(1, starting=2), 8600, 2,
                     id="TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods"),
        pytest.param(external("Value", 14.334), ready(5), 8600, 3, id="TestReplicaCalcScaleDownCMExternal"),
        pytest.param(external("Value", 8.888), ready(3), 8600, 3, id="TestReplicaCalcToleranceCMExternal"),
        pytest.param(external("AverageValue", 2.15), ready(3), 8600, 4, id="TestReplicaCalcScaleUpPerPodCMExternal"),
        pytest.param(external("AverageValue", 2.867), ready(5), 8600, 3, id="TestReplicaCalcScaleDownPerPodCMExternal"),
        pytest.param(external("AverageValue", 2.9), ready(3), 8600, 3, id="TestReplicaCalcTolerancePerPodCMExternal"),
    ],
)
def test_upstream_object_and_external_cases(
    metric: dict[str, Any], replicas: ReplicaStatus, level: int, expected: int
) -> None:
    decision = evaluate(hpa_policy([metric]), replicas, {"queue": reading(level / 1000)})
    assert decision.desired == expected
