"""The controller's own metrics (prometheus_client) and its HTTP endpoints: /metrics, /healthz, /readyz.

Each ``Telemetry`` owns a private ``CollectorRegistry`` so two controllers in one test process (leader
handover) do not share counters. Label sets are bounded: policy names, Reason values, action kinds and
results; never pod names or free text.

- ``/healthz``: the loop has ticked within ``stall_after_s`` (a wedged loop gets the pod restarted).
- ``/readyz``: the first policy load and the first cluster sync are done. A standby (non-leader) replica
  is ready too: readiness gates rollouts, and a standby that is never ready would block every rollout.
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

    # health -------------------------------------------------------------------------------------------
    def tick(self) -> None:
        self.last_tick = self.now()

    def healthy(self) -> bool:
        return self.last_tick is not None and self.now() - self.last_tick <= self.stall_after_s

    def set_ready(self, check: str, ok: bool) -> None:
        self.ready_checks[check] = ok

    def ready(self) -> bool:
        return bool(self.ready_checks) and all(self.ready_checks.values())

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
        since = "never" if self.last_tick is None else f"{self.now() - self.last_tick:.0f}s ago"
        return web.Response(status=503, text=f"loop stalled: last tick {since}\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok\n")
        waiting = ", ".join(k for k, v in self.ready_checks.items() if not v) or "startup"
        return web.Response(status=503, text=f"not ready: {waiting}\n")


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
