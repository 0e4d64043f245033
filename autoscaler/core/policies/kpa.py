"""Policy type ``kpa``: Knative KPA's stable and panic windows: fast up on bursts, no scale-down in panic.

Each evaluation adds the load sample ``(now, load)`` to a window kept in the policy's own state
(``KpaState``, pruned to the stable window). Then, as Knative's autoscaler does:

1. ``stable = ceil(avg(load over stableWindow) / targetPerReplica)``,
   ``panic = ceil(avg(load over panicWindow) / targetPerReplica)``; both are kept within
   ``[floor(ready / maxScaleDownRate), ceil(ready × maxScaleUpRate)]`` (``ready`` counted as at least 1).
2. Panic starts when ``panic ≥ panicThreshold × ready``; every evaluation over the threshold extends it;
   it ends once a whole stable window has passed without the trigger.
3. Outside panic the stable count is the recommendation. In panic it is the larger of the two, and it never
   decreases: not below the current count nor below the highest count recommended since panic began.
4. ``scaleDownDelaySeconds`` > 0: the recommendation is the highest one in that trailing window, so a
   scale-down happens only after the lower count has held for the whole delay.

Averages are over the samples in each window (one per evaluation); the window is ``(now − w, now]``.
The engine's HPA behavior stage is not used (``uses_behavior`` is false): the windows are the smoothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from autoscaler.core.model import Reason
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.specbase import SpecModel


class KpaPolicyConfig(SpecModel):
    type: Literal["kpa"]
    signal: str = Field(description="A total load signal (e.g. concurrent requests).")
    target_per_replica: float = Field(gt=0)
    stable_window_seconds: float = Field(default=60.0, ge=1, le=3600)
    panic_window_seconds: float = Field(default=6.0, ge=1, le=3600)
    panic_threshold: float = Field(default=2.0, gt=1.0, description="Panic when panic-window demand ≥ this × current.")
    max_scale_up_rate: float = Field(
        default=1000.0, gt=1.0, description="At most ceil(rate × ready) replicas per evaluation (Knative 1000)."
    )
    max_scale_down_rate: float = Field(
        default=2.0, gt=1.0, description="At least floor(ready / rate) replicas per evaluation (Knative 2)."
    )
    scale_down_delay_seconds: float = Field(
        default=0.0, ge=0, le=3600, description="A lower count must hold this long before scaling down."
    )

    @model_validator(mode="after")
    def _panic_inside_stable(self) -> KpaPolicyConfig:
        if self.panic_window_seconds > self.stable_window_seconds:
            raise ValueError(
                f"panicWindowSeconds ({self.panic_window_seconds:g}) must not exceed stableWindowSeconds "
                f"({self.stable_window_seconds:g})"
            )
        return self

    def signal_refs(self) -> list[str]:
        return [self.signal]


@dataclass(frozen=True, slots=True)
class KpaState:
    """What KPA remembers between evaluations (``PolicyState.algorithm``)."""

    #: ``(time, load)`` samples within the stable window, oldest first.
    samples: tuple[tuple[float, float], ...] = ()
    #: The last time the panic condition held (Knative's ``panicTime``); None when not panicking.
    panic_trigger: float | None = None
    #: The highest count recommended since panic began.
    max_panic: int = 0
    #: ``(time, recommendation)`` within ``scaleDownDelaySeconds``.
    delay: tuple[tuple[float, int], ...] = ()

    @property
    def panicking(self) -> bool:
        return self.panic_trigger is not None


def _average(samples: tuple[tuple[float, float], ...], now: float, window: float, latest: float) -> float:
    inside = [v for t, v in samples if now - window < t <= now]
    # Never empty in practice: the sample taken at ``now`` is in every window.
    return sum(inside) / len(inside) if inside else latest


def _ceil_ratio(load: float, target: float) -> int:
    ratio = load / target
    # Ratios within 1e-9 of an integer are that integer (float division noise must not add a replica).
    return max(0, math.ceil(ratio - 1e-9 * max(1.0, ratio)))


@dataclass(frozen=True, slots=True)
class KpaAlgorithm:
    config: KpaPolicyConfig
    #: The stable/panic windows and the scale-down delay are this type's own smoothing.
    uses_behavior = False

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        cfg = self.config
        prev = state if isinstance(state, KpaState) else KpaState()
        sig = ctx.signals[cfg.signal]
        if not sig.ok or sig.value is None:
            # No sample is recorded: an unknown is not a zero in the averages.
            return Recommendation(
                None, Reason.METRICS_UNKNOWN, f"{cfg.signal} is unknown: {sig.reason}", (cfg.signal,)
            ), prev

        now = ctx.now
        ready_raw, current = ctx.replicas.ready, ctx.replicas.spec
        per_replica = ctx.spec.signal(cfg.signal).scope == "perReplica"
        if per_replica and ready_raw == 0:
            # An average over no ready replica gives no total: unknown, not zero load.
            return Recommendation(
                None,
                Reason.METRICS_UNKNOWN,
                f"{cfg.signal} is a per-replica average and no replica is ready",
                (cfg.signal,),
            ), prev
        load = sig.value * ready_raw if per_replica else sig.value
        samples = tuple(
            (t, v) for t, v in (*prev.samples, (now, load)) if t > now - cfg.stable_window_seconds
        )
        stable_avg = _average(samples, now, cfg.stable_window_seconds, load)
        panic_avg = _average(samples, now, cfg.panic_window_seconds, load)

        ready = max(1, ready_raw)
        max_up = math.ceil(cfg.max_scale_up_rate * ready)
        max_down = math.floor(ready / cfg.max_scale_down_rate)
        raw_stable = _ceil_ratio(stable_avg, cfg.target_per_replica)
        raw_panic = _ceil_ratio(panic_avg, cfg.target_per_replica)
        stable = min(max(raw_stable, max_down), max_up)
        panic = min(max(raw_panic, max_down), max_up)

        over = raw_panic / ready >= cfg.panic_threshold
        trigger, max_panic = prev.panic_trigger, prev.max_panic
        if over:
            trigger = now
        elif trigger is not None and now - trigger > cfg.stable_window_seconds:
            # A whole stable window without the trigger: the burst is in the stable average now.
            trigger, max_panic = None, 0

        text = (
            f"{cfg.signal} avg {stable_avg:g} over {cfg.stable_window_seconds:g}s → {raw_stable}, "
            f"avg {panic_avg:g} over {cfg.panic_window_seconds:g}s → {raw_panic} "
            f"(target {cfg.target_per_replica:g}/replica, {ready_raw} ready)"
        )
        desired = stable
        reason: Reason | None = None
        if trigger is not None:
            desired = max(stable, panic, max_panic, current)
            max_panic = desired
            reason = Reason.PANIC
            text += (
                f"; panicking: {raw_panic} ≥ {cfg.panic_threshold:g} × {ready} ready"
                if over
                else f"; panicking until {cfg.stable_window_seconds:g}s pass without the trigger"
            )
            text += ", no scale-down"
        elif stable != raw_stable:
            text += f"; max scale rates allow {max_down}..{max_up}"

        delay = prev.delay
        if cfg.scale_down_delay_seconds > 0:
            delay = tuple(
                (t, n) for t, n in (*prev.delay, (now, desired)) if t > now - cfg.scale_down_delay_seconds
            )
            delayed = max(n for t, n in delay if t <= now)
            if delayed > desired:
                text += f"; scale-down delay {cfg.scale_down_delay_seconds:g}s holds {delayed}"
                reason = reason or Reason.STABILIZING
                desired = delayed

        if reason is None:
            reason = (
                Reason.SCALE_UP if desired > current else Reason.SCALE_DOWN if desired < current else Reason.STEADY
            )
        new_state = KpaState(samples=samples, panic_trigger=trigger, max_panic=max_panic, delay=delay)
        return Recommendation(desired, reason, f"{text} → {desired} replica(s)"), new_state


def build(config: KpaPolicyConfig) -> PolicyAlgorithm:
    return KpaAlgorithm(config)
