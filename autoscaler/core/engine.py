"""``decide``: one evaluation of one policy, the same in the cluster, in replay and in simulation.

Steps, in order:
  1. combine per-pod readings into the target's (only fresh samples of ready pods, unknown when some ready pods
     did not report: ``signals.combine_pods``), then judge every signal (``signals``): usable, or unknown with a
     reason;
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

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from autoscaler.core import arbitration, behavior, expressions, policies, topology
from autoscaler.core.model import (
    NO_OBSERVATIONS,
    Ahead,
    Decision,
    DeferredScale,
    Observation,
    PolicyState,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SignalValue,
)
from autoscaler.core.policies import disaggregated
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.policies.hpa import BehaviorSpec
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import FallbackSpec, ScalingPolicy, SignalSpec, Spec


@dataclass(frozen=True)
class CompiledPolicy:
    """A validated policy ready to evaluate: its algorithm and signal judge are built once.

    ``rules`` are the policy's effective HPA ``behavior`` rules (scale-up, scale-down), also read once; None
    when it has no ``behavior`` block (HPA's legacy path, for the types that use the behavior stage).
    """

    policy: ScalingPolicy
    algorithm: PolicyAlgorithm
    judge: SignalJudge
    rules: behavior.Directions | None = field(init=False, repr=False, compare=False)
    #: The signals the policy reads (its fallback triggers), each once, in the policy's order.
    triggers: tuple[str, ...] = field(init=False, repr=False, compare=False)
    #: ``metadata.name``, read once: the controller looks policies up by name tens of thousands of times a
    #: second at 5,000 policies, and each look through the pydantic models cost about a microsecond.
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = getattr(self.policy.spec.policy, "behavior", None)
        # Frozen dataclass: the derived fields are set once here.
        object.__setattr__(self, "rules", None if given is None else behavior.effective_rules(given))
        object.__setattr__(self, "triggers", tuple(dict.fromkeys(self.policy.spec.policy.signal_refs())))
        object.__setattr__(self, "name", self.policy.metadata.name)

    def decide(self, observation: Observation, state: PolicyState, now: float) -> Decided:
        return decide(self, observation, state, now)


class Decided(NamedTuple):
    """``decide``'s result: the decisions of one evaluation (the scale decision first) and the policy's next state."""

    decisions: list[Decision]
    state: PolicyState


class _Chosen(NamedTuple):
    """A count some step settled on, with its reason and the sentence that explains it."""

    replicas: int
    reason: Reason
    message: str


class _Explained(NamedTuple):
    """A decision's reason and message, as a step may rewrite them."""

    reason: Reason
    message: str


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


class _Next:
    """The state one evaluation builds, field by field as ``PolicyState``; frozen once, when it returns.

    Local to one ``decide`` call (never stored): it spares copying the frozen state at every step.
    """

    __slots__ = (
        "algorithm",
        "deferred",
        "demand",
        "idle_since",
        "last_decision_time",
        "last_scale_time",
        "recommendations",
        "scale_down_events",
        "scale_up_events",
        "signal_failures",
    )

    def __init__(self, state: PolicyState, algorithm: object | None, now: float) -> None:
        self.recommendations = state.recommendations
        self.scale_up_events = state.scale_up_events
        self.scale_down_events = state.scale_down_events
        self.signal_failures = state.signal_failures
        self.last_decision_time = now
        self.last_scale_time = state.last_scale_time
        self.idle_since = state.idle_since
        self.algorithm = algorithm
        self.deferred = state.deferred
        self.demand = state.demand

    def freeze(self) -> PolicyState:
        return PolicyState(
            recommendations=self.recommendations,
            scale_up_events=self.scale_up_events,
            scale_down_events=self.scale_down_events,
            signal_failures=self.signal_failures,
            last_decision_time=self.last_decision_time,
            last_scale_time=self.last_scale_time,
            idle_since=self.idle_since,
            algorithm=self.algorithm,
            deferred=self.deferred,
            demand=self.demand,
        )


def decide(
    compiled: CompiledPolicy, observation: Observation, state: PolicyState, now: float
) -> Decided:
    """Evaluate ``compiled`` on ``observation`` at time ``now``; return the decisions and the new state."""
    if getattr(compiled.algorithm, "joint", False):
        return _decide_joint(compiled, observation, state, now)
    spec = compiled.policy.spec
    current = observation.replicas.spec
    readings = compiled.judge.combine(observation.signals, observation.replicas, now)
    signals = compiled.judge.judge_all(readings, now)
    per_replica = {
        name: reading.per_replica
        for name, reading in readings.items()
        if reading.per_replica is not None and name in signals and signals[name].ok
    }
    eviction = (
        None if spec.capacity is None else arbitration.handoff_eviction_s(spec.capacity, observation.training, now)
    )
    algorithm = compiled.algorithm
    reacquire = (
        arbitration.reacquire(capacity=spec.capacity, quota=observation.quota, training=observation.training,
                              replicas=observation.replicas, target=observation.target.key,
                              max_replicas=spec.max_replicas, now=now)
        if spec.capacity is not None and observation.quota is not None and getattr(algorithm, "prices_release", False)
        else None
    )
    ctx = Context(now, observation.target, observation.replicas, signals, spec, per_replica, eviction, reacquire)
    rec, algorithm_state = algorithm.recommend(ctx, state.algorithm)
    nxt = _Next(state, algorithm_state, now)
    if algorithm.uses_behavior and not nxt.recommendations:
        nxt.recommendations = ((now, current),)

    def scale(desired: int, reason: Reason, message: str) -> ScaleDecision:
        return ScaleDecision(observation.target, current, desired, reason, message, signals)

    # KEDA's fallback is per trigger: every signal the policy reads counts its own consecutive unknown
    # evaluations, and one usable reading resets it. Counted at every evaluation, whatever is decided.
    nxt.signal_failures = _count_failures(state.signal_failures, compiled.triggers, signals)
    fallback = spec.metric_safety.fallback
    # HPA does nothing at 0 replicas, so neither does KEDA's fallback (it is a metric value fed to HPA): a
    # target at zero is woken by its activation signal only.
    falling = _falling(fallback, nxt.signal_failures) if current > 0 else ()

    out_of_range = _out_of_range(spec, current)
    if out_of_range is not None:
        return _arbitrate(compiled, observation, nxt, now, scale, out_of_range.replicas, out_of_range.reason,
                          out_of_range.message, ahead=rec.ahead)

    if rec.replicas is None and not falling:
        why = _unknown_summary(rec, signals)
        stz = spec.scale_to_zero
        if stz.activation is not None and not signals[stz.activation.signal].ok:
            # An unknown activation signal interrupts an idle period: idle must be known for idleSeconds.
            nxt.idle_since = None
        if current == 0:
            # As KEDA, a known active activation signal wakes the target even if the policy's own signals
            # are unknown (an erroring trigger does not veto another's activity); it only ever scales up.
            woken = _scale_to_zero(compiled, signals, current, 0, nxt, now)
            if woken is not None and woken.reason is Reason.ACTIVATE_FROM_ZERO:
                msg = f"{woken.message}; sized without the policy's unknown signals: {why}"
                return _finish([scale(woken.replicas, woken.reason, msg)], nxt, now, current, woken.replicas)
        msg = f"holding {current} replicas: {why} (unknown is never read as idle)"
        return Decided([scale(current, Reason.METRICS_UNKNOWN, msg)], nxt.freeze())

    if falling:
        assert fallback is not None  # _falling returns nothing without one
        chosen = _with_fallback(fallback, falling, rec, current, signals)
        recommended, reason, message = chosen.replicas, chosen.reason, chosen.message
    else:
        assert rec.replicas is not None  # the unknown case returned above
        recommended, reason, message = rec.replicas, rec.reason, rec.message
    zero = _scale_to_zero(compiled, signals, current, recommended, nxt, now)
    # KEDA scales to zero only when no trigger is in error; a falling-back trigger keeps the target up.
    if zero is not None and not (zero.reason is Reason.SCALE_TO_ZERO and falling):
        return _finish([scale(zero.replicas, zero.reason, zero.message)], nxt, now, current, zero.replicas)

    if not algorithm.uses_behavior:
        # Types without the behavior stage smooth inside their own algorithm, which a fallback count bypasses:
        # it goes through HPA's default behavior instead (5-minute scale-down stabilization, 100 % per 15 s
        # down, 4 pods or 100 % per 15 s up), with a history kept only while falling back.
        if falling:
            staged = behavior.stage(
                rules=_DEFAULT_RULES,
                min_replicas=max(spec.min_replicas, 1),
                max_replicas=spec.max_replicas,
                current=current,
                recommended=recommended,
                state=state,
                now=now,
                recommendations=nxt.recommendations or ((now, current),),
            )
            nxt.recommendations = staged.recommendations
            return _finish_stage(compiled, observation, nxt, now, scale, current, staged, reason, message,
                                 ahead=rec.ahead)
        nxt.recommendations = ()

    normalized: behavior.Staged | behavior.Bounded
    if algorithm.uses_behavior:
        normalized = staged = behavior.stage(
            rules=compiled.rules,
            min_replicas=max(spec.min_replicas, 1),
            max_replicas=spec.max_replicas,
            current=current,
            recommended=recommended,
            state=state,
            now=now,
            recommendations=nxt.recommendations,
        )
        nxt.recommendations = staged.recommendations
    else:
        normalized = behavior.bound(
            min_replicas=max(spec.min_replicas, 1), max_replicas=spec.max_replicas, recommended=recommended
        )
    return _finish_stage(compiled, observation, nxt, now, scale, current, normalized, reason, message,
                         ahead=rec.ahead)


def _finish_stage(
    compiled: CompiledPolicy,
    observation: Observation,
    nxt: _Next,
    now: float,
    scale: Callable[[int, Reason, str], ScaleDecision],
    current: int,
    normalized: behavior.Staged | behavior.Bounded,
    reason: Reason,
    message: str,
    *,
    ahead: Ahead | None = None,
) -> Decided:
    """The behavior stage's (or the bounds') count, with its reason and note when it changed the recommendation."""
    desired = normalized.desired
    if normalized.reason is not None:
        reason = normalized.reason
        message = f"{message}; {normalized.message}" if normalized.message else message
    elif desired == current and reason in (Reason.SCALE_UP, Reason.SCALE_DOWN):
        reason = Reason.STEADY
    return _arbitrate(compiled, observation, nxt, now, scale, desired, reason, message, ahead=ahead)


#: HPA's default behavior, for the fallback counts of types without a behavior stage.
_DEFAULT_RULES = behavior.effective_rules(BehaviorSpec())


def _count_failures(
    previous: tuple[tuple[str, int], ...], triggers: tuple[str, ...], signals: dict[str, SignalValue]
) -> tuple[tuple[str, int], ...]:
    """Each trigger's run of unknown evaluations, this one included (usable triggers are left out: count 0).

    A histogram whose every ready pod reported fresh buckets holding no request in the window (``no
    observations``: no latency to take a quantile of, at night, between bursts) is not a failure: the pipeline
    answered, and KEDA's fallback is for a trigger in error. It stays unknown (never read as idle), and it
    resets the count as a usable reading does."""
    before = dict(previous)
    return tuple(
        (name, before.get(name, 0) + 1)
        for name in triggers
        if not signals[name].ok and not signals[name].reason.startswith(NO_OBSERVATIONS)
    )


def _falling(fallback: FallbackSpec | None, failures: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """The triggers whose failures *passed* ``failureThreshold`` (KEDA: ``NumberOfFailures > FailureThreshold``)."""
    if fallback is None:
        return ()
    return tuple((name, n) for name, n in failures if n > fallback.failure_threshold)


def _with_fallback(
    fallback: FallbackSpec,
    falling: tuple[tuple[str, int], ...],
    rec: Recommendation,
    current: int,
    signals: dict[str, SignalValue],
) -> _Chosen:
    """KEDA hands HPA, for each falling-back trigger, the metric value that makes HPA compute the fallback count;
    HPA takes the highest count over all triggers. So: the fallback count, or the count the usable triggers
    ask for when that is higher. Either then goes through the behavior stage like any recommendation."""
    count = _fallback_replicas(fallback, current)
    names = ", ".join(f"{name} ({signals[name].reason}; {n} evaluations)" for name, n in falling)
    text = (
        f"fallback ({fallback.behavior}) to {count}: unknown for more than failureThreshold "
        f"{fallback.failure_threshold} evaluations: {names}"
    )
    if rec.replicas is None and rec.usable_replicas is not None and rec.usable_replicas > count:
        return _Chosen(rec.usable_replicas, Reason.FALLBACK, f"{text}; the usable signals ask for more: {rec.message}")
    if rec.replicas is None:
        return _Chosen(count, Reason.FALLBACK, text)
    if rec.replicas > count:
        return _Chosen(rec.replicas, rec.reason, f"{rec.message}; higher than the {text}")
    return _Chosen(count, Reason.FALLBACK, f"{text}; the usable signals ask for {rec.replicas} ({rec.message})")


def _out_of_range(spec: Spec, current: int) -> _Chosen | None:
    """HPA's checks before any metric: what to do with a current count outside [min, max], else None."""
    if current == 0:
        if spec.scale_to_zero.enabled:
            return None  # scale-to-zero decides from the activation signal
        return _Chosen(0, Reason.SCALING_DISABLED, (
            "scaling is disabled since the target has 0 replicas and scaleToZero is not enabled "
            "(as HPA: a target scaled to zero by hand stays there)"
        ))
    if current > spec.max_replicas:
        return _Chosen(spec.max_replicas, Reason.LIMITED_BY_MAX, (
            f"{current} replicas is above maxReplicas {spec.max_replicas}: scaling to {spec.max_replicas}"
        ))
    if current < spec.min_replicas:
        return _Chosen(spec.min_replicas, Reason.LIMITED_BY_MIN, (
            f"{current} replicas is below minReplicas {spec.min_replicas}: scaling to {spec.min_replicas}"
        ))
    return None


def _arbitrate(
    compiled: CompiledPolicy,
    observation: Observation,
    nxt: _Next,
    now: float,
    scale: Callable[[int, Reason, str], ScaleDecision],
    desired: int,
    reason: Reason,
    message: str,
    *,
    ahead: Ahead | None = None,
) -> Decided:
    """Last step: capacity arbitration, then the scale decision first and the training decisions after it."""
    spec = compiled.policy.spec
    replicas = observation.replicas
    if spec.capacity is None or observation.quota is None:
        held = _admission_hold(replicas, desired, reason, message, "")
        if held is not None:
            reason, message = held.reason, held.message
        return _finish([scale(desired, reason, message)], nxt, now, replicas.spec, desired)
    if ahead is not None:
        ahead = dataclasses.replace(ahead, replicas=min(ahead.replicas, spec.max_replicas))
    # A scale-up deferred while its victims checkpoint stays wanted while the policy holds its count (had the
    # replicas started at once, the policy would keep them), within the wait's bound; a policy scaling down,
    # or a count reached, ends it.
    deferred = nxt.deferred
    bound = max(spec.capacity.checkpoint_request_seconds, spec.capacity.checkpoint_wait_seconds)
    if spec.capacity.wait_within_headroom and ahead is not None and ahead.headroom_s is not None:
        # Waiting within the policy's latency headroom: the arbitration ends the wait when the headroom does.
        bound = max(bound, ahead.headroom_s)
    if deferred is not None and (desired < replicas.spec or deferred.replicas <= max(desired, replicas.spec)
                                 or now - deferred.since > bound + spec.evaluation_period_seconds):
        deferred = None
    wanted = desired if deferred is None else min(deferred.replicas, spec.max_replicas)
    # How the policy's own count moves (not what the arbitration granted): the yield rule's variability.
    nxt.demand = arbitration.observe_demand(nxt.demand, desired, now)
    plan = arbitration.plan(spec=spec, observation=observation, desired=wanted, now=now, ahead=ahead,
                            demand=nxt.demand)
    nxt.deferred = (
        (deferred or DeferredScale(wanted, now)) if plan.waiting_for_checkpoint and plan.desired < wanted else None
    )
    if deferred is not None and plan.desired > desired:
        desired, reason, message = plan.desired, Reason.HANDOFF_AFTER_CHECKPOINT, (
            f"{message}; completing the scale-up to {deferred.replicas} deferred {now - deferred.since:.0f}s ago "
            f"while training checkpointed (the policy still holds its count)"
            + (f"; {plan.message}" if plan.message else ""))
    elif plan.desired > desired:
        desired, reason, message = plan.desired, Reason.HANDOFF_AHEAD, f"{message}; {plan.message}"
    elif plan.desired != desired:
        desired, reason, message = plan.desired, Reason.WAITING_FOR_CAPACITY, f"{message}; {plan.message}"
    elif deferred is not None and plan.desired < wanted:
        reason, message = Reason.WAITING_FOR_CAPACITY, (
            f"{message}; the scale-up to {deferred.replicas} deferred {now - deferred.since:.0f}s ago still waits: "
            f"{plan.message}")
    else:
        held = _admission_hold(replicas, desired, reason, message, plan.message)
        if held is not None:
            reason, message = held.reason, held.message
    decisions: list[Decision] = [scale(desired, reason, message), *plan.training]
    return _finish(decisions, nxt, now, observation.replicas.spec, desired)


#: Holds that replicas waiting for admission explain better (the others say something more pressing).
_ADMISSION_EXPLAINS = frozenset({Reason.STEADY, Reason.WITHIN_TOLERANCE, Reason.WAITING_FOR_STARTING,
                                 Reason.STABILIZING, Reason.RATE_LIMITED, Reason.LIMITED_BY_MAX})


def _admission_hold(
    replicas: ReplicaStatus, desired: int, reason: Reason, message: str, plan_message: str
) -> _Explained | None:
    """A hold while replicas wait for Kueue admission is ``WaitingForAdmission``: they are not starting (no
    capacity is on its way for them until Kueue admits them), and the message says what they wait for. None:
    the reason and message stand (the usual case, kept free of a record per evaluation)."""
    if replicas.gated <= 0 or desired != replicas.spec or reason not in _ADMISSION_EXPLAINS:
        return None
    text = (
        f"{replicas.gated} of {replicas.spec} replicas wait for Kueue admission (its scheduling gate: quota or "
        f"topology), not counted as starting"
    )
    return _Explained(Reason.WAITING_FOR_ADMISSION, "; ".join(p for p in (message, text, plan_message) if p))


def _finish(
    decisions: list[Decision], nxt: _Next, now: float, current: int, desired: int
) -> Decided:
    """Record a scale event (HPA's rate policies count them) when the decision changes the count.

    Events older than the longest period a rate policy may have are dropped: they can never count again.
    """
    horizon = now - _MAX_PERIOD_S
    ups = behavior.newer_than(nxt.scale_up_events, horizon)
    downs = behavior.newer_than(nxt.scale_down_events, horizon)
    if desired > current:
        ups = (*ups, (now, desired - current))
        nxt.last_scale_time = now
    elif desired < current:
        downs = (*downs, (now, current - desired))
        nxt.last_scale_time = now
    nxt.scale_up_events, nxt.scale_down_events = ups, downs
    return Decided(decisions, nxt.freeze())


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
    nxt: _Next,
    now: float,
) -> _Chosen | None:
    """KEDA-style activation: 0→1 above the threshold; to 0 after ``idleSeconds`` at or below it.

    Returns the count, reason and message when scale-to-zero decides, None when the recommendation stands;
    records in ``nxt`` since when the target has been idle.
    """
    stz = compiled.policy.spec.scale_to_zero
    if not stz.enabled or stz.activation is None:
        return None
    act = signals[stz.activation.signal]
    if not act.ok or act.value is None:
        # Unknown activation never scales to zero, and it interrupts an idle period.
        nxt.idle_since = None
        return None
    name, thr = stz.activation.signal, stz.activation.threshold
    if act.value > thr:
        nxt.idle_since = None
        if current == 0:
            # As KEDA: straight to minReplicas (at least 1) or what the policy asks for, within maxReplicas;
            # this path skips the behavior stage, so the bounds are applied here.
            spec = compiled.policy.spec
            activated = min(spec.max_replicas, max(spec.min_replicas, 1, recommended))
            return _Chosen(activated, Reason.ACTIVATE_FROM_ZERO, (
                f"activating from zero: {name} {act.value:g} > activation threshold {thr:g}; "
                f"{activated} replica(s)"
            ))
        return None
    idle_since = nxt.idle_since if nxt.idle_since is not None else now
    nxt.idle_since = idle_since
    if current == 0:
        return _Chosen(0, Reason.STEADY, f"staying at zero: {name} {act.value:g} ≤ activation threshold {thr:g}")
    if now - idle_since >= stz.idle_seconds:
        return _Chosen(0, Reason.SCALE_TO_ZERO, (
            f"scaling to zero: {name} {act.value:g} ≤ activation threshold {thr:g} for {now - idle_since:.0f}s "
            f"(idleSeconds {stz.idle_seconds:g})"
        ))
    return None


def _roles_with_groups(
    config: disaggregated.DisaggregatedPolicyConfig, members: Mapping[str, ReplicaStatus]
) -> set[str]:
    """The roles at least one of whose variants has a group (asked for or running)."""
    return {role for role, v in config.variants()
            if (m := members.get(v.target.ref().key)) is not None and (m.spec > 0 or m.ready > 0)}


def _zero_group_variant(
    config: disaggregated.DisaggregatedPolicyConfig, key: str, status: ReplicaStatus | None,
    serving_roles: set[str], combined: Mapping[str, SignalReading], now: float,
) -> dict[str, SignalReading]:
    """A variant at zero groups while another variant of its role serves (resize through variants: the
    2x4x4 LWS at 0 while 2x2x2 groups carry the role) has no pod to read, and serves nothing: its token rates,
    load gauges and latency quantiles read 0, not unknown, so a role-wide ``expr`` over the variants stays
    known: a sum of rates counts nothing from it, a ``max`` of latencies takes the serving variants' (0 is its
    neutral element). With no group in any variant of the role the readings stay unknown (nothing says where
    its requests wait), and a source error stays an error."""
    out = dict(combined)
    role = next((r for r, v in config.variants() if v.target.ref().key == key), None)
    if status is None or role is None or status.spec > 0 or status.ready > 0 or role not in serving_roles:
        return out
    for name, reading in combined.items():
        if reading.value is None and reading.error is None:
            out[name] = SignalReading(0.0, now, reading.source or "no group")
    return out


def _decide_joint(
    compiled: CompiledPolicy, observation: Observation, state: PolicyState, now: float
) -> Decided:
    """One evaluation of a policy with several targets (type ``disaggregated``): every pool's count from one
    plan, one capacity request for the chips of all of them, one ``ScaleDecision`` per target.

    1. each signal's per-pod samples are combined with the replicas of the target it reads (its ``pool``);
    2. a target whose replica status is missing holds every pool (nothing is decided on a partial picture);
    3. ``disaggregated.plan``: per-role need, mix per variant, the chip budget and ``spec.maxReplicas``
       (groups of all pools together), placement when the observation carries an inventory;
    4. with ``spec.capacity``: one ``arbitration.plan_chips`` request for the plan's chips; when less is
       granted, the plan is split again within what was granted (``fit_budget``), and the victims are one set.
       With a slice inventory, one ``arbitration.plan_slices`` request instead: every pool's new groups placed
       as whole slices of its own shape, the victims those whose stop frees such regions (least lost work).
    """
    spec = compiled.policy.spec
    config = spec.policy
    assert isinstance(config, disaggregated.DisaggregatedPolicyConfig)
    members: dict[str, ReplicaStatus] = dict(observation.members)
    members.setdefault(observation.target.key, observation.replicas)
    by_target: dict[str, dict[str, SignalReading]] = {}
    for sig in spec.signals:
        if sig.expr is None and sig.name in observation.signals:
            key = spec.signal_target(sig).ref().key
            by_target.setdefault(key, {})[sig.name] = observation.signals[sig.name]
    readings: dict[str, SignalReading] = dict(observation.signals)
    serving_roles = _roles_with_groups(config, members)
    for key, part in by_target.items():
        combined = compiled.judge.combine(part, members.get(key), now)
        readings.update(_zero_group_variant(config, key, members.get(key), serving_roles, combined, now))
    signals = compiled.judge.judge_all(readings, now)
    previous = state.algorithm if isinstance(state.algorithm, disaggregated.DisaggState) else None
    nxt = _Next(state, previous, now)
    refs = {name: t.ref() for name, t in spec.pools().items()}
    missing = sorted(r.key for r in refs.values() if r.key not in members)
    if missing:
        held = [
            ScaleDecision(ref, members[ref.key].spec, members[ref.key].spec, Reason.METRICS_UNKNOWN,
                          f"holding every pool: the replica status of {', '.join(missing)} is unknown", signals)
            for ref in refs.values() if ref.key in members
        ]
        return Decided(list(held), nxt.freeze())
    status = {
        name: disaggregated.VariantStatus(members[r.key].spec, members[r.key].ready, members[r.key].starting,
                                          members[r.key].gated)
        for name, r in refs.items()
    }
    # The flavor's slice inventory (the cluster's blocks and what holds them), when the controller read one:
    # the mix only takes variants whose new groups can be placed.
    slices = observation.quota.slices if observation.quota is not None else None
    inventory = slices.inventory if slices is not None else None
    fits = None
    room = None
    places = None
    # Without ``spec.capacity`` the policy stops no training: it asks, and Kueue admits or preempts by its own
    # priorities (as for a single-target policy without capacity), so the blocks do not bound the plan here.
    if isinstance(inventory, topology.Inventory) and spec.capacity is not None:
        costs: dict[str, float] = {}
        for w in observation.training:
            risk = arbitration.work_at_risk(w)
            if risk is not None:
                costs[w.key] = risk
                if w.uid:
                    costs[w.uid] = risk
        # As the arbitration sees it: training this controller may stop is preemptible, stopped training's
        # regions are being freed (the inventory as read marks none: in full blocks no new group would ever
        # "fit", and the joint policy never grew in the codelab simulation).
        # The grant's own view (``arbitration.sliced_view``): training Kueue evicts for a group of ours waiting
        # for admission is room, other targets' waiting groups hold free places, and our own groups that hold
        # no place yet are placed with the new ones, so the plan never counts on a place the grant will not give.
        assert observation.quota is not None
        assert slices is not None  # the inventory is the slices'
        shapes = {v.name: v.slice_topology for _, v in config.variants()}
        view = arbitration.sliced_view(spec.capacity, observation.quota, [
            arbitration.GroupAsk(r.key, topology.Shape.parse(shapes[n]), members[r.key].spec, members[r.key].spec,
                                 members[r.key].gated)
            for n, r in refs.items()
        ], observation.training, now)
        inventory = view.inventory
        pending = {n: max(0, members[r.key].spec - view.mine[r.key]) for n, r in refs.items()}
        fits = disaggregated.inventory_fit(config, inventory, costs, pending)
        # Which group a scale-down of each variant frees first, where the cluster says (rule 4b's make-room).
        order = {n: slices.removal_order[r.key] for n, r in refs.items() if r.key in slices.removal_order}
        room = disaggregated.inventory_room(config, inventory, costs, order, pending) if order else None
        places = disaggregated.Places(order, frozenset(o.key for o in inventory.occupants)) if order else None
    # The token counters' longest rate window: until it has filled, a fresh controller's rates ramp from
    # nothing and are no history (the forecast would read the ramp as a trend).
    rate_window = max((rate.window_seconds for n in config.signal_refs() if (rate := spec.signal(n).rate) is not None),
                      default=0.0)
    arriving = config.prefill.signals.arriving_prompt_tokens
    # Each role's latency quantile window (rule 1d: a quantile is evidence of the ready count once its window
    # holds no time before the count rose).
    latency_names: dict[disaggregated.Role, str | None] = {
        "prefill": config.prefill.signals.ttft, "decode": config.decode.signals.time_per_output_token}
    latency_windows: dict[disaggregated.Role, float] = {
        role: window for role, name in latency_names.items()
        if name is not None and (window := quantile_window(spec, name))
    }
    # Rule 0c: the share of requests that may wait for a decode slot is what the TTFT objective's quantile
    # leaves (a slot wait delays the first token): 1 − q.
    ttft_q = quantile_q(spec, config.prefill.signals.ttft) if config.prefill.signals.ttft is not None else None
    joint, nxt.algorithm = disaggregated.plan(
        config, signals, status, previous or disaggregated.DisaggState(), now,
        fits=fits, room=room, places=places, group_budget=spec.max_replicas, rate_window_s=rate_window,
        arrival_window_s=(signal_window(spec, arriving) or 0.0) if arriving is not None else 0.0,
        latency_windows=latency_windows, slot_wait_fraction=None if ttft_q is None else 1.0 - ttft_q,
    )
    planned = {c.name: c.desired for c in joint.counts}
    desired = dict(planned)
    current = {c.name: c.current for c in joint.counts}
    chips = {v.name: v.chips for _, v in config.variants()}
    training: tuple[Decision, ...] = ()
    limited = ""
    if spec.capacity is not None and observation.quota is not None:
        have = sum(current[n] * chips[n] for n in current)
        want = sum(planned[n] * chips[n] for n in planned)
        gated = sum(members[r.key].gated * chips[n] for n, r in refs.items())
        if slices is not None:
            # A slice inventory: each pool's new groups placed as whole slices of its own shape, the victims
            # chosen by the regions they free (one request, one victim set); what does not fit is held back
            # per pool, as placed, not split again by chips (a chip count would ignore where slices go).
            shapes = {v.name: v.slice_topology for _, v in config.variants()}
            placed = arbitration.plan_slices(
                capacity=spec.capacity, quota=observation.quota, training=observation.training, now=now,
                asks=[
                    arbitration.GroupAsk(
                        r.key, topology.Shape.parse(shapes[n]), current[n], planned[n], members[r.key].gated,
                        chips=float(chips[n]), label=n)
                    for n, r in refs.items()
                ],
            )
            training = placed.training
            desired = {n: placed.desired[r.key] for n, r in refs.items()}
            limited = placed.message
        else:
            grant = arbitration.plan_chips(
                capacity=spec.capacity, quota=observation.quota, training=observation.training,
                current=have, desired=want, gated=gated, now=now,
                waiting={r.key: members[r.key].gated for r in refs.values()},
            )
            training = grant.training
            if grant.desired < want:
                needs = {rn.role: rn for rn in joint.needs}
                desired = disaggregated.fit_budget(
                    config, planned, current, needs, chip_budget=grant.desired, group_budget=spec.max_replicas
                )
                limited = grant.message
    decisions: list[Decision] = []
    for count in joint.counts:
        ref = refs[count.name]
        want_n, got = planned[count.name], desired[count.name]
        message = f"{count.name}: {count.message}; together {joint.message}"
        if count.role in joint.held:
            reason = Reason.METRICS_UNKNOWN
        elif got < want_n:
            reason = Reason.WAITING_FOR_CAPACITY
            message += f"; {got} of {want_n} group(s) granted: {limited}"
        elif got > count.current:
            reason = Reason.SCALE_UP
        elif got < count.current:
            reason = Reason.SCALE_DOWN
        else:
            reason = Reason.STEADY
        decisions.append(ScaleDecision(ref, count.current, got, reason, message, signals))
    return Decided([*decisions, *training], nxt.freeze())


def quantile_window(spec: Spec, name: str) -> float | None:
    """The time a latency quantile covers: its ``quantile`` window; for an ``expr``, the longest window of the
    quantiles it names (its value may come from any of them); None when it names none."""
    return _window(spec, name, lambda s: s.quantile.window_seconds if s.quantile is not None else None, max)


def quantile_q(spec: Spec, name: str) -> float | None:
    """The quantile a latency signal reads (its ``quantile.q``); for an ``expr``, the lowest of the quantiles it
    names (the one with the largest share of requests above it); None when it names none."""
    return _window(spec, name, lambda s: s.quantile.q if s.quantile is not None else None, min)


def signal_window(spec: Spec, name: str) -> float | None:
    """The time a signal's value averages over: its ``rate`` window; for an ``expr``, the shortest window of the
    signals it names (the finest time scale it carries); None for a gauge or a quantile."""
    return _window(spec, name, lambda s: s.rate.window_seconds if s.rate is not None else None, min)


def _window(
    spec: Spec, name: str, own: Callable[[SignalSpec], float | None], pick: Callable[[list[float]], float],
    depth: int = 0,
) -> float | None:
    """A signal's ``own`` window, or for an ``expr`` the one ``pick`` chooses among those of the signals it
    names; the descent stops at the number of signals (no expression chain is longer)."""
    sig = spec.signal(name)
    got = own(sig)
    if got is not None or sig.expr is None or depth > len(spec.signals):
        return got
    found = [w for n in sorted(expressions.names(expressions.parse(sig.expr)))
             if (w := _window(spec, n, own, pick, depth + 1)) is not None]
    return pick(found) if found else None

