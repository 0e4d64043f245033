"""An in-memory Kubernetes API server on ``aiohttp.web``, close enough to the real one where clients trip.

Why not ``kmock.KubernetesEmulator``: kmock 0.8 stores objects as plain merged dicts ("no special
treatment of special fields"), with no resourceVersion preconditions (no 409 on a stale write), no scale
or status subresources, no distinction between patch content types and no ``410 Gone`` on an expired watch.
Those are exactly the behaviours an actuator must get right, so this module implements them.

What it emulates, per the API conventions (https://github.com/kubernetes/community/.../api-conventions.md):

1. Paths ``/api/v1/...`` and ``/apis/<group>/<version>/...``, namespaced and cluster-scoped, for the kinds in
   ``RESOURCES``; an unknown path or an unserved version answers ``404`` with the server's generic message.
2. Every write bumps one global ``resourceVersion`` (as etcd's revision). ``PUT`` and ``PATCH`` carrying a
   stale ``metadata.resourceVersion`` answer ``409 Conflict`` with the real Status message.
3. ``status`` subresources: writes to the main resource keep the stored status; ``/status`` writes change
   only the status. ``metadata.generation`` rises when the spec changes.
4. ``scale`` subresources (``autoscaling/v1`` Scale) for Deployments and StatefulSets (selector from
   ``spec.selector``) and LeaderWorkerSets (selector from ``status.hpaPodSelector``).
5. Patch content types: ``json-patch+json`` needs a list (``400`` otherwise, as the server's decoder);
   ``merge-patch+json`` (RFC 7386); ``strategic-merge-patch+json`` only for built-in kinds (custom resources
   answer ``415``), applied here as a merge patch (no list-merge keys); ``apply-patch+yaml`` needs
   ``fieldManager`` and is applied as a merge patch (no field ownership).
6. ``list`` with ``resourceVersion``/``resourceVersionMatch``, label and field selectors, ``limit``/``continue``.
   A paged list is one snapshot: later pages serve the list as it was at the first page's resourceVersion (etcd
   reads at that revision), until compaction passes it; then the continue token answers ``410 Expired`` with
   the server's text and an inconsistent token (rv -1) in the Status's ``metadata.continue``. List options are
   validated as apimachinery's ``ValidateListOptions`` (422), and ``continue`` with a ``resourceVersion`` is 400.
7. ``watch``: JSON lines ``ADDED``/``MODIFIED``/``DELETED`` (and ``BOOKMARK`` when asked and allowed); without
   a resourceVersion the stream starts with the current objects as ``ADDED``; a resourceVersion older than the
   compaction point gets an ``ERROR`` event carrying ``410 Expired`` "too old resource version", as the watch
   cache does; a resourceVersion the server has not reached is waited for up to 3 s, then answered with a 504
   ``Too large resource version`` ERROR event. Tests can close every stream (``drop_watches``) to force a
   reconnect. As the watch cache, a
   stream that allowed bookmarks gets one every ``bookmark_every_s`` (60 s, k8s.io/apiserver
   ``storage/cacher/cacher.go`` ``defaultBookmarkFrequency``; None: only ``bookmark()``) and one right
   before its ``timeoutSeconds`` ends it; ``timeoutSeconds`` is the stream's whole life, not a silence.
8. ``?dryRun=All`` writes are answered but not stored; ``DELETE`` honours ``preconditions`` (409).
9. RBAC: ``enforce_rbac(manifests)`` authorizes every request as Kubernetes' RBAC authorizer does, from the
   Roles, ClusterRoles and their bindings in ``manifests`` (by namespace, verb, resource/subresource, API group
   and ``resourceNames``; a RoleBinding grants only in its own namespace), and answers ``403`` to the rest,
   recording each in ``rbac_denied``; single denials (``deny``) answer ``403`` with the authorizer's message
   shape; injected faults (``inject``)
   answer the next N requests to a path with a Status of the given code (a 429 as the max-in-flight and
   priority-and-fairness filters answer it: plain text and ``Retry-After``; ``clear_faults`` ends them early);
   every request is logged (``requests``); ``after`` runs a test's change right after a matching request was
   answered (a race); ``strict`` mode rejects and records any write not declared with ``expect_write``, and the
   ``kube`` fixture fails the test on it (as HPA's tests' ``PrependReactor`` ``assert.Fail``).

10. Failing as a real server does (faults a controller must survive): ``slow`` answers matching requests late
   (``before``: the request waits before it is processed; ``after``: it is processed, committed, then
   answered late, as a renewal the server stored but whose answer was delayed); ``black_hole`` never
   answers (the connection stays open until the client gives up, as behind a dead load balancer);
   ``inject`` with 410 on a watch (or any code with ``in_stream=True``) answers as the watch cache does (HTTP
   200, then an ``ERROR`` event carrying the Status apimachinery builds: ``410 Expired``, or ``Gone`` with
   ``reason``; ``500 InternalError`` "Internal error occurred: ..."; ``504 Timeout``); ``clear_faults`` ends them
   all. Each may be limited to one client by its User-Agent
   (``agent``), so a test can cut off one controller replica and not the other. All waits are on the event
   loop's clock (virtual under looptime).
11. Event validation as the API server's (``ValidateEventCreate``/``ValidateEventUpdate``, ``_event_problems``):
   an ``events.k8s.io/v1`` Event needs ``eventTime``, ``reportingController`` (a qualified name),
   ``reportingInstance``, ``action`` and ``reason`` (each at most 128 bytes), a ``note`` of at most 1,024
   **bytes**, a ``type`` of Normal or Warning, a ``series`` of count >= 2 with ``lastObservedTime``, and may change
   only its ``series`` on update (``422`` otherwise); core ``v1`` Events are held to the legacy rules only
   (``legacyValidateEvent``: without an ``eventTime``, the Event's namespace equals ``involvedObject.namespace``;
   with one, the reporting fields are required as above), field paths by the internal names the server reports.
12. Custom resources whose CRD this repository ships (ScalingPolicy) are pruned to their structural schema and
   validated against it (``422``), as apiextensions-apiserver does (``_structural``).
13. Validating admission webhooks on updates made through HTTP (``webhooks``; Kueue's Workload webhook is
   installed: ``spec.podSets`` immutable while quota is reserved, ``status.admission`` not changed in place; so are
   LeaderWorkerSet's (``lws_update_problems``) and JobSet's (``jobset_update_problems``), not on ``/scale``);
   a denial is a 403 "admission webhook ... denied the request: ...", as the API server relays it.
14. Server-side field validation (``fieldValidation``: ``Warn`` by default, ``Strict``, ``Ignore``) of the fields the
   server drops (``unknown_fields``): ``metadata`` fields ObjectMeta lacks, fields our CRD's schema lacks, a
   Scale's unknown fields, the Kueue, LeaderWorkerSet and JobSet CRDs' undeclared fields (``tests.kube.crds``,
   pruned as well): a ``Warning`` header (recorded in ``warnings``), 400 under Strict. A test fixture (``add``,
   ``modify``) that writes an undeclared field, or a Workload Kueue's CEL rules refuse, raises ``ValueError``.
15. Kueue's Workload CEL rules (``crds.workload_rule_problems``) on create and update: 422 ``Invalid``; the
   Kueue, LeaderWorkerSet and JobSet CRDs' defaults (``crds.DEFAULTS``: an LWS's ``replicas`` and ``size`` 1, a
   Workload's ``active`` true, a podSet's ``count`` 1...) filled in on every write, and their types, enums,
   minimums and required fields (``crds.SCHEMA``) checked: 422 ``Invalid`` with apiextensions-apiserver's text.
16. A write that changes nothing stores nothing: same resourceVersion, no watch event (etcd3 ``GuaranteedUpdate``).
17. ``ValidateObjectMeta``: names are DNS subdomains (on create), label and annotation keys qualified names,
   annotations at most 256 KiB, label values at most 63 characters; an HPA's ``minReplicas``/``maxReplicas``
   bounds; ``dryRun`` other than ``All`` is 422.
18. ``Warning`` headers as the server writes them (``warning_header``: the text quoted, ``"`` escaped); a deprecated
   version (``deprecate``) warns on every request with apiextensions-apiserver's default text.

Events of ``v1`` and ``events.k8s.io/v1`` are stored apart (the real server converts between them).
Kueue ``v1beta1`` and ``v1beta2`` share one storage (v1beta2) with the priority-class field converted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import fnmatch
import functools
import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml
from aiohttp import web

from tests.kube import crds
from tests.kube import schema as crd_schema

JsonObj = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_USER = "system:serviceaccount:autoscaler:autoscaler"
#: Fixed creation time: tests stay deterministic; a test that needs ages sets its own timestamps.
DEFAULT_TIMESTAMP = "2026-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class ScaleSpec:
    """Where a kind's scale subresource reads and writes (the CRD ``subresources.scale`` paths)."""

    spec_replicas: tuple[str, ...]
    status_replicas: tuple[str, ...]
    selector: Callable[[JsonObj], str]


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    versions: tuple[str, ...]  # the last one is the storage version
    plural: str
    kind: str
    namespaced: bool = True
    builtin: bool = True
    status: bool = True
    scale: ScaleSpec | None = None

    @property
    def storage_version(self) -> str:
        return self.versions[-1]

    @property
    def qualified(self) -> str:
        """``deployments.apps``: how the server names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


def _dig(obj: Any, path: Iterable[str]) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _put(obj: JsonObj, path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj.setdefault(part, {})
    obj[path[-1]] = value


def selector_string(selector: JsonObj | None) -> str:
    """A ``LabelSelector`` as the label-selector string a Scale's ``status.selector`` carries."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(sorted(expr.get("values") or []))
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}.get(op, f"!{key}")
        )
    return ",".join(parts)


def _deployment_selector(obj: JsonObj) -> str:
    return selector_string(_dig(obj, ("spec", "selector")))


def _lws_selector(obj: JsonObj) -> str:
    return str(_dig(obj, ("status", "hpaPodSelector")) or "")


REPLICAS_SCALE = ("spec", "replicas")

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", ("v1",), "pods", "Pod"),
    ResourceType("", ("v1",), "events", "Event", status=False),
    ResourceType("", ("v1",), "namespaces", "Namespace", namespaced=False),
    ResourceType("events.k8s.io", ("v1",), "events", "Event", status=False),
    ResourceType(
        "apps", ("v1",), "deployments", "Deployment",
        scale=ScaleSpec(REPLICAS_SCALE, ("status", "replicas"), _deployment_selector),
    ),
    # A StatefulSet's Scale is a Deployment's: spec.replicas, status.replicas, the selector from spec.selector
    # (kubernetes pkg/registry/apps/statefulset/storage/storage.go, scaleFromStatefulSet).
    ResourceType(
        "apps", ("v1",), "statefulsets", "StatefulSet",
        scale=ScaleSpec(REPLICAS_SCALE, ("status", "replicas"), _deployment_selector),
    ),
    ResourceType(
        "leaderworkerset.x-k8s.io", ("v1",), "leaderworkersets", "LeaderWorkerSet", builtin=False,
        scale=ScaleSpec(REPLICAS_SCALE, ("status", "replicas"), _lws_selector),
    ),
    ResourceType("autoscaling", ("v2",), "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    ResourceType("batch", ("v1",), "jobs", "Job"),
    ResourceType("jobset.x-k8s.io", ("v1alpha2",), "jobsets", "JobSet", builtin=False),
    ResourceType("ray.io", ("v1",), "rayjobs", "RayJob", builtin=False),
    ResourceType("keda.sh", ("v1alpha1",), "scaledobjects", "ScaledObject", builtin=False),
    ResourceType("kueue.x-k8s.io", ("v1beta1", "v1beta2"), "workloads", "Workload", builtin=False),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta1", "v1beta2"), "clusterqueues", "ClusterQueue", namespaced=False,
        builtin=False,
    ),
    ResourceType("kueue.x-k8s.io", ("v1beta1", "v1beta2"), "localqueues", "LocalQueue", builtin=False),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta1", "v1beta2"), "workloadpriorityclasses", "WorkloadPriorityClass",
        namespaced=False, builtin=False, status=False,
    ),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta1", "v1beta2"), "resourceflavors", "ResourceFlavor", namespaced=False,
        builtin=False, status=False,
    ),
    # Topology-aware admission (the TPU dynamic-slicing codelab): Kueue's Topology and AdmissionCheck, and Nodes.
    ResourceType(
        "kueue.x-k8s.io", ("v1beta1", "v1beta2"), "topologies", "Topology", namespaced=False, builtin=False,
        status=False,
    ),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta1", "v1beta2"), "admissionchecks", "AdmissionCheck", namespaced=False,
        builtin=False,
    ),
    ResourceType("", ("v1",), "nodes", "Node", namespaced=False),
    ResourceType("coordination.k8s.io", ("v1",), "leases", "Lease", status=False),
    # Ours (deploy/base/crd.yaml): a namespaced custom resource with a status subresource.
    ResourceType("autoscaler.dev", ("v1alpha1",), "scalingpolicies", "ScalingPolicy", builtin=False),
)

_WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
_POD_PC_SOURCE = "scheduling.k8s.io/priorityclass"


def _convert(rt: ResourceType, obj: JsonObj, version: str) -> JsonObj:
    """Convert a stored object to ``version`` (the fields that differ between Kueue v1beta1 and v1beta2)."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = rt.api_version(version)
    out["kind"] = rt.kind
    if rt.group != "kueue.x-k8s.io":
        return out
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    if rt.plural == "workloads":
        if version == "v1beta1" and "priorityClassRef" in spec:
            ref = spec.pop("priorityClassRef") or {}
            spec["priorityClassName"] = ref.get("name", "")
            spec["priorityClassSource"] = (
                _WPC_SOURCE if ref.get("kind") == "WorkloadPriorityClass" else _POD_PC_SOURCE
            )
        elif version == "v1beta2" and "priorityClassName" in spec:
            name = spec.pop("priorityClassName")
            source = spec.pop("priorityClassSource", _WPC_SOURCE)
            if source == _WPC_SOURCE:
                spec["priorityClassRef"] = {
                    "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": name,
                }
            else:
                spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
    if rt.plural == "clusterqueues":
        if version == "v1beta1" and "cohortName" in spec:
            spec["cohort"] = spec.pop("cohortName")
        elif version == "v1beta2" and "cohort" in spec:
            spec["cohortName"] = spec.pop("cohort")
    return out


# --- Status objects, with the messages the real server sends ---------------------------------------------


def warning_header(text: str) -> str:
    """A ``Warning`` header value as the API server writes it (k8s.io/apimachinery ``pkg/util/net``
    ``NewWarningHeader``): code 299, agent ``-``, the text quoted with ``"`` and ``\\`` escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def status_body(code: int, reason: str, message: str, details: JsonObj | None = None) -> JsonObj:
    body: JsonObj = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


_REASONS = {
    400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
    410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


class ApiError(Exception):
    """Raised inside the emulator; becomes a Status response."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: JsonObj | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.message = message
        self.details = details
        #: The Status's ``metadata`` (a ListMeta: an expired continue token's ``continue``).
        self.list_meta: JsonObj = {}

    def body(self) -> JsonObj:
        body = status_body(self.code, self.reason, self.message, self.details)
        body["metadata"] = dict(self.list_meta)
        return body


#: How long the watch cache waits for a resourceVersion it has not reached before it answers 504 (``blockTimeout``,
#: k8s.io/apiserver storage/cacher/watch_cache.go).
TOO_LARGE_WAIT_S = 3.0


def too_large(requested: int, current: int) -> JsonObj:
    """k8s.io/apiserver storage ``NewTooLargeResourceVersionError``: a 504 ``Timeout`` Status, its message prefixed
    by ``NewTimeoutError``, a ``ResourceVersionTooLarge`` cause and ``retryAfterSeconds`` 1 (the cacher's
    ``resourceVersionTooHighRetrySeconds``)."""
    return status_body(
        504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
        {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
         "retryAfterSeconds": 1},
    )


def _details(rt: ResourceType, name: str | None) -> JsonObj:
    details: JsonObj = {"group": rt.group, "kind": rt.plural}
    if name:
        details["name"] = name
    return details


#: The 410 answer to a continue token whose resourceVersion was compacted (k8s.io/apiserver storage/etcd3/store.go,
#: ``inconsistentContinue``).
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


#: Custom resources whose CRD this repository ships, by (group, plural): the file of its CRD.
CRD_FILES = {
    ("autoscaler.dev", "scalingpolicies"): Path(__file__).resolve().parents[2] / "deploy" / "base" / "crd.yaml",
}


@functools.cache
def _crd_schema(group: str, plural: str) -> JsonObj | None:
    path = CRD_FILES.get((group, plural))
    if path is None:
        return None
    (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
    schema: JsonObj = version["schema"]["openAPIV3Schema"]
    return schema


def _structural(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """A custom resource as the server stores it, for the CRDs this repository ships (``CRD_FILES``): fields its
    structural schema does not declare are pruned, and what is left must validate (422 ``Invalid`` otherwise),
    as apiextensions-apiserver does. The third-party CRDs of ``crds.FIELDS`` are pruned to their declared fields
    (no schema validation); other kinds pass as they are (their schemas are not here)."""
    schema = _crd_schema(rt.group, rt.plural)
    if schema is None:
        if (rt.group, rt.plural) not in crds.FIELDS:
            return obj
        obj = crds.prune(rt.group, rt.plural, crds.default(rt.group, rt.plural, obj))
        invalid = crds.schema_problems(rt.group, rt.plural, obj)
        if invalid:
            name = (obj.get("metadata") or {}).get("name", "")
            text = invalid[0] if len(invalid) == 1 else "[" + ", ".join(invalid) + "]"
            raise ApiError(422, f'{rt.kind}.{rt.group} "{name}" is invalid: {text}', "Invalid",
                           {"group": rt.group, "kind": rt.kind, "name": name})
        return obj
    pruned: JsonObj = crd_schema.prune(obj, schema)
    problems = sorted(
        jsonschema.Draft7Validator(crd_schema.as_json_schema(schema, closed=False)).iter_errors(pruned),
        key=lambda e: list(e.absolute_path),
    )
    if problems:
        name = (obj.get("metadata") or {}).get("name", "")
        causes = ", ".join(f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in problems[:5])
        raise ApiError(422, f'{rt.kind}.{rt.group} "{name}" is invalid: {causes}', "Invalid",
                       {"group": rt.group, "kind": rt.kind, "name": name})
    return pruned


#: ObjectMeta's fields (k8s.io/apimachinery pkg/apis/meta/v1 types.go): any other ``metadata`` field is dropped.
OBJECT_META = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})
#: The fields of built-in kinds whose full schema is not here, by (group, plural, subresource) and dotted parent path
#: ("" for the top level): autoscaling/v1 ``Scale`` (k8s.io/api autoscaling/v1 types.go). Third-party CRDs (Kueue,
#: LeaderWorkerSet, JobSet) are in ``crds.FIELDS``.
KNOWN_FIELDS: dict[tuple[str, str, str | None], dict[str, frozenset[str]]] = {
    **{(g, p, "scale"): {
        "": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
        "spec": frozenset({"replicas"}), "status": frozenset({"replicas", "selector"}),
    } for g, p in (("apps", "deployments"), ("apps", "statefulsets"),
                   ("leaderworkerset.x-k8s.io", "leaderworkersets"))},
}


def unknown_fields(rt: ResourceType, subresource: str | None, obj: JsonObj) -> list[str]:
    """The dotted paths of the fields of ``obj`` the server drops on a write: ``metadata`` fields ObjectMeta does
    not have (every kind), fields a shipped CRD's structural schema does not declare (``CRD_FILES``: what
    ``_structural`` prunes), fields the third-party CRDs of ``crds.FIELDS`` do not declare, and fields of
    ``KNOWN_FIELDS``' kinds outside their lists. Other kinds' bodies are not checked (their schemas are not
    here)."""
    meta = obj.get("metadata")
    out = [f"metadata.{k}" for k in meta if k not in OBJECT_META] if isinstance(meta, dict) else []
    schema = _crd_schema(rt.group, rt.plural) if subresource != "scale" else None
    if schema is not None:
        out.extend(crd_schema.dropped(obj, crd_schema.prune(obj, schema)))
    if subresource != "scale":
        out.extend(crds.undeclared(rt.group, rt.plural, obj))
    for parent, known in KNOWN_FIELDS.get((rt.group, rt.plural, subresource), {}).items():
        node = _dig(obj, parent.split(".")) if parent else obj
        if isinstance(node, dict):
            out.extend(f"{parent}.{k}" if parent else k for k in node if k not in known)
    return out


#: k8s.io/kubernetes pkg/apis/core/validation/events.go: the limits of an Event with an ``eventTime`` (Go's ``len``:
#: bytes), by the internal field names the server's messages use.
EVENT_LIMITS = {"reportingInstance": 128, "action": 128, "reason": 128, "message": 1024}
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
#: An Event's fields by the internal (``core.Event``) names the server validates and reports, and where each is
#: written through core ``v1`` and through ``events.k8s.io/v1`` (k8s.io/kubernetes pkg/apis/events/v1
#: conversion.go: ``regarding`` is ``involvedObject``, ``note`` is ``message``, ``deprecatedCount`` is ``count``...).
_EVENT_FIELDS: dict[str, tuple[str, str]] = {
    "involvedObject": ("involvedObject", "regarding"), "related": ("related", "related"),
    "reason": ("reason", "reason"), "message": ("message", "note"), "type": ("type", "type"),
    "eventTime": ("eventTime", "eventTime"), "action": ("action", "action"), "series": ("series", "series"),
    "reportingController": ("reportingComponent", "reportingController"),
    "reportingInstance": ("reportingInstance", "reportingInstance"),
    "source": ("source", "deprecatedSource"), "firstTimestamp": ("firstTimestamp", "deprecatedFirstTimestamp"),
    "lastTimestamp": ("lastTimestamp", "deprecatedLastTimestamp"), "count": ("count", "deprecatedCount"),
}
#: What an update through events.k8s.io/v1 may not change (``ValidateEventUpdate``); ``series`` may change.
_EVENT_IMMUTABLE = ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
                    "type", "eventTime", "action", "related", "reportingController", "reportingInstance")


def _internal_event(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """``obj`` by the internal field names (``_EVENT_FIELDS``), as the server converts it before validating."""
    at = 1 if rt.group else 0
    return {internal: obj.get(names[at]) for internal, names in _EVENT_FIELDS.items()}


def _legacy_event_problems(event: JsonObj, namespace: str) -> list[tuple[str, str]]:
    """``legacyValidateEvent``: every Event, whatever its API. Without an ``eventTime`` (an old-style Event) only
    its namespace must agree with ``involvedObject.namespace`` (both empty, or the Event in "default", is allowed);
    with one, the involved object may lack a namespace only for an Event in "default" or "kube-system", and the
    reporting controller (a qualified name), instance, action and reason are required, each within its limit
    (``EVENT_LIMITS``). The Event's namespace must be a DNS subdomain."""
    out: list[tuple[str, str]] = []
    involved = str((event.get("involvedObject") or {}).get("namespace") or "")
    mismatch = ("involvedObject.namespace", f'Invalid value: "{involved}": does not match event.namespace')
    if not event.get("eventTime"):
        if (not involved and namespace not in ("", "default")) or (involved and namespace != involved):
            out.append(mismatch)
    else:
        if not involved and namespace not in ("default", "kube-system"):
            out.append(mismatch)
        controller = str(event.get("reportingController") or "")
        if not controller:
            out.append(("reportingController", "Required value"))
        if not _QUALIFIED_NAME.match(controller):
            out.append(("reportingController", f'Invalid value: "{controller}": must be a qualified name'))
        for f in ("reportingInstance", "action", "reason"):
            if not event.get(f):
                out.append((f, "Required value"))
        for f, limit in EVENT_LIMITS.items():
            if len(str(event.get(f) or "").encode()) > limit:
                out.append((f, f'Invalid value: "": can have at most {limit} characters'))
    if name_problem(namespace):
        out.append(("namespace", f'Invalid value: "{namespace}": {name_problem(namespace)}'))
    return out


def _event_problems(rt: ResourceType, obj: JsonObj, old: JsonObj | None) -> list[tuple[str, str]]:
    """``ValidateEventCreate`` / ``ValidateEventUpdate`` (k8s.io/kubernetes pkg/apis/core/validation/events.go),
    field for field: every Event passes ``_legacy_event_problems``; one written through core ``v1`` is held to
    nothing more (backwards compatibility); one written through ``events.k8s.io/v1`` also needs, on create, an
    ``eventTime``, a ``type`` of Normal or Warning, a valid ``series`` and its deprecated fields unset, and on update
    may change only its ``series``. Field paths are the internal names the server reports (``involvedObject``,
    ``message``, ``count``)."""
    event = _internal_event(rt, obj)
    out = _legacy_event_problems(event, str((obj.get("metadata") or {}).get("namespace") or ""))
    if not rt.group:  # core v1: no further validation
        return out
    if old is not None:
        before = _internal_event(rt, old)
        if event["series"] != before["series"]:
            out.extend(_series_problems(event["series"]))
        out.extend((f, "field is immutable") for f in _EVENT_IMMUTABLE if event[f] != before[f])
        return out
    out.extend(_series_problems(event["series"]))
    if not event.get("eventTime"):
        out.append(("eventTime", "Required value"))
    if event.get("type") not in ("Normal", "Warning"):
        out.append(("type", f'Invalid value: "": has invalid value: {event.get("type") or ""}'))
    source = event.get("source")
    for f in ("firstTimestamp", "lastTimestamp", "count", "source"):
        if (f != "source" and event.get(f)) or (f == "source" and isinstance(source, dict) and any(source.values())):
            out.append((f, 'Invalid value: "": needs to be unset'))
    return out


#: Go's layouts (k8s.io/apimachinery pkg/apis/meta/v1): ``MicroTime`` decodes with ``RFC3339Micro``
#: ("2006-01-02T15:04:05.000000Z07:00": exactly six fractional digits), ``Time`` with ``time.RFC3339`` (any or no
#: fraction). A timestamp either layout refuses fails the body's decoding: 400.
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
#: The timestamps of the kinds the controller writes with them, by (group, plural): (path, is MicroTime).
_TIMESTAMPS: dict[tuple[str, str], tuple[tuple[tuple[str, ...], bool], ...]] = {
    ("events.k8s.io", "events"): ((("eventTime",), True), (("series", "lastObservedTime"), True),
                                  (("deprecatedFirstTimestamp",), False), (("deprecatedLastTimestamp",), False)),
    ("", "events"): ((("eventTime",), True), (("series", "lastObservedTime"), True), (("firstTimestamp",), False),
                     (("lastTimestamp",), False)),
    ("coordination.k8s.io", "leases"): ((("spec", "acquireTime"), True), (("spec", "renewTime"), True)),
}


def _bad_time(rt: ResourceType, obj: JsonObj) -> str | None:
    """Go's parse error for the first timestamp of ``obj`` its type's layout refuses (``_TIMESTAMPS``), or None."""
    for path, micro in _TIMESTAMPS.get((rt.group, rt.plural), ()):
        value = _dig(obj, path)
        if value is None:
            continue
        if not isinstance(value, str) or not (_MICRO_TIME if micro else _TIME).match(value):
            layout = "2006-01-02T15:04:05.000000Z07:00" if micro else "2006-01-02T15:04:05Z07:00"
            return f'{".".join(path)}: parsing time "{value}" as "{layout}": cannot parse'
    return None


#: k8s.io/apimachinery ``pkg/util/validation``: a qualified name (label and annotation keys) and a label value.
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
#: ``TotalAnnotationSizeLimitB`` (k8s.io/apimachinery pkg/api/validation/objectmeta.go): 256 KiB of keys and values.
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _qualified_name_problem(key: str) -> str | None:
    """``IsQualifiedName``: an optional DNS-subdomain prefix (at most 253) and ``/``, then a name of at most 63
    characters, alphanumeric at both ends, ``-``, ``_``, ``.`` inside."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character, and be at most 63 characters")
    return None


def name_problem(name: str) -> str | None:
    """``NameIsDNSSubdomain`` (k8s.io/apimachinery pkg/util/validation ``IsDNS1123Subdomain``), the name rule of
    every kind this emulator serves: at most 253 characters, lowercase alphanumeric, ``-`` and ``.``, each
    ``.``-separated part starting and ending alphanumeric. None when valid."""
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.match(name):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    return None


def meta_problems(meta: JsonObj) -> list[str]:
    """``ValidateObjectMeta``'s rules on labels and annotations (k8s.io/apimachinery pkg/api/validation
    objectmeta.go ``ValidateAnnotations``, pkg/apis/meta/v1/validation ``ValidateLabels``): every key a qualified
    name; annotations at most 256 KiB together; label values at most 63 characters of the label alphabet."""
    out = []
    annotations = meta.get("annotations") or {}
    for key in annotations:
        why = _qualified_name_problem(str(key).lower())
        if why:
            out.append(f'metadata.annotations: Invalid value: "{key}": {why}')
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        out.append(f"metadata.annotations: Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes")
    for key, value in (meta.get("labels") or {}).items():
        why = _qualified_name_problem(str(key))
        if why:
            out.append(f'metadata.labels: Invalid value: "{key}": {why}')
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            out.append(f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string or consist '
                       "of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                       "character, at most 63 characters")
    return out


def _hpa_problems(spec: JsonObj) -> list[str]:
    """``validateHorizontalPodAutoscalerSpec`` (k8s.io/kubernetes pkg/apis/autoscaling/validation): ``minReplicas``
    at least 1 (0 only behind the HPAScaleToZero gate, off by default), ``maxReplicas`` at least 1 and at least
    ``minReplicas``."""
    out = []
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if low is not None and int(low) < 1:
        out.append(f"spec.minReplicas: Invalid value: {low}: must be greater than or equal to 1")
    if high is not None and int(high) < 1:
        out.append(f"spec.maxReplicas: Invalid value: {high}: must be greater than 0")
    elif high is not None and low is not None and int(high) < int(low):
        out.append(f"spec.maxReplicas: Invalid value: {high}: must be greater than or equal to `minReplicas`")
    return out


def _series_problems(series: Any) -> list[tuple[str, str]]:
    if not isinstance(series, dict):
        return []
    out = []
    if int(series.get("count") or 0) < 2:
        out.append(("series.count", "should be at least 2"))
    if not series.get("lastObservedTime"):
        out.append(("series.lastObservedTime", "Required value"))
    return out


def _list_key(obj: JsonObj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _continue_token(rv: int, start: tuple[str, str] | None) -> str:
    """An opaque continue token, as the server's (base64 JSON of the list's resourceVersion and the last key)."""
    data = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(start) if start else ["", ""]}
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', "NotFound", _details(rt, name))


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        _details(rt, name),
    )


# --- Patches -----------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: JsonObj = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(400, f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> tuple[Any, str]:
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"invalid JSON patch operation {op!r}")
        try:
            parts = _pointer(op["path"])
            kind = op["op"]
            if kind in ("move", "copy"):
                src, key = _container(doc, _pointer(op["from"]))
                value = src[int(key)] if isinstance(src, list) else src[key]
                if kind == "move":
                    del src[int(key) if isinstance(src, list) else key]
                op = {"op": "add", "path": op["path"], "value": copy.deepcopy(value)}  # noqa: PLW2901
                kind = "add"
            if not parts:
                if kind in ("add", "replace"):
                    doc = copy.deepcopy(op["value"])
                    continue
                raise ApiError(422, f"json patch {kind} on the whole document is not allowed")
            parent, key = _container(doc, parts)
            if kind == "test":
                current = parent[int(key)] if isinstance(parent, list) else parent[key]
                if current != op["value"]:
                    raise ApiError(422, f"the server rejected our request: test failed at {op['path']}")
            elif kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if key == "-" else int(key), copy.deepcopy(op["value"]))
                else:
                    parent[key] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(key)] = copy.deepcopy(op["value"])
                else:
                    if key not in parent:
                        raise ApiError(422, f"replace operation does not apply: doc is missing key: {op['path']}")
                    parent[key] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    del parent[int(key)]
                else:
                    if key not in parent:
                        raise ApiError(422, f"remove operation does not apply: doc is missing path: {op['path']}")
                    del parent[key]
            else:
                raise ApiError(400, f"unknown JSON patch operation {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, f"json patch {op.get('op')} at {op.get('path')} does not apply: {exc}") from None
    return doc


# --- Selectors -----------------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|=|!=)\s*([\w./-]*))?\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def label_selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality- and set-based label selectors (``a=b``, ``a!=b``, ``a in (x,y)``, ``a``, ``!a``)."""
    if not selector:
        return True
    for term in _split_selector(selector):
        match = _SET_RE.match(term)
        if not match:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
        negate, key, set_op, set_values, eq_op, value = match.groups()
        present, actual = key in labels, labels.get(key)
        if set_op:
            values = {v.strip() for v in set_values.split(",") if v.strip()}
            ok = (present and actual in values) if set_op == "in" else (not present or actual not in values)
        elif eq_op:
            ok = (actual == value) if eq_op in ("=", "==") else (not present or actual != value)
        else:
            ok = present != bool(negate)
        if not ok:
            return False
    return True


def field_selector_matches(selector: str | None, obj: JsonObj) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        op = "!=" if "!=" in term else ("==" if "==" in term else "=")
        path, value = term.split(op, 1)
        actual = _dig(obj, path.strip().split("."))
        actual_text = "" if actual is None else str(actual)
        if (actual_text == value.strip()) == (op == "!="):
            return False
    return True


# --- Bookkeeping for tests -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """One request as the emulator received it, for assertions."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""  # plural, or plural/subresource
    namespace: str | None = None
    name: str | None = None
    status: int = 0
    #: The ``Warning`` headers answered (``unknown field "..."`` under ``fieldValidation`` Warn, the default).
    warnings: list[str] = field(default_factory=list)

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@dataclass(slots=True)
class Fault:
    code: int
    path: str
    method: str | None
    remaining: int
    message: str
    retry_after: int | None = None
    agent: str | None = None  # only requests whose User-Agent contains this
    #: On a watch: answer 200 and send the Status as an ``ERROR`` event (always so for 410), as the watch cache
    #: and the etcd watcher do for errors met after the request was accepted.
    in_stream: bool = False
    reason: str | None = None  # the Status's reason (None: the usual one for the code)
    #: A 429 from the max-in-flight / priority-and-fairness filters (plain text), not from a handler (a Status).
    filtered: bool = True

    def matches(self, method: str, path: str, agent: str = "") -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.agent is not None and self.agent not in agent:
            return False
        return fnmatch.fnmatchcase(path, self.path)


@dataclass(slots=True)
class Delay:
    """Answer matching requests late (``seconds``), or never (``seconds`` None: a black hole)."""

    path: str
    method: str | None
    seconds: float | None
    remaining: int | None  # None: until cleared
    after: bool = False  # process and commit first, answer late
    agent: str | None = None
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, method: str, path: str, agent: str = "") -> bool:
        if self.remaining == 0:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.agent is not None and self.agent not in agent:
            return False
        return fnmatch.fnmatchcase(path, self.path)

    async def wait(self) -> None:
        """Hold the request: ``seconds`` (virtual under looptime), or until cleared for a black hole."""
        if self.seconds is None:
            await self.released.wait()
            # Cleared: the request was lost in the hole all the same; the client has long given up.
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(self.seconds)


@dataclass(slots=True)
class Hook:
    """Run ``action`` after the server answered a matching request (a controller racing the client)."""

    method: str
    path: str
    action: Callable[[], None]
    remaining: int

    def matches(self, method: str, path: str) -> bool:
        return self.remaining > 0 and self.method == method and fnmatch.fnmatchcase(path, self.path)


@dataclass(frozen=True, slots=True)
class Denial:
    verb: str  # "*" for any
    resource: str  # "deployments" or "deployments/scale"; "*" for any
    namespace: str | None = None  # None: any namespace
    group: str | None = None  # None: any group

    def matches(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource)
            and (self.namespace is None or self.namespace == namespace)
            and (self.group is None or self.group == group)
        )


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One ``rules[]`` entry of a Role or ClusterRole."""

    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    resource_names: frozenset[str]

    def allows(self, verb: str, group: str, resource: str, name: str | None) -> bool:
        _, _, sub = resource.partition("/")
        return (
            bool(self.api_groups & {"*", group})
            and bool(self.verbs & {"*", verb})
            and bool(self.resources & {"*", resource, f"*/{sub}" if sub else "*"})
            # resourceNames restrict to named requests: a list, a watch or a create never matches them.
            and (not self.resource_names or (name is not None and name in self.resource_names))
        )


class Rbac:
    """Kubernetes' RBAC authorizer over a set of manifests: a request is allowed when a rule of a role bound
    to the user allows it. ClusterRoleBindings grant everywhere; a RoleBinding grants its role's rules (a Role
    of its namespace or a ClusterRole) in its own namespace only. No aggregation, no nonResourceURLs."""

    def __init__(self, manifests: Iterable[JsonObj], user: str) -> None:
        self.user = user
        groups = {"system:authenticated"}
        if user.startswith("system:serviceaccount:"):
            groups |= {"system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"}
        self.groups = groups
        docs = [d for d in manifests if isinstance(d, dict)]
        roles: dict[tuple[str, str | None, str], list[PolicyRule]] = {}
        for d in docs:
            if d.get("kind") in ("Role", "ClusterRole"):
                ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
                roles[(d["kind"], ns, d["metadata"]["name"])] = [
                    PolicyRule(frozenset(r.get("apiGroups") or ()), frozenset(r.get("resources") or ()),
                               frozenset(r.get("verbs") or ()), frozenset(r.get("resourceNames") or ()))
                    for r in d.get("rules") or []
                ]
        #: (namespace the grant holds in, None = everywhere, rules)
        self.grants: list[tuple[str | None, list[PolicyRule]]] = []
        for d in docs:
            if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding") or not self._binds_me(d):
                continue
            ref = d["roleRef"]
            ns = d["metadata"].get("namespace") if d["kind"] == "RoleBinding" else None
            role_ns = ns if ref["kind"] == "Role" else None
            rules = roles.get((ref["kind"], role_ns, ref["name"]), [])  # a missing role grants nothing
            self.grants.append((ns, rules))

    def _binds_me(self, binding: JsonObj) -> bool:
        for subject in binding.get("subjects") or []:
            kind = subject.get("kind")
            if kind == "ServiceAccount":
                ns = subject.get("namespace") or binding["metadata"].get("namespace")
                if self.user == f"system:serviceaccount:{ns}:{subject.get('name')}":
                    return True
            elif (kind == "User" and subject.get("name") == self.user) or (
                kind == "Group" and subject.get("name") in self.groups
            ):
                return True
        return False

    def allows(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        return any(
            (where is None or where == namespace) and any(r.allows(verb, group, resource, name) for r in rules)
            for where, rules in self.grants
        )


@dataclass(slots=True)
class Expectation:
    method: str
    path: str  # fnmatch pattern
    times: int | None  # None: any number

    def matches(self, method: str, path: str) -> bool:
        return self.method == method and fnmatch.fnmatchcase(path, self.path) and self.times != 0


@dataclass(slots=True)
class _Watcher:
    rt: ResourceType
    version: str
    namespace: str | None
    labels: str | None
    fields: str | None
    bookmarks: bool
    queue: asyncio.Queue[JsonObj | None] = field(default_factory=asyncio.Queue)

    def sees(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return label_selector_matches(self.labels, meta.get("labels") or {}) and field_selector_matches(
            self.fields, obj
        )


@dataclass(frozen=True, slots=True)
class _Target:
    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


StoreKey = tuple[str, str, str, str]  # group, plural, namespace ("" when cluster-scoped), name


@dataclass(frozen=True, slots=True)
class Webhook:
    """A validating admission webhook on updates of ``resources`` (``workloads``, ``workloads/status``,
    ``deployments/scale``: a Scale's webhook sees Scale objects): ``validate_update(new, old)`` returns the field
    errors, as ``field.ErrorList`` prints them (none: allowed)."""

    name: str
    group: str
    resources: tuple[str, ...]
    validate_update: Callable[[JsonObj, JsonObj], list[str]]


def _quota_reserved(wl: JsonObj) -> bool:
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or [])


def kueue_workload_update_problems(new: JsonObj, old: JsonObj) -> list[str]:
    """Kueue's ``ValidateWorkloadUpdate`` (kueue ``pkg/webhooks/workload_webhook.go``), the rules an update by
    another controller can trip: ``spec.podSets`` is immutable while the old object has quota reserved, and
    ``status.admission`` may be set or unset but not changed. ``spec.active`` and metadata are free to change."""
    out = []
    if _quota_reserved(old) and (new.get("spec") or {}).get("podSets") != (old.get("spec") or {}).get("podSets"):
        out.append("spec.podSets: Invalid value: \"array\": field is immutable")
    new_adm, old_adm = (new.get("status") or {}).get("admission"), (old.get("status") or {}).get("admission")
    if new_adm is not None and old_adm is not None and new_adm != old_adm:
        out.append("status.admission: Invalid value: \"object\": field is immutable")
    return out


#: Kueue's validating webhook for Workloads (``vworkload.kb.io``, failurePolicy Fail).
KUEUE_WORKLOAD_WEBHOOK = Webhook("vworkload.kb.io", "kueue.x-k8s.io", ("workloads", "workloads/status"),
                                 kueue_workload_update_problems)

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def lws_update_problems(new: JsonObj, old: JsonObj) -> list[str]:
    """The LeaderWorkerSet webhook's ``ValidateUpdate`` (lws ``pkg/webhooks/leaderworkerset_webhook.go``,
    ``vleaderworkerset.kb.io``, on ``leaderworkersets`` only: a ``/scale`` write does not pass through it):
    ``generalValidate`` (the name a DNS-1035 label, as it names a headless Service; ``replicas`` >= 0, ``size``
    >= 1; no ``subgroup-exclusive-topology`` annotation without a ``subGroupPolicy``) and ``subGroupSize``
    immutable. Annotations and labels are otherwise free to change: the controller's claim passes."""
    out = []
    meta, spec = new.get("metadata") or {}, new.get("spec") or {}
    template = spec.get("leaderWorkerTemplate") or {}
    name = str(meta.get("name") or "")
    if len(name) > 63 or not _DNS1035_LABEL.match(name):
        out.append(f'metadata.name: Invalid value: "{name}": a DNS-1035 label must consist of lower case alphanumeric '
                   "characters or '-', start with an alphabetic character, and end with an alphanumeric character")
    replicas, size = spec.get("replicas"), template.get("size", 1)
    if isinstance(replicas, int) and replicas < 0:
        out.append(f"spec.replicas: Invalid value: {replicas}: replicas must be equal or greater than 0")
    if isinstance(size, int) and size < 1:
        out.append(f"spec.leaderWorkerTemplate.size: Invalid value: {size}: size must be equal or greater than 1")
    exclusive = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
    if template.get("subGroupPolicy") is None and exclusive in (meta.get("annotations") or {}):
        out.append(f"metadata.annotations.{exclusive}: Invalid value: \"{meta['annotations'][exclusive]}\": cannot "
                   "have subgroup-exclusive-topology without subGroupSize set")
    new_sub = template.get("subGroupPolicy")
    old_sub = ((old.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("subGroupPolicy")
    if (new_sub is None) != (old_sub is None) or (new_sub and old_sub and
                                                  new_sub.get("subGroupSize") != old_sub.get("subGroupSize")):
        out.append("spec.leaderWorkerTemplate.SubGroupPolicy.subGroupSize: Invalid value: \"integer\": field is "
                   "immutable")
    return out


#: The pod-template fields a suspended JobSet's replicated jobs may change (Kueue injects them at admission).
_JOBSET_MUTABLE_WHILE_SUSPENDED = (("metadata", "annotations"), ("metadata", "labels"), ("spec", "nodeSelector"),
                                   ("spec", "tolerations"), ("spec", "schedulingGates"))


def jobset_update_problems(new: JsonObj, old: JsonObj) -> list[str]:
    """The JobSet webhook's ``ValidateUpdate`` (jobset ``pkg/webhooks/jobset_webhook.go``, ``vjobset.kb.io``):
    ``spec.replicatedJobs`` and ``spec.managedBy`` are immutable, except that while the JobSet is (or is being)
    suspended its jobs' pod templates may change their labels, annotations, nodeSelector, tolerations and
    scheduling gates (what Kueue sets at admission). Metadata is free: the controller's checkpoint annotation
    passes."""
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    jobs = copy.deepcopy(spec.get("replicatedJobs"))
    old_jobs = old_spec.get("replicatedJobs")
    if (spec.get("suspend") or old_spec.get("suspend")) and isinstance(jobs, list) and isinstance(old_jobs, list):
        for job, before in zip(jobs, old_jobs, strict=False):
            pod, old_pod = _dig(job, ("template", "spec", "template")), _dig(before, ("template", "spec", "template"))
            if not isinstance(pod, dict) or not isinstance(old_pod, dict):
                continue
            for parent, key in _JOBSET_MUTABLE_WHILE_SUSPENDED:
                was = (old_pod.get(parent) or {}).get(key)
                node = pod.setdefault(parent, {})
                if was is None:
                    node.pop(key, None)
                else:
                    node[key] = copy.deepcopy(was)
                if not node and not old_pod.get(parent):
                    pod.pop(parent)
    out = []
    if jobs != old_jobs:
        out.append('spec.replicatedJobs: Invalid value: "array": field is immutable')
    if spec.get("managedBy") != old_spec.get("managedBy"):
        out.append(f'spec.managedBy: Invalid value: "{spec.get("managedBy")}": field is immutable')
    return out


LWS_WEBHOOK = Webhook("vleaderworkerset.kb.io", "leaderworkerset.x-k8s.io", ("leaderworkersets",),
                      lws_update_problems)
JOBSET_WEBHOOK = Webhook("vjobset.kb.io", "jobset.x-k8s.io", ("jobsets",), jobset_update_problems)


class Emulator:
    """The emulated API server. Start it with ``start()``; point a client at ``url``."""

    def __init__(self, *, user: str = DEFAULT_USER, resources: Iterable[ResourceType] = RESOURCES) -> None:
        self.user = user
        self.resources = tuple(resources)
        self.requests: list[Request] = []
        self.strict = False
        self.violations: list[str] = []
        self._expectations: list[Expectation] = []
        self._denials: list[Denial] = []
        self._rbac: Rbac | None = None
        #: Requests ``enforce_rbac`` refused: "verb group/resource namespace/name".
        self.rbac_denied: list[str] = []
        self._faults: list[Fault] = []
        self._delays: list[Delay] = []
        self._hooks: list[Hook] = []
        self._dry_run = False
        self._unserved: set[tuple[str, str]] = set()
        #: Served but deprecated versions (``deprecate``): every request to one answers with their warning.
        self._deprecated: dict[tuple[str, str], str] = {}
        self._objects: dict[StoreKey, JsonObj] = {}
        #: The keys of ``_objects`` by (group, plural): a list reads its kind only, not the whole store.
        self._kinds: dict[tuple[str, str], set[StoreKey]] = {}
        self._rv = 100
        self._compacted = 0
        self._history: list[tuple[int, str, ResourceType, JsonObj]] = []
        #: Paged lists in progress, by their resourceVersion: what their next pages continue (``_list``).
        self._snapshots: dict[tuple[int, str, str, str, str | None, str | None], list[JsonObj]] = {}
        self._watchers: list[_Watcher] = []
        self._watchers_changed = asyncio.Event()
        #: Every ``unknown field`` warning answered (``_fields``): "METHOD PATH: unknown field "x"".
        self.warnings: list[str] = []
        #: Seconds between two bookmarks on a watch stream that allows them (None: only ``bookmark()`` sends).
        self.bookmark_every_s: float | None = 60.0
        #: Validating admission webhooks run on every update through HTTP (``_admit``); Kueue's is installed.
        self.webhooks: list[Webhook] = [KUEUE_WORKLOAD_WEBHOOK, LWS_WEBHOOK, JOBSET_WEBHOOK]
        self._uid_seq = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = cast(Any, site)._server
        bound_port = server.sockets[0].getsockname()[1]
        self.url = f"http://{host}:{bound_port}"
        return self.url

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def check(self) -> None:
        """Raise ``AssertionError`` if strict mode saw a write nobody expected."""
        if self.violations:
            raise AssertionError("unexpected writes to the API server:\n  " + "\n  ".join(self.violations))

    # --- test controls -------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def compact(self, at: int | None = None) -> int:
        """Forget watch history up to resourceVersion ``at`` (default: now), as etcd compaction does: a watch
        from an older resourceVersion gets ``410 Gone``; later events still replay."""
        self._compacted = self._rv if at is None else min(at, self._rv)
        self._history = [h for h in self._history if h[0] > self._compacted]
        self._snapshots = {k: items for k, items in self._snapshots.items() if k[0] >= self._compacted}
        return self._compacted

    def drop_watches(self, plural: str | None = None) -> None:
        """Close every open watch stream (of ``plural`` only, if given), as an apiserver restart or a load
        balancer timeout does."""
        for watcher in self._watchers:
            if plural is None or watcher.rt.plural == plural:
                watcher.queue.put_nowait(None)

    def bookmark(self) -> None:
        """Send a ``BOOKMARK`` with the current resourceVersion to watchers that allowed bookmarks."""
        for watcher in self._watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(self._bookmark(watcher))

    def _bookmark(self, watcher: _Watcher) -> JsonObj:
        """A bookmark at the current resourceVersion: every event up to it is queued before it."""
        obj = {
            "kind": watcher.rt.kind, "apiVersion": watcher.rt.api_version(watcher.version),
            "metadata": {"resourceVersion": str(self._rv)},
        }
        return {"type": "BOOKMARK", "object": obj}

    @property
    def watch_count(self) -> int:
        return len(self._watchers)

    async def wait_for_watchers(self, count: int, *, plural: str | None = None) -> None:
        """Wait until at least ``count`` watch streams (of ``plural``, if given) are open."""
        while sum(1 for w in self._watchers if plural in (None, w.rt.plural)) < count:
            self._watchers_changed.clear()
            await self._watchers_changed.wait()

    def deny(self, verb: str, resource: str, namespace: str | None = None, group: str | None = None) -> None:
        """RBAC: ``verb`` on ``resource`` (``plural`` or ``plural/subresource``) answers 403."""
        self._denials.append(Denial(verb, resource, namespace, group))

    def enforce_rbac(self, manifests: Iterable[JsonObj], *, user: str | None = None) -> Rbac:
        """Authorize every request from now on by the RBAC objects in ``manifests`` (rendered YAML documents),
        as ``user`` (default: the emulator's user); refusals answer 403 and are listed in ``rbac_denied``."""
        if user is not None:
            self.user = user
        self._rbac = Rbac(manifests, self.user)
        return self._rbac

    def inject(
        self,
        code: int,
        path: str,
        *,
        times: int = 1,
        method: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
        agent: str | None = None,
        in_stream: bool = False,
        reason: str | None = None,
        filtered: bool = True,
    ) -> Fault:
        """Answer the next ``times`` requests matching ``path`` (an fnmatch pattern) with ``code`` (only those
        from a client whose User-Agent contains ``agent``, if given). On a watch, a 410, or any code with
        ``in_stream``, is sent in the stream (``stream_error``); ``reason`` overrides the Status's reason (a 410
        is ``Expired``; servers before 1.17's watch cache said ``Gone``). A 429 answers as the filters in front of
        every handler do (``_too_many_requests``: plain text), unless ``filtered=False`` (a handler's Status)."""
        fault = Fault(code, path, method, times, message or f"injected fault {code}", retry_after, agent,
                      in_stream, reason, filtered)
        self._faults.append(fault)
        return fault

    def slow(
        self,
        path: str,
        seconds: float,
        *,
        method: str | None = None,
        times: int | None = None,
        after: bool = False,
        agent: str | None = None,
    ) -> Delay:
        """Answer the next ``times`` (None: every) requests matching ``path`` ``seconds`` late: before processing
        them, or (``after=True``) after they were processed and committed."""
        delay = Delay(path, method, seconds, times, after, agent)
        self._delays.append(delay)
        return delay

    def black_hole(
        self, path: str, *, method: str | None = None, times: int | None = None, agent: str | None = None
    ) -> Delay:
        """Never answer the next ``times`` (None: every) requests matching ``path``; the connection stays open
        until the client gives up. Nothing is processed."""
        delay = Delay(path, method, None, times, False, agent)
        self._delays.append(delay)
        return delay

    def clear_faults(self, path: str | None = None) -> int:
        """Stop answering with injected faults, delays and black holes (those for ``path``, or all): the server
        is healthy again (requests already held stay lost). Returns how many pending fault answers were
        dropped."""
        dropped = 0
        for fault in self._faults:
            if path is None or fault.path == path:
                dropped += fault.remaining
                fault.remaining = 0
        self._faults = [f for f in self._faults if f.remaining > 0]
        for delay in self._delays:
            if path is None or delay.path == path:
                delay.remaining = 0
                delay.released.set()
        self._delays = [d for d in self._delays if d.remaining != 0]
        return dropped

    def after(self, method: str, path: str, action: Callable[[], None], *, times: int = 1) -> None:
        """Call ``action`` right after answering the next ``times`` requests matching ``method`` and ``path``
        (fnmatch), e.g. change an object between a client's read and its write to provoke a real conflict."""
        self._hooks.append(Hook(method.upper(), path, action, times))

    def unserve(self, group: str, version: str) -> None:
        """Stop serving ``group/version`` (paths answer 404), e.g. a Kueue without v1beta2."""
        self._unserved.add((group, version))

    def deprecate(self, group: str, version: str, warning: str | None = None) -> None:
        """Mark ``group/version`` deprecated, as a CRD version's ``deprecated: true`` does: every request to it is
        answered with a ``Warning`` header: ``warning`` (the CRD's ``deprecationWarning``), else
        apiextensions-apiserver's default "<group>/<version> <Kind> is deprecated; use <group>/<newer> <Kind>"
        (``defaultDeprecationWarning``, the newest served version later than this one)."""
        self._deprecated[(group, version)] = warning or ""

    def expect_write(self, method: str, path: str, *, times: int | None = None) -> None:
        """Strict mode: allow ``method`` on paths matching ``path`` (fnmatch), ``times`` times or any."""
        self._expectations.append(Expectation(method.upper(), path, times))

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.is_write]

    def clear_log(self) -> None:
        self.requests.clear()

    # --- direct (test-side) object access ----------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        for rt in self.resources:
            if rt.group == group and rt.kind == kind and version in rt.versions:
                return rt
        raise KeyError(f"the emulator has no {kind} in {api_version}")

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> StoreKey:
        return (rt.group, rt.plural, (namespace or "default") if rt.namespaced else "", name)

    def add(self, obj: JsonObj) -> JsonObj:
        """Create ``obj`` (with ``apiVersion`` and ``kind``) as the server would; return the stored copy."""
        rt = self.resource(obj["apiVersion"], obj["kind"])
        version = obj["apiVersion"].rpartition("/")[2]
        meta = obj.get("metadata", {})
        self._fixture_check(rt, obj)
        return self._create(rt, version, meta.get("namespace"), copy.deepcopy(obj))

    @staticmethod
    def _fixture_check(rt: ResourceType, obj: JsonObj, old: JsonObj | None = None) -> None:
        """A test's stand-in for another controller (Kueue, the LWS controller...) writes through the API server
        too: a field the real CRD does not declare would be pruned, and a Workload write its CEL rules refuse
        would fail. Either is a mistake in the test, so it raises rather than store what no server would."""
        undeclared = crds.undeclared(rt.group, rt.plural, obj)
        if undeclared:
            raise ValueError(f"a test writes {rt.kind} fields its CRD does not declare (a real server prunes them): "
                             f"{', '.join(undeclared)}")
        invalid = crds.schema_problems(rt.group, rt.plural, crds.default(rt.group, rt.plural, copy.deepcopy(obj)))
        if invalid:
            raise ValueError(f"a test writes a {rt.kind} its CRD's schema refuses: {'; '.join(invalid)}")
        if (rt.group, rt.plural) == ("kueue.x-k8s.io", "workloads"):
            problems = crds.workload_rule_problems(obj, old)
            if problems:
                raise ValueError(f"a test writes a Workload its CRD's rules refuse: {'; '.join(problems)}")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JsonObj:
        rt = self.resource(api_version, kind)
        stored = self._objects.get(self._key(rt, namespace, name))
        if stored is None:
            raise KeyError(f"{kind} {namespace}/{name} does not exist")
        return _convert(rt, stored, api_version.rpartition("/")[2])

    def exists(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        rt = self.resource(api_version, kind)
        return self._key(rt, namespace, name) in self._objects

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[JsonObj]:
        rt = self.resource(api_version, kind)
        version = api_version.rpartition("/")[2]
        return [_convert(rt, o, version) for o in self._select(rt, namespace, None, None)]

    def modify(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        change: Callable[[JsonObj], None] | None = None,
        **merge: Any,
    ) -> JsonObj:
        """Change a stored object as a controller would (status included): ``change`` mutates a copy in place,
        ``merge`` is merged in (``status={"readyReplicas": 2}``). Bumps the resourceVersion, notifies watches."""
        rt = self.resource(api_version, kind)
        version = api_version.rpartition("/")[2]
        key = self._key(rt, namespace, name)
        if key not in self._objects:
            raise KeyError(f"{kind} {namespace}/{name} does not exist")
        obj = _convert(rt, self._objects[key], version)
        if merge:
            obj = merge_patch(obj, merge)
        if change is not None:
            change(obj)
        self._fixture_check(rt, obj, _convert(rt, self._objects[key], version))
        obj = crds.default(rt.group, rt.plural, self._to_storage(rt, obj))
        if obj.get("spec") != self._objects[key].get("spec"):
            obj["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        return self._commit(rt, key, obj, "MODIFIED")

    def remove(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        rt = self.resource(api_version, kind)
        key = self._key(rt, namespace, name)
        self._commit(rt, key, None, "DELETED")

    # --- storage -------------------------------------------------------------------------------------------

    def _to_storage(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        return _convert(rt, obj, rt.storage_version)

    def _select(
        self, rt: ResourceType, namespace: str | None, labels: str | None, fields: str | None
    ) -> Iterator[JsonObj]:
        for key in sorted(self._kinds.get((rt.group, rt.plural), ())):
            ns, obj = key[2], self._objects[key]
            if namespace is not None and rt.namespaced and ns != namespace:
                continue
            meta = obj.get("metadata", {})
            if label_selector_matches(labels, meta.get("labels") or {}) and field_selector_matches(fields, obj):
                yield obj

    def _new_uid(self) -> str:
        self._uid_seq += 1
        return str(uuid.UUID(int=0x5EED_0000_0000_0000_0000_0000_0000_0000 + self._uid_seq))

    def _create(self, rt: ResourceType, version: str, namespace: str | None, obj: JsonObj) -> JsonObj:
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if namespace and meta.get("namespace") not in (None, namespace):
                raise ApiError(
                    400, "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(
                    422, f'{rt.kind} "" is invalid: metadata.name: Required value: name or generateName is required'
                )
            meta["name"] = f"{prefix}{self._uid_seq + 1:05x}"
        if meta.get("resourceVersion"):
            raise ApiError(500, "resourceVersion should not be set on objects to be created")
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if key in self._objects:
            raise ApiError(
                409, f'{rt.qualified} "{meta["name"]}" already exists', "AlreadyExists", _details(rt, meta["name"])
            )
        meta["uid"] = self._new_uid()
        meta.setdefault("creationTimestamp", DEFAULT_TIMESTAMP)
        meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = rt.api_version(version), rt.kind
        obj = _structural(rt, obj)
        bad_name = name_problem(str(meta["name"]))
        if bad_name:
            qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
            raise ApiError(422, f'{qualified} "{meta["name"]}" is invalid: metadata.name: Invalid value: '
                                f'"{meta["name"]}": {bad_name}', "Invalid",
                           {"group": rt.group, "kind": rt.kind, "name": meta["name"]})
        self._validate(rt, obj)
        stored = self._commit(rt, key, self._to_storage(rt, obj), "ADDED")
        return _convert(rt, stored, version)

    def _commit(self, rt: ResourceType, key: StoreKey, obj: JsonObj | None, event: str) -> JsonObj:
        """Store (or delete) one object at a new resourceVersion and tell the watchers."""
        old = self._objects.get(key)
        if self._dry_run:
            # ?dryRun=All: validated and answered as if stored, but nothing persists and nobody is told.
            if obj is None and old is None:
                raise not_found(rt, key[3])
            return copy.deepcopy(obj if obj is not None else old)  # type: ignore[arg-type]
        if obj is None:
            if old is None:
                raise not_found(rt, key[3])
            self._rv += 1
            obj = copy.deepcopy(old)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            del self._objects[key]
            self._kinds[key[:2]].discard(key)
        else:
            self._rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[key] = obj
            self._kinds.setdefault((key[0], key[1]), set()).add(key)
        self._history.append((self._rv, event, rt, copy.deepcopy(obj)))
        for watcher in self._watchers:
            if watcher.rt is rt:
                self._notify(watcher, event, old, obj)
        return copy.deepcopy(obj)

    @staticmethod
    def _notify(watcher: _Watcher, event: str, old: JsonObj | None, new: JsonObj) -> None:
        # A watch with a selector sees an object enter (ADDED) or leave (DELETED) its selection on an update,
        # as the watch cache does.
        was, now = watcher.sees(old), watcher.sees(new)
        if event == "MODIFIED":
            if was and not now:
                event = "DELETED"
            elif now and not was:
                event = "ADDED"
            elif not now:
                return
        elif not now:
            return
        watcher.queue.put_nowait({"type": event, "object": _convert(watcher.rt, new, watcher.version)})

    # --- HTTP --------------------------------------------------------------------------------------------------

    def _route(self, path: str) -> _Target | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if (group, version) in self._unserved:
            return None
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        for rt in self.resources:
            if rt.group == group and rt.plural == rest[0] and version in rt.versions:
                if namespace is not None and not rt.namespaced:
                    return None
                name = rest[1] if len(rest) > 1 else None
                sub = rest[2] if len(rest) > 2 else None
                if sub not in (None, "status", "scale"):
                    return None
                if (sub == "status" and not rt.status) or (sub == "scale" and rt.scale is None):
                    return None
                return _Target(rt, version, namespace, name, sub)
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        query = dict(request.query)
        entry = Request(request.method, request.path, query, content_type, body)
        self.requests.append(entry)
        agent = request.headers.get("User-Agent", "")
        delay = next((d for d in self._delays if d.matches(entry.method, entry.path, agent)), None)
        if delay is not None and delay.remaining is not None:
            delay.remaining -= 1
        if delay is not None and not delay.after:
            await delay.wait()
        try:
            response = await self._serve(request, entry, raw, agent)
        except ApiError as exc:
            response = web.json_response(exc.body(), status=exc.code)
        if delay is not None and delay.after:
            await delay.wait()
        entry.status = response.status
        if entry.warnings and not response.prepared:
            for text in entry.warnings:
                response.headers.add("Warning", warning_header(text))
        for hook in self._hooks:
            if hook.matches(entry.method, entry.path):
                hook.remaining -= 1
                hook.action()
        return response

    async def _serve(self, request: web.Request, entry: Request, raw: bytes, agent: str = "") -> web.StreamResponse:
        if entry.path == "/version":
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-emulated"})
        target = self._route(entry.path)
        if target is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
        rt = target.rt
        entry.group, entry.version = rt.group, target.version
        if (rt.group, target.version) in self._deprecated:
            entry.warnings.append(self._deprecated[(rt.group, target.version)] or self._deprecation(rt, target.version))
        entry.namespace, entry.name = target.namespace, target.name
        entry.resource = f"{rt.plural}/{target.subresource}" if target.subresource else rt.plural
        watch = entry.query.get("watch", "").lower() in ("true", "1")
        entry.verb = {
            "GET": "watch" if watch else ("get" if target.name else "list"),
            "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if target.name else "deletecollection",
        }.get(request.method, request.method.lower())

        if entry.is_write and self.strict:
            allowed = next((e for e in self._expectations if e.matches(entry.method, entry.path)), None)
            if allowed is None:
                note = f"{entry.method} {entry.path} ({entry.content_type}) {json.dumps(entry.body)[:300]}"
                self.violations.append(note)
                raise ApiError(500, f"emulator strict mode: unexpected write {entry.method} {entry.path}")
            if allowed.times is not None:
                allowed.times -= 1

        for denial in self._denials:
            if denial.matches(entry.verb, rt.group, entry.resource, target.namespace):
                raise self._forbidden(entry, target)
        if self._rbac is not None and not self._rbac.allows(
            entry.verb, rt.group, entry.resource, target.namespace, target.name
        ):
            where = f"{target.namespace or '(cluster)'}/{target.name or '*'}"
            self.rbac_denied.append(f"{entry.verb} {rt.group or 'core'}/{entry.resource} {where}")
            raise self._forbidden(entry, target)

        for fault in self._faults:
            if fault.remaining > 0 and fault.matches(entry.method, entry.path, agent):
                fault.remaining -= 1
                if entry.verb == "watch" and (fault.code == 410 or fault.in_stream):
                    return await self._error_watch(request, self.stream_error(fault))
                if fault.code == 429 and fault.filtered and not fault.in_stream:
                    return self._too_many_requests(fault)
                error = ApiError(fault.code, fault.message)
                if fault.code == 409:
                    error = conflict(rt, target.name or "")
                if fault.retry_after is not None:  # the server's 429 says it twice: header and Status details
                    error.details = {**(error.details or {}), "retryAfterSeconds": fault.retry_after}
                response = web.json_response(error.body(), status=fault.code)
                if fault.retry_after is not None:
                    response.headers["Retry-After"] = str(fault.retry_after)
                return response

        if entry.verb == "watch":
            return await self._watch(request, target)
        if entry.is_write and "dryRun" in entry.query and entry.query["dryRun"] != "All":
            # apimachinery ValidateCreateOptions/UpdateOptions/PatchOptions/DeleteOptions: only "All" exists.
            options = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}.get(
                entry.verb, "DeleteOptions")
            raise ApiError(422, f'{options}.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                                f'["{entry.query["dryRun"]}"]: supported values: "All"', "Invalid")
        if entry.is_write and entry.query.get("dryRun") == "All":
            self._dry_run = True
            try:
                return self._dispatch_write(target, entry, raw)
            finally:
                self._dry_run = False
        if entry.is_write:
            return self._dispatch_write(target, entry, raw)
        if entry.verb == "list":
            return web.json_response(self._list(target, entry.query))
        if entry.verb == "get":
            return web.json_response(self._get(target))
        raise ApiError(405, "the server does not allow this method on the requested resource")

    @staticmethod
    def _deprecation(rt: ResourceType, version: str) -> str:
        text = f"{rt.group}/{version} {rt.kind} is deprecated"
        newer = rt.versions[rt.versions.index(version) + 1:]
        return f"{text}; use {rt.group}/{newer[-1]} {rt.kind}" if newer else text

    def _dispatch_write(self, target: _Target, entry: Request, raw: bytes) -> web.StreamResponse:
        if entry.verb == "create":
            if target.name is not None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return web.json_response(self._post(target, entry.body, entry), status=201)
        if entry.verb == "update":
            return web.json_response(self._put(target, entry.body, entry))
        if entry.verb == "patch":
            return web.json_response(self._patch(target, entry, raw))
        if entry.verb == "delete":
            if target.subresource is not None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return web.json_response(self._delete(target, entry.body))
        raise ApiError(405, "the server does not allow this method on the requested resource")

    def _forbidden(self, entry: Request, target: _Target) -> ApiError:
        rt = target.rt
        subject = f'{rt.qualified} "{target.name}"' if target.name else rt.qualified
        where = f'in the namespace "{target.namespace}"' if target.namespace else "at the cluster scope"
        message = (
            f'{subject} is forbidden: User "{self.user}" cannot {entry.verb} resource "{entry.resource}" '
            f'in API group "{rt.group}" {where}'
        )
        return ApiError(403, message, "Forbidden", _details(rt, target.name))

    def _stored(self, target: _Target) -> tuple[StoreKey, JsonObj]:
        assert target.name is not None
        key = self._key(target.rt, target.namespace, target.name)
        obj = self._objects.get(key)
        if obj is None:
            raise not_found(target.rt, target.name)
        return key, obj

    def _get(self, target: _Target) -> JsonObj:
        _, stored = self._stored(target)
        if target.subresource == "scale":
            return self._scale_of(target.rt, stored)
        return _convert(target.rt, stored, target.version)

    @staticmethod
    def _validate_list_options(query: dict[str, str]) -> None:
        """apimachinery ``ValidateListOptions`` (422 on ``ListOptions``) and the storage's refusal of a
        resourceVersion with ``continue`` (400)."""
        match, rv = query.get("resourceVersionMatch"), query.get("resourceVersion")
        problems = []
        if match:
            if not rv:
                problems.append("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                                "resourceVersion is provided")
            if query.get("continue"):
                problems.append("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue "
                                "is provided")
            if match not in ("Exact", "NotOlderThan"):
                problems.append(f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
                                '"Exact", "NotOlderThan", ""')
            if match == "Exact" and rv == "0":
                problems.append('resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
                                'resourceVersion "0"')
        if problems:
            raise ApiError(422, f'ListOptions.meta.k8s.io "" is invalid: {", ".join(problems)}', "Invalid")
        if query.get("continue") and rv not in (None, ""):
            raise ApiError(400, "specifying resource version is not allowed when using continue", "BadRequest")

    def _continued(self, token: str) -> tuple[int, tuple[str, str] | None]:
        """The resourceVersion and the last key of a ``continue`` token; ``410 Expired`` when its resourceVersion
        was compacted (as the server, with an inconsistent token for the rest in ``metadata.continue``)."""
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()).decode())
            at, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, TypeError, IndexError):
            raise ApiError(400, "continue key is not valid: incorrect encoded start resourceVersion (version "
                                "meta.k8s.io/v1)", "BadRequest") from None
        return at, start

    @staticmethod
    def _expired_continue(start: tuple[str, str] | None) -> ApiError:
        """k8s.io/apiserver storage/etcd3 ``handleCompactedErrorForPaging``: the text, and a token (rv -1) that
        lists the rest as it is now, inconsistently."""
        error = ApiError(410, CONTINUE_EXPIRED, "Expired")
        error.list_meta = {"continue": _continue_token(-1, start)}
        return error

    def _list(self, target: _Target, query: dict[str, str]) -> JsonObj:
        rt = target.rt
        self._validate_list_options(query)
        rv = query.get("resourceVersion")
        if rv not in (None, "", "0"):
            try:
                requested = int(rv)
            except ValueError:
                raise ApiError(400, f"invalid resource version {rv!r}") from None
            if requested > self._rv:
                body = too_large(requested, self._rv)
                raise ApiError(504, body["message"], "Timeout", body["details"])
            if query.get("resourceVersionMatch") == "Exact" and requested < self._rv:
                # Only the latest state is kept; an exact read of the past is available until compaction only,
                # and this emulator keeps no snapshots, so it answers as the server does after compaction.
                raise ApiError(
                    410, f"too old resource version: {requested} ({self._compacted or self._rv})", "Expired"
                )
        meta: JsonObj = {"resourceVersion": str(self._rv)}
        limit = int(query.get("limit") or 0)
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        if query.get("continue"):
            at, start = self._continued(query["continue"])
            if at > 0:
                kept = self._snapshots.get((at, rt.group, rt.plural, target.namespace or "", labels, fields))
                if kept is None or at < self._compacted:
                    raise self._expired_continue(start)
                snapshot = kept
                meta["resourceVersion"] = str(at)
            else:  # rv -1, the inconsistent token of a 410: the rest as it is now
                at = self._rv
                snapshot = list(self._select(rt, target.namespace, labels, fields))
        else:
            at, start = self._rv, None
            snapshot = list(self._select(rt, target.namespace, labels, fields))
        selected = [o for o in snapshot if start is None or _list_key(o) > start]
        key = (at, rt.group, rt.plural, target.namespace or "", labels, fields)
        if not (limit and len(selected) > limit):
            self._snapshots.pop(key, None)  # the last page
        else:
            selected = selected[:limit]
            # The next page continues this list at its resourceVersion (etcd serves it from that revision until
            # compaction): kept here as the list it was, by reference (stored objects are replaced, never mutated).
            self._snapshots[key] = snapshot
            while len(self._snapshots) > 64:
                self._snapshots.pop(next(iter(self._snapshots)))
            meta["continue"] = _continue_token(at, _list_key(selected[-1]))
            meta["remainingItemCount"] = len(snapshot) - snapshot.index(selected[-1]) - 1
        items = [_convert(rt, o, target.version) for o in selected]  # only the page's (a page of 5,000 is costly)
        if rt.builtin:
            # Typed lists of built-in kinds carry no per-item kind/apiVersion on the wire.
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        api_version = rt.api_version(target.version)
        return {"kind": f"{rt.kind}List", "apiVersion": api_version, "metadata": meta, "items": items}

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        rt, query = target.rt, request.query
        watcher = _Watcher(
            rt, target.version, target.namespace, query.get("labelSelector"), query.get("fieldSelector"),
            query.get("allowWatchBookmarks", "").lower() in ("true", "1"),
        )
        if target.name is not None:
            name_field = f"metadata.name={target.name}"
            watcher.fields = f"{watcher.fields},{name_field}" if watcher.fields else name_field
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        rv = query.get("resourceVersion")
        initial: list[JsonObj] = []
        if rv in (None, "", "0"):
            initial = [
                {"type": "ADDED", "object": _convert(rt, o, target.version)}
                for o in self._select(rt, target.namespace, None, None)
                if watcher.sees(o)
            ]
        else:
            requested = int(rv)
            if requested < self._compacted:
                gone = status_body(
                    410, "Expired", f"too old resource version: {requested} ({self._compacted})"
                )
                await response.write((json.dumps({"type": "ERROR", "object": gone}) + "\n").encode())
                await response.write_eof()
                return response
            if requested > self._rv:
                # A resourceVersion this server has not reached (another apiserver's, behind a load balancer): the
                # watch cache waits for it up to ``blockTimeout`` (3 s, k8s.io/apiserver storage/cacher
                # watch_cache.go), then sends a 504 ``NewTooLargeResourceVersionError`` in the stream.
                waited = asyncio.get_running_loop().time() + TOO_LARGE_WAIT_S
                while requested > self._rv and asyncio.get_running_loop().time() < waited:
                    await asyncio.sleep(0.05)
                if requested > self._rv:
                    await response.write((json.dumps({"type": "ERROR", "object": too_large(requested, self._rv)})
                                          + "\n").encode())
                    await response.write_eof()
                    return response
            for event_rv, event, event_rt, obj in self._history:
                if event_rt is rt and event_rv > requested and watcher.sees(obj):
                    initial.append({"type": event, "object": _convert(rt, obj, target.version)})
        for event_obj in initial:
            watcher.queue.put_nowait(event_obj)
        loop = asyncio.get_running_loop()
        end = loop.time() + float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else math.inf
        every = self.bookmark_every_s if watcher.bookmarks else None
        next_bookmark = loop.time() + every if every is not None else math.inf
        self._watchers.append(watcher)
        self._watchers_changed.set()
        try:
            while True:
                wait = min(end, next_bookmark) - loop.time()
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), None if math.isinf(wait) else max(0.0, wait))
                except TimeoutError:
                    if loop.time() >= end:
                        if watcher.bookmarks:  # the watch cache's bookmark right before the deadline
                            await response.write((json.dumps(self._bookmark(watcher)) + "\n").encode())
                        break
                    item = self._bookmark(watcher)
                    next_bookmark = loop.time() + (every or math.inf)
                if item is None:
                    break
                await response.write((json.dumps(item) + "\n").encode())
        except ConnectionResetError:
            pass  # the client went away; a cancelled handler (client disconnect) propagates
        finally:
            self._watchers.remove(watcher)
            self._watchers_changed.set()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    @staticmethod
    def _too_many_requests(fault: Fault) -> web.Response:
        """What the max-in-flight and priority-and-fairness filters answer (k8s.io/apiserver server/filters
        ``tooManyRequests``): no Status object, Go's ``http.Error`` plain text and a ``Retry-After`` header (1 s
        unless the fault says). A JSON 429 Status (``NewTooManyRequests``, with ``details.retryAfterSeconds``)
        comes from handlers behind the filters, as the eviction API: ``inject(429, ..., filtered=False)``."""
        response = web.Response(status=429, text="Too many requests, please try again later.\n",
                                content_type="text/plain", charset="utf-8")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Retry-After"] = str(fault.retry_after if fault.retry_after is not None else 1)
        return response

    def stream_error(self, fault: Fault) -> JsonObj:
        """The Status an ``ERROR`` event carries for an injected fault, as the server builds it (k8s.io/apimachinery
        ``pkg/api/errors``): 410 ``NewResourceExpired`` (the watch cache's "too old resource version: X (Y)"),
        500 ``NewInternalError`` ("Internal error occurred: ...", the error as a cause), 504 ``NewTimeoutError``
        ("Timeout: ..."), any other code with its usual reason."""
        code = fault.code
        reason = fault.reason or _REASONS.get(code, "Unknown")
        if code == 410:
            text = fault.message if fault.message != "injected fault 410" else (
                f"too old resource version: {self._compacted} ({self._rv})")
            return status_body(410, fault.reason or "Expired", text)
        if code == 500:
            return status_body(500, reason, f"Internal error occurred: {fault.message}",
                               {"causes": [{"message": fault.message}]})
        if code == 504:
            return status_body(504, reason, f"Timeout: {fault.message}", {"retryAfterSeconds": fault.retry_after or 0})
        return status_body(code, reason, fault.message)

    async def _error_watch(self, request: web.Request, status: JsonObj) -> web.StreamResponse:
        """How the server answers a watch that fails once accepted (the watch cache's ``newErrWatcher``, the etcd
        watcher's error event): 200, one ``ERROR`` event carrying ``status``, the end of the stream."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
        await response.write_eof()
        return response

    def _admit(self, rt: ResourceType, resource: str, new: JsonObj, old: JsonObj) -> None:
        """Validating admission webhooks on an update (``webhooks``): the first denial answers as the API server
        relays a controller-runtime denial (``webhookerrors.ToStatusErr``): 403 ``Forbidden``, "admission webhook
        "<name>" denied the request: <errors>"."""
        for hook in self.webhooks:
            if hook.group != rt.group or resource not in hook.resources:
                continue
            problems = hook.validate_update(new, old)
            if problems:
                text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
                raise ApiError(403, f'admission webhook "{hook.name}" denied the request: {text}', "Forbidden")

    @staticmethod
    def _validate(rt: ResourceType, obj: JsonObj, old: JsonObj | None = None) -> None:
        """The server's validation where clients trip: Events (``_event_problems``), on create and on update
        (``old``: the stored object); before it, the timestamps of Events and Leases must decode (``_bad_time``)."""
        bad = _bad_time(rt, obj)
        if bad is not None:
            raise ApiError(400, f'{rt.kind} in version "{rt.storage_version}" cannot be handled as a {rt.kind}: {bad}',
                           "BadRequest")
        name = (obj.get("metadata") or {}).get("name", "")
        problems = meta_problems(obj.get("metadata") or {})
        if (rt.group, rt.plural) == ("kueue.x-k8s.io", "workloads"):
            problems += crds.workload_rule_problems(obj, old)
        if (rt.group, rt.plural) == ("autoscaling", "horizontalpodautoscalers"):
            problems += _hpa_problems(obj.get("spec") or {})
        if problems:
            text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
            raise ApiError(422, f'{qualified} "{name}" is invalid: {text}', "Invalid",
                           {"group": rt.group, "kind": rt.kind, "name": name})
        if rt.plural != "events":
            return
        invalid = _event_problems(rt, obj, old)
        if invalid:
            kind = "Event.events.k8s.io" if rt.group else "Event"
            raise ApiError(
                422, f'{kind} "{name}" is invalid: ' + ", ".join(f"{f}: {why}" for f, why in invalid), "Invalid",
                {"group": rt.group, "kind": "Event", "name": name,
                 "causes": [{"reason": "FieldValueInvalid", "field": f, "message": why} for f, why in invalid]},
            )

    def _check_body(self, target: _Target, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        meta = body.get("metadata") or {}
        if target.name is not None and meta.get("name") not in (None, target.name):
            raise ApiError(
                400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({target.name})"
            )
        return body

    def _fields(self, target: _Target, entry: Request, obj: JsonObj) -> None:
        """Server-side field validation of a written object (``fieldValidation``, KEP-2885, GA in 1.27): the fields
        the server would drop (``unknown_fields``) answer 400 under ``Strict`` (kubectl's default), are dropped with
        a ``Warning: 299 - "unknown field \"spec.foo\""`` header under ``Warn`` (the default when a client sends
        none, as the controller does) and silently under ``Ignore``. Recorded in ``warnings`` as well: the ``kube``
        fixture fails a test in which the controller wrote a field the server drops."""
        unknown = unknown_fields(target.rt, target.subresource, obj)
        if not unknown:
            return
        mode = entry.query.get("fieldValidation") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            raise ApiError(400, f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got "{mode}"',
                           "BadRequest")
        if mode == "Strict":
            kind = "Scale" if target.subresource == "scale" else target.rt.kind
            text = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise ApiError(400, f'{kind} in version "{target.version}" cannot be handled as a {kind}: strict decoding '
                                f"error: {text}", "BadRequest")
        if mode == "Warn":
            entry.warnings.extend(f'unknown field "{u}"' for u in unknown)
            self.warnings.extend(f"{entry.method} {entry.path}: unknown field \"{u}\"" for u in unknown)

    def _post(self, target: _Target, body: Any, entry: Request | None = None) -> JsonObj:
        obj = copy.deepcopy(self._check_body(target, body))
        if entry is not None:
            self._fields(target, entry, obj)
        rt = target.rt
        if obj.get("kind") not in (None, rt.kind):
            raise ApiError(400, f"the API version in the data ({obj.get('apiVersion')}) does not match the expected")
        return self._create(rt, target.version, target.namespace, obj)

    def _put(self, target: _Target, body: Any, entry: Request | None = None) -> JsonObj:
        body = self._check_body(target, body)
        if entry is not None:
            self._fields(target, entry, body)
        key, stored = self._stored(target)
        rt = target.rt
        if target.subresource == "scale":
            return self._write_scale(target, key, stored, body)
        sent_rv = (body.get("metadata") or {}).get("resourceVersion")
        if not sent_rv and not rt.builtin:
            # Custom resources do not allow unconditional updates.
            raise ApiError(
                422,
                f'{rt.kind}.{rt.group} "{target.name}" is invalid: metadata.resourceVersion: '
                "Invalid value: 0x0: must be specified for an update",
            )
        if sent_rv and sent_rv != stored["metadata"]["resourceVersion"]:
            raise conflict(rt, key[3])
        return self._write(target, key, stored, copy.deepcopy(body))

    def _patch(self, target: _Target, entry: Request, raw: bytes) -> JsonObj:
        rt, content_type = target.rt, entry.content_type
        key, stored = self._stored(target)
        scale = target.subresource == "scale"
        current = self._scale_of(rt, stored) if scale else _convert(rt, stored, target.version)
        patch: Any = entry.body
        if content_type == JSON_PATCH:
            if not isinstance(patch, list):
                raise ApiError(
                    400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch", "BadRequest"
                )
            result = json_patch(current, patch)
        elif content_type == MERGE_PATCH:
            result = merge_patch(current, self._patch_object(patch))
        elif content_type == STRATEGIC_MERGE_PATCH:
            if not rt.builtin:
                raise self._unsupported(content_type)
            # Approximation: merge patch semantics; lists are replaced, not merged by their merge keys.
            result = merge_patch(current, self._patch_object(patch))
        elif content_type == APPLY_PATCH:
            if not entry.query.get("fieldManager"):
                raise ApiError(400, "PATCH /apply requires fieldManager to be set", "BadRequest")
            try:
                applied = yaml.safe_load(raw.decode()) if raw else None
            except yaml.YAMLError as exc:
                raise ApiError(400, f"error decoding YAML: {exc}") from None
            result = merge_patch(current, self._patch_object(applied))
        else:
            raise self._unsupported(content_type)
        if not isinstance(result, dict):
            raise ApiError(422, "the patched object is not a JSON object")
        self._fields(target, entry, result)
        sent_rv = (result.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != stored["metadata"]["resourceVersion"]:
            raise conflict(rt, key[3])
        if target.subresource == "scale":
            return self._write_scale(target, key, stored, result)
        return self._write(target, key, stored, result)

    @staticmethod
    def _patch_object(patch: Any) -> JsonObj:
        if not isinstance(patch, dict):
            # What the server answers to a JSON-patch list sent as a merge patch (kubernetes-client/python#2039).
            raise ApiError(
                422,
                f'"" is invalid: patch: Invalid value: "{json.dumps(patch)[:200]}": couldn\'t get version/kind; '
                "json parse error: json: cannot unmarshal array into Go value of type struct",
                "Invalid",
            )
        return patch

    @staticmethod
    def _unsupported(content_type: str) -> ApiError:
        return ApiError(
            415,
            f"the body of the request was in an unknown format ({content_type}) - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            "UnsupportedMediaType",
        )

    def _write(self, target: _Target, key: StoreKey, stored: JsonObj, new: JsonObj) -> JsonObj:
        """Store an update of the main resource or of its status, keeping what each may not change."""
        rt = target.rt
        new = self._to_storage(rt, new)
        meta = new.setdefault("metadata", {})
        old_meta = stored["metadata"]
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        if target.subresource == "status":
            result = copy.deepcopy(stored)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            new = result
        elif rt.status:
            if "status" in stored:
                new["status"] = copy.deepcopy(stored["status"])
            else:
                new.pop("status", None)
        new = _structural(rt, new)
        if new.get("spec") != stored.get("spec"):
            new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
        self._validate(rt, new, stored)
        self._admit(rt, f"{rt.plural}/status" if target.subresource == "status" else rt.plural, new, stored)
        if {**new, "metadata": {**new["metadata"], "resourceVersion": old_meta.get("resourceVersion")}} == stored:
            # Nothing changed: etcd3's GuaranteedUpdate writes nothing (k8s.io/apiserver storage/etcd3/store.go:
            # the new bytes equal the stored ones), so the resourceVersion stays and no watch hears of it.
            return _convert(rt, stored, target.version)
        committed = self._commit(rt, key, new, "MODIFIED")
        return _convert(rt, committed, target.version)

    def _scale_of(self, rt: ResourceType, stored: JsonObj) -> JsonObj:
        assert rt.scale is not None
        meta = stored["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
            },
            "spec": {"replicas": int(_dig(stored, rt.scale.spec_replicas) or 0)},
            "status": {
                "replicas": int(_dig(stored, rt.scale.status_replicas) or 0),
                "selector": rt.scale.selector(stored),
            },
        }

    def _write_scale(self, target: _Target, key: StoreKey, stored: JsonObj, scale: JsonObj) -> JsonObj:
        rt = target.rt
        assert rt.scale is not None
        sent_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != stored["metadata"]["resourceVersion"]:
            raise conflict(rt, key[3])
        replicas = _dig(scale, ("spec", "replicas"))
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(
                422, f'Scale.autoscaling "{key[3]}" is invalid: spec.replicas: Invalid value: {replicas!r}: '
                "must be greater than or equal to 0"
            )
        new = copy.deepcopy(stored)
        _put(new, rt.scale.spec_replicas, replicas)
        self._admit(rt, f"{rt.plural}/scale", self._scale_of(rt, new), self._scale_of(rt, stored))
        if new != stored:
            new["metadata"]["generation"] = int(stored["metadata"].get("generation", 1)) + 1
            stored = self._commit(rt, key, new, "MODIFIED")
        return self._scale_of(rt, stored)

    def _delete(self, target: _Target, body: Any = None) -> JsonObj:
        key, stored = self._stored(target)
        preconditions = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
        if preconditions.get("resourceVersion") not in (None, stored["metadata"]["resourceVersion"]):
            raise conflict(target.rt, key[3])
        if preconditions.get("uid") not in (None, stored["metadata"]["uid"]):
            raise ApiError(
                409,
                f'Precondition failed: UID in precondition: {preconditions["uid"]}, UID in object meta: '
                f'{stored["metadata"]["uid"]}',
                "Conflict",
                _details(target.rt, key[3]),
            )
        deleted = self._commit(target.rt, key, None, "DELETED")
        return _convert(target.rt, deleted, target.version)
