"""Policy type ``hpa``: the Kubernetes HorizontalPodAutoscaler algorithm, reproduced exactly.

Config mirrors ``autoscaling/v2`` (metrics, behavior) with metrics naming our signals.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autoscaler.core.policies.base import PolicyAlgorithm
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


def build(config: HpaPolicyConfig) -> PolicyAlgorithm:
    raise NotImplementedError("hpa algorithm: being written")
