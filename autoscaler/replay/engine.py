"""The replay loop: feed a recorded trace to ``core.engine.decide`` one evaluation period at a time.

Nothing here decides anything: every decision comes from ``autoscaler.core.engine.decide``, the function the
controller calls in the cluster. This module only builds the observation the controller would have built.

Evaluation times are ``t0 + k × evaluationPeriodSeconds`` from the first sample of any signal to the last.
At time ``t`` a signal's reading is its latest sample at or before ``t``, carrying that sample's own
timestamp, so the core judges staleness exactly as in production (a gap longer than ``maxAgeSeconds`` is
unknown, and unknown means hold).

Two modes:
  1. ``recorded``: the current replica count at each evaluation is the recorded one ("what would it have
     decided then"). The policy's decisions are not applied. Its scale-event history (which HPA rate
     policies read) is the recorded replica changes, not the decisions it would have taken.
  2. ``whatif``: the policy's own decisions become the replica count. With an actuation delay, new replicas
     are ``starting`` for that long before they are ready; a scale-down removes starting replicas first.
     ``perReplica`` signals are rescaled by recorded ÷ own ready replicas (the load is conserved); ``total``
     signals are taken as recorded (the trace cannot say how the load would have reacted).
"""

from __future__ import annotations

import bisect
import functools
import math
from array import array
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast

from autoscaler.core import catalog, counters, signals
from autoscaler.core.engine import CompiledPolicy, decide
from autoscaler.core.fast import HpaScan, ScanInput, Scanned, hpa_decider, hpa_scan, quick_init
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
)
from autoscaler.core.signals import aggregate_of
from autoscaler.core.spec import SignalSpec
from autoscaler.replay.traces import AGGREGATES, RawSignal, Series, Trace, TraceError, combine, total

Mode = Literal["recorded", "whatif"]

#: The longest HPA scaling-policy period (``periodSeconds`` ≤ 1800): older scale events never matter.
EVENT_HORIZON_S = 1800.0
#: About a year at 15 s; more is almost always a wrong timestamp, and would run for hours.
MAX_EVALUATIONS = 2_000_000


class EvaluationError(Exception):
    """``decide`` raised at one evaluation: a bug (or an unfinished part) of the core, not of the input."""

    def __init__(self, time: float, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.time = time
        self.error = error


@dataclass(frozen=True, slots=True)
class Options:
    mode: Mode = "recorded"
    actuation_delay_s: float = 0.0
    #: recorded: the count before the first recorded sample (required without recorded replicas).
    #: whatif: the starting count (default: the first recorded count, else minReplicas).
    initial_replicas: int | None = None


@quick_init  # one per evaluation
@dataclass(frozen=True, slots=True)
class Step:
    """One evaluation: when, the replica status the core saw, what was recorded, and its decision."""

    time: float
    replicas: ReplicaStatus
    recorded: int | None
    decision: ScaleDecision
    readings: dict[str, SignalReading]


@dataclass
class Replay:
    """The result of a replay: every evaluation in order, plus what the reader had to assume."""

    policy: str
    target: str
    mode: Mode
    period_s: float
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The recorded replica count, for plots and comparison (None when the trace has none).
    recorded: Series | None = None


class Fleet:
    """The what-if replica count: what the policy set, how many serve, how many are still starting.

    1. ``status(now)``: replicas whose actuation delay has passed become ready;
    2. ``apply(desired, now)``: a scale-up adds replicas that are ready ``delay`` seconds later (at once without
       a delay); a scale-down removes starting replicas first (the newest first), then ready ones.
    """

    def __init__(self, replicas: int, delay_s: float) -> None:
        self.spec = replicas
        self.ready = replicas
        self.delay_s = delay_s
        self._pending: list[tuple[float, int]] = []  # (ready at, how many), oldest first
        self._status: ReplicaStatus | None = None  # the last status returned (immutable, so shared while equal)

    def status(self, now: float) -> ReplicaStatus:
        while self._pending and self._pending[0][0] <= now:
            self.ready += self._pending.pop(0)[1]
        last = self._status
        if last is None or last.spec != self.spec or last.ready != self.ready:
            last = self._status = ReplicaStatus(spec=self.spec, ready=self.ready, starting=self.spec - self.ready)
        return last

    def apply(self, desired: int, now: float) -> None:
        if desired > self.spec:
            if self.delay_s > 0:
                self._pending.append((now + self.delay_s, desired - self.spec))
            else:
                self.ready += desired - self.spec
        elif desired < self.spec:
            remove = self.spec - desired
            while remove and self._pending:
                at, count = self._pending.pop()
                take = min(count, remove)
                remove -= take
                if take < count:
                    self._pending.append((at, count - take))
            self.ready -= remove
        self.spec = desired


#: Labels naming the pod of a recorded per-pod series (``autoscaler record``): a server's own, or the TPU
#: device plugin's (scraped in kube-system, the workload's pod is ``exported_pod``).
POD_LABELS = ("pod", "exported_pod")


def _pod_of(series: Series) -> str | None:
    labels = dict(series.labels)
    return next((labels[k] for k in POD_LABELS if labels.get(k)), None)


#: The label of a histogram bucket's upper bound (``+Inf`` for the bucket counting every observation).
BUCKET_LABEL = "le"


def _pod_buckets(raw: RawSignal) -> dict[str, dict[float, Series]] | None:
    """A quantile signal recorded as each pod's bucket rates (what ``autoscaler record`` saves: series labelled by
    pod and ``le``), by pod and upper bound; None when the series are not that (a quantile recorded whole)."""
    out: dict[str, dict[float, Series]] = {}
    for one in raw.series:
        pod, le = _pod_of(one), dict(one.labels).get(BUCKET_LABEL)
        if pod is None or le is None:
            return None
        try:
            bound = float(le)  # "+Inf" parses as inf
        except ValueError:
            return None
        if bound in out.setdefault(pod, {}):
            return None  # two series for one bucket of one pod: not a per-pod record
        out[pod][bound] = one
    return out or None


class _Recorded(NamedTuple):
    """One recorded signal's value series, and each pod's sample times where ``record`` saved them."""

    values: RawSignal
    #: pod -> the time of the sample behind each step's value (None: not recorded, a step's time is its sample's).
    times: dict[str, Series] | None


def _split_times(raw: RawSignal) -> _Recorded:
    """The value series of ``raw`` and, apart, its per-pod sample-time series (labelled
    ``autoscaler_part="time"``, as ``autoscaler record`` saves them beside the values)."""
    parts = [dict(one.labels).get(signals.PART_LABEL) for one in raw.series]
    if "time" not in parts:
        return _Recorded(raw, None)
    values = tuple(one for one, part in zip(raw.series, parts, strict=True) if part != "time")
    times = {pod: one for one, part in zip(raw.series, parts, strict=True)
             if part == "time" and (pod := _pod_of(one)) is not None}
    return _Recorded(RawSignal(raw.name, raw.origin, values), times)


@dataclass(frozen=True, slots=True)
class _Input:
    name: str
    series: Series
    origin: str
    per_replica: bool
    #: Per-pod series (one per pod, as ``record`` saves them), combined by the core at each evaluation.
    pods: dict[str, Series] | None = None
    max_age_s: float = 0.0
    #: A quantile signal's per-pod bucket rates (pod -> upper bound -> series), summed and read by the core.
    buckets: dict[str, dict[float, Series]] | None = None
    #: whatif mode: the quantile taken here over the pods' summed buckets (no pods to judge against our count).
    quantile: float | None = None
    #: Per-pod sample times as recorded (``_split_times``); None: each step's time is taken as its sample's.
    times: dict[str, Series] | None = None
    #: whatif mode: the rule combining the pods the source answered (``aggregate_of``), applied here at each
    #: evaluation (the trace's pods are not ours to count against our replica count); None: the core combines.
    combine: catalog.Combine | None = None


class Prepared(NamedTuple):
    """``prepare``'s result: what each signal is read from, and notes on how the series were combined."""

    inputs: list[_Input]
    notes: list[str]


def prepare(compiled: CompiledPolicy, trace: Trace, mode: Mode = "recorded") -> Prepared:
    """The raw signals the policy reads, each as one series, and notes on how they were combined.

    A ``preset``/``metric`` signal recorded as one series per pod (what ``autoscaler record`` saves) is kept per
    pod in ``recorded`` mode: the core combines the pods at each evaluation by its one rule and counts them
    against the recorded replica count, as the controller does. In ``whatif`` mode (the policy's own replica
    count, which the trace has no pods for) the pods are not counted: with each pod's sample time recorded, the
    pods the source answered at each evaluation (``_Answered``: the rule ``run`` and recorded mode apply, a
    GMP pod gone is not summed in) are combined by the signal's rule, stamped with the oldest one's sample time;
    without sample times, and for a raw ``query``, the series are combined up front.

    Raises ``TraceError`` naming every signal the policy needs and the trace lacks (composite ``expr``
    signals are computed by the core, never read).
    """
    spec = compiled.policy.spec
    needed = [s for s in spec.signals if s.expr is None]
    missing = [s.name for s in needed if s.name not in trace.signals]
    if missing:
        have = ", ".join(sorted(trace.signals)) or "none"
        raise TraceError(
            f"{', '.join(trace.files)}: no data for signal(s) {', '.join(missing)} of policy "
            f"{compiled.name!r} (the trace has: {have}); name the CSV column or JSON file after the signal"
        )
    inputs: list[_Input] = []
    notes: list[str] = []
    for sig in needed:
        raw, times = _split_times(trace.signals[sig.name])
        if not raw.series:
            raise TraceError(f"{raw.origin}: signal {sig.name!r} has sample times but no values")
        if times is not None:
            notes.append(
                f"signal {sig.name}: each pod's sample time recorded: a pod counts only at steps the source "
                f"answered it, by its own sample time, gone when over {signals.POD_GONE_S:g}s behind the freshest"
            )
        max_age = sig.max_age_seconds or spec.metric_safety.max_age_seconds
        pod_names = [_pod_of(one) for one in raw.series]
        per_pod = (sig.preset is not None or sig.metric is not None) and mode == "recorded"
        hist = _pod_buckets(raw) if sig.quantile is not None else None
        if hist is not None:
            # Each pod's bucket rates: as in the cluster, the core sums the buckets of the pods reporting a fresh
            # sample and takes the quantile, and (recorded mode) a reading is known only when every recorded
            # replica's pod reports. A pod's sample is its +Inf bucket (every observation); pods without one
            # recorded nothing usable.
            assert sig.quantile is not None
            hist = {pod: b for pod, b in hist.items() if math.inf in b and b[math.inf].times}
            if not hist:
                raise TraceError(f"{raw.origin}: signal {sig.name!r} has no samples")
            notes.append(
                f"signal {sig.name}: {len(hist)} pods' histogram buckets in {raw.origin}; the core takes the "
                f"{sig.quantile.q:g} quantile of the reporting pods' summed buckets"
                + ("; a reading is known when as many pods report as replicas were recorded" if per_pod else "")
            )
            merged = combine(RawSignal(sig.name, raw.origin, tuple(b[math.inf] for b in hist.values())), "sum")
            # whatif: the quantile is taken here, over the pods the source answered (the same gone-pod rule).
            inputs.append(_Input(sig.name, merged, raw.origin, False, None, max_age, hist,
                                 None if per_pod else sig.quantile.q, times))
            continue
        if per_pod and all(pod_names) and len(set(pod_names)) == len(pod_names):
            # One series per pod: the core combines them at each evaluation, judging each pod's age and
            # counting the pods that report against the recorded replica count, as in the cluster.
            by_pod = _series_by_pod(raw, pod_names, sig)
            notes.append(
                f"signal {sig.name}: {len(by_pod)} pod series in {raw.origin}, combined by the core "
                f"({_why_aggregate(sig)} → {aggregate_of(sig)}); a reading is known when as many pods report as "
                "replicas were recorded"
            )
            merged = combine(raw, "sum")
            inputs.append(_Input(sig.name, merged, raw.origin, sig.scope == "perReplica", by_pod, max_age,
                                 times=times))
            continue
        how = aggregate_of(sig)  # the controller's rule: the catalog's per preset, avg for perReplica
        assert how in AGGREGATES
        if (
            times is not None and (sig.preset is not None or sig.metric is not None)
            and all(pod_names) and len(set(pod_names)) == len(pod_names)
        ):
            # whatif with each pod's sample time: at each evaluation the pods the source answered, combined
            # here by ``how``; every answered pod is kept (max age unbounded here) so that a stale one makes the
            # whole reading stale (the oldest sample's time), never a smaller sum.
            by_pod = _series_by_pod(raw, pod_names, sig)
            notes.append(
                f"signal {sig.name}: {len(by_pod)} pod series in {raw.origin}, the pods answered at each "
                f"evaluation combined by {how} ({_why_aggregate(sig)})"
            )
            inputs.append(_Input(sig.name, combine(raw, "sum"), raw.origin, sig.scope == "perReplica", by_pod,
                                 math.inf, times=times, combine=how))
            continue
        if len(raw.series) > 1:
            notes.append(
                f"signal {sig.name}: {len(raw.series)} series in {raw.origin} combined by {how} "
                f"({_why_aggregate(sig)})"
            )
        series = combine(raw, how)
        if not series.times:
            raise TraceError(f"{raw.origin}: signal {sig.name!r} has no samples")
        inputs.append(_Input(sig.name, series, raw.origin, sig.scope == "perReplica"))
    unused = sorted(set(trace.signals) - {s.name for s in needed})
    if unused:
        notes.append(f"not used by the policy: {', '.join(unused)}")
    return Prepared(inputs, notes)


def _series_by_pod(raw: RawSignal, pod_names: list[str | None], sig: SignalSpec) -> dict[str, Series]:
    """Each named pod's own series (pods that recorded no sample left out); a signal with none has no samples."""
    by_pod = {name: one for name, one in zip(pod_names, raw.series, strict=True) if name and one.times}
    if not by_pod:
        raise TraceError(f"{raw.origin}: signal {sig.name!r} has no samples")
    return by_pod


def _why_aggregate(sig: SignalSpec) -> str:
    if sig.aggregate is not None:
        return "aggregate"
    if sig.scope == "perReplica":
        return "scope perReplica"
    return f"preset {sig.preset}" if sig.preset is not None else "scope total"


@dataclass
class Stream:
    """A replay in progress: what is replayed, known before the first evaluation, and ``steps``, the evaluations
    in order, each made when asked for (iterate once). Nothing keeps a step once it has been handed on, so a
    replay's memory does not grow with its length: the writers keep what they need (``report``, ``plot``)."""

    policy: str
    target: str
    mode: Mode
    period_s: float
    #: How many evaluations ``steps`` yields; the first is at ``start``, every ``period_s`` after.
    evaluations: int
    start: float
    steps: Iterator[Step]
    notes: list[str] = field(default_factory=list)
    #: The recorded replica count (None when the trace has none).
    recorded: Series | None = None
    #: The same evaluations, the stretches decided in bulk as ``Block`` items and the rest as ``Step`` items, when
    #: the bulk path applies (``_bulk``); None otherwise. A consumer iterates either ``steps`` or ``blocks``.
    blocks: Iterator[Block | Step] | None = None
    #: What decides ``blocks``, for a consumer that splits them (``replay.command``); None with ``blocks``.
    bulk: Bulk | None = None


def run(
    compiled: CompiledPolicy,
    trace: Trace,
    options: Options,
    *,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> Replay:
    """Replay ``trace`` through ``compiled`` and keep every step (for tests and short traces; the command streams
    with ``stream``). ``total``/``progress`` as for ``stream``."""
    s = stream(compiled, trace, options, progress=progress)
    if total is not None:
        total(s.evaluations)
    return Replay(s.policy, s.target, s.mode, s.period_s, list(s.steps), s.notes, s.recorded)


def stream(
    compiled: CompiledPolicy,
    trace: Trace,
    options: Options,
    *,
    progress: Callable[[int], None] | None = None,
    bulk: bool = True,
) -> Stream:
    """Check ``trace`` against ``compiled`` (raising ``TraceError`` at once, before any evaluation) and return the
    replay as a ``Stream`` whose steps are made one at a time. ``progress(k)`` is told the number of evaluations
    done since its last call (for a progress bar; ``Stream.evaluations`` is the total). With ``bulk`` (the
    default), ``Stream.blocks`` also offers the evaluations decided in bulk where that path applies (``_bulk``;
    ``bulk=False`` is the plain path, for comparisons)."""
    spec = compiled.policy.spec
    prepared = prepare(compiled, trace, options.mode)
    inputs, notes = prepared.inputs, prepared.notes
    recorded = trace.replicas
    if recorded is not None and not recorded.times:
        recorded = None
    any_per_replica = any(i.per_replica for i in inputs)
    if recorded is None and options.initial_replicas is None:
        if options.mode == "recorded":
            raise TraceError(
                f"{', '.join(trace.files)}: no recorded replica count (a 'replicas' CSV column or "
                "replicas.json); mode recorded needs it, or pass --initial-replicas N for a constant count"
            )
        if any_per_replica:
            raise TraceError(
                f"{', '.join(trace.files)}: no recorded replica count to rescale perReplica signals in "
                "whatif mode; add it (a 'replicas' column or replicas.json) or pass --initial-replicas N"
            )
    if recorded is None and options.initial_replicas is not None:
        notes.append(f"no recorded replicas: the recorded count is taken as {options.initial_replicas} throughout")
    if spec.pools():
        # A policy with several targets (type disaggregated): the trace records one replica count, so only
        # whatif mode can run it, with one fleet per target (``_steps``).
        if options.mode != "whatif":
            raise TraceError(
                f"policy {compiled.name!r} scales {len(spec.targets())} targets; a trace records one replica count, "
                "so it replays in whatif mode only (--mode whatif; every pool starts from the same count)"
            )
        notes.append(f"{len(spec.targets())} targets: every pool starts from the same count; the report follows "
                     f"{spec.target.ref().key}")

    start = min(i.series.times[0] for i in inputs)
    end = max(i.series.times[-1] for i in inputs)
    period = spec.evaluation_period_seconds
    count = math.floor((end - start) / period + 1e-9) + 1
    if count > MAX_EVALUATIONS:
        raise TraceError(
            f"{', '.join(trace.files)}: {count:,} evaluations every {period:g}s from the first sample to the last; "
            f"more than {MAX_EVALUATIONS:,}: are some timestamps wrong, or is evaluationPeriodSeconds too small?"
        )
    ready = trace.ready if recorded is not None and options.mode == "recorded" else None
    if ready is not None and ready.times:
        notes.append("recorded ready replicas: at each evaluation the core sees the recorded count set on the target "
                     "and its ready replicas (the rest starting), as the controller reads them")
    steps = _steps(compiled, inputs, recorded, options, start, count, progress, ready)
    in_bulk = _bulk(compiled, inputs, recorded, options, start, count, progress, ready) if bulk else None
    return Stream(compiled.name, spec.target.ref().key, options.mode, period, count, start, steps, notes, recorded,
                  in_bulk.evaluations() if in_bulk is not None else None, in_bulk)


class _Cursor:
    """The latest sample at or before ``now`` of one series, for increasing ``now``: the index only moves forward
    (amortised O(1) per evaluation, where a bisection per evaluation would be O(log n)), and a sample's reading is
    one object, shared until the next sample is reached."""

    __slots__ = ("at", "origin", "reading", "stamps", "values")

    def __init__(self, series: Series, origin: str) -> None:
        self.stamps = series.times
        self.values = series.values
        self.origin = origin
        self.at = -1  # the index of the latest sample at or before the last ``now``; -1 before the first
        self.reading: SignalReading | None = None

    def seek(self, now: float) -> None:
        """Stand where ``advance(now)`` from the start would (a bisection), with that sample's reading: to resume
        a replay at a later evaluation."""
        at = bisect.bisect_right(self.stamps, now) - 1
        self.at = at
        self.reading = SignalReading(self.values[at], self.stamps[at], source=self.origin) if at >= 0 else None

    def advance(self, now: float) -> int:
        stamps = self.stamps
        at = self.at
        last = len(stamps) - 1
        while at < last and stamps[at + 1] <= now:
            at += 1
        self.at = at
        return at

    def read(self, now: float) -> SignalReading | None:
        # ``advance`` written out: called for every signal at every evaluation, and usually nothing moves.
        stamps = self.stamps
        at = self.at
        if at + 1 < len(stamps) and stamps[at + 1] <= now:
            at += 1
            last = len(stamps) - 1
            while at < last and stamps[at + 1] <= now:
                at += 1
            self.at = at
            self.reading = SignalReading(self.values[at], stamps[at], source=self.origin)
        return self.reading


class _Answered:
    """Which pods the source's answer held at ``now``, and when each one's sample was taken: what the Prometheus
    source gives the core, rebuilt from ``record``'s series with each pod's sample time (``_split_times``).

    1. a pod is in the answer when it has a point at the latest step any pod has at or before ``now`` (a range
       query's steps are one grid: a pod missing from a step was missing from the instant answer then: a real
       Prometheus marks a deleted or unscraped pod's series stale);
    2. its sample time is the recorded one at that step (GMP writes no staleness markers: a deleted pod's last
       sample stays in every step's answer for the 5-minute lookback, and only its time says so);
    3. pods far behind the freshest are gone (``core.signals.present``, the rule the source applies).
    """

    __slots__ = ("clocks",)

    def __init__(self, times: dict[str, Series], origin: str) -> None:
        self.clocks = {pod: _Cursor(series, origin) for pod, series in times.items()}

    def sampled(self, at: Mapping[str, float], now: float) -> dict[str, float]:
        """``at``: each pod's latest step at or before ``now``; returns the pods answered, by sample time."""
        if not at:
            return {}
        last = max(at.values())
        stamps: dict[str, float] = {}
        for pod, step in at.items():
            if step != last:
                continue
            clock = self.clocks.get(pod)
            j = clock.advance(now) if clock is not None else -1
            # No time recorded at that step (a hand-made file): the step's time stands for the sample's.
            stamps[pod] = clock.values[j] if clock is not None and j >= 0 and clock.stamps[j] == step else step
        kept = signals.present(stamps)
        return {pod: stamp for pod, stamp in stamps.items() if pod in kept}


class _PodCursors:
    """Every pod's latest sample at or before ``now`` (no older than ``max_age_s``), as one per-pod reading that
    the core combines by its one rule (``core.signals.combine_pods``), exactly as it does the controller's; None
    before any pod has a sample. Its value is the pods' sum, for display only. With recorded sample times
    (``answered``) a pod counts as the source's answer had it then (``_Answered``)."""

    __slots__ = ("answered", "how", "max_age_s", "origin", "pods")

    def __init__(
        self, pods: dict[str, Series], origin: str, max_age_s: float, times: dict[str, Series] | None = None,
        how: catalog.Combine | None = None,
    ) -> None:
        self.pods = [(pod, _Cursor(series, origin)) for pod, series in pods.items()]
        self.origin = origin
        self.max_age_s = max_age_s
        self.answered = _Answered(times, origin) if times is not None else None
        #: whatif mode: the pods' values combined here (``_Input.combine``), one plain reading.
        self.how = how

    def read(self, now: float) -> SignalReading | None:
        values: dict[str, float] = {}
        stamps: dict[str, float] = {}
        seen = False
        if self.answered is not None:
            at: dict[str, float] = {}
            latest: dict[str, float] = {}
            for pod, cursor in self.pods:
                i = cursor.advance(now)
                if i >= 0:
                    at[pod], latest[pod] = cursor.stamps[i], cursor.values[i]
            seen = bool(at)
            for pod, stamp in self.answered.sampled(at, now).items():
                if now - stamp <= self.max_age_s:
                    values[pod] = latest[pod]
                    stamps[pod] = stamp
            if self.how is not None:
                if not values:
                    return SignalReading(None, None, self.origin) if seen else None
                return SignalReading(signals.combine(list(values.values()), self.how), min(stamps.values()),
                                     self.origin)
            if not values:
                return SignalReading(None, None, self.origin, None, {}, {}) if seen else None
            return SignalReading(total(values.values()), min(stamps.values()), self.origin, None, values, stamps)
        for pod, cursor in self.pods:
            i = cursor.advance(now)
            if i >= 0:
                seen = True
                stamp = cursor.stamps[i]
                if now - stamp <= self.max_age_s:
                    values[pod] = cursor.values[i]
                    stamps[pod] = stamp
        if not values:
            return SignalReading(None, None, self.origin, None, {}, {}) if seen else None
        return SignalReading(total(values.values()), min(stamps.values()), self.origin, None, values, stamps)


class _PodHistograms:
    """Every pod's latest bucket rates at or before ``now`` (no older than ``max_age_s``), as one per-pod histogram
    reading: the core sums the reporting pods' buckets and takes the quantile (``core.signals.combine_pods``), as
    it does the Prometheus source's. A pod's value is its +Inf bucket (observations a second). With ``quantile``
    (whatif mode: the trace's pods are not ours to count) the quantile is taken here over the fresh pods."""

    __slots__ = ("answered", "max_age_s", "origin", "pods", "quantile")

    def __init__(
        self, pods: dict[str, dict[float, Series]], origin: str, max_age_s: float, quantile: float | None,
        times: dict[str, Series] | None = None,
    ) -> None:
        self.pods = [
            (pod, _Cursor(b[math.inf], origin), [(bound, _Cursor(s, origin)) for bound, s in sorted(b.items())])
            for pod, b in pods.items()
        ]
        self.origin = origin
        self.max_age_s = max_age_s
        self.quantile = quantile
        self.answered = _Answered(times, origin) if times is not None else None

    def read(self, now: float) -> SignalReading | None:
        values: dict[str, float] = {}
        stamps: dict[str, float] = {}
        buckets: dict[str, dict[float, float]] = {}
        seen = False
        sampled: dict[str, float] | None = None
        if self.answered is not None:
            at = {pod: everything.stamps[i] for pod, everything, _ in self.pods if (i := everything.advance(now)) >= 0}
            sampled = self.answered.sampled(at, now)
        for pod, everything, cursors in self.pods:
            i = everything.advance(now)
            if i < 0:
                continue
            seen = True
            stamp = everything.stamps[i]
            if sampled is not None:
                if pod not in sampled:
                    continue  # not in the source's answer then
                step, stamp = stamp, sampled[pod]
            else:
                step = stamp
            if now - stamp > self.max_age_s:
                continue
            values[pod] = everything.values[i]
            stamps[pod] = stamp
            mine: dict[float, float] = {}
            for bound, cursor in cursors:
                j = cursor.advance(now)
                if j >= 0 and cursor.stamps[j] == step:  # the same scrape (evaluation step) as the +Inf bucket
                    mine[bound] = cursor.values[j]
            buckets[pod] = mine
        if not values:
            return SignalReading(None, None, self.origin, None, {}, {}) if seen else None
        if self.quantile is not None:
            summed: dict[float, float] = {}
            for mine in buckets.values():
                counters.add_buckets(summed, mine)
            return SignalReading(counters.histogram_quantile(self.quantile, summed), min(stamps.values()), self.origin)
        return SignalReading(None, min(stamps.values()), self.origin, None, values, stamps, buckets)


def _cursor(inp: _Input) -> _Cursor | _PodCursors | _PodHistograms:
    if inp.buckets is not None:
        return _PodHistograms(inp.buckets, inp.origin, inp.max_age_s, inp.quantile, inp.times)
    if inp.pods is not None:
        return _PodCursors(inp.pods, inp.origin, inp.max_age_s, inp.times, inp.combine)
    return _Cursor(inp.series, inp.origin)


def _steps(
    compiled: CompiledPolicy,
    inputs: list[_Input],
    recorded: Series | None,
    options: Options,
    start: float,
    count: int,
    progress: Callable[[int], None] | None,
    ready: Series | None = None,
    *,
    first: int = 0,
    memory: Memory | None = None,
    memo: list[PolicyState] | None = None,
) -> Iterator[Step]:
    """The evaluations at ``start + k × period``, ``first ≤ k < count``, each made when the consumer asks for it.

    From ``first`` > 0 (the bulk path resuming one evaluation at a time: ``Bulk.evaluations``), ``memory`` is
    what the policy remembers before evaluation ``first`` (its state, and in whatif mode the count it set, with
    no actuation delay); in recorded mode its scale history is the recorded one. ``memo[0]`` is kept the state
    after the last evaluation made."""
    spec = compiled.policy.spec
    period = spec.evaluation_period_seconds
    target = spec.target.ref()
    first_recorded = int(recorded.values[0]) if recorded is not None else options.initial_replicas
    assert first_recorded is not None or options.mode == "whatif"
    state = PolicyState() if memory is None else memory.state
    # ``decide`` fused for an hpa policy's usual evaluation (None where it does not apply: then ``decide``).
    fast = hpa_decider(compiled)
    # whatif: starts from --initial-replicas, else the first recorded count, else minReplicas.
    if options.initial_replicas is not None:
        initial = options.initial_replicas
    elif first_recorded is not None:
        initial = first_recorded
    else:
        initial = spec.min_replicas
    if memory is not None:
        assert options.actuation_delay_s == 0 or options.mode == "recorded"  # nothing starting to remember
        initial = memory.replicas
    fleet = Fleet(initial, options.actuation_delay_s)
    # A policy with several targets: one what-if fleet per other target, from the same count (whatif only).
    others = {t.ref().key: Fleet(initial, options.actuation_delay_s)
              for t in spec.targets() if t.ref() != target} if spec.pools() else {}
    # The recorded count at each evaluation (before its first sample: --initial-replicas, else the first one).
    before_first = options.initial_replicas if options.initial_replicas is not None else first_recorded
    rec_cursor = _Cursor(recorded, "") if recorded is not None else None
    # recorded mode: the recorded ready replicas (kube-state-metrics), else every recorded replica is ready.
    ready_cursor = _Cursor(ready, "") if ready is not None and ready.times else None
    rec_known = recorded is not None or options.initial_replicas is not None
    whatif = options.mode == "whatif"
    names = [inp.name for inp in inputs]
    cursors = [_cursor(inp) for inp in inputs]
    reads = [cursor.read for cursor in cursors]
    # whatif: perReplica signals are rescaled when our ready count differs from the recorded one.
    rescaled = [j for j, inp in enumerate(inputs) if inp.per_replica] if whatif else []
    prev_recorded: int | None = None
    batch = 0
    # recorded mode: the real scale history (recorded changes within EVENT_HORIZON_S; the state's own).
    ups: tuple[tuple[float, int], ...] = state.scale_up_events
    downs: tuple[tuple[float, int], ...] = state.scale_down_events
    last: float | None = state.last_scale_time
    status: ReplicaStatus | None = None
    complete = False
    if first > 0:
        # Resuming: every cursor where the evaluation before left it, and that evaluation's recorded count.
        before = start + (first - 1) * period
        for cursor in cursors:
            assert isinstance(cursor, _Cursor)  # the bulk path resumes plain series only
            cursor.seek(before)
        if ready_cursor is not None:
            ready_cursor.seek(before)
        if rec_cursor is not None:
            rec_cursor.seek(before)
            prev_recorded = before_first if rec_cursor.at < 0 else int(rec_cursor.values[rec_cursor.at] or 0)
        else:
            prev_recorded = before_first

    for k in range(first, count):
        now = start + k * period
        if rec_cursor is not None:
            i = rec_cursor.advance(now)
            rec_now = before_first if i < 0 else int(rec_cursor.values[i] or 0)
        else:
            rec_now = before_first
        if whatif:
            status = fleet.status(now)
        elif ready_cursor is not None:
            assert rec_now is not None
            j = ready_cursor.advance(now)
            ready_now = rec_now if j < 0 else int(ready_cursor.values[j])
            if status is None or status.spec != rec_now or status.ready != ready_now:
                status = ReplicaStatus(spec=rec_now, ready=ready_now, starting=max(0, rec_now - ready_now))
        elif status is None or status.spec != rec_now:
            # Immutable: one status object while the recorded count holds.
            assert rec_now is not None
            status = ReplicaStatus(spec=rec_now, ready=rec_now, starting=0)

        row = [read(now) for read in reads]
        if complete:
            readings = cast("dict[str, SignalReading]", dict(zip(names, row, strict=True)))
        else:
            # Before a signal's first sample there is no reading (the core reports it missing). Once every signal has
            # one, each keeps one (a cursor never moves back), so the check stops.
            readings = {name: reading for name, reading in zip(names, row, strict=True) if reading is not None}
            complete = len(readings) == len(row)
        if rescaled and rec_now is not None and rec_now != status.ready:
            for j in rescaled:
                reading = row[j]
                if reading is not None and reading.value is not None:
                    # Conserve the load: the recorded replicas' per-replica value spread over our serving ones.
                    value = reading.value * rec_now / max(status.ready, 1)
                    readings[names[j]] = SignalReading(value, reading.timestamp, source=reading.source)

        if others:
            members = {target.key: status, **{key: f.status(now) for key, f in others.items()}}
            observation = Observation(target, status, readings, members=members)
        else:
            observation = Observation(target, status, readings)
        try:
            done = fast(observation, state, now) if fast is not None else None
            decisions, new_state = done if done is not None else decide(compiled, observation, state, now)
        except Exception as exc:  # a failure inside the core must still say when, and not as a traceback
            raise EvaluationError(now, exc) from exc
        decision = decisions[0]
        if others:
            decision = next(d for d in decisions if isinstance(d, ScaleDecision) and d.target == target)
            for d in decisions:
                if isinstance(d, ScaleDecision) and d.target.key in others:
                    others[d.target.key].apply(d.desired, now)
        assert isinstance(decision, ScaleDecision)
        step = Step(now, status, rec_now if rec_known else None, decision, readings)

        if not whatif:
            # The decision was not applied: the scale history (which rate policies read) is the recorded
            # changes, not the decisions the policy would have taken.
            if prev_recorded is not None and rec_now is not None and rec_now != prev_recorded:
                horizon = now - EVENT_HORIZON_S
                ups = tuple(e for e in ups if e[0] > horizon)
                downs = tuple(e for e in downs if e[0] > horizon)
                if rec_now > prev_recorded:
                    ups = (*ups, (now, rec_now - prev_recorded))
                else:
                    downs = (*downs, (now, prev_recorded - rec_now))
                last = now
            if (
                new_state.scale_up_events != ups
                or new_state.scale_down_events != downs
                or new_state.last_scale_time != last
            ):
                new_state = new_state.with_scale_history(ups, downs, last)
            state = new_state
            prev_recorded = rec_now
        else:
            state = new_state
            fleet.apply(decision.desired, now)
        if memo is not None:
            memo[0] = state
        yield step
        if progress is not None:
            batch += 1
            if batch == 1000:
                progress(batch)
                batch = 0
    if progress is not None and batch:
        progress(batch)




# --- the bulk path ----------------------------------------------------------------------------------------------

#: Evaluations decided at once by the bulk path: enough to make numpy's per-call cost small, few enough that a
#: block's columns (a few dozen bytes an evaluation) stay small for any trace length.
BLOCK = 8192


@dataclass(frozen=True, slots=True)
class Block:
    """Consecutive evaluations decided in bulk (``core.fast.HpaScan``), columnar: what a run of ``Step`` objects
    would hold, every signal known (``ok``), one element per evaluation."""

    times: list[float]
    #: The replica status the core saw: the count set on the target, its ready and its starting replicas.
    spec: list[int]
    ready: list[int]
    starting: list[int]
    #: The recorded count (None: unknown throughout).
    recorded: list[int] | None
    decided: Scanned
    #: The signals' names, in the decisions' order.
    names: tuple[str, ...]


def _bulk(
    compiled: CompiledPolicy,
    inputs: list[_Input],
    recorded: Series | None,
    options: Options,
    start: float,
    count: int,
    progress: Callable[[int], None] | None,
    ready: Series | None,
) -> Bulk | None:
    """The evaluations of ``_steps``, the stretches the fast path decides in bulk (``BLOCK`` at a time) and the rest
    one at a time, or None where the bulk path does not apply: it needs an ``hpa`` policy that ``core.fast.hpa_scan``
    decides (no ``behavior`` block) and one plain series per signal. Which evaluations ``hpa_decider`` decides
    (every signal known and fresh, the count within bounds, no scale-up while replicas start) is found here over
    the whole trace first, a block at a time; the others (a gap in a recording, a stale reading, a count out of
    bounds) are decided one at a time by ``_steps`` from the policy's memory there, and the next stretch in bulk
    from what they leave (``Bulk.evaluations``). In whatif mode (without an actuation delay) the counts are the
    policy's own, found as the blocks are decided (``HpaScan.own_counts``), and the checks hold whatever they are
    (``HpaScan.usable_own_at``). None too when no stretch of ``MIN_RUN`` evaluations is left to decide in bulk.
    Same decisions, messages and numbers as ``_steps`` (``tests/replay/test_bulk.py``)."""
    scan = hpa_scan(compiled)
    whatif = options.mode == "whatif"
    if (
        scan is None
        or (whatif and options.actuation_delay_s > 0)
        or any(i.pods is not None or i.buckets is not None for i in inputs)
        or compiled.policy.spec.pools()
    ):
        return None
    by_name = {i.name: i for i in inputs}
    if any(name not in by_name for name, _ in scan.plan):
        return None
    series = [by_name[name].series for name, _ in scan.plan]
    if recorded is not None and not all(v >= 0 and v.is_integer() for v in recorded.values):
        return None  # not a count (the per-evaluation path says so)
    before_first = options.initial_replicas
    if before_first is None and recorded is not None:
        before_first = int(recorded.values[0])
    if before_first is None:
        return None
    prepared = _Columns(compiled, series, recorded, ready if not whatif else None, before_first, start)
    own = None
    if whatif:
        # As _steps: from --initial-replicas, else the first recorded count (minReplicas needs no recorded count,
        # and then there is none to rescale by: the per-evaluation path).
        rescale = tuple(by_name[name].per_replica for name, _ in scan.plan)
        own = _Own(rescale, before_first)
    plain: list[tuple[int, int]] = []
    changes = _Changes(start, prepared.period)
    for a in range(0, count, BLOCK):
        inp = prepared.input(a, min(count, a + BLOCK))
        if own is None:
            usable = scan.usable_at(inp)
            changes.add(a, inp.current)
        else:
            # A count out of bounds (the first one included) is decided one at a time: ``Bulk.evaluations``.
            usable = scan.usable_own_at(inp, own.rescale)
        _add_runs(plain, ~usable, a)
    plain = _merged(plain, count, MIN_RUN)
    if sum(b - a for a, b in plain) == count:
        return None
    steps = functools.partial(_steps, compiled, inputs, recorded, options, start)
    return Bulk(scan, prepared, count, progress, tuple(name for name, _ in scan.plan), own, plain, changes,
                steps, ready)


#: A stretch of evaluations between two decided one at a time is decided in bulk only from this length on: a block
#: costs a few hundred microseconds of numpy calls whatever its length, deciding one evaluation ≈ 20 µs. Any length
#: gives the same decisions (``tests/replay/test_bulk.py`` sets it to 1).
MIN_RUN = 64


def _add_runs(runs: list[tuple[int, int]], declined: Any, offset: int) -> None:
    """Append to ``runs`` the stretches ``[a, b)`` where ``declined`` (a bool array of the evaluations from
    ``offset``) holds, joining one that continues the last run."""
    import numpy as np  # noqa: PLC0415

    if not bool(declined.any()):
        return
    edges = np.flatnonzero(np.diff(np.concatenate(([False], declined, [False])).astype(np.int8)))
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        if runs and runs[-1][1] == offset + a:
            runs[-1] = (runs[-1][0], offset + b)
        else:
            runs.append((offset + a, offset + b))


def _merged(runs: list[tuple[int, int]], count: int, shortest: int) -> list[tuple[int, int]]:
    """``runs`` of evaluations decided one at a time, with each stretch between two of them (or before the first,
    or after the last) shorter than ``shortest`` joined to them."""
    out: list[tuple[int, int]] = []
    for a, b in runs:
        if out and a - out[-1][1] < shortest:
            out[-1] = (out[-1][0], b)
        elif not out and 0 < a < shortest:
            out.append((0, b))
        else:
            out.append((a, b))
    if out and 0 < count - out[-1][1] < shortest:
        out[-1] = (out[-1][0], count)
    return out


class _Changes:
    """recorded mode: the evaluations at which the recorded count changed (``_steps``'s scale history), to give the
    history the per-evaluation path keeps at any evaluation (``history``)."""

    def __init__(self, start: float, period: float) -> None:
        self.start = start
        self.period = period
        self.at: list[int] = []
        self.moves: list[int] = []  # after - before
        self._last: int | None = None

    def add(self, a: int, current: Any) -> None:
        """The recorded counts of evaluations ``a``… (``a`` the evaluation after the last added)."""
        import numpy as np  # noqa: PLC0415

        if not len(current):
            return
        before = np.concatenate(([current[0] if self._last is None else self._last], current[:-1]))
        where = np.flatnonzero(current != before)
        self.at.extend((where + a).tolist())
        self.moves.extend((current[where] - before[where]).tolist())
        self._last = int(current[-1])

    def history(self, k: int) -> tuple[tuple[tuple[float, int], ...], tuple[tuple[float, int], ...], float | None]:
        """The scale-up and scale-down events and the last scale time ``_steps`` holds before evaluation ``k``: it
        drops the events older than ``EVENT_HORIZON_S`` before the newest at each change, so the changes within
        that horizon of the last one before ``k``."""
        n = bisect.bisect_left(self.at, k)  # the changes at evaluations before k
        if n == 0:
            return (), (), None
        start, period = self.start, self.period
        last = start + self.at[n - 1] * period
        horizon = last - EVENT_HORIZON_S
        i = n
        while i > 0 and start + self.at[i - 1] * period > horizon:
            i -= 1
        ups: list[tuple[float, int]] = []
        downs: list[tuple[float, int]] = []
        for j in range(i, n):
            t, move = start + self.at[j] * period, self.moves[j]
            if move > 0:
                ups.append((t, move))
            else:
                downs.append((t, -move))
        return tuple(ups), tuple(downs), last


class _Own(NamedTuple):
    """whatif mode: which signals are rescaled by recorded ÷ own ready replicas, and the count to start from."""

    rescale: tuple[bool, ...]
    initial: int


class Memory(NamedTuple):
    """What the policy remembers before an evaluation: its state, and in whatif mode the count it set last (the
    current count then)."""

    state: PolicyState
    replicas: int


class Bulk:
    """The evaluations, the stretches the fast path decides in bulk and the rest one at a time
    (``evaluations(a, b, memory)``: ``Block`` and ``Step`` items, in order). From ``a`` > 0 it starts from the
    policy's memory there (``memory_at(a)``, where the evaluations the window reaches back to are decided in bulk:
    ``warmable``), so that two processes can each decide a half (``replay.command``)."""

    def __init__(
        self, scan: HpaScan, prepared: _Columns, count: int, progress: Callable[[int], None] | None,
        names: tuple[str, ...], own: _Own | None = None, plain: list[tuple[int, int]] | None = None,
        changes: _Changes | None = None, steps: Callable[..., Iterator[Step]] | None = None,
        ready: Series | None = None,
    ) -> None:
        self.scan = scan
        self.prepared = prepared
        self.count = count
        self.progress = progress
        self.names = names
        #: whatif mode (the policy's own count, decided as it goes: ``HpaScan.own_counts``); None: recorded.
        self.own = own
        #: The stretches ``[a, b)`` decided one at a time, in order (the rest is decided in bulk).
        self.plain = plain or []
        self._ends = [b for _, b in self.plain]
        self.changes = changes or _Changes(prepared.start, prepared.period)
        #: ``_steps`` with the replay's arguments bound: (count, progress, ready, first=, memory=, memo=).
        self._steps = steps
        self._ready = ready

    @property
    def splits(self) -> bool:
        """Whether ``evaluations(a, …)`` can start anywhere ``warmable``: recorded mode, where no count depends on a
        decision."""
        return self.own is None

    @property
    def declined(self) -> int:
        """How many evaluations are decided one at a time."""
        return sum(b - a for a, b in self.plain)

    def evaluations(self, a: int = 0, b: int | None = None, memory: Memory | None = None) -> Iterator[Block | Step]:
        """Evaluations ``a`` to ``b`` (default: to the end) in order, from ``memory`` (what the policy remembers
        before ``a``; default: nothing, before the first evaluation): each stretch decided in bulk as ``Block``
        items, each evaluation decided one at a time as a ``Step``."""
        end = self.count if b is None else b
        if memory is None:
            assert a == 0
            memory = Memory(PolicyState(), self.own.initial if self.own is not None else 0)
        runs = self.plain
        i = bisect.bisect_right(self._ends, a)  # the first run ending after a
        k = a
        while k < end:
            if i < len(runs) and runs[i][0] <= k:
                stop = min(runs[i][1], end)
                i += 1
                memory = yield from self._one_at_a_time(k, stop, memory)
            elif self.own is not None and not self.scan.bounded(memory.replicas):
                # whatif: the evaluations decided one at a time left the policy's own count out of bounds (a
                # target at zero replicas stays there: HPA's "scaling disabled"), which the blocks do not decide.
                # One more evaluation one at a time, until a count within bounds lets the blocks go on.
                stop = k + 1
                memory = yield from self._one_at_a_time(k, stop, memory)
            else:
                stop = min(runs[i][0], end) if i < len(runs) else end
                memory = yield from self._in_blocks(k, stop, memory)
            k = stop

    def _one_at_a_time(self, a: int, b: int, memory: Memory) -> Generator[Step, None, Memory]:
        assert self._steps is not None
        memo = [memory.state]
        desired = memory.replicas
        for step in self._steps(b, self.progress, self._ready, first=a, memory=memory, memo=memo):
            desired = step.decision.desired
            yield step
        return Memory(memo[0], desired)

    def _in_blocks(self, a: int, b: int, memory: Memory) -> Generator[Block, None, Memory]:
        """Evaluations ``a`` to ``b``, every one usable, a ``BLOCK`` at a time; returns the policy's memory after
        them as ``hpa_decider`` would leave it (``PolicyState``): the recommendation history, no failure, and the
        scale history (recorded mode: the recorded one; whatif: its own decisions within the engine's horizon)."""
        own = self.own
        before = memory.state
        history = before.recommendations
        count = memory.replicas
        ups, downs, last_scale = list(before.scale_up_events), list(before.scale_down_events), before.last_scale_time
        now = 0.0
        for first in range(a, b, BLOCK):
            last = min(b, first + BLOCK)
            inp = self.prepared.input(first, last)
            recorded = inp.current.tolist()
            try:
                if own is not None:
                    counts = self.scan.own_counts(inp, own.rescale, count, history)
                    inp = self.scan.with_own(inp, own.rescale, counts)
                decided, history = self.scan.decide(inp, history)
            except Exception as exc:  # as in _steps: a failure inside the core says when
                raise EvaluationError(float(inp.now[0]), exc) from exc
            count = decided.desired[-1]
            times = inp.now.tolist()
            now = times[-1]
            if own is not None:
                # The policy's own scale events (``hpa_decider``'s), only those within the horizon kept.
                for t, was, wants in zip(times, decided.current, decided.desired, strict=True):
                    if wants > was:
                        ups.append((t, wants - was))
                        last_scale = t
                    elif wants < was:
                        downs.append((t, was - wants))
                        last_scale = t
                horizon = now - EVENT_HORIZON_S
                ups = [e for e in ups if e[0] > horizon]
                downs = [e for e in downs if e[0] > horizon]
            yield Block(times, decided.current, inp.ready.tolist(), inp.starting.tolist(), recorded, decided,
                        self.names)
            if self.progress is not None:
                self.progress(last - first)
        if own is None:
            scale_ups, scale_downs, last_scale = self.changes.history(b)
        else:
            scale_ups, scale_downs = tuple(ups), tuple(downs)
        state = PolicyState(history, scale_ups, scale_downs, (), now, last_scale, before.idle_since, before.algorithm)
        return Memory(state, count)

    def blocks(self, a: int = 0, b: int | None = None, history: tuple[tuple[float, int], ...] = ()) -> Iterator[Block]:
        """Evaluations ``a`` to ``b`` (default: to the end), every one decided in bulk (none declined), ``history``
        the state's recommendations before ``a`` (``()`` before the first evaluation)."""
        end = self.count if b is None else b
        assert self.own is None or a == 0
        state = PolicyState(recommendations=history)
        return self._in_blocks(a, end, Memory(state, self.own.initial if self.own is not None else 0))

    def warmable(self, a: int) -> bool:
        """Whether ``memory_at(a)`` applies: the evaluations the window of evaluation ``a - 1`` reaches back to
        (``_warm_from``) are all decided in bulk."""
        lo = self._warm_from(a)
        i = bisect.bisect_right(self._ends, lo)
        return not (i < len(self.plain) and self.plain[i][0] < a)

    def _warm_from(self, a: int) -> int:
        # The window of evaluation a - 1 starts at or after evaluation ``first`` (evaluations are period_s apart).
        return max(0, a - 1 - (math.ceil(self.scan.window_s / self.prepared.period) + 2))

    def warm(self, a: int) -> tuple[tuple[float, int], ...]:
        """The recommendation history before evaluation ``a`` (``a`` > 0, ``warmable``)."""
        return self.warm_at(a)[0]

    def warm_at(self, a: int) -> tuple[tuple[tuple[float, int], ...], int]:
        """The recommendation history before evaluation ``a`` (``a`` > 0, ``warmable``) and the desired count of
        evaluation ``a - 1``: what deciding every evaluation before ``a`` would leave and decide last, computed from
        the evaluations the stabilization window of evaluation ``a - 1`` reaches back to (and a few more), each of
        whose recommendations depends on its own readings and count only."""
        assert a > 0
        assert self.splits
        assert self.warmable(a)
        # Deciding from ``first`` as if the replay started there puts (its time, its count) first in the history,
        # out of reach of that window and every later one; the evaluations decided here before a - 1 have too short
        # a history, but only their recommendations are kept, and those need none.
        first = self._warm_from(a)
        decided, history = self.scan.decide(self.prepared.input(first, a), ())
        return history, decided.desired[-1]

    def memory_at(self, a: int) -> tuple[Memory, int]:
        """The policy's memory before evaluation ``a`` (``a`` > 0, ``warmable``, recorded mode), as deciding every
        evaluation before it leaves it (``hpa_decider`` decided ``a - 1``: no failure counted), and the desired
        count of evaluation ``a - 1``."""
        history, previous = self.warm_at(a)
        ups, downs, last = self.changes.history(a)
        now = self.prepared.start + (a - 1) * self.prepared.period
        return Memory(PolicyState(history, ups, downs, (), now, last), previous), previous


class _Columns:
    """The inputs of evaluations ``a`` to ``b`` as ``_steps`` builds them one at a time, as arrays: each signal's
    latest sample at or before each evaluation (value and time), the recorded count (before its first sample, the
    one given) and the recorded ready replicas (else every recorded replica ready)."""

    def __init__(
        self, compiled: CompiledPolicy, series: list[Series], recorded: Series | None, ready: Series | None,
        before_first: int, start: float,
    ) -> None:
        import numpy as np  # noqa: PLC0415 - only the bulk path needs numpy

        self.np = np
        self.period = compiled.policy.spec.evaluation_period_seconds
        self.start = start
        self.series = [(_array(s.times), _array(s.values)) for s in series]
        self.recorded = (_array(recorded.times), _array(recorded.values)) if recorded is not None else None
        self.ready = (_array(ready.times), _array(ready.values)) if ready is not None and ready.times else None
        self.before_first = before_first

    def input(self, a: int, b: int) -> ScanInput:
        np = self.np
        # ``start + k × period`` as _steps computes it (k converted to a float, then multiplied, then added).
        now = self.start + np.arange(a, b, dtype=np.int64).astype(np.float64) * self.period
        values, stamps = [], []
        for times, vals in self.series:
            at = np.searchsorted(times, now, side="right") - 1
            seen = at >= 0
            values.append(np.where(seen, vals[at], np.nan))
            stamps.append(np.where(seen, times[at], np.nan))
        if self.recorded is not None:
            times, vals = self.recorded
            at = np.searchsorted(times, now, side="right") - 1
            current = np.where(at >= 0, vals[at], float(self.before_first)).astype(np.int64)
        else:
            current = np.full(len(now), self.before_first, dtype=np.int64)
        if self.ready is not None:
            times, vals = self.ready
            at = np.searchsorted(times, now, side="right") - 1
            ready = np.where(at >= 0, vals[at].astype(np.int64), current)
            starting = np.maximum(current - ready, 0)
        else:
            ready = current
            starting = np.zeros(len(now), dtype=np.int64)
        return ScanInput(now, tuple(values), tuple(stamps), current, ready, starting)


def _array(values: Sequence[float]) -> Any:
    """A read-only float64 array over ``values`` (an ``array('d')`` is shared, not copied)."""
    import numpy as np  # noqa: PLC0415

    if isinstance(values, array):
        return np.frombuffer(values, dtype=np.float64) if len(values) else np.zeros(0)
    return np.asarray(values, dtype=np.float64)
