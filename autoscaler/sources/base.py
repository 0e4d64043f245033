"""The one interface every metric source implements, and what all sources share.

A source answers, for a batch of (target, signal) requests, one ``core.model.SignalReading`` each, with
the sample's own timestamp (unix seconds) or an error. It never invents a zero: no data is ``value=None``
with an error, or with neither (the core reads that as "missing: empty result"). Sources batch: one query
per signal per tick for all targets, not one per target.

Also here: which pods belong to a target (``PodRef``, ``pod_pattern``) and the short label a reading carries
to say where it came from (``describe``). How per-pod values combine is the core's one rule
(``core.signals.aggregate_of`` and ``combine``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from autoscaler.core import catalog
from autoscaler.core.catalog import DEVICE_PLUGIN_LABELS, SERVER_LABELS, LabelLayout
from autoscaler.core.model import SignalReading, TargetKind, TargetRef
from autoscaler.core.signals import combine
from autoscaler.core.sourcespec import (
    CloudMonitoringSourceSpec,
    GmpSourceSpec,
    PodsSourceSpec,
    PrometheusSourceSpec,
    SourceSpec,
)
from autoscaler.core.spec import SignalSpec
from autoscaler.sources.presets import Aggregate

#: True in the context of a read made for an evaluation a probe escalated (a signal crossed its threshold): a
#: backend lets such a read past its own queue of round traffic (``scrapeclient.ScrapeClient`` skips its limit
#: on requests in flight for it). Set by the controller around that evaluation only; a context variable, so
#: that the tasks a read starts inherit it and no interface changes.
URGENT: ContextVar[bool] = ContextVar("urgent_read", default=False)


@dataclass(frozen=True)
class PodRef:
    """One pod of a target, as the caller resolved it from the Kubernetes API.

    ``url`` is its metrics URL (pods source); ``leader`` is False for LeaderWorkerSet workers, which only
    presets reading every host (``workers``) use.
    """

    name: str
    url: str | None = None
    leader: bool = True
    #: The pod IP: with ``port`` set in the pods source block, the URL is built from it (scheme, port, path).
    ip: str | None = None
    #: The node it runs on (``spec.nodeName``): node-level Cloud Monitoring metrics are read by node.
    node: str | None = None


@dataclass(frozen=True)
class SignalRequest:
    """One signal wanted for one target, with the source it resolves to."""

    target: TargetRef
    signal: SignalSpec
    source: SourceSpec
    #: Pods source in a cluster: the metrics URLs of the target's pods (leaders of LWS groups).
    #: Kept for callers that only know URLs; ``pods`` says more (names, leader/worker).
    pod_urls: tuple[str, ...] = field(default=())
    #: The target's pods, when the caller knows them. Prometheus and Cloud Monitoring then attribute series
    #: by exact pod name; without them, by the pod-name pattern of the target's kind (``pod_pattern``).
    pods: tuple[PodRef, ...] = field(default=())
    #: Cloud Monitoring node-level metrics (``kubernetes.io/node/...``): the nodes the target's pods run on.
    nodes: tuple[str, ...] = field(default=())
    #: ``(target key, signal name)``: how readings are keyed. Built once: a probe round looks it up about five
    #: times per request, and the target's key is a string built from its parts each time it is asked.
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.target.key, self.signal.name))

    def node_names(self) -> tuple[str, ...]:
        """The nodes whose node-level metrics belong to this target: given, else those of its pods (every
        host of an LWS group: a slice spans them all)."""
        if self.nodes:
            return self.nodes
        return tuple(sorted({p.node for p in self.pods if p.node}))

    def endpoints(self, *, workers: bool) -> tuple[PodRef, ...]:
        """Pods to scrape: leaders (and workers when asked), or the plain ``pod_urls``."""
        chosen = tuple(p for p in self.pods if p.leader or workers)
        return chosen or tuple(PodRef(name=u, url=u) for u in self.pod_urls)


#: (target key, signal name) -> reading
Readings = dict[tuple[str, str], SignalReading]


class PodSample(NamedTuple):
    """One pod's (or node's) latest sample as a source read it: its value and its own time (unix seconds)."""

    value: float
    timestamp: float


class MetricSource(Protocol):
    """A metric backend. Implementations: prometheus (and GMP), cloud_monitoring, pods; ``pool`` fans out."""

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        """Read every request within ``deadline_s`` seconds; unanswered ones come back with an error."""
        ...

    async def aclose(self) -> None: ...


def describe(spec: SourceSpec) -> str:
    """A short label for readings and ``observe``: where a value came from."""
    if isinstance(spec, PrometheusSourceSpec):
        return f"prometheus {spec.url}"
    if isinstance(spec, GmpSourceSpec):
        return f"gmp {spec.project}"
    if isinstance(spec, CloudMonitoringSourceSpec):
        return f"cloud-monitoring {spec.project}"
    assert isinstance(spec, PodsSourceSpec)
    return "pods (static endpoints)" if spec.endpoints else "pods"


def label_layout(signal: SignalSpec) -> LabelLayout:
    """Which labels of stored series hold the workload's namespace and pod: the preset's (the catalog's), or
    for a ``metric:`` signal pinned by ``exported_namespace`` (the JetStream guide's device-plugin form) the
    device plugin's."""
    if signal.preset is not None:
        return catalog.get(signal.preset).labels
    return DEVICE_PLUGIN_LABELS if "exported_namespace" in signal.labels else SERVER_LABELS


def failed(request: SignalRequest, source: str, error: str) -> SignalReading:
    return SignalReading(value=None, timestamp=None, source=source, error=error)


# Deployment pods: <name>-<pod-template-hash (≤10)>-<5 random>; StatefulSet pods <name>-<ordinal>; LWS
# leaders <name>-<group>, workers <name>-<group>-<index>. Anchored segment counts keep `vllm` from claiming the
# pods of `vllm-big`.
_DEPLOYMENT_POD = r"{name}-[a-z0-9]{{1,10}}-[a-z0-9]{{5}}"
_ORDINAL_POD = r"{name}-[0-9]+"
_LWS_ANY = r"{name}-[0-9]+(-[0-9]+)?"


#: A generated name's base (a Deployment pod's ``<ReplicaSet>-``, the ReplicaSet being ``<Deployment>-<hash>``) is
#: cut to 58 characters before its 5 random ones (the API server's SimpleNameGenerator: 63 − 5). A Deployment
#: named with 47 or more characters therefore has pods whose hash lost its tail (and its dash), or, from 58
#: characters on, pods named by the first 58 characters of the Deployment's own name.
_GENERATED_BASE = 58
#: The shortest Deployment name whose pods can be cut (a 10-character hash and its dash no longer fit).
_CUT_FROM = _GENERATED_BASE - 11


def _deployment_pod(name: str) -> str:
    """The names of Deployment ``name``'s pods: ``<name>-<hash, 1-10>-<5 random>``, from a base cut to 58."""
    escaped = re.escape(name)
    if len(name) >= _GENERATED_BASE:
        return re.escape(name[:_GENERATED_BASE]) + "[a-z0-9]{5}"
    room = _GENERATED_BASE - len(name) - 1  # characters left for the hash and its dash
    if room > 10:
        return _DEPLOYMENT_POD.format(name=escaped)
    cut = f"[a-z0-9]{{{room + 5}}}"  # a hash of `room` characters or more, cut to `room`, then the random five
    if room < 2:
        return f"{escaped}-{cut}"
    return f"{escaped}-(?:[a-z0-9]{{1,{room - 1}}}-[a-z0-9]{{5}}|{cut})"  # shorter hashes keep their dash


def pod_pattern(target: TargetRef, *, workers: bool = False) -> str:
    """An RE2/Python regex (fully anchored when used) for the names of the target's pods."""
    name = re.escape(target.name)
    if target.kind is TargetKind.DEPLOYMENT:
        return _deployment_pod(target.name)
    if target.kind is TargetKind.STATEFUL_SET:
        return _ORDINAL_POD.format(name=name)
    return (_LWS_ANY if workers else _ORDINAL_POD).format(name=name)


# Candidate owner names from a pod name: drop the ReplicaSet hash and random suffix (Deployment), or the
# group index (LWS leader) and the worker index (LWS worker). Lookups are then O(1) per series.
_DEPLOYMENT_OWNER = re.compile(r"(.+)-[a-z0-9]{1,10}-[a-z0-9]{5}")
_ORDINAL_OWNER = re.compile(r"(.+)-[0-9]+")  # a StatefulSet pod or an LWS leader
_LWS_WORKER_OWNER = re.compile(r"(.+)-[0-9]+-[0-9]+")
#: A Deployment pod whose base was cut (``_GENERATED_BASE``): 63 characters, its owner everything before the
#: last dash (47-57 characters), or, for longer owners, identified by their first 58 characters.
_CUT_OWNER = re.compile(r"(.+)-[a-z0-9]{5,15}")


class PodMatcher:
    """Attributes (namespace, pod) series to the targets of a batch of requests.

    Pods named by the caller (``SignalRequest.pods``) match exactly; otherwise the pod-name conventions of
    the target's kind apply (``pod_pattern``), resolved by dictionary lookups so that a batch of thousands
    of targets costs one lookup per series, not one regex per target.
    """

    def __init__(self, requests: Sequence[SignalRequest], *, workers: bool) -> None:
        self._workers = workers
        self._exact: dict[tuple[str, str], list[SignalRequest]] = {}
        self._by_name: dict[tuple[str, TargetKind, str], list[SignalRequest]] = {}
        #: Deployments of 58 characters or more, by namespace and their first 58 (all their pods' names show).
        self._by_prefix: dict[tuple[str, str], list[SignalRequest]] = {}
        for req in requests:
            ns = req.target.namespace
            if req.pods:
                for pod in req.pods:
                    if pod.leader or workers:
                        self._exact.setdefault((ns, pod.name), []).append(req)
            elif req.target.kind is TargetKind.DEPLOYMENT and len(req.target.name) >= _GENERATED_BASE:
                self._by_prefix.setdefault((ns, req.target.name[:_GENERATED_BASE]), []).append(req)
            else:
                self._by_name.setdefault((ns, req.target.kind, req.target.name), []).append(req)

    def owners(self, namespace: str, pod: str) -> list[SignalRequest]:
        found = list(self._exact.get((namespace, pod), ()))
        if len(pod) == _GENERATED_BASE + 5:  # a generated name as long as they come: its base may have been cut
            found.extend(self._by_prefix.get((namespace, pod[:_GENERATED_BASE]), ()))
            m = _CUT_OWNER.fullmatch(pod)
            if m and _CUT_FROM <= len(m.group(1)) < _GENERATED_BASE:
                found.extend(self._by_name.get((namespace, TargetKind.DEPLOYMENT, m.group(1)), ()))
        if not self._by_name:
            return found
        candidates: list[tuple[TargetKind, str]] = []
        if m := _DEPLOYMENT_OWNER.fullmatch(pod):
            candidates.append((TargetKind.DEPLOYMENT, m.group(1)))
        if m := _ORDINAL_OWNER.fullmatch(pod):
            candidates.append((TargetKind.STATEFUL_SET, m.group(1)))
            candidates.append((TargetKind.LEADER_WORKER_SET, m.group(1)))
        if self._workers and (m := _LWS_WORKER_OWNER.fullmatch(pod)):
            candidates.append((TargetKind.LEADER_WORKER_SET, m.group(1)))
        for kind, name in candidates:
            found.extend(self._by_name.get((namespace, kind, name), ()))
        return found


def per_target(
    requests: Sequence[SignalRequest],
    samples: Mapping[str, Mapping[str, PodSample]],
    *,
    source: str,
    how: Aggregate,
) -> Readings:
    """Readings from per-target per-pod samples ``{target key: {pod: PodSample}}``.

    The reading's timestamp is the oldest pod sample: the value is only as fresh as its stalest part.
    A target without samples gets an empty reading (value None, no error): missing, never zero.
    """
    out: Readings = {}
    for req in requests:
        pods = samples.get(req.target.key, {})
        if not pods:
            out[req.key] = SignalReading(value=None, timestamp=None, source=source)
            continue
        ordered = sorted(pods.items())
        out[req.key] = SignalReading(
            value=combine([s.value for s in pods.values()], how),
            timestamp=min(s.timestamp for s in pods.values()),
            source=source,
            per_replica={pod: s.value for pod, s in ordered},
            pod_times={pod: s.timestamp for pod, s in ordered},
        )
    return out
