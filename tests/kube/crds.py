"""What the third-party CRDs the controller reads and writes enforce on a real server: Kueue's, LeaderWorkerSet's
and JobSet's. Read from their Go types (the kubebuilder markers that generate the CRDs), not from our code.

1. ``FIELDS``: the fields each kind's structural schema declares, level by level (``"spec"``, ``"spec.podSets[]"``
   for each item of a list). apiextensions-apiserver prunes any other field on every write (a ``Warning`` under
   ``fieldValidation`` Warn, a 400 under Strict). Levels not listed (pod templates, label maps, quantities) are
   not checked here. The emulator prunes what a client writes, and refuses a test fixture (``Emulator.add``,
   ``Emulator.modify``) that writes a field the real CRD lacks: a fixture must not show the controller a field a
   real server would never store.
3. ``DEFAULTS`` and ``SCHEMA``: the ``+kubebuilder:default`` values apiextensions-apiserver fills in on every
   write, and the types, enums, minimums and required fields it checks (``schema_problems``: 422 with its text),
   for the fields the controller reads or writes.
2. ``workload_rule_problems``: the ``x-kubernetes-validations`` (CEL) rules of Kueue's Workload, on create and
   (the transition rules, with ``oldSelf``) on update, main resource and ``/status`` alike. A failed rule is a
   422 ``Invalid``; a rule on the root reports the path ``<nil>`` (apiextensions-apiserver calls the CEL
   validator with a nil path), a rule on ``spec`` reports ``spec``.

Sources (kubernetes-sigs repositories):
- kueue ``apis/kueue/v1beta1/workload_types.go`` and ``apis/kueue/v1beta2/workload_types.go`` (``Workload``,
  ``WorkloadSpec``, ``PodSet``, ``Admission``, ``PodSetAssignment``, ``WorkloadStatus``),
  ``clusterqueue_types.go``, ``localqueue_types.go``, ``resourceflavor_types.go``, ``topology_types.go``,
  ``workloadpriorityclass_types.go``, ``admissioncheck_types.go`` (both versions' spellings: the emulator serves
  both from one storage, so a field of either version is known);
- lws ``api/leaderworkerset/v1/leaderworkerset_types.go``;
- jobset ``api/jobset/v1alpha2/jobset_types.go``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JsonObj = dict[str, Any]

_CONDITION = frozenset({"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"})
_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})

#: Declared fields by (group, plural), then by level ("" the object, "a.b" a nested object, "a.b[]" each item of a
#: list of objects). A level absent here is not checked.
FIELDS: dict[tuple[str, str], dict[str, frozenset[str]]] = {
    ("kueue.x-k8s.io", "workloads"): {
        "": _TOP,
        "spec": frozenset({"podSets", "queueName", "priorityClassName", "priority", "priorityClassSource",
                           "priorityClassRef", "active", "maximumExecutionTimeSeconds"}),
        "spec.podSets[]": frozenset({"name", "template", "count", "minCount", "topologyRequest"}),
        "spec.priorityClassRef": frozenset({"group", "kind", "name"}),
        "status": frozenset({
            "conditions", "admission", "requeueState", "reclaimablePods", "admissionChecks", "resourceRequests",
            # v1beta1 spells it with its typo, v1beta2 without.
            "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds", "schedulingStats",
            "nominatedClusterNames", "clusterName", "unhealthyNodes",
        }),
        "status.conditions[]": _CONDITION,
        "status.admission": frozenset({"clusterQueue", "podSetAssignments"}),
        "status.admission.podSetAssignments[]": frozenset({
            "name", "flavors", "resourceUsage", "count", "topologyAssignment", "delayedTopologyRequest",
        }),
        "status.admissionChecks[]": frozenset({"name", "state", "lastTransitionTime", "message", "podSetUpdates",
                                               "retryCount", "requeueAfterSeconds"}),
    },
    ("kueue.x-k8s.io", "clusterqueues"): {
        "": _TOP,
        "spec": frozenset({"resourceGroups", "cohort", "cohortName", "queueingStrategy", "namespaceSelector",
                           "flavorFungibility", "preemption", "admissionChecks", "admissionChecksStrategy",
                           "admissionScope", "stopPolicy", "fairSharing"}),
        "spec.resourceGroups[]": frozenset({"coveredResources", "flavors"}),
        "spec.resourceGroups[].flavors[]": frozenset({"name", "resources"}),
        "spec.resourceGroups[].flavors[].resources[]": frozenset({"name", "nominalQuota", "borrowingLimit",
                                                                  "lendingLimit"}),
        "spec.preemption": frozenset({"reclaimWithinCohort", "borrowWithinCohort", "withinClusterQueue"}),
        "status": frozenset({"flavorsReservation", "flavorsUsage", "pendingWorkloads", "reservingWorkloads",
                             "admittedWorkloads", "conditions", "pendingWorkloadsStatus", "fairSharing"}),
        "status.flavorsReservation[]": frozenset({"name", "resources"}),
        "status.flavorsReservation[].resources[]": frozenset({"name", "total", "borrowed"}),
        "status.flavorsUsage[]": frozenset({"name", "resources"}),
        "status.flavorsUsage[].resources[]": frozenset({"name", "total", "borrowed"}),
        "status.conditions[]": _CONDITION,
    },
    ("kueue.x-k8s.io", "localqueues"): {
        "": _TOP,
        "spec": frozenset({"clusterQueue", "stopPolicy", "fairSharing"}),
    },
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {
        "": frozenset({"apiVersion", "kind", "metadata", "value", "description"}),
    },
    ("kueue.x-k8s.io", "resourceflavors"): {
        "": frozenset({"apiVersion", "kind", "metadata", "spec"}),
        "spec": frozenset({"nodeLabels", "nodeTaints", "tolerations", "topologyName"}),
    },
    ("kueue.x-k8s.io", "topologies"): {
        "": frozenset({"apiVersion", "kind", "metadata", "spec"}),
        "spec": frozenset({"levels"}),
        "spec.levels[]": frozenset({"nodeLabel"}),
    },
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {
        "": _TOP,
        "spec": frozenset({"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}),
        "spec.leaderWorkerTemplate": frozenset({"leaderTemplate", "workerTemplate", "size", "restartPolicy",
                                                "subGroupPolicy", "volumeClaimTemplates",
                                                "persistentVolumeClaimRetentionPolicy", "resourcePolicy"}),
        "status": frozenset({"conditions", "readyReplicas", "updatedReplicas", "replicas", "hpaPodSelector"}),
        "status.conditions[]": _CONDITION,
    },
    ("jobset.x-k8s.io", "jobsets"): {
        "": _TOP,
        "spec": frozenset({"replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy",
                           "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished", "volumeClaimPolicies"}),
        "spec.replicatedJobs[]": frozenset({"name", "groupName", "template", "replicas", "dependsOn"}),
        "status": frozenset({"conditions", "restarts", "restartsCountTowardsMax", "terminalState",
                             "replicatedJobsStatus", "individualJobRecreates"}),
        "status.conditions[]": _CONDITION,
    },
}


def _nodes(obj: Any, level: str) -> Iterator[tuple[str, JsonObj]]:
    """The objects at ``level`` of ``obj`` with their concrete paths (``spec.podSets[0]``)."""
    found: list[tuple[str, Any]] = [("", obj)]
    for part in level.split(".") if level else []:
        many = part.endswith("[]")
        key = part.removesuffix("[]")
        nxt: list[tuple[str, Any]] = []
        for path, node in found:
            child = node.get(key) if isinstance(node, dict) else None
            where = f"{path}.{key}" if path else key
            if many:
                if isinstance(child, list):
                    nxt.extend((f"{where}[{i}]", item) for i, item in enumerate(child))
            elif child is not None:
                nxt.append((where, child))
        found = nxt
    for path, node in found:
        if isinstance(node, dict):
            yield path, node


def undeclared(group: str, plural: str, obj: JsonObj) -> list[str]:
    """The dotted paths of the fields of ``obj`` its CRD does not declare (``FIELDS``): what the server prunes."""
    out: list[str] = []
    for level, known in FIELDS.get((group, plural), {}).items():
        for path, node in _nodes(obj, level):
            out.extend(f"{path}.{k}" if path else k for k in node if k not in known)
    return out


def prune(group: str, plural: str, obj: JsonObj) -> JsonObj:
    """``obj`` without its undeclared fields (in place; returned for convenience)."""
    for level, known in FIELDS.get((group, plural), {}).items():
        for _, node in _nodes(obj, level):
            for k in [k for k in node if k not in known]:
                del node[k]
    return obj


# --- Kueue's Workload CEL rules ---------------------------------------------------------------------------------


def _has_condition(obj: JsonObj | None, type_: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def workload_rule_problems(new: JsonObj, old: JsonObj | None) -> list[str]:
    """The Workload's CEL rules that ``new`` breaks (``old``: the stored object, None on create), as the field
    errors apiextensions-apiserver prints them. Written in the storage version's spelling (v1beta2) with
    v1beta1's where its rules differ (``priorityClassName``/``priorityClassSource``), so one check serves both.

    The markers (kueue ``apis/kueue/v1beta2/workload_types.go``; v1beta1 has the same with its field names):
    - on ``WorkloadSpec``: ``!has(self.priorityClassRef) || has(self.priority)`` "priority should not be nil when
      priorityClassRef is set" (v1beta1: ``has(self.priorityClassName) ? has(self.priority) : true``);
    - on ``Workload``: with QuotaReserved True and an admission, ``size(spec.podSets) ==
      size(status.admission.podSetAssignments)``; while the old object has QuotaReserved True, the priority class
      may not appear, disappear or change group/kind (nor its name for a pod PriorityClass; v1beta1: source and
      name "field is immutable"); while QuotaReserved is True in both, ``queueName`` may not change; while
      Admitted is True in both, ``maximumExecutionTimeSeconds`` may not change (absent reads as 0)."""
    spec, status = new.get("spec") or {}, new.get("status") or {}
    out = []
    ref = spec.get("priorityClassRef")
    if ref is not None and spec.get("priority") is None:
        out.append('spec: Invalid value: "object": priority should not be nil when priorityClassRef is set')
    if spec.get("priorityClassName") and spec.get("priority") is None:
        out.append('spec: Invalid value: "object": priority should not be nil when priorityClassName is set')
    pod_sets = spec.get("podSets")
    if isinstance(pod_sets, list) and not 1 <= len(pod_sets) <= 8:
        bound = "should have at least 1 items" if not pod_sets else "must have at most 8 items"
        out.append(f"spec.podSets: Invalid value: {len(pod_sets)}: spec.podSets in body {bound}")
    admission = status.get("admission")
    if _has_condition(new, "QuotaReserved") and isinstance(admission, dict) and isinstance(pod_sets, list) \
            and len(pod_sets) != len(admission.get("podSetAssignments") or []):
        out.append('<nil>: Invalid value: "object": podSetAssignments must have the same number of podSets as '
                       "the spec")
    if old is None:
        return out
    old_spec = old.get("spec") or {}
    reserved_before, reserved_now = _has_condition(old, "QuotaReserved"), _has_condition(new, "QuotaReserved")
    if reserved_before:
        old_ref = old_spec.get("priorityClassRef")
        if (old_ref is None) != (ref is None):
            out.append('<nil>: Invalid value: "object": priorityClassRef is immutable while workload quota reserved')
        elif old_ref is not None and ref is not None:
            for part in ("group", "kind"):
                if old_ref.get(part) != ref.get(part):
                    out.append(f'<nil>: Invalid value: "object": priorityClassRef.{part} is immutable while workload '
                               "quota reserved")
            pod_class = ref.get("group") == "scheduling.k8s.io" and ref.get("kind") == "PriorityClass"
            if pod_class and old_ref.get("name") != ref.get("name"):
                out.append('<nil>: Invalid value: "object": priorityClassRef.name is immutable for '
                           "scheduling.k8s.io/priorityclass while workload quota reserved")
        if old_spec.get("priorityClassSource") != spec.get("priorityClassSource") or (
            "priorityClassName" in old_spec and "priorityClassName" in spec
            and old_spec["priorityClassName"] != spec["priorityClassName"]
        ):
            out.append('<nil>: Invalid value: "object": field is immutable')
    if reserved_before and reserved_now and "queueName" in old_spec and "queueName" in spec \
            and old_spec["queueName"] != spec["queueName"]:
        out.append('<nil>: Invalid value: "object": queueName is immutable while workload quota reserved')
    if _has_condition(old, "Admitted") and _has_condition(new, "Admitted") and \
            (old_spec.get("maximumExecutionTimeSeconds") or 0) != (spec.get("maximumExecutionTimeSeconds") or 0):
        out.append('<nil>: Invalid value: "object": maximumExecutionTimeSeconds is immutable while workload quota '
                   "reserved")
    return out


# --- Types, enums, required fields and defaults (the structural schema beyond field names) ------------------------

#: ``x-kubernetes-int-or-string`` with a quantity's pattern (``resource.Quantity``'s OpenAPI schema).
_QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                       r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
#: ``metav1.Condition``'s reason (k8s.io/apimachinery pkg/apis/meta/v1 types.go, its kubebuilder markers).
_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Rule:
    """One field's schema: its OpenAPI ``type`` (``integer``, ``boolean``, ``string``, ``object``, ``array``,
    ``quantity`` for int-or-string quantities), ``enum``, ``minimum``, ``required``, a ``pattern``."""

    type: str
    required: bool = False
    enum: tuple[str, ...] = ()
    minimum: int | None = None
    pattern: re.Pattern[str] | None = None


def _condition_rules() -> dict[str, Rule]:
    """``metav1.Condition``: every field required; ``status`` True/False/Unknown; ``reason`` a CamelCase word."""
    return {"type": Rule("string", required=True), "message": Rule("string", required=True),
            "status": Rule("string", required=True, enum=("True", "False", "Unknown")),
            "reason": Rule("string", required=True, pattern=_CONDITION_REASON),
            "lastTransitionTime": Rule("string", required=True), "observedGeneration": Rule("integer", minimum=0)}


#: The types, enums, minimums and required fields the controller reads or writes, by (group, plural) and level (as
#: ``FIELDS``), from the same kubebuilder markers: kueue v1beta2 workload_types.go (``active`` ``*bool``, ``count``
#: ``int32`` Minimum=0, ``template`` +required, ``PodSetReference`` pattern), clusterqueue_types.go (``nominalQuota``
#: a Quantity, ``queueingStrategy`` Enum), lws leaderworkerset_types.go (``replicas``/``size`` ``*int32``,
#: ``startupPolicy``/``restartPolicy`` Enum, ``workerTemplate`` required), jobset jobset_types.go (``suspend``
#: ``*bool``, ``replicatedJobs[].name``/``template`` required).
SCHEMA: dict[tuple[str, str], dict[str, dict[str, Rule]]] = {
    ("kueue.x-k8s.io", "workloads"): {
        "spec": {"active": Rule("boolean"), "priority": Rule("integer"), "queueName": Rule("string"),
                 "podSets": Rule("array"), "maximumExecutionTimeSeconds": Rule("integer", minimum=1)},
        "spec.podSets[]": {"name": Rule("string", pattern=_DNS_LABEL), "template": Rule("object", required=True),
                           "count": Rule("integer", minimum=0), "minCount": Rule("integer", minimum=1)},
        "spec.priorityClassRef": {
            "group": Rule("string", required=True, enum=("kueue.x-k8s.io", "scheduling.k8s.io")),
            "kind": Rule("string", required=True, enum=("WorkloadPriorityClass", "PriorityClass")),
            "name": Rule("string", required=True)},
        "status.conditions[]": _condition_rules(),
        "status.admission": {"clusterQueue": Rule("string"), "podSetAssignments": Rule("array")},
        "status.admission.podSetAssignments[]": {"name": Rule("string", pattern=_DNS_LABEL),
                                                 "count": Rule("integer", minimum=0), "flavors": Rule("object"),
                                                 "resourceUsage": Rule("object")},
    },
    ("kueue.x-k8s.io", "clusterqueues"): {
        "spec": {"queueingStrategy": Rule("string", enum=("StrictFIFO", "BestEffortFIFO")),
                 "resourceGroups": Rule("array")},
        "spec.resourceGroups[]": {"coveredResources": Rule("array", required=True),
                                  "flavors": Rule("array", required=True)},
        "spec.resourceGroups[].flavors[]": {"name": Rule("string", required=True),
                                            "resources": Rule("array", required=True)},
        "spec.resourceGroups[].flavors[].resources[]": {
            "name": Rule("string", required=True), "nominalQuota": Rule("quantity", required=True),
            "borrowingLimit": Rule("quantity"), "lendingLimit": Rule("quantity")},
        "status.flavorsReservation[].resources[]": {"name": Rule("string", required=True),
                                                    "total": Rule("quantity"), "borrowed": Rule("quantity")},
        "status.flavorsUsage[].resources[]": {"name": Rule("string", required=True), "total": Rule("quantity"),
                                              "borrowed": Rule("quantity")},
        "status.conditions[]": _condition_rules(),
    },
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {"": {"value": Rule("integer", required=True)}},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {
        "spec": {"replicas": Rule("integer"), "leaderWorkerTemplate": Rule("object", required=True),
                 "startupPolicy": Rule("string", enum=("LeaderCreated", "LeaderReady"))},
        "spec.leaderWorkerTemplate": {
            "workerTemplate": Rule("object", required=True), "size": Rule("integer"),
            "restartPolicy": Rule("string", enum=("Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart",
                                                  "None"))},
        "status": {"replicas": Rule("integer"), "readyReplicas": Rule("integer"), "updatedReplicas": Rule("integer"),
                   "hpaPodSelector": Rule("string")},
        "status.conditions[]": _condition_rules(),
    },
    ("jobset.x-k8s.io", "jobsets"): {
        "spec": {"suspend": Rule("boolean"), "replicatedJobs": Rule("array")},
        "spec.replicatedJobs[]": {"name": Rule("string", required=True), "template": Rule("object", required=True),
                                  "replicas": Rule("integer")},
        "status.conditions[]": _condition_rules(),
    },
}

#: CRD defaults (``+kubebuilder:default``), by (group, plural): (level, field, value). apiextensions-apiserver
#: applies them to a level that exists and lacks the field, on every request body and on every read from etcd, so
#: a client never sees the field absent: Workload ``spec.active`` true, each podSet's ``name`` "main" and ``count``
#: 1 (kueue v1beta2 workload_types.go); LeaderWorkerSet ``spec.replicas`` 1, ``startupPolicy`` LeaderCreated,
#: ``leaderWorkerTemplate.size`` 1 and ``restartPolicy`` RecreateGroupOnPodRestart (lws leaderworkerset_types.go);
#: a JobSet's replicated job ``replicas`` 1 (jobset jobset_types.go); a ClusterQueue's ``queueingStrategy``
#: BestEffortFIFO and ``stopPolicy`` None (kueue clusterqueue_types.go).
DEFAULTS: dict[tuple[str, str], tuple[tuple[str, str, Any], ...]] = {
    ("kueue.x-k8s.io", "workloads"): (("spec", "active", True), ("spec.podSets[]", "name", "main"),
                                      ("spec.podSets[]", "count", 1),
                                      ("status.admission.podSetAssignments[]", "name", "main")),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): (
        ("spec", "replicas", 1), ("spec", "startupPolicy", "LeaderCreated"),
        ("spec.leaderWorkerTemplate", "size", 1),
        ("spec.leaderWorkerTemplate", "restartPolicy", "RecreateGroupOnPodRestart")),
    ("jobset.x-k8s.io", "jobsets"): (("spec.replicatedJobs[]", "replicas", 1),),
    ("kueue.x-k8s.io", "clusterqueues"): (("spec", "queueingStrategy", "BestEffortFIFO"),
                                          ("spec", "stopPolicy", "None")),
}


def default(group: str, plural: str, obj: JsonObj) -> JsonObj:
    """``obj`` with its CRD's defaults (``DEFAULTS``) filled in where absent (in place; returned)."""
    for level, name, value in DEFAULTS.get((group, plural), ()):
        for _, node in _nodes(obj, level):
            if node.get(name) is None:
                node[name] = copy.deepcopy(value)
    return obj


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "boolean": (bool,), "string": (str,), "object": (dict,), "array": (list,),
    "quantity": (int, str),
}


def _go_type(value: Any) -> str:
    """The OpenAPI type apiextensions-apiserver names for a value in its message."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "null"


def schema_problems(group: str, plural: str, obj: JsonObj) -> list[str]:
    """The field errors of ``obj`` against ``SCHEMA``, as apiextensions-apiserver prints them: a wrong type
    (``spec.active: Invalid value: "string": spec.active in body must be of type boolean: "string"``), a missing
    required field (``Required value``), a value outside its enum (``Unsupported value``), below its minimum, or not
    matching its pattern."""
    out = []
    for level, rules in SCHEMA.get((group, plural), {}).items():
        for path, node in _nodes(obj, level):
            for name, rule in rules.items():
                where = f"{path}.{name}" if path else name
                if name not in node or node[name] is None:
                    if rule.required:
                        out.append(f"{where}: Required value")
                    continue
                value = node[name]
                ok = isinstance(value, _JSON_TYPES[rule.type]) and not (
                    isinstance(value, bool) and rule.type in ("integer", "quantity"))
                if not ok:
                    want = "integer,string" if rule.type == "quantity" else rule.type
                    out.append(f'{where}: Invalid value: "{_go_type(value)}": {where} in body must be of type '
                               f'{want}: "{_go_type(value)}"')
                    continue
                if rule.enum and value not in rule.enum:
                    supported = ", ".join(f'"{e}"' for e in rule.enum)
                    out.append(f'{where}: Unsupported value: "{value}": supported values: {supported}')
                if rule.minimum is not None and value < rule.minimum:
                    out.append(f"{where}: Invalid value: {value}: {where} in body should be greater than or equal "
                               f"to {rule.minimum}")
                if rule.type == "quantity" and isinstance(value, str) and not _QUANTITY.match(value):
                    out.append(f'{where}: Invalid value: "{value}": {where} in body should match '
                               f"'{_QUANTITY.pattern}'")
                elif rule.pattern is not None and isinstance(value, str) and not rule.pattern.match(value):
                    out.append(f'{where}: Invalid value: "{value}": {where} in body should match '
                               f"'{rule.pattern.pattern}'")
    return out
