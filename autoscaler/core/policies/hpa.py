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
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from autoscaler.core.model import PodStatus, Reason, SignalState
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
    policies: list[ScalingPolicySpec] | None = Field(
        default=None, min_length=1, description="At least one when given (upstream HPA rejects an empty list)."
    )
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
    #: The band's edges, and their text in explanations, computed once.
    low: float = field(init=False, repr=False, compare=False)
    high: float = field(init=False, repr=False, compare=False)
    _low_text: str = field(init=False, repr=False, compare=False)
    _high_text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Frozen dataclass: the derived fields are set once here.
        object.__setattr__(self, "low", 1.0 - self.down)
        object.__setattr__(self, "high", 1.0 + self.up)
        object.__setattr__(self, "_low_text", f"{self.low:.3g}")
        object.__setattr__(self, "_high_text", f"{self.high:.3g}")

    def within(self, ratio: float) -> bool:
        return self.low <= ratio <= self.high

    def describe(self, ratio: float) -> str:
        if ratio > self.high:
            return f"ratio {ratio:.3g} > {self._high_text} tolerance"
        if ratio < self.low:
            return f"ratio {ratio:.3g} < {self._low_text} tolerance"
        return f"ratio {ratio:.3g} within {self._low_text}–{self._high_text} tolerance"


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
    x = value * 1000.0
    if 0.0 <= x < 4e15:
        # ``round(x, 6)`` (a decimal conversion, the costly part) only matters just above a whole number:
        # further than 1e-6 above it, or exactly on it, the result is ``ceil(x)``; closer than 4e-7, where
        # rounding to 6 decimals lands on it, the whole number. ``x - whole`` is exact in this range.
        whole = math.floor(x)
        frac = x - whole
        if frac == 0.0 or frac > 1e-6:
            return math.ceil(x)
        if frac < 4e-7:
            return whole
    return math.ceil(round(x, 6))


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


#: One metric's proposal: ``(signal, replicas or None when it cannot be computed, within tolerance, why)``.
#: ``why`` holds the numbers behind it rather than a sentence: only the explanations a message shows (the chosen
#: metric's and the unknown ones') are formatted, by ``_explain``. Its target is the text ``_fmt`` gives for the
#: target, formatted once when the policy is built.
MetricOutcome = tuple[str, int | None, bool, tuple[Any, ...]]


def _explain(name: str, why: tuple[Any, ...], tol: Tolerances) -> str:
    """The sentence for one metric from its ``MetricOutcome.why``."""
    kind = why[0]
    if kind == "pods":
        return _explain_pods(name, *why[1:], tol=tol)
    if kind == "average":
        usage, target, ratio, status, current, replicas = why[1:]
        return (
            f"{name} {_fmt(usage)} over {_n(status, 'replica')} vs target {target} per replica "
            f"({tol.describe(ratio) if math.isfinite(ratio) else 'no replicas'}): {current} → {replicas}"
        )
    if kind == "value":
        usage, target, ratio, ready, current, replicas = why[1:]
        how = f"from zero: ceil({ratio:.3g})" if current == 0 else f"{tol.describe(ratio)}, {ready} ready"
        return f"{name} {_fmt(usage)} vs target value {target} ({how}): {current} → {replicas}"
    if kind == "unknown":
        return f"{name} is unknown ({why[1]})"
    if kind == "no-pod-value":
        return f"{name}: no pod reports a value"
    if kind == "no-ready":
        return f"{name} cannot be averaged: no ready replicas"
    raise AssertionError(why)


def _explain_pods(
    name: str,
    basis: str,
    counts: tuple[int, int, int, int],
    target: str,
    ratio: float,
    new_ratio: float | None,
    current: int,
    count: int,
    *,
    tol: Tolerances,
) -> str:
    total, count_, missing, unready = counts
    if basis == "pods":
        text = f"{name} averages {_fmt(total // count_)} over {_n(count_, 'pod')}"
    elif basis == "perReplica":
        text = f"{name} {_fmt(total // count_)} per ready replica over {count_} ready"
    else:
        text = f"{name} {_fmt(total)} over {_n(count_, 'ready replica')} = {_fmt(total // count_)} per replica"
    text += f" vs target {target} ({tol.describe(ratio)})"
    if new_ratio is not None:
        adjusted = []
        if missing:
            adjusted.append(f"{_n(missing, 'pod')} without a value")
        if unready and ratio > 1.0:
            adjusted.append(f"{_n(unready, 'not-ready pod')} at 0")
        text += f"; counting {' and '.join(adjusted) or 'pods as upstream'}: ratio {new_ratio:.3g}"
    return f"{text}: {current} → {count}"


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
        #: Per metric, read once from the config: ``(signal, "Pods" | "Value" | "AverageValue", target in milli,
        #: the target as explanations show it)``.
        self.metrics: tuple[tuple[str, str, int, str], ...] = tuple(_metric_plan(m) for m in config.metrics)

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        current = ctx.replicas.spec
        tol = self.tolerances
        outcomes = [self._metric(metric, ctx) for metric in self.metrics]
        # The first metric with the highest count (upstream keeps the first on ties).
        best: MetricOutcome | None = None
        replicas = 0
        invalid: list[MetricOutcome] = []
        all_within = True
        for o in outcomes:
            count = o[1]
            if count is None:
                invalid.append(o)
                continue
            if best is None or count > replicas:
                best, replicas = o, count
            all_within = all_within and o[2]
        unknown = tuple(o[0] for o in invalid)
        if best is None:
            why = "; ".join(_explain(o[0], o[3], tol) for o in invalid)
            return Recommendation(None, Reason.METRICS_UNKNOWN, f"no metric can be computed: {why}", unknown), state
        if invalid and replicas < current:
            # Upstream never scales down while a metric is invalid: it could be the one holding the count up.
            why = "; ".join(_explain(o[0], o[3], tol) for o in invalid)
            msg = f"the valid metrics would scale down to {replicas} but {why}; {_explain(best[0], best[3], tol)}"
            return Recommendation(None, Reason.METRICS_UNKNOWN, msg, unknown, replicas), state
        message = _explain(best[0], best[3], tol)
        if len(outcomes) > 1:
            parts = [
                f"{o[0]} → {o[1]}" if o[1] is not None else _explain(o[0], o[3], tol) for o in outcomes if o is not best
            ]
            message = f"{message} (highest of {len(outcomes)} metrics; {', '.join(parts)})"
        if replicas > current:
            reason = Reason.SCALE_UP
        elif replicas < current:
            reason = Reason.SCALE_DOWN
        else:
            reason = Reason.WITHIN_TOLERANCE if all_within else Reason.STEADY
        return Recommendation(replicas, reason, message, unknown), state

    def _metric(self, metric: tuple[str, str, int, str], ctx: Context) -> MetricOutcome:
        name, kind, target, target_text = metric
        sig = ctx.signals.get(name)
        if sig is None or sig.value is None or sig.state is not SignalState.OK:
            return name, None, False, ("unknown", sig.reason if sig is not None else "missing")
        if kind == "Pods":
            return self._pods(name, sig.value, ctx, target, target_text)
        tol = self.tolerances
        status = ctx.replicas
        current = status.spec
        usage = milli(sig.value)
        if kind == "Value":
            ready = status.ready
            replicas, ratio = value_replicas(current=current, ready=ready, usage=usage, target=target, tol=tol)
            within = current != 0 and tol.within(ratio)
            return name, replicas, within, ("value", usage, target_text, ratio, ready, current, replicas)
        # HPA counts every pod of the target; one waiting for Kueue admission is an unready pod to it.
        counted = status.ready + status.starting + status.gated
        replicas, ratio = average_value_replicas(status_replicas=counted, usage=usage, target=target, tol=tol)
        return name, replicas, tol.within(ratio), ("average", usage, target_text, ratio, counted, current, replicas)

    def _pods(self, name: str, value: float, ctx: Context, target: int, target_text: str) -> MetricOutcome:
        tol = self.tolerances
        replicas = ctx.replicas
        current = replicas.spec
        per_pod = ctx.per_replica.get(name)
        if per_pod is not None and replicas.pods is not None:
            usage = _per_pod_usage(replicas.pods, per_pod)
            if usage.count == 0:
                return name, None, False, ("no-pod-value",)
            basis = "pods"
        else:
            ready = replicas.ready
            if ready == 0:
                return name, None, False, ("no-ready",)
            if _scope(ctx, name) == "perReplica":
                total = milli(value) * ready
                basis = "perReplica"
            else:
                total = milli(value)
                basis = "total"
            ratio = (total // ready) / target
            unready = replicas.starting + replicas.gated  # HPA: a pod pending admission is unready
            if not (unready and ratio > 1.0):
                # ``pods_replicas`` without pods to adjust for (none missing; none unready, or not scaling up):
                # the ready count scaled by the ratio, or the current count within tolerance.
                within = tol.within(ratio)
                count = current if within else math.ceil(ratio * ready)
                why = ("pods", basis, (total, ready, 0, 0), target_text, ratio, None, current, count)
                return name, count, within, why
            usage = PodsUsage(total=total, count=ready, ready=ready, unready=unready)
        count, ratio, new_ratio = pods_replicas(current=current, usage=usage, target=target, tol=tol)
        within = tol.within(ratio) or (new_ratio is not None and tol.within(new_ratio))
        counts = (usage.total, usage.count, usage.missing, usage.unready)
        return name, count, within, ("pods", basis, counts, target_text, ratio, new_ratio, current, count)


def _metric_plan(metric: MetricSpec) -> tuple[str, str, int, str]:
    target = metric.target
    if metric.type == "Pods" or target.type == "AverageValue":
        assert target.average_value is not None  # the config model requires it
        kind, value = "Pods" if metric.type == "Pods" else "AverageValue", milli(target.average_value)
    else:
        assert target.value is not None
        kind, value = "Value", milli(target.value)
    return metric.signal, kind, value, _fmt(value)


def _scope(ctx: Context, name: str) -> Literal["total", "perReplica"]:
    try:
        return ctx.spec.signal(name).scope
    except KeyError:
        return "total"


def build(config: HpaPolicyConfig) -> PolicyAlgorithm:
    return HpaAlgorithm(config)
