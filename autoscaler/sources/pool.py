"""One ``MetricSource`` over all of them: resolves each signal's source, groups requests per backend,
reads every backend concurrently within one deadline, and reuses backends (connections, circuits) across
ticks. ``requests_for`` turns a policy into the requests of one tick.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autoscaler.core import catalog
from autoscaler.core.model import SignalReading
from autoscaler.core.sourcespec import (
    CloudMonitoringSourceSpec,
    GmpSourceSpec,
    PodsSourceSpec,
    PrometheusSourceSpec,
    SourceSpec,
)
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources.base import MetricSource, PodRef, Readings, SignalRequest, describe
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.prometheus import PrometheusSource


class MissingSource(ValueError):
    """A signal without ``source`` in a policy without a default ``spec.source``."""


#: Why a raw signal has no source, as the controller, ``observe`` and ``record`` all say it.
NO_SOURCE = "no source: set spec.source, the signal's source or the controller's defaultSource (--config)"


@dataclass(frozen=True, slots=True)
class Plan:
    """What one policy asks of its sources in one tick (``plan``)."""

    #: One request per raw signal that has a source.
    requests: tuple[SignalRequest, ...]
    #: The raw signals that have none (the controller reads them as ``NO_SOURCE``, ``record`` refuses them).
    missing: tuple[str, ...]


def plan(
    policy: ScalingPolicy,
    *,
    pods: tuple[PodRef, ...] = (),
    nodes: tuple[str, ...] = (),
    default: SourceSpec | None = None,
) -> Plan:
    """The one way a policy becomes source requests (``run``, ``observe``, ``record``): one request per raw
    signal (composites are the core's), its source resolved as the signal's own ``source``, else the policy's
    ``spec.source``, else ``default`` (the controller config's ``defaultSource``); and the names of the
    signals that have none."""
    spec = policy.spec
    ref = spec.target.ref()
    out: list[SignalRequest] = []
    missing: list[str] = []
    for sig in spec.signals:
        if sig.expr is not None:
            continue
        source = sig.source or spec.source or default
        if source is None:
            missing.append(sig.name)
            continue
        if sig.pool is not None and spec.signal_target(sig).ref() != ref:
            # Another pool's target (a policy with several targets): selected by its own name; the pods and
            # nodes given are the primary target's, so none are passed (a pods source then says so).
            out.append(SignalRequest(spec.signal_target(sig).ref(), sig, source))
            continue
        out.append(SignalRequest(ref, sig, source, pods=pods, nodes=nodes))
    return Plan(tuple(out), tuple(missing))


def requests_for(
    policy: ScalingPolicy,
    *,
    pods: tuple[PodRef, ...] = (),
    nodes: tuple[str, ...] = (),
    default: SourceSpec | None = None,
) -> list[SignalRequest]:
    """``plan``, refusing a policy with a signal that has no source (``MissingSource``)."""
    planned = plan(policy, pods=pods, nodes=nodes, default=default)
    refuse_missing(policy, planned)
    return list(planned.requests)


def refuse_missing(policy: ScalingPolicy, planned: Plan) -> None:
    """``MissingSource`` naming the first signal of ``planned`` without a source, as every command says it."""
    if planned.missing:
        raise MissingSource(f"policy {policy.metadata.name!r}: signal {planned.missing[0]!r}: {NO_SOURCE}")


def unavailable(request: SignalRequest) -> str | None:
    """Why the request's source cannot serve its preset (the catalog's reason, as ``validate`` prints it)."""
    preset = request.signal.preset
    if preset is None:
        return None
    return _unavailable(preset, request.source.type)


@functools.lru_cache(maxsize=1024)
def _unavailable(preset: str, place: str) -> str | None:
    why = catalog.get(preset).why_unavailable(place)
    return None if why is None else f"preset {preset} cannot be read from a {place} source: {why}"


class _Waiting(NamedTuple):
    """A ``read`` call waiting for the coalescing window to close."""

    requests: list[SignalRequest]
    deadline_s: float
    future: asyncio.Future[Readings]


def _backend_key(spec: SourceSpec) -> str:
    # One pods backend for every pods spec (it fetches per URL); one per distinct API endpoint otherwise.
    if isinstance(spec, PodsSourceSpec):
        return "pods"
    return spec.model_dump_json()


class SourcePool:
    """Implements ``MetricSource`` by fanning out to one backend per distinct source spec."""

    def __init__(self, factory: Callable[[SourceSpec], MetricSource] | None = None, *, coalesce_s: float = 0.0) -> None:
        """``coalesce_s`` > 0 merges the ``read`` calls arriving within that window into one batch per
        backend, so a caller reading policy by policy still sends one query per signal for all targets."""
        self._factory = factory or default_factory
        self._backends: dict[str, MetricSource] = {}
        self._coalesce_s = coalesce_s
        self._pending: list[_Waiting] = []
        self._flush: asyncio.Task[None] | None = None

    def backend(self, spec: SourceSpec) -> MetricSource:
        key = _backend_key(spec)
        found = self._backends.get(key)
        if found is None:
            found = self._factory(spec)
            self._backends[key] = found
        return found

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        if self._coalesce_s <= 0:
            return await self._read_now(requests, deadline_s=deadline_s)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Readings] = loop.create_future()
        self._pending.append(_Waiting(list(requests), deadline_s, future))
        if self._flush is None:
            self._flush = loop.create_task(self._flush_later())
        return await future

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._coalesce_s)
        pending, self._pending, self._flush = self._pending, [], None
        everything = [r for waiting in pending for r in waiting.requests]
        # The window ate into every caller's deadline; the shortest one left bounds the batch.
        deadline_s = max(0.001, min(waiting.deadline_s for waiting in pending) - self._coalesce_s)
        try:
            readings = await self._read_now(everything, deadline_s=deadline_s)
        except BaseException as exc:
            for waiting in pending:
                if not waiting.future.done():
                    waiting.future.set_exception(exc)
            raise
        for waiting in pending:
            if not waiting.future.done():  # a caller that gave up (cancelled) gets nothing
                waiting.future.set_result({r.key: readings[r.key] for r in waiting.requests})

    async def _read_now(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        groups: dict[str, list[SignalRequest]] = {}
        out: Readings = {}
        for r in requests:
            why = unavailable(r)
            if why is not None:
                out[r.key] = SignalReading(None, None, describe(r.source), why)
                continue
            groups.setdefault(_backend_key(r.source), []).append(r)
        keys = list(groups)
        results = await asyncio.gather(
            *(self.backend(groups[k][0].source).read(groups[k], deadline_s=deadline_s) for k in keys),
            return_exceptions=True,
        )
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation and KeyboardInterrupt go through
                # A bug in a backend must not take the others down: its signals are unknown.
                for r in groups[key]:
                    out[r.key] = SignalReading(
                        None, None, describe(r.source), f"internal error: {type(result).__name__}: {result}"
                    )
                continue
            out.update(result)
        for r in requests:  # every request answered, whatever a backend did
            if r.key not in out:
                out[r.key] = SignalReading(None, None, describe(r.source), "no reading returned")
        return out

    async def aclose(self) -> None:
        if self._flush is not None:
            await self._flush
        backends, self._backends = list(self._backends.values()), {}
        for b in backends:
            await b.aclose()


def default_factory(spec: SourceSpec) -> MetricSource:
    if isinstance(spec, PrometheusSourceSpec | GmpSourceSpec):
        return PrometheusSource(spec)
    if isinstance(spec, CloudMonitoringSourceSpec):
        return CloudMonitoringSource(spec)
    assert isinstance(spec, PodsSourceSpec)
    return PodsSource()
