"""The controller's own metrics (prometheus_client) and its HTTP endpoints: /metrics, /healthz, /readyz.

Each ``Telemetry`` owns a private ``CollectorRegistry`` so two controllers in one test process (leader
handover) do not share counters. Label sets are bounded: policy names, Reason values, action kinds and
results; never pod names or free text.

- ``/healthz`` (liveness): fed by the control loop alone (``tick`` at the end of each iteration, also while
  waiting to lead): 503 when it made no progress within ``stall_after_s``, or at once when the loop task died
  (``fail``). Nothing else ticks it: a reload task alive beside a wedged loop must not keep the pod alive.
- ``/readyz`` (readiness): the first policy load is done and every watch has had its first try (listed, or
  failed). A failing watch does not make the replica unready (its policies still run on their periods, and
  unrelated policies are not affected); the body names it (``degraded: watch ... failing: 403 ...``) and
  ``autoscaler_watch_up{watch}`` is 0. A standby (non-leader) replica is ready too: readiness gates rollouts,
  and a standby that is never ready would block every rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

#: Loop latency buckets (seconds): a tick is ms when signals are cached, up to the 5 s signal deadline.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Telemetry:
    """Metrics plus health state; ``now`` is the loop clock (monotonic seconds)."""

    now: Callable[[], float]
    stall_after_s: float = 60.0
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    ready_checks: dict[str, bool] = field(default_factory=dict)
    last_tick: float | None = None
    #: Why the loop can make no progress any more (its task died); /healthz fails at once.
    dead: str | None = None
    #: Per watch path: None while it has not tried yet, "" while healthy, else its last error.
    watches: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        r = self.registry
        self.decisions = Counter(
            "autoscaler_decisions", "Decisions made, by policy and reason.", ["policy", "reason"], registry=r
        )
        self.actions = Counter(
            "autoscaler_actions",
            "Writes attempted, by policy, action (scale, hpa_floor, deactivate, reactivate) and result "
            "(ok, error, refused, dry_run).",
            ["policy", "action", "result"],
            registry=r,
        )
        self.errors = Counter(
            "autoscaler_errors", "Errors by component (observe, act, watch, leader, events, reload).",
            ["component"], registry=r,
        )
        self.loop_latency = Histogram(
            "autoscaler_loop_latency_seconds",
            "Time of one policy evaluation by phase (observe, decide, act) and in total; "
            "prepare: the bulk read of a pass (targets and signals of all its policies).",
            ["phase"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.signal_age = Gauge(
            "autoscaler_signal_age_seconds", "Age of the sample last acted on, per policy and signal.",
            ["policy", "signal"], registry=r,
        )
        self.desired = Gauge(
            "autoscaler_desired_replicas", "Replicas the last decision wanted.", ["policy"], registry=r
        )
        self.current = Gauge(
            "autoscaler_current_replicas", "The target's replicas the last decision started from.", ["policy"],
            registry=r,
        )
        self.signal_value = Gauge(
            "autoscaler_signal_value", "The value last acted on, per policy and signal (absent while unknown).",
            ["policy", "signal"], registry=r,
        )
        self.policies = Gauge("autoscaler_policies_loaded", "Policies in force.", registry=r)
        self.reloads = Counter(
            "autoscaler_policy_reloads", "Policy directory reloads by result (ok, invalid).", ["result"],
            registry=r,
        )
        self.invalid = Gauge(
            "autoscaler_policy_file_invalid", "1 while this policy file is rejected (the last good stays).",
            ["file"], registry=r,
        )
        self.leader = Gauge("autoscaler_leader", "1 while this replica holds the lease.", registry=r)
        self.triggers = Counter(
            "autoscaler_evaluation_triggers", "Why an evaluation ran (period, signal, watch, reload).", ["trigger"],
            registry=r,
        )
        self.full_evaluations = Counter(
            "autoscaler_full_evaluations",
            "Evaluations run in full (not a probe's screen standing for the periodic one), by why: first, "
            "watch, reload, probe (a screen would act), period (a policy probes do not screen), or, for a screened "
            "policy the periodic pass took over, why no screen stood for it (not_screened, signal_failed, "
            "unreadable, would_act, view_replaced, busy, decide_failed).", ["why"], registry=r,
        )
        self.view_reads = Counter(
            "autoscaler_target_view_reads",
            "Target views read from the API server for probes and passes, by why the kept view did not serve: "
            "none (never read), dropped_target (a target event), dropped_pod (a pod event), failed (the last read "
            "failed), not_kept (the last read was overtaken by a change), young (read again before it aged), "
            "vouched (still vouched for, read again by a pass or the viewResyncSeconds re-read), aged_no_watch, "
            "aged_no_pod_watch, "
            "aged_target_<why>, aged_pods_<why> (why the target watch, or its namespace's pod watch, does not "
            "vouch: listing, broken, silent), aged_before_live (read before its watches were last live).",
            ["why"], registry=r,
        )
        self.conditions = Gauge(
            "autoscaler_policy_condition",
            "1 while a policy has this condition (OwnershipConflict: held because an earlier policy scales its "
            "target).", ["policy", "type"], registry=r,
        )
        self.watch_up = Gauge(
            "autoscaler_watch_up", "1 while this watch (by path) lists and streams; 0 while it fails.", ["watch"],
            registry=r,
        )
        self.view_resyncs = Counter(
            "autoscaler_view_resyncs", "Target views a live watch vouched for, read again (viewResyncSeconds).",
            registry=r,
        )
        self.view_drift = Counter(
            "autoscaler_view_drift",
            "Target views a live watch vouched for that a re-read found different from the target, with no event "
            "to explain it: a bug in how views are kept (the log line view_drift names the policy and what differed).",
            registry=r,
        )
        self.watch_failures = Counter(
            "autoscaler_watch_failures", "Failed list or watch requests, by watch path.", ["watch"], registry=r
        )

    # health -------------------------------------------------------------------------------------------
    def tick(self) -> None:
        self.last_tick = self.now()

    def fail(self, why: str) -> None:
        """The loop can make no more progress (its task ended): liveness fails from now on."""
        self.dead = why

    def healthy(self) -> bool:
        return (
            self.dead is None and self.last_tick is not None and self.now() - self.last_tick <= self.stall_after_s
        )

    def set_ready(self, check: str, ok: bool) -> None:
        self.ready_checks[check] = ok

    def set_condition(self, policy: str, type_: str, on: bool) -> None:
        if on:
            self.conditions.labels(policy, type_).set(1)
        elif any(s.labels.get("policy") == policy and s.labels.get("type") == type_
                 for m in self.conditions.collect() for s in m.samples):
            self.conditions.remove(policy, type_)

    # watches ------------------------------------------------------------------------------------------
    def watch_started(self, path: str) -> None:
        self.watches.setdefault(path, None)

    def watch_ok(self, path: str) -> None:
        if path in self.watches:
            self.watches[path] = ""
            self.watch_up.labels(path).set(1)

    def watch_failed(self, path: str, error: str) -> None:
        if path in self.watches:
            self.watches[path] = error or "error"
            self.watch_up.labels(path).set(0)
            self.watch_failures.labels(path).inc()

    def watch_stopped(self, path: str) -> None:
        """A watch no policy needs any more: forget it and its series."""
        self.watches.pop(path, None)
        for metric in (self.watch_up, self.watch_failures):
            if any(s.labels.get("watch") == path for m in metric.collect() for s in m.samples):
                metric.remove(path)

    def failing_watches(self) -> dict[str, str]:
        return {p: e for p, e in self.watches.items() if e}

    def ready(self) -> bool:
        watches_tried = all(e is not None for e in self.watches.values())
        return bool(self.ready_checks) and all(self.ready_checks.values()) and watches_tried

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # HTTP ---------------------------------------------------------------------------------------------
    def app(self, *, metrics: bool = True, health: bool = True) -> web.Application:
        app = web.Application()
        if metrics:
            app.router.add_get("/metrics", self._metrics)
        if health:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/readyz", self._readyz)
        return app

    async def _metrics(self, _: web.Request) -> web.Response:
        resp = web.Response(body=self.exposition())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _healthz(self, _: web.Request) -> web.Response:
        if self.healthy():
            return web.Response(text="ok\n")
        if self.dead is not None:
            return web.Response(status=503, text=f"loop stopped: {self.dead}\n")
        since = "never" if self.last_tick is None else f"{self.now() - self.last_tick:.0f}s ago"
        return web.Response(status=503, text=f"loop stalled: last tick {since}\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        failing = "".join(f"degraded: watch {p} failing: {e}\n" for p, e in sorted(self.failing_watches().items()))
        if self.ready():
            return web.Response(text="ok\n" + failing)
        waiting = [k for k, v in self.ready_checks.items() if not v]
        waiting += [f"watch {p} (first list)" for p, e in sorted(self.watches.items()) if e is None]
        return web.Response(status=503, text=f"not ready: {', '.join(waiting) or 'startup'}\n" + failing)


@dataclass
class Servers:
    """The running HTTP listeners and the ports they bound (port 0 picks a free one)."""

    runners: list[web.AppRunner]
    ports: list[int]

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


async def serve(telemetry: Telemetry, *, host: str, metrics_port: int, health_port: int) -> Servers:
    """Start the endpoints: one listener when both ports are equal, else one each."""
    plan = (
        [telemetry.app()]
        if metrics_port == health_port and metrics_port != 0
        else [telemetry.app(health=False), telemetry.app(metrics=False)]
    )
    servers = Servers([], [])
    for app, port in zip(plan, (metrics_port, health_port), strict=False):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        servers.runners.append(runner)
        bound = [a[1] for a in runner.addresses] or [port]
        servers.ports.append(int(bound[0]))
    return servers
