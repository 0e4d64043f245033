"""The circuit's numbered transitions and the retry helper, on a stepped clock (no sleeping)."""

from __future__ import annotations

import pytest

from autoscaler.sources.circuit import Circuit, CircuitState, PermanentError, TransientError, retrying


def state(c: Circuit) -> CircuitState:
    return c.state  # read through a call so each assertion sees a fresh value (the clock moves)


def make() -> tuple[Circuit, list[float]]:
    now = [0.0]
    return Circuit(threshold=2, cooldown_s=10, clock=lambda: now[0]), now


def test_opens_after_threshold_then_probes_once_after_cooldown() -> None:
    c, now = make()
    c.failure("boom")
    assert c.allow() is None  # 1 failure < threshold
    c.failure("boom")
    assert state(c) is CircuitState.OPEN  # transition 1
    assert c.allow() == "circuit open after 2 consecutive failures (last: boom); next try in 10s"
    now[0] = 10.0
    assert state(c) is CircuitState.HALF_OPEN  # transition 2
    assert c.allow() is None  # the probe
    assert c.allow() is not None  # only one probe at a time
    c.success()  # transition 3: closed
    assert c.state is CircuitState.CLOSED
    assert c.failures == 0


def test_failed_probe_reopens_with_a_fresh_cooldown() -> None:
    c, now = make()
    c.failure("a")
    c.failure("b")
    now[0] = 12.0
    assert c.allow() is None
    c.failure("c")
    assert state(c) is CircuitState.OPEN
    now[0] = 21.0
    assert state(c) is CircuitState.OPEN
    now[0] = 22.0
    assert state(c) is CircuitState.HALF_OPEN


def test_success_resets_the_count() -> None:
    c, _ = make()
    c.failure("a")
    c.success()
    c.failure("b")
    assert c.state is CircuitState.CLOSED


@pytest.mark.parametrize(
    ("errors", "attempts", "calls", "ok"),
    [
        pytest.param([TransientError("x"), TransientError("y")], 3, 3, True, id="transient-retried-then-succeeds"),
        pytest.param([PermanentError("bad query")], 3, 1, False, id="permanent-not-retried"),
        pytest.param([TransientError("x")] * 5, 3, 3, False, id="attempts-run-out"),
    ],
)
async def test_retrying(errors: list[Exception], attempts: int, calls: int, ok: bool) -> None:
    seen: list[int] = []

    async def call() -> str:
        seen.append(1)
        if len(seen) <= len(errors):
            raise errors[len(seen) - 1]
        return "ok"

    try:
        result: str | None = await retrying(call, deadline_s=5, attempts=attempts, base_s=0.001)
    except (TransientError, PermanentError):
        result = None
    assert len(seen) == calls
    assert (result == "ok") is ok
