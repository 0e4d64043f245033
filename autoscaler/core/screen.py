"""Screens: whether a reading could change a policy's decision at all, answered without deciding.

The controller's probes screen every policy about once a second (thousands a second at 5,000 policies), and
nearly every screen changes nothing. ``engine.decide`` answers that with its whole sentence (history, rate
limits, messages with numbers, a new state); ``quiet`` answers only "surely no change", from the judged
signals and the policy type's own count rule (``PolicyAlgorithm.holds``): a type whose raw recommendation
stays the current count for this reading, whatever the history.

Why the history cannot matter then (HPA's behavior stage): the scale-up stabilization takes the lowest and the
scale-down stabilization the highest recommendation of their windows, this one included, so with this one at
the current count the stabilized count is the current count; rate limits only bound a change; the count is
within [min, max] (checked). What else in ``decide`` may change a count is ruled out before the type is asked:
capacity arbitration (training decisions), scale-to-zero (an idle timer), several targets (a joint plan), a
signal unknown (fallback counts), a count outside [min, max].

HPA's legacy path (a type that uses the behavior stage, without a ``behavior`` block) holds at the highest
recommendation of its 300 s window, which may be above the current count (the property test found that one):
there ``quiet`` needs the policy's state and answers True only when no recommendation it remembers is above
the current count (then the window's highest, this one included, is the current count, and the legacy path's
scale-up limit of max(2 × current, 4) and [min, max] leave it). Without the state it answers False.

``quiet`` is conservative: False means "decide", never "it will change". ``tests/core/test_screen.py`` checks,
on drawn policies, readings and states, that a quiet observation's ``decide`` never acts and that each type's
``holds`` is exactly "its recommendation is the current count".
"""

from __future__ import annotations

from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import Observation, PolicyState
from autoscaler.core.policies.base import Context


def screened(compiled: CompiledPolicy) -> bool:
    """Whether ``quiet`` can ever answer True for this policy (else a screen always decides)."""
    spec = compiled.policy.spec
    algorithm = compiled.algorithm
    return (
        getattr(algorithm, "holds", None) is not None
        and not getattr(algorithm, "joint", False)
        and spec.capacity is None
        and not spec.scale_to_zero.enabled
        and not spec.pools()
    )


def legacy(compiled: CompiledPolicy) -> bool:
    """HPA's legacy path: a type that uses the behavior stage, without a ``behavior`` block."""
    return compiled.rules is None and bool(compiled.algorithm.uses_behavior)


def quiet(compiled: CompiledPolicy, observation: Observation, now: float, state: PolicyState | None = None) -> bool:
    """True only when ``decide(compiled, observation, state, now)`` changes nothing: every signal the policy
    reads known, the count within [min, max], and the type's raw recommendation the current count; on HPA's
    legacy path also no recommendation in ``state`` above the current count (False without ``state``). For
    any state otherwise."""
    if not screened(compiled):
        return False
    spec = compiled.policy.spec
    current = observation.replicas.spec
    if current < max(spec.min_replicas, 1) or current > spec.max_replicas:
        return False
    if legacy(compiled) and (state is None or any(count > current for _, count in state.recommendations)):
        return False  # the window's highest recommendation may be above the current count: decide says
    readings = compiled.judge.combine(observation.signals, observation.replicas, now)
    signals = compiled.judge.judge_all(readings, now)
    if not all(signals[name].ok for name in compiled.triggers):
        return False  # decide would count it (fallback) and hold: that is its sentence to say
    per_replica = {
        name: reading.per_replica
        for name, reading in readings.items()
        if reading.per_replica is not None and name in signals and signals[name].ok
    }
    ctx = Context(now, observation.target, observation.replicas, signals, spec, per_replica)
    return bool(compiled.algorithm.holds(ctx))  # type: ignore[attr-defined]
