"""The Prometheus HTTP API source: any Prometheus, the GMP frontend, or Google Managed Prometheus directly.

Hot path on aiohttp (async, one connection pool, per-request timeouts). prometheus-api-client is
synchronous (requests) and has no default timeout, so it would need a thread per query; it serves
``autoscaler record`` (range queries, off the hot path) instead. ``bench/sources_tick.py`` measures both.

Batching: requests that differ only by target share one query per tick. A preset or ``metric:`` signal
becomes one instant query returning one value per (namespace, pod) together with each pod's oldest sample
time (``timestamp()``: an instant query's own time is the evaluation time, not when the sample was
scraped), over the namespaces and pod-name patterns of every target in the batch; the series are then
attributed to targets and combined (queues sum, ratios average). A raw ``query:`` is sent once as written
and must return one series (or set ``aggregate``); its age is the evaluation time, since PromQL cannot
say when an arbitrary expression's inputs were scraped.

Metric names are matched exactly (each spelling its own selector, joined with ``or``): GMP does not match
``__name__`` by regex. GMP has no staleness either, so pods far behind their target's freshest pod are
dropped (``POD_GONE_S``).

Empty results, NaN, errors, timeouts and an open circuit all come back as readings without a value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp

from autoscaler.core import signals
from autoscaler.core.catalog import SERVER_LABELS, LabelLayout
from autoscaler.core.model import SignalReading, TargetKind, TargetRef
from autoscaler.core.signals import aggregate_of, combine
from autoscaler.core.sourcespec import GmpSourceSpec, PrometheusSourceSpec
from autoscaler.sources import presets
from autoscaler.sources.base import (
    PodMatcher,
    PodSample,
    Readings,
    SignalRequest,
    describe,
    label_layout,
    per_target,
    pod_pattern,
)
from autoscaler.sources.circuit import Answer, Circuit, PermanentError, TransientError, retrying

GMP_URL = "https://monitoring.googleapis.com/v1/projects/{project}/location/{location}/prometheus"
GMP_SCOPE = "https://www.googleapis.com/auth/monitoring.read"
_PART = signals.PART_LABEL
#: A pod far behind its target's freshest pod is taken as gone (GMP keeps no staleness): the core's rule,
#: which replay applies to recorded sample times as well.
POD_GONE_S = signals.POD_GONE_S
#: Up to this many targets in a batch, the query also selects their pod names (less data back); beyond
#: it, only their namespaces: RE2 over a thousand-way alternation made one tick take seconds (bench).
POD_REGEX_MAX_TARGETS = 50

#: Returns a bearer token (GMP); called before every query, so it may cache and refresh.
TokenProvider = Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class _Selection:
    """What a preset or ``metric:`` signal selects, minus the per-target parts."""

    names: tuple[str, ...]
    denominator: tuple[str, ...]
    workers: bool
    #: The labels holding the workload's namespace and pod (the catalog's layout for the preset).
    labels: LabelLayout = SERVER_LABELS
    #: Counters: the ``rate`` window; histograms: the window of their rated buckets (``names`` are ``_bucket``).
    rate_s: float | None = None
    histogram: bool = False

    @property
    def by(self) -> str:
        if self.labels.pool_wide:
            return self.labels.namespace
        return f"{self.labels.namespace}, {self.labels.pod}"

    def numerator(self, m: list[str]) -> str:
        """The selector of every spelling (a gauge's copies per process read as one: ``presets.one_per_process``),
        rated over the window for counters and histogram buckets."""
        if self.rate_s is None:
            return presets.one_per_process(presets.selector(self.names, m))
        return presets.selector(self.names, m, wrap="rate", range_s=self.rate_s)


def selection(request: SignalRequest) -> _Selection | None:
    sig = request.signal
    window = sig.rate.window_seconds if sig.rate else sig.quantile.window_seconds if sig.quantile else None
    histogram = sig.quantile is not None
    if sig.preset is not None:
        p = presets.get(sig.preset)
        names = tuple(f"{n}_bucket" for n in p.metrics) if histogram else p.metrics
        return _Selection(names, p.denominator, p.workers, p.labels, window, histogram)
    if sig.metric is not None:
        names = (f"{sig.metric}_bucket",) if histogram else (sig.metric,)
        return _Selection(names, (), False, label_layout(sig), window, histogram)
    return None


def target_query(
    request: SignalRequest, *, cluster: str | None, combined: bool = True, history: bool = False,
    times: bool = False,
) -> str:
    """The query for one target over time: combined server-side into one series, or (``combined=False``, what
    ``autoscaler record`` saves) one series per pod (a histogram's: per pod and bucket), so that ``replay``
    combines them by the core's one rule.
    With ``history`` (a range reaching into the past) the target's pod-name pattern selects the pods it had
    then, beside the pods of the request (the ones it has now, which a truncated name may hide from the pattern).
    With ``times`` (per pod only) each pod's series are labelled ``autoscaler_part="value"`` and joined by one
    ``autoscaler_part="time"`` series holding its oldest sample's time, as ``batch_query`` reads them: over a
    range each step's value is whatever the lookback found, so without its time a pod deleted minutes ago (GMP
    keeps no staleness markers) would read as reporting at every step."""
    sig = request.signal
    if sig.query is not None:
        return sig.query
    sel = selection(request)
    if sel is None:
        raise PermanentError(f"signal {sig.name!r} has no query, preset or metric")
    how = aggregate_of(sig)
    named = [re.escape(p.name) for p in request.pods if p.leader or sel.workers]
    if history or not request.pods:
        named.insert(0, pod_pattern(request.target, workers=sel.workers))
    pods = "|".join(named)
    m = presets.matchers(
        sig.labels,
        namespace=request.target.namespace,
        cluster=cluster,
        # A pool- or model-wide series has no pod: the signal's labels (the pool, the model) select it.
        regex={} if sel.labels.pool_wide else {sel.labels.pod: pods},
        namespace_label=sel.labels.namespace,
    )
    if sel.histogram and (combined or sel.labels.pool_wide):
        # One series for the target: its quantile over the buckets summed across its pods (replay reads it as is).
        assert sig.quantile is not None
        return f"histogram_quantile({sig.quantile.q:g}, sum by (le) ({sel.numerator(m)}))"
    # Per pod (a histogram: each pod's bucket rates, labelled by ``le``): replay sums the reporting pods' buckets
    # and takes the quantile through the core, judging partial data, as the controller does with ``batch_query``.
    per_pod = _per_pod(sel, how, m)
    if combined:
        return f"{how}({per_pod})"
    return _with_times(sel, per_pod, m) if times else per_pod


class ReplicaQueries(NamedTuple):
    """The target's replica counts over time, from kube-state-metrics' series (``record`` saves them)."""

    #: The count set on the target (``spec.replicas``, HPA's current count).
    spec: str
    #: Its ready replicas (``status.readyReplicas``).
    ready: str


#: kube-state-metrics' series per kind: (spec, ready, the label naming the object). Its Deployment and StatefulSet
#: metrics (kubernetes/kube-state-metrics docs/metrics/workload/{deployment,statefulset}-metrics.md); it has none
#: for LeaderWorkerSets (a custom resource).
_KSM: dict[TargetKind, tuple[str, str, str]] = {
    TargetKind.DEPLOYMENT: ("kube_deployment_spec_replicas", "kube_deployment_status_replicas_ready", "deployment"),
    TargetKind.STATEFUL_SET: ("kube_statefulset_replicas", "kube_statefulset_status_replicas_ready", "statefulset"),
}


def replica_queries(target: TargetRef, *, cluster: str | None) -> ReplicaQueries | None:
    """The range queries for the target's replica counts from kube-state-metrics, or None for a kind it does not
    export. kube-state-metrics writes the object's namespace as ``namespace``; scraped without ``honor_labels``
    (Managed Prometheus' PodMonitoring, a plain scrape job) that label is the exporter pod's, and the object's
    moves to ``exported_namespace``: that one is asked first, then ``namespace``."""
    found = _KSM.get(target.kind)
    if found is None:
        return None
    spec, ready, label = found
    obj = f"{label}={presets.quote(target.name)}" + (f", cluster={presets.quote(cluster)}" if cluster else "")
    ns = presets.quote(target.namespace)

    def one(name: str) -> str:
        return f"max({name}{{{obj}, exported_namespace={ns}}}) or max({name}{{{obj}, namespace={ns}}})"

    return ReplicaQueries(one(spec), one(ready))


def _with_times(sel: _Selection, value: str, m: list[str]) -> str:
    """``value`` (per pod) labelled ``autoscaler_part="value"``, joined by each pod's oldest sample time (part
    ``time``): the one answer ``batch_query`` asks for now and ``record`` over a range."""
    stamp = f"min by ({sel.by}) ({presets.selector(sel.names + sel.denominator, m, wrap='timestamp')})"
    return f'label_replace({value}, "{_PART}", "value", "", "") or label_replace({stamp}, "{_PART}", "time", "", "")'


def _per_pod(sel: _Selection, how: presets.Aggregate, m: list[str]) -> str:
    if sel.histogram:
        # Each pod's bucket rates; the core sums the reporting pods' and takes the quantile.
        return f"sum by ({sel.by}, le) ({sel.numerator(m)})"
    num = f"{how} by ({sel.by}) ({sel.numerator(m)})"
    if not sel.denominator:
        return num
    used = f"sum by ({sel.by}) ({presets.one_per_process(presets.selector(sel.names, m))})"
    total = f"sum by ({sel.by}) ({presets.one_per_process(presets.selector(sel.denominator, m))})"
    return f"({used}) / ({total})"


def batch_query(requests: Sequence[SignalRequest], *, cluster: str | None) -> str:
    """One instant query for a batch of requests of the same selection, labels and aggregate.

    Returns per (namespace, pod) the value (``autoscaler_part="value"``) and the oldest sample time
    (``autoscaler_part="time"``), in a single round trip.
    """
    first = requests[0]
    sel = selection(first)
    assert sel is not None
    how = aggregate_of(first.signal)
    namespaces = sorted({r.target.namespace for r in requests})
    regex = {sel.labels.namespace: "|".join(re.escape(n) for n in namespaces)}
    if sel.labels.pool_wide:
        pass  # one value per namespace (the group shares the signal's labels): no pod to select
    elif len(requests) <= POD_REGEX_MAX_TARGETS:
        pods: set[str] = set()
        for r in requests:
            if r.pods:
                pods.update(re.escape(p.name) for p in r.pods if p.leader or sel.workers)
            else:
                pods.add(pod_pattern(r.target, workers=sel.workers))
        regex[sel.labels.pod] = "|".join(sorted(pods))
    else:
        regex[sel.labels.pod] = ".+"  # attribution happens client-side; a huge alternation costs Prometheus seconds
    m = presets.matchers(first.signal.labels, namespace=None, cluster=cluster, regex=regex)
    return _with_times(sel, _per_pod(sel, how, m), m)


def _number(raw: Any) -> float:
    # The API encodes sample values as strings: "3", "NaN", "+Inf".
    return float(raw)


class PrometheusSource:
    """Reads signals from a Prometheus HTTP API (``prometheus`` and ``gmp`` source specs)."""

    def __init__(
        self,
        spec: PrometheusSourceSpec | GmpSourceSpec,
        *,
        base_url: str | None = None,
        token: TokenProvider | None = None,
        circuit: Circuit | None = None,
    ) -> None:
        self.spec = spec
        self._token: TokenProvider | None
        if isinstance(spec, GmpSourceSpec):
            self.base_url = base_url or GMP_URL.format(project=spec.project, location=spec.location)
            self._token = token or google_token_provider()
        else:
            self.base_url = base_url or spec.url
            self._token = token
        self.base_url = self.base_url.rstrip("/")
        self.label = describe(spec)
        self.circuit = circuit or Circuit()
        self.cluster = spec.cluster
        self._session: aiohttp.ClientSession | None = None
        #: Queries sent, for tests and benchmarks that check the batching.
        self.queries_sent = 0

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, keepalive_timeout=60))
        return self._session

    async def query(self, promql: str, *, timeout_s: float) -> dict[str, Any]:
        """POST one instant query; return the ``data`` object or raise Transient/PermanentError."""
        headers = {"Accept": "application/json"}
        if self._token is not None:
            try:
                headers["Authorization"] = f"Bearer {await self._token()}"
            except Exception as exc:  # google-auth raises its own hierarchy; none of it may crash a tick
                raise PermanentError(f"no credentials for {self.base_url}: {exc}") from None
        self.queries_sent += 1
        try:
            async with self._client().post(
                f"{self.base_url}/api/v1/query",
                data={"query": promql},
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                text = await resp.text()
                status = resp.status
        except aiohttp.ClientConnectionError as exc:
            raise TransientError(f"cannot reach {self.base_url}: {exc}") from None
        except aiohttp.ClientError as exc:
            raise TransientError(f"request to {self.base_url} failed: {exc}") from None
        return _parse_response(status, text)

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        if not requests:
            return {}
        blocked = self.circuit.allow()
        if blocked is not None:
            return {r.key: SignalReading(None, None, self.label, blocked) for r in requests}
        groups: dict[tuple[Any, ...], list[SignalRequest]] = {}
        for r in requests:
            sig = r.signal
            key = (
                sig.query, sig.preset, sig.metric, tuple(sorted(sig.labels.items())), sig.aggregate,
                sig.rate, sig.quantile and sig.quantile.window_seconds,
            )
            groups.setdefault(key, []).append(r)
        timeout_s = min(self.spec.timeout_seconds, deadline_s)
        results = await asyncio.gather(
            *(self._read_group(g, deadline_s=deadline_s, timeout_s=timeout_s) for g in groups.values())
        )
        return self.circuit.settle(results)

    async def _read_group(
        self, group: list[SignalRequest], *, deadline_s: float, timeout_s: float
    ) -> Answer:
        """Readings for one batch, and whether the backend answered (for the circuit)."""
        first = group[0]
        raw = first.signal.query is not None
        try:
            promql = first.signal.query if raw else batch_query(group, cluster=self.cluster)
            assert promql is not None
            data = await retrying(lambda: self.query(promql, timeout_s=timeout_s), deadline_s=deadline_s)
        except TimeoutError:
            why = f"no answer from {self.base_url} within the {deadline_s:g}s deadline"
            return Answer({r.key: SignalReading(None, None, self.label, why) for r in group}, answered=False)
        except TransientError as exc:
            return Answer({r.key: SignalReading(None, None, self.label, str(exc)) for r in group}, answered=False)
        except (PermanentError, presets.PresetError) as exc:
            return Answer({r.key: SignalReading(None, None, self.label, str(exc)) for r in group}, answered=True)
        try:
            if raw:
                return Answer({r.key: _single(data, r, self.label) for r in group}, answered=True)
            return Answer(self._attribute(data, group), answered=True)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            why = f"unexpected response shape from {self.base_url}: {exc!r}"
            return Answer({r.key: SignalReading(None, None, self.label, why) for r in group}, answered=True)

    def _attribute(self, data: dict[str, Any], group: list[SignalRequest]) -> Readings:
        sel = selection(group[0])
        assert sel is not None
        if sel.labels.pool_wide:
            return self._attribute_pool(data, group, sel)
        matcher = PodMatcher(group, workers=sel.workers)
        # Keyed by (namespace, pod); a value's timestamp is the evaluation time until its ``time`` part says when
        # the pod's oldest sample was scraped.
        values: dict[tuple[str, str], PodSample] = {}
        stamps: dict[tuple[str, str], float] = {}
        buckets: dict[tuple[str, str], dict[float, float]] = {}
        for series in data["result"]:
            labels = series["metric"]
            pod_key = (labels.get(sel.labels.namespace, ""), labels.get(sel.labels.pod, ""))
            at, number = float(series["value"][0]), _number(series["value"][1])
            if labels.get(_PART) == "time":
                stamps[pod_key] = number
            elif sel.histogram:
                # One series per bucket; the pod's value is its observation rate (the +Inf bucket).
                bound = float(labels.get("le", "nan"))
                buckets.setdefault(pod_key, {})[bound] = number
                if bound == math.inf:
                    values[pod_key] = PodSample(number, at)
            else:
                values[pod_key] = PodSample(number, at)
        samples: dict[str, dict[str, PodSample]] = {}
        for (ns, pod), evaluated in values.items():
            for req in matcher.owners(ns, pod):
                stamp = stamps.get((ns, pod), evaluated.timestamp)
                samples.setdefault(req.target.key, {})[pod] = PodSample(evaluated.value, stamp)
        for key, pods in samples.items():
            kept = signals.present({p: s.timestamp for p, s in pods.items()}, gone_s=POD_GONE_S)
            samples[key] = {p: s for p, s in pods.items() if p in kept}
        out = per_target(group, samples, source=self.label, how=aggregate_of(group[0].signal))
        if sel.histogram:
            for req in group:
                got = out[req.key]
                if got.per_replica is not None:
                    mine = {pod: buckets.get((req.target.namespace, pod), {}) for pod in got.per_replica}
                    out[req.key] = dataclasses.replace(got, value=None, buckets=mine)
        return out


    def _attribute_pool(self, data: dict[str, Any], group: list[SignalRequest], sel: _Selection) -> Readings:
        """A pool- or model-wide series: one value per namespace, the same for every target of the group in it
        (they share the signal's labels). None found: missing, never zero."""
        values: dict[str, PodSample] = {}
        stamps: dict[str, float] = {}
        for series in data["result"]:
            labels = series["metric"]
            ns = labels.get(sel.labels.namespace, "")
            at, number = float(series["value"][0]), _number(series["value"][1])
            if labels.get(_PART) == "time":
                stamps[ns] = number
            else:
                values[ns] = PodSample(number, at)
        out: Readings = {}
        for req in group:
            found = values.get(req.target.namespace)
            if found is None:
                out[req.key] = SignalReading(None, None, self.label)
            else:
                stamp = stamps.get(req.target.namespace, found.timestamp)
                out[req.key] = SignalReading(found.value, stamp, self.label)
        return out


def _single(data: dict[str, Any], request: SignalRequest, label: str) -> SignalReading:
    """A raw query's result as one reading: one series, or several combined by the signal's ``aggregate``."""
    kind = data["resultType"]
    if kind == "scalar":
        ts, raw = data["result"]
        return SignalReading(_number(raw), float(ts), label)
    if kind != "vector":
        return SignalReading(None, None, label, f"query returned a {kind}, not an instant vector")
    result = data["result"]
    if not result:
        return SignalReading(None, None, label)
    if len(result) > 1 and request.signal.aggregate is None:
        return SignalReading(
            None,
            None,
            label,
            f"query returned {len(result)} series; wrap it in sum(...)/avg(...) or set 'aggregate'",
        )
    values = [_number(s["value"][1]) for s in result]
    stamp = min(float(s["value"][0]) for s in result)
    return SignalReading(combine(values, aggregate_of(request.signal)), stamp, label)


def _parse_response(status: int, text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # a body nested deeper than the decoder recurses is no answer either
        body = None
    if not isinstance(body, dict):
        snippet = " ".join(text.split())[:120]
        if status >= 500:
            raise TransientError(f"HTTP {status}: {snippet}")
        raise PermanentError(f"HTTP {status}, not a Prometheus API response: {snippet!r}")
    if status >= 500 or status == 429:
        raise TransientError(f"HTTP {status}: {body.get('error', '')}".rstrip(": "))
    if body.get("status") != "success":
        kind = body.get("errorType", "error")
        raise PermanentError(f"HTTP {status} {kind}: {body.get('error', 'no message')}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise PermanentError("Prometheus answered success without data")
    return data


def google_token_provider() -> TokenProvider:
    """Bearer tokens from application-default credentials, refreshed off the event loop when expired."""
    state: dict[str, Any] = {}
    lock = asyncio.Lock()  # one refresh at a time, however many queries wait for a token

    async def token() -> str:
        # Loaded on first use: google-auth's transport pulls in requests and cryptography (~0.5 s).
        import google.auth  # noqa: PLC0415
        import google.auth.transport.requests  # noqa: PLC0415

        async with lock:
            creds: Any = state.get("creds")
            if creds is None:
                creds, _ = await asyncio.to_thread(google.auth.default, scopes=[GMP_SCOPE])
                state["creds"] = creds
            if not creds.valid:
                await asyncio.to_thread(creds.refresh, google.auth.transport.requests.Request())
            return str(creds.token)

    return token
