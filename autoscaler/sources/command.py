"""``autoscaler observe`` and ``autoscaler record``: what the controller sees now, and signals over a past range.

``observe`` reads every signal of the given policies once per evaluation period (or ``--once``) through
the same sources the controller uses, judges them as the core does, and shows per target each signal's
value, age, source and state, plus the decision the policy would take. It changes nothing. The current
replica count (and, for the pods source, the target's pods) comes from ``--replicas`` outside a cluster, or
from the Kubernetes API: ``autoscaler.commands.observe`` (the command above this engine) passes the
controller's lookup in as ``args.cluster``, since this layer may not import the controller.

``record`` saves, per signal, one Prometheus ``query_range`` response body (``<signal>.json``) for the
policy's target over ``--start``..``--end``: the input ``autoscaler replay`` reads.
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
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from prometheus_api_client import PrometheusConnect
from pydantic import ValidationError

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    ScaleDecision,
    SignalValue,
    TargetRef,
)
from autoscaler.core.signals import SignalJudge
from autoscaler.core.sourcespec import GmpSourceSpec, PrometheusSourceSpec, SourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile import loader
from autoscaler.sources.base import MetricSource, PodRef
from autoscaler.sources.pool import MissingSource, SourcePool, requests_for
from autoscaler.sources.prometheus import GMP_SCOPE, GMP_URL, target_query

#: The current replica count of a target, or None when unknown.
ReplicaLookup = Callable[[TargetRef], Awaitable[ReplicaStatus | None]]
#: The pods of a target (names, metrics URLs, leader or worker), for the pods source and pod attribution.
PodLookup = Callable[[TargetRef], Awaitable[tuple[PodRef, ...]]]

#: Opens lookups against a cluster from an optional kubeconfig path; raises ``ClusterUnavailable``.
#: The Workloads the controller holds down (its marks on them), for the policies shown; one dict per Workload.
HeldLookup = Callable[[Sequence[ScalingPolicy]], Awaitable[list[dict[str, Any]]]]


class Lookups(NamedTuple):
    """What ``observe`` reads from a cluster."""

    replicas: ReplicaLookup
    pods: PodLookup
    held: HeldLookup | None = None


ClusterLookups = Callable[[str | None], AbstractAsyncContextManager[Lookups]]

#: The controller config's ``defaultSource`` from a config file (``--config``), as ``run`` reads it; raises
#: ``UsageError``. The command-line layer passes the controller's loader in (this layer may not import it).
ConfigSource = Callable[[str], SourceSpec | None]

#: Prometheus refuses range queries over 11,000 points per series.
MAX_POINTS = 11_000


class UsageError(Exception):
    """Bad input from the user: one line, exit 1."""


class ClusterUnavailable(Exception):
    """No usable Kubernetes credentials (or API server) for the replica lookup."""


class LookupFailed(Exception):
    """The replica count of one target could not be read; the message says why."""


class ClusterUnreachable(LookupFailed):
    """The API server did not answer at all (refused, timed out): ``observe --once`` then exits 1, where a
    server's own answer (404: no such target) is shown as an unknown decision with exit 0."""


# ----------------------------------------------------------------------------------------------- observe


async def _unknown_replicas(target: TargetRef) -> ReplicaStatus | None:
    return None


async def _no_pods(target: TargetRef) -> tuple[PodRef, ...]:
    return ()


def fixed_replicas(n: int | None) -> ReplicaLookup:
    async def lookup(target: TargetRef) -> ReplicaStatus | None:
        return None if n is None else ReplicaStatus(spec=n, ready=n)

    return lookup


def _signal_json(v: SignalValue) -> dict[str, Any]:
    return {
        "value": v.value,
        "age_s": None if v.age_s is None else round(v.age_s, 3),
        "source": v.source,
        "state": v.state.value,
        "reason": v.reason,
    }


def _decision(policy: ScalingPolicy, observation: Observation | None, now: float) -> dict[str, Any]:
    if observation is None:
        return {
            "state": "unknown",
            "reason": "current replica count unknown: pass --replicas N, or --kubeconfig to read it from the cluster",
        }
    try:
        compiled = compile_policy(policy)
        decisions, _ = decide(compiled, observation, PolicyState(), now)
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
    policies: Sequence[ScalingPolicy],
    *,
    source: MetricSource,
    deadline_s: float,
    replicas: ReplicaLookup = _unknown_replicas,
    pods: PodLookup = _no_pods,
    clock: Callable[[], float] = time.time,
    default_source: SourceSpec | None = None,
    held: HeldLookup | None = None,
) -> dict[str, Any]:
    """One observation of every policy: ``{"targets": [...]}`` as ``observe --json`` prints it, and, against a
    cluster, ``"held"``: the Workloads the controller holds down and why."""
    targets = [p.spec.target.ref() for p in policies]
    found_pods = await asyncio.gather(*(pods(t) for t in targets))
    requests = []
    for policy, target_pods in zip(policies, found_pods, strict=True):
        requests.extend(requests_for(policy, pods=target_pods, default=default_source))
    readings = await source.read(requests, deadline_s=deadline_s)
    now = clock()
    counts = await asyncio.gather(*(replicas(t) for t in targets), return_exceptions=True)
    out = []
    for policy, target, count in zip(policies, targets, counts, strict=True):
        if isinstance(count, BaseException) and not isinstance(count, LookupFailed):
            raise count
        mine = {name: r for (key, name), r in readings.items() if key == target.key}
        known = None if isinstance(count, BaseException) else count
        # The core's one rule: per-pod readings combined against the ready pods, then judged (as decide does).
        judge = SignalJudge(policy.spec)
        judged = judge.judge_all(judge.combine(mine, known, now), now)
        if isinstance(count, LookupFailed):
            decision = {"state": "unknown", "reason": f"current replica count unknown: {count}"}
        else:
            observation = None if count is None else Observation(target=target, replicas=count, signals=mine)
            decision = _decision(policy, observation, now)
        out.append(
            {
                "target": target.key,
                "policy": policy.metadata.name,
                "signals": {name: _signal_json(v) for name, v in judged.items()},
                "decision": decision,
            }
        )
    view: dict[str, Any] = {"time": now, "targets": out}
    if held is not None:
        try:
            view["held"] = await held(policies)
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


async def _observe(args: argparse.Namespace, policies: list[ScalingPolicy]) -> None:
    pool = SourcePool()
    period = min(p.spec.evaluation_period_seconds for p in policies)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(pool.aclose)
        replicas: ReplicaLookup = fixed_replicas(args.replicas)
        pods: PodLookup = _no_pods
        held: HeldLookup | None = None
        cluster: ClusterLookups | None = getattr(args, "cluster", None)
        kubeconfig: str | None = getattr(args, "kubeconfig", None)
        if args.replicas is None and cluster is not None:
            try:
                found = await stack.enter_async_context(cluster(kubeconfig))
                replicas, pods, held = found.replicas, found.pods, found.held
            except ClusterUnavailable as exc:
                if kubeconfig is not None or os.environ.get("KUBECONFIG"):
                    # Credentials were named (flag or environment) and are unusable: say so, as run does.
                    raise UsageError(str(exc)) from None
                # Outside a cluster without credentials: show the signals; the decision says what is missing.
        failed: list[str] = []
        replicas = _noting_failures(replicas, failed)
        while True:
            failed.clear()
            view = await observe_once(
                policies, source=pool, deadline_s=args.deadline, replicas=replicas, pods=pods,
                default_source=args.default_source, held=held,
            )
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


def _noting_failures(lookup: ReplicaLookup, failed: list[str]) -> ReplicaLookup:
    async def noted(target: TargetRef) -> ReplicaStatus | None:
        try:
            return await lookup(target)
        except ClusterUnreachable as exc:
            failed.append(str(exc))
            raise

    return noted


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


def record(
    policies: Sequence[ScalingPolicy],
    *,
    start: float,
    end: float,
    step: float | None,
    out: Path,
    default_source: SourceSpec | None = None,
) -> list[str]:
    """Write ``<signal>.json`` per recordable signal (per policy subdirectory when there are several);
    return one line per signal saying what happened."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory; pass a directory (it is created if missing)")
    report = []
    for policy in policies:
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
        for req in requests_for(policy, default=default_source):
            src = req.source
            name = req.signal.name
            if not isinstance(src, PrometheusSourceSpec | GmpSourceSpec):
                report.append(f"{name}: skipped (source {src.type} keeps no history; only prometheus/gmp record)")
                continue
            # One series per pod (a raw query as written): replay combines them by the core's one rule and
            # judges each pod's age, as the controller does.
            query = target_query(req, cluster=src.cluster, combined=False)
            client = _connect(src)
            try:
                result = client.custom_query_range(
                    query,
                    start_time=dt.datetime.fromtimestamp(start, dt.UTC),
                    end_time=dt.datetime.fromtimestamp(end, dt.UTC),
                    step=f"{width:g}",
                )
            except Exception as exc:  # requests' and the client's exceptions: one line for the user
                raise UsageError(f"signal {name}: query_range on {client.url} failed: {exc}") from None
            finally:
                client.close()
            body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
            path = folder / f"{name}.json"
            try:
                path.write_text(json.dumps(body))
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
            samples = sum(len(s.get("values", [])) for s in result)
            report.append(f"{name}: {len(result)} series, {samples} samples → {path}")
    return report


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
        lines = record(
            policies, start=start, end=end, step=step, out=Path(args.out), default_source=_default_source(args)
        )
    except (UsageError, MissingSource) as exc:
        print(f"autoscaler record: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0 if any("→" in line for line in lines) else 1
