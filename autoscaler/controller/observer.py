"""Building the core's ``Observation`` for a policy: target replicas, signals, training and quota.

Three readers, each behind a small protocol so the loop is tested against the HTTP emulator and the
benchmark can run 1,000 targets without a cluster:

- ``TargetReader``: the target's replica status (``controller.targets`` in the cluster);
- ``TrainingReader``: the preemptible Kueue Workloads and the ClusterQueue quota (``controller.workloads``);
- metric sources (``autoscaler.sources``): a ``MetricSource``, normally ``sources.pool.SourcePool`` (one
  backend per distinct ``source:`` block, reused across ticks: connection pools, circuit breakers).

``SharedTraining`` lets policies with the same capacity and preemptible blocks share one Kueue read per
tick; ``Watcher`` lists and watches targets and Workloads to wake policies when they change.

Signals are read with a per-read deadline; a source that fails or times out yields readings with an
error, which the core turns into "unknown" (hold), never into zero.

Batching (``PolicyObserver.prepare``): the loop hands over every policy of a pass at once; their targets are
read together (``KubeTargets.observe_many``: per namespace, not per target) and every signal of every
policy goes to the source in **one** ``read``, so a source sends one query per signal for all targets.
``observe(policy, prepared)`` then only adds the training picture (``SharedTraining``).

Probes (``PolicyObserver.probe``) screen many policies a second, so they read no target from the API server:
every observation keeps its target's view (``views``, an informer-like cache), a watched change of the
target drops it (``forget``), and a probe uses the view while it is younger than twice its policy's period
(only the others are read, in bulk). A probe's verdict only selects which policies to evaluate at once; that
evaluation reads the target afresh before anything is written.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import operator
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.controller.kube import Backoff
from autoscaler.controller.pod_index import PodIndex
from autoscaler.controller.targets import PodsRead, TargetView
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import (
    Observation,
    QuotaStatus,
    ReplicaStatus,
    SignalReading,
    TargetKind,
    TargetRef,
    TrainingWorkload,
)
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.sources.base import MetricSource, PodRef, Readings, SignalRequest
from autoscaler.sources.pool import NO_SOURCE, Plan, plan


class TargetReader(Protocol):
    async def observe(self, policy: CompiledPolicy) -> TargetView:
        """The target's replica status and pods; pods are () when not known."""
        ...

    async def observe_many(
        self, policies: Sequence[CompiledPolicy], *, known: Mapping[str, dict[str, Any]] | None = None
    ) -> dict[str, TargetView | Exception]:
        """``observe`` for many policies (by policy name), batched; a failure is that policy's value. ``known``:
        target objects (by policy name) a live watch delivered, used instead of reading them (their pods are
        still read)."""
        ...

    async def observe_ref(self, policy: CompiledPolicy, ref: TargetRef) -> TargetView:
        """Another of a policy's targets (policies with several targets)."""
        ...


@dataclass(frozen=True)
class Planned:
    """What ``PolicyObserver.plan`` found for one policy: its target as read, and the requests the observer
    would send for it (``autoscaler record`` queries exactly these, over a range)."""

    view: TargetView
    plan: Plan


@dataclass(frozen=True)
class _Gathering:
    """One policy in ``PolicyObserver._gather``: its view, its plan, and the readings known before any read."""

    policy: CompiledPolicy
    view: TargetView
    plan: Plan
    signals: dict[str, SignalReading]


@dataclass(frozen=True)
class Prepared:
    """What ``PolicyObserver.prepare`` read for one policy: everything of its observation but training."""

    replicas: ReplicaStatus
    pods: tuple[PodRef, ...]
    signals: dict[str, SignalReading]
    #: Read by a probe's screen on the target as last kept (``PolicyObserver.probe``), handed on to a periodic
    #: evaluation (``Controller._pass``): decided on, but never acted on (the evaluation re-reads to act).
    kept: bool = False


class Training(NamedTuple):
    """What a TrainingReader answers."""

    #: The policy's preemptible Workloads.
    workloads: tuple[TrainingWorkload, ...]
    #: Its ClusterQueue's quota (None: not read).
    quota: QuotaStatus | None


class _Shared(NamedTuple):
    """A training read shared by the policies of one ``capacity``/``preemptible`` pair (``SharedTraining``)."""

    #: When it started (``SharedTraining.now``'s clock).
    at: float
    result: asyncio.Future[Training]


class KeptView(NamedTuple):
    """A policy's target as last read (``PolicyObserver.views``): what probes screen on."""

    #: When it was read (``PolicyObserver.now``'s clock).
    read_at: float
    view: TargetView


class _Change(NamedTuple):
    """A watched change of a policy's target (``PolicyObserver.changed``), until a read after it replaces it."""

    #: Its place among changes and reads (``PolicyObserver._seq``): a read started before it is not kept.
    seq: int
    #: When it arrived (``PolicyObserver.now``'s clock).
    at: float
    #: The target as the event carried it (None: deleted, or not carried).
    obj: dict[str, Any] | None


class _PodChange(NamedTuple):
    """A pod watch event (``PolicyObserver.pod_changed``), kept ``POD_LOG_S`` for the reads it may overtake."""

    seq: int
    at: float
    name: str
    labels: dict[str, str]


#: How long pod watch events are kept for the reads in flight they may overtake (``PolicyObserver._keep``): longer
#: than a read takes (a probe chunk's and a pass's reads end within ``passDeadlineSeconds``, 20 s by default; a
#: bulk read of 5,000 views took 0.8-2.6 s here). A read that started before the oldest event dropped keeps
#: nothing (it is read again). Estimate, with that margin.
POD_LOG_S = 120.0

#: A round's re-reads of vouched views (``PolicyObserver.resync_due``) count at most this much time since the last
#: ones: after a stall (a lost lease, rounds held for minutes) the views are caught up at this pace, never read all
#: at once (a bulk read of 5,000 views took 0.8-2.6 s here and held the rounds). Estimate: 10 s of re-reads at
#: 5,000 views and the 300 s default is 167 single reads in one round.
RESYNC_STEP_MAX_S = 10.0


class ViewDrift(NamedTuple):
    """A vouched target view that a re-read found different from the target (``PolicyObserver.drifted``): a watch
    said it was current and it was not. That is a bug in how views are kept (stall1's race was one); the re-read
    has already replaced it."""

    policy: str
    #: What differed, by field: ``"kept -> read"``.
    differences: dict[str, str]
    #: When the kept view had been read, and when the re-read that found it different started (``now``'s clock).
    kept_read_at: float
    reread_at: float


class _Suspect(NamedTuple):
    """A re-read that found its vouched view different, until ``drifted`` confirms it or an event explains it."""

    drift: ViewDrift
    #: What the re-read read: the resourceVersions of the target and of each pod listed, and the pods listed.
    versions: frozenset[str]
    read_from: PodsRead | None
    watch: str


class _Age(NamedTuple):
    """What judging a policy's kept view needs, kept per compiled policy (by identity): a probe round judges
    thousands a second, and the spec's attribute chain cost more than the judgement (6.5 µs a view at load 6,
    2026-12-07 07:29 UTC, against 0.8 µs for the age alone)."""

    policy: CompiledPolicy
    period_s: float
    #: Its target's watch in ``PolicyObserver.vouched`` (``watch_key``).
    watch: str


class _Planned(NamedTuple):
    """A policy's source requests, planned for one compiled policy and one pod list (both by identity)."""

    policy: CompiledPolicy
    pods: Sequence[PodRef]
    plan: Plan


class TrainingReader(Protocol):
    async def training(self, policy: CompiledPolicy) -> Training:
        ...


class NoTraining:
    """For policies without ``capacity``: nothing to arbitrate."""

    async def training(self, policy: CompiledPolicy) -> Training:
        return Training((), None)


class SharedTraining:
    """Policies that share a ClusterQueue and preemptible selectors share one read of them.

    Reading training is the costly part of an observation (the owners' Jobs, the Workloads, the quota).
    Within ``ttl_s`` on the loop clock, and while a read is in flight, policies with the same ``capacity``
    and ``preemptible`` blocks get the same answer. Any training write (``invalidate``) drops the cache, so
    a policy never decides on a picture that predates a deactivation made by another.
    """

    def __init__(self, inner: TrainingReader, *, now: Callable[[], float], ttl_s: float = 1.0) -> None:
        self.inner = inner
        self.now = now
        self.ttl_s = ttl_s
        self._cache: dict[str, _Shared] = {}
        self.reads = 0

    def invalidate(self) -> None:
        self._cache.clear()

    async def training(self, policy: CompiledPolicy) -> Training:
        spec = policy.policy.spec
        if spec.capacity is None:
            return Training((), None)
        key = json.dumps(
            [spec.capacity.model_dump(mode="json"), [p.model_dump(mode="json") for p in spec.preemptible]],
            sort_keys=True,
        )
        now = self.now()
        hit = self._cache.get(key)
        if hit is not None and now - hit.at <= self.ttl_s and not (hit.result.done() and hit.result.exception()):
            return await asyncio.shield(hit.result)
        future: asyncio.Future[Training] = asyncio.get_running_loop().create_future()
        self._cache[key] = _Shared(now, future)
        self.reads += 1
        try:
            result = await self.inner.training(policy)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it; no "never retrieved" warning
            self._cache.pop(key, None)
            raise
        future.set_result(result)
        return result


#: Probes screen on a target view up to this many of its policy's evaluation periods old (then it is read again),
#: unless the target's watch vouches for it (``PolicyObserver.vouched``).
KEPT_PERIODS = 2.0


def watch_key(kind: TargetKind, namespace: str) -> str:
    """The key of a target watch in ``PolicyObserver.vouched``: one string (its hash is kept, a tuple's is not)."""
    return f"{kind.value}/{namespace}"


def _no_watches() -> Mapping[str, float]:
    return {}


def _vouched(kept: KeptView, since: float | None) -> bool:
    """Whether a watch live since ``since`` (None: not live) vouches for ``kept``: read at or after it went live."""
    return since is not None and kept.read_at >= since


def _no_watch(key: str) -> str:
    return "no_watch"


def _uncounted(why: str, n: int) -> None:
    return None


@dataclass
class PolicyObserver:
    """The loop's ``Observer``: one ``observe(policy)`` per evaluation.

    ``source`` is normally a ``sources.pool.SourcePool`` (one backend per distinct source block, reused
    across ticks: connection pools, circuit breakers).
    """

    targets: TargetReader
    training: TrainingReader
    source: MetricSource
    default_source: SourceSpec | None = None
    deadline_s: float = 5.0

    #: Each policy's last target view and when it was read (``now``): what probes screen on.
    views: dict[str, KeptView] = field(default_factory=dict)
    now: Callable[[], float] = time.monotonic
    #: The live target watches, by ``watch_key`` (kind, namespace): from when each stands for the views read
    #: since (``Watcher.vouches``; ``Runtime`` supplies them). A view read at or after that is current as long as
    #: the watch stays live and no event about its target came (``changed``): it is not read again for its age.
    vouched: Callable[[], Mapping[str, float]] = _no_watches
    #: Why the watch of a ``watch_key`` does not vouch now (``Watcher.why_not``: ``no_watch``, ``listing``,
    #: ``broken``, ``silent``; ``Runtime`` supplies it): asked only for views read because they aged.
    why_unvouched: Callable[[str], str] = _no_watch
    #: Counts target views read by ``_read_views``, by why the kept one did not serve (``_count_reads``;
    #: ``Runtime`` feeds the ``autoscaler_target_view_reads`` metric with it).
    count_reads: Callable[[str, int], None] = _uncounted
    #: Per policy, for one compiled policy (by identity): its period and its watch's key (``_current``).
    _ages: dict[str, _Age] = field(default_factory=dict)
    #: Watched changes of targets not yet followed by a read, by policy (``changed``).
    _changed: dict[str, _Change] = field(default_factory=dict)
    #: The place (``_seq``) of the last watched change of each policy's target, kept after a read closed it: a
    #: read that started before it keeps nothing even when a later read ended first (``_keep``).
    _changed_at: dict[str, int] = field(default_factory=dict)
    #: Why each policy's kept view went, until a read keeps one again (``_count_reads``): ``dropped_target``,
    #: ``dropped_pod``, ``failed``, ``not_kept``.
    _dropped: dict[str, str] = field(default_factory=dict)
    #: Changes seen so far: a read notes it at its start, and keeps what it read only if no change came since.
    _seq: int = 0
    #: Pod watch events of the last ``POD_LOG_S``, per namespace, oldest first (``pod_changed``), and the place
    #: (``_seq``) of the last one dropped from each: a read started before an event that touches what it read
    #: keeps nothing, as for a target's change (``_keep``).
    _pod_log: dict[str, deque[_PodChange]] = field(default_factory=dict)
    _pod_dropped: dict[str, int] = field(default_factory=dict)
    #: The kept views by the pods and selector pairs a pod event touches them through (``pod_changed``).
    _pod_index: PodIndex = field(default_factory=PodIndex)
    #: Each policy's source requests, planned for one compiled policy and one pod list (both by identity):
    #: a probe round plans thousands of policies a second on the very views it planned them on last round.
    _plans: dict[str, _Planned] = field(default_factory=dict)
    #: Per compiled policy (by identity): its target's reference when ``observed`` builds its observation at
    #: once (no capacity block, one target), else None.
    _simple: dict[str, tuple[CompiledPolicy, TargetRef | None]] = field(default_factory=dict)
    #: Every vouched view is read again within this long (``viewResyncSeconds``), a few each round
    #: (``resync_due``), so that a view kept wrong (a bug of the stall1 kind) heals in bounded time.
    resync_s: float = 300.0
    #: Vouched views read again so far (``resync``).
    resyncs: int = 0
    #: When ``resync_due`` last chose views, and the re-reads owed since (a fraction of one carried over).
    _resync_at: float | None = None
    _resync_owed: float = 0.0
    #: Re-reads that found their vouched view different, until confirmed or explained (``drifted``).
    _suspects: dict[str, _Suspect] = field(default_factory=dict)
    #: Reads in flight (and suspects), by the change count at their start: ``_changed_at`` keeps only the changes
    #: one of them could still be overtaken by (``_prune_changes``).
    _open: dict[int, int] = field(default_factory=dict)

    async def prepare(
        self, policies: Sequence[CompiledPolicy], *, since: float | None = None
    ) -> dict[str, Prepared | Exception]:
        """Targets and signals of many policies in batches: the targets per namespace, the signals in one
        source read. A policy whose target could not be read gets the error. With ``since`` (``now``'s clock),
        a target read at or after it (``read_targets`` for a whole pass, then ``prepare`` chunk by chunk) is
        not read again."""
        if since is None:
            return await self._gather(policies, await self._read_views(policies))
        views: dict[str, TargetView | Exception] = {}
        again: list[CompiledPolicy] = []
        for cp in policies:
            kept = self.views.get(cp.name)
            if kept is not None and kept.read_at >= since:
                views[cp.name] = kept.view
            else:
                again.append(cp)
        if again:
            views.update(await self._read_views(again))
        return await self._gather(policies, views)

    async def read_targets(self, policies: Sequence[CompiledPolicy]) -> None:
        """Read and keep the targets of a whole pass in one bulk read (one list per namespace and kind, not
        one per chunk: 5,000 targets in one namespace were listed 20 times per pass)."""
        await self._read_views(policies)

    async def probe(
        self, policies: Sequence[CompiledPolicy], *, at: float | None = None
    ) -> dict[str, Prepared | Exception]:
        """``prepare`` for a round of probes: each target as last read, when that read is younger than twice
        its policy's period and no watched change dropped it; only the other targets are read (in bulk).
        With ``at`` (``now``'s clock: the round's start) the age is judged then, not now: a view the round
        found fresh serves its every chunk. Judged at each chunk, views read together aged out together in the
        middle of a long round, and each later chunk listed their whole namespace again to read its own 250
        (20 lists of 5,000 Deployments in a round: 16-34 s rounds at load 5, 2026-12-01 18:40 UTC)."""
        now = self.now() if at is None else at
        views: dict[str, TargetView | Exception] = {}
        stale: list[CompiledPolicy] = []
        live = self.vouched()
        for cp in policies:
            kept = self.views.get(cp.name)
            if kept is not None and self._current(cp, kept, now, KEPT_PERIODS, live):
                views[cp.name] = kept.view
            else:
                stale.append(cp)
        if stale:
            views.update(await self._read_views(stale))
        return await self._gather(policies, views)

    def unkept(self, policies: Sequence[CompiledPolicy], *, periods: float = KEPT_PERIODS) -> list[CompiledPolicy]:
        """The policies whose target view ``probe`` would read (none kept, or one too old for it): a round reads
        them all at once (``read_targets``) before its chunks, one list per namespace and kind, not one per
        chunk (5,000 targets in one namespace were listed 20 times a round, each list ≈ 0.2 s of JSON).
        With ``periods`` below ``KEPT_PERIODS``: the views that are older than that many of their policy's
        periods (those a round reads again ahead of time, in the background)."""
        now = self.now()
        views = self.views
        live = self.vouched()
        return [
            cp for cp in policies
            if (kept := views.get(cp.name)) is None or not self._current(cp, kept, now, periods, live)
        ]

    def resync_due(self, policies: Sequence[CompiledPolicy]) -> list[CompiledPolicy]:
        """The views a live watch vouches for that are read again now (``resync``): this call's share, oldest first.

        Each call owes ``N x elapsed / resync_s`` re-reads (N: the vouched views among ``policies``; elapsed: the
        time since the last call, at most ``RESYNC_STEP_MAX_S``; a fraction is carried over) and takes that many
        of the oldest views. A view has at most N - 1 views older than it, taken at N per ``resync_s``, so it is
        read again within ``resync_s`` (and a round) of its read while N holds; the re-reads are spread evenly
        over the rounds, never one bulk read of them all. Views no watch vouches for age out and are read anyway
        (``unkept``)."""
        now = self.now()
        last, self._resync_at = self._resync_at, now
        live = self.vouched()
        if last is None or not live:
            return []
        views = self.views
        vouched: list[tuple[float, CompiledPolicy]] = []
        for cp in policies:
            kept = views.get(cp.name)
            if kept is None:
                continue
            if _vouched(kept, live.get(self._age(cp).watch)):
                vouched.append((kept.read_at, cp))
        owed = self._resync_owed + len(vouched) * min(now - last, RESYNC_STEP_MAX_S) / self.resync_s
        take = min(int(owed), len(vouched))
        self._resync_owed = min(owed - take, 1.0)
        if not take:
            return []
        return [cp for _, cp in heapq.nsmallest(take, vouched, key=operator.itemgetter(0))]

    async def resync(self, policies: Sequence[CompiledPolicy]) -> None:
        """Read these policies' vouched views again (``resync_due``) and keep what is read, as any read does. A
        view the read finds different from the one vouched for becomes a suspect, reported by ``drifted`` once
        no event explains it; the view kept is the one just read either way."""
        live = self.vouched()
        before: dict[str, tuple[KeptView, str]] = {}
        for cp in policies:
            kept, watch = self.views.get(cp.name), self._age(cp).watch
            if kept is not None and _vouched(kept, live.get(watch)):
                before[cp.name] = (kept, watch)
        at = self.now()
        views = await self._read_views(policies)
        self.resyncs += len(policies)
        for name, (old, watch) in before.items():
            view, kept = views.get(name), self.views.get(name)
            if isinstance(view, Exception) or view is None or kept is None or kept.view is not view:
                continue  # unread, or not kept: a change overtook the read (its watch said so itself)
            differences = view_differences(old.view, view)
            if not differences:
                continue
            self._suspects[name] = _Suspect(ViewDrift(name, differences, old.read_at, at), view.versions,
                                            view.read_from, watch)

    def drifted(self) -> list[ViewDrift]:
        """The re-reads (``resync``) that found a vouched view different, confirmed: ``WATCH_SILENCE_S`` passed
        since, no event explained the difference (``_explained``) and the watches stayed live from before the
        kept view was read. A suspect whose watch stopped vouching meanwhile is dropped: nothing can be said."""
        if not self._suspects:
            return []
        now, live = self.now(), self.vouched()
        out: list[ViewDrift] = []
        for name, suspect in list(self._suspects.items()):
            since = live.get(suspect.watch)
            unbroken = since is not None and since <= suspect.drift.kept_read_at
            if unbroken and now - suspect.drift.reread_at < WATCH_SILENCE_S:
                continue  # not yet: the event of a change made just before the re-read may still come
            del self._suspects[name]
            if unbroken:
                out.append(suspect.drift)
        return out

    def _explained(self, names: Iterable[str] | None, obj: dict[str, Any]) -> None:
        """A watch event (of these policies' target, or with ``names`` None of a pod) that delivers a state a
        suspect's re-read already saw explains its difference: the change was made before the re-read and its
        event came after it (the watch's lag, not a bug). Such an event carries a resourceVersion the re-read read
        (``TargetView.versions``), or is a pod the re-read no longer listed, being deleted. An event of a later
        change (our own scale write, the pods it starts) carries a new version: it explains nothing."""
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if names is not None:
            for name in names:
                suspect = self._suspects.get(name)
                if suspect is not None and version in suspect.versions:
                    del self._suspects[name]
            return
        namespace, pod = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        for name, suspect in list(self._suspects.items()):
            read = suspect.read_from
            if read is None or read.namespace != namespace or not read.touched_by(pod, labels):
                continue
            if version in suspect.versions or (pod not in read.names and meta.get("deletionTimestamp")):
                del self._suspects[name]

    def still_kept(self, name: str, part: Prepared) -> bool:
        """Whether ``part`` was read on the target view this observer still keeps for the policy: no watched
        change dropped it and no read replaced it since (each read makes a new ``ReplicaStatus``)."""
        kept = self.views.get(name)
        return kept is not None and kept.view.replicas is part.replicas

    def _current(
        self, cp: CompiledPolicy, kept: KeptView, now: float, periods: float, live: Mapping[str, float]
    ) -> bool:
        """Whether a probe takes ``kept`` as its target now: younger than ``periods`` of its policy's periods, or
        read since its live watch began (``vouched``). A watch that is broken, silent or relisting vouches for
        nothing: the view then ages as if unwatched, and past its age it is read again (unknown if that fails)."""
        age = self._ages.get(cp.name)
        if age is None or age.policy is not cp:
            age = self._age(cp)
        if now - kept.read_at <= periods * age.period_s:
            return True
        return _vouched(kept, live.get(age.watch))

    def _age(self, cp: CompiledPolicy) -> _Age:
        age = self._ages.get(cp.name)
        if age is not None and age.policy is cp:
            return age
        if len(self._ages) > 2 * (len(self.views) + len(self._changed)) + 1024:
            self._ages.clear()  # policies gone since: start afresh rather than keep them
        spec = cp.policy.spec
        age = self._ages[cp.name] = _Age(cp, spec.evaluation_period_seconds,
                                         watch_key(spec.target.kind, spec.target.namespace))
        return age

    def forget(self, names: Iterable[str]) -> None:
        """Drop these policies' kept target views (their target changed or went: the next probe reads it again)."""
        self.changed(names, None)

    def retire(self, names: Iterable[str]) -> None:
        """Forget what is kept for these policies, gone from the set in force (file deleted, policy renamed):
        without this every per-policy record here grew by one entry for each policy ever loaded. Noted first as
        a change, so that a read of theirs still in flight keeps nothing (``_keep``); that note goes with the
        other changes once no read can be overtaken by it (``_prune_changes``)."""
        names = list(names)
        self.changed(names, None)
        for name in names:
            self._pod_index.remove(name)
            for kept in (self._ages, self._plans, self._simple, self._changed, self._dropped, self._suspects):
                kept.pop(name, None)

    def changed(self, names: Iterable[str], obj: dict[str, Any] | None) -> None:
        """A watch event: these policies' target is now ``obj`` (None: deleted). Their kept views are replaced at
        the next read, which takes the target from ``obj`` (while its watch is still live) and lists only its pods
        (a change of a pod alone comes through ``pod_changed``).
        A read that started before this event keeps nothing (it may have seen the target before the change)."""
        names = list(names)
        if self._suspects and obj is not None:
            self._explained(names, obj)
        self._seq += 1
        change = _Change(self._seq, self.now(), obj)
        for name in names:
            self.views.pop(name, None)
            self._changed[name] = change
            self._changed_at[name] = change.seq
            self._dropped[name] = "dropped_target"

    def pod_changed(self, names: Collection[str], pod: dict[str, Any]) -> list[str]:
        """A pod watch event (added, changed or deleted; ``names``: the policies whose targets are in the pod's
        namespace). The kept views it touches are dropped, so the next read lists their target's pods again: a
        view touches a pod that its read listed, or whose labels match the target's pod selector
        (``targets.PodsRead``; a pod relabelled out of a selector was listed, one relabelled in matches). A read in
        flight that the pod touches keeps nothing (``_keep``). Returns the policies whose views were dropped.

        What it closes: a pod's change that leaves its target's status counts as they were (a
        ``prometheus.io/port`` annotation edited in place, a new IP behind the same readiness) brings no target
        event, so without it a view the target watch vouches for kept the old scrape address."""
        if self._suspects:
            self._explained(None, pod)
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        self._seq += 1
        now = self.now()
        log = self._pod_log.setdefault(namespace, deque())
        log.append(_PodChange(self._seq, now, name, labels))
        while now - log[0].at > POD_LOG_S:
            self._pod_dropped[namespace] = log.popleft().seq
        touched = self._touched(names, namespace, name, labels)
        for n in touched:
            del self.views[n]
            self._pod_index.remove(n)
            self._dropped[n] = "dropped_pod"
        return touched

    def _touched(self, names: Collection[str], namespace: str, pod: str, labels: dict[str, str]) -> list[str]:
        """The policies of ``names`` whose kept view a pod event touches (``PodsRead.touched_by``), judged only
        on the candidates the pod index names (``pod_index``: not every view of the namespace)."""
        views = self.views
        touched: dict[str, None] = {}
        for n in self._pod_index.candidates(namespace, pod, labels):
            if (
                n not in touched and n in names and (kept := views.get(n)) is not None
                and (read := kept.view.read_from) is not None and read.namespace == namespace
                and read.touched_by(pod, labels)
            ):
                touched[n] = None
        return list(touched)

    def _keep(self, name: str, started: int, read_at: float, view: TargetView) -> None:
        """Keep a view read from ``read_at`` (change count ``started`` then), unless a change came since: of the
        target (``changed``) or of a pod it touches (``pod_changed``)."""
        if self._changed_at.get(name, 0) > started:
            # The target changed while it was read: what was read may be from before. Judged on the last change
            # itself, not on ``_changed``: a later read that ended first removed that (it read after the change),
            # and this older view would then replace the newer one, vouched for however old (2026-12-07, a
            # crossing never written: every screen found the count it had before it was set back).
            self._not_kept(name)
            return
        if name in self._changed:
            del self._changed[name]
        read = view.read_from
        if read is not None and read.namespace in self._pod_log:
            if self._pod_dropped.get(read.namespace, 0) > started:
                self._not_kept(name)
                return  # pod events since it started were dropped from the log: what they touched is unknown
            for pod in reversed(self._pod_log[read.namespace]):
                if pod.seq <= started:
                    break
                if read.touched_by(pod.name, pod.labels):
                    self._not_kept(name)
                    return  # a pod of it changed while it was read: its list may be from before
        self.views[name] = KeptView(read_at, view)
        self._pod_index.add(name, read)
        if self._dropped:
            self._dropped.pop(name, None)

    def _not_kept(self, name: str) -> None:
        if name not in self.views:
            self._dropped[name] = "not_kept"

    def _count_reads(self, policies: Sequence[CompiledPolicy], now: float) -> None:
        """Count the views about to be read by why the kept one (if any) did not serve (``count_reads``): none
        kept (never read, or why it went: ``_dropped``), ``young`` (read again before ``KEPT_PERIODS``: ahead of
        time, or by a pass), ``vouched`` (a view its watch still vouches for, read again by a pass or
        ``resync``), else aged past ``KEPT_PERIODS`` with its watch not vouching (``aged_`` and
        ``why_unvouched``) or vouching only since after it was read (``aged_before_live``: the target or pod
        watch relisted or restarted since)."""
        counts: dict[str, int] = {}
        views, dropped, live = self.views, self._dropped, self.vouched()
        for cp in policies:
            kept = views.get(cp.name)
            if kept is None:
                why = dropped.get(cp.name, "none")
            else:
                age = self._age(cp)
                since = live.get(age.watch)
                if now - kept.read_at <= KEPT_PERIODS * age.period_s:
                    why = "young"
                elif since is None:
                    why = f"aged_{self.why_unvouched(age.watch)}"
                else:
                    why = "vouched" if kept.read_at >= since else "aged_before_live"
            counts[why] = counts.get(why, 0) + 1
        for why, n in counts.items():
            self.count_reads(why, n)

    def _known(self, policies: Sequence[CompiledPolicy]) -> dict[str, dict[str, Any]]:
        """The targets watch events delivered, for the policies whose watch is live and was already live then."""
        if not self._changed:
            return {}
        live = self.vouched()
        known: dict[str, dict[str, Any]] = {}
        for cp in policies:
            change = self._changed.get(cp.name)
            if change is None or change.obj is None:
                continue
            since = live.get(self._age(cp).watch)
            if since is not None and change.at >= since:
                known[cp.name] = change.obj
        return known

    async def _read_views(self, policies: Sequence[CompiledPolicy]) -> dict[str, TargetView | Exception]:
        now, started = self.now(), self._open_read()
        try:
            self._count_reads(policies, now)
            known = self._known(policies)
            views = await (self.targets.observe_many(policies, known=known) if known
                           else self.targets.observe_many(policies))
            for name, view in views.items():
                if isinstance(view, Exception):
                    self.views.pop(name, None)
                    self._dropped[name] = "failed"
                else:
                    self._keep(name, started, now, view)
        finally:
            self._close_read(started)
        return views

    def _open_read(self) -> int:
        """A read (or a suspect, ``resync``) starts: the change count now, which ``_close_read`` is given back."""
        started = self._seq
        self._open[started] = self._open.get(started, 0) + 1
        return started

    def _close_read(self, started: int) -> None:
        left = self._open[started] - 1
        if left:
            self._open[started] = left
        else:
            del self._open[started]
        self._prune_changes()

    def _prune_changes(self) -> None:
        """Drop the changes no read can be overtaken by any more (``_changed_at``): those at or before the start
        of every read in flight (a read that starts later starts after them). A removed policy's entry goes with
        them; without this the record kept one entry per policy whose target ever changed."""
        if not self._changed_at:
            return
        oldest = min(self._open, default=self._seq)
        for n in [n for n, seq in self._changed_at.items() if seq <= oldest]:
            del self._changed_at[n]

    async def _gather(
        self, policies: Sequence[CompiledPolicy], views: dict[str, TargetView | Exception]
    ) -> dict[str, Prepared | Exception]:
        """The signals of every policy whose view is known, in one source read."""
        prepared: dict[str, Prepared | Exception] = {}
        plans: list[_Gathering] = []
        for cp in policies:
            view = views.get(cp.name)
            if view is None:
                continue
            if isinstance(view, Exception):
                prepared[cp.name] = view  # the evaluation fails on it, as it would have on its own read
                continue
            planned = self.requests(cp, view.pods)
            plans.append(_Gathering(cp, view, planned, _unsourced(planned)))
        # One read for all; a second only for requests whose (target, signal) key is already taken (two
        # policies on one target), since readings are keyed by it.
        batches: list[dict[tuple[str, str], SignalRequest]] = []
        placed: list[int] = []
        for g in plans:
            requests = g.plan.requests
            index = next((i for i, b in enumerate(batches) if all(r.key not in b for r in requests)), len(batches))
            if index == len(batches):
                batches.append({})
            batch = batches[index]
            for r in requests:
                batch[r.key] = r
            placed.append(index)
        readings = await asyncio.gather(*(self._read(list(b.values())) for b in batches))
        for g, index in zip(plans, placed, strict=True):
            self._fill(g.signals, g.plan.requests, readings[index])
            prepared[g.policy.name] = Prepared(g.view.replicas, g.view.pods, g.signals)
        return prepared

    async def plan(self, policies: Sequence[CompiledPolicy]) -> dict[str, Planned | Exception]:
        """Each policy's target, read as ``prepare`` reads it (in bulk), and the requests the observer would
        send for it, without reading them: what ``autoscaler record`` asks of the sources over a range. A
        policy whose target could not be read gets the error."""
        views = await self._read_views(policies)
        return {
            cp.name: view if isinstance(view, Exception) else Planned(view, self.requests(cp, view.pods))
            for cp in policies
            if (view := views.get(cp.name)) is not None
        }

    async def observe(self, policy: CompiledPolicy, prepared: Prepared | Exception | None = None) -> Observation:
        """The policy's observation; ``prepared`` (from ``prepare``) supplies its target and signals (an
        exception there is this policy's failed read). Built by ``observed`` where nothing more is read."""
        if isinstance(prepared, Exception):
            raise prepared
        if prepared is None:
            now, started = self.now(), self._open_read()
            try:
                view = await self.targets.observe(policy)
                self._keep(policy.name, started, now, view)
            finally:
                self._close_read(started)
            prepared = Prepared(view.replicas, view.pods, await self.read_signals(policy, view.pods))
        at_once = self.observed(policy, prepared)
        if at_once is not None:
            return at_once
        spec = policy.policy.spec
        workloads: tuple[TrainingWorkload, ...] = ()
        quota: QuotaStatus | None = None
        if spec.capacity is not None:
            training = await self.training.training(policy)
            workloads, quota = training.workloads, training.quota
        return _observation(spec.target.ref(), prepared, workloads, quota,
                            await self._members(policy, prepared.replicas))

    def observed(self, policy: CompiledPolicy, prepared: Prepared) -> Observation | None:
        """``observe(policy, prepared)`` without an ``await`` where it reads nothing more (no ``capacity``
        block, one target): the same observation, built at once (``observe`` itself builds it here); None for
        the others (``observe`` reads their training picture and other targets). A probe round screens
        thousands of policies a second, and nearly all of them are of the first kind."""
        simple = self._simple.get(policy.name)
        if simple is None or simple[0] is not policy:
            spec = policy.policy.spec
            if len(self._simple) > 2 * len(self.views) + 1024:
                self._simple.clear()  # policies gone since: start afresh rather than keep them
            ref = spec.target.ref() if spec.capacity is None and not spec.pools() else None
            simple = self._simple[policy.name] = (policy, ref)
        ref = simple[1]
        if ref is None:
            return None
        return _observation(ref, prepared, (), None, {})

    async def _members(self, policy: CompiledPolicy, replicas: ReplicaStatus) -> dict[str, ReplicaStatus]:
        """Every target's replica status, for a policy with several targets (empty for the others). A target
        that cannot be read is left out: the core then holds every pool (no decision on a partial picture)."""
        spec = policy.policy.spec
        if not spec.pools():
            return {}
        primary = spec.target.ref()
        out = {primary.key: replicas}
        others = [t.ref() for t in spec.targets() if t.ref() != primary]
        views = await asyncio.gather(*(self.targets.observe_ref(policy, r) for r in others), return_exceptions=True)
        for ref, view in zip(others, views, strict=True):
            if isinstance(view, asyncio.CancelledError):
                raise view
            if not isinstance(view, BaseException):
                out[ref.key] = view.replicas
        return out

    async def read_signals(self, policy: CompiledPolicy, pods: Sequence[PodRef] = ()) -> dict[str, SignalReading]:
        """Every raw signal of the policy in one batch; composites (``expr``) are the core's business."""
        planned = self.requests(policy, pods)
        out = _unsourced(planned)
        if planned.requests:
            self._fill(out, planned.requests, await self._read(planned.requests))
        return out

    def requests(self, policy: CompiledPolicy, pods: Sequence[PodRef]) -> Plan:
        """The source requests of a policy's raw signals for a target with these pods (``sources.pool.plan``
        with the controller's ``defaultSource``): what ``run``, ``observe`` and ``record`` ask the sources.
        Kept per policy for one compiled policy and one pod list (both by identity): a probe round plans
        thousands of policies a second on the very views it planned them on last round."""
        hit = self._plans.get(policy.name)
        if hit is not None and hit.policy is policy and hit.pods is pods:
            return hit.plan
        planned = plan(policy.policy, pods=tuple(pods), default=self.default_source)
        if len(self._plans) > 2 * len(self.views) + 1024:
            self._plans.clear()  # policies gone since: start afresh rather than keep them
        self._plans[policy.name] = _Planned(policy, pods, planned)
        return planned

    async def _read(self, requests: Sequence[SignalRequest]) -> Readings:
        if not requests:
            return {}
        try:
            # Sources enforce the deadline themselves; the extra second guards against one that does not.
            async with asyncio.timeout(self.deadline_s + 1.0):  # not wait_for: it can swallow a cancel on 3.11
                readings = await self.source.read(requests, deadline_s=self.deadline_s)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            readings = {r.key: SignalReading(None, None, error=error) for r in requests}
        return readings

    @staticmethod
    def _fill(out: dict[str, SignalReading], requests: Sequence[SignalRequest], readings: Readings) -> None:
        for req in requests:
            out[req.signal.name] = readings.get(req.key) or SignalReading(
                None, None, error="the source returned no reading for this signal"
            )

    async def aclose(self) -> None:
        await self.source.aclose()


def _observation(
    ref: TargetRef, prepared: Prepared, training: tuple[TrainingWorkload, ...], quota: QuotaStatus | None,
    members: dict[str, ReplicaStatus],
) -> Observation:
    """The core's input for one policy: the one place ``observe`` and ``observed`` build it."""
    return Observation(target=ref, replicas=prepared.replicas, signals=prepared.signals, training=training,
                       quota=quota, members=members)


def view_differences(kept: TargetView, read: TargetView) -> dict[str, str]:
    """What differs between a kept target view and a fresh read of it, by field (``"kept -> read"``): the replica
    counts, each pod's state and the serving pods' addresses. A pod's age is left out (it is computed at each read)."""
    out: dict[str, str] = {}
    a, b = kept.replicas, read.replicas
    for name in ("spec", "ready", "starting", "gated", "slice"):
        before, after = getattr(a, name), getattr(b, name)
        if before != after:
            out[name] = f"{before} -> {after}"

    def states(status: ReplicaStatus) -> dict[str, str]:
        return {p.name: ",".join(w for w, on in (("ready", p.ready), ("failed", p.failed), ("deleting", p.deleting))
                                 if on) or "unready" for p in status.pods or ()}

    def serving(view: TargetView) -> dict[str, str]:
        return {p.name: f"{p.url or p.ip or '-'}@{p.node or '-'}{'' if p.leader else ' worker'}" for p in view.pods}

    for field_, (x, y) in (("pod states", (states(a), states(b))), ("serving pods", (serving(kept), serving(read)))):
        if x != y:
            changed = sorted(n for n in x.keys() | y.keys() if x.get(n) != y.get(n))
            out[field_] = "; ".join(f"{n}: {x.get(n, 'absent')} -> {y.get(n, 'absent')}" for n in changed[:5]) + (
                f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
    return out


def _unsourced(planned: Plan) -> dict[str, SignalReading]:
    """The readings known before any read: the signals without a source."""
    if not planned.missing:
        return {}
    return {name: SignalReading(None, None, error=NO_SOURCE) for name in planned.missing}


@dataclass(frozen=True)
class WatchSpec:
    """One collection to watch: ``/apis/<group>/<version>/namespaces/<namespace>/<plural>``, or every
    namespace's when ``namespace`` is empty (``/apis/<group>/<version>/<plural>``)."""

    group: str
    version: str
    plural: str
    namespace: str

    @property
    def path(self) -> str:
        root = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"  # "": the core group
        if not self.namespace:
            return f"{root}/{self.plural}"
        return f"{root}/namespaces/{self.namespace}/{self.plural}"


def pods_watch(namespace: str) -> WatchSpec:
    """The watch of a namespace's pods (the core group: ``/api/v1/namespaces/<namespace>/pods``)."""
    return WatchSpec("", "v1", "pods", namespace)


#: A version the server may not serve -> the one to try instead.
FALLBACK_VERSIONS = {"v1beta2": "v1beta1"}
#: A watch silent for longer (no event, no bookmark) no longer stands for what was read (``Watcher.vouches``):
#: the API server's bookmark period (one minute, k8s.io/apiserver storage/cacher/cacher.go
#: ``defaultBookmarkFrequency``) plus the 15 s its ``DefaultEventFreshDuration`` adds to it for the same reason.
WATCH_SILENCE_S = 75.0

WatchCallback = Callable[[WatchSpec, str, dict[str, Any]], None]


class Watcher:
    """List, then watch one collection forever; relist on ``410 Gone``; reconnect when the stream drops.

    ``on_event(spec, type, object)`` is called for every object of the (re)list as ``SYNC``, after a relist as
    ``DELETED`` for every object delivered before and not listed now (``_replace``), and for every
    watch event whose *relevant* part changed (``fingerprint``): a status heartbeat or a managedFields
    update does not wake the loop. ``synced`` is set after the first list; ``tried`` after the first list
    or the first failure (readiness); ``on_ok`` / ``on_error`` say whether it works now (the health of each
    watch is reported on its own, so one failing watch names itself and blocks nothing else).

    Failures back off exponentially with full jitter (``kube.Backoff``, 0.8 s doubling to 30 s, reset once
    a stream works): a watch RBAC forbids costs a request every ~15 s on average, not every second. A
    ``410 Gone`` relists at once (it is the protocol, not a failure); a server-ended stream resumes at once.

    ``vouches(now)`` says whether the watch stands for the objects read since it began (``live_from``): then a
    change of any of them reaches ``on_event`` (the stream is lossless from its resourceVersion), and an object
    read at or after ``live_from`` with no event since is as it was read. The rule, in order:

    1. ``live_from`` is set when a list completes (the first, or a relist), to that moment: what was read before
       may differ from the list without an event (events are compared with what this watcher last delivered,
       ``fingerprint``), so only reads that start at or after it count;
    2. a relist (after a ``410 Gone`` or a version fallback) clears it until the list completes;
    3. any failure of the stream breaks the watch until a ``BOOKMARK`` arrives on a stream opened since: a
       bookmark carries the resourceVersion up to which every event was sent, so the events missed meanwhile
       (resumed from the last resourceVersion) have been delivered by then;
    4. the server must have been heard (an event, a bookmark, a list, a stream it ended) within
       ``WATCH_SILENCE_S``: the API server sends every watch that allows them a bookmark every minute
       (``defaultBookmarkFrequency``, k8s.io/apiserver ``storage/cacher/cacher.go``), so a stream silent for
       longer is taken as hung (the client itself notices only after ``timeoutSeconds`` + the deadline).
    """

    def __init__(
        self,
        api_client: Any,
        spec: WatchSpec,
        on_event: WatchCallback,
        *,
        on_error: Callable[[str], None] | None = None,
        on_ok: Callable[[], None] | None = None,
        timeout_s: int = 300,
        backoff: Backoff | None = None,
        now: Callable[[], float] | None = None,
    ) -> None:
        self._api: Any = client.CustomObjectsApi(api_client)
        self.spec = spec
        self._on_event = on_event
        self._on_error = on_error
        self._on_ok = on_ok
        self._timeout_s = timeout_s
        self.backoff = backoff or Backoff()
        #: Per ``namespace/name`` delivered: its ``fingerprint`` and what a relist's DELETED needs (``_last_known``).
        self._seen: dict[str, tuple[str, dict[str, Any]]] = {}
        self.synced = asyncio.Event()
        self.tried = asyncio.Event()
        self.relists = 0
        self.failures = 0
        #: The clock of ``live_from`` and ``vouches`` (the readers' clock; default: the running loop's).
        self.now = now or (lambda: asyncio.get_running_loop().time())
        #: When the current unbroken run of list and stream began (None: no list since the last ``410``).
        self.live_from: float | None = None
        #: When the server was last heard; whether a failure happened since the last bookmark.
        self.heard_at = -math.inf
        self.broken = False

    def vouches(self, now: float) -> float | None:
        """``live_from`` when the watch stands for what was read since then (see the class docstring), else None."""
        if self.live_from is None or self.broken or now - self.heard_at > WATCH_SILENCE_S:
            return None
        return self.live_from

    @property
    def first_list(self) -> bool:
        """Whether the ``SYNC`` objects being delivered come from this watch's first list: a baseline (nothing was
        delivered before it), not changes. A relist delivers as ``SYNC`` only the objects that changed since they
        were last delivered (``fingerprint``), while the stream was gone."""
        return self.relists <= 1

    def why_not(self, now: float) -> str | None:
        """Why ``vouches(now)`` is None, by the class docstring's rule: ``listing`` (no list completed since the
        start or the last ``410``: rules 1-2), ``broken`` (a stream failure not yet followed by a bookmark: 3),
        ``silent`` (the server unheard for longer than ``WATCH_SILENCE_S``: 4); None while it vouches."""
        if self.live_from is None:
            return "listing"
        if self.broken:
            return "broken"
        if now - self.heard_at > WATCH_SILENCE_S:
            return "silent"
        return None

    async def run(self) -> None:
        s = self.spec
        version = s.version
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    self.live_from = None
                    listing = await self._list(s.group, version, s.plural)
                    self.relists += 1
                    rv = listing.get("metadata", {}).get("resourceVersion")
                    self._replace(listing.get("items", []))
                    self.live_from = self.heard_at = self.now()
                    self.broken = False  # what failed before this list, the list replaced
                    self.synced.set()
                    self._ok()
                w = watch.Watch()
                async with w.stream(
                    self._list, s.group, version, s.plural,
                    resource_version=rv, timeout_seconds=self._timeout_s, allow_watch_bookmarks=True,
                ) as stream:
                    async for event in stream:
                        self._ok()
                        obj = event.get("object") or event.get("raw_object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if event.get("type") != "BOOKMARK":
                            self._deliver(str(event.get("type")), obj)
                        else:
                            self.broken = False  # every event up to its resourceVersion was delivered
                        self.heard_at = self.now()
                # The server ended the stream (timeout, restart): resume from the last resourceVersion.
                self.heard_at = self.now()
                self._ok()
            except ApiException as exc:
                if exc.status == 410:
                    rv = None  # too old: the history we missed is gone; a fresh list is the only truth
                    continue
                if exc.status == 404 and version in FALLBACK_VERSIONS:
                    version = FALLBACK_VERSIONS[version]  # e.g. a Kueue that serves only v1beta1
                    rv = None
                    continue
                await self._failed(f"{exc.status} {exc.reason}")
            except Exception as exc:  # timeouts, connection errors, aiohttp payload errors when a stream is cut
                await self._failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)

    def _list(self, group: str, version: str, plural: str, **kwargs: Any) -> Any:
        """List (or, with ``watch=True``, watch) the collection, namespaced or cluster-wide.

        :return: object
        """
        if not group:
            return self._list_core(version, plural, **kwargs)
        if self.spec.namespace:
            return self._api.list_namespaced_custom_object(group, version, self.spec.namespace, plural, **kwargs)
        return self._api.list_cluster_custom_object(group, version, plural, **kwargs)

    def _list_core(self, version: str, plural: str, **kwargs: Any) -> Any:
        """A core-group collection (``/api/v1/.../pods``) as the custom-object calls read theirs: the same
        arguments, the answer as JSON (a dict), never as the client's models."""
        query = [(_QUERY[k], v) for k, v in kwargs.items() if k in _QUERY and v is not None]
        namespaced = bool(self.spec.namespace)
        return self._api.api_client.call_api(
            f"/api/{version}/namespaces/{{namespace}}/{plural}" if namespaced else f"/api/{version}/{plural}", "GET",
            {"namespace": self.spec.namespace} if namespaced else {}, query, {"Accept": "application/json"},
            response_types_map={200: "object"}, auth_settings=["BearerToken"], _return_http_data_only=True,
            _preload_content=kwargs.get("_preload_content", True), _request_timeout=kwargs.get("_request_timeout"),
        )

    def _ok(self) -> None:
        if self.backoff.failures or not self.tried.is_set():
            self.backoff.reset()
            self.tried.set()
            if self._on_ok:
                self._on_ok()

    async def _failed(self, what: str) -> None:
        self.failures += 1
        self.broken = True
        self.tried.set()
        if self._on_error:
            self._on_error(f"watch {self.spec.path}: {what}")
        await asyncio.sleep(self.backoff.next())

    def _replace(self, items: list[dict[str, Any]]) -> None:
        """A (re)list replaces what this watch knew, as client-go's ``DeltaFIFO.Replace`` does: every object listed
        is delivered as ``SYNC``, and every object delivered before and not listed now was deleted while no stream
        was open (the ``DELETED`` event went with the history a ``410`` said is gone). It is delivered as
        ``DELETED`` with the last state delivered (namespace, name, labels: client-go's
        ``DeletedFinalStateUnknown``). Without it a ScalingPolicy deleted during a watch gap kept running, and a
        deleted target or Workload was still believed to exist, until the controller restarted."""
        listed: set[str] = set()
        for obj in items:
            listed.add(_key_of(obj))
            self._deliver("SYNC", obj)
        for key in [k for k in self._seen if k not in listed]:
            self._deliver("DELETED", self._seen[key][1])

    def _deliver(self, type_: str, obj: dict[str, Any]) -> None:
        name = _key_of(obj)  # namespaced: a cluster-wide watch sees all
        if type_ == "DELETED":
            self._seen.pop(name, None)
            self._on_event(self.spec, type_, obj)
            return
        fp = fingerprint(obj, labels=not self.spec.group)
        seen = self._seen.get(name)
        if seen is not None and seen[0] == fp:
            return
        self._seen[name] = (fp, _last_known(obj))
        self._on_event(self.spec, type_, obj)


def _key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` of a watched object (``/name`` when cluster-scoped)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _last_known(obj: dict[str, Any]) -> dict[str, Any]:
    """What a watch keeps of an object it delivered, for the ``DELETED`` a relist may owe it (``Watcher._replace``):
    its identity and labels (a pod's labels say which target views it touched), not the whole object."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("namespace", "name", "uid", "labels", "resourceVersion") if k in meta}
    return {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"), "metadata": kept}


#: The list and watch arguments of the custom-object calls, as query parameters (``Watcher._list_core``).
_QUERY = {"watch": "watch", "resource_version": "resourceVersion", "timeout_seconds": "timeoutSeconds",
          "allow_watch_bookmarks": "allowWatchBookmarks", "label_selector": "labelSelector", "limit": "limit",
          "_continue": "continue"}


def fingerprint(obj: dict[str, Any], *, labels: bool = False) -> str:
    """The parts of a target or Workload a decision depends on: spec and status, without bookkeeping; with
    ``labels`` (pods: a relabelled pod leaves or joins a target's selector) the labels too."""
    status = dict(obj.get("status") or {})
    # Condition heartbeats change on every kubelet/Kueue sync without meaning anything new.
    if isinstance(status.get("conditions"), list):
        status["conditions"] = [
            {k: c.get(k) for k in ("type", "status", "reason")} for c in status["conditions"] if isinstance(c, dict)
        ]
    status.pop("observedGeneration", None)
    meta = obj.get("metadata") or {}
    parts = [obj.get("spec"), status, meta.get("annotations")]
    if labels:
        parts.append(meta.get("labels"))
    return json.dumps(parts, sort_keys=True, default=str)
