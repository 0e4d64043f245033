"""Judging raw signal readings: a value is usable, or unknown with a reason. Never silently zero.

A reading is unknown when it is missing, came with a source error, is NaN, infinite or negative, has no
timestamp, is older than its ``maxAgeSeconds`` or stamped too far in the future. Composite signals
(``expr``) are parsed and evaluated by ``expressions`` (bounded size and depth, floating point only, never
``eval``) over the usable values:

- a composite that depends on an unknown signal is itself unknown (the reasons are carried along);
- division or modulo by zero, a domain error (``sqrt(-1)``), an overflow, or a result that is NaN, infinite
  or negative makes the composite unknown, never zero;
- the judge parses each expression with the same limits the validator applies, so a policy that bypassed
  validation (``model_construct``) cannot make an evaluation expensive either: its composite is unknown.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core import catalog, counters, expressions
from autoscaler.core.model import NO_OBSERVATIONS, ReplicaStatus, SignalReading, SignalState, SignalValue
from autoscaler.core.spec import SignalSpec, Spec

#: Samples stamped slightly in the future (clock skew between hosts) still count as fresh.
FUTURE_SKEW_S = 5.0
#: The largest reading judged usable: the policy files' own bound (``specbase.MAX_NUMBER``, 10^15; Kubernetes
#: quantities stop near 9.2e15 milli-units). No server's queue, rate or ratio is near it; a reading beyond it
#: (1e308 from a broken exporter or a hand-edited trace) is invalid, not a load: the policies' arithmetic
#: (milli-units, products of rates) overflowed to infinity on it and the evaluation failed.
MAX_READING = 1e15
#: Reasons the core gives itself (not a source's error): shown as they are, without "source error:".
PARTIAL = "partial: "
_OWN_REASONS = (PARTIAL, NO_OBSERVATIONS)


def aggregate_of(signal: SignalSpec) -> catalog.Combine:
    """How a signal's per-pod values combine into the target's value, the one rule every command uses.

    The signal's ``aggregate``, else ``avg`` for a ``perReplica`` signal (its value is an average per replica by
    definition), else its preset's (queues sum, ratios average: ``core.catalog``), else ``sum``.
    """
    if signal.aggregate is not None:
        return signal.aggregate
    if signal.scope == "perReplica":
        return "avg"
    if signal.preset is not None:
        return catalog.get(signal.preset).combine
    return "sum"


#: A pod whose newest sample is this much older than its target's freshest pod's is taken as gone. Managed
#: Prometheus (GMP) writes no staleness markers, so a deleted pod's last value stays in query answers for the
#: 5-minute lookback; without this rule a scale-down would make a summed queue look larger than it is and the
#: target's reading older. The Prometheus source applies it to what it reads now, replay to what ``record``
#: saved (each pod's sample time), so both drop the same pods.
POD_GONE_S = 60.0
#: The label telling a pod's value (``"value"``) from its sample time (``"time"``) in one Prometheus answer: the
#: source's instant query and the series ``record`` saves, which replay reads.
PART_LABEL = "autoscaler_part"


def present(stamps: Mapping[str, float], *, gone_s: float = POD_GONE_S) -> set[str]:
    """The pods (keys of ``stamps``: each pod's sample time) not taken as gone: none more than ``gone_s`` older
    than the freshest."""
    if not stamps:
        return set()
    newest = max(stamps.values())
    return {pod for pod, stamp in stamps.items() if stamp >= newest - gone_s}


def combine(values: Sequence[float], how: catalog.Combine) -> float:
    """Combine per-pod values; NaN propagates (the core then says "invalid: NaN", never a number)."""
    if how == "sum":
        return math.fsum(values)
    if how == "avg":
        return math.fsum(values) / len(values)
    if how == "max":
        return max(values)
    return min(values)


def judge(name: str, reading: SignalReading | None, *, now: float, max_age_s: float) -> SignalValue:
    """Turn one raw reading into an ok value or an unknown with the reason."""
    if reading is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: no reading for this signal")
    source = reading.source
    if reading.error is not None:
        why = reading.error if reading.error.startswith(_OWN_REASONS) else f"source error: {reading.error}"
        return SignalValue(name, SignalState.UNKNOWN, None, why, source=source)
    value = reading.value
    if value is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: empty result", source=source)
    age = None if reading.timestamp is None else now - reading.timestamp
    if math.isnan(value):
        return SignalValue(name, SignalState.UNKNOWN, None, "invalid: NaN", age, source)
    if math.isinf(value):
        return SignalValue(name, SignalState.UNKNOWN, None, "invalid: infinite", age, source)
    if value < 0:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: negative ({value:g})", age, source)
    if value > MAX_READING:
        return SignalValue(
            name, SignalState.UNKNOWN, None, f"invalid: out of range ({value:g} > {MAX_READING:g})", age, source
        )
    if age is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: sample has no timestamp", source=source)
    if math.isnan(age):
        return SignalValue(name, SignalState.UNKNOWN, None, "invalid: timestamp is NaN", source=source)
    if age > max_age_s:
        return SignalValue(
            name, SignalState.UNKNOWN, None, f"stale: {age:.0f}s old > maxAgeSeconds {max_age_s:g}", age, source
        )
    if age < -FUTURE_SKEW_S:
        return SignalValue(
            name, SignalState.UNKNOWN, None, f"invalid: sample {-age:.0f}s in the future", age, source
        )
    return SignalValue(name, SignalState.OK, float(value), "", max(age, 0.0), source, summed_histogram(reading))


def summed_histogram(reading: SignalReading) -> dict[float, float] | None:
    """The pods' bucket rates of a histogram reading summed (``SignalValue.histogram``); None without buckets."""
    if not reading.buckets:
        return None
    summed: dict[float, float] = {}
    for mine in reading.buckets.values():
        counters.add_buckets(summed, mine)
    return summed


@dataclass(frozen=True, slots=True)
class PodRule:
    """How one per-pod signal becomes the target's reading (``combine_pods``), read once from the spec."""

    max_age_s: float
    how: catalog.Combine
    #: None: every ready pod must report; else at least this fraction of them (``minReportingFraction``).
    min_fraction: float | None
    #: LeaderWorkerSet per-host presets: the pods reporting are hosts, ``<leader>-<index>`` of a group.
    workers: bool
    #: Histogram signals: the quantile taken over the reporting pods' summed buckets.
    quantile: float | None = None


def combine_pods(rule: PodRule, reading: SignalReading, replicas: ReplicaStatus | None, now: float) -> SignalReading:
    """The one rule from per-pod samples to a target's reading, the same in every command.

    1. a pod's sample counts when it is fresh (no older than the signal's ``maxAgeSeconds``) and finite;
    2. a reading is known only when every ready pod (LWS: every ready group) reported a fresh sample, or at least
       ``minReportingFraction`` of them: by name when the replica status lists the pods (a cluster, the
       simulator), else by count against the ready count (outside a cluster);
    3. the fresh samples combine by the signal's rule (``aggregate_of``); for a histogram (``quantile``) the
       reporting pods' bucket rates are summed and the quantile taken; the timestamp is the oldest sample.

    Partial data is unknown, never a smaller number: the pods whose scrapes fail are often the overloaded ones,
    and summing the others would read as less load than there is.
    """
    per = reading.per_replica
    if per is None or reading.error is not None:
        return reading
    times = reading.pod_times or {}
    fresh: dict[str, tuple[float, float]] = {}
    for pod, value in per.items():
        stamp = times.get(pod, reading.timestamp)
        # A NaN or infinite sample is not a report (HPA counts such a pod as missing).
        if stamp is not None and now - stamp <= rule.max_age_s and math.isfinite(value):
            fresh[pod] = (value, stamp)
    pods = replicas.pods if replicas is not None else None
    expected: int | None = None
    reporting = len(fresh)
    if pods is not None and any(_owner(name, {p.name for p in pods}, rule.workers) for name in per):
        ready = {p.name for p in pods if p.ready and not p.deleting and not p.failed}
        reporting = len({o for pod in fresh if (o := _owner(pod, ready, rule.workers)) is not None})
        expected = len(ready)
    elif replicas is not None:
        expected = replicas.ready
    # Every fresh sample is passed on (an unready pod's too, as HPA's custom-metrics path counts it); the
    # count above only decides whether enough of the ready ones are among them.
    used = fresh
    if expected is not None and expected > 0:
        needed = expected if rule.min_fraction is None else max(1, math.ceil(rule.min_fraction * expected - 1e-9))
        if reporting < needed:
            unit = "groups" if rule.workers and pods is not None else "pods"
            why = f"{PARTIAL}{reporting} of {expected} ready {unit} reported a sample within {rule.max_age_s:g}s"
            if rule.min_fraction is not None:
                why += f" (minReportingFraction {rule.min_fraction:g} needs {needed})"
            return SignalReading(None, None, reading.source, why)
    if not used:
        return SignalReading(None, None, reading.source)  # missing: no fresh sample, never zero
    stamp = min(t for _, t in used.values())
    if rule.quantile is not None:
        # The target's quantile: the reporting pods' bucket rates summed, as histogram_quantile(sum by (le)).
        summed: dict[float, float] = {}
        for pod in used:
            counters.add_buckets(summed, (reading.buckets or {}).get(pod, {}))
        value = counters.histogram_quantile(rule.quantile, summed)
        if math.isnan(value):
            why = f"{NO_OBSERVATIONS}no request observed in the window by the {len(used)} reporting pods"
            return SignalReading(None, None, reading.source, why)
        # The reporting pods' buckets go on with the value: a policy may read the distribution itself
        # (``SignalValue.histogram``), e.g. the prompt lengths' moments for a queueing model.
        return SignalReading(
            value, stamp, reading.source, None,
            {pod: v for pod, (v, _) in used.items()}, {pod: t for pod, (_, t) in used.items()},
            {pod: summed_pod for pod in used if (summed_pod := (reading.buckets or {}).get(pod)) is not None},
        )
    return SignalReading(
        combine([v for v, _ in used.values()], rule.how),
        stamp,
        reading.source,
        None,
        {pod: v for pod, (v, _) in used.items()},
        {pod: t for pod, (_, t) in used.items()},
    )


def _owner(pod: str, names: set[str], workers: bool) -> str | None:
    """The replica (pod, or LWS group leader) a reporting pod belongs to, among ``names``."""
    if pod in names:
        return pod
    if workers:
        leader = pod.rsplit("-", 1)[0]
        if leader in names:
            return leader
    return None


#: A composite signal as ``SignalJudge`` evaluates it: expression, parsed tree, names used, explicit max age.
#: The tree is the error text instead when the expression is refused (a spec that bypassed validation).
_Composite = tuple[str, ast.expr | str, frozenset[str], float | None]


@dataclass(frozen=True)
class SignalJudge:
    """Judges all signals of one policy; built once per policy (expressions are parsed once).

    Everything a judgement needs from the spec is read here once, into ``_plan``: one entry per signal in
    evaluation order, ``(name, max_age_s, composite)`` with ``composite`` None for a raw signal, else
    ``(expr, parsed tree, names it uses, explicit maxAgeSeconds or None)``.
    """

    spec: Spec
    _parsed: dict[str, ast.expr | str] = field(init=False, repr=False, compare=False)
    _uses: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _plan: tuple[tuple[str, float, _Composite | None], ...] = field(init=False, repr=False, compare=False)
    _pods: tuple[tuple[str, PodRule], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        composites = [s for s in self.spec.signals if s.expr is not None]
        # Frozen dataclass: derived fields are set once here (parsing is the costly part of an evaluation).
        object.__setattr__(self, "_parsed", {s.name: _parse(s.expr or "") for s in composites})
        object.__setattr__(self, "_uses", {s.name: s.expression_names() for s in composites})
        object.__setattr__(self, "_order", tuple(_evaluation_order(self.spec)))
        default_age = self.spec.metric_safety.max_age_seconds
        plan: list[tuple[str, float, _Composite | None]] = []
        for name in self._order:
            sig = self.spec.signal(name)
            composite = (
                None
                if sig.expr is None
                else (sig.expr, self._parsed[name], self._uses[name], sig.max_age_seconds)
            )
            plan.append((name, sig.max_age_seconds or default_age, composite))
        object.__setattr__(self, "_plan", tuple(plan))
        rules = []
        for sig in self.spec.signals:
            if sig.expr is None:
                workers = sig.preset is not None and catalog.get(sig.preset).workers
                age = sig.max_age_seconds or default_age
                q = sig.quantile.q if sig.quantile is not None else None
                rule = PodRule(age, aggregate_of(sig), sig.min_reporting_fraction, workers, q)
                rules.append((sig.name, rule))
        object.__setattr__(self, "_pods", tuple(rules))

    def combine(
        self, readings: Mapping[str, SignalReading], replicas: ReplicaStatus | None, now: float
    ) -> Mapping[str, SignalReading]:
        """Readings with per-pod samples combined into the target's (``combine_pods``); others as they are.

        ``decide`` calls it on every observation, and ``observe`` on what it shows, so every command combines
        pods by the same rule whatever its source did."""
        out: dict[str, SignalReading] | None = None
        for name, rule in self._pods:
            reading = readings.get(name)
            if reading is None or reading.per_replica is None:
                continue
            if out is None:
                out = dict(readings)
            out[name] = combine_pods(rule, reading, replicas, now)
        return readings if out is None else out

    def judge_all(self, readings: Mapping[str, SignalReading], now: float) -> dict[str, SignalValue]:
        """Judge every signal of the policy (composites after their inputs); readings for composites are ignored."""
        out: dict[str, SignalValue] = {}
        for name, max_age, composite in self._plan:
            if composite is None:
                reading = readings.get(name)
                # The common case inline (a fresh, finite, non-negative sample without error): exactly what
                # judge() returns for it; anything else takes judge() for its reason.
                if reading is not None and reading.error is None:
                    value, stamp = reading.value, reading.timestamp
                    if value is not None and stamp is not None and 0.0 <= value <= MAX_READING:
                        age = now - stamp
                        if -FUTURE_SKEW_S <= age <= max_age:
                            out[name] = SignalValue(
                                name, SignalState.OK, float(value), "", age if age >= 0.0 else 0.0, reading.source,
                                summed_histogram(reading) if reading.buckets else None,
                            )
                            continue
                out[name] = judge(name, reading, now=now, max_age_s=max_age)
            else:
                expr, tree, uses, limit = composite
                judged = _evaluate(name, expr, tree, uses, out)
                # An explicit limit on a composite bounds the age of its oldest input.
                if limit is not None and judged.ok and judged.age_s is not None and judged.age_s > limit:
                    judged = SignalValue(
                        name,
                        SignalState.UNKNOWN,
                        None,
                        f"stale: oldest input {judged.age_s:.0f}s old > maxAgeSeconds {limit:g}",
                        judged.age_s,
                        "expr",
                    )
                out[name] = judged
        return out


def _evaluation_order(spec: Spec) -> list[str]:
    """Raw signals first, then composites after the signals they use (the spec forbids cycles)."""
    order: list[str] = []
    placed: set[str] = set()

    def place(name: str) -> None:
        if name in placed:
            return
        for dep in sorted(spec.signal(name).expression_names()):
            place(dep)
        placed.add(name)
        order.append(name)

    for sig in spec.signals:
        place(sig.name)
    return order


def evaluate_expression(expr: str, names: Mapping[str, float], tree: ast.expr | None = None) -> float:
    """Evaluate ``expr`` over ``names`` (see ``expressions.evaluate``); ``ValueError`` with the cause."""
    if tree is None:
        try:
            tree = expressions.compiled(expr).tree
        except ValueError as exc:
            raise ValueError(f"{expr[:60]!r} failed: {exc}") from None
    return expressions.evaluate(expr, names, tree)


def _parse(expr: str) -> ast.expr | str:
    try:
        return expressions.compiled(expr).tree
    except ValueError as exc:
        return str(exc)


def _evaluate(
    name: str, expr: str, tree: ast.expr | str, uses: frozenset[str], values: Mapping[str, SignalValue]
) -> SignalValue:
    unknown = sorted(u for u in uses if not values[u].ok)
    if unknown:
        why = "; ".join(f"{u}: {values[u].reason}" for u in unknown)
        return SignalValue(name, SignalState.UNKNOWN, None, f"depends on unknown signal(s): {why}")
    if isinstance(tree, str):
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: {tree}")
    names = {u: float(values[u].value or 0.0) for u in uses}
    ages = [a for u in uses if (a := values[u].age_s) is not None]
    try:
        result = evaluate_expression(expr, names, tree)
    except ValueError as exc:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: {exc}")
    return SignalValue(name, SignalState.OK, result, "", max(ages) if ages else None, "expr")
