"""Failure handling shared by the sources: retries with jittered backoff inside a deadline, and a circuit.

Retries (tenacity): a transient failure (connection refused or reset, HTTP 5xx, gRPC UNAVAILABLE) is
retried with full-jitter exponential backoff while the tick's deadline allows; a permanent one (HTTP 4xx,
a bad query, permission denied) is not.

The circuit, per backend, numbered transitions:
  1. closed → open after ``threshold`` consecutive failed reads: the backend is not asked again for
     ``cooldown_s``; its signals are unknown with the last error as the reason (the core then holds);
  2. open → half-open when the cooldown has passed: the next read is let through as a probe;
  3. half-open → closed when the probe succeeds, → open again (a fresh cooldown) when it fails.
The clock is injected (``loop.time`` by default) so tests step it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from autoscaler.sources.base import Readings


class Answer(NamedTuple):
    """One query group's readings, and whether the backend answered at all: the circuit counts a tick as failed
    only when no group was answered (a refusal, such as a bad query, is an answer from a working backend)."""

    readings: Readings
    answered: bool


T = TypeVar("T")


class TransientError(Exception):
    """A failure worth retrying (connection trouble, 5xx, unavailable)."""


class PermanentError(Exception):
    """A failure retrying cannot fix (bad query, 4xx, permission denied)."""


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class Circuit:
    """A circuit breaker for one backend (see the module docstring for its transitions)."""

    threshold: int = 3
    cooldown_s: float = 30.0
    clock: Callable[[], float] = _loop_time
    failures: int = 0
    opened_at: float | None = None
    last_error: str = ""
    _probing: bool = field(default=False, repr=False)

    @property
    def state(self) -> CircuitState:
        if self.opened_at is None:
            return CircuitState.CLOSED
        if self.clock() - self.opened_at >= self.cooldown_s:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def allow(self) -> str | None:
        """None when a read may go ahead, else why not (the reason the signals are unknown)."""
        state = self.state
        if state is CircuitState.CLOSED:
            return None
        if state is CircuitState.HALF_OPEN and not self._probing:
            self._probing = True  # transition 2: one probe at a time
            return None
        assert self.opened_at is not None
        left = max(0.0, self.cooldown_s - (self.clock() - self.opened_at))
        return (
            f"circuit open after {self.failures} consecutive failures (last: {self.last_error}); "
            f"next try in {left:.0f}s"
        )

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None  # transition 3 (probe succeeded) or staying closed
        self._probing = False

    def failure(self, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self._probing or self.failures >= self.threshold:
            self.opened_at = self.clock()  # transitions 1 and 3 (probe failed)
        self._probing = False

    def settle(self, results: Iterable[Answer]) -> Readings:
        """Merge the readings of one tick's query groups and count the tick: a success if any group was
        answered, else a failure carrying the last error seen."""
        out: Readings = {}
        reached, last_error = False, ""
        for result in results:
            out.update(result.readings)
            reached = reached or result.answered
            if not result.answered:
                last_error = next((r.error for r in result.readings.values() if r.error), last_error)
        if reached:
            self.success()
        else:
            self.failure(last_error or "no answer")
        return out


async def retrying(
    call: Callable[[], Awaitable[T]], *, deadline_s: float, attempts: int = 3, base_s: float = 0.05
) -> T:
    """Run ``call`` within ``deadline_s`` seconds, retrying transient errors with jittered backoff.

    Raises ``TimeoutError`` when the deadline passes, the last ``TransientError`` when attempts run out,
    or a ``PermanentError`` at once.
    """
    async with asyncio.timeout(deadline_s):
        # The first attempt outside tenacity: the common case (it works) pays no retry machinery, which cost
        # more than the HTTP request itself at thousands of scrapes a second.
        try:
            return await call()
        except TransientError:
            if attempts <= 1:
                raise
        await asyncio.sleep(random.uniform(0.0, base_s))  # the wait tenacity would make before attempt 2
        retryer = AsyncRetrying(
            stop=stop_after_attempt(attempts - 1) | stop_after_delay(deadline_s),
            wait=wait_random_exponential(multiplier=base_s, max=max(base_s, deadline_s / 4)),
            retry=retry_if_exception_type(TransientError),
            reraise=True,
        )
        async for attempt in retryer:
            with attempt:
                return await call()
    raise AssertionError("unreachable: tenacity either returns or raises")
