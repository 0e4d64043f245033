"""Kubernetes Events on the objects the controller decides about (targets and Kueue Workloads).

``reason`` is the decision's ``core.model.Reason`` value (``ScaleUp``, ``DeactivateTraining``...) and the
note/message is the decision's one sentence, so ``kubectl describe deployment tgi`` answers "why did it
scale?". Repeats of the same (object, type, reason, message) within ``aggregationWindowSeconds`` update
one Event instead of creating new ones: ``series.count``/``series.lastObservedTime`` for
``events.k8s.io/v1``, ``count``/``lastTimestamp`` for core ``v1`` (what ``kubectl`` shows as "x5 over 2m").

Event writes are best effort: a failure is logged and counted, never raised into the loop (an RBAC gap on
events must not stop scaling).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.controller.config import EventsConfig
from autoscaler.controller.kube import translate
from autoscaler.controller.leader import micro_time
from autoscaler.controller.logs import get_logger

#: events.k8s.io/v1 limits ``note`` to 1,024 bytes (the API server's validation measures the UTF-8 bytes of a Go
#: string, not characters): a longer note is rejected with 422 and the Event is lost.
MAX_NOTE = 1024
#: The same validation limits ``reportingInstance``, ``action`` and ``reason`` to 128 bytes each
#: (k8s.io/kubernetes pkg/apis/core/validation/events.go); the instance is the pod name, which may be 253.
MAX_FIELD = 128
ELLIPSIS = "…"
MERGE_PATCH = "application/merge-patch+json"

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (``regarding`` / ``involvedObject``)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass
class _Series:
    name: str
    count: int
    first_mono: float
    first_wall: float


class EventRecorder:
    """Writes and aggregates Events; one instance per controller process."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        config: EventsConfig,
        instance: str,
        wall: Callable[[], float],
        on_error: Callable[[], None] | None = None,
    ) -> None:
        # Typed as Any: plain dict bodies and ``_content_type``, which the generated stubs do not declare.
        self._events: Any = client.EventsV1Api(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self.config = config
        self.instance = instance
        self._wall = wall
        self._on_error = on_error
        self._series: dict[tuple[str, ...], _Series] = {}
        self._log = get_logger(component="events")

    async def record(
        self, obj: ObjectRef, *, type_: EventType, reason: str, message: str, action: str
    ) -> None:
        """Create an Event, or bump the series of an identical recent one."""
        note = cut_note(message)
        reason, action = _cut(reason), _cut(action)
        key = (obj.api_version, obj.kind, obj.namespace, obj.name, type_, reason, note)
        now_mono = asyncio.get_running_loop().time()
        wall = self._wall()
        series = self._series.get(key)
        try:
            if series is not None and now_mono - series.first_mono <= self.config.aggregation_window_seconds:
                series.count += 1
                try:
                    await self._bump(obj.namespace, series, wall)
                    return
                except ApiException as exc:
                    if exc.status != 404:  # the Event expired (TTL 1 h by default): start a new one
                        raise
            name = _event_name(obj, key, wall)
            await self._create(obj, name, type_=type_, reason=reason, note=note, action=action, wall=wall)
            self._series[key] = _Series(name, 1, now_mono, wall)
            self._expire(now_mono)
        except (ApiException, aiohttp.ClientError, TimeoutError) as exc:
            status = getattr(exc, "status", None)
            # The server's own message (which field, which limit, which verb RBAC refused), not the HTTP reason
            # phrase ("Bad Request", "Forbidden") that ApiException.reason alone carries.
            error = str(translate(exc)) if isinstance(exc, ApiException) else (str(exc) or type(exc).__name__)
            self._log.warning("event_write_failed", object=f"{obj.kind}/{obj.namespace}/{obj.name}",
                              reason=reason, status=status, error=error)
            if self._on_error:
                self._on_error()

    async def _create(
        self, obj: ObjectRef, name: str, *, type_: str, reason: str, note: str, action: str, wall: float
    ) -> None:
        ts = micro_time(wall)
        if self.config.api == "events.k8s.io/v1":
            body: dict[str, Any] = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": obj.namespace},
                "eventTime": ts,
                "reportingController": self.config.reporting_controller,
                "reportingInstance": _cut(self.instance),
                "action": action,
                "reason": reason,
                "note": note,
                "type": type_,
                "regarding": obj.as_dict(),
            }
            await self._events.create_namespaced_event(obj.namespace, body)
        else:
            seconds = ts[:19] + "Z"  # core v1 timestamps are whole seconds
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": obj.namespace},
                "involvedObject": obj.as_dict(),
                "reason": reason,
                "message": note,
                "type": type_,
                "action": action,
                "count": 1,
                "firstTimestamp": seconds,
                "lastTimestamp": seconds,
                "source": {"component": self.config.reporting_controller},
                "reportingComponent": self.config.reporting_controller,
                "reportingInstance": _cut(self.instance),
            }
            await self._core.create_namespaced_event(obj.namespace, body)

    async def _bump(self, namespace: str, series: _Series, wall: float) -> None:
        ts = micro_time(wall)
        if self.config.api == "events.k8s.io/v1":
            patch_v1: dict[str, Any] = {"series": {"count": series.count, "lastObservedTime": ts}}
            await self._events.patch_namespaced_event(series.name, namespace, patch_v1, _content_type=MERGE_PATCH)
        else:
            patch: dict[str, Any] = {"count": series.count, "lastTimestamp": ts[:19] + "Z"}
            await self._core.patch_namespaced_event(series.name, namespace, patch, _content_type=MERGE_PATCH)

    def _expire(self, now_mono: float) -> None:
        window = self.config.aggregation_window_seconds
        for key in [k for k, s in self._series.items() if now_mono - s.first_mono > window]:
            del self._series[key]


def cut_note(message: str, limit: int = MAX_NOTE) -> str:
    """``message`` within ``limit`` UTF-8 bytes, cut at a character boundary and ending in "…" when cut."""
    data = message.encode()
    if len(data) <= limit:
        return message
    room = limit - len(ELLIPSIS.encode())
    # Decoding with "ignore" drops a multi-byte character split by the cut instead of leaving half of it.
    return data[:room].decode("utf-8", "ignore") + ELLIPSIS


def _cut(text: str) -> str:
    """``text`` within ``MAX_FIELD`` UTF-8 bytes, cut at a character boundary (no ellipsis: these are names)."""
    return text.encode()[:MAX_FIELD].decode("utf-8", "ignore")


def _event_name(obj: ObjectRef, key: tuple[str, ...], wall: float) -> str:
    """``<object>.<hash>``: unique per series start, like the ``<name>.<hex>`` names kubectl shows. A name must be
    a DNS subdomain (422 otherwise): an object name (up to 253) is cut to 200 and loses a trailing ``-`` or ``.``,
    which would leave ``x-.<hash>``, no subdomain (every name starts alphanumeric, so something is left)."""
    digest = hashlib.sha256(repr((key, wall)).encode()).hexdigest()[:16]
    return f"{obj.name[:200].rstrip('-.')}.{digest}"
