"""The controller's own endpoints over HTTP: /metrics (Prometheus text), /healthz, /readyz."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from autoscaler.controller.telemetry import Servers, Telemetry, serve


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def endpoints() -> AsyncIterator[tuple[Telemetry, Clock, Servers]]:
    clock = Clock()
    tel = Telemetry(now=clock, stall_after_s=60)
    servers = await serve(tel, host="127.0.0.1", metrics_port=0, health_port=0)
    yield tel, clock, servers
    await servers.stop()


async def get(port: int, path: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def test_metrics_are_served_in_the_prometheus_text_format(endpoints: tuple[Telemetry, Clock, Servers]) -> None:
    tel, _, servers = endpoints
    tel.decisions.labels("tgi-gemma", "ScaleUp").inc()
    tel.actions.labels("tgi-gemma", "scale", "ok").inc()
    tel.signal_age.labels("tgi-gemma", "queue").set(0.4)
    tel.loop_latency.labels("total").observe(0.02)
    status, ctype, text = await get(servers.ports[0], "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    for line in (
        'autoscaler_decisions_total{policy="tgi-gemma",reason="ScaleUp"} 1.0',
        'autoscaler_actions_total{action="scale",policy="tgi-gemma",result="ok"} 1.0',
        'autoscaler_signal_age_seconds{policy="tgi-gemma",signal="queue"} 0.4',
        'autoscaler_loop_latency_seconds_bucket{le="0.025",phase="total"} 1.0',
    ):
        assert line in text
    # Health lives on its own port: /metrics is not served there.
    assert (await get(servers.ports[1], "/metrics"))[0] == 404


@pytest.mark.parametrize(
    ("ticked_ago", "expected"),
    [pytest.param(None, 503, id="never-ticked"), pytest.param(30.0, 200, id="recent-tick"),
     pytest.param(61.0, 503, id="stalled-loop")],
)
async def test_healthz_follows_the_loop(
    endpoints: tuple[Telemetry, Clock, Servers], ticked_ago: float | None, expected: int
) -> None:
    tel, clock, servers = endpoints
    if ticked_ago is not None:
        tel.tick()
        clock.t += ticked_ago
    assert (await get(servers.ports[1], "/healthz"))[0] == expected


async def test_readyz_waits_for_every_check(endpoints: tuple[Telemetry, Clock, Servers]) -> None:
    tel, _, servers = endpoints
    assert (await get(servers.ports[1], "/readyz"))[0] == 503
    tel.set_ready("policies", True)
    tel.set_ready("watches", False)
    status, _, body = await get(servers.ports[1], "/readyz")
    assert status == 503
    assert "watches" in body
    tel.set_ready("watches", True)
    assert (await get(servers.ports[1], "/readyz"))[0] == 200
