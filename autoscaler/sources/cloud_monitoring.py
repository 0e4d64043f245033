"""The Cloud Monitoring source: ``ListTimeSeries`` with google-cloud-monitoring's async client.

Serves GKE accelerator system metrics (``kubernetes.io/container/accelerator/*`` per pod,
``kubernetes.io/node/accelerator/*`` per node, given the target's node names), series that Managed
Prometheus stored (``prometheus.googleapis.com/<name>/gauge``, so every serving preset works here too)
and the TPU memory-used ratio of Google's JetStream guide (memory_used / memory_total per pod).

One ``ListTimeSeries`` per metric type per tick for all targets (namespaces or nodes in one ``one_of``),
pages followed, the newest point of each series kept with its own end time (system metrics are sampled
every 60 s and arrive late; the core judges the age). Calls go out with ``retry=None`` and an explicit
timeout (the client's default retry runs up to 90 s), inside the tick's deadline with our own retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from autoscaler.core import counters
from autoscaler.core.model import SignalReading
from autoscaler.core.signals import aggregate_of, combine
from autoscaler.core.sourcespec import CloudMonitoringSourceSpec
from autoscaler.core.spec import SignalSpec
from autoscaler.sources import presets
from autoscaler.sources.base import (
    PodMatcher,
    PodSample,
    Readings,
    SignalRequest,
    describe,
    label_layout,
    per_target,
)
from autoscaler.sources.circuit import Answer, Circuit, PermanentError, TransientError, retrying

#: How far back to look for the newest point: system metrics are sampled every 60 s and may lag minutes.
LOOKBACK_S = 600.0



class Where(NamedTuple):
    """Whose a time series is: the workload's namespace and pod, or (node-level metrics) no namespace and the node."""

    namespace: str
    unit: str


class Point(NamedTuple):
    """The newest point of one time series."""

    value: float
    #: The end of the point's interval (unix seconds): the sample's own time.
    timestamp: float
    #: A distribution's cumulative bucket rates by upper bound (histograms), else None.
    buckets: dict[float, float] | None


#: Points of one metric type by whose they are.
_Points = dict[Where, list[Point]]


class Alignment(NamedTuple):
    """How a request asks Cloud Monitoring to align a cumulative series."""

    aligner: str
    #: The alignment period asked for, in seconds (Cloud Monitoring's minimum is 60).
    window_s: float


class Distribution(NamedTuple):
    """A delta distribution point as rates: observations per second and cumulative bucket rates by upper bound."""

    rate: float
    buckets: dict[float, float]


class MetricTypes(NamedTuple):
    """The Cloud Monitoring metric types a request reads: summed numerators, over summed denominators if any."""

    numerators: tuple[str, ...]
    denominators: tuple[str, ...]


def alignment(request: SignalRequest) -> Alignment | None:
    """Counters: ``ALIGN_RATE`` over the window; histograms (distributions): ``ALIGN_DELTA`` over the window, whose
    bucket counts the core turns into the quantile (Cloud Monitoring's own ``ALIGN_PERCENTILE_nn`` aligners offer
    only p05/p50/p95/p99 and cannot sum several pods' buckets first)."""
    sig = request.signal
    if sig.rate is not None:
        return Alignment("ALIGN_RATE", sig.rate.window_seconds)
    if sig.quantile is not None:
        return Alignment("ALIGN_DELTA", sig.quantile.window_seconds)
    return None


def _bounds(options: Any, count: int) -> list[float]:
    """Upper bounds of a distribution's buckets (``count`` of them, the last one unbounded)."""
    raw = getattr(type(options), "pb", None)  # proto-plus wraps some messages; google.api.Distribution is plain
    kind = (raw(options) if raw is not None else options).WhichOneof("options")
    if kind == "explicit_buckets":
        finite = [float(b) for b in options.explicit_buckets.bounds]
    elif kind == "exponential_buckets":
        e = options.exponential_buckets
        finite = [e.scale * e.growth_factor**i for i in range(e.num_finite_buckets + 1)]
    elif kind == "linear_buckets":
        li = options.linear_buckets
        finite = [li.offset + li.width * i for i in range(li.num_finite_buckets + 1)]
    else:
        raise PermanentError(f"distribution buckets of kind {kind} are not supported")
    # Bucket 0 is the underflow (below bounds[0]), bucket i holds [bounds[i-1], bounds[i]), the last overflows.
    if not count:
        return []
    padded = [*finite, *([math.inf] * count)]
    return [*padded[: count - 1], math.inf]


def _distribution(point: Any, period_s: float) -> Distribution:
    """A delta distribution point as rates (observations per second, cumulative bucket rates by upper bound)."""
    dist = point.value.distribution_value
    counts = [float(c) for c in dist.bucket_counts]
    bounds = _bounds(dist.bucket_options, len(counts))
    cumulative: dict[float, float] = {}
    running = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        running += count
        cumulative[bound] = running / period_s
    total = float(dist.count) / period_s
    cumulative[math.inf] = max(total, cumulative.get(math.inf, 0.0))
    return Distribution(total, cumulative)


def metric_types(request: SignalRequest) -> MetricTypes:
    """The metric types a request needs (the catalog's, for a preset)."""
    sig = request.signal
    if sig.metric is not None:
        return MetricTypes((sig.metric,), ())
    if sig.preset is None:
        raise PermanentError("the cloud-monitoring source reads 'preset' or 'metric' signals, not PromQL")
    preset = presets.get(sig.preset)
    why = preset.why_unavailable("cloud-monitoring")
    if why is not None:
        raise PermanentError(f"preset {preset.name} is not served by Cloud Monitoring: {why}")
    return MetricTypes(*preset.cloud_monitoring_types())


def _node_level(metric_type: str) -> bool:
    return metric_type.startswith("kubernetes.io/node/")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _one_of(values: Sequence[str]) -> str:
    return f"one_of({', '.join(_quote(v) for v in sorted(set(values)))})"


def build_filter(metric_type: str, requests: Sequence[SignalRequest], *, cluster: str | None) -> str:
    """The ``filter`` for one metric type over a batch: scoped to the cluster and the targets' namespaces
    (or nodes for node-level metrics), plus the signal's labels as metric labels."""
    parts = [f"metric.type = {_quote(metric_type)}"]
    prom = metric_type.startswith("prometheus.googleapis.com/")
    labels = label_layout(requests[0].signal)
    if _node_level(metric_type):
        parts.append(f"resource.labels.node_name = {_one_of([n for r in requests for n in r.node_names()])}")
    elif prom and labels.namespace != "namespace":
        # Series scraped in another namespace (the TPU device plugin in kube-system): the workload's
        # namespace is a metric label; the resource's namespace is kube-system.
        pinned = requests[0].signal.labels.get(labels.namespace)
        if pinned is None:
            parts.append(f"metric.labels.{labels.namespace} = {_one_of([r.target.namespace for r in requests])}")
    else:
        key = "namespace" if prom else "namespace_name"  # prometheus_target vs k8s_container/k8s_pod
        parts.append(f"resource.labels.{key} = {_one_of([r.target.namespace for r in requests])}")
    if cluster is not None:
        parts.append(f"resource.labels.{'cluster' if prom else 'cluster_name'} = {_quote(cluster)}")
    for key, value in sorted(requests[0].signal.labels.items()):
        parts.append(f"metric.labels.{key} = {_quote(value)}")
    return " AND ".join(parts)


def _point_value(point: Any) -> float:
    value = point.value
    kind = type(value).pb(value).WhichOneof("value")
    if kind == "double_value":
        return float(value.double_value)
    if kind == "int64_value":
        return float(value.int64_value)
    if kind == "bool_value":
        return 1.0 if value.bool_value else 0.0
    raise PermanentError(f"point of type {kind} is not a number")


def _where(series: Any) -> Where:
    """Whose a time series is (namespace and pod, or the node), whatever its monitored resource.

    A series scraped from another namespace's exporter (the TPU device plugin in kube-system) names the
    workload in ``exported_namespace``/``exported_pod``: those win over the scrape's own."""
    res, met = series.resource.labels, series.metric.labels
    if met.get("exported_namespace"):
        return Where(met["exported_namespace"], met.get("exported_pod", ""))
    namespace = res.get("namespace_name") or res.get("namespace") or met.get("namespace") or ""
    if "node_name" in res and "pod_name" not in res:
        return Where("", res["node_name"])
    pod = res.get("pod_name") or met.get("pod") or res.get("pod") or ""
    if not pod and res.get("instance"):
        pod = res["instance"].rsplit(":", 1)[0]  # GMP: instance is <pod>:<port>
    return Where(namespace, pod)


def _point(point: Any, align: Alignment | None) -> Point:
    stamp = point.interval.end_time.timestamp()
    if align is not None and align.aligner == "ALIGN_DELTA":
        dist = _distribution(point, max(60.0, align.window_s))
        return Point(dist.rate, stamp, dist.buckets)
    return Point(_point_value(point), stamp, None)


#: One series as ``history`` holds it: its copies per process (one list of points each, in time order; a series
#: without a ``pid`` label is one copy), read as one series (``_copies_of``).
_Copies = list[list[Point]]


def _copies_of(ts: Any) -> tuple[tuple[str, str], ...] | None:
    """The labels, less ``pid``, of a series that is one process's copy of a gauge (prometheus-client's
    multiprocess mode, one copy per process: ``presets.PROCESS_LABEL``; vLLM with several API-server processes),
    or None for a series without the label. Copies with the same key (and pod) are one series, read at its
    largest copy, as the pods source (``pods._one_per_process``) and the Prometheus/GMP sources' ``max without
    (pid)`` read it: summed or averaged by the signal's rule, one gauge counted once per process (0.9/0.3 read
    0.6 averaged, where the largest copy, 0.9, is what the pods source reads)."""
    labels = ts.metric.labels
    return presets.process_copy_key(labels) if presets.PROCESS_LABEL in labels else None


def _larger(a: Point, b: Point) -> Point:
    """The larger of two copies' points (a NaN loses to any number, as in PromQL's ``max``)."""
    return b if presets.copy_wins(b.value, a.value) else a


def _merge(parts: Sequence[dict[Where, list[_Copies]]]) -> dict[Where, list[_Copies]]:
    out: dict[Where, list[_Copies]] = {}
    for part in parts:
        for where, series in part.items():
            out.setdefault(where, []).extend(series)
    return out


def _newest(series: Sequence[_Copies], t: float) -> list[Point]:
    """Each series' newest point at ``t``, as a read at ``t`` finds it: ended by ``t`` and within the lookback
    (of a series with copies per process, the largest copy's)."""
    out = []
    for copies in series:
        chosen: Point | None = None
        for pts in copies:
            found = None
            for p in pts:  # time order
                if p.timestamp > t:
                    break
                found = p
            if found is not None and found.timestamp > t - LOOKBACK_S:
                chosen = found if chosen is None else _larger(chosen, found)
        if chosen is not None:
            out.append(chosen)
    return out


def _as_series(namespace: str, unit: str, samples: Sequence[UnitSample]) -> list[dict[str, Any]]:
    """One pod's recorded samples as ``query_range`` series (a histogram's: one per bucket, labelled ``le``)."""
    if not samples:
        return []
    labels = {"namespace": namespace, "pod": unit}
    if samples[0].buckets is None:
        return [{"metric": labels, "values": [[u.sample.timestamp, repr(u.sample.value)] for u in samples]}]
    bounds = sorted({b for u in samples for b in (u.buckets or {})})
    return [
        {"metric": {**labels, "le": "+Inf" if b == math.inf else repr(b)},
         "values": [[u.sample.timestamp, repr((u.buckets or {}).get(b, 0.0))] for u in samples]}
        for b in bounds
    ]


class UnitSample(NamedTuple):
    """One pod's (or node's) sample of a signal, and a histogram's summed bucket rates."""

    sample: PodSample
    buckets: dict[float, float] | None


def unit_sample(signal: SignalSpec, values: Sequence[Point], totals: Sequence[Point] | None) -> UnitSample | None:
    """One pod's value from the newest point of each of its series (``totals``: the denominators', for a ratio;
    None when the signal has none): the one rule for what ``run`` reads now and ``record`` saves over a range.
    None when a ratio has no denominator point. The sample's time is the oldest point's."""
    stamp = min(p.timestamp for p in values)
    buckets: dict[float, float] | None = None
    if totals is not None:
        if not totals:
            return None
        total = math.fsum(p.value for p in totals)
        value = math.fsum(p.value for p in values) / total if total else math.nan
        stamp = min(stamp, *(p.timestamp for p in totals))
    elif signal.quantile is not None:
        value = math.fsum(p.value for p in values)  # observations per second
        buckets = {}
        for p in values:
            counters.add_buckets(buckets, p.buckets or {})
    elif signal.rate is not None:
        value = math.fsum(p.value for p in values)  # a pod's counters add up
    else:
        value = combine([p.value for p in values], aggregate_of(signal))
    return UnitSample(PodSample(value, stamp), buckets)


class CloudMonitoringSource:
    """Reads ``cloud-monitoring`` signals. ``client`` is a ``MetricServiceAsyncClient`` (made from
    application-default credentials when not given)."""

    def __init__(
        self,
        spec: CloudMonitoringSourceSpec,
        *,
        client: Any | None = None,
        clock: Callable[[], float] = time.time,
        circuit: Circuit | None = None,
    ) -> None:
        self.spec = spec
        self.label = describe(spec)
        self._client = client
        self._clock = clock
        self.circuit = circuit or Circuit()
        #: ListTimeSeries calls made (pages included), for tests of batching and paging.
        self.calls = 0

    async def aclose(self) -> None:
        client, self._client = self._client, None
        transport = getattr(client, "transport", None)
        if transport is not None:
            await transport.close()

    def client(self) -> Any:
        if self._client is None:
            try:
                from google.cloud import monitoring_v3  # noqa: PLC0415 - see _list

                self._client = monitoring_v3.MetricServiceAsyncClient()
            except Exception as exc:  # DefaultCredentialsError and friends: unknown, never a crash
                raise PermanentError(f"cannot create a Cloud Monitoring client: {exc}") from None
        return self._client

    async def _list(
        self, metric_type: str, flt: str, timeout_s: float, align: Alignment | None = None,
        span: tuple[float, float] | None = None,
    ) -> list[Any]:
        """Every series of one ``ListTimeSeries`` (pages followed), over the lookback before now, or ``span``
        (``record``: start and end, unix seconds)."""
        # Loaded on first use: importing the client library costs about a second of CLI start-up.
        from google.api_core import exceptions as gexc  # noqa: PLC0415
        from google.cloud import monitoring_v3  # noqa: PLC0415

        now = self._clock()
        first, last = span if span is not None else (now - LOOKBACK_S, now)
        interval = monitoring_v3.TimeInterval(
            end_time={"seconds": int(last) + 1}, start_time={"seconds": int(first)}
        )
        request = monitoring_v3.ListTimeSeriesRequest(
            name=f"projects/{self.spec.project}",
            filter=flt,
            interval=interval,
            view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
        )
        if align is not None:
            request.aggregation = monitoring_v3.Aggregation(
                # Cloud Monitoring's minimum period is 60 s.
                alignment_period={"seconds": max(60, int(align.window_s))},
                per_series_aligner=getattr(monitoring_v3.Aggregation.Aligner, align.aligner),
            )
        out: list[Any] = []
        try:
            self.calls += 1
            pager = await self.client().list_time_series(request=request, retry=None, timeout=timeout_s)
            async for page in pager.pages:
                out.extend(page.time_series)
                if page.next_page_token:
                    self.calls += 1
        except (gexc.DeadlineExceeded, gexc.ServiceUnavailable, gexc.InternalServerError) as exc:
            raise TransientError(f"{metric_type}: {exc.message or exc}") from None
        except gexc.PermissionDenied as exc:
            raise PermanentError(
                f"permission denied on projects/{self.spec.project} ({exc.message}); "
                "the identity needs roles/monitoring.viewer"
            ) from None
        except gexc.GoogleAPICallError as exc:
            raise PermanentError(f"{metric_type}: {exc.code}: {exc.message}") from None
        return out

    async def _points(self, metric_type: str, group: Sequence[SignalRequest], deadline_s: float) -> _Points:
        flt = build_filter(metric_type, group, cluster=self.spec.cluster)
        timeout_s = min(self.spec.timeout_seconds, deadline_s)
        align = alignment(group[0])
        series = await retrying(lambda: self._list(metric_type, flt, timeout_s, align), deadline_s=deadline_s)
        points: _Points = {}
        copies: dict[tuple[Where, tuple[tuple[str, str], ...]], int] = {}  # -> its index in points[where]
        for ts in series:
            if not ts.points:
                continue
            newest = max(ts.points, key=lambda p: p.interval.end_time.timestamp())
            where, point = _where(ts), _point(newest, align)
            values = points.setdefault(where, [])
            key = _copies_of(ts)
            if key is None:
                values.append(point)
            elif (where, key) in copies:
                at = copies[where, key]
                values[at] = _larger(values[at], point)
            else:
                copies[where, key] = len(values)
                values.append(point)
        return points

    async def history(self, request: SignalRequest, *, start: float, end: float) -> list[dict[str, Any]]:
        """``record``: the request's target's per-pod samples over ``start``..``end``, as the series of a Prometheus
        ``query_range`` result (labels ``namespace`` and ``pod``, a histogram's per pod and ``le``), each sample at
        its own time: what ``run`` reads at any moment of the range is each pod's newest sample then.

        1. one ``ListTimeSeries`` per metric type over the range (from one lookback before it), with the filter and
           the aligner ``run`` sends (``ALIGN_RATE`` for counters, ``ALIGN_DELTA`` for distributions);
        2. per pod, at each of its numerator points, the newest point of each of its series within the lookback
           combined by ``unit_sample`` (the source's own rule), stamped with the oldest point's time;
        3. only the pods (or nodes) the source attributes to the request's target.

        Counters and distributions are aligned over the range's periods, not the ones ending at each moment
        ``run`` reads: a recorded rate can be up to one alignment period older than the live one."""
        types = metric_types(request)
        if any(_node_level(t) for t in types.numerators + types.denominators) and not request.node_names():
            raise PermanentError("a node-level metric needs the nodes of the target's pods (none known)")
        align = alignment(request)
        timeout_s = self.spec.timeout_seconds
        span = (start - LOOKBACK_S, end)
        by_type: list[dict[Where, list[_Copies]]] = []
        for metric_type in types.numerators + types.denominators:
            flt = build_filter(metric_type, [request], cluster=self.spec.cluster)
            series = await self._list(metric_type, flt, timeout_s, align, span)
            found: dict[Where, list[_Copies]] = {}
            groups: dict[tuple[Where, tuple[tuple[str, str], ...]], _Copies] = {}
            for ts in series:
                pts = sorted((_point(p, align) for p in ts.points), key=lambda p: p.timestamp)
                if not pts:
                    continue
                where, key = _where(ts), _copies_of(ts)
                if key is None:
                    found.setdefault(where, []).append([pts])
                elif (where, key) in groups:
                    groups[where, key].append(pts)
                else:
                    groups[where, key] = [pts]
                    found.setdefault(where, []).append(groups[where, key])
            by_type.append(found)
        numerators = _merge(by_type[: len(types.numerators)])
        denominators = _merge(by_type[len(types.numerators) :]) if types.denominators else None
        owned = self._owned(request, numerators)
        out: list[dict[str, Any]] = []
        for where in sorted(owned):
            times = sorted({p.timestamp for copies in numerators[where] for s in copies for p in s
                            if start <= p.timestamp <= end})
            samples: list[UnitSample] = []
            for t in times:
                values = _newest(numerators[where], t)
                totals = None if denominators is None else _newest(denominators.get(where, []), t)
                unit = unit_sample(request.signal, values, totals) if values else None
                if unit is None:
                    continue
                if samples and unit.sample.timestamp <= samples[-1].sample.timestamp:
                    if unit.sample.timestamp < samples[-1].sample.timestamp:
                        continue  # an older denominator: nothing newer than what is recorded
                    samples.pop()  # the same time: the newer points win
                samples.append(unit)
            out.extend(_as_series(request.target.namespace if not where.namespace else where.namespace,
                                  where.unit, samples))
        return out

    def _owned(self, request: SignalRequest, points: dict[Where, list[_Copies]]) -> list[Where]:
        """The pods (or nodes) of ``points`` that ``run`` attributes to the request's target."""
        sig = request.signal
        workers = sig.preset is not None and presets.get(sig.preset).workers
        matcher = PodMatcher([request], workers=workers)
        nodes = set(request.node_names())
        return [w for w in points if (not w.namespace and w.unit in nodes) or matcher.owners(w.namespace, w.unit)]

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        if not requests:
            return {}
        blocked = self.circuit.allow()
        if blocked is not None:
            return {r.key: SignalReading(None, None, self.label, blocked) for r in requests}
        groups: dict[tuple[Any, ...], list[SignalRequest]] = {}
        out: Readings = {}
        for r in requests:
            try:
                types = metric_types(r)
            except (PermanentError, presets.PresetError) as exc:
                out[r.key] = SignalReading(None, None, self.label, str(exc))
                continue
            if any(_node_level(t) for t in types.numerators + types.denominators) and not r.node_names():
                out[r.key] = SignalReading(
                    None,
                    None,
                    self.label,
                    "a node-level metric needs the nodes of the target's pods (read from the cluster; "
                    "none known: no pods, or outside a cluster)",
                )
                continue
            key = (types, tuple(sorted(r.signal.labels.items())), aggregate_of(r.signal), alignment(r))
            groups.setdefault(key, []).append(r)
        results = await asyncio.gather(
            *(self._read_group(key[0], g, deadline_s) for key, g in groups.items()), return_exceptions=False
        )
        if not groups:
            self.circuit.success()
            return out
        out.update(self.circuit.settle(results))
        return out

    async def _read_group(self, types: MetricTypes, group: list[SignalRequest], deadline_s: float) -> Answer:
        numerators, denominators = types.numerators, types.denominators
        try:
            async with asyncio.timeout(deadline_s):
                fetched = await asyncio.gather(*(self._points(t, group, deadline_s) for t in numerators + denominators))
        except TimeoutError:
            why = f"no answer from Cloud Monitoring within the {deadline_s:g}s deadline"
            return Answer({r.key: SignalReading(None, None, self.label, why) for r in group}, answered=False)
        except TransientError as exc:
            return Answer({r.key: SignalReading(None, None, self.label, str(exc)) for r in group}, answered=False)
        except PermanentError as exc:
            return Answer({r.key: SignalReading(None, None, self.label, str(exc)) for r in group}, answered=True)
        num: _Points = {}
        for pts in fetched[: len(numerators)]:
            for where, values in pts.items():
                num.setdefault(where, []).extend(values)
        den: _Points = {}
        for pts in fetched[len(numerators) :]:
            for where, values in pts.items():
                den.setdefault(where, []).extend(values)
        how = aggregate_of(group[0].signal)
        per_unit: dict[Where, PodSample] = {}
        buckets: dict[Where, dict[float, float]] = {}
        for where, values in num.items():
            unit = unit_sample(group[0].signal, values, den.get(where) if denominators else None)
            if unit is not None:
                per_unit[where] = unit.sample
                if unit.buckets is not None:
                    buckets[where] = unit.buckets
        out = self._attribute(per_unit, group, how)
        if group[0].signal.quantile is not None:
            for req in group:
                got = out[req.key]
                if got.per_replica is not None:
                    mine = {unit: buckets.get(Where(req.target.namespace, unit), {}) for unit in got.per_replica}
                    out[req.key] = dataclasses.replace(got, value=None, buckets=mine)
        return Answer(out, answered=True)

    def _attribute(
        self,
        per_unit: dict[Where, PodSample],
        group: list[SignalRequest],
        how: presets.Aggregate,
    ) -> Readings:
        workers = group[0].signal.preset is not None and presets.get(group[0].signal.preset).workers
        matcher = PodMatcher(group, workers=workers)
        samples: dict[str, dict[str, PodSample]] = {}
        node_owner = {node: r for r in group for node in r.node_names()}
        for where, sample in per_unit.items():
            if not where.namespace and where.unit in node_owner:
                samples.setdefault(node_owner[where.unit].target.key, {})[where.unit] = sample
                continue
            for req in matcher.owners(where.namespace, where.unit):
                samples.setdefault(req.target.key, {})[where.unit] = sample
        return per_target(group, samples, source=self.label, how=how)
