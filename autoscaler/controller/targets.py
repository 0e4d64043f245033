"""Serving targets: read their replicas and pods, and change their size, for every kind of target alike.

``ScaleTarget`` is one policy's target. What differs between kinds (paths, the pods of a target, what one
replica is) comes from its kind's strategy in ``kinds``; how its size changes from its ``Actuation``:
``DirectScale`` writes the ``/scale`` subresource through the one ``scale.ScaleClient``; ``HpaFloor``
(``actuation.mode: hpaFloor``) instead raises or lowers an existing HPA's ``spec.minReplicas`` and leaves the
scaling to that HPA. ``KubeTargets`` serves the loop as its ``TargetReader`` and as the scale half of its
actuator.

Reading: one read of the target and one list of its pods give both the replica status and the pods the
metric sources read (``ScaleTarget.observe``). Every read is plain JSON (``kube.get_json``), never the
client's typed models. ``KubeTargets.observe_many`` reads the targets of many policies at once: per
namespace, one list of the targets of a kind (when it holds more than one, and they are not a few among
thousands: ``LISTED_PER_READ``) and one list of pods per
selector key (``key in (v1, v2, ...)``), each target then taking the pods its own selector matches.

Every write:
1. re-reads the object and skips the write when it already has the desired value (idempotent: a restart in
   the middle of an action neither repeats nor undoes it);
2. checks ownership: one owner per target. An HPA whose ``scaleTargetRef`` names the target, a KEDA
   ``ScaledObject`` (which makes such an HPA), or a ``autoscaler.dev/managed-by`` annotation naming another
   owner makes a direct scale raise ``OwnershipConflict`` rather than fight over the replica count;
   a direct scale first **claims** an unclaimed target: it writes ``autoscaler.dev/managed-by: <policy>``
   on it (a merge patch carrying the resourceVersion read, so of two controllers claiming at once one gets
   409, re-reads, sees the other's claim and refuses). Every replica of this controller runs the same
   policy names, so they share the claim; another controller, or another policy, is refused. The claim also
   names the controller (``autoscaler.dev/managed-by-controller: <namespace>/<lease>``). **Adoption**: a claim
   this same controller wrote for a policy it no longer has (renamed or deleted; one held by the one-owner
   rule is still had) is taken over by the one policy now targeting the object (the load-time rule allows
   one per target), so ownership follows the controller's identity, not a policy name; a claim by another
   controller, or a hand-written one without the controller's name, is never adopted;
3. sends the resourceVersion it read (optimistic concurrency), so a concurrent change answers 409;
4. is retried with jittered backoff on 409 (re-reading first) and on 5xx/429, a bounded number of times;
   a 403 is reported at once (``Forbidden``), never retried;
5. can be a server-side dry run (``scale(..., dry_run=True)``): checked by the server, stored nowhere.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubernetes_asyncio import client

from autoscaler.controller import kinds
from autoscaler.controller.kube import (
    DEFAULT_RETRY,
    MERGE_PATCH,
    Forbidden,
    Gone,
    NotFound,
    Refusal,
    RetryPolicy,
    get_json,
    request_json,
    retrying,
)
from autoscaler.controller.scale import ScaleClient
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import ReplicaStatus, ScaleDecision, TargetKind, TargetRef
from autoscaler.core.spec import Spec
from autoscaler.sources.base import PodRef

JsonObj = dict[str, Any]

#: An annotation a user (or another tool) sets on a target to say who owns its replica count.
MANAGED_BY_ANNOTATION = "autoscaler.dev/managed-by"
#: Written with our claim: which controller (``<namespace>/<lease name>``) the owning policy runs in.
MANAGED_BY_CONTROLLER_ANNOTATION = "autoscaler.dev/managed-by-controller"
#: On an HPA advised in hpaFloor mode: its own minReplicas before we first raised it (we never go below it).
ORIGINAL_MIN_ANNOTATION = "autoscaler.dev/original-min-replicas"
FLOOR_BY_ANNOTATION = "autoscaler.dev/floor-by"
#: At most this many label values in one batched pod list (``key in (...)``), to keep URLs short.
POD_LIST_VALUES = 100


class PodsRead(NamedTuple):
    """Which pods a target view was read from: the namespace, the target's pod selector and the names of every
    pod the list returned (serving or not: starting pods count in the replica status too). A pod watch event
    touches the view when the pod is one of them or its labels match the selector (``PolicyObserver.pod_changed``)."""

    namespace: str
    selector: JsonObj
    names: frozenset[str]

    def touched_by(self, name: str, labels: dict[str, str]) -> bool:
        return name in self.names or selector_matches(self.selector, labels)


class TargetView(NamedTuple):
    """What reading a target gives the loop: its replica status and the serving pods metric sources read;
    ``read_from``, the pods listed for it (None where no pod was listed: a view that no pod change can touch)."""

    replicas: ReplicaStatus
    pods: tuple[PodRef, ...]
    read_from: PodsRead | None = None
    #: The resourceVersions of the target object and of every pod listed, as read: a watch event carrying one of
    #: them delivers a state this read saw (``PolicyObserver`` tells a watch's lag from a view kept wrong by it).
    versions: frozenset[str] = frozenset()


def _versions(obj: JsonObj, pods: Sequence[JsonObj]) -> frozenset[str]:
    """``TargetView.versions``: the resourceVersions of a target object and its pods."""
    return frozenset(v for o in (obj, *pods) if (v := (o.get("metadata") or {}).get("resourceVersion")))


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


async def _list_pages(api: client.ApiClient, path: str) -> list[JsonObj]:
    """Every object of a collection, ``LIST_PAGE`` at a time (one consistent snapshot: each page continues the
    first page's list).

    A continue token lives until etcd compacts its list's revision (every 5 minutes by default); a later page
    then answers ``410 Expired``. As client-go's pager (``ListPager.FullListIfExpired``), the read is then made
    again as one full list: the pages already read are from a revision the server no longer has."""
    items: list[JsonObj] = []
    query: dict[str, str | int] = {"limit": LIST_PAGE}
    while True:
        try:
            page = await get_json(api, path, query=query)
        except Gone:
            if "continue" not in query:
                raise
            whole: list[JsonObj] = (await get_json(api, path)).get("items") or []
            return whole
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query = {"limit": LIST_PAGE, "continue": token}


def _pivot_keys(selector: JsonObj) -> list[str]:
    """The ``matchLabels`` keys a batched pod list may select on (``key in (...)``; not an empty value)."""
    return [k for k, v in (selector.get("matchLabels") or {}).items() if v]


class ScaleTarget:
    """One policy's serving target: read through its kind's strategy (``kinds``), written through its
    actuation (``DirectScale`` on the ``/scale`` subresource, or ``HpaFloor``)."""

    def __init__(
        self,
        api: client.ApiClient,
        ref: TargetRef,
        *,
        owner: str,
        actuation: Actuation | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        now: Callable[[], float] = time.time,
        controller: str = "",
        running: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.api = api
        self.ref = ref
        self.kind = kinds.of(ref.kind)
        #: Who we are, for ownership checks and annotations: the policy name.
        self.owner = owner
        #: The controller the policy runs in (empty: no adoption) and the policy names it runs now.
        self.controller = controller
        self.running = running
        self.actuation: Actuation = actuation or DirectScale()
        self.retry = retry
        self.now = now
        self.scales = ScaleClient(api)

    # --- reading -------------------------------------------------------------------------------------------

    async def read(self) -> JsonObj:
        """The target object as JSON (camelCase keys)."""
        return await get_json(self.api, self.kind.object_path(self.ref))

    def pod_selector(self, obj: JsonObj) -> JsonObj:
        return self.kind.pod_selector(self.ref, obj)

    def view(self, obj: JsonObj, pods: Sequence[JsonObj]) -> TargetView:
        """Replica status (groups for an LWS) and serving pods, from the target object and its pods (all of
        those its pod selector matches)."""
        listed = PodsRead(self.ref.namespace, self.pod_selector(obj),
                          frozenset(str((p.get("metadata") or {}).get("name", "")) for p in pods))
        return TargetView(self.kind.replica_status(obj, pods, self.now()), self.kind.pod_refs(pods), listed,
                          _versions(obj, pods))

    async def observe(self) -> TargetView:
        """Replica status and serving pods from one read of the target and one list of its pods."""
        obj = await self.read()
        pods = await self._list_pods(label_selector(self.pod_selector(obj)))
        return self.view(obj, pods)

    async def replicas(self) -> ReplicaStatus:
        return (await self.observe()).replicas

    async def pods(self) -> tuple[PodRef, ...]:
        return (await self.observe()).pods

    async def _list_pods(self, selector: str) -> list[JsonObj]:
        result = await get_json(
            self.api, f"/api/v1/namespaces/{self.ref.namespace}/pods", query={"labelSelector": selector}
        )
        pods: list[JsonObj] = result.get("items") or []
        return pods

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
            result = await get_json(self.api, f"/apis/keda.sh/v1alpha1/namespaces/{self.ref.namespace}/scaledobjects")
        except (NotFound, Forbidden):
            return []
        return [
            s for s in result.get("items") or []
            if (ref := (s.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == self.ref.name
            and ref.get("kind", "Deployment") == self.ref.kind.value
        ]

    async def check_ownership(self, obj: JsonObj, *, allowed_hpa: str | None = None) -> None:
        """Raise ``OwnershipConflict`` when something other than this policy owns the replica count."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        owner = annotations.get(MANAGED_BY_ANNOTATION)
        if owner and owner != self.owner and not self.adopts(annotations):
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

    def adopts(self, annotations: dict[str, str]) -> bool:
        """Whether a claim naming another policy is ours to take over: written by this very controller for a
        policy it does not run any more (see the module docstring)."""
        owner = annotations.get(MANAGED_BY_ANNOTATION)
        return bool(
            self.controller and self.running is not None and owner
            and annotations.get(MANAGED_BY_CONTROLLER_ANNOTATION) == self.controller
            and owner not in self.running()
        )

    async def claim(self, obj: JsonObj) -> bool:
        """Write ``managed-by: <owner>`` (and, with a controller identity, ``managed-by-controller``) on the
        target unless it carries them already (the first action's claim, or an adoption); conditional on the
        resourceVersion read (409 when someone changed it since). True when written."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        mine = {MANAGED_BY_ANNOTATION: self.owner}
        if self.controller:
            mine[MANAGED_BY_CONTROLLER_ANNOTATION] = self.controller
        if all(annotations.get(k) == v for k, v in mine.items()):
            return False
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": mine}}
        await request_json(self.api, "PATCH", self.kind.object_path(self.ref), body=body, content_type=MERGE_PATCH)
        return True

    # --- writing -------------------------------------------------------------------------------------------

    async def scale(self, desired: int, *, dry_run: bool = False) -> ScaleResult:
        """Set the replica count (idempotent, guarded, retried; see the module docstring). With ``dry_run``
        the server checks the write (``dryRun=All``) and stores nothing; ``written`` then means "would write"."""
        if desired < 0:
            raise ValueError(f"cannot scale {self.ref.key} to {desired} replicas")
        return await retrying(self.retry, lambda: self.actuation.scale_once(self, desired, dry_run=dry_run))


class Actuation(abc.ABC):
    """How a target's size is changed: one read-check-write attempt, which ``ScaleTarget.scale`` retries."""

    @abc.abstractmethod
    async def scale_once(self, target: ScaleTarget, desired: int, *, dry_run: bool) -> ScaleResult: ...


class DirectScale(Actuation):
    """Write the target's ``/scale`` subresource (``scale.ScaleClient``), for every kind alike."""

    async def scale_once(self, target: ScaleTarget, desired: int, *, dry_run: bool) -> ScaleResult:
        ref, unit = target.ref, target.kind.unit
        scale = await target.scales.read(ref)
        if scale.replicas == desired:
            return ScaleResult(ref.key, scale.replicas, desired, written=False, field=unit)
        obj = await target.read()
        await target.check_ownership(obj)
        if not dry_run and await target.claim(obj):
            scale = await target.scales.read(ref)  # the claim moved the resourceVersion the Scale shares
        # The write carries the Scale's resourceVersion: a concurrent change answers 409, then we re-read.
        await target.scales.write(ref, desired, read=scale, dry_run=dry_run)
        return ScaleResult(ref.key, scale.replicas, desired, written=True, field=unit)


@dataclass(frozen=True, slots=True)
class HpaFloor(Actuation):
    """Advisory mode: the named HPA keeps scaling the target; we only move its ``spec.minReplicas`` floor.

    The floor never exceeds the HPA's ``maxReplicas`` and never drops below the HPA's own minReplicas from
    before we first raised it (kept in an annotation on the HPA), nor below 1."""

    hpa_name: str

    def path(self, ref: TargetRef) -> str:
        return f"/apis/autoscaling/v2/namespaces/{ref.namespace}/horizontalpodautoscalers/{self.hpa_name}"

    async def scale_once(self, target: ScaleTarget, desired: int, *, dry_run: bool) -> ScaleResult:
        ref, owner = target.ref, target.owner
        hpa = await get_json(target.api, self.path(ref))
        spec, meta = hpa.get("spec") or {}, hpa.get("metadata") or {}
        scaled = spec.get("scaleTargetRef") or {}
        if scaled.get("kind") != ref.kind.value or scaled.get("name") != ref.name:
            raise OwnershipConflict(
                f"HorizontalPodAutoscaler {ref.namespace}/{self.hpa_name} scales {scaled.get('kind')}/"
                f"{scaled.get('name')}, not {ref.key}; policy {owner} will not move its floor"
            )
        annotations = meta.get("annotations") or {}
        current = int(spec.get("minReplicas") or 1)
        original = int(annotations.get(ORIGINAL_MIN_ANNOTATION, current))
        floor = max(1, original, min(desired, int(spec["maxReplicas"])))
        if floor == current:
            return ScaleResult(ref.key, current, floor, written=False, field="hpa.minReplicas")
        await target.check_ownership(await target.read(), allowed_hpa=self.hpa_name)
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {ORIGINAL_MIN_ANNOTATION: str(original), FLOOR_BY_ANNOTATION: owner},
            },
            "spec": {"minReplicas": floor},
        }
        await request_json(
            target.api, "PATCH", self.path(ref), body=body, content_type=MERGE_PATCH,
            query={"dryRun": "All"} if dry_run else None,
        )
        return ScaleResult(ref.key, current, floor, written=True, field="hpa.minReplicas")


def build_target(
    api: client.ApiClient, spec: Spec, *, owner: str, retry: RetryPolicy = DEFAULT_RETRY,
    now: Callable[[], float] = time.time, controller: str = "", running: Callable[[], Collection[str]] | None = None,
    ref: TargetRef | None = None,
) -> ScaleTarget:
    """The ``ScaleTarget`` for a policy's ``target`` (or ``ref``, another of its targets) and ``actuation``."""
    actuation: Actuation = DirectScale()
    if spec.actuation.mode == "hpaFloor":
        assert spec.actuation.hpa_name is not None  # the spec requires it
        actuation = HpaFloor(spec.actuation.hpa_name)
    return ScaleTarget(api, ref or spec.target.ref(), owner=owner, actuation=actuation, retry=retry, now=now,
                       controller=controller, running=running)


#: A list of a namespace's targets is worth as many single reads as it holds objects over this: decoding one
#: listed Deployment costs ≈ 40 µs (a list of 5,000 ≈ 0.2 s, bench/controller_reaction.py's profile), one read
#: of one object ≈ 1 ms of the client's CPU (estimate). A pass of a few policies in a namespace of thousands
#: reads them one by one instead of listing thousands to keep a few.
LISTED_PER_READ = 25
#: Objects per page of a target list (``limit``/``continue``, as client-go's pager): a namespace of 5,000
#: Deployments listed at once was one JSON document of megabytes, decoded in one go with the event loop held
#: (and encoded in one go by the API server); page by page, what else runs gets the loop between pages.
LIST_PAGE = 500


class KubeTargets:
    """The loop's ``TargetReader`` and the scale half of its actuator, for any number of policies."""

    def __init__(
        self, api: client.ApiClient, *, retry: RetryPolicy = DEFAULT_RETRY, now: Callable[[], float] = time.time
    ) -> None:
        self.api = api
        self.retry = retry
        self.now = now
        #: This controller's identity on its claims, and the policy names it runs now (the runtime sets both;
        #: without them no claim is ever adopted).
        self.controller = ""
        self.running: Callable[[], Collection[str]] | None = None
        #: Objects each (namespace, kind) list last held: whether listing pays (``LISTED_PER_READ``).
        self._listed: dict[tuple[str, TargetKind], int] = {}

    def target(self, policy: CompiledPolicy, ref: TargetRef | None = None) -> ScaleTarget:
        # Built per call: cheap (no I/O), and a hot-reloaded policy never sees a stale target or mode.
        return build_target(self.api, policy.policy.spec, owner=policy.name, retry=self.retry, now=self.now,
                            controller=self.controller, running=self.running, ref=ref)

    async def observe_ref(self, policy: CompiledPolicy, ref: TargetRef) -> TargetView:
        """Replica status and pods of another of the policy's targets (a policy with several targets)."""
        return await self.target(policy, ref).observe()

    async def replicas(self, policy: CompiledPolicy) -> ReplicaStatus:
        return await self.target(policy).replicas()

    async def pods(self, policy: CompiledPolicy) -> tuple[PodRef, ...]:
        return await self.target(policy).pods()

    async def observe(self, policy: CompiledPolicy) -> TargetView:
        """Replica status and serving pods of one policy's target: one read, one list of pods."""
        return await self.target(policy).observe()

    async def observe_many(
        self, policies: Sequence[CompiledPolicy], *, known: Mapping[str, JsonObj] | None = None
    ) -> dict[str, TargetView | Exception]:
        """``observe`` for many policies at once, batched per namespace (see the module docstring); a failed
        read fails only the policies whose targets it was for. Keys are policy names. ``known``: target objects
        by policy name (a live watch's events), not read again; only their pods are listed."""
        readers = {cp.name: self.target(cp) for cp in policies}
        given = known or {}
        objects: dict[str, JsonObj | Exception] = await self._read_objects(
            [r for name, r in readers.items() if name not in given]
        )
        out: dict[str, TargetView | Exception] = {}
        wanted: list[tuple[str, ScaleTarget, JsonObj]] = []
        for name, reader in readers.items():
            obj = given[name] if name in given else objects[reader.ref.key]
            if isinstance(obj, Exception):
                out[name] = obj
            else:
                wanted.append((name, reader, obj))
        pods = await self._list_pods_many([(r, r.pod_selector(obj)) for _, r, obj in wanted])
        for name, reader, obj in wanted:
            found = pods[reader.ref.key]
            out[name] = found if isinstance(found, Exception) else reader.view(obj, found)
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
            info = kinds.of(kind)
            try:
                items = await _list_pages(self.api, info.collection_path(namespace))
            except Exception as exc:
                return {r.ref.key: exc for r in members}
            self._listed[(namespace, kind)] = len(items)
            by_name = {(i.get("metadata") or {}).get("name"): i for i in items}
            return {
                r.ref.key: by_name[r.ref.name] if r.ref.name in by_name
                else NotFound(404, "NotFound", f'{info.resource} "{r.ref.name}" not found')
                for r in members
            }

        if not groups:
            return {}
        tasks = []
        for (namespace, kind), members in groups.items():
            size = self._listed.get((namespace, kind))
            if len(members) > 1 and (size is None or len(members) * LISTED_PER_READ >= size):
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

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision, *, dry_run: bool = False) -> ScaleResult:
        # The decision names its target: a policy with several targets writes each through this one path.
        return await self.target(policy, decision.target).scale(decision.desired, dry_run=dry_run)
