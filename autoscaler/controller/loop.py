"""The control loop: observe → decide (the pure core) → act, per policy, on a period and on events.

Per policy, one evaluation:
1. ``Observer.observe`` builds a ``core.model.Observation`` (target replicas, signals, training, quota);
2. ``core.engine.decide(compiled, observation, state, now)`` returns decisions and a new ``PolicyState``;
3. metrics, a JSON log line per decision, Events for decisions worth telling;
4. unless dry-run (which commits the state as if it had acted, so windows and rate limits behave as they
   would, and writes nothing but Events), the decisions are applied **in order**: deactivate training
   first (its chips must be released before serving can use them: the core's capacity rule already
   limits the scale to what fits now), then scale; reactivate training only after a scale-down went through;
5. the new state is committed only when every write succeeded, so a failed write is retried from the
   same state next time (nothing half-applied). A restart loses no action either: what was done is in the
   cluster (target replicas, the Workload's deactivated-by annotation) and the next observation sees it.

A pass (the policies due at once, ``--once``'s every policy, a round of probes) is observed in bulk first
(``Observer.prepare``: targets per namespace, every signal in one source read); an evaluation uses its
prepared part only when no other evaluation of its policy ran in between (which may have acted), and
otherwise observes afresh.

When it runs: every ``evaluationPeriodSeconds``; at once when a watched target or Workload changes
(``trigger``); and between periods a **probe** re-reads fast signals every ``fastPollSeconds`` and runs
``decide`` on a copy of the state: only if the decision would change something does it commit and act
(that is "a fast signal crossing a threshold", with the threshold being whatever the policy's own rule
says). A probe that would change nothing leaves no trace: state, events and decision metrics untouched.

Probes at scale (thousands of policies): a round is split into chunks of ``probe_chunk`` policies, at most
``probe_parallel`` chunks in flight, so a crossing waits for its chunk's scrapes, not for the whole round's.
A chunk **screens**: targets as the observer last read them (no API read; a watched change drops the kept
view), its signals in one source read, ``decide`` on a copy. Only a policy whose decision would change is
then **evaluated** at once as a probe on a fresh read (target, pods, signals), with its own concurrency
slots (``urgent``) so that it never queues behind a periodic pass: what is written is decided on what the
cluster shows now, never on the kept view. The least recently screened go first, so every policy waits one round
between two screens. A screen asks the core first whether the reading could change the decision at all
(``core.screen.quiet``) and decides only when it could. A due policy's clean screen that would change nothing
**is** its periodic evaluation (``_stand``: one ``decide`` on one read, committed); the periodic pass leaves a
screened policy to the probes for one period past its due time, then takes over, deciding on the last screen
(``_reusable``) and reading afresh to act.
Rounds start every ``fastPollSeconds`` (a round that runs longer delays the next, it is not repeated).
A periodic pass over many policies is evaluated in chunks of ``pass_chunk`` (policies sharing a ClusterQueue
stay in one chunk: its ledger is filled from their bulk read before any of them decides), so the event
loop is never held by one huge batch and urgent evaluations interleave.

Deadlines: every Kubernetes API call has its own (``kube.with_deadlines``); on top, one evaluation of one
policy, and a pass's bulk read, each get ``pass_deadline_s``: what runs over is cancelled, reported
(``deadline_exceeded``) and retried on the next pass from the cluster's state, never from a half-applied
plan. A write is also cut at the end of the time this replica surely holds the Lease (``Leadership.remaining``).
The loop ticks the liveness probe at the end of every iteration (and every second while it waits to lead), so
``/healthz`` tells whether *it* makes progress.

Time: ``Clock.monotonic`` is the event loop's clock (``looptime`` makes it virtual in tests);
``Clock.wall`` is unix seconds derived from it, so the core's ``now`` and the sample timestamps agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from autoscaler.controller import kinds
from autoscaler.controller.due import DueTimes
from autoscaler.controller.events import EventRecorder, EventType, ObjectRef
from autoscaler.controller.kube import Forbidden, NotFound
from autoscaler.controller.logs import get_logger
from autoscaler.controller.observer import Prepared, ViewDrift
from autoscaler.controller.reload import PolicyStore
from autoscaler.controller.telemetry import Telemetry
from autoscaler.core import arbitration
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import (
    AskedReplicas,
    Decision,
    Observation,
    PolicyState,
    QuotaStatus,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    TrainingAction,
    TrainingDecision,
)
from autoscaler.core.screen import quiet, screened
from autoscaler.core.sourcespec import CloudMonitoringSourceSpec
from autoscaler.core.spec import CapacitySpec
from autoscaler.sources.base import URGENT

if TYPE_CHECKING:  # the Kubernetes client stays out of what imports the loop
    from autoscaler.controller.workloads import Held

#: Reasons worth an Event even when the count does not change (they explain a hold the user will ask about).
NOTABLE_HOLDS = frozenset(
    {Reason.METRICS_UNKNOWN, Reason.FALLBACK, Reason.WAITING_FOR_CAPACITY, Reason.WAITING_FOR_ADMISSION}
)
WARNING_REASONS = frozenset({Reason.METRICS_UNKNOWN, Reason.FALLBACK, Reason.WAITING_FOR_CAPACITY})


T = TypeVar("T")

#: A policy due within this many seconds is evaluated now (see ``Controller.run``).
DUE_SLACK_S = 1e-3
#: The state of a policy never evaluated, for screens (frozen: one shared, not one built per screen).
_NO_STATE = PolicyState()


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def wall(self) -> float: ...


class LoopClock:
    """The running loop's clock, plus unix seconds anchored to it once (monotonic afterwards)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._anchor = time.time() - self._loop.time()

    def monotonic(self) -> float:
        return self._loop.time()

    def wall(self) -> float:
        return self._anchor + self._loop.time()


class Observer(Protocol):
    async def prepare(
        self, policies: list[CompiledPolicy], *, since: float | None = None
    ) -> dict[str, Prepared | Exception]:
        """Read what many policies' observations share, in batches (by policy name); targets read at or after
        ``since`` (by ``read_targets``) are not read again."""
        ...

    async def read_targets(self, policies: list[CompiledPolicy]) -> None:
        """Read (and keep) the targets of a whole pass at once, before it is prepared chunk by chunk."""
        ...

    async def probe(
        self, policies: list[CompiledPolicy], *, at: float | None = None
    ) -> dict[str, Prepared | Exception]:
        """``prepare`` for probes: targets as last read where that is recent enough (judged at ``at``, the
        round's start, when given), signals afresh."""
        ...

    async def observe(self, policy: CompiledPolicy, prepared: Prepared | Exception | None = None) -> Observation:
        ...

    def observed(self, policy: CompiledPolicy, prepared: Prepared) -> Observation | None:
        """``observe(policy, prepared)`` without an ``await`` where it reads nothing more, else None."""
        ...

    def still_kept(self, name: str, part: Prepared) -> bool:
        """Whether ``part`` (a probe's) was read on the target view still kept (no change or read since)."""
        ...

    def unkept(self, policies: list[CompiledPolicy], *, periods: float = 2.0) -> list[CompiledPolicy]:
        """The policies whose target ``probe`` would read (no view kept, or one too old); with ``periods``, those
        whose view is older than that many of their policy's evaluation periods."""
        ...

    def resync_due(self, policies: list[CompiledPolicy]) -> list[CompiledPolicy]:
        """The views a live watch vouches for to read again now: this round's share, oldest first (every one
        within ``viewResyncSeconds``)."""
        ...

    async def resync(self, policies: list[CompiledPolicy]) -> None:
        """Read those views again; one found different from the view vouched for is reported by ``drifted``."""
        ...

    def drifted(self) -> list[ViewDrift]:
        """Vouched views a re-read found different from their target, confirmed (no event explains it)."""
        ...

    def retire(self, names: list[str]) -> None:
        """Forget what is kept for these policies: they left the set in force."""
        ...


class Actuator(Protocol):
    """Writes to the cluster. ``refusal`` types are "this target is not ours" (a Warning Event, no retry storm)."""

    refusals: tuple[type[BaseException], ...]

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> object: ...
    async def training(self, policy: CompiledPolicy, decision: TrainingDecision) -> object: ...
    async def check_scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> object:
        """The scale write as a server-side dry run: raises what the real write would (nothing is stored)."""
        ...


class Keeper(Protocol):
    """Finds the Workloads this controller holds down, by the marks on them (``controller.workloads``)."""

    async def held(self, policies: list[CompiledPolicy]) -> list[Held]: ...
    async def quota(self, capacity: CapacitySpec) -> QuotaStatus: ...
    async def resume_held(self, held: Held, message: str) -> bool: ...


class Leadership(Protocol):
    def holds(self) -> bool: ...
    def remaining(self) -> float:
        """Seconds for which this replica surely still holds the lease (0 when it does not; inf without election)."""
        ...

    async def wait_leading(self) -> None: ...


class NotLeader(Exception):
    """Raised before a write when this replica no longer holds the lease."""


@dataclass(frozen=True)
class Outcome:
    """One evaluation's result: ``ok`` false when observing or any write failed."""

    policy: str
    decisions: tuple[Decision, ...] = ()
    acted: tuple[str, ...] = ()
    error: str | None = None
    committed: bool = False
    observation: Observation | None = None  # what the decisions were made on (for the policy's status)
    refused: bool = False  # the target is not ours (another autoscaler owns it)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class _Screen:
    """What a screen decided on a kept view (``Controller._screen``): never written from; it may stand as a due
    policy's periodic evaluation when it would change nothing (``Controller._stand``)."""

    obs: Observation
    decisions: list[Decision]
    state: PolicyState


class Stamped(NamedTuple):
    """A policy's observation read ahead of its evaluation (a pass's bulk read, a kept screen), with the policy's
    evaluation count when it was read: used only if no evaluation of the policy started (and perhaps acted) since."""

    runs: int
    #: What was read, or why it could not be.
    part: Prepared | Exception


class _Kept(NamedTuple):
    """A policy's last clean screen (every signal read), which a periodic evaluation may decide on (``_reusable``)."""

    #: When the screen started (the loop clock).
    started: float
    #: The policy's evaluation count then.
    stamp: int
    prepared: Prepared


@dataclass
class _Index:
    """``Controller._index``: built from one policy set (kept to tell when the store replaced it)."""

    policies: dict[str, CompiledPolicy]
    targets: dict[str, list[str]] = field(default_factory=dict)
    training: dict[str, list[str]] = field(default_factory=dict)
    any_training: list[str] = field(default_factory=list)
    #: Policies probes screen (``_fast``), in the policy set's order.
    fast: list[CompiledPolicy] = field(default_factory=list)
    #: Per screened policy, how long past its due time the periodic pass leaves it to a screen (its period):
    #: the first clean screen after it is due stands as its periodic evaluation (``Controller._stand``).
    grace: dict[str, float] = field(default_factory=dict)
    #: Policies by their target's namespace (a pod watch event concerns those: ``policies_in_namespace``).
    namespaces: dict[str, set[str]] = field(default_factory=dict)
    #: Whether a probed policy is on a ClusterQueue (``_chunks`` then keeps each queue's policies together).
    queued: bool = False


@dataclass
class Controller:
    store: PolicyStore
    observer: Observer
    actuator: Actuator
    telemetry: Telemetry
    clock: Clock
    leader: Leadership
    events: EventRecorder | None = None
    dry_run: bool = False
    fast_poll_s: float = 1.0
    pass_deadline_s: float = 20.0
    concurrency: int = 64
    #: Evaluations a probe found would act, run beside (never behind) the ``concurrency`` slots.
    urgent: int = 16
    #: Policies screened per probe chunk, and chunks in flight at once (see the module docstring).
    probe_chunk: int = 250
    probe_parallel: int = 2
    #: Policies evaluated per chunk of a periodic pass.
    pass_chunk: int = 250
    #: How long, at most, a probe round waits in all for the evaluations its screens escalated before it scrapes
    #: or screens a chunk (and never past ``yield_s`` after the oldest running one started): a crossing's
    #: evaluation does not queue its reads and its write behind the round's scrapes and screens in the event loop.
    yield_s: float = 0.5
    #: A round reads again, in the background, the target views older than this many of their policy's periods
    #: (probes screen on a view up to two periods old): the bulk read of views that age out together no
    #: longer holds the round's start (it did for 1.2-8 s a time at load 5, 2026-12-01 18:40 UTC).
    refresh_periods: float = 1.5
    states: dict[str, PolicyState] = field(default_factory=dict)
    #: Each policy's next periodic due time, and which are due (``DueTimes``: heaps, not a walk per wake).
    _due: DueTimes = field(default_factory=DueTimes)
    _pending: dict[str, str] = field(default_factory=dict)  # policy -> trigger
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _runs: dict[str, int] = field(default_factory=dict)  # policy -> evaluations started
    #: The last evaluation of each policy that counted (probes that changed nothing do not): status reads it.
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    #: Called after each pass with the policies it evaluated (the ScalingPolicy status writer).
    after_pass: Callable[[list[str]], Awaitable[None]] | None = None
    #: Called after a pass that evaluated a policy for the first time (its state, kept view and metric
    #: children are built then and kept as long as the policy): ``Runtime`` settles the collector there.
    after_first: Callable[[], None] | None = None
    #: Called after each probe round (``Runtime`` freezes what survived it out of the collector's traversals).
    after_round: Callable[[], None] | None = None
    #: The pass ledger: per (ClusterQueue, resource), per target, the serving replicas asked for and those not
    #: admitted by Kueue yet (with their chips), as last observed or as this controller just asked. Other
    #: policies on the same ClusterQueue decide on it through ``arbitration.in_pass`` (chips and places in
    #: flight are spent once); policies on the other ClusterQueues of its cohort see its chips taken from what
    #: the cohort lends (``arbitration.lent``).
    _asked: dict[tuple[str, str], dict[str, AskedReplicas]] = field(default_factory=dict)
    #: Policies sharing a ClusterQueue, or ClusterQueues of one cohort, evaluate one at a time: each decides on
    #: what the previous one did (``_group``).
    _queue_locks: dict[_Group, asyncio.Lock] = field(default_factory=dict)
    #: Each ClusterQueue's cohort ("" for none), as its last quota read showed it (the loop learns it nowhere
    #: else): the key of its policies' lock.
    _cohorts: dict[str, str] = field(default_factory=dict)
    #: The pass deadline of each policy's running evaluation: a hand-off it cuts is undone (``_act``).
    _deadlines: dict[str, asyncio.Timeout] = field(default_factory=dict)
    #: Finds and resumes Workloads no policy covers any more (None: no sweep).
    keeper: Keeper | None = None
    sweep_s: float = 10.0
    #: What the last sweep found held down (``observe`` and the metrics show it).
    held: list[Held] = field(default_factory=list)
    _next_sweep: float = 0.0
    _swept_policies: frozenset[str] | None = None
    #: Per policy: when its last screen started (the round's order: least recently screened first).
    _screened: dict[str, float] = field(default_factory=dict)
    #: Per policy: its last clean screen (every signal read), when it started and the evaluation count then;
    #: a periodic evaluation decides on it instead of reading again (``_reusable``).
    _kept: dict[str, _Kept] = field(default_factory=dict)
    #: Per screened policy: why its last screen while it was due did not stand as its periodic evaluation
    #: (``_missed``), until one stands or the periodic pass takes it (``_why_full``).
    _misses: dict[str, str] = field(default_factory=dict)
    #: Evaluations started by probes (kept so that they are not collected, and cancelled with the loop), with
    #: when each started (``_yield_to_escalations``).
    _escalations: dict[asyncio.Task[None], float] = field(default_factory=dict)
    #: Set while no escalated evaluation runs.
    _calm: asyncio.Event = field(default_factory=asyncio.Event)
    #: What the running probe round may still wait for escalations (``yield_s`` at its start).
    _yield_left: float = 0.0
    #: The background read of aging target views a round started (``_refresh_ahead``), while it runs.
    _refreshing: asyncio.Task[None] | None = None
    #: The background re-read of vouched target views a round started (``_resync_views``), while it runs.
    _resyncing: asyncio.Task[None] | None = None
    _by: _Index | None = None
    #: The policy set the per-screen records were last pruned for (``probe_round``).
    _pruned_for: object = None
    #: Policies screened by probes so far (bench/controller_reaction.py reports CPU per screen from it).
    screens: int = 0
    #: Metric children by (metric, labels) (``_child``).
    _children: dict[tuple[object, ...], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._log = get_logger(component="loop")
        self._sem = asyncio.Semaphore(self.concurrency)
        self._urgent_sem = asyncio.Semaphore(self.urgent)
        self._calm.set()

    # triggers -----------------------------------------------------------------------------------------
    def trigger(self, names: Iterable[str], why: str) -> None:
        """Evaluate these policies as soon as possible (a watched object changed)."""
        for n in names:
            self._pending.setdefault(n, why)
        if self._pending:
            self._wake.set()

    def policies_for_target(self, key: str) -> list[str]:
        return list(self._index().targets.get(key, ()))

    def policies_in_namespace(self, namespace: str) -> Collection[str]:
        """Policies whose (first) target is in this namespace (a set: a pod event asks whether a policy is one)."""
        return self._index().namespaces.get(namespace, set())

    def policies_for_training(self, namespace: str) -> list[str]:
        """Policies whose capacity arbitration may read a Workload of this namespace."""
        index = self._index()
        return [*index.training.get(namespace, ()), *index.any_training]

    def _index(self) -> _Index:
        """Who reads which target and which training namespace, rebuilt when the policy set is replaced (a
        watch event is answered in O(1), not in a scan of every policy: 5,000 policies × 5,000 events at
        start-up took tens of seconds)."""
        policies = self.store.policies
        if self._by is None or self._by.policies is not policies:
            index = _Index(policies)
            for n, cp in policies.items():
                spec = cp.policy.spec
                index.targets.setdefault(spec.target.ref().key, []).append(n)
                index.namespaces.setdefault(spec.target.namespace, set()).add(n)
                if _fast(cp):
                    index.fast.append(cp)
                    index.queued = index.queued or _queue_key(cp) is not None
                    if spec.capacity is None:  # a ClusterQueue's policies are read in their pass (the ledger)
                        index.grace[n] = spec.evaluation_period_seconds
                if spec.capacity is None:
                    continue
                if not spec.preemptible:
                    index.any_training.append(n)
                for ns in dict.fromkeys(p.namespace for p in spec.preemptible):
                    index.training.setdefault(ns, []).append(n)
            self._by = index
            self._due.track(list(policies), index.grace)
        return self._by

    # one pass -----------------------------------------------------------------------------------------
    async def run_once(self) -> bool:
        """``--once``: evaluate every policy once; True when nothing failed."""
        policies = list(self.store.policies.values())
        outcomes = await self._pass(policies, lambda cp, part: self.evaluate(cp, "once", prepared=part))
        await self.sweep()
        await self._after_pass([cp.name for cp in policies])
        self.telemetry.tick()
        return all(o.ok for o in outcomes)

    async def _after_pass(self, names: list[str]) -> None:
        if self.after_pass is None or not names:
            return
        try:
            await self.after_pass(names)
        except Exception as exc:  # status is a report: failing to write it never stops scaling
            self.telemetry.errors.labels("status").inc()
            self._log.warning("status_failed", error=_one_line(exc))

    async def prepare(
        self, policies: Iterable[CompiledPolicy], since: float | None = None
    ) -> dict[str, Stamped]:
        """Observe a pass in bulk; each part is stamped with its policy's evaluation count, so that it is
        used only if no evaluation of that policy started (and perhaps acted) since. Policies being
        evaluated right now are left out."""
        idle = [cp for cp in policies if not self._locks.get(cp.name, asyncio.Lock()).locked()]
        if not idle:
            return {}
        stamps = {cp.name: self._runs.get(cp.name, 0) for cp in idle}
        t0 = self.clock.monotonic()
        try:
            async with asyncio.timeout(self.pass_deadline_s):
                found = await self.observer.prepare(idle, since=since)
        except TimeoutError:
            self.telemetry.errors.labels("deadline").inc()
            self._log.warning("deadline_exceeded", phase="prepare", deadline_s=self.pass_deadline_s,
                              policies=len(idle))
            return {}
        except Exception as exc:  # the evaluations then observe one by one
            self.telemetry.errors.labels("observe").inc()
            self._log.warning("prepare_failed", error=_one_line(exc))
            return {}
        self.telemetry.loop_latency.labels("prepare").observe(self.clock.monotonic() - t0)
        return {name: Stamped(stamps[name], part) for name, part in found.items() if name in stamps}

    async def _pass(
        self,
        policies: list[CompiledPolicy],
        evaluate: Callable[[CompiledPolicy, Stamped | None], Awaitable[T]],
    ) -> list[T]:
        """Evaluate a pass chunk by chunk (see the module docstring): a big pass's targets read once, then
        per chunk its signals in one read and its evaluations at once."""
        reused = self._reusable(policies)
        since = None
        if len(policies) - len(reused) > self.pass_chunk:
            since = self.clock.monotonic()
            await self._read_targets([cp for cp in policies if cp.name not in reused])
        out: list[T] = []
        for chunk in _chunks(policies, self.pass_chunk, self._policy_group):
            prepared = await self.prepare([cp for cp in chunk if cp.name not in reused], since)
            self._note_prepared(prepared)
            prepared.update((cp.name, reused[cp.name]) for cp in chunk if cp.name in reused)
            out.extend(await asyncio.gather(*(evaluate(cp, prepared.get(cp.name)) for cp in chunk)))
        return out

    def _reusable(self, policies: list[CompiledPolicy]) -> dict[str, Stamped]:
        """The policies of a pass whose last probe screen stands for a read (one pipeline: what a probe read,
        the periodic evaluation does not read again): a clean screen (every signal read) taken within twice the
        policy's evaluation period (the age up to which probes take a kept target view as current), no
        evaluation of the policy since, its target view still the one kept (no watched change, no read since).
        Not for policies on a ClusterQueue: their bulk read fills the pass ledger. The evaluation decides on it
        and records its history; to act, it reads afresh (``_evaluate``).
        The window is in periods, not probe rounds: when the machine is slow and a round of thousands of
        policies takes longer than a period (measured: 24 s rounds at 0.17 of a core), a pass that read
        everything again would take the CPU the rounds lack and slow them further; a reading grown too old
        for its signal's ``maxAgeSeconds`` is unknown to the core (a hold), as it would be if just read that
        late."""
        now = self.clock.monotonic()
        out: dict[str, Stamped] = {}
        for cp in policies:
            kept = self._kept.get(cp.name)
            if kept is None or _queue_key(cp) is not None:
                continue
            if (
                now - kept.started < 2 * cp.policy.spec.evaluation_period_seconds
                and self._runs.get(cp.name, 0) == kept.stamp
                and self.observer.still_kept(cp.name, kept.prepared)
            ):
                out[cp.name] = Stamped(kept.stamp, dataclasses.replace(kept.prepared, kept=True))
        return out

    async def _read_targets(self, policies: list[CompiledPolicy]) -> None:
        """A big pass's targets in one bulk read; what fails here is read again (and reported) per chunk."""
        try:
            async with asyncio.timeout(self.pass_deadline_s):
                await self.observer.read_targets(policies)
        except Exception as exc:
            self._log.warning("read_targets_failed", error=_one_line(exc), policies=len(policies))

    async def evaluate(
        self,
        cp: CompiledPolicy,
        trigger: str,
        *,
        probe: bool = False,
        prepared: Stamped | None = None,
        urgent: bool = False,
    ) -> Outcome:
        lock = self._locks.setdefault(cp.name, asyncio.Lock())
        # The policy's lock first: evaluations queued behind one of the same policy hold no concurrency slot.
        async with lock, (self._urgent_sem if urgent else self._sem):
            runs = self._runs.get(cp.name, 0)
            self._runs[cp.name] = runs + 1
            part = prepared.part if prepared is not None and prepared.runs == runs else None
            try:
                async with asyncio.timeout(self.pass_deadline_s) as deadline:
                    # The hand-off undoes what it stopped only when this deadline (not a kill) cuts it.
                    self._deadlines[cp.name] = deadline
                    queue = _queue_key(cp)
                    if queue is None:
                        outcome = await self._evaluate(cp, trigger, probe=probe, prepared=part)
                    else:
                        outcome = await self._evaluate_in_group(cp, queue, trigger, probe=probe, prepared=part)
            except TimeoutError:
                # Cut short anywhere (observing, or between two writes): nothing is committed, and the next
                # evaluation starts from what the cluster shows (replicas, the Workloads' annotations).
                self.telemetry.errors.labels("deadline").inc()
                self._log.warning("deadline_exceeded", phase="evaluate", policy=cp.name, trigger=trigger,
                                  deadline_s=self.pass_deadline_s)
                outcome = Outcome(cp.name, error=f"deadline: evaluation exceeded {self.pass_deadline_s:g}s")
            if not probe or outcome.committed:
                self.outcomes[cp.name] = outcome
            return outcome

    async def _evaluate_in_group(
        self, cp: CompiledPolicy, queue: _Queue, trigger: str, *, probe: bool, prepared: Prepared | Exception | None
    ) -> Outcome:
        """Policies sharing a ClusterQueue, or the ClusterQueues of one cohort, decide one at a time, each on what
        the last one did. The cohort is known only once the ClusterQueue's quota has been read: an evaluation
        that finds it holds the wrong lock (the first one, or after the ClusterQueue moved) decides nothing, and
        observes again under the right one. At most ``RELOCKS`` times: a ClusterQueue moved back and forth
        faster than that decides under the lock of its last read."""
        for attempt in range(RELOCKS + 1):
            group = self._group(queue)
            async with self._queue_locks.setdefault(group, asyncio.Lock()):
                try:
                    return await self._evaluate(
                        cp, trigger, probe=probe, prepared=prepared, group=group if attempt < RELOCKS else None
                    )
                except _Relock:
                    continue
        raise AssertionError("unreachable: the last attempt never relocks")

    def _group(self, queue: _Queue) -> _Group:
        """The lock and account ``queue``'s policies share: its cohort's, else its own."""
        cohort = self._cohorts.get(queue.cluster_queue, "")
        if cohort:
            return _Group("cohort", cohort, queue.resource)
        return _Group("clusterqueue", queue.cluster_queue, queue.resource)

    def _policy_group(self, cp: CompiledPolicy) -> _Group | None:
        queue = _queue_key(cp)
        return None if queue is None else self._group(queue)

    # held Workloads ------------------------------------------------------------------------------------
    async def sweep(self) -> int:
        """Find every Workload this controller holds down; resume, once it fits, each that no policy covers
        any more. At start-up, after every change of the policy set, and every ``sweep_s``. Returns how many
        were resumed."""
        if self.keeper is None or self.dry_run or not self.leader.holds():
            return 0
        self._swept_policies = frozenset(self.store.policies)
        self._next_sweep = self.clock.monotonic() + self.sweep_s
        try:
            self.held = await self.keeper.held(list(self.store.policies.values()))
        except Exception as exc:
            self.telemetry.errors.labels("sweep").inc()
            self._log.warning("sweep_failed", error=_one_line(exc))
            return 0
        uncovered: dict[tuple[str, str], list[Held]] = {}
        for h in self.held:
            if not h.covered and h.cluster_queue and h.resource:
                uncovered.setdefault((h.cluster_queue, h.resource), []).append(h)
        resumed = 0
        for (cq, res), hs in sorted(uncovered.items()):
            # Serving on this ClusterQueue waits first: the policies that share it go one at a time with us.
            async with self._queue_locks.setdefault(self._group(_Queue(cq, res)), asyncio.Lock()):
                try:
                    quota = await self.keeper.quota(CapacitySpec(cluster_queue=cq, resource=res, per_replica=1))
                except Exception as exc:
                    self.telemetry.errors.labels("sweep").inc()
                    self._log.warning("sweep_failed", cluster_queue=cq, error=_one_line(exc))
                    continue
                self._cohorts[cq] = quota.cohort  # a cohort learned here is locked under from the next sweep on
                pending = self._pending_on(_Queue(cq, res)) + max(h.waiting for h in hs)
                quota = self._lent(_Queue(cq, res), dataclasses.replace(quota, pending=pending))
                by_uid = {h.workload.uid: h for h in hs}
                for d in arbitration.resume_uncovered(
                    held=[h.workload for h in hs], quota=quota, claimed=hs[0].claimed
                ):
                    try:
                        done = await self.keeper.resume_held(by_uid[d.workload.uid], d.message)
                    except Exception as exc:
                        self.telemetry.errors.labels("act").inc()
                        self._log.warning("resume_failed", workload=d.workload.key, error=_one_line(exc))
                        continue
                    if done:
                        resumed += 1
                        self._log.info("decision", reason=d.reason.value, message=d.message,
                                       workload=d.workload.key, action=d.action.value, dry_run=False)
                        if self.events is not None:
                            w = d.workload
                            ref = ObjectRef("kueue.x-k8s.io/v1beta1", "Workload", w.namespace, w.name, w.uid)
                            await self.events.record(ref, type_="Normal", reason=d.reason.value, message=d.message,
                                                     action="reactivate")
        return resumed

    def _sweep_due(self) -> bool:
        return self.keeper is not None and (
            self.clock.monotonic() >= self._next_sweep or self._swept_policies != frozenset(self.store.policies)
        )

    # the pass ledger ----------------------------------------------------------------------------------
    def note_in_flight(self, cp: CompiledPolicy, statuses: Mapping[str, ReplicaStatus]) -> None:
        """Record what ``cp``'s targets (by key; every pool of a ``disaggregated`` one) asked for and Kueue has not
        admitted yet (``arbitration.asked_by``, the rule the simulator's pools follow too)."""
        queue = _queue_key(cp)
        if queue is None:
            return
        self._asked.setdefault(queue, {}).update(arbitration.asked_by(cp.policy.spec, statuses))

    def _note_prepared(self, prepared: dict[str, Stamped]) -> None:
        """A pass's bulk read of the targets fills the ledger before anyone decides (after a restart too)."""
        for name, stamped in prepared.items():
            cp = self.store.policies.get(name)
            part = stamped.part
            if cp is not None and isinstance(part, Prepared):
                self.note_in_flight(cp, {cp.policy.spec.target.ref().key: part.replicas})

    def _with_pending(self, cp: CompiledPolicy, obs: Observation) -> Observation:
        """``obs`` with its own gated replicas recorded, the other targets' on its ClusterQueue as pending, and
        what the other ClusterQueues of its cohort ask for taken from what the cohort lends."""
        queue = _queue_key(cp)
        if queue is None or obs.quota is None:
            return obs
        self.note_in_flight(cp, {obs.target.key: obs.replicas, **obs.members})
        mine = arbitration.ledger_keys(cp.policy.spec)
        quota = self._lent(queue, arbitration.in_pass(obs.quota, mine=mine, ledger=self._ledger(queue)))
        return dataclasses.replace(obs, quota=quota)

    def _learn(self, queue: _Queue, obs: Observation) -> None:
        """Remember ``queue``'s cohort from its quota read (the only place the loop learns it)."""
        if obs.quota is not None:
            self._cohorts[queue.cluster_queue] = obs.quota.cohort

    def _lent(self, queue: _Queue, quota: QuotaStatus) -> QuotaStatus:
        """``quota`` with what its cohort lends less what serving asked for on the cohort's other ClusterQueues
        (the ledger's, per ClusterQueue: ``arbitration.lent``)."""
        if not quota.cohort:
            return quota
        others = {m.name: self._pending_on(_Queue(m.name, queue.resource)) for m in quota.members}
        others.pop(queue.cluster_queue, None)
        return arbitration.lent(quota, others)

    def _ledger(self, queue: tuple[str, str]) -> dict[str, AskedReplicas]:
        """The pass ledger of ``queue``, over the targets of current policies."""
        live = {
            key for other in self.store.policies.values() if _queue_key(other) == queue
            for key in arbitration.ledger_keys(other.policy.spec)
        }
        ledger = self._asked.get(queue, {})
        for key in [k for k in ledger if k not in live]:
            ledger.pop(key)  # its policy is gone: nobody will update it again
        return ledger

    def _pending_on(self, queue: tuple[str, str]) -> float:
        """Serving chips asked for and not admitted on ``queue``, over the targets of current policies."""
        return float(sum(a.gated * a.per_replica for a in self._ledger(queue).values()))

    async def _evaluate(
        self, cp: CompiledPolicy, trigger: str, *, probe: bool, prepared: Prepared | Exception | None = None,
        group: _Group | None = None,
    ) -> Outcome:
        """One evaluation. ``group``: the lock held (``_evaluate_in_group``); if the quota read shows the policy
        belongs under another, ``_Relock`` is raised before anything is decided."""
        t0 = self.clock.monotonic()
        log = self._log.bind(policy=cp.name, target=cp.policy.spec.target.ref().key, trigger=trigger)
        try:
            obs = await self.observer.observe(cp, prepared)
        except Exception as exc:  # a failed observation holds: nothing is decided on partial data
            self.telemetry.errors.labels("observe").inc()
            log.warning("observe_failed", error=_one_line(exc))
            return Outcome(cp.name, error=f"observe: {_one_line(exc)}")
        queue = _queue_key(cp)
        if queue is not None:
            self._learn(queue, obs)
            if group is not None and self._group(queue) != group:
                raise _Relock
        obs = self._with_pending(cp, obs)
        t1 = self.clock.monotonic()
        state = self.states.get(cp.name, PolicyState())
        now = self.clock.wall()
        try:
            decisions, new_state = cp.decide(obs, state, now)
        except Exception as exc:  # a bug in a policy type must not take the other policies down
            self.telemetry.errors.labels("decide").inc()
            log.error("decide_failed", error=_one_line(exc))
            return Outcome(cp.name, error=f"decide: {_one_line(exc)}")
        t2 = self.clock.monotonic()
        if isinstance(prepared, Prepared) and prepared.kept and _changes(decisions):
            # Decided on a probe's screen (the target as last kept): what is written is decided on what the
            # cluster shows now, so observe afresh and decide again.
            return await self._evaluate(cp, trigger, probe=probe, prepared=None, group=group)
        if probe and not _changes(decisions):
            log.debug("probe", reasons=[d.reason.value for d in decisions])
            return Outcome(cp.name, tuple(decisions), observation=obs)
        if probe:
            self.telemetry.triggers.labels("signal").inc()
            log = log.bind(trigger="signal")
        self._report(cp, obs, decisions, log)
        acted: list[str] = []
        error: str | None = None
        if self.dry_run:
            for d in decisions:
                if _is_action(d):
                    acted.append(_action_name(d))
                    self.telemetry.actions.labels(cp.name, _action_name(d), "dry_run").inc()
        else:
            error = await self._act(cp, decisions, acted, log, obs.replicas.gated, obs)
        refused = error is not None and " refused: " in error  # _act's form for "this target is not ours"
        committed = error is None
        if committed:
            self.states[cp.name] = new_state
            # Actions told their Events as they were done (above); dry run tells all of them here.
            await self.emit_events(cp, decisions if self.dry_run else [d for d in decisions if not _is_action(d)])
        self._child(self.telemetry.loop_latency, "observe").observe(t1 - t0)
        self._child(self.telemetry.loop_latency, "decide").observe(t2 - t1)
        t3 = self.clock.monotonic()
        self._child(self.telemetry.loop_latency, "act").observe(t3 - t2)
        self._child(self.telemetry.loop_latency, "total").observe(t3 - t0)
        return Outcome(cp.name, tuple(decisions), tuple(acted), error, committed, obs, refused)

    async def _act(
        self, cp: CompiledPolicy, decisions: list[Decision], acted: list[str], log: Any, gated: int = 0,
        obs: Observation | None = None,
    ) -> str | None:
        """Plan, check, commit, undo (the hand-off; numbered as in docs/controller.md):

        1. plan: the core's order, deactivations, the scale, reactivations (``arbitration.in_apply_order``);
        2. check: when training is to be stopped for a scale, the scale is first sent as a server-side dry
           run; if it would be refused (another owner, RBAC, admission), nothing is written at all;
        3. commit, one step at a time, each step's Event emitted as soon as it is done;
        4. undo: if a deactivation or the scale then fails, the Workloads deactivated for it in this pass are
           reactivated at once (their Events say so), so no training stays stopped for a scale that did not
           happen. A failed reactivation is left to the next pass (the Workload keeps our mark), and a
           Workload stopped in an earlier pass is resumed when a scale-up is refused (``_resume_held``):
           serving cannot grow, so the chips it was stopped for serve nobody.

        A policy with several targets (type ``disaggregated``) has one scale per target: all are checked by
        dry run first (step 2, even without training to stop), shrinking ones are written first, and when one
        fails, those already written in this pass are set back to their previous count (``_revert``, a
        ``Reverted`` Warning on each) before the training is resumed: the pools are left at counts the policy
        decided together, or at the counts they had. The state is not committed; the next pass decides again
        from what the cluster then shows (a revert that itself failed is told and shows up there).
        """
        ordered = [d for d in arbitration.in_apply_order(decisions) if not isinstance(d, ScaleDecision) or d.changes]
        scales = [d for d in ordered if isinstance(d, ScaleDecision)]
        stopping = [d for d in ordered if isinstance(d, TrainingDecision) and d.action is TrainingAction.DEACTIVATE]
        # Several scales (a policy with several targets) are checked together, so training is never stopped for
        # a pair of which one write would be refused.
        for scale in scales if stopping or len(scales) > 1 else ():
            if not self.leader.holds():
                self.telemetry.actions.labels(cp.name, "check", "not_leader").inc()
                return "lost leadership before acting"
            try:
                await self.actuator.check_scale(cp, scale)
            except Exception as exc:
                refused = isinstance(exc, self.actuator.refusals)
                self.telemetry.actions.labels(cp.name, "check", "refused" if refused else "error").inc()
                log.warning("handoff_check_failed", error=_one_line(exc))
                what = f"not stopping {', '.join(d.workload.key for d in stopping)}" if stopping else "not scaling"
                message = (
                    f"{what}: the scale of {scale.target.key} to {scale.desired} would not be accepted "
                    f"({_one_line(exc)})"
                )
                await self._event(cp, scale, "Warning", "HandoffCheckFailed", message, "Check")
                if refused or isinstance(exc, _LASTING):
                    await self._resume_held(cp, obs, scales, set(), f"the scale would be refused ({_one_line(exc)})",
                                            acted, log)
                return f"check refused: {_one_line(exc)}" if refused else f"check failed: {_one_line(exc)}"
        stopped: list[TrainingDecision] = []
        first: ScaleDecision | None = scales[0] if scales else None
        try:
            return await self._commit(cp, ordered, stopped, acted, log, gated, obs)
        except asyncio.CancelledError:
            # Cut between steps by the pass deadline: nothing half-applied is left behind. Cut during the scale
            # write, whether it was stored is unknown: the target is read again. Stored: the hand-off is finished
            # (the stop stands for a scale that happened). Not stored: what was stopped for it is resumed before
            # the cancellation goes on; the next pass plans again from the cluster. Not once the lease may be
            # another replica's (its sweep resumes what is left), and not when the task is cancelled from outside
            # (shutdown, as a kill): a restarted controller counts the stopped Workload as freeing and finishes.
            deadline = self._deadlines.get(cp.name)
            if stopped and deadline is not None and deadline.expired() and self.leader.holds():
                if first is not None and await self._stored(cp, first):
                    log.warning("handoff_cut", workloads=[d.workload.key for d in stopped], scale="stored")
                else:
                    log.warning("handoff_cut", workloads=[d.workload.key for d in stopped], scale="not stored")
                    await self._undo(cp, stopped, "the pass was cut short before the scale was written", acted, log)
            raise

    async def _resume_held(
        self, cp: CompiledPolicy, obs: Observation | None, scales: list[ScaleDecision], skip: set[str], why: str,
        acted: list[str], log: Any,
    ) -> None:
        """A scale-up refused (check or write): Workloads this policy stopped in earlier passes for serving
        to grow are resumed by transition 3's rule at the current count (never while a serving replica waits
        for admission, only what fits), so none stays stopped while the scale it was stopped for keeps being
        refused (its undo failed, the controller restarted, an HPA or RBAC change came since). ``skip``: the
        Workloads this pass stopped (its undo resumes them) or was about to touch."""
        growing = [d for d in scales if d.desired > d.current]
        if obs is None or not growing or not any(
            w.deactivated_by_us and not w.active and w.key not in skip for w in obs.training
        ):
            return
        current = obs.replicas.spec
        plan = arbitration.plan(spec=cp.policy.spec, observation=obs, desired=current, now=self.clock.wall())
        resume = [
            dataclasses.replace(d, message=f"{d.message}; serving stays at {current}: {why}")
            for d in plan.training if d.action is TrainingAction.REACTIVATE and d.workload.key not in skip
        ]
        for d in resume:
            try:
                await self.actuator.training(cp, d)
            except Exception as exc:  # the mark stays on the Workload: the next refusal tries again
                self.telemetry.actions.labels(cp.name, "reactivate", "error").inc()
                log.warning("resume_failed", workload=d.workload.key, error=_one_line(exc))
                await self._event(cp, d, "Warning", "ActionFailed", f"reactivate failed: {_one_line(exc)}",
                                  "reactivate")
                continue
            acted.append("reactivate")
            self.telemetry.actions.labels(cp.name, "reactivate", "ok").inc()
            await self._event(cp, d, "Normal", d.reason.value, d.message, "reactivate")

    async def _stored(self, cp: CompiledPolicy, scale: ScaleDecision) -> bool:
        """Whether the target now has the count ``scale`` asked for (unknown: no)."""
        try:
            obs = await self.observer.observe(cp)
        except Exception:
            return False
        return obs.replicas.spec == scale.desired

    async def _commit(
        self, cp: CompiledPolicy, ordered: list[Decision], stopped: list[TrainingDecision], acted: list[str],
        log: Any, gated: int, obs: Observation | None = None,
    ) -> str | None:
        """Step 3 of ``_act``: the writes in order; ``stopped`` holds the deactivations not yet followed by the
        scale (what step 4 would undo), ``written`` the scales already written (a policy with several targets
        sets them back when a later one fails)."""
        scales = [d for d in ordered if isinstance(d, ScaleDecision)]
        touched = {d.workload.key for d in ordered if isinstance(d, TrainingDecision)}
        written: list[ScaleDecision] = []
        for d in ordered:
            name = _action_name(d)
            if not self.leader.holds():
                # Losing the lease stops acting at once: the rest of this plan is the next leader's (which
                # finds our marks on the Workloads; see the start-up sweep).
                self.telemetry.actions.labels(cp.name, name, "not_leader").inc()
                log.warning("not_leader", action=name)
                return "lost leadership before acting"
            try:
                # Fencing: a write still running when the lease may have passed to another replica is cut.
                async with asyncio.timeout(_bounded(self.leader.remaining())):
                    if isinstance(d, ScaleDecision):
                        await self.actuator.scale(cp, d)
                    else:
                        await self.actuator.training(cp, d)
            except self.actuator.refusals as exc:
                self.telemetry.actions.labels(cp.name, name, "refused").inc()
                log.warning("action_refused", action=name, error=_one_line(exc))
                await self._event(cp, d, "Warning", "OwnershipConflict", _one_line(exc), "Refused")
                await self._revert(cp, written, f"{_about(d)} was refused: {_one_line(exc)}", acted, log)
                await self._undo(cp, stopped, f"{name} was refused: {_one_line(exc)}", acted, log)
                if isinstance(d, ScaleDecision):
                    await self._resume_held(cp, obs, scales, touched, f"scale refused: {_one_line(exc)}", acted, log)
                return f"{name} refused: {_one_line(exc)}"
            except Exception as exc:
                if isinstance(exc, TimeoutError) and not self.leader.holds():
                    # Cut at the fence: the lease may be another replica's now; not even an Event is ours.
                    self.telemetry.actions.labels(cp.name, name, "not_leader").inc()
                    log.warning("not_leader", action=name, why="the write was cut at the lease fence")
                    return f"lost leadership during {name}"
                self.telemetry.actions.labels(cp.name, name, "error").inc()
                self.telemetry.errors.labels("act").inc()
                log.warning("action_failed", action=name, error=_one_line(exc))
                await self._event(cp, d, "Warning", "ActionFailed", f"{name} failed: {_one_line(exc)}", name)
                await self._revert(cp, written, f"{_about(d)} failed: {_one_line(exc)}", acted, log)
                await self._undo(cp, stopped, f"{name} failed: {_one_line(exc)}", acted, log)
                if isinstance(d, ScaleDecision) and isinstance(exc, _LASTING):
                    await self._resume_held(cp, obs, scales, touched, f"scale refused: {_one_line(exc)}", acted, log)
                return f"{name} failed: {_one_line(exc)}"
            acted.append(name)
            self.telemetry.actions.labels(cp.name, name, "ok").inc()
            if _eventful(d):
                type_: EventType = "Warning" if d.reason in WARNING_REASONS else "Normal"
                await self._event(cp, d, type_, d.reason.value, d.message, name)
            if isinstance(d, TrainingDecision) and d.action is TrainingAction.DEACTIVATE:
                stopped.append(d)
            if isinstance(d, ScaleDecision):
                written.append(d)
            if isinstance(d, ScaleDecision) and len(written) == len(scales):
                stopped.clear()  # every scale went through: the stopped Workloads' chips are now serving's
                # New replicas are gated until Kueue admits them; a scale-down removes gated ones first. Every
                # target written (each pool of a ``disaggregated`` policy), from its own gated count.
                self.note_in_flight(cp, _after_scales(cp, written, gated, obs))
        return None

    async def _revert(
        self, cp: CompiledPolicy, written: list[ScaleDecision], why: str, acted: list[str], log: Any
    ) -> None:
        """Set back, in this pass, the targets already scaled for a plan whose next scale failed: a policy
        with several targets never leaves its pools in a pair of counts it did not decide. A failed revert is
        told (Warning) and left to the next pass, which decides from the counts the cluster then has (the
        state is not committed)."""
        for d in reversed(written):
            back = ScaleDecision(
                d.target, d.desired, d.current, Reason.STEADY,
                f"setting {d.target.key} back {d.desired}→{d.current}: its pair was not applied ({why})",
                d.signals,
            )
            try:
                await self.actuator.scale(cp, back)
            except Exception as exc:
                self.telemetry.actions.labels(cp.name, "revert", "error").inc()
                log.warning("revert_failed", target=d.target.key, error=_one_line(exc))
                await self._event(cp, back, "Warning", "ActionFailed",
                                  f"revert of {d.target.key} to {d.current} failed: {_one_line(exc)}", "revert")
                continue
            acted.append("revert")
            self.telemetry.actions.labels(cp.name, "revert", "ok").inc()
            await self._event(cp, back, "Warning", "Reverted", back.message, "revert")

    async def _undo(
        self, cp: CompiledPolicy, stopped: list[TrainingDecision], why: str, acted: list[str], log: Any
    ) -> None:
        """Resume, in this pass, the Workloads stopped for a step that then failed."""
        for d in reversed(stopped):
            undo = TrainingDecision(
                workload=d.workload, action=TrainingAction.REACTIVATE, reason=Reason.REACTIVATE_TRAINING,
                message=(
                    f"reactivating {d.workload.key} at once: it was stopped for a scale that did not happen ({why})"
                ),
            )
            try:
                await self.actuator.training(cp, undo)
            except Exception as exc:  # the mark stays on the Workload: the next pass resumes it
                self.telemetry.actions.labels(cp.name, "undo", "error").inc()
                log.warning("undo_failed", workload=d.workload.key, error=_one_line(exc))
                await self._event(cp, undo, "Warning", "ActionFailed", f"undo failed: {_one_line(exc)}", "undo")
                continue
            acted.append("undo")
            self.telemetry.actions.labels(cp.name, "undo", "ok").inc()
            await self._event(cp, undo, "Normal", undo.reason.value, undo.message, "reactivate")

    def _report(
        self, cp: CompiledPolicy, obs: Observation, decisions: list[Decision], log: Any | None, trigger: str = ""
    ) -> None:
        """Metrics and a log line per decision. ``log`` None: bound here, only if a line is written (at
        ``warning`` and above nothing is)."""
        name = cp.name
        child = self._child
        for d in decisions:
            child(self.telemetry.decisions, name, d.reason.value).inc()
            if isinstance(d, ScaleDecision):
                child(self.telemetry.desired, name).set(d.desired)
                child(self.telemetry.current, name).set(d.current)
                for sig in d.signals.values():
                    if sig.age_s is not None:
                        child(self.telemetry.signal_age, name, sig.name).set(sig.age_s)
                    if sig.ok and sig.value is not None:
                        child(self.telemetry.signal_value, name, sig.name).set(sig.value)
                    else:  # unknown is never a number on a dashboard (it is never idle either)
                        self._children.pop((id(self.telemetry.signal_value), name, sig.name), None)
                        with contextlib.suppress(KeyError):
                            self.telemetry.signal_value.remove(name, sig.name)
            if log is None:
                if not self._log.is_enabled_for(logging.INFO):
                    continue
                log = self._log.bind(policy=name, target=cp.policy.spec.target.ref().key, trigger=trigger)
            if isinstance(d, ScaleDecision):
                log.info("decision", reason=d.reason.value, message=d.message, current=d.current,
                         desired=d.desired, dry_run=self.dry_run,
                         signals={n: s.value for n, s in d.signals.items()})
            else:
                log.info("decision", reason=d.reason.value, message=d.message, workload=d.workload.key,
                         action=d.action.value, dry_run=self.dry_run)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus-client's ``labels`` costs microseconds a call (label
        checks, a lock), and every evaluation sets about ten. A child is dropped here when it is removed from
        its metric (``signal_value`` while unknown), so that a later value makes it again."""
        key = (id(metric), *labels)
        got = self._children.get(key)
        if got is None:
            got = self._children[key] = metric.labels(*labels)
        return got

    async def _event(
        self, cp: CompiledPolicy, d: Decision, type_: EventType, reason: str, message: str, action: str
    ) -> None:
        if self.events is None:
            return
        await self.events.record(_regarding(cp, d), type_=type_, reason=reason, message=message, action=action)

    async def emit_events(self, cp: CompiledPolicy, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            if not _eventful(d):
                continue
            type_: EventType = "Warning" if d.reason in WARNING_REASONS else "Normal"
            msg = f"(dry run, nothing changed) {d.message}" if self.dry_run else d.message
            await self._event(cp, d, type_, d.reason.value, msg, _action_name(d))

    # the long-running loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Evaluate on periods, triggers and probes while leading; until cancelled."""
        probe_task = asyncio.create_task(self._probe_forever()) if self.fast_poll_s > 0 else None
        try:
            while True:
                try:
                    async with asyncio.timeout(1.0):
                        await self.leader.wait_leading()
                except TimeoutError:
                    self.telemetry.tick()  # a standby's loop is alive: it waits, as it should
                    continue
                now = self.clock.monotonic()
                policies = self.store.policies
                self._index()  # the due times follow the policy set
                gone = self._due.strays()
                for name in gone:
                    self._due.pop(name)
                    self.states.pop(name, None)
                if gone:
                    self.observer.retire(gone)
                # Due within a millisecond counts as due: a clock of finite resolution (looptime's is 1 µs) may
                # otherwise never pass 45.787693000000004 after waking at 45.787693, and the loop would spin.
                due = self.due_now(now, probing=probe_task is not None)
                pending = {n: w for n, w in self._pending.items() if n in policies}
                self._pending.clear()
                batch = dict.fromkeys(due, "period") | pending
                if self._sweep_due():
                    await self.sweep()
                if batch:
                    self._count_full(batch, probing=probe_task is not None)
                    first = any(n not in self._runs for n in batch)
                    await self._pass([policies[n] for n in batch], functools.partial(self._run_batched, batch))
                    await self._after_pass(list(batch))
                    if first and self.after_first is not None:
                        self.after_first()
                self.telemetry.tick()
                self._wake.clear()
                if self._pending:
                    continue
                next_due = self.next_due(now, probing=probe_task is not None)
                if self.keeper is not None:
                    next_due = min(next_due, self._next_sweep)
                timeout = max(0.0, min(next_due - self.clock.monotonic(), 1.0))
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
                # arrives as the wake-up fires, and the loop would then never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
        finally:
            refreshing = [t for t in (self._refreshing, self._resyncing) if t is not None]
            for t in [*([probe_task] if probe_task is not None else []), *list(self._escalations), *refreshing]:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    def due_now(self, now: float, *, probing: bool) -> list[str]:
        """The policies the periodic pass evaluates now, in the policy set's order: never evaluated yet, or due.
        A policy probes screen is left to them for its grace (one period) past its due time: the first clean
        screen after it is due stands as its periodic evaluation (``_stand``, one ``decide`` on one read); the pass
        takes over only when no screen did (rounds stalled, a signal failed, or every screen would act).
        Answered from heaps of due times (``DueTimes``), not a walk over every policy at each wake."""
        self._index()
        return self._due.due(now, DUE_SLACK_S, graced=probing)

    def next_due(self, now: float, *, probing: bool) -> float:
        """When ``due_now`` next finds a policy (``now`` + 1 s when none is scheduled)."""
        self._index()
        return self._due.next(now + 1.0, graced=probing)

    def _count_full(self, batch: Mapping[str, str], *, probing: bool) -> None:
        """Count a pass's evaluations in ``autoscaler_full_evaluations`` by why each runs (``_why_full``)."""
        counts: dict[str, int] = {}
        grace = self._index().grace if probing else {}
        for name, trigger in batch.items():
            why = self._why_full(name, trigger, name in grace)
            counts[why] = counts.get(why, 0) + 1
        for why, n in counts.items():
            self._child(self.telemetry.full_evaluations, why).inc(n)

    def _why_full(self, name: str, trigger: str, screened: bool) -> str:
        """Why the periodic pass evaluates this policy in full: ``first``; its trigger (``watch``, ``reload``);
        ``period`` for a policy probes do not screen; for one they do, why no screen stood for it while it was
        due (``_missed``), or ``not_screened`` (no round reached it while it was due: rounds longer than its
        grace, or it was being evaluated)."""
        if name not in self._runs:
            return "first"
        if trigger != "period":
            return trigger
        if not screened:
            return "period"
        return self._misses.pop(name, "not_screened")

    def _missed(self, name: str, why: str) -> None:
        """A due policy's screen did not stand as its periodic evaluation, for this reason (``_why_full``)."""
        self._misses[name] = why

    def _run_batched(
        self, batch: dict[str, str], cp: CompiledPolicy, prepared: Stamped | None
    ) -> Awaitable[Outcome]:
        return self._run_one(cp, batch[cp.name], prepared)

    async def _run_one(
        self, cp: CompiledPolicy, why: str, prepared: Stamped | None = None
    ) -> Outcome:
        self._child(self.telemetry.triggers, why if why in ("period", "watch", "reload") else "other").inc()
        outcome = await self.evaluate(cp, why, prepared=prepared)
        self._due[cp.name] = self.clock.monotonic() + cp.policy.spec.evaluation_period_seconds
        return outcome

    async def _probe_forever(self) -> None:
        start = self.clock.monotonic()
        while True:
            # Rounds start every fast_poll_s; one that ran longer is followed at once, never caught up on.
            start = max(start + self.fast_poll_s, self.clock.monotonic())
            await asyncio.sleep(max(0.0, start - self.clock.monotonic()))
            if not self.leader.holds():
                continue
            await self.probe_round()

    async def probe_round(self) -> None:
        """Screen every probed policy once (in chunks, see the module docstring); evaluate at once those whose
        decision would change. Returns when every chunk was screened (the evaluations it started run on)."""
        # Every fast policy evaluated once already (its first evaluation reads everything), due soon or not:
        # its periodic evaluation decides on this round's screen instead of reading again (``_reusable``).
        locks = self._locks
        index = self._index()
        probes = [
            cp for cp in index.fast
            if cp.name in self._due and not (cp.name in locks and locks[cp.name].locked())
        ]
        if self._pruned_for is not index.policies:
            # What is kept per screened policy goes with the policy, once per policy set (not a walk each round):
            # only a round's chunks write it, and the previous round's were all done when this one started.
            live = index.policies
            for gone in [n for n in self._screened if n not in live]:
                self._screened.pop(gone)
            for gone in [n for n in self._kept if n not in live]:
                self._kept.pop(gone)
            for gone in [n for n in self._misses if n not in live]:
                self._misses.pop(gone)
            self._pruned_for = live
        # Least recently screened first (never screened: before all): every policy waits one round between two
        # screens, however long rounds take. (Signals that moved lately went first before: when every signal
        # moves, as real queues do, that reversed the order each round, and a policy screened first in one
        # round waited almost two rounds for its next screen.)
        screened = self._screened
        probes.sort(key=lambda cp: screened.get(cp.name, -math.inf))
        unkept = self.observer.unkept(probes)
        if len(unkept) > 1:
            # Views age out together (read together by a pass): read them in one bulk read, not chunk by chunk.
            # Only views nobody read ahead of time (``_refresh_ahead``), or whose read failed, are read here.
            await self._read_targets(unkept)
        self._refresh_ahead(probes)
        self._resync_views(probes)
        # Every chunk judges its views' age at the round's start (``Observer.probe``'s ``at``).
        at = self.clock.monotonic()
        slots = asyncio.Semaphore(self.probe_parallel)
        self._yield_left = self.yield_s

        async def chunk(part: list[CompiledPolicy]) -> None:
            async with slots:
                await self._probe_chunk(part, at)

        await asyncio.gather(*(chunk(part) for part in _chunks(probes, self.probe_chunk, ungrouped=not index.queued)))
        if self.after_round is not None:
            self.after_round()

    def _refresh_ahead(self, probes: list[CompiledPolicy]) -> None:
        """Start reading again, in the background, the target views older than ``refresh_periods`` of their
        policy's periods (one bulk read at a time): they are read before probes stop using them, and the round
        screens meanwhile on the views it keeps (still younger than two periods)."""
        if self._refreshing is not None and not self._refreshing.done():
            return
        aging = self.observer.unkept(probes, periods=self.refresh_periods)
        if len(aging) > 1:
            # Take along every view past half that age: a slice of a namespace's targets costs its whole list
            # anyway (``targets.LISTED_PER_READ``), and views read in separate groups stayed separate, each group
            # a list of all 5,000 Deployments of its own (4-20 lists a minute, 2026-12-07 05:04 UTC). Read
            # together, they age together again: one list per ``refresh_periods``. Nothing is read later than
            # before (the views past ``refresh_periods`` are read now, as they were).
            aging = self.observer.unkept(probes, periods=self.refresh_periods / 2)
            self._refreshing = asyncio.create_task(self._read_targets(aging), name="refresh target views")

    def _resync_views(self, probes: list[CompiledPolicy]) -> None:
        """Start reading again, in the background, this round's share of the views a live watch vouches for
        (``Observer.resync_due``: the oldest, each within ``viewResyncSeconds``), one re-read at a time; and report
        the vouched views an earlier re-read found wrong (``Observer.drifted``): a metric and a warning naming the
        policy and what differed. Such a view is a bug in how views are kept (a watch said it was current); the
        re-read already replaced it."""
        for drift in self.observer.drifted():
            self.telemetry.view_drift.inc()
            self._log.warning(
                "view_drift", policy=drift.policy, differed=drift.differences,
                kept_age_s=round(drift.reread_at - drift.kept_read_at, 1),
                message=f"the target view kept for {drift.policy} (vouched for by its watch, read "
                        f"{drift.reread_at - drift.kept_read_at:.0f} s before) differed from the target: "
                        + "; ".join(f"{k} {v}" for k, v in drift.differences.items()),
            )
        if self._resyncing is not None and not self._resyncing.done():
            return  # its share waits for the next round (the time since the last one is owed)
        due = self.observer.resync_due(probes)
        if due:
            self.telemetry.view_resyncs.inc(len(due))
            self._resyncing = asyncio.create_task(self._resync(due), name="re-read vouched target views")

    async def _resync(self, policies: list[CompiledPolicy]) -> None:
        try:
            async with asyncio.timeout(self.pass_deadline_s):
                await self.observer.resync(policies)
        except Exception as exc:  # what failed is read again by age (a failed read drops its view)
            self._log.warning("view_resync_failed", error=_one_line(exc), policies=len(policies))

    async def _yield_to_escalations(self) -> None:
        """Wait while evaluations escalated by screens run, up to ``yield_s`` after the oldest of them started:
        the round's next scrapes and screens then do not stand between their reads, ``decide`` and write in the
        event loop (a crossing waited behind the round's work; now the round waits behind the crossing)."""
        if not self._escalations:
            return
        now = self.clock.monotonic()
        left = min(min(self._escalations.values()) + self.yield_s - now, self._yield_left)
        if left <= 0:
            return
        loop = asyncio.get_running_loop()
        t0 = loop.time()  # the timeout's own clock (``self.clock`` may be a test's)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await self._calm.wait()
        self._yield_left -= loop.time() - t0

    async def _probe_chunk(self, chunk: list[CompiledPolicy], at: float | None = None) -> None:
        await self._yield_to_escalations()
        self.screens += len(chunk)
        stamps = {cp.name: self._runs.get(cp.name, 0) for cp in chunk}
        started = self.clock.monotonic()
        for cp in chunk:
            self._screened[cp.name] = started
        try:
            async with asyncio.timeout(self.pass_deadline_s):
                found = await self.observer.probe(chunk, at=at)
        except TimeoutError:
            self.telemetry.errors.labels("deadline").inc()
            self._log.warning("deadline_exceeded", phase="probe", deadline_s=self.pass_deadline_s, policies=len(chunk))
            return
        except Exception as exc:  # the policies' own periods still evaluate them
            self.telemetry.errors.labels("observe").inc()
            self._log.warning("probe_failed", error=_one_line(exc))
            return
        await self._yield_to_escalations()
        stood: list[str] = []
        due = self._due
        for cp in chunk:
            name = cp.name
            part = found.get(name)
            if self._runs.get(name, 0) != stamps[name]:
                self._kept.pop(name, None)
                continue  # evaluated since: its state moved on
            is_due = due.get(name, math.inf) <= started + DUE_SLACK_S
            clean = isinstance(part, Prepared) and all(r.error is None for r in part.signals.values())
            if not isinstance(part, Prepared) or not clean:
                # Unreadable, or a signal failed: a periodic evaluation reads it itself and reports why, at once
                # when it is due (it is not left to a screen that cannot stand for it).
                self._kept.pop(name, None)
                if is_due:
                    self._missed(name, "signal_failed" if isinstance(part, Prepared) else "unreadable")
                    self.trigger([name], "period")
                if not isinstance(part, Prepared):
                    continue
            else:
                self._kept[name] = _Kept(started, stamps[name], part)
            if clean and not is_due and await self._quiet(cp, part):
                continue  # the type says this reading keeps the count, whatever the history: no decide
            screen = await self._screen(cp, part)
            if screen is None:
                if is_due:
                    self._missed(name, "decide_failed")
                continue
            if _changes(screen.decisions):
                if is_due:
                    self._missed(name, "would_act")
                self._escalate(cp)
            elif clean and is_due and _queue_key(cp) is None and await self._stand(cp, stamps[name], part, screen):
                stood.append(name)
        await self._after_pass(stood)

    async def _screen(self, cp: CompiledPolicy, part: Prepared) -> _Screen | None:
        """``decide`` on this (kept-view) observation with the policy's state: what it would do. Writes
        nothing, notes nothing in the ledger, commits no state (``_stand`` may, for a due policy)."""
        try:
            obs = self.observer.observed(cp, part) or await self.observer.observe(cp, part)
            queue = _queue_key(cp)
            if queue is not None and obs.quota is not None:
                mine = arbitration.ledger_keys(cp.policy.spec)
                quota = self._lent(queue, arbitration.in_pass(obs.quota, mine=mine, ledger=self._ledger(queue)))
                obs = dataclasses.replace(obs, quota=quota)
            decisions, state = cp.decide(obs, self.states.get(cp.name, PolicyState()), self.clock.wall())
        except Exception:  # the evaluation (periodic, or this one's) reports it; a screen only selects
            return None
        return _Screen(obs, decisions, state)

    async def _quiet(self, cp: CompiledPolicy, part: Prepared) -> bool:
        """``core.screen.quiet`` on this (kept-view) observation: True only when ``decide`` would surely
        change nothing (a float compare or two after the judge, where ``decide`` builds its whole sentence)."""
        if not screened(cp):
            return False
        try:
            obs = self.observer.observed(cp, part) or await self.observer.observe(cp, part)
            return quiet(cp, obs, self.clock.wall(), self.states.get(cp.name) or _NO_STATE)
        except Exception:  # decide then (and reports what it finds)
            return False

    async def _stand(self, cp: CompiledPolicy, stamp: int, part: Prepared, screen: _Screen) -> bool:
        """A due policy's clean screen that would change nothing stands as its periodic evaluation: one
        ``decide``, not a second on the same readings. It is committed as ``_evaluate`` commits an evaluation
        that does not act (state, metrics, log line, Events for notable holds, the outcome status reads, the
        next due time), only while no evaluation of the policy ran or runs since the screen and its target
        view is still the one kept (checked with no ``await`` before the commit). Not for policies on a
        ClusterQueue (their pass reads the ledger's targets). A screen that would act never stands: it is
        escalated to an evaluation on a fresh read (``_escalate``)."""
        name = cp.name
        lock = self._locks.get(name)
        if (lock is not None and lock.locked()) or self._runs.get(name, 0) != stamp:
            self._missed(name, "busy")
            return False
        if not self.observer.still_kept(name, part):
            self._missed(name, "view_replaced")
            return False
        if self._misses:
            self._misses.pop(name, None)
        self._runs[name] = stamp + 1
        self.states[name] = screen.state
        self._due[name] = self.clock.monotonic() + cp.policy.spec.evaluation_period_seconds
        self._kept.pop(name, None)  # used: the evaluation count moved on
        self.outcomes[name] = Outcome(name, tuple(screen.decisions), committed=True, observation=screen.obs)
        self._child(self.telemetry.triggers, "period").inc()
        self._report(cp, screen.obs, screen.decisions, None, "period")
        await self.emit_events(cp, screen.decisions)
        return True

    def _escalate(self, cp: CompiledPolicy) -> None:
        if self._locks.get(cp.name, asyncio.Lock()).locked():
            return  # being evaluated right now, on a fresh read
        task = asyncio.create_task(self._escalated(cp), name=f"probe {cp.name}")
        self._escalations[task] = self.clock.monotonic()
        self._calm.clear()
        task.add_done_callback(self._escalated_done)

    def _escalated_done(self, task: asyncio.Task[None]) -> None:
        self._escalations.pop(task, None)
        if not self._escalations:
            self._calm.set()

    async def _escalated(self, cp: CompiledPolicy) -> None:
        # Its reads go past the round's queue in the sources (``sources.base.URGENT``; this task's context only).
        URGENT.set(True)
        self._child(self.telemetry.full_evaluations, "probe").inc()
        outcome = await self.evaluate(cp, "probe", probe=True, urgent=True)
        if outcome.committed:
            # The probe acted: the next periodic evaluation is a full period away.
            self._due[cp.name] = self.clock.monotonic() + cp.policy.spec.evaluation_period_seconds


def _chunks(
    policies: list[CompiledPolicy], size: int, group: Callable[[CompiledPolicy], object] | None = None,
    *, ungrouped: bool = False,
) -> list[list[CompiledPolicy]]:
    """``policies`` in chunks of about ``size``, in order, the policies of one ClusterQueue (by default; of one
    ``group``: the loop's is the cohort's, once known) kept together in the chunk of the first of them (they
    decide one after the other on one ledger, filled by one bulk read). ``ungrouped``: the caller knows none is
    on a ClusterQueue, so the chunks are plain slices (the same chunks, without a key per policy)."""
    if ungrouped:
        return [policies[i:i + size] for i in range(0, len(policies), size)]
    groups: dict[object, list[CompiledPolicy]] = {}
    for i, cp in enumerate(policies):
        key = _queue_key(cp) if group is None else group(cp)
        groups.setdefault(i if key is None else key, []).append(cp)
    out: list[list[CompiledPolicy]] = []
    for members in groups.values():
        if not out or len(out[-1]) >= size:
            out.append([])
        out[-1].extend(members)
    return out


def _bounded(seconds: float) -> float | None:
    """``asyncio.timeout``'s argument: None for no bound."""
    return None if math.isinf(seconds) else max(0.0, seconds)


class _Queue(NamedTuple):
    """A ClusterQueue and the resource its policies share (the pass ledger's key)."""

    cluster_queue: str
    resource: str


class _Group(NamedTuple):
    """What policies on ClusterQueues share one lock under: a cohort (its members lend to each other), else a
    ClusterQueue; per resource."""

    kind: str
    name: str
    resource: str


#: How many times an evaluation observes again under another lock (``_evaluate_in_group``): once when it learns
#: the cohort, once more should the ClusterQueue move meanwhile.
RELOCKS = 2


class _Relock(Exception):
    """The evaluation holds another lock than its ClusterQueue's cohort needs: observe again under that one."""


def _after_scales(
    cp: CompiledPolicy, written: Sequence[ScaleDecision], gated: int, obs: Observation | None
) -> dict[str, ReplicaStatus]:
    """Each written target's replica status once its scale is in: its count as written, its gated replicas
    grown by the scale-up or shrunk by the scale-down (gated ones go first). ``gated``: the primary target's;
    another target's is read from ``obs.members`` (left out when unknown)."""
    primary = cp.policy.spec.target.ref().key
    out: dict[str, ReplicaStatus] = {}
    for d in written:
        key = d.target.key
        known = None if obs is None else (obs.members.get(key) or (obs.replicas if key == obs.target.key else None))
        if key == primary:
            before = gated
        elif known is not None:
            before = known.gated
        else:
            continue
        up, down = max(0, d.desired - d.current), max(0, d.current - d.desired)
        base = known if known is not None else ReplicaStatus(spec=d.current, ready=0)
        out[key] = dataclasses.replace(base, spec=d.desired, gated=max(0, before + up - down))
    return out


def _queue_key(cp: CompiledPolicy) -> _Queue | None:
    capacity = cp.policy.spec.capacity
    return None if capacity is None else _Queue(capacity.cluster_queue, capacity.resource)


def _fast(cp: CompiledPolicy) -> bool:
    """Signals read from a source that refreshes within seconds (not Cloud Monitoring's 60 s samples)."""
    spec = cp.policy.spec
    sources = [s.source or spec.source for s in spec.signals if s.expr is None]
    return not any(isinstance(s, CloudMonitoringSourceSpec) for s in sources)


def _changes(decisions: list[Decision]) -> bool:
    return any(_is_action(d) for d in decisions)


def _is_action(d: Decision) -> bool:
    return isinstance(d, TrainingDecision) or d.changes


def _eventful(d: Decision) -> bool:
    return _is_action(d) or d.reason in NOTABLE_HOLDS


#: Failures of a scale write that a retry will not mend (RBAC, the object gone), besides the actuator's refusals.
_LASTING: tuple[type[BaseException], ...] = (Forbidden, NotFound)


def _action_name(d: Decision) -> str:
    if isinstance(d, TrainingDecision):
        return d.action.value
    return "scale"


def _regarding(cp: CompiledPolicy, d: Decision) -> ObjectRef:
    if isinstance(d, TrainingDecision):
        w = d.workload
        return ObjectRef("kueue.x-k8s.io/v1beta1", "Workload", w.namespace, w.name, w.uid)
    spec = cp.policy.spec
    t = spec.target
    if spec.actuation.mode == "hpaFloor" and spec.actuation.hpa_name:
        return ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", t.namespace, spec.actuation.hpa_name)
    # Each scale decision's Event goes to its own target (a policy with several targets has one per pool).
    return kinds.of(d.target.kind).object_ref(d.target)


def _about(d: Decision) -> str:
    return f"the scale of {d.target.key}" if isinstance(d, ScaleDecision) else f"{d.action.value} {d.workload.key}"


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
