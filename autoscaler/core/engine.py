"""``decide``: one evaluation of one policy, the same in the cluster, in replay and in simulation.

Steps, in order:
  1. judge every signal (``signals``): usable, or unknown with a reason;
  2. the policy type recommends a raw replica count (``policies``);
  3. unknown → hold the current count, or fall back after N consecutive failures (KEDA's fallback);
  4. scale-to-zero, only when enabled, with an activation threshold and an idle period;
  5. HPA ``behavior``: stabilization windows, rate policies, min/max (``behavior``);
  6. capacity: training to deactivate or reactivate for the count (``arbitration``).
"""

from __future__ import annotations

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
from autoscaler.core.spec import FallbackSpec, ScalingPolicy


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
    ctx = Context(now=now, target=observation.target, replicas=observation.replicas, signals=signals, spec=spec)
    rec, algorithm_state = compiled.algorithm.recommend(ctx, state.algorithm)
    state = replace(state, algorithm=algorithm_state, last_decision_time=now)

    def scale(desired: int, reason: Reason, message: str) -> ScaleDecision:
        return ScaleDecision(observation.target, current, desired, reason, message, signals)

    if rec.replicas is None:
        failures = state.consecutive_failures + 1
        state = replace(state, consecutive_failures=failures)
        fallback = spec.metric_safety.fallback
        why = _unknown_summary(rec, signals)
        if fallback is not None and failures >= fallback.failure_threshold:
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

    norm = behavior.normalize(
        behavior=getattr(spec.policy, "behavior", None) if compiled.algorithm.uses_behavior else None,
        min_replicas=max(spec.min_replicas, 1),
        max_replicas=spec.max_replicas,
        current=current,
        recommended=recommended,
        state=state,
        now=now,
    )
    state = norm.state
    desired = norm.desired
    if norm.reason is not None:
        reason = norm.reason
        message = f"{message}; {norm.message}" if norm.message else message
    elif desired == current and reason in (Reason.SCALE_UP, Reason.SCALE_DOWN):
        reason = Reason.STEADY

    decisions: list[Decision] = []
    if spec.capacity is not None and observation.quota is not None:
        plan = arbitration.plan(spec=spec, observation=observation, desired=desired)
        decisions.extend(plan.training)
        if plan.desired != desired:
            desired, reason, message = plan.desired, Reason.WAITING_FOR_CAPACITY, f"{message}; {plan.message}"
    decisions.insert(0, scale(desired, reason, message))
    return _finish(decisions, state, now, current, desired)


def _finish(
    decisions: list[Decision], state: PolicyState, now: float, current: int, desired: int
) -> tuple[list[Decision], PolicyState]:
    """Record a scale event (HPA's rate policies count them) when the decision changes the count."""
    if desired > current:
        state = replace(state, scale_up_events=(*state.scale_up_events, (now, desired - current)), last_scale_time=now)
    elif desired < current:
        state = replace(
            state, scale_down_events=(*state.scale_down_events, (now, current - desired)), last_scale_time=now
        )
    return decisions, state


def _unknown_summary(rec: Recommendation, signals: dict[str, SignalValue]) -> str:
    names = rec.unknown_signals or tuple(n for n, v in signals.items() if not v.ok)
    parts = [f"{n} {signals[n].reason}" if n in signals else n for n in names]
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
            return max(1, recommended), Reason.ACTIVATE_FROM_ZERO, (
                f"activating from zero: {name} {act.value:g} > activation threshold {thr:g}"
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
