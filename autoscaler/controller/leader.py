"""Leader election on a ``coordination.k8s.io/v1`` Lease: of N replicas only the holder acts.

The protocol (the one client-go's ``leaderelection`` package documents; written here from that
description, not ported):

1. Read the Lease. Absent → create it naming us (a 409 means another replica created it first: we lost).
2. Held by someone else → remember when *we* last saw its ``renewTime`` change (our own monotonic clock,
   never the other host's wall clock). It is expired once ``leaseDurationSeconds`` pass on our clock
   without a change; only then may we take it.
3. Take or renew with an update that carries the ``resourceVersion`` we read (optimistic concurrency): of
   two replicas racing, the API server accepts one and answers 409 to the other. Taking it from another
   holder sets ``acquireTime`` and increments ``leaseTransitions``.
4. The leader renews every ``retryPeriodSeconds``. If no renewal succeeded within
   ``renewDeadlineSeconds`` it stops acting at once (``holds()`` turns false by itself, even when the
   renewing task is stuck) and goes back to step 1.
5. On shutdown the leader releases the Lease (empty ``holderIdentity``) so a standby takes over at once.

Fencing: the renew deadline is measured from when the successful write was **sent**, not from when its
answer arrived. The server stored the new ``renewTime`` at some instant between the two, so a standby saw it
change no earlier than the send, and may take over no earlier than ``send + leaseDurationSeconds``; the old
leader stops at ``send + renewDeadlineSeconds``, strictly before. (Measured from the answer, a renewal
answered 9 s late let the old leader act until ``send + 19 s`` while a standby could lead from ``send + 15 s``.)
``remaining()`` is the time left before that fence; the loop bounds every write by it. Each round (read and
write) runs under ``renewDeadlineSeconds`` and every call under the client's deadline, so a black-holed
request ends the round instead of silencing the campaign.

Retries: a standby polls every ``retryPeriodSeconds``; after an error (403, 5xx, timeout) it backs off
exponentially with full jitter up to ``leaseDurationSeconds`` (``kube.Backoff``), so a replica RBAC forbids
does not hammer the server. A leader retries every ``retryPeriodSeconds`` whatever the error: backing off
there would only give the lease up sooner.

``holds()`` is what every write checks; ``wait_leading()`` is what the loop awaits before acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.controller.config import LeaderElectionConfig
from autoscaler.controller.kube import Backoff
from autoscaler.controller.logs import get_logger


def micro_time(unix_s: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return dt.datetime.fromtimestamp(unix_s, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class BadLease(ValueError):
    """A Lease read answered 200 with a body that is no Lease."""


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease the election reads."""

    holder: str
    duration_s: float
    renew_time: str
    acquire_time: str
    transitions: int
    resource_version: str


class LeaderElector:
    """Campaigns for one Lease and keeps it; see the module docstring for the protocol."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        config: LeaderElectionConfig,
        identity: str,
        namespace: str,
        wall: Callable[[], float],
        on_change: Callable[[bool], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        # Typed as Any: we send plain dict bodies and read raw JSON (the generated models would
        # re-serialize MicroTime fields with their own precision).
        self._api: Any = client.CoordinationV1Api(api_client)
        self.config = config
        self.identity = identity
        self.namespace = namespace
        self._wall = wall
        self._on_change = on_change
        self._leading = asyncio.Event()
        self._last_renew: float | None = None  # loop time when our last successful write was SENT
        self.backoff = backoff or Backoff(
            base_s=config.retry_period_seconds, cap_s=config.lease_duration_seconds,
            floor_s=config.retry_period_seconds,
        )
        self.last_error: str | None = None
        self.requests = 0
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # loop time when _observed last changed
        self._log = get_logger(component="leader", identity=identity, lease=config.lease_name)

    # what the loop uses -------------------------------------------------------------------------------
    def holds(self) -> bool:
        """True while we lead and our last renewal was sent less than the renew deadline ago."""
        return self.remaining() > 0

    def remaining(self) -> float:
        """Seconds before the fence (``send of the last renewal + renewDeadlineSeconds``); 0 when not leading."""
        if not self._leading.is_set() or self._last_renew is None:
            return 0.0
        left = self._last_renew + self.config.renew_deadline_seconds - self._now()
        if left <= 0:
            self._lose("renew deadline passed")
            return 0.0
        return left

    async def wait_leading(self) -> None:
        await self._leading.wait()

    # the campaign -------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Campaign and renew until cancelled; on cancellation release the Lease if we hold it."""
        try:
            while True:
                try:
                    async with asyncio.timeout(self.config.renew_deadline_seconds):
                        ok = await self.try_acquire_or_renew()
                except TimeoutError:
                    self.last_error = "timeout"
                    self._log.warning("lease_error", error="round timed out")
                    ok = False
                except Exception as exc:  # anything else a round meets is a failed round: the campaign goes on
                    self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                    self._log.warning("lease_error", error=self.last_error)
                    ok = False
                if ok:
                    self._become_leader()
                elif self._leading.is_set() and self._last_renew is not None and (
                    self._now() - self._last_renew >= self.config.renew_deadline_seconds
                ):
                    self._lose("could not renew within the renew deadline")
                if ok or self.last_error is None:
                    self.backoff.reset()
                    await asyncio.sleep(self.config.retry_period_seconds)
                elif self._leading.is_set():
                    await asyncio.sleep(self.config.retry_period_seconds)
                else:
                    await asyncio.sleep(self.backoff.next())
        finally:
            if self._leading.is_set():
                self._lose("shutting down")
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.release())

    async def try_acquire_or_renew(self) -> bool:
        """One round of steps 1–3; True when we hold the Lease afterwards."""
        name, ns = self.config.lease_name, self.namespace
        self.last_error = None
        try:
            current = await self._read()
            now_wall = micro_time(self._wall())
            if current is None:
                body = self._body(now_wall, now_wall, 0, None)
                sent = self._now()
                self.requests += 1
                await self._api.create_namespaced_lease(ns, body)
                self._renewed(now_wall, sent)
                return True
            if (current.holder, current.renew_time) != self._observed:
                self._observed = (current.holder, current.renew_time)
                self._observed_at = self._now()
            mine = current.holder == self.identity
            expired = self._now() >= self._observed_at + current.duration_s
            if current.holder and not mine and not expired:
                if self._leading.is_set():
                    self._lose(f"the lease is held by {current.holder}")
                return False
            acquire = current.acquire_time if mine else now_wall
            transitions = current.transitions if mine else current.transitions + 1
            body = self._body(now_wall, acquire, transitions, current.resource_version)
            sent = self._now()
            self.requests += 1
            await self._api.replace_namespaced_lease(name, ns, body)
            self._renewed(now_wall, sent)
            return True
        except ApiException as exc:
            # 409: another replica wrote between our read and our write; it won this round (not an error).
            if exc.status != 409:
                self.last_error = f"{exc.status} {exc.reason}"
                self._log.warning("lease_error", status=exc.status, error=str(exc.reason))
            return False
        except (aiohttp.ClientError, TimeoutError, BadLease) as exc:
            self.last_error = str(exc) or type(exc).__name__
            self._log.warning("lease_error", error=self.last_error)
            return False

    async def release(self) -> None:
        """Give the Lease up (empty holder) so a standby need not wait for it to expire."""
        current = await self._read()
        if current is None or current.holder != self.identity:
            return
        body = self._body(micro_time(self._wall()), current.acquire_time, current.transitions,
                          current.resource_version, holder="", duration=1)
        await self._api.replace_namespaced_lease(self.config.lease_name, self.namespace, body)
        self._log.info("lease_released")

    # helpers ------------------------------------------------------------------------------------------
    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _read(self) -> LeaseRecord | None:
        self.requests += 1
        try:
            resp = await self._api.read_namespaced_lease(
                self.config.lease_name, self.namespace, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        # With _preload_content=False the client hands back any response, errors included.
        if resp.status == 404:
            return None
        if resp.status >= 400:
            raise ApiException(status=resp.status, reason=resp.reason)
        try:
            data: Any = await resp.json()
            spec = data.get("spec") or {}
            return LeaseRecord(
                holder=str(spec.get("holderIdentity") or ""),
                duration_s=float(spec.get("leaseDurationSeconds") or self.config.lease_duration_seconds),
                renew_time=str(spec.get("renewTime") or ""),
                acquire_time=str(spec.get("acquireTime") or ""),
                transitions=int(spec.get("leaseTransitions") or 0),
                resource_version=str((data.get("metadata") or {}).get("resourceVersion", "")),
            )
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            # Text, a JSON array, JSON nested deeper than the decoder recurses, a field of the wrong type: a
            # proxy or a broken server. A failed round, as a 5xx is; never the end of the campaign.
            raise BadLease(f"the Lease read is no Lease ({type(exc).__name__})") from None

    def _body(
        self,
        renew: str,
        acquire: str,
        transitions: int,
        resource_version: str | None,
        *,
        holder: str | None = None,
        duration: float | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.config.lease_name, "namespace": self.namespace}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity if holder is None else holder,
                "leaseDurationSeconds": int(duration or self.config.lease_duration_seconds),
                "acquireTime": acquire,
                "renewTime": renew,
                "leaseTransitions": transitions,
            },
        }

    def _renewed(self, renew_time: str, sent: float) -> None:
        # The fence counts from the send: the server may have stored renewTime any time after it.
        self._last_renew = sent
        self._observed = (self.identity, renew_time)
        self._observed_at = self._now()

    def _become_leader(self) -> None:
        if not self._leading.is_set():
            self._leading.set()
            self._log.info("leading")
            if self._on_change:
                self._on_change(True)

    def _lose(self, why: str) -> None:
        if self._leading.is_set():
            self._leading.clear()
            self._log.warning("stopped_leading", why=why)
            if self._on_change:
                self._on_change(False)


class AlwaysLeader:
    """Leader election turned off (one replica, ``--once``): always holds."""

    def holds(self) -> bool:
        return True

    def remaining(self) -> float:
        return math.inf

    async def wait_leading(self) -> None:
        return None
