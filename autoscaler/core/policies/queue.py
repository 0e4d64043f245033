"""Policy type ``queue``: replicas from total outstanding work over per-replica capacity, for LLM servers.

The algorithm (``W`` = total work, ``C`` = ``capacityPerReplica``, ``u`` = ``targetUtilization``,
``d`` = ``scaleDownUtilization``; ``N`` = spec replicas, ``R`` = ready, ``S`` = starting):

1. ``up = ceil(W / (C·u))``: the replicas the work needs. A saturation signal at or above its threshold
   (e.g. KV-cache usage ≥ 0.8) means the ready replicas are full: at least ``R + 1`` unless replicas are
   already starting (they will take the overflow).
2. ``up > N``: scale up to ``up``. The count is absolute (work over capacity, not a ratio of the current
   count), so replicas that are still starting or loading the model are capacity already on its way:
   while ``R < up ≤ N`` with ``S > 0`` the reason is ``WaitingForStarting`` and nothing more is added.
   That is the guard against the cascading over-scale a ratio-based HPA shows while new replicas load.
3. Scale down only when the work fits on fewer replicas with headroom: ``down = ceil(W / (C·d))`` with
   ``d < u``; scale to ``down`` when ``down < N`` and nothing is saturated. Between the two thresholds the
   count holds (a hysteresis band), so a steady load never flaps.
4. Unknown signals: the known work signals sum to a lower bound of the total (every value is ≥ 0). If
   that lower bound alone needs more than ``N`` and more than ``R + S``, scaling up is safe and done;
   otherwise the recommendation is unknown and the engine holds (or falls back). Unknown never shrinks.

The engine applies HPA ``behavior`` afterwards (``uses_behavior``). Its defaults here are made for fast
reaction, not HPA's: scale up with no stabilization and up to ×10 (or +4) per 15 s; scale down after a
300 s stabilization window (against flapping), up to 100 % per 15 s. A ``behavior`` given in the policy
overrides these field by field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from autoscaler.core.model import Reason
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.policies.hpa import BehaviorSpec, ScalingPolicySpec, ScalingRulesSpec
from autoscaler.core.specbase import SpecModel

#: ``scaleDownUtilization`` when not given, as a fraction of ``targetUtilization``.
DEFAULT_SCALE_DOWN_FRACTION = 0.8

#: Ratios this close to an integer count as that integer (``1.1 / 0.1`` is 11.000000000000002 in floats).
_EPSILON = 1e-9

DEFAULT_SCALE_UP = ScalingRulesSpec(
    stabilization_window_seconds=0,
    select_policy="Max",
    policies=[
        ScalingPolicySpec(type="Percent", value=900, period_seconds=15),
        ScalingPolicySpec(type="Pods", value=4, period_seconds=15),
    ],
)
DEFAULT_SCALE_DOWN = ScalingRulesSpec(
    stabilization_window_seconds=300,
    select_policy="Max",
    policies=[ScalingPolicySpec(type="Percent", value=100, period_seconds=15)],
)


class SaturationSpec(SpecModel):
    """A signal that says the ready replicas are full, whatever the work count says."""

    signal: str = Field(description="e.g. KV-cache usage (0–1), aggregated with max over replicas.")
    threshold: float = Field(gt=0, description="At or above this value the ready replicas count as full.")


class QueuePolicyConfig(SpecModel):
    type: Literal["queue"]
    work: list[str] = Field(
        min_length=1, description="Signals summed into total outstanding work (e.g. waiting + running)."
    )
    capacity_per_replica: float = Field(gt=0, description="Work one replica serves at its target.")
    target_utilization: float = Field(
        default=1.0, gt=0, le=1, description="Fraction of capacityPerReplica to plan for when scaling up."
    )
    scale_down_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Scale down only to a count that runs at or below this utilization; "
        "below targetUtilization (default 0.8 × targetUtilization).",
    )
    saturation: list[SaturationSpec] = Field(
        default_factory=list, description="Signals that mark the ready replicas full (no scale-down, +1)."
    )
    behavior: BehaviorSpec | None = Field(
        default=None,
        validate_default=True,
        description="HPA behavior; missing fields take the queue defaults (fast up, 300 s down window).",
    )

    @field_validator("behavior", mode="after")
    @classmethod
    def _queue_behavior_defaults(cls, value: BehaviorSpec | None) -> BehaviorSpec:
        # Filled here so the behavior stage never falls back to HPA's defaults, which would throttle
        # scale-up to 4 pods or 100 % per 15 s.
        given = value or BehaviorSpec()
        return BehaviorSpec(
            scale_up=_fill(given.scale_up, DEFAULT_SCALE_UP), scale_down=_fill(given.scale_down, DEFAULT_SCALE_DOWN)
        )

    @model_validator(mode="after")
    def _band(self) -> QueuePolicyConfig:
        if self.scale_down_utilization is not None and self.scale_down_utilization >= self.target_utilization:
            raise ValueError(
                f"scaleDownUtilization ({self.scale_down_utilization:g}) must be below targetUtilization "
                f"({self.target_utilization:g}), or a steady load would flap"
            )
        dupes = sorted({n for n in self.work if self.work.count(n) > 1})
        if dupes:
            # Summing a signal twice would double its work: almost certainly a typo.
            raise ValueError(f"work lists signal(s) more than once: {', '.join(dupes)}")
        return self

    @property
    def down_utilization(self) -> float:
        """The effective ``scaleDownUtilization``."""
        if self.scale_down_utilization is not None:
            return self.scale_down_utilization
        return DEFAULT_SCALE_DOWN_FRACTION * self.target_utilization

    def signal_refs(self) -> list[str]:
        return [*self.work, *(s.signal for s in self.saturation)]


def _fill(given: ScalingRulesSpec | None, default: ScalingRulesSpec) -> ScalingRulesSpec:
    if given is None:
        return default
    return given.model_copy(
        update={
            "stabilization_window_seconds": (
                given.stabilization_window_seconds
                if given.stabilization_window_seconds is not None
                else default.stabilization_window_seconds
            ),
            "select_policy": given.select_policy or default.select_policy,
            "policies": given.policies if given.policies is not None else default.policies,
        }
    )


def replicas_for(work: float, per_replica: float) -> int:
    """``ceil(work / per_replica)``, with ratios within 1e-9 of an integer taken as that integer."""
    if work <= 0:
        return 0
    ratio = work / per_replica
    return max(0, math.ceil(ratio - _EPSILON * max(1.0, ratio)))


@dataclass(frozen=True, slots=True)
class QueueAlgorithm:
    """Stateless: the behavior stage holds the stabilization state, so equal inputs give equal outputs."""

    config: QueuePolicyConfig
    #: The HPA behavior stage runs afterwards, with the queue defaults filled into ``config.behavior``.
    uses_behavior = True

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        cfg = self.config
        ready, starting, current = ctx.replicas.ready, ctx.replicas.starting, ctx.replicas.spec
        per_up = cfg.capacity_per_replica * cfg.target_utilization
        per_down = cfg.capacity_per_replica * cfg.down_utilization

        parts: list[str] = []
        unknown: list[str] = []
        work = 0.0
        for name in cfg.work:
            sig = ctx.signals[name]
            # A perReplica signal is an average over the replicas that report: the ready ones. With none
            # ready there is no total to compute; reading it as zero work would scale down a broken target.
            per_replica = ctx.spec.signal(name).scope == "perReplica"
            if not sig.ok or sig.value is None or (per_replica and ready == 0):
                unknown.append(name)
                continue
            amount = sig.value * ready if per_replica else sig.value
            work += amount
            parts.append(f"{name} {amount:g}" + (f" ({sig.value:g}/replica × {ready})" if per_replica else ""))

        saturated: list[str] = []
        for sat in cfg.saturation:
            sig = ctx.signals[sat.signal]
            if not sig.ok or sig.value is None:
                unknown.append(sat.signal)
            elif sig.value >= sat.threshold:
                saturated.append(f"{sat.signal} {sig.value:g} ≥ {sat.threshold:g}")

        up = replicas_for(work, per_up)
        # Full ready replicas need one more, unless starting replicas are already on their way to take it.
        sat_floor = ready + 1 if saturated and starting == 0 else 0
        need = max(up, sat_floor)
        detailed = len(parts) > 1 or any(ctx.spec.signal(n).scope == "perReplica" for n in cfg.work)
        work_text = f"work {work:g}" + (f" ({' + '.join(parts)})" if parts and detailed else "")
        need_text = (
            f"{work_text} needs {up} replica(s) at {per_up:g}/replica "
            f"({cfg.capacity_per_replica:g} × {cfg.target_utilization:g})"
        )
        if saturated:
            need_text += f"; saturated: {', '.join(saturated)}" + (
                f" ⇒ at least {sat_floor}" if sat_floor else f" ({starting} starting will absorb it)"
            )
        have_text = f"{ready} ready + {starting} starting, spec {current}"

        if unknown:
            if need > current and need > ready + starting:
                # The known work is a lower bound of the total: scaling up on it cannot be wrong.
                return Recommendation(
                    need,
                    Reason.SCALE_UP,
                    f"scaling up to at least {need} on known signals: {need_text}; {have_text}; "
                    f"unknown: {', '.join(unknown)}",
                ), None
            return Recommendation(
                None,
                Reason.METRICS_UNKNOWN,
                f"cannot size on partial work ({need_text}); unknown: {', '.join(unknown)}",
                tuple(unknown),
            ), None

        if need > current:
            return Recommendation(need, Reason.SCALE_UP, f"{need_text}; {have_text}: scaling to {need}"), None
        down = replicas_for(work, per_down)
        if not saturated and down < current:
            return Recommendation(
                down,
                Reason.SCALE_DOWN,
                f"{work_text} fits on {down} replica(s) at ≤ {cfg.down_utilization:g} utilization "
                f"({per_down:g}/replica); {have_text}: scaling down to {down}",
            ), None
        if starting > 0 and (need > ready or (saturated and sat_floor == 0)):
            return Recommendation(
                current,
                Reason.WAITING_FOR_STARTING,
                f"{need_text}; {have_text}: the starting replicas cover it, not scaling again",
            ), None
        why = "saturated, no scale-down" if saturated else (
            f"fewer would run above {cfg.down_utilization:g} utilization"
        )
        return Recommendation(current, Reason.STEADY, f"{need_text}; {have_text}: holding {current} ({why})"), None

    def holds(self, ctx: Context) -> bool:
        """Whether ``recommend`` would give the current count (its rule without its sentences: a probe's screen
        asks this thousands of times a second, ``core.screen.quiet``); False when a signal is unknown."""
        cfg = self.config
        ready, current = ctx.replicas.ready, ctx.replicas.spec
        work = 0.0
        for name in cfg.work:
            sig = ctx.signals[name]
            per_replica = ctx.spec.signal(name).scope == "perReplica"
            if not sig.ok or sig.value is None or (per_replica and ready == 0):
                return False
            work += sig.value * ready if per_replica else sig.value
        saturated = False
        for sat in cfg.saturation:
            sig = ctx.signals[sat.signal]
            if not sig.ok or sig.value is None:
                return False
            saturated = saturated or sig.value >= sat.threshold
        up = replicas_for(work, cfg.capacity_per_replica * cfg.target_utilization)
        need = max(up, ready + 1 if saturated and ctx.replicas.starting == 0 else 0)
        if need > current:
            return False
        return saturated or replicas_for(work, cfg.capacity_per_replica * cfg.down_utilization) >= current


def build(config: QueuePolicyConfig) -> PolicyAlgorithm:
    return QueueAlgorithm(config)
