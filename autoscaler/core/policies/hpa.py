"""Policy type ``hpa``: the Kubernetes HorizontalPodAutoscaler algorithm, reproduced exactly.

Config mirrors ``autoscaling/v2`` (metrics, behavior, per-direction tolerance) with metrics naming our signals.
The algorithm reproduces upstream's ``replica_calculator.go`` and ``computeReplicasForMetrics``:

- quantities are compared as upstream compares them, in integer milli-units (``Quantity.MilliValue()``
  rounds up; a Pods average is an integer division of the milli total by the number of pods);
- tolerance: no change while ``1 - scaleDown.tolerance <= ratio <= 1 + scaleUp.tolerance`` (both default to
  ``tolerance``, 0.1);
- ``Pods`` (AverageValue): ``ceil(ratio × ready)``. With per-pod readings (``SignalReading.per_replica``) and
  pods (``ReplicaStatus.pods``): every pod that reports a value counts, Ready or not (upstream checks readiness
  for CPU only); a Ready pod without a value counts as using the target on a scale-down and 0 on a scale-up;
  a not-Ready pod without a value counts as 0 on a scale-up and is left out otherwise; the ratio is then
  computed again and the current count kept if it falls within tolerance or flips the direction. Without
  per-pod readings the aggregate is used (scope ``perReplica``: the average per ready replica; ``total``:
  divided by the ready count) and starting replicas count as 0 on a scale-up;
- ``External``/``Object`` Value: ``ceil(value / target × ready)``, ``ceil(value / target)`` from zero;
  AverageValue: ``ceil(value / averageValue)`` when ``value / (averageValue × replicas)`` is out of tolerance;
- several metrics: the highest count. A metric that cannot be computed is unknown: the engine holds when all
  are unknown, or when some are and the others would scale down; with some unknown, a scale-up on the
  others still happens (upstream's rule; an unknown metric never makes a target smaller).

PodStatus has no phase: a pod that is not Ready and reports no value is treated as upstream treats a Pending
pod (upstream would treat a Running one as missing: at the target on a scale-down instead of left out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from autoscaler.core.model import PodStatus, Reason, ReplicaStatus
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.specbase import SpecModel


class MetricTargetSpec(SpecModel):
    type: Literal["Value", "AverageValue"]
    value: float | None = Field(default=None, gt=0)
    average_value: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _matching_field(self) -> MetricTargetSpec:
        if self.type == "Value" and (self.value is None or self.average_value is not None):
            raise ValueError("target type Value needs 'value' (and no 'averageValue')")
        if self.type == "AverageValue" and (self.average_value is None or self.value is not None):
            raise ValueError("target type AverageValue needs 'averageValue' (and no 'value')")
        return self


class MetricSpec(SpecModel):
    """One HPA metric. ``Pods``: a per-pod signal averaged over ready pods (AverageValue only);
    ``External``/``Object``: a total, compared as Value or divided by replicas as AverageValue."""

    signal: str
    type: Literal["Pods", "External", "Object"]
    target: MetricTargetSpec

    @model_validator(mode="after")
    def _pods_average_only(self) -> MetricSpec:
        if self.type == "Pods" and self.target.type != "AverageValue":
            raise ValueError("metric type Pods supports only target type AverageValue")
        return self


class ScalingPolicySpec(SpecModel):
    type: Literal["Pods", "Percent"]
    value: int = Field(gt=0)
    period_seconds: int = Field(gt=0, le=1800)


class ScalingRulesSpec(SpecModel):
    stabilization_window_seconds: int | None = Field(default=None, ge=0, le=3600)
    select_policy: Literal["Max", "Min", "Disabled"] | None = None
    policies: list[ScalingPolicySpec] | None = None
    tolerance: float | None = Field(default=None, ge=0, description="Per-direction tolerance (HPA 1.33+).")


class BehaviorSpec(SpecModel):
    """``autoscaling/v2`` HorizontalPodAutoscalerBehavior: same fields, same defaults."""

    scale_up: ScalingRulesSpec | None = None
    scale_down: ScalingRulesSpec | None = None


class HpaPolicyConfig(SpecModel):
    type: Literal["hpa"]
    metrics: list[MetricSpec] = Field(min_length=1)
    behavior: BehaviorSpec | None = None
    tolerance: float = Field(default=0.1, ge=0, description="The controller-wide tolerance (default 0.1).")

    def signal_refs(self) -> list[str]:
        return [m.signal for m in self.metrics]



# --- the algorithm -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tolerances:
    """Upstream ``Tolerances``: the band of usage ratios inside which the count does not change."""

    down: float
    up: float

    def within(self, ratio: float) -> bool:
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)

    def describe(self, ratio: float) -> str:
        if ratio > 1.0 + self.up:
            return f"ratio {ratio:.3g} > {1.0 + self.up:.3g} tolerance"
        if ratio < 1.0 - self.down:
            return f"ratio {ratio:.3g} < {1.0 - self.down:.3g} tolerance"
        return f"ratio {ratio:.3g} within {1.0 - self.down:.3g}–{1.0 + self.up:.3g} tolerance"


def tolerances(config: HpaPolicyConfig) -> Tolerances:
    """``tolerance`` for both directions, overridden by ``behavior.scaleUp/scaleDown.tolerance`` (HPA 1.33+)."""
    down = up = config.tolerance
    if config.behavior is not None:
        if config.behavior.scale_down is not None and config.behavior.scale_down.tolerance is not None:
            down = config.behavior.scale_down.tolerance
        if config.behavior.scale_up is not None and config.behavior.scale_up.tolerance is not None:
            up = config.behavior.scale_up.tolerance
    return Tolerances(down=down, up=up)


def milli(value: float) -> int:
    """``Quantity.MilliValue()``: ``ceil(value × 1000)`` (rounded first so float noise does not add a milli)."""
    return math.ceil(round(value * 1000.0, 6))


def _fmt(milli_value: float) -> str:
    return f"{milli_value / 1000.0:.4g}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@dataclass(frozen=True, slots=True)
class PodsUsage:
    """What upstream's ``calcPlainMetricReplicas`` works from, in milli-units.

    ``total``/``count``: sum and number of the metric values kept (ready pods with a value, plus values of
    pods the pod list does not know); ``ready``: pods counted as ready; ``missing``: ready-looking pods without
    a value; ``unready``: pods left out (not Ready).
    """

    total: int
    count: int
    ready: int
    missing: int = 0
    unready: int = 0


def pods_replicas(*, current: int, usage: PodsUsage, target: int, tol: Tolerances) -> tuple[int, float, float | None]:
    """Upstream ``calcPlainMetricReplicas`` (``count`` > 0). Returns the count, the ratio and the re-computed
    ratio after the missing/unready adjustment (None when there was none)."""
    ratio = (usage.total // usage.count) / target
    scale_up_with_unready = usage.unready > 0 and ratio > 1.0
    if not scale_up_with_unready and usage.missing == 0:
        if tol.within(ratio):
            return current, ratio, None
        return math.ceil(ratio * usage.ready), ratio, None
    total, count = usage.total, usage.count
    if usage.missing:
        # On a scale-down a pod without a value is assumed at the target, on a scale-up at 0; at exactly 1.0
        # upstream adds neither.
        if ratio < 1.0:
            total, count = total + usage.missing * target, count + usage.missing
        elif ratio > 1.0:
            count += usage.missing
    if scale_up_with_unready:
        count += usage.unready
    new_ratio = (total // count) / target
    if tol.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current, ratio, new_ratio
    replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current, ratio, new_ratio
    return replicas, ratio, new_ratio


def value_replicas(*, current: int, ready: int, usage: int, target: int, tol: Tolerances) -> tuple[int, float]:
    """Upstream ``getUsageRatioReplicaCount`` (External/Object with a Value target)."""
    ratio = usage / target
    if current == 0:
        return math.ceil(ratio), ratio
    if tol.within(ratio):
        return current, ratio
    return math.ceil(ratio * ready), ratio


def average_value_replicas(*, status_replicas: int, usage: int, target: int, tol: Tolerances) -> tuple[int, float]:
    """Upstream ``Get{External,Object}PerPodMetricReplicas`` (AverageValue target)."""
    # Go divides floats: x/0 is +Inf (or NaN for 0/0), never within tolerance.
    ratio = usage / (target * status_replicas) if status_replicas else math.inf
    if tol.within(ratio):
        return status_replicas, ratio
    return math.ceil(usage / target), ratio


@dataclass(frozen=True, slots=True)
class MetricOutcome:
    signal: str
    replicas: int | None  # None: the metric cannot be computed (unknown)
    explanation: str
    #: The ratio was within tolerance (so the metric proposes the current count).
    within: bool = False


def _per_pod_usage(
    pods: tuple[PodStatus, ...], values: Mapping[str, float]
) -> PodsUsage:
    """Upstream ``groupPods`` + ``removeMetricsForPods`` over one reading per pod."""
    usable = {name: milli(v) for name, v in values.items() if math.isfinite(v) and v >= 0}
    left_out: set[str] = set()
    ready = missing = unready = 0
    for pod in pods:
        if pod.deleting or pod.failed:
            left_out.add(pod.name)
        elif pod.name in usable:
            # Upstream checks readiness for CPU only: a pod that reports a value counts, Ready or not.
            ready += 1
        elif not pod.ready:
            # Not Ready and silent: what upstream sees for a Pending pod (0 on a scale-up, else left out).
            unready += 1
        else:
            missing += 1
    kept = [v for name, v in usable.items() if name not in left_out]
    return PodsUsage(total=sum(kept), count=len(kept), ready=ready, missing=missing, unready=unready)


class HpaAlgorithm:
    """The ``hpa`` policy type. Stateless: the history HPA keeps is the behavior stage's (engine)."""

    uses_behavior = True

    def __init__(self, config: HpaPolicyConfig) -> None:
        self.config = config
        self.tolerances = tolerances(config)

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        current = ctx.replicas.spec
        outcomes = [self._metric(m, ctx, ctx.per_replica.get(m.signal)) for m in self.config.metrics]
        valid = [o for o in outcomes if o.replicas is not None]
        invalid = [o for o in outcomes if o.replicas is None]
        unknown = tuple(o.signal for o in invalid)
        if not valid:
            why = "; ".join(o.explanation for o in invalid)
            return Recommendation(None, Reason.METRICS_UNKNOWN, f"no metric can be computed: {why}", unknown), state
        # The first metric with the highest count (upstream keeps the first on ties).
        best = max(valid, key=lambda o: o.replicas or 0)
        replicas = best.replicas or 0
        if invalid and replicas < current:
            # Upstream never scales down while a metric is invalid: it could be the one holding the count up.
            why = "; ".join(o.explanation for o in invalid)
            msg = f"the valid metrics would scale down to {replicas} but {why}; {best.explanation}"
            return Recommendation(None, Reason.METRICS_UNKNOWN, msg, unknown), state
        message = best.explanation
        others = [o for o in outcomes if o is not best]
        if others:
            parts = [f"{o.signal} → {o.replicas}" if o.replicas is not None else o.explanation for o in others]
            message = f"{message} (highest of {len(outcomes)} metrics; {', '.join(parts)})"
        if replicas > current:
            reason = Reason.SCALE_UP
        elif replicas < current:
            reason = Reason.SCALE_DOWN
        else:
            reason = Reason.WITHIN_TOLERANCE if all(o.within for o in valid) else Reason.STEADY
        return Recommendation(replicas, reason, message, unknown), state

    def _metric(self, metric: MetricSpec, ctx: Context, per_pod: Mapping[str, float] | None) -> MetricOutcome:
        name = metric.signal
        sig = ctx.signals.get(name)
        if sig is None or not sig.ok or sig.value is None:
            reason = sig.reason if sig is not None else "missing"
            return MetricOutcome(name, None, f"{name} is unknown ({reason})")
        target = metric.target
        if metric.type == "Pods":
            assert target.average_value is not None
            scope = _scope(ctx, name)
            return self._pods(name, sig.value, scope, milli(target.average_value), ctx.replicas, per_pod)
        current = ctx.replicas.spec
        usage = milli(sig.value)
        tol = self.tolerances
        if target.type == "Value":
            assert target.value is not None
            t = milli(target.value)
            ready = ctx.replicas.ready
            replicas, ratio = value_replicas(current=current, ready=ready, usage=usage, target=t, tol=tol)
            how = f"from zero: ceil({ratio:.3g})" if current == 0 else f"{tol.describe(ratio)}, {ready} ready"
            text = f"{name} {_fmt(usage)} vs target value {_fmt(t)} ({how}): {current} → {replicas}"
            return MetricOutcome(name, replicas, text, current != 0 and tol.within(ratio))
        assert target.average_value is not None
        t = milli(target.average_value)
        status = ctx.replicas.ready + ctx.replicas.starting
        replicas, ratio = average_value_replicas(status_replicas=status, usage=usage, target=t, tol=tol)
        text = (
            f"{name} {_fmt(usage)} over {_n(status, 'replica')} vs target {_fmt(t)} per replica "
            f"({tol.describe(ratio) if math.isfinite(ratio) else 'no replicas'}): {current} → {replicas}"
        )
        return MetricOutcome(name, replicas, text, tol.within(ratio))

    def _pods(
        self,
        name: str,
        value: float,
        scope: str,
        target: int,
        replicas: ReplicaStatus,
        per_pod: Mapping[str, float] | None,
    ) -> MetricOutcome:
        current = replicas.spec
        if per_pod is not None and replicas.pods is not None:
            usage = _per_pod_usage(replicas.pods, per_pod)
            if usage.count == 0:
                return MetricOutcome(name, None, f"{name}: no pod reports a value")
            basis = f"{name} averages {_fmt(usage.total // usage.count)} over {_n(usage.count, 'pod')}"
        else:
            ready = replicas.ready
            if ready == 0:
                return MetricOutcome(name, None, f"{name} cannot be averaged: no ready replicas")
            if scope == "perReplica":
                total = milli(value) * ready
                basis = f"{name} {_fmt(milli(value))} per ready replica over {ready} ready"
            else:
                total = milli(value)
                basis = f"{name} {_fmt(total)} over {_n(ready, 'ready replica')} = {_fmt(total // ready)} per replica"
            usage = PodsUsage(total=total, count=ready, ready=ready, unready=replicas.starting)
        tol = self.tolerances
        count, ratio, new_ratio = pods_replicas(current=current, usage=usage, target=target, tol=tol)
        text = f"{basis} vs target {_fmt(target)} ({tol.describe(ratio)})"
        if new_ratio is not None:
            adjusted = []
            if usage.missing:
                adjusted.append(f"{_n(usage.missing, 'pod')} without a value")
            if usage.unready and ratio > 1.0:
                adjusted.append(f"{_n(usage.unready, 'not-ready pod')} at 0")
            text += f"; counting {' and '.join(adjusted) or 'pods as upstream'}: ratio {new_ratio:.3g}"
        within = tol.within(ratio) or (new_ratio is not None and tol.within(new_ratio))
        return MetricOutcome(name, count, f"{text}: {current} → {count}", within)


def _scope(ctx: Context, name: str) -> Literal["total", "perReplica"]:
    try:
        return ctx.spec.signal(name).scope
    except KeyError:
        return "total"


def build(config: HpaPolicyConfig) -> PolicyAlgorithm:
    return HpaAlgorithm(config)
