"""Serving targets: read their replicas and pods, and change their size, one class per kind of target.

``ScaleTarget`` is the interface; ``DeploymentTarget`` and ``LeaderWorkerSetTarget`` scale directly through
the ``scale`` subresource; ``HpaFloorTarget`` (``actuation.mode: hpaFloor``) instead raises or lowers an
existing HPA's ``spec.minReplicas`` and leaves the scaling to that HPA. ``KubeTargets`` picks the right one
for a policy and serves the loop as its ``TargetReader`` and as the scale half of its actuator.

Reading: one read of the target and one list of its pods give both the replica status and the pods the
metric sources read (``ScaleTarget.observe``). Every read is plain JSON (``kube.get_json``), never the
client's typed models. ``KubeTargets.observe_many`` reads the targets of many policies at once: per
namespace, one list of the targets of a kind (when it holds more than one) and one list of pods per
selector key (``key in (v1, v2, ...)``), each target then taking the pods its own selector matches.

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
import asyncio
import datetime
import time
from collections.abc import Callable, Sequence
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
    get_json,
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
#: At most this many label values in one batched pod list (``key in (...)``), to keep URLs short.
POD_LIST_VALUES = 100

#: What reading a target gives the loop: its replica status and the serving pods metric sources read.
TargetView = tuple[ReplicaStatus, tuple[PodRef, ...]]


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


def selector_matches(selector: JsonObj | None, labels: dict[str, str]) -> bool:
    """Whether ``labels`` match a ``LabelSelector`` (as the server filters a list by ``label_selector``)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        present = key in labels
        if op == "In":
            ok = present and labels[key] in values
        elif op == "NotIn":
            ok = not present or labels[key] not in values
        elif op == "Exists":
            ok = present
        else:  # DoesNotExist
            ok = not present
        if not ok:
            return False
    return True


def label_selector(selector: JsonObj | None) -> str:
    """A ``LabelSelector`` as the string list calls take."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        forms = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}
        parts.append(forms.get(op, f"!{key}"))
    return ",".join(parts)


def _pivot_keys(selector: JsonObj) -> list[str]:
    """The ``matchLabels`` keys a batched pod list may select on (``key in (...)``; not an empty value)."""
    return [k for k, v in (selector.get("matchLabels") or {}).items() if v]


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
        self._hpas: Any = client.AutoscalingV2Api(api)
        self._custom: Any = client.CustomObjectsApi(api)

    # --- reading -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def read(self) -> JsonObj:
        """The target object as JSON (camelCase keys)."""

    @property
    def reader(self) -> ScaleTarget:
        """The target whose object and pods are read (an ``HpaFloorTarget`` reads its inner target)."""
        return self

    @abc.abstractmethod
    def pod_selector(self, obj: JsonObj) -> JsonObj:
        """The ``LabelSelector`` of the target's pods, from the target object."""

    @abc.abstractmethod
    def replica_status(self, obj: JsonObj, pods: Sequence[JsonObj]) -> ReplicaStatus:
        """Spec, ready and starting replicas (groups for an LWS), with the pods HPA's rules need."""

    @abc.abstractmethod
    def pod_refs(self, pods: Sequence[JsonObj]) -> tuple[PodRef, ...]:
        """The serving pods metric sources read: ready, with an IP, not terminating (LWS: leaders are
        ``leader=True``)."""

    async def observe(self) -> tuple[ReplicaStatus, tuple[PodRef, ...]]:
        """Replica status and serving pods from one read of the target and one list of its pods."""
        obj = await self.read()
        pods = await self._list_pods(label_selector(self.pod_selector(obj)))
        return self.replica_status(obj, pods), self.pod_refs(pods)

    async def replicas(self) -> ReplicaStatus:
        return (await self.observe())[0]

    async def pods(self) -> tuple[PodRef, ...]:
        return (await self.observe())[1]

    async def _list_pods(self, selector: str) -> list[JsonObj]:
        result = await get_json(
            self.api, f"/api/v1/namespaces/{self.ref.namespace}/pods", query={"labelSelector": selector}
        )
        pods: list[JsonObj] = result.get("items") or []
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
        path = f"/apis/autoscaling/v2/namespaces/{self.ref.namespace}/horizontalpodautoscalers"
        result = await get_json(self.api, path)
        items: list[JsonObj] = result.get("items") or []
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
        return await get_json(self.api, f"/apis/apps/v1/namespaces/{self.ref.namespace}/deployments/{self.ref.name}")

    def pod_selector(self, obj: JsonObj) -> JsonObj:
        selector: JsonObj = (obj.get("spec") or {}).get("selector") or {}
        return selector

    def replica_status(self, obj: JsonObj, pods: Sequence[JsonObj]) -> ReplicaStatus:
        spec = int((obj.get("spec") or {}).get("replicas", 1))
        ready = int((obj.get("status") or {}).get("readyReplicas") or 0)
        statuses = tuple(self._pod_status(p) for p in pods if (p.get("status") or {}).get("phase") != "Succeeded")
        return ReplicaStatus(spec=spec, ready=ready, starting=max(0, spec - ready), pods=statuses)

    def pod_refs(self, pods: Sequence[JsonObj]) -> tuple[PodRef, ...]:
        return tuple(self._pod_ref(p) for p in pods if self._serving(p))

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
        ns, name = self.ref.namespace, self.ref.name
        return await get_json(self.api, f"/apis/{LWS_GROUP}/{LWS_VERSION}/namespaces/{ns}/leaderworkersets/{name}")

    @staticmethod
    def group_size(obj: JsonObj) -> int:
        return int(((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1)

    def pod_selector(self, obj: JsonObj) -> JsonObj:
        # Every pod of every group (leaders and workers), not the scale subresource's leaders-only selector.
        return {"matchLabels": {LWS_NAME_LABEL: self.ref.name}}

    def replica_status(self, obj: JsonObj, pods: Sequence[JsonObj]) -> ReplicaStatus:
        spec = int((obj.get("spec") or {}).get("replicas", 1))
        ready = int((obj.get("status") or {}).get("readyReplicas") or 0)
        size = self.group_size(obj)
        groups: dict[str, list[JsonObj]] = {}
        for pod in pods:
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

    def pod_refs(self, pods: Sequence[JsonObj]) -> tuple[PodRef, ...]:
        return tuple(
            self._pod_ref(p, leader=((p.get("metadata") or {}).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "0")
            for p in pods
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

    @property
    def reader(self) -> ScaleTarget:
        return self.inner

    def pod_selector(self, obj: JsonObj) -> JsonObj:
        return self.inner.pod_selector(obj)

    def replica_status(self, obj: JsonObj, pods: Sequence[JsonObj]) -> ReplicaStatus:
        return self.inner.replica_status(obj, pods)

    def pod_refs(self, pods: Sequence[JsonObj]) -> tuple[PodRef, ...]:
        return self.inner.pod_refs(pods)

    async def observe(self) -> tuple[ReplicaStatus, tuple[PodRef, ...]]:
        return await self.inner.observe()

    async def read_hpa(self) -> JsonObj:
        return await get_json(
            self.api, f"/apis/autoscaling/v2/namespaces/{self.ref.namespace}/horizontalpodautoscalers/{self.hpa_name}"
        )

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

    async def observe(self, policy: CompiledPolicy) -> tuple[ReplicaStatus, tuple[PodRef, ...]]:
        """Replica status and serving pods of one policy's target: one read, one list of pods."""
        return await self.target(policy).observe()

    async def observe_many(self, policies: Sequence[CompiledPolicy]) -> dict[str, TargetView | Exception]:
        """``observe`` for many policies at once, batched per namespace (see the module docstring); a failed
        read fails only the policies whose targets it was for. Keys are policy names."""
        readers = {cp.name: self.target(cp).reader for cp in policies}
        objects = await self._read_objects(list(readers.values()))
        out: dict[str, TargetView | Exception] = {}
        wanted: list[tuple[str, ScaleTarget, JsonObj]] = []
        for name, reader in readers.items():
            obj = objects[reader.ref.key]
            if isinstance(obj, Exception):
                out[name] = obj
            else:
                wanted.append((name, reader, obj))
        pods = await self._list_pods_many([(r, r.pod_selector(obj)) for _, r, obj in wanted])
        for name, reader, obj in wanted:
            found = pods[reader.ref.key]
            out[name] = found if isinstance(found, Exception) else (
                reader.replica_status(obj, found), reader.pod_refs(found)
            )
        return out

    async def _read_objects(self, readers: Sequence[ScaleTarget]) -> dict[str, JsonObj | Exception]:
        """Target objects by key: one list per namespace and kind holding more than one target, else a read."""
        groups: dict[tuple[str, TargetKind], dict[str, ScaleTarget]] = {}
        for r in readers:
            groups.setdefault((r.ref.namespace, r.ref.kind), {})[r.ref.key] = r

        async def one(r: ScaleTarget) -> dict[str, JsonObj | Exception]:
            try:
                return {r.ref.key: await r.read()}
            except Exception as exc:
                return {r.ref.key: exc}

        async def listed(
            namespace: str, kind: TargetKind, members: list[ScaleTarget]
        ) -> dict[str, JsonObj | Exception]:
            path = (
                f"/apis/apps/v1/namespaces/{namespace}/deployments" if kind is TargetKind.DEPLOYMENT
                else f"/apis/{LWS_GROUP}/{LWS_VERSION}/namespaces/{namespace}/leaderworkersets"
            )
            try:
                items = (await get_json(self.api, path)).get("items") or []
            except Exception as exc:
                return {r.ref.key: exc for r in members}
            by_name = {(i.get("metadata") or {}).get("name"): i for i in items}
            plural = "deployments.apps" if kind is TargetKind.DEPLOYMENT else f"leaderworkersets.{LWS_GROUP}"
            return {
                r.ref.key: by_name[r.ref.name] if r.ref.name in by_name
                else NotFound(404, "NotFound", f'{plural} "{r.ref.name}" not found')
                for r in members
            }

        tasks = []
        for (namespace, kind), members in groups.items():
            if len(members) > 1:
                tasks.append(listed(namespace, kind, list(members.values())))
            else:
                tasks.extend(one(r) for r in members.values())
        out: dict[str, JsonObj | Exception] = {}
        for part in await asyncio.gather(*tasks):
            out.update(part)
        return out

    async def _list_pods_many(
        self, wanted: Sequence[tuple[ScaleTarget, JsonObj]]
    ) -> dict[str, list[JsonObj] | Exception]:
        """Pods by target key. Targets of a namespace whose selectors share a ``matchLabels`` key are served by
        one list ``key in (their values)`` (chunked), each keeping the pods its whole selector matches; a
        target alone on its key, or without ``matchLabels``, is listed with its own selector."""
        by_ns: dict[str, list[tuple[ScaleTarget, JsonObj]]] = {}
        for r, sel in wanted:
            by_ns.setdefault(r.ref.namespace, []).append((r, sel))
        tasks = []
        for namespace, members in by_ns.items():
            counts: dict[str, int] = {}
            for _, sel in members:
                for k in _pivot_keys(sel):
                    counts[k] = counts.get(k, 0) + 1
            pivots: dict[str, list[tuple[ScaleTarget, JsonObj]]] = {}
            for r, sel in members:
                keys = sorted(_pivot_keys(sel), key=lambda k: (-counts[k], k))
                if keys and counts[keys[0]] > 1:
                    pivots.setdefault(keys[0], []).append((r, sel))
                else:
                    tasks.append(self._pods_for(namespace, label_selector(sel), [(r, sel)]))
            for key, group in pivots.items():
                values = sorted({sel["matchLabels"][key] for _, sel in group})
                for i in range(0, len(values), POD_LIST_VALUES):
                    chunk = set(values[i : i + POD_LIST_VALUES])
                    part = [(r, sel) for r, sel in group if sel["matchLabels"][key] in chunk]
                    tasks.append(self._pods_for(namespace, f"{key} in ({','.join(sorted(chunk))})", part))
        out: dict[str, list[JsonObj] | Exception] = {}
        for found in await asyncio.gather(*tasks):
            out.update(found)
        return out

    async def _pods_for(
        self, namespace: str, selector: str, members: list[tuple[ScaleTarget, JsonObj]]
    ) -> dict[str, list[JsonObj] | Exception]:
        try:
            result = await get_json(self.api, f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector})
        except Exception as exc:
            return {r.ref.key: exc for r, _ in members}
        items: list[JsonObj] = result.get("items") or []
        if len(members) == 1 and selector == label_selector(members[0][1]):
            return {members[0][0].ref.key: items}
        return {
            r.ref.key: [p for p in items if selector_matches(sel, (p.get("metadata") or {}).get("labels") or {})]
            for r, sel in members
        }

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> ScaleResult:
        return await self.target(policy).scale(decision.desired)
