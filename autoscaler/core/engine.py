"""``decide``: one evaluation of one policy, the same in the cluster, in replay and in simulation.

Steps, in order:
  1. judge every signal (``signals``): usable, or unknown with a reason;
  2. the policy type recommends a raw replica count (``policies``);
  3. a current count out of range wins over any recommendation, as in HPA: 0 replicas without scale-to-zero
     means scaling is disabled (someone scaled the target to zero by hand); above ``maxReplicas`` → max;
     below ``minReplicas`` → min;
  4. unknown → hold the current count, or fall back after N consecutive failures (KEDA's fallback);
  5. scale-to-zero, only when enabled, with an activation threshold and an idle period;
  6. HPA ``behavior`` for types that use it: stabilization windows, rate policies, min/max (``behavior``);
     other types: min/max only;
  7. capacity: training to deactivate or reactivate for the count (``arbitration``).

For types that use the behavior stage, the recommendation history starts with the current count at the first
evaluation (HPA's ``recordInitialRecommendation``): no scale-down inside the first window after a start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from autoscaler.core import arbitration, behavior, policies
from autoscaler.core.model import (
    Decision,
    Observation,
    PolicyState,
    Reason,
    ScaleDecision,
    SignalValue,
)
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import FallbackSpec, ScalingPolicy, Spec


@dataclass(frozen=True)
class CompiledPolicy:
    """A validated policy ready to evaluate: its algorithm and signal judge are built once."""

    policy: ScalingPolicy
    algorithm: PolicyAlgorithm
    judge: SignalJudge

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    def decide(
        self, observation: Observation, state: PolicyState, now: float
    ) -> tuple[list[Decision], PolicyState]:
        return decide(self, observation, state, now)


#: The longest ``periodSeconds`` a rate policy may have: older scale events can never count again.
_MAX_PERIOD_S = 1800.0


def compile_policy(policy: ScalingPolicy) -> CompiledPolicy:
    return CompiledPolicy(policy, policies.build(policy.spec.policy), SignalJudge(policy.spec))


def _fallback_replicas(fallback: FallbackSpec, current: int) -> int:
    match fallback.behavior:
        case "static":
            assert fallback.replicas is not None  # the spec requires it
            return fallback.replicas
        case "currentReplicas":
            return current
        case "currentReplicasIfHigher":
            return max(current, fallback.replicas or 0)
        case "currentReplicasIfLower":
            return min(current, fallback.replicas) if fallback.replicas is not None else current
    raise AssertionError(fallback.behavior)


def decide(
    compiled: CompiledPolicy, observation: Observation, state: PolicyState, now: float
) -> tuple[list[Decision], PolicyState]:
    """Evaluate ``compiled`` on ``observation`` at time ``now``; return the decisions and the new state."""
    spec = compiled.policy.spec
    current = observation.replicas.spec
    signals = compiled.judge.judge_all(observation.signals, now)
    per_replica = {
        name: reading.per_replica
        for name, reading in observation.signals.items()
        if reading.per_replica is not None and name in signals and signals[name].ok
    }
    ctx = Context(
        now=now,
        target=observation.target,
        replicas=observation.replicas,
        signals=signals,
        spec=spec,
        per_replica=per_replica,
    )
    algorithm = compiled.algorithm
    rec, algorithm_state = algorithm.recommend(ctx, state.algorithm)
    state = replace(state, algorithm=algorithm_state, last_decision_time=now)
    if algorithm.uses_behavior and not state.recommendations:
        state = replace(state, recommendations=((now, current),))

    def scale(desired: int, reason: Reason, message: str) -> ScaleDecision:
        return ScaleDecision(observation.target, current, desired, reason, message, signals)

    out_of_range = _out_of_range(spec, current)
    if out_of_range is not None:
        desired, reason, message = out_of_range
        return _arbitrate(compiled, observation, state, now, scale, desired, reason, message)

    if rec.replicas is None:
        failures = state.consecutive_failures + 1
        state = replace(state, consecutive_failures=failures)
        fallback = spec.metric_safety.fallback
        why = _unknown_summary(rec, signals)
        stz = spec.scale_to_zero
        if stz.activation is not None and not signals[stz.activation.signal].ok:
            # An unknown activation signal interrupts an idle period: idle must be known for idleSeconds.
            state = replace(state, idle_since=None)
        if current == 0:
            # As KEDA, a known active activation signal wakes the target even if the policy's own signals
            # are unknown (an erroring trigger does not veto another's activity); it only ever scales up.
            woken, zero_reason, zero_msg, state = _scale_to_zero(compiled, signals, current, 0, state, now)
            if zero_reason is Reason.ACTIVATE_FROM_ZERO:
                msg = f"{zero_msg}; sized without the policy's unknown signals: {why}"
                return _finish([scale(woken, zero_reason, msg)], state, now, current, woken)
        # As KEDA: fall back once the count of consecutive failures *passes* failureThreshold.
        if fallback is not None and failures > fallback.failure_threshold:
            target = max(spec.min_replicas, min(spec.max_replicas, _fallback_replicas(fallback, current)))
            msg = (
                f"fallback ({fallback.behavior}) to {target} after {failures} evaluations with unknown "
                f"signals: {why}"
            )
            return _finish([scale(target, Reason.FALLBACK, msg)], state, now, current, target)
        msg = f"holding {current} replicas: {why} (unknown is never read as idle)"
        return [scale(current, Reason.METRICS_UNKNOWN, msg)], state
    state = replace(state, consecutive_failures=0)

    recommended = rec.replicas
    reason, message = rec.reason, rec.message
    recommended, zero_reason, zero_msg, state = _scale_to_zero(compiled, signals, current, recommended, state, now)
    if zero_reason is not None:
        return _finish([scale(recommended, zero_reason, zero_msg)], state, now, current, recommended)

    if algorithm.uses_behavior:
        norm = behavior.normalize(
            behavior=getattr(spec.policy, "behavior", None),
            min_replicas=max(spec.min_replicas, 1),
            max_replicas=spec.max_replicas,
            current=current,
            recommended=recommended,
            state=state,
            now=now,
        )
    else:
        norm = behavior.clamp(
            min_replicas=max(spec.min_replicas, 1),
            max_replicas=spec.max_replicas,
            recommended=recommended,
            state=state,
        )
    state = norm.state
    desired = norm.desired
    if norm.reason is not None:
        reason = norm.reason
        message = f"{message}; {norm.message}" if norm.message else message
    elif desired == current and reason in (Reason.SCALE_UP, Reason.SCALE_DOWN):
        reason = Reason.STEADY
    return _arbitrate(compiled, observation, state, now, scale, desired, reason, message)


def _out_of_range(spec: Spec, current: int) -> tuple[int, Reason, str] | None:
    """HPA's checks before any metric: what to do with a current count outside [min, max], else None."""
    if current == 0:
        if spec.scale_to_zero.enabled:
            return None  # scale-to-zero decides from the activation signal
        return 0, Reason.SCALING_DISABLED, (
            "scaling is disabled since the target has 0 replicas and scaleToZero is not enabled "
            "(as HPA: a target scaled to zero by hand stays there)"
        )
    if current > spec.max_replicas:
        return spec.max_replicas, Reason.LIMITED_BY_MAX, (
            f"{current} replicas is above maxReplicas {spec.max_replicas}: scaling to {spec.max_replicas}"
        )
    if current < spec.min_replicas:
        return spec.min_replicas, Reason.LIMITED_BY_MIN, (
            f"{current} replicas is below minReplicas {spec.min_replicas}: scaling to {spec.min_replicas}"
        )
    return None


def _arbitrate(
    compiled: CompiledPolicy,
    observation: Observation,
    state: PolicyState,
    now: float,
    scale: Callable[[int, Reason, str], ScaleDecision],
    desired: int,
    reason: Reason,
    message: str,
) -> tuple[list[Decision], PolicyState]:
    """Last step: capacity arbitration, then the scale decision first and the training decisions after it."""
    spec = compiled.policy.spec
    decisions: list[Decision] = []
    if spec.capacity is not None and observation.quota is not None:
        plan = arbitration.plan(spec=spec, observation=observation, desired=desired)
        decisions.extend(plan.training)
        if plan.desired != desired:
            desired, reason, message = plan.desired, Reason.WAITING_FOR_CAPACITY, f"{message}; {plan.message}"
    decisions.insert(0, scale(desired, reason, message))
    return _finish(decisions, state, now, observation.replicas.spec, desired)


def _finish(
    decisions: list[Decision], state: PolicyState, now: float, current: int, desired: int
) -> tuple[list[Decision], PolicyState]:
    """Record a scale event (HPA's rate policies count them) when the decision changes the count.

    Events older than the longest period a rate policy may have are dropped: they can never count again.
    """
    horizon = now - _MAX_PERIOD_S
    state = replace(
        state,
        scale_up_events=tuple(e for e in state.scale_up_events if e[0] > horizon),
        scale_down_events=tuple(e for e in state.scale_down_events if e[0] > horizon),
    )
    if desired > current:
        state = replace(state, scale_up_events=(*state.scale_up_events, (now, desired - current)), last_scale_time=now)
    elif desired < current:
        state = replace(
            state, scale_down_events=(*state.scale_down_events, (now, current - desired)), last_scale_time=now
        )
    return decisions, state


def _unknown_summary(rec: Recommendation, signals: dict[str, SignalValue]) -> str:
    names = rec.unknown_signals or tuple(n for n, v in signals.items() if not v.ok)
    parts = [f"{n} {signals[n].reason}" for n in names if n in signals and not signals[n].ok]
    if len(parts) < len(names) and rec.message:
        # Some names are usable signals the policy still could not use (e.g. no ready pod): it says why.
        parts.append(rec.message)
    return "; ".join(parts) if parts else rec.message


def _scale_to_zero(
    compiled: CompiledPolicy,
    signals: dict[str, SignalValue],
    current: int,
    recommended: int,
    state: PolicyState,
    now: float,
) -> tuple[int, Reason | None, str, PolicyState]:
    """KEDA-style activation: 0→1 above the threshold; to 0 after ``idleSeconds`` at or below it.

    Returns the (possibly replaced) recommendation, the reason when scale-to-zero decided, and the state
    (which tracks since when the target has been idle).
    """
    stz = compiled.policy.spec.scale_to_zero
    if not stz.enabled or stz.activation is None:
        return recommended, None, "", state
    act = signals[stz.activation.signal]
    if not act.ok or act.value is None:
        # Unknown activation never scales to zero, and it interrupts an idle period.
        return recommended, None, "", replace(state, idle_since=None)
    name, thr = stz.activation.signal, stz.activation.threshold
    if act.value > thr:
        state = replace(state, idle_since=None)
        if current == 0:
            # As KEDA: straight to minReplicas (at least 1) or what the policy asks for, within maxReplicas;
            # this path skips the behavior stage, so the bounds are applied here.
            spec = compiled.policy.spec
            activated = min(spec.max_replicas, max(spec.min_replicas, 1, recommended))
            return activated, Reason.ACTIVATE_FROM_ZERO, (
                f"activating from zero: {name} {act.value:g} > activation threshold {thr:g}; "
                f"{activated} replica(s)"
            ), state
        return recommended, None, "", state
    idle_since = state.idle_since if state.idle_since is not None else now
    state = replace(state, idle_since=idle_since)
    if current == 0:
        return 0, Reason.STEADY, f"staying at zero: {name} {act.value:g} ≤ activation threshold {thr:g}", state
    if now - idle_since >= stz.idle_seconds:
        return 0, Reason.SCALE_TO_ZERO, (
            f"scaling to zero: {name} {act.value:g} ≤ activation threshold {thr:g} for {now - idle_since:.0f}s "
            f"(idleSeconds {stz.idle_seconds:g})"
        ), state
    return recommended, None, "", state
