"""``autoscaler observe`` and ``autoscaler record``: what the controller sees now, and signals over a past range.

``observe`` shows, once per evaluation period (or ``--once``), what ``autoscaler run`` would see and decide:
per target each signal's value, age, source and state, plus the decision the policy would take on its first
evaluation. It changes nothing. The observation itself is the controller's: ``autoscaler.commands.observe``
(the command above this engine, which may import the controller where this layer may not) passes in an
``Observing`` built on the loop's own ``PolicyObserver`` (``controller.lookups.observing``): the same target
reads, the same source requests, the same training and quota picture, the same ``Observation``; outside a
cluster its target reader answers ``--replicas`` (or an unknown count) and there is no training.

``record`` saves, per signal, one Prometheus ``query_range`` response body (``<signal>.json``) for the
policy's target over ``--start``..``--end``: the input ``autoscaler replay`` reads. It opens the same observer
(``Observing.plan``): the requests it queries over the range are the ones the controller's observer sends for
that target (the same source resolution with the config's ``defaultSource``, the same signals, the same per-pod
query), and in a cluster the pods it read are selected beside the target's pod-name pattern. Recorded series,
replayed, give the core the input ``run`` gives it on the same data (tests/replay/test_record_path.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import yaml
from prometheus_api_client import PrometheusConnect
from pydantic import ValidationError

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SignalValue,
)
from autoscaler.core.signals import SignalJudge
from autoscaler.core.sourcespec import CloudMonitoringSourceSpec, GmpSourceSpec, PrometheusSourceSpec, SourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile import loader
from autoscaler.sources.base import MetricSource, SignalRequest, describe
from autoscaler.sources.circuit import PermanentError, TransientError
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from autoscaler.sources.pool import MissingSource, Plan, SourcePool, refuse_missing, requests_for
from autoscaler.sources.prometheus import GMP_SCOPE, GMP_URL, replica_queries, target_query

#: The Workloads the controller holds down (its marks on them), for the policies shown; one dict per Workload.
HeldLookup = Callable[[Sequence[ScalingPolicy]], Awaitable[list[dict[str, Any]]]]


class Observed(NamedTuple):
    """One policy as the controller's observer sees it."""

    #: The core's input, exactly as ``autoscaler run`` builds it; None when it cannot be built (``failed``).
    observation: Observation | None
    #: The raw signal readings (shown even when the observation could not be built).
    readings: Mapping[str, SignalReading]
    #: The target's replica status when it was read.
    replicas: ReplicaStatus | None
    failed: LookupFailed | None = None


@dataclass(frozen=True)
class Planned:
    """One policy's reads as the controller's observer plans them (``Observing.plan``): what ``record`` queries."""

    #: The requests the observer sends for the target (with its pods, in a cluster), and signals without a source.
    plan: Plan
    #: The target's replica status when it was read.
    replicas: ReplicaStatus | None
    #: Why the target could not be read (the plan then has no pods: the pod-name pattern selects them).
    failed: LookupFailed | None = None


class Observing(Protocol):
    """The controller's observer as ``observe`` and ``record`` use it (``controller.lookups.observing``)."""

    #: The Workloads the controller holds down, against a cluster (None outside one).
    held: HeldLookup | None

    async def observe(self, policies: Sequence[ScalingPolicy]) -> list[Observed]: ...

    async def plan(self, policies: Sequence[ScalingPolicy]) -> list[Planned]:
        """Each policy's target and the requests the observer would send for it, without reading them."""
        ...


@dataclass(frozen=True)
class ObserverOptions:
    """How to open the controller's observer for ``observe`` or ``record``."""

    #: Kubernetes credentials (None: ``$KUBECONFIG``, in-cluster, ``~/.kube/config``).
    kubeconfig: str | None
    #: ``--replicas``: a fixed count outside a cluster (None: read it, or unknown).
    replicas: int | None
    #: The controller config's ``defaultSource`` (``--config``).
    default_source: SourceSpec | None
    deadline_s: float
    #: False: no API server is asked (as when ``replicas`` is given).
    cluster: bool


#: Opens the observer over a source; raises ``ClusterUnavailable`` when the cluster's credentials are unusable.
ObservingFactory = Callable[[MetricSource, ObserverOptions], AbstractAsyncContextManager[Observing]]

#: The controller config's ``defaultSource`` from a config file (``--config``), as ``run`` reads it; raises
#: ``UsageError``. The command-line layer passes the controller's loader in (this layer may not import it).
ConfigSource = Callable[[str], SourceSpec | None]

#: Makes the Cloud Monitoring source ``record`` reads a range from (tests pass one over a fake server).
CloudMonitoringFactory = Callable[[CloudMonitoringSourceSpec], CloudMonitoringSource]

#: Prometheus refuses range queries over 11,000 points per series.
MAX_POINTS = 11_000
#: The files ``record`` writes the target's replica counts to, the names replay reads them by
#: (``replay.traces.REPLICAS`` and ``READY``): the count set on the target, and its ready replicas.
REPLICAS_FILE = "replicas.json"
READY_FILE = "replicas_ready.json"


class UsageError(Exception):
    """Bad input from the user: one line, exit 1."""


class ClusterUnavailable(Exception):
    """No usable Kubernetes credentials (or API server) for the replica lookup."""


class LookupFailed(Exception):
    """The replica count of one target could not be read; the message says why."""


class NotInCluster(LookupFailed):
    """No cluster was asked (none found, or ``--replicas``), and no count given: unknown, not a failure of one."""


class ClusterUnreachable(LookupFailed):
    """The API server did not answer at all (refused, timed out): ``observe --once`` then exits 1, where a
    server's own answer (404: no such target) is shown as an unknown decision with exit 0."""


# ----------------------------------------------------------------------------------------------- observe


#: Why a decision is unknown outside a cluster without ``--replicas``.
NO_REPLICAS = "pass --replicas N, or --kubeconfig to read it from the cluster"


def _signal_json(v: SignalValue) -> dict[str, Any]:
    return {
        "value": v.value,
        "age_s": None if v.age_s is None else round(v.age_s, 3),
        "source": v.source,
        "state": v.state.value,
        "reason": v.reason,
    }


def _decision(policy: ScalingPolicy, observed: Observed, now: float) -> dict[str, Any]:
    if observed.observation is None:
        why = observed.failed or NO_REPLICAS
        return {"state": "unknown", "reason": f"current replica count unknown: {why}"}
    try:
        compiled = compile_policy(policy)
        # The controller's first evaluation of the policy: its decide, on its observation, from a fresh state.
        decisions, _ = decide(compiled, observed.observation, PolicyState(), now)
    except Exception as exc:  # a policy type not available, or a bug: say so, keep showing the signals
        return {
            "state": "unavailable",
            "reason": f"policy type {policy.spec.policy.type!r} cannot decide: {type(exc).__name__}: {exc}",
        }
    scale = next(d for d in decisions if isinstance(d, ScaleDecision))
    return {
        "state": "ok",
        "current": scale.current,
        "desired": scale.desired,
        "reason": scale.reason.value,
        "message": scale.message,
        "note": "first evaluation: no stabilization history",
    }


async def observe_once(
    policies: Sequence[ScalingPolicy], observing: Observing, *, clock: Callable[[], float] = time.time,
    unreachable: list[str] | None = None,
) -> dict[str, Any]:
    """One observation of every policy: ``{"targets": [...]}`` as ``observe --json`` prints it, and, against a
    cluster, ``"held"``: the Workloads the controller holds down and why. Targets whose API server did not
    answer at all are added to ``unreachable``."""
    found = await observing.observe(policies)
    if unreachable is not None:
        unreachable.extend(str(o.failed) for o in found if isinstance(o.failed, ClusterUnreachable))
    now = clock()
    out = []
    for policy, observed in zip(policies, found, strict=True):
        # The core's one rule: per-pod readings combined against the ready pods, then judged (as decide does).
        judge = SignalJudge(policy.spec)
        judged = judge.judge_all(judge.combine(observed.readings, observed.replicas, now), now)
        out.append(
            {
                "target": policy.spec.target.ref().key,
                "policy": policy.metadata.name,
                "signals": {name: _signal_json(v) for name, v in judged.items()},
                "decision": _decision(policy, observed, now),
            }
        )
    view: dict[str, Any] = {"time": now, "targets": out}
    if observing.held is not None:
        try:
            view["held"] = await observing.held(policies)
        except Exception as exc:  # Kueue unreadable: the signals and decisions still show
            view["held_error"] = f"{type(exc).__name__}: {exc}"
    return view


def _fmt_value(v: Any) -> str:
    if v is None:
        return "unknown"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def render(view: dict[str, Any]) -> str:
    """The human form of ``observe_once``'s result."""
    lines = []
    for t in view["targets"]:
        lines.append(f"{t['target']}  (policy {t['policy']})")
        width = max((len(n) for n in t["signals"]), default=0)
        for name, s in t["signals"].items():
            age = "" if s["age_s"] is None else f"age {s['age_s']:.1f}s"
            why = f"  {s['reason']}" if s["state"] != "ok" else ""
            lines.append(f"  {name:<{width}}  {_fmt_value(s['value']):>9}  {age:<11} {s['source']}{why}")
        d = t["decision"]
        if d["state"] == "ok":
            lines.append(f"  decision: {d['current']} → {d['desired']} ({d['reason']}): {d['message']}")
        else:
            lines.append(f"  decision: {d['state']}: {d['reason']}")
    if "held" in view:
        lines.append(f"training held down by the controller: {len(view['held']) or 'none'}")
        for h in view["held"]:
            since = "" if h["held_s"] is None else f" for {h['held_s']:.0f}s"
            state = "admitted, being evicted" if h["admitted"] else "evicted"
            cover = f"policy {h['policy']}" if h["covered"] else "no policy covers it: resumed once it fits"
            lines.append(f"  {h['workload']}  {h['chips']:g} {h['resource']} in {h['cluster_queue']}, {state}{since}; "
                         f"for {h['target']} ({cover}): {h['reason']}")
    if "held_error" in view:
        lines.append(f"training held down by the controller: unknown ({view['held_error']})")
    return "\n".join(lines)


def _default_source(args: argparse.Namespace) -> SourceSpec | None:
    """The config's ``defaultSource`` when ``--config`` is given (None without it)."""
    path: str | None = getattr(args, "config", None)
    loader_: ConfigSource | None = getattr(args, "config_source", None)
    if path is None or loader_ is None:
        return None
    return loader_(path)


def _load(path: str) -> list[ScalingPolicy]:
    try:
        policies = loader.load_file(path)
    except loader.PolicyFileError as exc:
        # One line: the first problem at its FILE:LINE:COL, and how many more `validate` would list.
        more = len(exc.problems) - 1
        tail = f" (and {more} more; run autoscaler validate {path})" if more > 0 else ""
        raise UsageError(f"{exc.problems[0] if exc.problems else exc}{tail}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, ValidationError, ValueError) as exc:
        first = str(exc).strip().splitlines()
        raise UsageError(f"{path} is not a valid policy file: {' '.join(first[:1])}") from None
    if not policies:
        raise UsageError(f"{path} holds no ScalingPolicy documents")
    return policies


async def _opened(stack: contextlib.AsyncExitStack, args: argparse.Namespace, pool: SourcePool) -> Observing:
    """The controller's observer for ``observe`` and ``record``, kept open on ``stack``: against the cluster
    unless ``--replicas`` is given or no credentials are found; credentials named and unusable are an error."""
    factory: ObservingFactory = args.observing
    kubeconfig: str | None = getattr(args, "kubeconfig", None)
    replicas: int | None = getattr(args, "replicas", None)

    async def opened(cluster: bool) -> Observing:
        deadline: float = getattr(args, "deadline", 5.0)
        options = ObserverOptions(kubeconfig, replicas, args.default_source, deadline, cluster)
        return await stack.enter_async_context(factory(pool, options))

    try:
        return await opened(replicas is None)
    except ClusterUnavailable as exc:
        if kubeconfig is not None or os.environ.get("KUBECONFIG"):
            # Credentials were named (flag or environment) and are unusable: say so, as run does.
            raise UsageError(str(exc)) from None
        # Outside a cluster without credentials: show the signals; the decision says what is missing.
        return await opened(False)


async def _observe(args: argparse.Namespace, policies: list[ScalingPolicy]) -> None:
    pool = SourcePool()
    period = min(p.spec.evaluation_period_seconds for p in policies)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(pool.aclose)
        observing = await _opened(stack, args, pool)
        failed: list[str] = []
        while True:
            failed.clear()
            view = await observe_once(policies, observing, unreachable=failed)
            print(json.dumps(view) if args.json else render(view), flush=True)
            if args.once:
                if failed:
                    # The view is shown; the exit status and one line on stderr say the cluster was not read.
                    more = f" (and {len(failed) - 1} more targets)" if len(failed) > 1 else ""
                    raise UsageError(f"{failed[0]}{more}")
                return
            if not args.json:
                print(flush=True)
            await asyncio.sleep(period)


def run_observe(args: argparse.Namespace) -> int:
    try:
        policies = _load(args.policy)
        args.default_source = _default_source(args)
        for p in policies:
            requests_for(p, default=args.default_source)  # every signal has a source: fail before reading anything
        if args.replicas is not None and args.replicas < 0:
            raise UsageError("--replicas must be 0 or more")
        asyncio.run(_observe(args, policies))
    except (UsageError, MissingSource) as exc:
        print(f"autoscaler observe: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


# ------------------------------------------------------------------------------------------------ record

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``15``, ``15s``, ``1.5m``, ``2h`` → seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a duration; use seconds or e.g. 15s, 5m, 1h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str, *, now: float) -> float:
    """RFC 3339, unix seconds, ``now``, or relative to now (``-1h``, ``now-30m``) → unix seconds."""
    t = text.strip()
    if t == "now":
        return now
    rel = t.removeprefix("now")
    if rel.startswith("-"):
        return now - parse_duration(rel[1:])
    try:
        return float(t)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{text!r} is not a time; use RFC 3339 (2026-11-30T08:00:00Z), unix seconds, now or -1h"
        ) from None
    if parsed.tzinfo is None:
        raise UsageError(f"{text!r} has no time zone; add Z or an offset like +01:00")
    return parsed.timestamp()


def _connect(spec: PrometheusSourceSpec | GmpSourceSpec) -> PrometheusConnect:
    if isinstance(spec, PrometheusSourceSpec):
        return PrometheusConnect(url=spec.url.rstrip("/"), timeout=spec.timeout_seconds)
    import google.auth  # noqa: PLC0415 - only GMP recording needs it; slow to import
    import google.auth.transport.requests  # noqa: PLC0415

    creds: Any
    try:
        creds, _ = google.auth.default(scopes=[GMP_SCOPE])
        creds.refresh(google.auth.transport.requests.Request())
    except Exception as exc:  # google-auth's errors have no common public base
        raise UsageError(
            f"no Google credentials for GMP ({exc}); run `gcloud auth application-default login`"
        ) from None
    url = GMP_URL.format(project=spec.project, location=spec.location)
    return PrometheusConnect(url=url, headers={"Authorization": f"Bearer {creds.token}"}, timeout=spec.timeout_seconds)


async def plan_recording(args: argparse.Namespace, policies: Sequence[ScalingPolicy]) -> list[Planned]:
    """What ``record`` queries: each policy's requests as the controller's observer plans them, with the target
    (and its pods) read from the cluster when there is one. Nothing is read from the sources here."""
    pool = SourcePool()  # the observer's; record reads no instant value through it
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(pool.aclose)
        observing = await _opened(stack, args, pool)
        return await observing.plan(policies)


def record_query(request: SignalRequest, *, cluster: str | None) -> str:
    """The range query ``record`` saves for one of the observer's requests: the per-pod query ``run`` reads
    (one series per pod, so that replay combines and judges them by the core's one rule), with each pod's
    sample time beside its value, as ``run`` reads it (replay judges a pod's age by it, not by the step). Over a
    past range the target had other pods than now, so its pod-name pattern selects them as well as the pods
    just read."""
    return target_query(request, cluster=cluster, combined=False, history=True, times=True)


def record(
    policies: Sequence[ScalingPolicy],
    planned: Sequence[Planned],
    *,
    start: float,
    end: float,
    step: float | None,
    out: Path,
    cloud_monitoring: CloudMonitoringFactory = CloudMonitoringSource,
) -> list[str]:
    """Write ``<signal>.json`` per recordable signal of the observer's plan (per policy subdirectory when there
    are several); return one line per signal saying what happened."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory; pass a directory (it is created if missing)")
    report = []
    # Every query is answered before any file is written: a failure half-way (the second signal's query) left the
    # first signal's new file beside an older run's second, which replay then read together as one recording.
    staged = _Staged()
    for policy, found in zip(policies, planned, strict=True):
        refuse_missing(policy, found.plan)
        folder = out if len(policies) == 1 else out / policy.metadata.name
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--out {folder}: cannot create the directory: {exc.strerror or exc}") from None
        width = step or policy.spec.evaluation_period_seconds
        points = (end - start) / width
        if points > MAX_POINTS:
            raise UsageError(
                f"{points:.0f} points per series over the range at step {width:g}s; Prometheus allows "
                f"{MAX_POINTS}: use --step {math.ceil((end - start) / MAX_POINTS)} or a shorter range"
            )
        if found.failed is not None and not isinstance(found.failed, NotInCluster):
            report.append(f"target: {found.failed}; its pods are selected by their name pattern only")
        for req in found.plan.requests:
            if isinstance(req.source, CloudMonitoringSourceSpec):
                report.append(_record_cloud(req, req.source, folder, cloud_monitoring, staged, start=start, end=end))
            else:
                report.append(_record_one(req, folder, staged, start=start, end=end, width=width))
        report.append(_record_replicas(policy, found, folder, staged, start=start, end=end, width=width))
    staged.write()
    return report


def _record_one(
    req: SignalRequest, folder: Path, staged: _Staged, *, start: float, end: float, width: float
) -> str:
    src = req.source
    name = req.signal.name
    if not isinstance(src, PrometheusSourceSpec | GmpSourceSpec):
        # Pods keep no history.
        return f"{name}: skipped (source {src.type} keeps no history; prometheus, gmp and cloud-monitoring record)"
    result = _query_range(src, record_query(req, cluster=src.cluster), f"signal {name}", start=start, end=end,
                          width=width)
    path = staged.add(folder / f"{name}.json", result)
    samples = sum(len(s.get("values", [])) for s in result)
    return f"{name}: {len(result)} series, {samples} samples → {path}"


def _record_cloud(
    req: SignalRequest, spec: CloudMonitoringSourceSpec, folder: Path, factory: CloudMonitoringFactory,
    staged: _Staged, *, start: float, end: float,
) -> str:
    """A Cloud Monitoring signal over the range: each pod's samples at their own times
    (``CloudMonitoringSource.history``), as a query_range body replay reads."""
    name = req.signal.name

    async def read() -> list[dict[str, Any]]:
        source = factory(spec)
        try:
            return await source.history(req, start=start, end=end)
        finally:
            await source.aclose()

    try:
        result = asyncio.run(read())
    except (PermanentError, TransientError) as exc:
        raise UsageError(f"signal {name}: Cloud Monitoring: {exc}") from None
    path = staged.add(folder / f"{name}.json", result)
    samples = sum(len(s["values"]) for s in result)
    return f"{name}: {len(result)} series, {samples} samples from Cloud Monitoring → {path}"


def _record_replicas(
    policy: ScalingPolicy, found: Planned, folder: Path, staged: _Staged, *, start: float, end: float, width: float
) -> str:
    """The target's replica counts over the range, from kube-state-metrics in the first Prometheus/GMP source the
    policy reads (``replicas.json``: the count set on it, ``replicas_ready.json``: its ready replicas), which replay
    (recorded mode) takes as the current count at each evaluation. The API server keeps no history of them."""
    now = f"; {found.replicas.ready} ready now" if found.replicas is not None else ""
    fix = "add replicas.json (docs/replay.md) or run replay with --initial-replicas"
    target = policy.spec.target.ref()
    src = next((r.source for r in found.plan.requests if isinstance(r.source, PrometheusSourceSpec | GmpSourceSpec)),
               None)
    if src is None:
        return f"replicas: not recorded (no prometheus/gmp source to read kube-state-metrics from{now}): {fix}"
    queries = replica_queries(target, cluster=src.cluster)
    if queries is None:
        return (f"replicas: not recorded (kube-state-metrics exports no {target.kind.value} series; the API server "
                f"keeps no history{now}): {fix}")
    spec = _query_range(src, queries.spec, "replicas", start=start, end=end, width=width)
    if not spec:
        return (f"replicas: not recorded (no kube-state-metrics series for {target.key} in "
                f"{describe(src)}{now}): {fix}")
    ready = _query_range(src, queries.ready, "ready replicas", start=start, end=end, width=width)
    path = staged.add(folder / REPLICAS_FILE, spec)
    line = f"replicas: {sum(len(s.get('values', [])) for s in spec)} samples from kube-state-metrics → {path}"
    if ready:
        line += f", ready → {staged.add(folder / READY_FILE, ready)}"
    return line


def _query_range(
    src: PrometheusSourceSpec | GmpSourceSpec, query: str, what: str, *, start: float, end: float, width: float
) -> list[dict[str, Any]]:
    client = _connect(src)
    try:
        result: list[dict[str, Any]] = client.custom_query_range(
            query,
            start_time=dt.datetime.fromtimestamp(start, dt.UTC),
            end_time=dt.datetime.fromtimestamp(end, dt.UTC),
            step=f"{width:g}",
        )
    except Exception as exc:  # requests' and the client's exceptions: one line for the user
        raise UsageError(f"{what}: query_range on {client.url} failed: {exc}") from None
    finally:
        client.close()
    return result


class _Staged:
    """The files of one ``record``, written only once every query was answered (``write``), each to a temporary
    file first and then renamed into place: a failed query or a full disk leaves the folder as it was, never a
    mix of this run's files and an older run's, nor a cut file."""

    def __init__(self) -> None:
        self._files: list[tuple[Path, list[dict[str, Any]]]] = []

    def add(self, path: Path, result: list[dict[str, Any]]) -> Path:
        """Stage one ``query_range`` response body, as replay reads it, for ``path``."""
        self._files.append((path, result))
        return path

    def write(self) -> None:
        temporary: list[tuple[Path, Path]] = []
        try:
            for path, result in self._files:
                body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
                part = path.with_name(f".{path.name}.part")
                temporary.append((part, path))
                part.write_text(json.dumps(body))
        except OSError as exc:
            for part, _ in temporary:
                part.unlink(missing_ok=True)
            raise UsageError(f"cannot write {temporary[-1][1]}: {exc.strerror or exc}") from None
        for part, path in temporary:
            part.replace(path)


def run_record(args: argparse.Namespace) -> int:
    try:
        policies = _load(args.policy)
        now = time.time()
        start, end = parse_time(args.start, now=now), parse_time(args.end, now=now)
        if end <= start:
            raise UsageError(f"--end ({args.end}) must be after --start ({args.start})")
        step = None if args.step is None else parse_duration(args.step)
        if step is not None and step <= 0:
            raise UsageError("--step must be positive")
        args.default_source = _default_source(args)
        for p in policies:
            requests_for(p, default=args.default_source)  # every signal has a source: fail before reading anything
        planned = asyncio.run(plan_recording(args, policies))
        lines = record(policies, planned, start=start, end=end, step=step, out=Path(args.out))
    except (UsageError, MissingSource) as exc:
        print(f"autoscaler record: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    # Exit 1 when no signal was saved (the replica counts alone replay nothing).
    return 0 if any("→" in line and not line.startswith("replicas:") for line in lines) else 1
