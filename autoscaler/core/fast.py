"""The speed tricks of replay, simulation and policy loading, in one place, each with the plain equivalent it
stands for (``tests/core/test_fastpaths.py`` checks they agree; ``bench/fastpaths.py`` measures what each buys).

- ``quick_init``: a faster ``__init__`` for frozen, slotted dataclasses built hundreds of thousands of times;
- ``collector_paused``: the cyclic garbage collector off while a loop builds many long-lived objects that form
  no reference cycles (each collection would traverse all of them again as they pile up), and what the block
  built handed to the oldest generation when it ends (``gc.freeze`` then ``gc.unfreeze``);
- ``settle_long_lived``: what a long-running process holds after loading its policies (thousands of policy
  models and compiled policies) taken out of the cyclic collector's traversals (``gc.freeze``), after one full
  collection; the controller calls it after each load that changed the policy set;
- ``freeze_survivors``: what survived a probe round frozen as well (constant time), with a settle once the
  frozen set grew by a quarter since the last one;
- ``shared_default``: a frozen model's default built once and shared (``spec.Spec``'s defaults, ``slo``'s);
- ``memoized``: a bounded cache of a pure function of hashable arguments (policy expressions parsed once per
  text, however many validators and policies ask; the ``slo`` type's bisections, the prefill utilization at the
  objective (``sizing._utilization_at_objective``) and the Poisson occupancy of the slots
  (``slo.occupancy_at_objective``), asked again each evaluation with the same window's numbers; a spec model
  class's number fields, ``specbase._number_fields``);
- ``hpa_decider``: ``engine.decide`` fused for an ``hpa`` policy's usual evaluation (every signal known, no
  per-pod samples, no capacity), returning None for anything else so that the caller calls ``decide``.
- ``hpa_scan``: ``hpa_decider`` over a stretch of evaluations at once (``HpaScan``, numpy), for an ``hpa`` policy
  without ``behavior`` where the replica status is known ahead (replay's recorded mode); ``usable`` says where.

Nothing else in the project disables the collector, freezes it, rewrites an ``__init__``, caches a parse or
short-cuts ``decide``, and nothing else in ``core`` memoizes (``tests/core/test_fastpaths.py`` checks both).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from autoscaler.core.engine import CompiledPolicy
    from autoscaler.core.model import Decision, Observation, PolicyState, Reason, SignalValue

_T = TypeVar("_T", bound="DataclassInstance")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (shown as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NO_DEFAULT = _Factory()


def quick_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` that fills its slots through their descriptors.

    The ``__init__`` ``dataclass`` generates for a frozen class calls ``object.__setattr__`` once per field,
    which makes building one of these small objects cost several times a mutable one; replay and simulation
    build hundreds of thousands. Setting the slots through their member descriptors does the same thing at
    about half the cost. Same signature, defaults and default factories, same object: only for classes without
    ``__post_init__``, ``InitVar`` or keyword-only fields (checked here). Public: the policy types' ``Context`` and
    ``Recommendation`` and the replay's ``Step``, also built once per evaluation, use it too.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init is for frozen, slotted dataclasses without __post_init__")
    namespace: dict[str, Any] = {"_NO_DEFAULT": _NO_DEFAULT}
    args: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init supports plain positional fields only")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_NO_DEFAULT")
            body.append(f"    if {f.name} is _NO_DEFAULT:\n        {f.name} = _factory_{f.name}()")
        else:
            args.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    exec(f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body) + "\n", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 (mypy forbids assigning a method)
    return cls


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, back as it was after (also on an exception).

    Reference counting still frees everything that is not in a cycle; cycles made inside the block are
    collected once it ends. For loops that build many objects and keep them (replay rows, loaded policies)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # Everything the block allocated sits in the youngest generation: the first collection after it
            # would traverse all of it (0.3-0.5 s for 5,000 policies), and the next ones again as it ages.
            # freeze + unfreeze moves every tracked object into the oldest generation in constant time (it
            # splices lists); nothing is leaked: garbage cycles there are freed at the next full collection,
            # which the collector's own rule (pending > 25 % of the long-lived) schedules as always.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def settle_long_lived() -> int:
    """One full collection, then every object the process holds now moved out of the collector's generations
    (``gc.freeze``): no later collection traverses them again.

    Why (bench/controller_reaction.py at 5,000 policies, 2026-12-01): the controller holds ~600,000 tracked
    objects for its policies, and each probe round promotes thousands of short-lived ones (readings, kept
    views) to the oldest generation, so a full collection ran every few seconds over all of them: 2.9 s of the
    process's 6.5 s of CPU in 30 s, 44 %. Frozen, the policies are still freed by reference counting when a
    reload drops them; only a garbage *cycle* among them waits for the next ``settle_long_lived``, which first
    unfreezes everything and collects (so a reload that replaces the policies leaks nothing for longer than
    until it settles). The plain equivalent is not calling it: the same objects, traversed at every full
    collection. ``collector_paused`` unfreezes what was frozen (its freeze + unfreeze moves the whole permanent
    generation to the oldest), so a caller settles again after a block that loads. Returns how many objects
    it froze (``freeze_survivors`` measures growth against it)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


#: The frozen set may grow by this share of what the last settle froze before ``freeze_survivors`` settles
#: again: CPython's own rule for a full collection (the objects promoted since the last one above 25 % of the
#: long-lived), applied to what survived the rounds instead of to every promotion.
REGROW = 0.25


def freeze_survivors(settled: int, *, measure: bool = True) -> int:
    """After a probe round: what survived it taken out of the collector's traversals as well (``gc.freeze``, a
    list splice), unless the frozen set has grown by more than ``REGROW`` of ``settled`` (what the last settle
    froze), in which case ``settle_long_lived`` instead. Returns the frozen count of the last settle. Counting
    the frozen set walks it (≈ 20 ms for 700,000 objects at load 5), so a caller freezing every second
    measures only now and then (``measure``).

    Why (bench/controller_reaction.py at N = 4,999, 2026-12-01 18:37-18:43 UTC, load 4-6, gc callbacks): after
    the load's settle, every state, kept view, outcome and connection the rounds replace sits unfrozen in the
    oldest generation, and each bulk read of 5,000 target views promotes a few hundred thousand more, so a full
    collection ran every 2-3 s over all of them: 150 in 350 s, each 0.2-1.2 s of wall time with the event loop
    held (and growing), 127 of them collecting nothing and all of them together about 5,000 objects. What
    survives a round is freed by reference counting when it is replaced, frozen or not; only a garbage
    *cycle* made by the rounds waits, until the frozen set has grown by a quarter (the bound the collector's own
    rule puts on uncollected garbage), when one settle collects it. The plain equivalent is not calling it."""
    gc.freeze()
    if measure and gc.get_freeze_count() > settled * (1 + REGROW):
        return settle_long_lived()
    return settled


def memoized(maxsize: int) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """``functools.lru_cache(maxsize)``: for pure functions whose result is never mutated by a caller.

    Exceptions are not cached (a refused input is refused again, with the same message). The plain equivalent
    is calling the function each time; ``tests/core/test_fastpaths.py`` checks the answers agree."""

    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        cached: Any = functools.lru_cache(maxsize=maxsize)(fn)
        return functools.update_wrapper(cast(Callable[_P, _R], cached), fn)

    return wrap


def shared_default(make: Callable[[], _R]) -> Callable[[], _R]:
    """A ``default_factory`` that calls ``make`` once, on first use, and gives that one value to every model that
    takes the default: for a frozen model whose fields hold no mutable value (nothing can then change the one
    value under another policy). Loading thousands of policies, each default of ``Spec`` built anew was a full
    validation of an empty model per policy and default. The plain equivalent is ``make`` itself
    (``tests/core/test_fastpaths.py`` checks the values are equal and hold nothing mutable)."""
    made: list[_R] = []

    def default() -> _R:
        if not made:
            made.append(make())
        return made[0]

    return default


#: ``decide`` for one policy, or None where the fast path does not apply (the caller then calls ``decide``).
FastDecide = Callable[["Observation", "PolicyState", float], "tuple[list[Decision], PolicyState] | None"]


def hpa_decider(compiled: CompiledPolicy) -> FastDecide | None:
    """``engine.decide`` for an ``hpa`` policy, fused for the usual evaluation: every signal a fresh, finite,
    non-negative aggregate (no per-pod samples), the current count within [min, max], no pod waiting for
    admission and no capacity block, no composite signal and no scale-to-zero. It returns None for anything else
    (and for a scale-up with starting replicas, where HPA's unready-pod adjustment applies), before it has
    decided anything: the caller then calls ``decide``, the plain path it stands for.

    Same decisions, messages and state as ``decide`` (``tests/core/test_fast_decide.py`` compares the two over
    random policies and observation sequences, and checks how often this path is taken): it calls the same
    formatting and behavior-stage functions, and skips what cannot apply here — the readings' combination
    (no per-pod samples), the ``Context``, the fallback counts (no unknown signal), range and scale-to-zero
    checks, arbitration (no capacity) and the per-call closures. None when the policy is not of that kind.
    """
    # Imported here: this module is imported by the policy types' base (``quick_init``), which the engine imports.
    from autoscaler.core import behavior, engine  # noqa: PLC0415
    from autoscaler.core.model import PolicyState as State  # noqa: PLC0415
    from autoscaler.core.model import Reason, ScaleDecision, SignalState, SignalValue  # noqa: PLC0415
    from autoscaler.core.policies import hpa  # noqa: PLC0415
    from autoscaler.core.signals import FUTURE_SKEW_S, MAX_READING  # noqa: PLC0415

    algorithm = compiled.algorithm
    spec = compiled.policy.spec
    stz = spec.scale_to_zero
    if (
        type(algorithm) is not hpa.HpaAlgorithm
        or spec.capacity is not None
        or (stz.enabled and stz.activation is not None)
        or any(s.expr is not None for s in spec.signals)
    ):
        return None
    plan = [(name, max_age) for name, max_age, _ in compiled.judge._plan]  # the judge's own order
    names = {name for name, _ in plan}
    metrics = []
    for metric in algorithm.metrics:
        if metric.signal not in names:
            return None
        metrics.append((metric, spec.signal(metric.signal).scope == "perReplica"))
    tol = algorithm.tolerances
    low, high = tol.low, tol.high
    several = len(metrics) > 1
    count_of = f" (highest of {len(metrics)} metrics; "
    min_replicas, max_replicas = spec.min_replicas, spec.max_replicas
    floor = max(min_replicas, 1)
    rules = compiled.rules
    ok = SignalState.OK
    ceil = math.ceil
    milli = hpa.milli
    explain = hpa._explain  # the same sentences as the algorithm's
    up, down, steady, within_tolerance = Reason.SCALE_UP, Reason.SCALE_DOWN, Reason.STEADY, Reason.WITHIN_TOLERANCE
    horizon_s = engine._MAX_PERIOD_S  # the engine's own horizon
    newer_than = behavior.newer_than
    stage = behavior.stage

    def fast(observation: Observation, state: PolicyState, now: float) -> tuple[list[Decision], PolicyState] | None:
        replicas = observation.replicas
        current = replicas.spec
        if (
            current < floor or current > max_replicas or current < min_replicas
            or replicas.gated or replicas.pods is not None
        ):
            return None
        readings = observation.signals
        signals: dict[str, SignalValue] = {}
        for name, max_age in plan:  # judge_all's usual case, and only that
            reading = readings.get(name)
            if reading is None or reading.error is not None or reading.per_replica is not None:
                return None
            value, stamp = reading.value, reading.timestamp
            if value is None or stamp is None or not 0.0 <= value <= MAX_READING:
                return None
            age = now - stamp
            if not -FUTURE_SKEW_S <= age <= max_age:
                return None
            signals[name] = SignalValue(name, ok, float(value), "", age if age >= 0.0 else 0.0, reading.source)

        # HpaAlgorithm.recommend with every metric known (the highest count, the first on ties).
        ready, starting = replicas.ready, replicas.starting
        outcomes: list[hpa.MetricOutcome] = []
        best: hpa.MetricOutcome | None = None
        replicas_wanted = 0
        all_within = True
        for metric, per_replica in metrics:
            name, kind, target, target_text = metric.signal, metric.kind, metric.target, metric.target_text
            value = signals[name].value
            assert value is not None
            outcome: hpa.MetricOutcome
            if kind == "Pods":
                if ready == 0:
                    return None  # no ready replica: unknown
                total = milli(value) * ready if per_replica else milli(value)
                ratio = (total // ready) / target
                if starting and ratio > 1.0:
                    return None  # HPA's unready-pod adjustment: the plain path
                within = low <= ratio <= high
                count = current if within else ceil(ratio * ready)
                outcome = hpa.PodsOutcome(
                    name, count, within, "perReplica" if per_replica else "total", total, ready, 0, 0, target_text,
                    ratio, None, current,
                )
            elif kind == "Value":
                usage = milli(value)
                valued = hpa.value_replicas(current=current, ready=ready, usage=usage, target=target, tol=tol)
                count, ratio = valued.replicas, valued.ratio
                within = low <= ratio <= high  # current > 0 here
                outcome = hpa.ValueOutcome(name, count, within, usage, target_text, ratio, ready, current)
            else:
                usage = milli(value)
                counted = ready + starting
                averaged = hpa.average_value_replicas(status_replicas=counted, usage=usage, target=target, tol=tol)
                count, ratio = averaged.replicas, averaged.ratio
                within = low <= ratio <= high
                outcome = hpa.AverageOutcome(name, count, within, usage, target_text, ratio, counted, current)
            outcomes.append(outcome)
            if best is None or count > replicas_wanted:
                best, replicas_wanted = outcome, count
            all_within = all_within and within
        assert best is not None
        message = explain(best, tol)
        if several:
            others = ", ".join(f"{o.signal} → {o.replicas}" for o in outcomes if o is not best)
            message = f"{message}{count_of}{others})"
        if replicas_wanted > current:
            reason = up
        elif replicas_wanted < current:
            reason = down
        else:
            reason = within_tolerance if all_within else steady

        staged = stage(
            rules=rules, min_replicas=floor, max_replicas=max_replicas, current=current,
            recommended=replicas_wanted, state=state, now=now,
            recommendations=state.recommendations or ((now, current),),
        )
        desired = staged.desired
        if staged.reason is not None:
            reason = staged.reason
            if staged.message:
                message = f"{message}; {staged.message}"
        elif desired == current and (reason is up or reason is down):
            reason = steady
        horizon = now - horizon_s
        ups = newer_than(state.scale_up_events, horizon)
        downs = newer_than(state.scale_down_events, horizon)
        last_scale = state.last_scale_time
        if desired > current:
            ups = (*ups, (now, desired - current))
            last_scale = now
        elif desired < current:
            downs = (*downs, (now, current - desired))
            last_scale = now
        decision = ScaleDecision(observation.target, current, desired, reason, message, signals)
        return [decision], State(staged.recommendations, ups, downs, (), now, last_scale, state.idle_since,
                                 state.algorithm)

    return fast


class ScanInput(NamedTuple):
    """A stretch of consecutive evaluations for ``HpaScan``, one numpy array element per evaluation."""

    #: The evaluation times (float64), increasing.
    now: Any
    #: Per judged signal (the judge's order): the reading's value and its sample time (float64; NaN: none).
    values: tuple[Any, ...]
    stamps: tuple[Any, ...]
    #: The replica count set on the target, its ready and its starting replicas (int64).
    current: Any
    ready: Any
    starting: Any


class Scanned(NamedTuple):
    """``HpaScan.decide``'s result: each evaluation's decision, columnar (plain lists, one element an evaluation).
    Every signal of every evaluation is known (``ok``, no reason): that is what the scan decides."""

    current: list[int]
    desired: list[int]
    reasons: list[Reason]
    messages: list[str]
    #: Per judged signal: the value the decision holds and its age in seconds (``SignalValue.value``/``age_s``).
    values: tuple[list[float], ...]
    ages: tuple[list[float], ...]
    #: Whether a message may hold a quote, a backslash or a control character (what JSON escapes): only a
    #: metric's signal name could bring one (the sentences' words and numbers never do).
    escapes: bool = True
    #: Per judged signal: whether every age is a whole number of seconds (``decisions.jsonl`` rounds the others to
    #: milliseconds; a whole one is its own rounding). Empty: not known, each is looked at.
    whole_ages: tuple[bool, ...] = ()


#: A recommendation history as ``PolicyState.recommendations`` holds it: ``(time, recommended count)``.
History = tuple[tuple[float, int], ...]


class HpaScan:
    """``hpa_decider`` over a stretch of evaluations at once, for an ``hpa`` policy without a ``behavior`` block
    (HPA's legacy stabilization), with numpy: the replay's bulk path.

    Every evaluation ``hpa_decider`` decides depends on the ones before only through the recommendation history
    (the legacy stage reads no scale event), and each recommendation only on that evaluation's readings and
    replica status. So, where the replica status is known ahead (``recorded`` mode: the recorded count), a stretch
    of evaluations is decided in bulk: the metrics' counts, ratios and tolerance tests as arrays, the
    stabilization window's highest recommendation as a range maximum over the history (a sparse table), the
    scale-up cap and bounds as arrays; only the messages are formatted one by one, from the same sentences
    (``hpa._explain``'s, ``behavior._legacy``'s), each distinct number formatted once. Where the count is the
    policy's own (``whatif``), ``scan_own`` steps from one scale event to the next: between two the count is
    constant, so each stretch is decided in bulk up to the first evaluation whose desired count differs.

    ``usable`` says whether ``hpa_decider`` would decide every evaluation of a stretch (it returns None for
    none of them); the caller decides the stretch with ``decide`` per evaluation otherwise. The plain equivalent
    is ``hpa_decider`` (or ``decide``) called once per evaluation with the state carried:
    ``tests/replay/test_bulk.py`` compares the two, byte for byte, over random traces and policies.
    """

    def __init__(self, compiled: CompiledPolicy) -> None:
        from autoscaler.core import behavior  # noqa: PLC0415 - see hpa_decider
        from autoscaler.core.policies import hpa  # noqa: PLC0415

        algorithm = compiled.algorithm
        assert type(algorithm) is hpa.HpaAlgorithm
        spec = compiled.policy.spec
        self.plan = [(name, max_age) for name, max_age, _ in compiled.judge._plan]
        order = {name: j for j, (name, _) in enumerate(self.plan)}
        #: Per metric: (signal index in the plan, name, kind, target in milli-units, its text, per replica).
        self.metrics = [
            (order[m.signal], m.signal, m.kind, m.target, m.target_text, spec.signal(m.signal).scope == "perReplica")
            for m in algorithm.metrics
        ]
        self.tol = algorithm.tolerances
        self.min_replicas = spec.min_replicas
        self.max_replicas = spec.max_replicas
        self.floor = max(spec.min_replicas, 1)
        self.window_s = behavior.DEFAULT_DOWNSCALE_WINDOW_S
        self.escapes = any(c in '"\\' or c < " " for _, name, *_ in self.metrics for c in name)
        self._fmt = hpa._fmt
        self._n = hpa._n
        self._milli = hpa.milli

    # -- what the fast path decides ---------------------------------------------------------------------------

    def usable(self, inp: ScanInput) -> bool:
        """Whether ``hpa_decider`` decides every evaluation of ``inp`` (given its replica status)."""
        return bool(self.usable_at(inp).all())

    def usable_at(self, inp: ScanInput) -> Any:
        """Whether ``hpa_decider`` decides each evaluation of ``inp`` (given its replica status), a bool array:
        the count within bounds; every reading known, finite, not negative, within milli's exact range, fresh and
        not from the future; a Pods metric with a ready replica and no scale-up while replicas start."""
        import numpy as np  # noqa: PLC0415 - only the replay's bulk path needs numpy

        from autoscaler.core.signals import FUTURE_SKEW_S  # noqa: PLC0415

        now, current, ready, starting = inp.now, inp.current, inp.ready, inp.starting
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            ok = (current >= self.floor) & (current <= self.max_replicas) & (current >= self.min_replicas)
            for (_, max_age), value, stamp in zip(self.plan, inp.values, inp.stamps, strict=True):
                age = now - stamp
                # Known, finite, not negative, within milli's exact range; fresh, and not from the future.
                ok &= (value >= 0.0) & (value * 1000.0 < 4e15) & (age >= -FUTURE_SKEW_S) & (age <= max_age)
            for j, _name, kind, target, _text, per_replica in self.metrics:
                if kind != "Pods":
                    continue
                ok &= ready > 0
                milli = self._milli_array(np.where(ok, inp.values[j], 0.0))
                ratio = (milli if per_replica else milli // np.maximum(ready, 1)) / target
                ok &= ~((starting > 0) & (ratio > 1.0))  # HPA's unready-pod adjustment: the plain path
        return ok

    def _milli_array(self, values: Any) -> Any:
        """``hpa.milli`` of every value (each 0 ≤ value, value × 1000 < 4e15), as int64."""
        import numpy as np  # noqa: PLC0415

        x = values * 1000.0
        whole = np.floor(x)
        frac = x - whole
        out = np.ceil(x)
        near = ~((frac == 0.0) | (frac > 1e-6))
        if bool(near.any()):
            out = np.where(near & (frac < 4e-7), whole, out)
            for i in np.flatnonzero(near & ~(frac < 4e-7)).tolist():
                out[i] = self._milli(float(values[i]))  # the decimal rounding: rare, done as hpa.milli does it
        return out.astype(np.int64)

    # -- deciding a stretch -----------------------------------------------------------------------------------

    def decide(self, inp: ScanInput, history: History) -> tuple[Scanned, History]:
        """Every evaluation of ``inp`` (each one ``usable``), starting from the recommendation history
        ``history`` (``PolicyState.recommendations``); returns the decisions and the history after the last."""
        numbers = self._numbers(inp, history)
        return self._format(inp, numbers, len(inp.now)), numbers.history

    def _numbers(self, inp: ScanInput, history: History) -> _Numbers:
        import numpy as np  # noqa: PLC0415

        from autoscaler.core import behavior  # noqa: PLC0415

        now, current, ready, starting = inp.now, inp.current, inp.ready, inp.starting
        n = len(now)
        tol = self.tol
        counts, millis, ratios, withins = [], [], [], []
        with np.errstate(divide="ignore", invalid="ignore"):
            for j, _name, kind, target, _text, per_replica in self.metrics:
                milli = self._milli_array(inp.values[j])
                if kind == "Pods":
                    ratio = (milli if per_replica else milli // ready) / target
                    within = (tol.low <= ratio) & (ratio <= tol.high)
                    count = np.where(within, current, np.ceil(ratio * ready))
                elif kind == "Value":
                    ratio = milli / target
                    within = (tol.low <= ratio) & (ratio <= tol.high)
                    count = np.where(within, current, np.ceil(ratio * ready))
                else:
                    counted = ready + starting
                    ratio = np.where(counted > 0, milli / (target * counted), np.inf)
                    within = (tol.low <= ratio) & (ratio <= tol.high)
                    count = np.where(within, counted, np.ceil(milli / target))
                counts.append(count.astype(np.int64))
                millis.append(milli)
                ratios.append(ratio)
                withins.append(within)
        stacked = np.stack(counts)
        best = np.argmax(stacked, axis=0)  # the first metric with the highest count, as upstream
        wanted = stacked[best, np.arange(n)]
        all_within = np.logical_and.reduce(np.stack(withins), axis=0)

        # The legacy stabilization: the highest recommendation stamped at or after now - 300 s, this one included.
        # The history before the first evaluation ever is (now, current) (``hpa_decider``'s ``or``).
        if not history:
            history = ((float(now[0]), int(current[0])),)
        times = np.concatenate((np.array([t for t, _ in history], dtype=np.float64), now))
        recs = np.concatenate((np.array([c for _, c in history], dtype=np.int64), wanted))
        h = len(history)
        cutoff = now - self.window_s
        low = np.searchsorted(times, cutoff, side="left")
        high = np.arange(h, h + n)
        stabilized = _range_max(recs, low, high)
        # behavior._legacy's cap, int(max(2.0 × current, 4.0)).
        limit = np.maximum(behavior.SCALE_UP_LIMIT_FACTOR * current, behavior.SCALE_UP_LIMIT_MINIMUM).astype(np.int64)
        return _Numbers(best, wanted, all_within, counts, millis, ratios, stabilized, limit, times, recs, low, h)

    def _format(self, inp: ScanInput, numbers: _Numbers, n: int) -> Scanned:
        """The reasons, counts and messages, from the numbers: the stage's choices as arrays, and each sentence
        built from columns of texts in which each distinct number was formatted once (``_texts``)."""
        import numpy as np  # noqa: PLC0415

        from autoscaler.core.model import Reason  # noqa: PLC0415

        current, ready, starting = inp.current, inp.ready, inp.starting
        best, wanted, top = numbers.best, numbers.wanted, numbers.stabilized
        floor, max_replicas, window_s = self.floor, self.max_replicas, self.window_s

        stabilizing, by_min, capped, by_max, desired = self._stage(numbers, current)
        # The reason: the stage's when it changed something, else the recommendation's (Steady when the stage
        # brought a scale back to the current count).
        codes = np.where(wanted > current, 0, np.where(wanted < current, 1, np.where(numbers.all_within, 2, 3)))
        codes = np.where((codes <= 1) & (desired == current), 3, codes)
        codes = np.where(stabilizing, 4, codes)
        codes = np.where(capped, 5, np.where(by_min, 6, np.where(by_max, 7, codes)))
        reason_of = np.array([Reason.SCALE_UP, Reason.SCALE_DOWN, Reason.WITHIN_TOLERANCE, Reason.STEADY,
                              Reason.STABILIZING, Reason.RATE_LIMITED, Reason.LIMITED_BY_MIN, Reason.LIMITED_BY_MAX],
                             dtype=object)

        # The stage's note: "; held at …" and/or "; scale-up limited …", "; raised to …", "; limited to …".
        held = _texts(top, lambda c: (
            f"; held at {c}, the highest recommendation of the last {window_s}s (downscale stabilization without "
            "behavior)"
        ))
        limited = _texts(current, lambda c: (
            f"; scale-up limited to {int(max(2.0 * c, 4.0))}: at most max(2×{c}, 4) per evaluation without behavior"
        ))
        # Only the evaluations a note applies to get a new text (most have none).
        note = np.where(stabilizing, held, "")
        for applies, more in ((capped, limited), (by_min, f"; raised to minReplicas {floor}"),
                              (by_max, f"; limited to maxReplicas {max_replicas}")):
            at = np.flatnonzero(applies)
            if len(at):
                note[at] = note[at] + (more[at] if isinstance(more, np.ndarray) else more)

        # The chosen metric's sentence, one group of evaluations per metric chosen; what follows it (the other
        # metrics' counts, the stage's note) joined in the same pass.
        messages = np.empty(n, dtype=object)
        several = len(self.metrics) > 1
        highest_of = f" (highest of {len(self.metrics)} metrics; "
        arrows = [_texts(c, _arrow(m[1])) for c, m in zip(numbers.counts, self.metrics, strict=True)]
        for b, (_, name, kind, _target, target_text, per_replica) in enumerate(self.metrics):
            rows = np.flatnonzero(best == b)
            if not len(rows):
                continue
            milli, ratio = numbers.millis[b][rows], numbers.ratios[b][rows]
            cur, rdy = current[rows].tolist(), ready[rows].tolist()
            count = numbers.counts[b][rows].tolist()
            amount = _texts(milli, self._fmt).tolist()
            described = _texts(ratio, self._described).tolist()
            notes = note[rows].tolist()
            if several:
                others = [arrow[rows].tolist() for i, arrow in enumerate(arrows) if i != b]
                tails = [f"{highest_of}{', '.join(parts[:-1])}){parts[-1]}"
                         for parts in zip(*others, notes, strict=True)]
            else:
                tails = notes
            if kind == "Pods" and per_replica:
                lines = [f"{name} {a} per ready replica over {r} ready vs target {target_text} ({d}): {c} → {k}{t}"
                         for a, r, d, c, k, t in zip(amount, rdy, described, cur, count, tails, strict=True)]
            elif kind == "Pods":
                each = _texts(milli // ready[rows], self._fmt).tolist()
                lines = [f"{name} {a} over {self._n(r, 'ready replica')} = {e} per replica vs target {target_text} "
                         f"({d}): {c} → {k}{t}"
                         for a, r, e, d, c, k, t in zip(amount, rdy, each, described, cur, count, tails, strict=True)]
            elif kind == "Value":
                lines = [f"{name} {a} vs target value {target_text} ({d}, {r} ready): {c} → {k}{t}"
                         for a, r, d, c, k, t in zip(amount, rdy, described, cur, count, tails, strict=True)]
            else:
                counted = (ready[rows] + starting[rows]).tolist()
                lines = [f"{name} {a} over {self._n(r, 'replica')} vs target {target_text} per replica ({d}): "
                         f"{c} → {k}{t}"
                         for a, r, d, c, k, t in zip(amount, counted, described, cur, count, tails, strict=True)]
            messages[rows] = lines
        ages, whole = [], []
        for stamp in inp.stamps:
            age = inp.now - stamp
            age[age < 0.0] = 0.0
            ages.append(age.tolist())
            whole.append(bool(np.all(age == np.floor(age))))
        return Scanned(current.tolist(), desired.tolist(), reason_of[codes].tolist(), messages.tolist(),
                       tuple(v.tolist() for v in inp.values), tuple(ages), self.escapes, tuple(whole))

    def _stage(self, numbers: _Numbers, current: Any) -> tuple[Any, Any, Any, Any, Any]:
        """behavior._legacy as arrays: held at the window's highest (``stabilizing``), then raised to min,
        capped, or limited to max; and the desired counts."""
        import numpy as np  # noqa: PLC0415

        wanted, top, cap = numbers.wanted, numbers.stabilized, numbers.limit
        floor, max_replicas = self.floor, self.max_replicas
        stabilizing = top != wanted
        by_min = top < floor
        capped = ~by_min & (max_replicas > cap) & (top > cap)
        by_max = ~by_min & ~(max_replicas > cap) & (top > max_replicas)
        desired = np.where(by_min, floor, np.where(capped, cap, np.where(by_max, max_replicas, top)))
        return stabilizing, by_min, capped, by_max, desired

    # -- whatif: the policy's own count ---------------------------------------------------------------------

    def bounded(self, count: int) -> bool:
        """Whether a count is within ``[max(minReplicas, 1), maxReplicas]`` (the stage's bounds)."""
        return self.floor <= count <= self.max_replicas and count >= self.min_replicas

    def usable_own_at(self, inp: ScanInput, rescale: tuple[bool, ...]) -> Any:
        """``usable_at`` where the count is the policy's own (``inp.current`` the recorded one), whatever it is
        after a first one within bounds: the counts stay within ``[max(minReplicas, 1), maxReplicas]`` (the
        stage's bounds; a held evaluation keeps its count), the rescaled values stay finite and within milli's
        range when the recorded ones are (checked against a count of 1), and nothing is starting."""
        import numpy as np  # noqa: PLC0415

        ones = np.ones(len(inp.now), dtype=np.int64)
        with np.errstate(over="ignore"):  # a product past the float range is infinite: usable_at leaves it out
            values = tuple(
                v * np.maximum(inp.current, 1) if scaled else v for v, scaled in zip(inp.values, rescale, strict=True)
            )
        return self.usable_at(ScanInput(inp.now, values, inp.stamps, ones * self.floor, ones * self.floor, ones * 0))

    def with_own(self, inp: ScanInput, rescale: tuple[bool, ...], current: Any) -> ScanInput:
        """``inp`` (``current`` the recorded count) at the policy's own counts ``current``, every replica ready,
        per-replica values rescaled as ``replay.engine._steps`` does: value × recorded ÷ max(ready, 1) where
        the two counts differ (the load is conserved)."""
        import numpy as np  # noqa: PLC0415

        recorded = inp.current
        differs = recorded != current
        values = tuple(
            np.where(differs, v * recorded / np.maximum(current, 1), v) if scaled else v
            for v, scaled in zip(inp.values, rescale, strict=True)
        )
        return ScanInput(inp.now, values, inp.stamps, current, current, np.zeros(len(current), dtype=np.int64))

    def own_counts(self, inp: ScanInput, rescale: tuple[bool, ...], count: int, history: History) -> Any:
        """whatif: each evaluation's current count, the desired count of the one before (``count`` before the
        first), by steps from one change to the next: between two the count is constant, so a stretch is decided
        in bulk at that count up to the first evaluation whose desired count differs, and the scan goes on from
        the one after it, at the new count, with the history after it."""
        import numpy as np  # noqa: PLC0415

        n = len(inp.now)
        out = np.empty(n, dtype=np.int64)
        s = 0
        size = 32
        while s < n:
            while True:
                e = min(n, s + size)
                part = _slice(inp, s, e)
                at = np.full(e - s, count, dtype=np.int64)
                numbers = self._numbers(self.with_own(part, rescale, at), history)
                desired = self._stage(numbers, at)[-1]
                changed = np.flatnonzero(desired != count)
                if len(changed) or e == n:
                    break
                size *= 4
            k = int(changed[0]) if len(changed) else e - s - 1
            out[s : s + k + 1] = count
            history = numbers.history_after(k)
            count = int(desired[k])
            s += k + 1
            size = max(32, 2 * (k + 1))
        return out

    def _described(self, ratio: float) -> str:
        """``tol.describe``, or an AverageValue metric's words for an infinite ratio (no replicas to average)."""
        return self.tol.describe(ratio) if math.isfinite(ratio) else "no replicas"


def _slice(inp: ScanInput, a: int, b: int) -> ScanInput:
    return ScanInput(inp.now[a:b], tuple(v[a:b] for v in inp.values), tuple(t[a:b] for t in inp.stamps),
                     inp.current[a:b], inp.ready[a:b], inp.starting[a:b])


def _arrow(name: str) -> Callable[[int], str]:
    """A metric's part of "highest of N metrics; name → count, …"."""
    return lambda count: f"{name} → {count}"


def _texts(values: Any, text: Callable[[Any], str]) -> Any:
    """``text`` of every value, as a numpy array of strings (objects), each distinct value formatted once."""
    import numpy as np  # noqa: PLC0415

    distinct, where = np.unique(values, return_inverse=True)
    out = np.empty(len(distinct), dtype=object)
    out[:] = [text(v) for v in distinct.tolist()]
    return out[where]


class _Numbers(NamedTuple):
    best: Any
    wanted: Any
    all_within: Any
    counts: list[Any]
    millis: list[Any]
    ratios: list[Any]
    stabilized: Any
    limit: Any
    #: The history's entries (those given, then one per evaluation), and where each evaluation's window starts.
    entry_times: Any
    entry_counts: Any
    low: Any
    given: int

    def history_after(self, k: int) -> History:
        """``PolicyState.recommendations`` after evaluation ``k`` (of those these numbers are of)."""
        start, end = int(self.low[k]), self.given + k + 1
        return tuple(zip(self.entry_times[start:end].tolist(), self.entry_counts[start:end].tolist(), strict=True))

    @property
    def history(self) -> History:
        """``PolicyState.recommendations`` after the last evaluation."""
        return self.history_after(len(self.low) - 1)


def _range_max(values: Any, low: Any, high: Any) -> Any:
    """``max(values[low[i] : high[i] + 1])`` for every i (``low ≤ high``), with a sparse table: level ``j`` holds
    the maximum of the ``2**j`` values from each position, and a range is two overlapping blocks of one level."""
    import numpy as np  # noqa: PLC0415

    length = high - low + 1
    level = np.frexp(length)[1] - 1  # floor(log2(length)), exact for integers
    top = int(level.max()) if len(level) else 0
    table = [values]
    for j in range(1, top + 1):
        prev = table[-1]
        half = 1 << (j - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    out = np.empty(len(low), dtype=values.dtype)
    for j in range(top + 1):
        at = level == j
        if not bool(at.any()):
            continue
        lo, hi = low[at], high[at]
        out[at] = np.maximum(table[j][lo], table[j][hi - (1 << j) + 1])
    return out


def hpa_scan(compiled: CompiledPolicy) -> HpaScan | None:
    """The bulk form of ``hpa_decider`` (``HpaScan``), or None when the policy is not an ``hpa`` policy the fast
    path decides or has a ``behavior`` block (its windows and rate policies read the scale events)."""
    if hpa_decider(compiled) is None or compiled.rules is not None:
        return None
    return HpaScan(compiled)
