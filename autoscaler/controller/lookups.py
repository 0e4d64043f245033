"""``autoscaler observe`` and ``record`` on the controller's own observer: what ``autoscaler run`` would see,
read-only.

``observe`` and ``record`` live with the sources, a layer below the controller; the command line passes
``observing`` in. ``record`` takes only the observer's plan (``ObserverView.plan``: the target read, and the
requests the loop would send for it), and queries those requests over a range.
It builds the loop's ``PolicyObserver`` (``controller.observer``) with the same readers ``Runtime`` gives it:
``KubeTargets`` for targets and pods (batched per namespace), the Kueue gate behind ``SharedTraining`` for the
training and quota picture, the one ``SourcePool`` for signals, the config's ``defaultSource``. So the
``Observation`` observe decides on is built by the same code, from the same reads, as the loop's
(tests/controller/test_observe_cluster.py compares the two). Outside a cluster (or with ``--replicas``) the
target reader answers the given count (no pods) or an unknown one, and there is no training. Nothing is
written: observe never calls an actuator.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from autoscaler.controller import kube
from autoscaler.controller.observer import (
    NoTraining,
    Planned,
    PolicyObserver,
    Prepared,
    SharedTraining,
    TrainingReader,
)
from autoscaler.controller.targets import KubeTargets, TargetView
from autoscaler.controller.workloads import KueueGate
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import ReplicaStatus, TargetRef
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources.base import MetricSource
from autoscaler.sources.command import (
    NO_REPLICAS,
    ClusterUnavailable,
    ClusterUnreachable,
    HeldLookup,
    LookupFailed,
    NotInCluster,
    Observed,
    ObserverOptions,
)
from autoscaler.sources.command import Planned as PlannedTarget

#: How long reading the targets may take before observe calls their counts unknown.
LOOKUP_TIMEOUT_S = 10.0


class FixedTargets:
    """The ``TargetReader`` outside a cluster: ``--replicas N`` ready replicas and no pods, or unknown."""

    def __init__(self, replicas: int | None) -> None:
        self.replicas = replicas

    async def observe(self, policy: CompiledPolicy) -> TargetView:
        return self._view()

    async def observe_ref(self, policy: CompiledPolicy, ref: TargetRef) -> TargetView:
        return self._view()

    async def observe_many(
        self, policies: Sequence[CompiledPolicy], *, known: Mapping[str, dict[str, Any]] | None = None
    ) -> dict[str, TargetView | Exception]:
        out: dict[str, TargetView | Exception] = {}
        for cp in policies:
            try:
                out[cp.name] = self._view()
            except LookupFailed as exc:
                out[cp.name] = exc
        return out

    def _view(self) -> TargetView:
        if self.replicas is None:
            raise NotInCluster(NO_REPLICAS)
        return TargetView(ReplicaStatus(spec=self.replicas, ready=self.replicas), ())


class ObserverView:
    """``sources.command.Observing`` on a ``PolicyObserver``: one bulk ``prepare`` (targets, then every
    signal in one source read), then ``observe`` per policy, exactly as a pass of the loop does."""

    def __init__(self, observer: PolicyObserver, *, held: HeldLookup | None = None) -> None:
        self.observer = observer
        self.held = held

    async def observe(self, policies: Sequence[ScalingPolicy]) -> list[Observed]:
        compiled = [compile_policy(p) for p in policies]
        found: dict[int, Observed] = {}
        # One prepare per group of distinct names (the observer keys by policy name; a file may repeat one).
        for group in _distinct(compiled):
            try:
                async with asyncio.timeout(LOOKUP_TIMEOUT_S + self.observer.deadline_s):
                    prepared = await self.observer.prepare(group)
            except TimeoutError:
                prepared = {cp.name: TimeoutError() for cp in group}
            for cp in group:
                found[id(cp)] = await self._one(cp, prepared.get(cp.name))
        return [found[id(cp)] for cp in compiled]

    async def plan(self, policies: Sequence[ScalingPolicy]) -> list[PlannedTarget]:
        """What the observer would read for each policy (``PolicyObserver.plan``), without reading it: the
        target and its pods as the loop reads them, and the loop's requests. A target that cannot be read
        leaves the requests without pods (the pod-name pattern selects them) and says why."""
        compiled = [compile_policy(p) for p in policies]
        found: dict[int, PlannedTarget] = {}
        for group in _distinct(compiled):
            try:
                async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                    planned = await self.observer.plan(group)
            except TimeoutError:
                planned = {cp.name: TimeoutError() for cp in group}
            for cp in group:
                part = planned.get(cp.name)
                if isinstance(part, Planned):
                    found[id(cp)] = PlannedTarget(part.plan, part.view.replicas)
                else:
                    failed = _failure(cp.policy.spec.target.ref(), part)
                    found[id(cp)] = PlannedTarget(self.observer.requests(cp, ()), None, failed)
        return [found[id(cp)] for cp in compiled]

    async def _one(self, cp: CompiledPolicy, part: Prepared | Exception | None) -> Observed:
        if not isinstance(part, Prepared):
            failed = _failure(cp.policy.spec.target.ref(), part)
            # The signals still show (a source with fixed endpoints or a query needs no pods).
            return Observed(None, await self.observer.read_signals(cp, ()), None, failed)
        try:
            observation = await self.observer.observe(cp, part)
        except Exception as exc:  # the training or quota read: run fails this evaluation the same way
            why = LookupFailed(f"cannot read the training and quota of {cp.name}: {_one_line(exc)}")
            return Observed(None, part.signals, part.replicas, why)
        return Observed(observation, observation.signals, observation.replicas)


def _distinct(compiled: list[CompiledPolicy]) -> list[list[CompiledPolicy]]:
    groups: list[list[CompiledPolicy]] = []
    for cp in compiled:
        group = next((g for g in groups if all(o.name != cp.name for o in g)), None)
        if group is None:
            groups.append(group := [])
        group.append(cp)
    return groups


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _failure(ref: TargetRef, exc: Exception | None) -> LookupFailed:
    """A failed target read in observe's words: the server's own answer, or an API server that did not answer."""
    if isinstance(exc, LookupFailed):
        return exc
    if isinstance(exc, kube.KubeError):
        return LookupFailed(f"cannot read {ref.key}: {exc}")
    if isinstance(exc, TimeoutError):
        return ClusterUnreachable(f"cannot read {ref.key}: the API server did not answer within {LOOKUP_TIMEOUT_S:g} s")
    if isinstance(exc, OSError | aiohttp.ClientError):
        return ClusterUnreachable(f"cannot read {ref.key}: cannot reach the API server: {_one_line(exc)}")
    return LookupFailed(f"cannot read {ref.key}: {type(exc).__name__}: {_one_line(exc) if exc else 'no answer'}")


@asynccontextmanager
async def observing(source: MetricSource, options: ObserverOptions) -> AsyncIterator[ObserverView]:
    """The controller's observer for ``observe`` and ``record``: against the cluster of ``options.kubeconfig``
    (else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``) when ``options.cluster`` and no ``replicas`` are
    given, else a fixed count."""
    default_source, deadline_s = options.default_source, options.deadline_s
    if options.replicas is not None or not options.cluster:
        yield ObserverView(PolicyObserver(targets=FixedTargets(options.replicas), training=NoTraining(),
                                          source=source, default_source=default_source, deadline_s=deadline_s))
        return
    try:
        api = await kube.connect(options.kubeconfig)
    except kube.KubeConfigError as exc:
        raise ClusterUnavailable(str(exc)) from None
    try:
        kube.with_deadlines(api, LOOKUP_TIMEOUT_S)
        gate = KueueGate(api)
        training: TrainingReader = SharedTraining(gate, now=time.monotonic)
        observer = PolicyObserver(targets=KubeTargets(api), training=training, source=source,
                                  default_source=default_source, deadline_s=deadline_s)

        async def held(policies: Sequence[ScalingPolicy]) -> list[dict[str, Any]]:
            """The Workloads the controller holds down, as ``autoscaler run`` finds them (``KueueGate.held``)."""
            found = await gate.held([compile_policy(p) for p in policies])
            return [
                {"workload": h.workload.key, "uid": h.workload.uid, "chips": h.workload.chips,
                 "resource": h.resource, "cluster_queue": h.cluster_queue, "admitted": h.workload.admitted,
                 "held_s": h.held_s, "policy": h.policy, "target": h.target, "target_uid": h.target_uid,
                 "covered": h.covered, "reason": h.reason}
                for h in found
            ]

        yield ObserverView(observer, held=held)
    finally:
        await api.close()
