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
from typing import Literal, NamedTuple

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


# The records below are built per metric at every evaluation (``decide``'s hot path): plain slotted dataclasses,
# built positionally (a NamedTuple's or a frozen dataclass's construction costs about twice as much; keywords
# more still), read by name only.


@dataclass(slots=True)
class Count:
    """A metric's replica count and the usage ratio it comes from."""

    replicas: int
    ratio: float


@dataclass(slots=True)
class PodsCount:
    """``pods_replicas``' count, its ratio, and the ratio re-computed after the missing/unready adjustment (None
    when there was none)."""

    replicas: int
    ratio: float
    adjusted: float | None


def pods_replicas(*, current: int, usage: PodsUsage, target: int, tol: Tolerances) -> PodsCount:
    """Upstream ``calcPlainMetricReplicas`` (``count`` > 0)."""
    ratio = (usage.total // usage.count) / target
    scale_up_with_unready = usage.unready > 0 and ratio > 1.0
    if not scale_up_with_unready and usage.missing == 0:
        if tol.within(ratio):
            return PodsCount(current, ratio, None)
        return PodsCount(math.ceil(ratio * usage.ready), ratio, None)
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
        return PodsCount(current, ratio, new_ratio)
    replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return PodsCount(current, ratio, new_ratio)
    return PodsCount(replicas, ratio, new_ratio)


def value_replicas(*, current: int, ready: int, usage: int, target: int, tol: Tolerances) -> Count:
    """Upstream ``getUsageRatioReplicaCount`` (External/Object with a Value target)."""
    ratio = usage / target
    if current == 0:
        return Count(math.ceil(ratio), ratio)
    if tol.within(ratio):
        return Count(current, ratio)
    return Count(math.ceil(ratio * ready), ratio)


def average_value_replicas(*, status_replicas: int, usage: int, target: int, tol: Tolerances) -> Count:
    """Upstream ``Get{External,Object}PerPodMetricReplicas`` (AverageValue target)."""
    # Go divides floats: x/0 is +Inf (or NaN for 0/0), never within tolerance.
    ratio = usage / (target * status_replicas) if status_replicas else math.inf
    if tol.within(ratio):
        return Count(status_replicas, ratio)
    return Count(math.ceil(usage / target), ratio)


# One metric's proposal, each kind with the numbers behind its sentence rather than the sentence, so that only the
# explanations a message shows (the chosen metric's and the unknown ones') are formatted, by ``_explain``. Each
# target is the text ``_fmt`` gives for it, formatted once when the policy is built. Every kind has ``signal``,
# ``replicas`` (None: it cannot be computed) and ``within_tolerance`` first.


@dataclass(slots=True)
class PodsOutcome:
    """A ``Pods`` metric (or AverageValue over ready replicas): ``calcPlainMetricReplicas``' inputs and result."""

    signal: str
    replicas: int
    within_tolerance: bool
    #: "pods" (one value per pod), "perReplica" (the signal's average per ready replica) or "total".
    basis: str
    #: Milli-units summed, and the pods (or ready replicas) they were summed over.
    total: int
    over: int
    #: Pods without a value, and unready pods, counted by upstream's adjustment.
    missing: int
    unready: int
    target: str
    ratio: float
    #: The ratio after the adjustment (None when there was none).
    adjusted: float | None
    current: int


@dataclass(slots=True)
class ValueOutcome:
    """An External/Object ``Value`` metric."""

    signal: str
    replicas: int
    within_tolerance: bool
    usage: int
    target: str
    ratio: float
    ready: int
    current: int


@dataclass(slots=True)
class AverageOutcome:
    """An External/Object ``AverageValue`` metric over the target's replicas (``counted``)."""

    signal: str
    replicas: int
    within_tolerance: bool
    usage: int
    target: str
    ratio: float
    counted: int
    current: int


@dataclass(slots=True)
class UnknownOutcome:
    """A metric that cannot be computed, and why (``NO_POD_VALUE``, ``NO_READY`` or the signal's reason)."""

    signal: str
    reason: str
    #: The sentence after the signal's name, when it is not "is unknown (<reason>)".
    tail: str | None = None
    replicas: None = None
    within_tolerance: bool = False

MetricOutcome = PodsOutcome | ValueOutcome | AverageOutcome | UnknownOutcome


def _explain(o: MetricOutcome, tol: Tolerances) -> str:
    """The sentence for one metric's outcome."""
    if isinstance(o, PodsOutcome):
        return _explain_pods(o, tol=tol)
    name = o.signal
    if isinstance(o, AverageOutcome):
        return (
            f"{name} {_fmt(o.usage)} over {_n(o.counted, 'replica')} vs target {o.target} per replica "
            f"({tol.describe(o.ratio) if math.isfinite(o.ratio) else 'no replicas'}): "
            f"{o.current} → {o.replicas}"
        )
    if isinstance(o, ValueOutcome):
        ratio = o.ratio
        how = f"from zero: ceil({ratio:.3g})" if o.current == 0 else f"{tol.describe(ratio)}, {o.ready} ready"
        return f"{name} {_fmt(o.usage)} vs target value {o.target} ({how}): {o.current} → {o.replicas}"
    return f"{name}{o.tail}" if o.tail is not None else f"{name} is unknown ({o.reason})"


def _explain_pods(o: PodsOutcome, *, tol: Tolerances) -> str:
    name, total, count = o.signal, o.total, o.over
    if o.basis == "pods":
        text = f"{name} averages {_fmt(total // count)} over {_n(count, 'pod')}"
    elif o.basis == "perReplica":
        text = f"{name} {_fmt(total // count)} per ready replica over {count} ready"
    else:
        text = f"{name} {_fmt(total)} over {_n(count, 'ready replica')} = {_fmt(total // count)} per replica"
    text += f" vs target {o.target} ({tol.describe(o.ratio)})"
    if o.adjusted is not None:
        adjusted = []
        if o.missing:
            adjusted.append(f"{_n(o.missing, 'pod')} without a value")
        if o.unready and o.ratio > 1.0:
            adjusted.append(f"{_n(o.unready, 'not-ready pod')} at 0")
        text += f"; counting {' and '.join(adjusted) or 'pods as upstream'}: ratio {o.adjusted:.3g}"
    return f"{text}: {o.current} → {o.replicas}"


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
        #: Per metric, read once from the config.
        self.metrics: tuple[MetricPlan, ...] = tuple(_metric_plan(m) for m in config.metrics)

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
            count = o.replicas
            if count is None:
                invalid.append(o)
                continue
            if best is None or count > replicas:
                best, replicas = o, count
            all_within = all_within and o.within_tolerance
        unknown = tuple(o.signal for o in invalid)
        if best is None:
            why = "; ".join(_explain(o, tol) for o in invalid)
            return Recommendation(None, Reason.METRICS_UNKNOWN, f"no metric can be computed: {why}", unknown), state
        if invalid and replicas < current:
            # Upstream never scales down while a metric is invalid: it could be the one holding the count up.
            why = "; ".join(_explain(o, tol) for o in invalid)
            msg = f"the valid metrics would scale down to {replicas} but {why}; {_explain(best, tol)}"
            return Recommendation(None, Reason.METRICS_UNKNOWN, msg, unknown, replicas), state
        message = _explain(best, tol)
        if len(outcomes) > 1:
            parts = [
                f"{o.signal} → {o.replicas}" if o.replicas is not None else _explain(o, tol)
                for o in outcomes if o is not best
            ]
            message = f"{message} (highest of {len(outcomes)} metrics; {', '.join(parts)})"
        if replicas > current:
            reason = Reason.SCALE_UP
        elif replicas < current:
            reason = Reason.SCALE_DOWN
        else:
            reason = Reason.WITHIN_TOLERANCE if all_within else Reason.STEADY
        return Recommendation(replicas, reason, message, unknown), state

    def _metric(self, metric: MetricPlan, ctx: Context) -> MetricOutcome:
        name, target, target_text = metric.signal, metric.target, metric.target_text
        sig = ctx.signals.get(name)
        if sig is None or sig.value is None or sig.state is not SignalState.OK:
            return UnknownOutcome(name, sig.reason if sig is not None else "missing")
        if metric.kind == "Pods":
            return self._pods(name, sig.value, ctx, target, target_text)
        tol = self.tolerances
        status = ctx.replicas
        current = status.spec
        usage = milli(sig.value)
        if metric.kind == "Value":
            ready = status.ready
            valued = value_replicas(current=current, ready=ready, usage=usage, target=target, tol=tol)
            within = current != 0 and tol.within(valued.ratio)
            return ValueOutcome(name, valued.replicas, within, usage, target_text, valued.ratio, ready, current)
        # HPA counts every pod of the target; one waiting for Kueue admission is an unready pod to it.
        counted = status.ready + status.starting + status.gated
        averaged = average_value_replicas(status_replicas=counted, usage=usage, target=target, tol=tol)
        ratio = averaged.ratio
        return AverageOutcome(name, averaged.replicas, tol.within(ratio), usage, target_text, ratio, counted, current)

    def _pods(self, name: str, value: float, ctx: Context, target: int, target_text: str) -> MetricOutcome:
        tol = self.tolerances
        replicas = ctx.replicas
        current = replicas.spec
        per_pod = ctx.per_replica.get(name)
        if per_pod is not None and replicas.pods is not None:
            usage = _per_pod_usage(replicas.pods, per_pod)
            if usage.count == 0:
                return UnknownOutcome(name, "no pod reports a value", ": no pod reports a value")
            basis = "pods"
        else:
            ready = replicas.ready
            if ready == 0:
                return UnknownOutcome(name, "no ready replicas", " cannot be averaged: no ready replicas")
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
                return PodsOutcome(name, count, within, basis, total, ready, 0, 0, target_text, ratio, None, current)
            usage = PodsUsage(total=total, count=ready, ready=ready, unready=unready)
        counted = pods_replicas(current=current, usage=usage, target=target, tol=tol)
        ratio, new_ratio = counted.ratio, counted.adjusted
        within = tol.within(ratio) or (new_ratio is not None and tol.within(new_ratio))
        return PodsOutcome(name, counted.replicas, within, basis, usage.total, usage.count, usage.missing,
                           usage.unready, target_text, ratio, new_ratio, current)

    def holds(self, ctx: Context) -> bool:
        """Whether ``recommend`` would give the current count with every metric computable: the highest
        metric's count is the current count (its rule without its sentences: a probe's screen asks this
        thousands of times a second, ``core.screen.quiet``). False when a metric cannot be computed (upstream's
        rules for invalid metrics are ``recommend``'s to apply)."""
        top: int | None = None
        for metric in self.metrics:
            count = self._metric(metric, ctx).replicas
            if count is None:
                return False
            if top is None or count > top:
                top = count
        return top == ctx.replicas.spec


class MetricPlan(NamedTuple):
    """One metric of the config, read once."""

    signal: str
    #: "Pods", "Value" or "AverageValue".
    kind: str
    #: In milli-units.
    target: int
    #: The target as explanations show it.
    target_text: str


def _metric_plan(metric: MetricSpec) -> MetricPlan:
    target = metric.target
    if metric.type == "Pods" or target.type == "AverageValue":
        assert target.average_value is not None  # the config model requires it
        kind, value = "Pods" if metric.type == "Pods" else "AverageValue", milli(target.average_value)
    else:
        assert target.value is not None
        kind, value = "Value", milli(target.value)
    return MetricPlan(metric.signal, kind, value, _fmt(value))


def _scope(ctx: Context, name: str) -> Literal["total", "perReplica"]:
    try:
        return ctx.spec.signal(name).scope
    except KeyError:
        return "total"


def build(config: HpaPolicyConfig) -> PolicyAlgorithm:
    return HpaAlgorithm(config)
