"""One closed-loop run: a trace through a serving pool, Kueue and training, under one controller.

The loop is event-driven: request arrivals, prefill and decode completions and replicas becoming ready
come from a heap; periodic work (scrapes, policy evaluations, timeline samples, scheduled actions) runs on
tickers. A controller only ever changes the desired replica count (and, for policies whose decisions
include them, training deactivations); replicas then wait for Kueue admission and their cold start.
Everything is a deterministic function of the inputs: no wall clock, no unseeded randomness.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from autoscaler.core import arbitration
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import (
    AskedReplicas,
    EvictedFor,
    Observation,
    PodStatus,
    PolicyState,
    QuotaStatus,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SliceCapacity,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.topology import Inventory, Occupant, Shape, find_place
from autoscaler.sim import kueue, pipeline
from autoscaler.sim.cluster import Cluster, PipelineSpec, PoolSpec
from autoscaler.sim.model import (
    DECODE_DONE,
    HANDOFF,
    POOL_KIND_STRIDE,
    PREFILL_DONE,
    Replica,
    ReplicaState,
    Requests,
    ServingPool,
)
from autoscaler.sim.slices import SlicePlacement
from autoscaler.sim.traces import Trace

#: After the last arrival, stop waiting for stragglers after this long (they count as SLO misses).
DRAIN_LIMIT_S = 1800.0


@dataclass
class TimelinePoint:
    t: float
    ready: int
    replicas: int  # desired (live: pending + starting + ready)
    serving_chips: int
    training_chips: int
    training_queued: int


class ScaleEvent(NamedTuple):
    """A change of a run's desired count, with the decision's reason and sentence."""

    time: float
    before: int
    after: int
    reason: str
    message: str


class TrainingTotals(NamedTuple):
    """Training chip-seconds at the end of a run: checkpointed work, lost work, and computed but not yet saved."""

    useful: float
    lost: float
    unsaved: float


@dataclass
class RunResult:
    name: str
    kind: str  # policy | baseline | oracle
    requests: Requests
    horizon_s: float
    serving_chip_s: float
    free_chip_s: float
    training_useful_chip_s: float
    training_lost_chip_s: float
    scale_actions: int
    preemptions: int
    timeline: list[TimelinePoint]
    notes: list[str] = field(default_factory=list)
    pipeline: str = ""
    #: Every change of the desired count.
    scale_events: list[ScaleEvent] = field(default_factory=list)
    #: Per training job, when it was stopped (within the horizon).
    evictions: dict[str, list[float]] = field(default_factory=dict)
    #: Per training job, each stop within the horizon with what it lost (``kueue.Stop``).
    stops: dict[str, list[kueue.Stop]] = field(default_factory=dict)
    #: The run stopped once ``late`` exceeded ``stop_after_misses``: its figures are partial, and all that
    #: is known of its attainment is that it stays below 1 − late / requests.
    stopped_early: bool = False
    late: int = 0
    #: Computed but not checkpointed when the window ends (not counted as kept).
    training_unsaved_chip_s: float = 0.0
    rejected_requests: int = 0
    abandoned_requests: int = 0
    routing: str = ""
    preemption_times: list[float] = field(default_factory=list)
    quota: int = 0
    #: With a topology: slices admitted, placement problems the audit found (none expected), and the
    #: replica-seconds scale-ups waited because no whole slice fitted (Kueue kept them pending).
    slice_admissions: int = 0
    slice_violations: list[str] = field(default_factory=list)
    unplaced_replica_s: float = 0.0
    topology: bool = False
    #: Serving chip-seconds per pool (disaggregated runs have two).
    pool_chip_s: dict[str, float] = field(default_factory=dict)


class Controller(Protocol):
    name: str
    kind: str

    def start(self, sim: Simulation) -> None:
        """Register tickers and set the initial state."""
        ...


class Simulation:
    def __init__(
        self,
        *,
        cluster: Cluster,
        trace: Trace,
        controller: Controller,
        arbiter: kueue.Arbiter | None = None,
        horizon_s: float | None = None,
        record_every_s: float = 10.0,
        keep_placement_log: bool = False,
        pool: PoolSpec | None = None,
        initial_replicas: int | None = None,
        initial_by_pool: dict[str, int] | None = None,
        slo_ttft_s: float | None = None,
        stop_after_misses: int | None = None,
        routing: str | None = None,
        seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.pool_spec = pool or cluster.spec.pools[0]
        self.trace = trace
        self.controller = controller
        self.arbiter: kueue.Arbiter = arbiter or kueue.KueueArbiter()
        self.horizon = horizon_s if horizon_s is not None else trace.duration_s
        self.events: list[tuple[float, int, int, int, int]] = []
        pair = cluster.disaggregated
        if pair is not None:
            self.pool_spec = pair[0]  # the trace arrives at the prefill pool
        self.routing = routing if routing is not None else self.pool_spec.routing
        specs = list(pair) if pair is not None else [self.pool_spec]
        #: Disaggregated: role -> its pools' names (the primary first, then variants of other slice shapes).
        roles = cluster.spec.disaggregation.roles() if cluster.spec.disaggregation is not None else {}
        if pair is not None:
            specs += [cluster.pool_named(n) for role in ("prefill", "decode") for n in roles[role][1:]]
        role_of = {name: role for role, names in roles.items() for name in names}
        #: Disaggregated: the prefill pool computes each prompt (one output token: its KV cache) and hands it
        #: to the decode pool after the KV transfer; TTFT and the SLO are the decode pool's. The pools of one
        #: role share the requests (one stream, routed over all their groups).
        role_requests = {
            "prefill": Requests(trace.arrivals, trace.inputs, [1] * len(trace.arrivals)),
            "decode": Requests(trace.arrivals, trace.inputs, trace.outputs),
        } if pair is not None else {}
        self.pools: list[ServingPool] = []
        for i, spec in enumerate(specs):
            role = role_of.get(spec.name)
            sp = ServingPool(
                name=spec.name,
                profile=cluster.profile(spec),
                chips_per_replica=cluster.chips_per_replica(spec),
                requests=(role_requests[role] if role is not None
                          else Requests(trace.arrivals, trace.inputs, trace.outputs)),
                events=self.events,
                on_chips_released=self._chips_released,
                routing=self.routing if i == 0 else spec.routing,
                client_timeout_s=spec.client_timeout_seconds,
                seed=seed + i,
                kind_offset=i * POOL_KIND_STRIDE,
            )
            self.pools.append(sp)
        self.pool = self.pools[0]
        self._pool_chips = {sp.name: 0 for sp in self.pools}
        self.pool_chip_s = {sp.name: 0.0 for sp in self.pools}
        self.pool_specs = {spec.name: spec for spec in specs}
        #: The pool whose first tokens are the client's (TTFT, the SLO, stopping early): decode's primary pool;
        #: with variants, every pool of the decode role (``_score_pools``) completes requests.
        self.score_pool = self.pools[1] if pair is not None else self.pools[0]
        self.requests = self.score_pool.req
        self._score_pools = [sp for sp in self.pools if role_of.get(sp.name) == "decode"] or [self.score_pool]
        self._kv = cluster.spec.disaggregation.kv_transfer if cluster.spec.disaggregation is not None else None
        if pair is not None:
            by_name = {sp.name: sp for sp in self.pools}
            for role, names in roles.items():
                peers = [by_name[n] for n in names]
                for sp in peers:
                    sp.join(peers)
                    if role == "prefill":
                        sp.on_first_token = self._handoff
                        sp.set_prefill_only()
                    else:
                        # The decode group receives the KV cache: no prefill compute of its own.
                        sp.set_prefill_free()
        #: Kueue's reconcile delays every admission (added to the cold start) and every eviction.
        self.reconcile_s = cluster.spec.kueue.admission_seconds
        topo_spec = cluster.spec.topology
        for sp in self.pools:
            sp.cold_start_s += self.reconcile_s
            if topo_spec is not None:
                # The slice controller's AdmissionCheck provisions the carved slice before the pods start.
                sp.cold_start_s += topo_spec.provisioning_seconds
        if slo_ttft_s is not None:
            for sp in self._score_pools:
                sp.slo_s = slo_ttft_s
        #: Stop as soon as more requests than this have missed the SLO (the oracle's search only needs to
        #: know that a schedule fails); the result is then marked ``stopped_early``.
        self.stop_after_misses = stop_after_misses
        #: Chips serving and training may hold: the quota, or the blocks' chips when they are fewer.
        self.quota = cluster.capacity_chips
        self.serving_priority = cluster.spec.serving_priority
        topo = cluster.spec.topology
        #: With a topology, admission is by slice placement (``sim.slices``, on the core's pure fit check).
        self.slices: SlicePlacement | None = (
            SlicePlacement(topo.shape, topo.blocks, keep_log=keep_placement_log) if topo is not None else None
        )
        self._provision_s = topo.provisioning_seconds if topo is not None else 0.0
        self._shape_of = {spec.name: Shape.parse(spec.slice_topology) for spec in specs
                          if spec.slice_topology is not None}
        self._job_shape: dict[str, Shape] = {}
        self._unplaced_s = 0.0
        self.jobs: list[kueue.TrainingJob] = [
            kueue.TrainingJob(
                name=t.name if t.count == 1 else f"{t.name}-{i}",
                namespace=t.namespace, priority=t.priority, chips=t.chips,
                interval_s=t.checkpoint_interval_seconds, save_s=t.checkpoint_save_seconds,
                restore_s=t.restore_seconds, grace_s=t.termination_grace_period_seconds,
                save_on_preemption=t.save_on_preemption, labels=dict(t.labels),
                offset_s=(i / t.count) * t.checkpoint_interval_seconds if t.staggered else 0.0,
                honours_requests=t.checkpoint_on_request, declares_checkpoints=t.declares_checkpoints,
            )
            for t in cluster.spec.training
            for i in range(t.count)
        ]
        if self.slices is not None:
            for t in cluster.spec.training:
                for i in range(t.count):
                    assert t.slice_topology is not None  # the cluster file's validation requires it
                    self._job_shape[t.name if t.count == 1 else f"{t.name}-{i}"] = Shape.parse(t.slice_topology)
            for job in self.jobs:
                # A re-admitted Workload waits for its slice to be provisioned before it restores.
                job.restore_s += self._provision_s
        self.deactivated_by_us: set[str] = set()
        #: The controller's marks on each Workload, as it writes them: when it stopped each job (the per-job cap
        #: reads the last hour's) and when it last resumed it (minRunSeconds reads it).
        self.stopped_by_us: dict[str, list[float]] = {}
        self.resumed_by_us: dict[str, float] = {}
        #: Called when a requested checkpoint completes (a controller re-evaluates then).
        self.on_checkpoint: list[Callable[[float], object]] = []
        #: The pass ledger's targets: each pool a policy with a ``capacity`` block drives, by target key, with
        #: the chips one of its groups counts (``join_ledger``). Every policy decides on the others' groups asked
        #: for and not admitted yet (``quota_status``), as the controller's policies do in one pass.
        self._ledger: dict[str, tuple[ServingPool, float]] = {}
        #: Per pool name, the target key the policy driving it decides for (``drives``): whom Kueue's preemptor
        #: resolves to, as the controller reads it. A pool no policy names stands for its own target.
        self._driven_as: dict[str, str] = {}
        self.serving_chips = 0
        self.training_chips = 0
        self._last_account = 0.0
        self.serving_chip_s = 0.0
        self.free_chip_s = 0.0
        self.scale_actions = 0
        self.preemptions = 0
        self.notes: list[str] = []
        self.timeline: list[TimelinePoint] = []
        self._tickers: list[list[object]] = []  # [next_time, callback]
        #: Set when a ticker is added, so the event loop looks for the earliest ticker again.
        self._tickers_changed = False
        self._record_every = record_every_s
        self._training_totals: TrainingTotals | None = None
        #: When each preemption or deactivation was issued (the timeline marks them).
        self.preemption_times: list[float] = []
        self.scale_events: list[ScaleEvent] = []
        #: Training decisions a policy returned and the simulator applied (deactivations, reactivations).
        self.deactivations = 0
        self.reactivations = 0
        self.now = 0.0
        #: Prompt tokens of the first i arrivals (``router_counts``), built on first use.
        self._prompt_prefix: list[int] | None = None
        self.initial_by_pool: dict[str, int] = {}
        for spec in specs:
            if initial_by_pool is not None and spec.name in initial_by_pool:
                n0 = initial_by_pool[spec.name]
            elif initial_replicas is not None and pair is None:
                n0 = initial_replicas
            elif spec.initial_replicas is not None:
                n0 = spec.initial_replicas
            elif pair is not None:
                n0 = spec.min_replicas  # the disaggregated runner passes the oracle's warm start
            else:
                # Imported here: the oracle module imports this one.
                from autoscaler.sim.oracle import warm_fleet  # noqa: PLC0415

                n0 = warm_fleet(trace, cluster, spec)
            self.initial_by_pool[spec.name] = n0
        # The larger slices are placed first: a 2x2x2 group placed first could split the half-block a 2x4x4
        # group needs (the arbitration places a plan's groups in the same order).
        by_size = sorted(zip(self.pools, specs, strict=True),
                         key=lambda ps: -(s.chips if (s := self._shape_of.get(ps[1].name)) is not None else 0))
        for sp, spec in by_size:
            n0 = self.initial_by_pool[spec.name]
            shape = self._shape_of.get(spec.name)
            for _ in range(n0):
                rep = sp.add_replica(0.0, ready=True)
                self.serving_chips += rep.chips
                self._pool_chips[sp.name] += rep.chips
                if (self.slices is not None and shape is not None
                        and self.slices.place(rep.name, shape, preemptible=False, now=0.0) is None):
                    raise ValueError(f"initialReplicas {n0} of pool {spec.name}: replica {rep.index + 1} finds no "
                                     f"free {shape} slice in the blocks")
        self.initial_replicas = sum(self.initial_by_pool.values())
        if self.serving_chips > self.quota:
            raise ValueError(
                f"initialReplicas {self.initial_replicas} × {self.pool.chips} chips exceed the quota of "
                f"{self.quota} chips"
            )
        self._admit_training(0.0)

    def router_counts(self, now: float) -> pipeline.RouterCounts:
        """What the router (the endpoint picker in front of the pools) has counted by ``now``: every request of
        the trace that has arrived, and its body bytes (its prompt at ``pipeline.BYTES_PER_PROMPT_TOKEN``),
        counted on arrival whether or not a pool has served it yet; and the prompt and generated tokens of the
        requests completed (by the pools whose completions are the client's: decode's, when disaggregated)."""
        if self._prompt_prefix is None:
            self._prompt_prefix = [0, *itertools.accumulate(self.trace.inputs)]
        n = bisect.bisect_right(self.trace.arrivals, now)
        done = self._score_pools
        return pipeline.RouterCounts(float(n), self._prompt_prefix[n] * pipeline.BYTES_PER_PROMPT_TOKEN,
                                     sum(p.answered_prompt_tokens for p in done),
                                     sum(p.answered_output_tokens for p in done))

    # ----- tickers ------------------------------------------------------------------------------------
    def every(self, first: float, fn: Callable[[float], float | None]) -> None:
        """Call ``fn(now)`` at ``first``; it returns the next time (or None to stop)."""
        self._tickers.append([first, fn])
        self._tickers_changed = True

    # ----- accounting ---------------------------------------------------------------------------------
    def _account(self, now: float) -> None:
        t0, t1 = min(self._last_account, self.horizon), min(now, self.horizon)
        if t1 > t0:
            dt = t1 - t0
            self.serving_chip_s += self.serving_chips * dt
            for name, chips in self._pool_chips.items():
                self.pool_chip_s[name] += chips * dt
            self.free_chip_s += (self.quota - self.serving_chips) * dt
            if self.slices is not None:
                self._unplaced_s += dt * sum(1 for p in self.pools for r in p.replicas
                                             if r.state is ReplicaState.PENDING)
        self._last_account = now

    # ----- Kueue --------------------------------------------------------------------------------------
    def _running_jobs(self) -> list[kueue.TrainingJob]:
        return [j for j in self.jobs if j.state is kueue.JobState.RUNNING]

    def _free(self) -> int:
        return self.quota - self.serving_chips - self.training_chips

    def _evict(self, job: kueue.TrainingJob, now: float, *, deactivate: bool, evicted_for: str = "") -> None:
        """Kueue evicts ``job``: its chips stay held through reconcile and its grace period. ``evicted_for``: the
        target of the serving pool Kueue preempts it for (``TrainingJob.evicted_for``)."""
        release_at = job.evict(now, deactivate=deactivate, reconcile_s=self.reconcile_s, evicted_for=evicted_for)
        if now <= self.horizon:
            self.preemptions += 1
            self.preemption_times.append(now)

        def release(t: float) -> None:
            self._account(t)
            job.released()
            self.training_chips -= job.chips
            if self.slices is not None:
                self.slices.release(job.name)
            self._admit_serving(t)
            self._admit_training(t)

        self.every(release_at, release)

    def _admit_serving(self, now: float) -> None:
        """Admit pending replicas in creation order while quota allows; preempt (Kueue) for the rest.

        Chips of victims still in their grace period are promised to the replicas waiting for them, so a
        replica that will fit once they are gone preempts nothing more (as Kueue does not preempt twice
        for one pending Workload)."""
        if self.slices is not None:
            self._admit_serving_slices(now)
            return
        free = self._free()
        incoming = sum(j.chips for j in self.jobs if j.state is kueue.JobState.TERMINATING)
        for pool, rep in self._pending():
            if free >= rep.chips:
                self._account(now)
                self.serving_chips += rep.chips
                self._pool_chips[pool.name] += rep.chips
                free -= rep.chips
                pool.admitted(rep, now)
                continue
            if free + incoming < rep.chips:
                victims = self.arbiter.victims(
                    needed=rep.chips, free=free + incoming, running=self._running_jobs(),
                    serving_priority=self.serving_priority, now=now,
                )
                if victims is None:
                    return  # stays SchedulingGated until quota frees
                for job in victims:
                    self._evict(job, now, deactivate=False, evicted_for=self._target_key(pool))
                    incoming += job.chips
            # Waits for the terminating victims; their chips are promised to it.
            incoming -= rep.chips - free
            free = 0

    def _admit_serving_slices(self, now: float) -> None:
        """Under a topology: a pending group is admitted where a whole slice of its shape is free (the core's
        ``find_place``); else it waits for a place that terminating victims will free (promised to it, so
        the next group does not count it), else Kueue preempts, in its candidate order, the training whose
        stopping makes a place (``SlicePlacement.kueue_victims``)."""
        slices = self.slices
        assert slices is not None
        leaving = [j.name for j in self.jobs if j.state is kueue.JobState.TERMINATING]
        reserved: list[Occupant] = []
        for pool, rep in self._pending():
            shape = self._shape_of[pool.name]
            if not reserved and slices.place(rep.name, shape, preemptible=False, now=now) is not None:
                self._account(now)
                self.serving_chips += rep.chips
                self._pool_chips[pool.name] += rep.chips
                pool.admitted(rep, now)
                continue
            candidates = sorted(
                (j for j in self._running_jobs() if j.priority < self.serving_priority),
                key=lambda j: (j.priority, -j.admitted_at, j.name),
            )
            victims = slices.kueue_victims(shape, [j.name for j in candidates], waiting=leaving, reserved=reserved)
            if victims is None:
                return  # stays pending until a place frees
            by_name = {j.name: j for j in candidates}
            for name in victims:
                self._evict(by_name[name], now, deactivate=False, evicted_for=self._target_key(pool))
                leaving.append(name)
            # The place the leaving victims free is promised to this group.
            place = slices.inventory(without=leaving, extra=reserved)
            regions = find_place(place, shape)
            assert regions is not None  # kueue_victims made room
            reserved.append(Occupant(key=f"promised/{rep.name}", regions=regions))

    def drives(self, pool: ServingPool, target_key: str) -> None:
        """A policy targeting ``target_key`` drives ``pool`` (its own pool, or the pool it is simulated on)."""
        self._driven_as[pool.name] = target_key

    def _target_key(self, pool: ServingPool) -> str:
        """The serving target a pool stands for (``TargetRef.key``), as Kueue's preemptor resolves to it: the
        target of the policy driving it, else the pool's own."""
        return self._driven_as.get(pool.name) or self.pool_specs[pool.name].target.ref().key

    def _pending(self) -> list[tuple[ServingPool, Replica]]:
        """Serving groups waiting for admission, across pools, in creation order (Kueue's FIFO)."""
        out = [(p, r) for p in self.pools for r in p.replicas if r.state is ReplicaState.PENDING]
        if len(self.pools) > 1:
            out.sort(key=lambda pr: pr[1].created_at)  # stable: pool order breaks ties
        return out

    def _admit_training(self, now: float) -> None:
        if self._pending():
            return  # serving waits: Kueue admits the higher priority first
        queued = [j for j in self.jobs if j.state is kueue.JobState.QUEUED]
        if not queued:
            return
        if self.slices is not None:
            # Kueue's order (highest priority, then the longest waiting); a job is admitted where its whole
            # slice fits, a smaller one may pass a larger one that does not (BestEffortFIFO).
            for job in sorted(queued, key=lambda j: (-j.priority, j.evicted_at, j.name)):
                if self.slices.place(job.name, self._job_shape[job.name],
                                     preemptible=job.priority < self.serving_priority, now=now) is not None:
                    self._account(now)
                    job.admit(now)
                    self.training_chips += job.chips
            return
        for job in self.arbiter.admissible(free=self._free(), queued=queued, now=now):
            self._account(now)
            job.admit(now)
            self.training_chips += job.chips

    def _chips_released(self, now: float, rep: Replica) -> None:
        self._account(now)
        self.serving_chips -= rep.chips
        self._pool_chips[rep.name.rsplit("-", 1)[0]] -= rep.chips  # replicas are named POOL-INDEX
        if self.slices is not None:
            self.slices.release(rep.name)
        self._admit_serving(now)
        self._admit_training(now)

    # ----- actuation ----------------------------------------------------------------------------------
    def _handoff(self, rid: int, now: float) -> None:
        """A prompt's prefill is done: its KV cache reaches the decode pool after the transfer."""
        assert self._kv is not None
        pool = self.pool
        pool.seq += 1
        heapq.heappush(self.events, (now + self._kv.seconds(pool.req.inputs[rid]), pool.seq, HANDOFF, rid, 0))

    def set_desired(self, desired: int, now: float, *, reason: str = "", message: str = "",
                    pool: ServingPool | None = None) -> None:
        pool = pool or self.pool
        live = pool.live()
        if desired == len(live):
            return
        self.scale_actions += 1
        label = f"{pool.name}: " if len(self.pools) > 1 else ""
        self.scale_events.append(ScaleEvent(now, len(live), desired, reason, label + message))
        if desired > len(live):
            for _ in range(desired - len(live)):
                pool.add_replica(now)
            self._admit_serving(now)
        else:
            for rep in pool.removal_order()[: len(live) - desired]:
                pool.remove(rep, now)
            self._admit_serving(now)
            self._admit_training(now)

    def apply_training(self, decision: TrainingDecision, now: float) -> None:
        job = next((j for j in self.jobs if j.name == decision.workload.name), None)
        if job is None:
            return
        if decision.action is TrainingAction.DEACTIVATE and job.state is not kueue.JobState.DEACTIVATED:
            if job.state is kueue.JobState.RUNNING:
                self._evict(job, now, deactivate=True)
            elif job.state is kueue.JobState.TERMINATING:
                job.after = kueue.JobState.DEACTIVATED
            else:
                job.state = kueue.JobState.DEACTIVATED
            self.deactivated_by_us.add(job.name)
            self.stopped_by_us.setdefault(job.name, []).append(now)
            self.deactivations += 1
            self._admit_serving(now)
        elif decision.action is TrainingAction.REQUEST_CHECKPOINT:
            done = job.request_checkpoint(now)
            if done is not None:
                asked = now

                def saved(t: float) -> None:
                    job.checkpoint_saved(asked, t)
                    for hook in self.on_checkpoint:  # the controller's fast probe sees it within a second
                        hook(t)

                self.every(done, saved)
        elif decision.action is TrainingAction.REACTIVATE and (
            job.state is kueue.JobState.DEACTIVATED
            or (job.state is kueue.JobState.TERMINATING and job.after is kueue.JobState.DEACTIVATED)
        ):
            if job.state is kueue.JobState.TERMINATING:
                job.after = kueue.JobState.QUEUED
            else:
                job.state = kueue.JobState.QUEUED
            self.deactivated_by_us.discard(job.name)
            self.resumed_by_us[job.name] = now
            self.reactivations += 1
            self._admit_training(now)

    # ----- observation --------------------------------------------------------------------------------
    def pool_for(self, target_key: str) -> ServingPool | None:
        """The pool a policy's target names (None: no pool of this cluster)."""
        for sp in self.pools:
            if self.pool_specs[sp.name].target.ref().key == target_key:
                return sp
        return None

    def replica_status(self, now: float, pool: ServingPool | None = None) -> ReplicaStatus:
        live = (pool or self.pool).live()
        ready = [r for r in live if r.state is ReplicaState.READY]
        pods = tuple(
            PodStatus(
                name=r.name,
                ready=r.state is ReplicaState.READY,
                age_s=now - r.created_at,
            )
            for r in live
        )
        gated = sum(1 for r in live if r.state is ReplicaState.PENDING)
        # As the controller reads them (``controller.kinds``): a replica pending admission is not starting.
        return ReplicaStatus(spec=len(live), ready=len(ready), starting=len(live) - len(ready) - gated, pods=pods,
                             gated=gated, slice=self._shape_of.get((pool or self.pool).name))

    def join_ledger(self, target_key: str, pool: ServingPool, per_replica: float) -> None:
        """``pool`` (the target ``target_key`` names) is driven by a policy with a ``capacity`` block: the other
        policies see its groups asked for and not admitted yet (the controller's pass ledger)."""
        self._ledger[target_key] = (pool, per_replica)

    def quota_status(self, mine: Collection[str] = ()) -> QuotaStatus:
        """The ClusterQueue as the policy driving the targets ``mine`` decides on it: the other ledger targets'
        groups asked for and not admitted yet are spoken for (``arbitration.in_pass``, the one rule the
        controller's policies decide on). Their counts are read from the pools at this instant: what the
        controller's ledger holds once its bulk read or its own scale write noted them."""
        q = self.cluster.spec.quota
        # With a topology the blocks' chips stand for the ClusterQueue's placeholder number (the inventory
        # declared in the controller's config, issue 14): 999999 would hide every shortage.
        quota = QuotaStatus(q.cluster_queue, q.resource, float(self.quota),
                            float(self.serving_chips + self.training_chips), slices=self._slice_capacity(),
                            evicting=self._evicting())
        if not self._ledger:
            return quota
        ledger = {
            key: AskedReplicas(len(live), sum(1 for r in live if r.state is ReplicaState.PENDING), per_replica)
            for key, (pool, per_replica) in self._ledger.items()
            for live in (pool.live(),)
        }
        return arbitration.in_pass(quota, mine=mine, ledger=ledger)

    def _evicting(self) -> tuple[EvictedFor, ...]:
        """Every job Kueue is evicting for a serving replica (``TrainingJob.evicted_for``), whether or not a policy
        selects it: what the controller reads with the ClusterQueue (``QuotaStatus.evicting``)."""
        return tuple(
            EvictedFor(f"{j.namespace}/{j.name}", float(j.chips), j.evicted_for) for j in self.jobs
            if j.state is kueue.JobState.TERMINATING and j.after is not kueue.JobState.DEACTIVATED and j.evicted_for
        )

    def _slice_capacity(self) -> SliceCapacity | None:
        """The blocks and what holds them, as the controller reads them (``controller.inventory``): training
        keyed ``namespace/name``, every serving group owned by its target (``Kind/namespace/name``)."""
        if self.slices is None:
            return None
        jobs = {j.name: j for j in self.jobs}
        owners: dict[str, str] = {}
        occupants = []
        for h in self.slices.holders.values():
            job = jobs.get(h.key)
            key = f"{job.namespace}/{job.name}" if job is not None else h.key
            if job is None:  # a serving group: replicas are named POOL-INDEX
                owners[key] = self.pool_specs[h.key.rsplit("-", 1)[0]].target.ref().key
            occupants.append(Occupant(key=key, regions=h.regions))
        inv = Inventory(self.slices.block_shape, self.slices.blocks, tuple(occupants))
        # Which group a scale-down removes is the simulator's own rule (``ServingPool.removal_order``); the
        # controller reads it from the cluster where it can (``SliceCapacity.removal_order``).
        order = {self.pool_specs[sp.name].target.ref().key:
                 tuple(r.name for r in sp.removal_order()) for sp in self.pools}
        return SliceCapacity(flavor="simulated", inventory=inv, source="the simulated blocks", owners=owners,
                             removal_order=order)

    def training_workloads(
        self, now: float, selected: Callable[[kueue.TrainingJob], bool] | None = None
    ) -> tuple[TrainingWorkload, ...]:
        """The Workloads a policy sees: like the controller, only those its ``preemptible`` selectors match."""
        out = tuple(
            j.workload(
                now, deactivated_by_us=j.name in self.deactivated_by_us,
                preempted_at=tuple(t for t in self.stopped_by_us.get(j.name, ()) if now - t < arbitration.HOUR_S),
                resumed_at=self.resumed_by_us.get(j.name),
            )
            for j in self.jobs if selected is None or selected(j)
        )
        if self.slices is None:
            return out
        return tuple(dataclasses.replace(w, slices=(self._job_shape[w.name],)) for w in out)

    # ----- the loop -----------------------------------------------------------------------------------
    def _record(self, now: float) -> float:
        live = [r for p in self.pools for r in p.live()]
        self.timeline.append(TimelinePoint(
            t=now,
            ready=sum(1 for r in live if r.state is ReplicaState.READY),
            replicas=len(live),
            serving_chips=self.serving_chips,
            training_chips=self.training_chips,
            training_queued=sum(1 for j in self.jobs if j.state is not kueue.JobState.RUNNING),
        ))
        return now + self._record_every

    def _close_training(self, now: float) -> None:
        """At the horizon: what training kept and lost so far is the result (the drain is not scored)."""
        useful = lost = unsaved = 0.0
        for job in self.jobs:
            u = job.useful_s
            if job.state is kueue.JobState.RUNNING:
                # Goodput counts checkpointed work only: what was computed since is not kept yet.
                w = job.work(now)
                u += w.checkpointed_s
                unsaved += (w.computed_s - w.checkpointed_s) * job.chips
            useful += u * job.chips
            lost += job.lost_s * job.chips
        self._training_totals = TrainingTotals(useful, lost, unsaved)

    def run(self, progress: Callable[[float], None] | None = None) -> RunResult:
        self.controller.start(self)
        self.every(0.0, self._record)

        def close(now: float) -> None:
            self._close_training(now)

        self.every(self.horizon, close)
        pool, events, req = self.pool, self.events, self.requests
        pools, score, score_pools = self.pools, self.score_pool, self._score_pools
        arrivals = req.arrival
        n = len(arrivals)
        i = 0
        end_limit = self.horizon + DRAIN_LIMIT_S
        tickers = self._tickers
        next_progress = 0.0
        replicas = pool.replicas
        inf = math.inf
        heappop = heapq.heappop
        route = pool.route
        stop_limit = self.stop_after_misses
        stopped_early = False
        while True:
            # Tickers are few; the earliest is found again only after one fires or one is added.
            self._tickers_changed = False
            tick = min(tickers, key=_tick_time) if tickers else None
            t_tick = float(tick[0]) if tick is not None else inf  # type: ignore[arg-type]
            while True:
                t_arr = arrivals[i] if i < n else inf
                t_ev = events[0][0] if events else inf
                if t_arr <= t_ev and t_arr <= t_tick:
                    if t_arr > end_limit:
                        break
                    self.now = t_arr
                    route(i, t_arr)
                    i += 1
                elif t_ev <= t_tick:
                    if t_ev > end_limit:
                        break
                    self.now = t_ev
                    _, _, kind, idx, version = heappop(events)
                    if kind >= POOL_KIND_STRIDE:  # another pool's event, or a KV hand-off between pools
                        if kind == HANDOFF:
                            score.route(idx, t_ev)
                            continue
                        other = pools[kind // POOL_KIND_STRIDE]
                        kind %= POOL_KIND_STRIDE
                        rep = other.replicas[idx]
                        if kind == DECODE_DONE:
                            other.on_decode_done(rep, version, t_ev)
                        elif kind == PREFILL_DONE:
                            other.on_prefill_done(rep, t_ev)
                        else:
                            other.on_ready(rep, t_ev)
                        if self._tickers_changed:
                            break
                        continue
                    rep = replicas[idx]
                    if kind == DECODE_DONE:
                        pool.on_decode_done(rep, version, t_ev)
                    elif kind == PREFILL_DONE:
                        pool.on_prefill_done(rep, t_ev)
                    else:
                        pool.on_ready(rep, t_ev)
                    if self._tickers_changed:
                        break  # an event scheduled a ticker (a preemption's release): it may come first
                else:
                    break
            if self._tickers_changed:
                continue
            # Every request ends once: completed by the scoring pool, or rejected or abandoned by any pool.
            finished = sum(p.completed for p in score_pools) + sum(p.rejected + p.abandoned for p in pools)
            if tick is None or t_tick > end_limit or (i >= n and finished >= n and t_tick > self.horizon):
                break
            if stop_limit is not None and sum(p.late for p in pools) > stop_limit:
                stopped_early = True
                break
            t = t_tick
            self.now = t
            fn = tick[1]
            assert callable(fn)
            nxt = fn(t)
            if nxt is None:
                tickers.remove(tick)
            else:
                tick[0] = max(nxt, t + 1e-6)
            if progress is not None and t >= next_progress:
                progress(min(t, self.horizon))
                next_progress = t + 60.0
        self._account(self.horizon)  # costs count over the trace's span only (the drain is not billed)
        if self._training_totals is None:
            self._close_training(self.horizon)
        totals = self._training_totals
        assert totals is not None
        return RunResult(
            name=self.controller.name,
            kind=self.controller.kind,
            requests=req,
            horizon_s=self.horizon,
            serving_chip_s=self.serving_chip_s,
            free_chip_s=self.free_chip_s,
            training_useful_chip_s=totals.useful,
            training_lost_chip_s=totals.lost,
            training_unsaved_chip_s=totals.unsaved,
            rejected_requests=sum(p.rejected for p in pools),
            abandoned_requests=sum(p.abandoned for p in pools),
            routing=self.routing,
            preemption_times=self.preemption_times,
            quota=self.quota,
            slice_admissions=self.slices.admissions if self.slices is not None else 0,
            slice_violations=list(self.slices.violations) if self.slices is not None else [],
            unplaced_replica_s=self._unplaced_s,
            pool_chip_s=dict(self.pool_chip_s),
            topology=self.slices is not None,
            scale_actions=self.scale_actions,
            preemptions=self.preemptions,
            timeline=self.timeline,
            notes=self.notes,
            pipeline=getattr(self.controller, "pipeline_name", ""),
            scale_events=self.scale_events,
            evictions={j.name: [t for t in j.evictions if t <= self.horizon] for j in self.jobs},
            stops={j.name: [s for s in j.stops if s.at <= self.horizon] for j in self.jobs},
            stopped_early=stopped_early,
            late=sum(p.late for p in pools),
        )


def _tick_time(tick: list[object]) -> float:
    t = tick[0]
    assert isinstance(t, float | int)
    return float(t)


# ----- controllers ------------------------------------------------------------------------------------
def _reads_per_token_latency(bindings: list[pipeline.Binding]) -> bool:
    """Whether a controller reads the servers' time-per-output-token histogram (its pool must then keep it)."""
    return any(b.preset.simulated == "tpot" for b in bindings)


class FixedController:
    """A constant replica count (``static-peak``, and the sanity tests)."""

    kind = "baseline"

    def __init__(self, name: str, replicas: int) -> None:
        self.name = name
        self.replicas = replicas

    def start(self, sim: Simulation) -> None:
        sim.every(0.0, self._apply(sim))

    def _apply(self, sim: Simulation) -> Callable[[float], float | None]:
        def fn(now: float) -> float | None:
            sim.set_desired(self.replicas, now, reason="Static", message=f"constant {self.replicas} replicas")
            return None
        return fn


class ScheduleController:
    """Applies a precomputed schedule of (time, replicas) changes (the oracle)."""

    kind = "oracle"

    def __init__(self, name: str, schedule: list[tuple[float, int]]) -> None:
        self.name = name
        self.schedule = schedule

    def start(self, sim: Simulation) -> None:
        if not self.schedule:
            return
        it = iter(self.schedule)
        current = [next(it)]

        def fn(now: float) -> float | None:
            sim.set_desired(current[0][1], now, reason="Schedule", message="perfect-foresight schedule")
            nxt = next(it, None)
            if nxt is None:
                return None
            current[0] = nxt
            return nxt[0]

        sim.every(self.schedule[0][0], fn)


class PolicyController:
    """A ScalingPolicy evaluated by the core engine on what the metric pipeline lets it see."""

    kind = "policy"

    def __init__(self, compiled: CompiledPolicy, pipe: PipelineSpec, pipeline_name: str, *, kind: str = "policy",
                 name: str | None = None) -> None:
        self.compiled = compiled
        self.name = name or compiled.name
        self.kind = kind
        self.pipe_spec = pipe
        self.pipeline_name = pipeline_name
        self.bindings = pipeline.bind(compiled.policy.spec)
        self.pipeline = pipeline.MetricPipeline(pipe, self.bindings)
        self.state = PolicyState()
        self.period = pipe.sync_period_seconds or compiled.policy.spec.evaluation_period_seconds
        #: Whether a signal reads the router's own counters (``pipeline.ROUTER_COUNTERS``).
        self._router = any(b.preset.simulated in pipeline.ROUTER_COUNTERS for b in self.bindings)

    def start(self, sim: Simulation) -> None:
        if self.compiled.policy.spec.pools():
            self._start_joint(sim)
            return
        target = self.compiled.policy.spec.target.ref()
        own = sim.pool_for(target.key)
        pool = own or sim.pool
        if own is None:
            pool_target = sim.pool_spec.target.ref()
            sim.notes.append(
                f"{self.name}: targets {target.key}; simulated on pool {pool.name} ({pool_target.key})"
            )
        if _reads_per_token_latency(self.bindings):
            pool.count_per_token_latency()
        servers = {b.server for b in self.bindings}
        server = pool.profile.server
        other = sorted(s for s in servers if s != server)
        if other:
            sim.notes.append(
                f"{self.name}: reads {', '.join(other)} metrics but pool {pool.name} runs {server}; "
                f"the simulated replica exports the equivalent gauge under the requested name"
            )

        capacity = self.compiled.policy.spec.capacity
        if capacity is not None and own is not None:
            sim.join_ledger(target.key, pool, capacity.per_replica)
        sim.drives(pool, target.key)

        def scrape(now: float) -> float:
            gauges = {r.name: pool.gauges(r, now) for r in pool.ready()}
            self.pipeline.scrape(now, gauges, sim.router_counts(now) if self._router else None)
            return now + self.pipe_spec.scrape_interval_seconds

        def evaluate(now: float) -> float:
            obs = Observation(
                target=target,
                replicas=sim.replica_status(now, pool),
                signals=self.pipeline.visible(now),
                training=sim.training_workloads(now, self._selected),
                quota=sim.quota_status(mine={target.key}),
            )
            self._decide_and_apply(sim, obs, now, lambda _key: pool)
            return now + self.period

        sim.every(0.0, scrape)
        sim.every(self.period, evaluate)
        # A victim's requested checkpoint completing is what the controller's fast probe (re-reading training
        # every second) would see: evaluate then rather than a period later.
        sim.on_checkpoint.append(evaluate)

    def _selected(self, job: kueue.TrainingJob) -> bool:
        """Whether one of the policy's ``preemptible`` selectors matches ``job`` (the Workloads it may stop)."""
        return any(p.namespace == job.namespace
                   and all(job.labels.get(k) == v for k, v in p.selector.match_labels.items())
                   for p in self.compiled.policy.spec.preemptible)

    def _decide_and_apply(
        self, sim: Simulation, obs: Observation, now: float, pool_of: Callable[[str], ServingPool | None]
    ) -> None:
        """One evaluation, applied as the controller applies it (``arbitration.in_apply_order``: checkpoint
        requests and stops, the scales with shrinking pools first, then resumes); each scale to the pool of its
        target (``pool_of``: None for a target that is no pool here, whose decision is then dropped)."""
        decisions, self.state = self.compiled.decide(obs, self.state, now)
        for d in arbitration.in_apply_order(decisions):
            if isinstance(d, ScaleDecision):
                pool = pool_of(d.target.key)
                if pool is not None:
                    sim.set_desired(d.desired, now, reason=d.reason.value, message=d.message, pool=pool)
            else:
                sim.apply_training(d, now)

    def _start_joint(self, sim: Simulation) -> None:
        """A policy with several targets (type ``disaggregated``): each signal is scraped from the pool its
        ``pool`` names (one pipeline per target), every pool's replica status goes into the observation
        (``members``), and each scale decision goes to the pool of its own target. A target that is no pool
        of the cluster is missing: the core then holds every pool (and the notes say so)."""
        spec = self.compiled.policy.spec
        primary = spec.target.ref()
        pools: dict[str, ServingPool] = {}
        for t in spec.targets():
            found = sim.pool_for(t.ref().key)
            if found is None:
                sim.notes.append(f"{self.name}: target {t.ref().key} is no pool of this cluster: every pool holds")
            else:
                pools[t.ref().key] = found
        by_target: dict[str, list[pipeline.Binding]] = {}
        for b in self.bindings:
            by_target.setdefault(spec.signal_target(spec.signal(b.signal)).ref().key, []).append(b)
        pipes = {key: pipeline.MetricPipeline(self.pipe_spec, bs) for key, bs in by_target.items()}
        if spec.capacity is not None:
            for key, pool in pools.items():
                sim.join_ledger(key, pool, float(pool.chips))
        for key, bs in by_target.items():
            if key in pools and _reads_per_token_latency(bs):
                pools[key].count_per_token_latency()

        def scrape(now: float) -> float:
            for key, pipe in pipes.items():
                pool = pools.get(key)
                pipe.scrape(now, {r.name: pool.gauges(r, now) for r in pool.ready()} if pool is not None else {},
                            sim.router_counts(now) if self._router else None)
            return now + self.pipe_spec.scrape_interval_seconds

        def evaluate(now: float) -> float:
            members = {key: sim.replica_status(now, pool) for key, pool in pools.items()}
            signals: dict[str, SignalReading] = {}
            for pipe in pipes.values():
                signals.update(pipe.visible(now))
            obs = Observation(
                target=primary,
                replicas=members.get(primary.key) or ReplicaStatus(0, 0),
                signals=signals,
                training=sim.training_workloads(now, self._selected),
                quota=sim.quota_status(mine=pools.keys()),
                members=members,
            )
            self._decide_and_apply(sim, obs, now, pools.get)
            return now + self.period

        sim.every(0.0, scrape)
        sim.every(self.period, evaluate)
        sim.on_checkpoint.append(evaluate)
