"""Serving targets: read their replicas and pods, and change their size, one class per kind of target.

``ScaleTarget`` is the interface; ``DeploymentTarget`` and ``LeaderWorkerSetTarget`` scale directly through
the ``scale`` subresource; ``HpaFloorTarget`` (``actuation.mode: hpaFloor``) instead raises or lowers an
existing HPA's ``spec.minReplicas`` and leaves the scaling to that HPA. ``KubeTargets`` picks the right one
for a policy and serves the loop as its ``TargetReader`` and as the scale half of its actuator.

Every write:
1. re-reads the object and skips the write when it already has the desired value (idempotent: a restart in
   the middle of an action neither repeats nor undoes it);
2. checks ownership: one owner per target. An HPA whose ``scaleTargetRef`` names the target, a KEDA
   ``ScaledObject`` (which makes such an HPA), or a ``autoscaler.dev/managed-by`` annotation naming another
   owner makes a direct scale raise ``OwnershipConflict`` rather than fight over the replica count;
3. sends the resourceVersion it read (optimistic concurrency), so a concurrent change answers 409;
4. is retried with jittered backoff on 409 (re-reading first) and on 5xx/429, a bounded number of times;
   a 403 is reported at once (``Forbidden``), never retried.
"""

from __future__ import annotations

import abc
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from autoscaler.controller.kube import (
    DEFAULT_RETRY,
    MERGE_PATCH,
    Forbidden,
    NotFound,
    Refusal,
    RetryPolicy,
    call,
    retrying,
)
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import PodStatus, ReplicaStatus, ScaleDecision, TargetKind, TargetRef
from autoscaler.core.spec import Spec
from autoscaler.sources.base import PodRef

JsonObj = dict[str, Any]

#: An annotation a user (or another tool) sets on a target to say who owns its replica count.
MANAGED_BY_ANNOTATION = "autoscaler.dev/managed-by"
#: On an HPA advised in hpaFloor mode: its own minReplicas before we first raised it (we never go below it).
ORIGINAL_MIN_ANNOTATION = "autoscaler.dev/original-min-replicas"
FLOOR_BY_ANNOTATION = "autoscaler.dev/floor-by"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
METRICS_PORT_ANNOTATION = "prometheus.io/port"
METRICS_PATH_ANNOTATION = "prometheus.io/path"


class OwnershipConflict(Refusal):
    """Another autoscaler owns the target's replica count; this policy will not scale it directly."""


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """What a scale call did: ``written`` is False when the target already had the value."""

    target: str
    previous: int
    desired: int
    written: bool
    field: str = "replicas"


def _parse_time(value: object) -> float | None:
    if not value:
        return None
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _pod_ready(pod: JsonObj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _label_selector(selector: JsonObj | None) -> str:
    """A ``LabelSelector`` as the string list calls take."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        forms = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}
        parts.append(forms.get(op, f"!{key}"))
    return ",".join(parts)


class ScaleTarget(abc.ABC):
    """One serving target: what it runs now, and how to change its size (replicas; groups for an LWS)."""

    def __init__(
        self,
        api: client.ApiClient,
        ref: TargetRef,
        *,
        owner: str,
        retry: RetryPolicy = DEFAULT_RETRY,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.ref = ref
        #: Who we are, for ownership checks and annotations: the policy name.
        self.owner = owner
        self.retry = retry
        self.now = now
        self._core: Any = client.CoreV1Api(api)
        self._hpas: Any = client.AutoscalingV2Api(api)
        self._custom: Any = client.CustomObjectsApi(api)

    # --- reading -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def read(self) -> JsonObj:
        """The target object as JSON (camelCase keys)."""

    @abc.abstractmethod
    async def replicas(self) -> ReplicaStatus:
        """Spec, ready and starting replicas (groups for an LWS), with the pods HPA's rules need."""

    @abc.abstractmethod
    async def pods(self) -> tuple[PodRef, ...]:
        """The serving pods metric sources read: ready, with an IP, not terminating (LWS: leaders are
        ``leader=True``)."""

    async def _list_pods(self, selector: str) -> list[JsonObj]:
        result = await call(self._core.list_namespaced_pod(self.ref.namespace, label_selector=selector))
        pods: list[JsonObj] = self.api.sanitize_for_serialization(result).get("items") or []
        return pods

    def _pod_status(self, pod: JsonObj) -> PodStatus:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        started = _parse_time(status.get("startTime")) or _parse_time(meta.get("creationTimestamp"))
        return PodStatus(
            name=meta.get("name", ""),
            ready=_pod_ready(pod),
            age_s=max(0.0, self.now() - started) if started is not None else 0.0,
            failed=status.get("phase") == "Failed",
            deleting=bool(meta.get("deletionTimestamp")),
        )

    @staticmethod
    def _pod_ref(pod: JsonObj, leader: bool = True) -> PodRef:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        url = None
        if status.get("podIP") and annotations.get(METRICS_PORT_ANNOTATION):
            path = annotations.get(METRICS_PATH_ANNOTATION, "/metrics")
            url = f"http://{status['podIP']}:{annotations[METRICS_PORT_ANNOTATION]}{path}"
        return PodRef(name=meta.get("name", ""), url=url, leader=leader, ip=status.get("podIP") or None)

    @staticmethod
    def _serving(pod: JsonObj) -> bool:
        """A pod a Service sends traffic to: ready, with an IP, not terminating. Only these carry load, and a
        pending pod (no IP yet, e.g. gated by Kueue) must not turn the pods source's reading unknown."""
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        return _pod_ready(pod) and bool(status.get("podIP")) and not meta.get("deletionTimestamp")

    # --- ownership -----------------------------------------------------------------------------------------

    async def hpas_for_target(self) -> list[JsonObj]:
        """The autoscaling/v2 HPAs in the namespace whose ``scaleTargetRef`` names this target."""
        result = await call(self._hpas.list_namespaced_horizontal_pod_autoscaler(self.ref.namespace))
        items: list[JsonObj] = self.api.sanitize_for_serialization(result).get("items") or []
        return [
            h for h in items
            if (ref := (h.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") == self.ref.kind.value
            and ref.get("name") == self.ref.name
        ]

    async def scaled_objects_for_target(self) -> list[JsonObj]:
        """KEDA ScaledObjects naming this target (none when KEDA is not installed or not readable)."""
        try:
            result = await call(
                self._custom.list_namespaced_custom_object("keda.sh", "v1alpha1", self.ref.namespace, "scaledobjects")
            )
        except (NotFound, Forbidden):
            return []
        return [
            s for s in result.get("items") or []
            if (ref := (s.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == self.ref.name
            and ref.get("kind", "Deployment") == self.ref.kind.value
        ]

    async def check_ownership(self, obj: JsonObj, *, allowed_hpa: str | None = None) -> None:
        """Raise ``OwnershipConflict`` when something other than this policy owns the replica count."""
        owner = ((obj.get("metadata") or {}).get("annotations") or {}).get(MANAGED_BY_ANNOTATION)
        if owner and owner != self.owner:
            raise OwnershipConflict(
                f"{self.ref.key} is annotated {MANAGED_BY_ANNOTATION}={owner}; policy {self.owner} will not "
                "scale it (one owner per target)"
            )
        for so in await self.scaled_objects_for_target():
            raise OwnershipConflict(
                f"{self.ref.key} is scaled by KEDA ScaledObject {so['metadata']['name']}; policy {self.owner} will "
                "not scale it directly (remove one of them, or use actuation.mode: hpaFloor)"
            )
        for hpa in await self.hpas_for_target():
            name = hpa["metadata"]["name"]
            if name != allowed_hpa:
                raise OwnershipConflict(
                    f"{self.ref.key} is scaled by HorizontalPodAutoscaler {name}; policy {self.owner} will not "
                    f"scale it directly (use actuation.mode: hpaFloor with hpaName: {name}, or delete the HPA)"
                )

    # --- writing -------------------------------------------------------------------------------------------

    async def scale(self, desired: int) -> ScaleResult:
        """Set the replica count (idempotent, guarded, retried; see the module docstring)."""
        if desired < 0:
            raise ValueError(f"cannot scale {self.ref.key} to {desired} replicas")
        return await retrying(self.retry, lambda: self._scale_once(desired))

    @abc.abstractmethod
    async def _scale_once(self, desired: int) -> ScaleResult: ...


class DeploymentTarget(ScaleTarget):
    """An ``apps/v1`` Deployment, scaled through its ``scale`` subresource with a replace carrying the
    Scale's resourceVersion."""

    def __init__(self, api: client.ApiClient, ref: TargetRef, **kwargs: Any) -> None:
        super().__init__(api, ref, **kwargs)
        self._apps: Any = client.AppsV1Api(api)

    async def read(self) -> JsonObj:
        obj = await call(self._apps.read_namespaced_deployment(self.ref.name, self.ref.namespace))
        result: JsonObj = self.api.sanitize_for_serialization(obj)
        return result

    def _selector(self, obj: JsonObj) -> str:
        return _label_selector((obj.get("spec") or {}).get("selector"))

    async def replicas(self) -> ReplicaStatus:
        obj = await self.read()
        spec = int((obj.get("spec") or {}).get("replicas", 1))
        ready = int((obj.get("status") or {}).get("readyReplicas") or 0)
        pods = tuple(
            self._pod_status(p)
            for p in await self._list_pods(self._selector(obj))
            if (p.get("status") or {}).get("phase") != "Succeeded"
        )
        return ReplicaStatus(spec=spec, ready=ready, starting=max(0, spec - ready), pods=pods)

    async def pods(self) -> tuple[PodRef, ...]:
        obj = await self.read()
        return tuple(self._pod_ref(p) for p in await self._list_pods(self._selector(obj)) if self._serving(p))

    async def _scale_once(self, desired: int) -> ScaleResult:
        scale = await call(self._apps.read_namespaced_deployment_scale(self.ref.name, self.ref.namespace))
        current = int(scale.spec.replicas or 0)
        if current == desired:
            return ScaleResult(self.ref.key, current, desired, written=False)
        await self.check_ownership(await self.read())
        scale.spec.replicas = desired
        # A replace of the Scale carries its resourceVersion: a concurrent change answers 409, then we re-read.
        await call(self._apps.replace_namespaced_deployment_scale(self.ref.name, self.ref.namespace, scale))
        return ScaleResult(self.ref.key, current, desired, written=True)


class LeaderWorkerSetTarget(ScaleTarget):
    """A LeaderWorkerSet: one replica is one group (``spec.leaderWorkerTemplate.size`` pods, a slice).

    Scaled through its scale subresource with a JSON merge patch carrying the resourceVersion (a dict sent
    without ``_content_type`` would go out as json-patch, which the server rejects)."""

    async def read(self) -> JsonObj:
        obj: JsonObj = await call(
            self._custom.get_namespaced_custom_object(
                LWS_GROUP, LWS_VERSION, self.ref.namespace, "leaderworkersets", self.ref.name
            )
        )
        return obj

    @staticmethod
    def group_size(obj: JsonObj) -> int:
        return int(((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1)

    async def _group_pods(self) -> list[JsonObj]:
        return await self._list_pods(f"{LWS_NAME_LABEL}={self.ref.name}")

    async def replicas(self) -> ReplicaStatus:
        obj = await self.read()
        spec = int((obj.get("spec") or {}).get("replicas", 1))
        ready = int((obj.get("status") or {}).get("readyReplicas") or 0)
        size = self.group_size(obj)
        groups: dict[str, list[JsonObj]] = {}
        for pod in await self._group_pods():
            index = ((pod.get("metadata") or {}).get("labels") or {}).get(LWS_GROUP_INDEX_LABEL, "")
            groups.setdefault(index, []).append(pod)
        statuses = []
        for _, members in sorted(groups.items()):
            leader = next(
                (p for p in members if (p["metadata"].get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "0"),
                members[0],
            )
            status = self._pod_status(leader)
            # A group serves only when all its hosts are up: one slice is one replica.
            whole = len(members) >= size and all(_pod_ready(p) for p in members)
            statuses.append(PodStatus(status.name, whole, status.age_s, status.failed, status.deleting))
        return ReplicaStatus(spec=spec, ready=ready, starting=max(0, spec - ready), pods=tuple(statuses))

    async def pods(self) -> tuple[PodRef, ...]:
        return tuple(
            self._pod_ref(p, leader=((p.get("metadata") or {}).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "0")
            for p in await self._group_pods()
            if self._serving(p)
        )

    async def _scale_once(self, desired: int) -> ScaleResult:
        scale = await call(
            self._custom.get_namespaced_custom_object_scale(
                LWS_GROUP, LWS_VERSION, self.ref.namespace, "leaderworkersets", self.ref.name
            )
        )
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        if current == desired:
            return ScaleResult(self.ref.key, current, desired, written=False, field="groups")
        await self.check_ownership(await self.read())
        body = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}, "spec": {"replicas": desired}}
        await call(
            self._custom.patch_namespaced_custom_object_scale(
                LWS_GROUP, LWS_VERSION, self.ref.namespace, "leaderworkersets", self.ref.name, body,
                _content_type=MERGE_PATCH,
            )
        )
        return ScaleResult(self.ref.key, current, desired, written=True, field="groups")


class HpaFloorTarget(ScaleTarget):
    """Advisory mode: the named HPA keeps scaling the target; we only move its ``spec.minReplicas`` floor.

    The floor never exceeds the HPA's ``maxReplicas`` and never drops below the HPA's own minReplicas from
    before we first raised it (kept in an annotation on the HPA), nor below 1."""

    def __init__(self, api: client.ApiClient, ref: TargetRef, hpa_name: str, inner: ScaleTarget, **kwargs: Any):
        super().__init__(api, ref, **kwargs)
        self.hpa_name = hpa_name
        self.inner = inner

    async def read(self) -> JsonObj:
        return await self.inner.read()

    async def replicas(self) -> ReplicaStatus:
        return await self.inner.replicas()

    async def pods(self) -> tuple[PodRef, ...]:
        return await self.inner.pods()

    async def read_hpa(self) -> JsonObj:
        obj = await call(self._hpas.read_namespaced_horizontal_pod_autoscaler(self.hpa_name, self.ref.namespace))
        result: JsonObj = self.api.sanitize_for_serialization(obj)
        return result

    async def _scale_once(self, desired: int) -> ScaleResult:
        hpa = await self.read_hpa()
        spec, meta = hpa.get("spec") or {}, hpa.get("metadata") or {}
        target = spec.get("scaleTargetRef") or {}
        if target.get("kind") != self.ref.kind.value or target.get("name") != self.ref.name:
            raise OwnershipConflict(
                f"HorizontalPodAutoscaler {self.ref.namespace}/{self.hpa_name} scales {target.get('kind')}/"
                f"{target.get('name')}, not {self.ref.key}; policy {self.owner} will not move its floor"
            )
        annotations = meta.get("annotations") or {}
        current = int(spec.get("minReplicas") or 1)
        original = int(annotations.get(ORIGINAL_MIN_ANNOTATION, current))
        floor = max(1, original, min(desired, int(spec["maxReplicas"])))
        if floor == current:
            return ScaleResult(self.ref.key, current, floor, written=False, field="hpa.minReplicas")
        await self.check_ownership(await self.inner.read(), allowed_hpa=self.hpa_name)
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {ORIGINAL_MIN_ANNOTATION: str(original), FLOOR_BY_ANNOTATION: self.owner},
            },
            "spec": {"minReplicas": floor},
        }
        await call(
            self._hpas.patch_namespaced_horizontal_pod_autoscaler(
                self.hpa_name, self.ref.namespace, body, _content_type=MERGE_PATCH
            )
        )
        return ScaleResult(self.ref.key, current, floor, written=True, field="hpa.minReplicas")


def build_target(
    api: client.ApiClient, spec: Spec, *, owner: str, retry: RetryPolicy = DEFAULT_RETRY,
    now: Callable[[], float] = time.time,
) -> ScaleTarget:
    """The ``ScaleTarget`` for a policy's ``target`` and ``actuation``."""
    ref = spec.target.ref()
    inner: ScaleTarget
    if ref.kind is TargetKind.DEPLOYMENT:
        inner = DeploymentTarget(api, ref, owner=owner, retry=retry, now=now)
    else:
        inner = LeaderWorkerSetTarget(api, ref, owner=owner, retry=retry, now=now)
    if spec.actuation.mode == "hpaFloor":
        assert spec.actuation.hpa_name is not None  # the spec requires it
        return HpaFloorTarget(api, ref, spec.actuation.hpa_name, inner, owner=owner, retry=retry, now=now)
    return inner


class KubeTargets:
    """The loop's ``TargetReader`` and the scale half of its actuator, for any number of policies."""

    def __init__(
        self, api: client.ApiClient, *, retry: RetryPolicy = DEFAULT_RETRY, now: Callable[[], float] = time.time
    ) -> None:
        self.api = api
        self.retry = retry
        self.now = now

    def target(self, policy: CompiledPolicy) -> ScaleTarget:
        # Built per call: cheap (no I/O), and a hot-reloaded policy never sees a stale target or mode.
        return build_target(self.api, policy.policy.spec, owner=policy.name, retry=self.retry, now=self.now)

    async def replicas(self, policy: CompiledPolicy) -> ReplicaStatus:
        return await self.target(policy).replicas()

    async def pods(self, policy: CompiledPolicy) -> tuple[PodRef, ...]:
        return await self.target(policy).pods()

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> ScaleResult:
        return await self.target(policy).scale(decision.desired)
