"""The controller process behind ``autoscaler run``: the ``Runtime`` that wires logs, telemetry, the policy
store, watches, leader election and the loop, and the command's body.

Kept apart from ``command`` so that every other sub-command starts without importing the Kubernetes client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import random
import signal
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from autoscaler.controller import kinds, kube, logs
from autoscaler.controller import objects as objects_mod
from autoscaler.controller.actuator import KubeActuator
from autoscaler.controller.config import ConfigError, ControllerConfig, default_identity, default_namespace, load_config
from autoscaler.controller.events import EventRecorder, ObjectRef
from autoscaler.controller.inventory import DeclaredBlocks
from autoscaler.controller.leader import AlwaysLeader, LeaderElector
from autoscaler.controller.loop import Clock, Controller, Leadership, LoopClock
from autoscaler.controller.objects import PolicyObjects, StatusWriter
from autoscaler.controller.observer import (
    PolicyObserver,
    SharedTraining,
    Watcher,
    WatchSpec,
    pods_watch,
    watch_key,
)
from autoscaler.controller.reload import PolicyStore, ReloadResult, renewed
from autoscaler.controller.telemetry import Servers, Telemetry, serve
from autoscaler.core import fast
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import ScaleDecision, TargetRef, TrainingDecision
from autoscaler.core.topology import Shape
from autoscaler.policyfile import crd
from autoscaler.sources.base import MetricSource
from autoscaler.sources.pool import SourcePool

PROG = "autoscaler run"
#: Probe rounds between two counts of the frozen set (``Runtime._freeze_round``; a count walks the set).
MEASURE_ROUNDS = 30


def run_command(args: argparse.Namespace) -> int:
    """The body of ``autoscaler run`` (see ``command``)."""
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        first, *more = str(exc).splitlines() or [""]
        extra = f" (and {len(more)} more problems)" if more else ""
        print(f"{PROG}: invalid config: {first}{extra}; fix the config file (docs/controller.md)", file=sys.stderr)
        return 1
    policies = Path(args.policies)
    if not policies.is_dir():
        print(f"{PROG}: {policies} is not a directory; pass the directory holding the policy files",
              file=sys.stderr)
        return 1
    dry_run = bool(args.dry_run) or cfg.mode == "dryRun"
    logs.configure(cfg.log_level)
    try:
        return asyncio.run(_main(cfg, policies, kubeconfig=args.kubeconfig, once=args.once, dry_run=dry_run))
    except kube.KubeConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


async def _main(cfg: ControllerConfig, policies: Path, *, kubeconfig: str | None, once: bool, dry_run: bool) -> int:
    # --help promises $KUBECONFIG, else the in-cluster account: never the home kubeconfig for a writer.
    api = await kube.connect(kubeconfig, home_fallback=False, deadline_s=cfg.api_deadline_seconds)
    try:
        runtime = Runtime(
            api=api, config=cfg, policies_dir=policies, dry_run=dry_run, clock=LoopClock(), settle_loaded=True
        )
        if once:
            return await runtime.once()
        await runtime.serve_until_signalled()
        return 0
    finally:
        await api.close()


@dataclass
class Runtime:
    """Everything ``autoscaler run`` wires together; tests build it against the HTTP emulator."""

    api: client.ApiClient
    config: ControllerConfig
    policies_dir: Path
    clock: Clock
    dry_run: bool = False
    identity: str = field(default_factory=default_identity)
    namespace: str = field(default_factory=default_namespace)
    source: MetricSource | None = None  # default: a SourcePool of the real sources
    leader_factory: Callable[[Runtime], Leadership] | None = None
    #: Jitter of the watches' and the lease campaign's backoff (tests seed it).
    rng: random.Random = field(default_factory=random.Random)
    #: After each load that changed the policy set, and after each pass that evaluated a policy for the first
    #: time (its state, kept view and metric children are built then), take what the process holds out of the
    #: cyclic collector's traversals (``core.fast.settle_long_lived``: at 5,000 policies full collections over
    #: objects that live as long as their policy took 24 % of the CPU, 16-21 % with this; docs/controller.md).
    #: ``autoscaler run`` sets it; tests
    #: that build many runtimes in one process leave it off.
    settle_loaded: bool = False
    #: Objects the last settle froze (``core.fast.freeze_survivors`` settles again past a quarter more).
    _settled: int = field(default=0, init=False)
    _rounds: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        # Every API call this runtime makes has a deadline, whoever built the client (tests build their own).
        kube.with_deadlines(self.api, cfg.api_deadline_seconds)
        self.log = logs.get_logger(component="run", identity=self.identity)
        self.telemetry = Telemetry(now=self.clock.monotonic, stall_after_s=cfg.liveness_stall_seconds)
        self.store = PolicyStore(self.policies_dir)
        self.events = EventRecorder(
            self.api, config=cfg.events, instance=self.identity, wall=self.clock.wall,
            on_error=lambda: self.telemetry.errors.labels("events").inc(),
        )
        kube_actuator = KubeActuator(self.api, now=self.clock.wall)
        kube_actuator.gate.list_all = cfg.held_sweep_all_namespaces
        kube_actuator.gate.slices.declared = {
            name: DeclaredBlocks(Shape.parse(f.block_shape), Shape.parse(f.host_shape), f.block_label)
            for name, f in cfg.slice_flavors.items()
        }
        # Our claims on targets name this controller (its Lease: shared by its replicas), so a policy renamed or
        # replaced here adopts what the old name claimed (controller/targets.py).
        le = cfg.leader_election
        kube_actuator.targets.controller = f"{le.lease_namespace or self.namespace}/{le.lease_name}"

        def running() -> Collection[str]:
            # Every policy this controller has loaded, running or held by the one-owner rule (a held policy's
            # claim is still its own): looked up at each call, a reload replaces them.
            return {cp.name for cps in self.store.good().values() for cp in cps} | self.store.conflicts.keys()

        kube_actuator.targets.running = running
        self.training = SharedTraining(kube_actuator.gate, now=self.clock.monotonic)
        self.actuator = InvalidatingActuator(kube_actuator, self.training)
        self.observer = PolicyObserver(
            targets=kube_actuator.targets,
            training=self.training,
            source=self.source or SourcePool(),
            default_source=cfg.default_source,
            deadline_s=cfg.signal_deadline_seconds,
            now=self.clock.monotonic,
            vouched=self._live_watches,
            resync_s=cfg.view_resync_seconds,
            why_unvouched=self._why_unvouched,
            count_reads=lambda why, n: self.telemetry.view_reads.labels(why).inc(n),
        )
        self.elector: LeaderElector | None = None
        leader: Leadership
        if self.leader_factory is not None:
            leader = self.leader_factory(self)
        elif cfg.leader_election.enabled:
            le = cfg.leader_election
            self.elector = LeaderElector(
                self.api, config=le, identity=le.identity or self.identity,
                namespace=le.lease_namespace or self.namespace, wall=self.clock.wall,
                on_change=self._leadership_changed,
                backoff=kube.Backoff(base_s=le.retry_period_seconds, cap_s=le.lease_duration_seconds,
                                     floor_s=le.retry_period_seconds, rng=self.rng),
            )
            leader = self.elector
        else:
            leader = AlwaysLeader()
            self.telemetry.leader.set(1)
        self.controller = Controller(
            store=self.store, observer=self.observer, actuator=self.actuator, telemetry=self.telemetry,
            clock=self.clock, leader=leader, events=self.events, dry_run=self.dry_run,
            fast_poll_s=cfg.fast_poll_seconds, pass_deadline_s=cfg.pass_deadline_seconds,
            keeper=kube_actuator.gate, sweep_s=cfg.held_sweep_seconds,
        )
        self.watchers: dict[WatchSpec, tuple[Watcher, asyncio.Task[None]]] = {}
        self._tasks: set[asyncio.Task[ReloadResult]] = set()
        self.objects = PolicyObjects(self.store)
        self.status = StatusWriter(self.api, self.objects, self.controller.outcomes, wall=self.clock.wall,
                                   leading=self._leading)
        if cfg.watch_scaling_policies:
            self.controller.after_pass = self.status.write
        self.controller.after_first = self._settle
        self.controller.after_round = self._freeze_round

    def _leading(self) -> bool:
        # Read at each call: --once swaps the elector for AlwaysLeader.
        return self.controller.leader.holds()

    def _leadership_changed(self, leading: bool) -> None:
        self.telemetry.leader.set(1 if leading else 0)
        if not leading:
            # A later term starts from the cluster's state, not from what this replica remembered before
            # another leader acted in between.
            self.controller.states.clear()

    # --once ------------------------------------------------------------------------------------------
    async def once(self) -> int:
        """One pass without leader election; 0 only if every file loaded and every policy went through."""
        self.controller.leader = AlwaysLeader()
        if self.config.watch_scaling_policies:
            await self.list_policy_objects()
        result = self.store.reload()
        await self.report_reload(result, leading=True)
        ok = await self.controller.run_once()
        await self.observer.aclose()
        return 0 if ok and not result.rejected else 1

    # long-running --------------------------------------------------------------------------------------
    async def serve_until_signalled(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        ports = self.config.ports
        servers = await serve(self.telemetry, host=ports.bind_address, metrics_port=ports.metrics,
                              health_port=ports.health)
        try:
            await self.serve(stop)
        finally:
            await servers.stop()

    async def serve(self, stop: asyncio.Event, servers: Servers | None = None) -> None:
        """Run until ``stop`` is set: reload, watches, election, loop. Cancels in reverse order."""
        self.telemetry.set_ready("policies", False)
        result = self.store.reload()
        self._settle()
        self.telemetry.set_ready("policies", True)
        self.telemetry.tick()  # starting counts as progress; from now on only the loop ticks
        tasks: list[asyncio.Task[None]] = []
        if self.elector is not None:
            tasks.append(asyncio.create_task(self.elector.run(), name="leader"))
        await self.report_reload(result, leading=self.controller.leader.holds())
        self.sync_watches()
        tasks.append(asyncio.create_task(self._reload_forever(), name="reload"))
        loop_task = asyncio.create_task(self.controller.run(), name="loop")
        loop_task.add_done_callback(self._loop_ended)
        try:
            await stop.wait()
        finally:
            # The loop first: nothing new starts once stopping. Then watches, then the election (which
            # releases the Lease on cancellation).
            for t in [loop_task, *tasks[::-1], *[w for _, w in self.watchers.values()]]:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            self.watchers.clear()
            await self.observer.aclose()

    def _settle(self) -> None:
        if self.settle_loaded:
            self._settled = fast.settle_long_lived()

    def _freeze_round(self) -> None:
        """After each probe round: what survived it frozen too (``core.fast.freeze_survivors``), settled again
        once the frozen set grew by a quarter since the last settle (measured every ``MEASURE_ROUNDS`` rounds)."""
        if self.settle_loaded:
            self._rounds += 1
            self._settled = fast.freeze_survivors(self._settled, measure=self._rounds % MEASURE_ROUNDS == 0)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        """The loop never returns by itself: once it ended, liveness must fail (the kubelet restarts us)."""
        if task.cancelled():
            self.telemetry.fail("stopped")
            return
        exc = task.exception()
        self.telemetry.fail(f"crashed: {type(exc).__name__}: {exc}" if exc else "returned")
        if exc is not None:
            self.log.error("loop_crashed", error=f"{type(exc).__name__}: {exc}")

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reload_poll_seconds)
            await self.reload()

    async def reload(self) -> ReloadResult:
        """Re-read the files and the watched objects; apply and report what changed."""
        # The set in force before, as an object (a reload that changes anything replaces it, one that changes
        # nothing keeps it): its targets are looked at only on a change, not at every poll (0.05 s per poll of
        # 5,000 policies, for nothing).
        old = self.store.policies
        result = self.store.reload()
        if result.changed:
            self._settle()
            before = {n: cp.policy.spec.target.ref().key for n, cp in old.items()}
            for name, cp in self.store.policies.items():
                if before.get(name) not in (None, cp.policy.spec.target.ref().key):
                    # Stabilization history of another target says nothing about this one.
                    self.controller.states.pop(name, None)
            await self.report_reload(result, leading=self.controller.leader.holds())
            self.sync_watches()
            # Only what the reload added or changed (``reload.renewed``): an edit of one policy among 5,000
            # evaluated all 5,000 in full at once.
            self.controller.trigger(renewed(old, self.store.policies), "reload")
        return result

    async def list_policy_objects(self) -> None:
        """``--once``: the ScalingPolicy objects as they are now (the long-running controller watches them)."""
        custom: Any = client.CustomObjectsApi(self.api)
        for spec in sorted(objects_mod.watch_specs(self.config.namespaces), key=lambda s: s.namespace):
            if spec.namespace:
                listing = await custom.list_namespaced_custom_object(spec.group, spec.version, spec.namespace,
                                                                     spec.plural)
            else:
                listing = await custom.list_cluster_custom_object(spec.group, spec.version, spec.plural)
            for obj in listing.get("items", []):
                self.objects.on_event("SYNC", obj)

    async def report_reload(self, result: ReloadResult, *, leading: bool) -> None:
        """Log, count and (when leading, so two replicas do not both write) emit an Event per rejection."""
        self.telemetry.policies.set(len(self.store.policies))
        for f in result.loaded:
            self.telemetry.reloads.labels("ok").inc()
            self.telemetry.invalid.labels(Path(f).name).set(0)
            self.log.info("policy_file_loaded", file=f)
        for f in result.removed:
            if _has_label(self.telemetry, Path(f).name):
                self.telemetry.invalid.remove(Path(f).name)
            self.log.info("policy_file_removed", file=f)
        for rej in result.rejected:
            self.telemetry.reloads.labels("invalid").inc()
            self.telemetry.invalid.labels(Path(rej.file).name).set(1)
            self.log.error("policy_file_rejected", file=rej.file, problems=list(rej.problems),
                           kept=[cp.name for cp in rej.kept])
            if not leading:
                continue
            regarding = [_target_ref(cp.policy.spec) for cp in rej.kept] or self._own_pod()
            for obj in regarding:
                await self.events.record(obj, type_="Warning", reason="InvalidPolicy", message=rej.message,
                                         action="Reload")
        for name in result.released:
            self.telemetry.set_condition(name, "OwnershipConflict", False)
            self.log.info("policy_released", policy=name)
        for c in result.held:
            # The condition on every replica; the Event from the leader only (two replicas would both write it).
            self.telemetry.set_condition(c.policy.name, "OwnershipConflict", True)
            message = f"policy {c.policy.name} is held, not evaluated: {c.message}"
            self.log.error("policy_held", policy=c.policy.name, file=c.file, line=c.line, problem=c.message)
            if leading:
                await self.events.record(_target_ref(c.policy.policy.spec), type_="Warning",
                                         reason="OwnershipConflict", message=message, action="Reload")

    def _own_pod(self) -> list[ObjectRef]:
        name, ns = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        return [ObjectRef("v1", "Pod", ns, name)] if name and ns else []

    # watches -------------------------------------------------------------------------------------------
    def watch_specs(self) -> set[WatchSpec]:
        """Targets' kinds in their namespaces, and Workloads where preemptible training lives."""
        specs: set[WatchSpec] = set()
        if self.config.watch_scaling_policies:
            specs |= objects_mod.watch_specs(self.config.namespaces)
        namespaces = set(self.config.namespaces)
        for cp in self.store.policies.values():
            spec = cp.policy.spec
            t = spec.target
            if namespaces and t.namespace not in namespaces:
                continue
            kind = kinds.of(t.kind)
            specs.add(WatchSpec(kind.group, kind.version, kind.plural, t.namespace))
            specs.add(pods_watch(t.namespace))  # a view's pods: the target watch does not see them
            if spec.capacity is not None:
                for p in spec.preemptible or []:
                    specs.add(WatchSpec("kueue.x-k8s.io", "v1beta2", "workloads", p.namespace))
        return specs

    def sync_watches(self) -> None:
        wanted = self.watch_specs()
        kube.reserve_watch_connections(self.api, len(wanted))  # each watch holds a connection: none taken from calls
        for spec in set(self.watchers) - wanted:
            _, task = self.watchers.pop(spec)
            task.cancel()
            self.telemetry.watch_stopped(spec.path)
        for spec in wanted - set(self.watchers):
            self.telemetry.watch_started(spec.path)
            w = Watcher(
                self.api, spec, self._on_watch_event,
                on_error=functools.partial(self._on_watch_error, spec.path),
                on_ok=functools.partial(self.telemetry.watch_ok, spec.path),
                backoff=kube.Backoff(rng=self.rng), now=self.clock.monotonic,
            )
            self.watchers[spec] = (w, asyncio.create_task(w.run(), name=f"watch {spec.path}"))

    def _live_watches(self) -> dict[str, float]:
        """The target watches that vouch for the views read since they began (``Watcher.vouches``), by
        ``observer.watch_key`` (kind, namespace): the observer's ``vouched``. A view is its target and its pods,
        so a target watch vouches only while the pod watch of its namespace does too, and from the later of
        the two beginnings."""
        now = self.clock.monotonic()
        out: dict[str, float] = {}
        for spec, (w, _) in self.watchers.items():
            kind = kinds.by_resource(spec.group, spec.plural)
            if kind is None or kind.version != spec.version or not spec.namespace:
                continue
            since = w.vouches(now)
            pods = self.watchers.get(pods_watch(spec.namespace))
            pods_since = None if pods is None else pods[0].vouches(now)
            if since is not None and pods_since is not None:
                out[watch_key(kind.kind, spec.namespace)] = max(since, pods_since)
        return out

    def _why_unvouched(self, key: str) -> str:
        """Why ``_live_watches`` has no entry for this ``observer.watch_key``: ``target_`` or ``pods_`` (its
        namespace's pod watch) and that watch's ``Watcher.why_not``; ``no_watch`` / ``no_pod_watch`` when one
        is not running."""
        now = self.clock.monotonic()
        for spec, (w, _) in self.watchers.items():
            kind = kinds.by_resource(spec.group, spec.plural)
            if kind is None or kind.version != spec.version or watch_key(kind.kind, spec.namespace) != key:
                continue
            pods = self.watchers.get(pods_watch(spec.namespace))
            if (why := w.why_not(now)) is not None:
                return f"target_{why}"
            if pods is None:
                return "no_pod_watch"
            return f"pods_{pods[0].why_not(now) or 'vouching'}"
        return "no_watch"

    def _on_watch_event(self, spec: WatchSpec, type_: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if spec == pods_watch(spec.namespace):
            # A pod's change drops the views it touches (listed next read); no evaluation is woken: the target's
            # own counts did not move (those come with its event), and the next probe round screens afresh. A
            # (re)list's SYNC is no change: it moves the watch's ``live_from``, and views read before it are no
            # longer vouched for.
            if type_ != "SYNC":
                self.observer.pod_changed(self.controller.policies_in_namespace(spec.namespace), obj)
            return
        if spec.group == crd.GROUP and spec.plural == crd.PLURAL:
            # Hot reload is the watch: a changed object reloads now (a status-only change does nothing).
            if self.objects.on_event(type_, obj):
                task = asyncio.create_task(self.reload(), name="reload objects")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        if type_ == "SYNC" and self._first_list(spec):
            return
        if spec.plural == "workloads":
            # The change may be the very quota release the policies wait for: no cached picture predates it.
            self.training.invalidate()
            names = self.controller.policies_for_training(spec.namespace)
        elif (kind := kinds.by_resource(spec.group, spec.plural)) is not None:
            names = self.controller.policies_for_target(TargetRef(kind.kind, name, spec.namespace).key)
            # Probes must not screen on the view from before this change: the next read takes the target from
            # this event (its pods are listed then) and what it reads is kept from then on while the watch is live.
            self.observer.changed(names, None if type_ == "DELETED" else obj)
        else:
            names = []
        if names:
            self.controller.trigger(names, "watch")

    def _first_list(self, spec: WatchSpec) -> bool:
        """A target or Workload watch's first list is no change (``Watcher.first_list``): it neither drops kept views
        nor triggers evaluations. Treated as one, a namespace's first list of 5,000 Deployments triggered a second
        full evaluation of all 5,000 policies right after their first, and discarded the first pass's bulk read
        in flight (the bursts of thousands of full evaluations in the reaction bench whenever start-up outlasted
        its warm-up, 2026-12-07 12:39-12:55 UTC at load 9-13). Views read before the list are not vouched for by
        the watch (its ``live_from`` is the list's end): they age as unwatched ones do, within two periods, and
        every change after the list comes as an event. A relist's ``SYNC`` (an object that changed while the
        stream was gone) is a change, as before."""
        watcher = self.watchers.get(spec)
        return watcher is not None and watcher[0].first_list

    def _on_watch_error(self, path: str, what: str) -> None:
        self.telemetry.errors.labels("watch").inc()
        self.telemetry.watch_failed(path, what.removeprefix(f"watch {path}: "))
        self.log.warning("watch_error", error=what)


class InvalidatingActuator:
    """The cluster actuator, dropping the shared training picture after every write: a scale changes
    serving's reservation, a (de)activation the Workloads; no policy should decide on the picture before."""

    def __init__(self, inner: KubeActuator, shared: SharedTraining) -> None:
        self.inner = inner
        self.shared = shared
        self.refusals = inner.refusals

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> object:
        try:
            return await self.inner.scale(policy, decision)
        finally:
            self.shared.invalidate()

    async def training(self, policy: CompiledPolicy, decision: TrainingDecision) -> object:
        try:
            return await self.inner.training(policy, decision)
        finally:
            self.shared.invalidate()

    async def check_scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> object:
        return await self.inner.check_scale(policy, decision)  # stores nothing: the picture stands


def _target_ref(spec: Any) -> ObjectRef:
    ref: TargetRef = spec.target.ref()
    return kinds.of(ref.kind).object_ref(ref)


def _has_label(telemetry: Telemetry, file: str) -> bool:
    return any(
        s.labels.get("file") == file for m in telemetry.invalid.collect() for s in m.samples
    )
