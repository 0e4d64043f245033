"""The Kueue training gate: find the preemptible training Workloads, read the quota, stop and resume them.

Finding (``KueueGate.training``), for each ``preemptible`` entry (namespace + ``selector.matchLabels``):
1. list the training jobs the selector matches, by their own labels or their pods' template labels (batch/v1
   Jobs, JobSets, RayJobs; a kind whose API is not installed is skipped), and the Workloads of the namespace;
2. a Workload belongs to the policy when its *controller* ownerReference UID is one of those owners' UIDs
   (Kueue truncates and randomises Workload names, so names are never guessed), or when the Workload itself
   carries the selector's labels (a non-empty selector);
3. priority: ``spec.priority``, else the WorkloadPriorityClass named by ``spec.priorityClassRef`` (v1beta2) or
   ``spec.priorityClassName`` (v1beta1) or the ``kueue.x-k8s.io/priority-class`` label; chips: the sum over
   ``podSets`` of ``count`` × the capacity resource each pod requests; ``active`` (default true); admitted
   (``status.admission`` or condition ``Admitted``);
4. what a stop costs: the time since the last checkpoint (``LAST_CHECKPOINT``), the pods'
   ``terminationGracePeriodSeconds`` (``grace_seconds``: the job's pod templates, else the Workload's podSets),
   and what the job declares (``SAVE_SECONDS``, ``ON_TERMINATION``, ``INTERVAL_SECONDS``, ``ON_REQUEST``,
   ``RESTORE_SECONDS``); a restarted job's time since its checkpoint is bounded by the time since its pods
   became ready again (``running_since``) less its declared restore; an undeclared interval is learned from
   successive checkpoint times (``arbitration.learn_interval``, kept per Workload UID);
5. Kueue evicting it on its own (``evicting_reason``), and for whom: the preemptor its ``Preempted`` condition
   names (``preemptor``, ``PREEMPTED_FOR``: Kueue's text in each release) resolved to the serving target whose
   replica it is, while that replica still waits (``KueueGate._evicted_for``; ``TrainingWorkload.evicted_for``).

Quota (``quota``): the ClusterQueue's ``nominalQuota`` and ``borrowingLimit`` for the resource over all
flavors, and its ``status.flavorsReservation`` (serving's own replicas are in it already).

Stopping and resuming (``deactivate`` / ``reactivate``) patch ``Workload.spec.active`` with a JSON merge patch
carrying the resourceVersion; never ``Job.spec.suspend``, which Kueue undoes for an admitted Job. The
deactivation records ``autoscaler.dev/deactivated-by: <policy>``, the reason and the time on the Workload,
so a restarted controller knows which Workloads are its own to resume; a Workload some one else stopped is
never resumed by us. A Workload that cannot be found again by its identity (UID, owner) is never deactivated.

Both Kueue API versions are supported: v1beta2 first, v1beta1 when the server does not serve v1beta2.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from autoscaler.controller import inventory, kinds
from autoscaler.controller.kube import (
    DEFAULT_RETRY,
    MERGE_PATCH,
    Forbidden,
    NotFound,
    Refusal,
    RetryPolicy,
    call,
    get_json,
    parse_quantity,
    request_json,
    retrying,
)
from autoscaler.controller.observer import Training
from autoscaler.core import arbitration
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import (
    EvictedFor,
    QueueQuota,
    QuotaStatus,
    TargetRef,
    TrainingAction,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.spec import CapacitySpec, PreemptibleSpec, Spec

JsonObj = dict[str, Any]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
DEACTIVATED_BY = "autoscaler.dev/deactivated-by"
DEACTIVATED_REASON = "autoscaler.dev/deactivated-reason"
DEACTIVATED_AT = "autoscaler.dev/deactivated-at"
#: On the training Job/JobSet (or its Workload): when the job last completed a checkpoint, RFC 3339 or unix
#: seconds. The training loop (or a sidecar watching its checkpoint directory) updates it after each save.
LAST_CHECKPOINT = "autoscaler.dev/last-checkpoint-time"
#: On the training Job/JobSet: when this controller asked it to checkpoint before being stopped (capacity
#: ``checkpointRequestSeconds``). A training loop that honours it saves at once and updates LAST_CHECKPOINT.
CHECKPOINT_REQUESTED = "autoscaler.dev/checkpoint-requested-at"
#: On the training Job/JobSet, declared by whoever runs it (read also from the Workload as a fallback):
#: how long one checkpoint save takes, in seconds (``SAVE_SECONDS``); ``"true"`` when the trainer saves a
#: checkpoint on SIGTERM (``ON_TERMINATION``): with a save that fits in the pods'
#: ``terminationGracePeriodSeconds``, a stop then loses nothing; and the seconds between its checkpoints
#: (``INTERVAL_SECONDS``; else learned from successive LAST_CHECKPOINT values, ``arbitration.learn_interval``).
SAVE_SECONDS = "autoscaler.dev/checkpoint-save-seconds"
ON_TERMINATION = "autoscaler.dev/checkpoint-on-termination"
INTERVAL_SECONDS = "autoscaler.dev/checkpoint-interval-seconds"
#: ``"true"``: the training loop honours CHECKPOINT_REQUESTED (saves at once, updates LAST_CHECKPOINT, and
#: finishes that save before it exits, SIGTERM or not). Only such a job is asked (capacity
#: ``checkpointRequestSeconds``); anything else (absent, ``"false"``, a typo) is never asked nor waited for.
ON_REQUEST = "autoscaler.dev/checkpoint-on-request"
#: Seconds a restarted job spends reloading its checkpoint before it computes again: after a restart, what a
#: stop loses is bounded by the time since its admission less this (undeclared: 0, the safe side).
RESTORE_SECONDS = "autoscaler.dev/checkpoint-restore-seconds"
#: Kubernetes' default ``terminationGracePeriodSeconds`` when a pod template leaves it out.
DEFAULT_GRACE_S = 30.0
#: On the Workload: when this controller stopped it, comma-separated, the last hour only (the per-job cap).
PREEMPTED_AT = "autoscaler.dev/preempted-at"
#: On the Workload: when this controller last resumed it (the minimum run time after a resume).
RESUMED_AT = "autoscaler.dev/resumed-at"
PREEMPTION_MEMORY_S = 3600.0
#: On the Workload, JSON: what it was stopped for, by stable identities: ``{"target": "Deployment/ns/name",
#: "targetUID": ..., "clusterQueue": ..., "resource": ...}``. Kept after a resume (the ClusterQueue it claims
#: room in until Kueue admits it). A restarted controller, or one whose policy was deleted, renamed or had its
#: selector changed, finds every Workload it holds down from these marks alone (``KueueGate.held``).
HELD_FOR = "autoscaler.dev/held-for"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass(frozen=True, slots=True)
class OwnerKind:
    """A training-job kind Kueue makes Workloads for."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


OWNER_KINDS = (
    OwnerKind("batch", "v1", "jobs", "Job"),
    OwnerKind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    OwnerKind("ray.io", "v1", "rayjobs", "RayJob"),
)


@dataclass(frozen=True, slots=True)
class Held:
    """A Workload this controller holds down, as its marks record it (see ``HELD_FOR``)."""

    workload: TrainingWorkload
    cluster_queue: str
    resource: str
    #: The policy that stopped it (informational: policies are found again by what they select).
    policy: str
    target: str
    target_uid: str
    reason: str
    held_s: float | None
    #: A current policy's ``preemptible`` selection covers it (that policy resumes it); else the sweep does.
    covered: bool
    #: Chips of Workloads we resumed on the same ClusterQueue that Kueue has not admitted yet.
    claimed: float = 0.0
    #: Chips of higher-priority Workloads waiting for admission in its LocalQueue (serving pods, say): they
    #: get the room first, so it is not resumed while they wait.
    waiting: float = 0.0


def _held_info(annotations: dict[str, str]) -> JsonObj | None:
    text = annotations.get(HELD_FOR)
    if text is None:
        return {} if DEACTIVATED_BY in annotations else None  # marked by a version without HELD_FOR
    try:
        info = json.loads(text)
    except (ValueError, RecursionError):  # anyone who may edit the Workload may write this annotation
        return {}
    return info if isinstance(info, dict) else {}


class UnresolvableWorkload(Refusal):
    """The Workload cannot be found again by its identity, so it is not ours to stop (or resume)."""


def _controller_owner(wl: JsonObj) -> JsonObj | None:
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            result: JsonObj = ref
            return result
    return None


def _labels_match(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def _pod_template_labels(owner: JsonObj) -> list[dict[str, str]]:
    """Labels of the pods a Job (``spec.template``) or JobSet (``spec.replicatedJobs[].template``) creates."""
    spec = owner.get("spec") or {}
    found = [((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}]
    for replicated in spec.get("replicatedJobs") or []:
        job_spec = ((replicated.get("template") or {}).get("spec")) or {}
        found.append(((job_spec.get("template") or {}).get("metadata") or {}).get("labels") or {})
    return found


def _pod_specs(obj: JsonObj) -> list[JsonObj]:
    """The pod specs a training job (Job ``spec.template``, JobSet ``spec.replicatedJobs[].template.spec.
    template``, RayJob ``spec.rayClusterSpec`` head and worker groups) or a Workload (``spec.podSets[].template``)
    creates its pods from."""
    spec = obj.get("spec") or {}
    templates = [spec.get("template")]
    templates += [
        ((r.get("template") or {}).get("spec") or {}).get("template") for r in spec.get("replicatedJobs") or []
    ]
    ray = spec.get("rayClusterSpec") or {}
    templates.append((ray.get("headGroupSpec") or {}).get("template"))
    templates += [g.get("template") for g in ray.get("workerGroupSpecs") or []]
    templates += [p.get("template") for p in spec.get("podSets") or []]
    return [t["spec"] for t in templates if isinstance(t, dict) and isinstance(t.get("spec"), dict)]


def grace_seconds(obj: JsonObj) -> float | None:
    """The longest ``terminationGracePeriodSeconds`` over the pod templates of ``obj`` (a training job or its
    Workload; Kubernetes' default 30 s where a template leaves it out): how long its pods may take to exit
    after SIGTERM. None when ``obj`` has no pod template."""
    found: list[float] = []
    for pod in _pod_specs(obj):
        value = pod.get("terminationGracePeriodSeconds")
        try:
            found.append(DEFAULT_GRACE_S if value is None else max(0.0, float(value)))
        except (TypeError, ValueError):
            found.append(DEFAULT_GRACE_S)  # not a number: the API server would have rejected it; the default
    return max(found) if found else None


def _seconds(value: object) -> float | None:
    """A declared duration in seconds (``"20"``, ``"20s"``); None when absent, negative or not a number."""
    if value is None:
        return None
    try:
        seconds = float(str(value).strip().removesuffix("s"))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _owner_matches(owner: JsonObj, wanted: dict[str, str]) -> bool:
    """A training job matches a selector by its own labels or by its pods' (``kubectl logs -l`` users know
    the pod labels; the tutorial's Job carries only the queue label)."""
    own = (owner.get("metadata") or {}).get("labels") or {}
    return _labels_match(own, wanted) or any(_labels_match(t, wanted) for t in _pod_template_labels(owner))


def workload_chips(wl: JsonObj, resource: str) -> float:
    """Units of ``resource`` a Workload needs: Σ podSets count × per-pod requests (limits when no request)."""
    total = 0.0
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
        per_pod = 0.0
        for ctr in pod_spec.get("containers") or []:
            resources = ctr.get("resources") or {}
            qty = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
            if qty is not None:
                per_pod += parse_quantity(qty)
        total += per_pod * int(pod_set.get("count", 1))
    return total


def _cohort(cq: JsonObj) -> str:
    spec = cq.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")  # v1beta2 / v1beta1


def queue_quota(cq: JsonObj, resource: str) -> QueueQuota:
    """A ClusterQueue's nominal quota, limits and reservation for one resource, over all its flavors."""
    nominal = reserved = 0.0
    borrowing: float | None = None
    lending: float | None = None
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == resource:
                    nominal += parse_quantity(res.get("nominalQuota", 0))
                    if res.get("borrowingLimit") is not None:
                        borrowing = (borrowing or 0.0) + parse_quantity(res["borrowingLimit"])
                    if res.get("lendingLimit") is not None:
                        lending = (lending or 0.0) + parse_quantity(res["lendingLimit"])
    status = cq.get("status") or {}
    for flavor in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == resource:
                reserved += parse_quantity(res.get("total", 0))
    # Kueue's default is Never; LowerPriority is taken as reclaiming (serving outranks what borrows: ``estimate``).
    reclaim = ((cq.get("spec") or {}).get("preemption") or {}).get("reclaimWithinCohort") or "Never"
    name = str((cq.get("metadata") or {}).get("name") or "")
    return QueueQuota(nominal, reserved, borrowing, lending, name=name, reclaims=reclaim != "Never")


def _parse_time(value: object) -> float | None:
    """An RFC 3339 time (``2026-11-30T10:00:00Z``) or unix seconds as unix seconds; None when absent or bad."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _parse_times(value: object) -> list[float]:
    return [t for part in str(value or "").split(",") if (t := _parse_time(part)) is not None]


def _stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_admitted(wl: JsonObj) -> bool:
    return bool((wl.get("status") or {}).get("admission")) or kinds.true_condition(wl, "Admitted") is not None


#: ``Evicted`` reasons of a Workload set inactive (``Deactivated``; ``InactiveWorkload`` before Kueue v0.9):
#: that eviction is read from ``spec.active``, never as Kueue evicting on its own.
DEACTIVATION_REASONS = frozenset({"Deactivated", "InactiveWorkload"})


def evicting_reason(wl: JsonObj) -> str | None:
    """The reason Kueue is evicting this Workload on its own (``Preempted``, ``PodsReadyTimeout``, …), or None:
    its ``Evicted`` condition is True while it is still active and still holds its quota (Kueue clears
    ``QuotaReserved``/``Admitted`` only once the job's pods are gone: kueue ``jobframework/reconciler.go``,
    ``UnsetQuotaReservationWithCondition`` after ``stopJob``)."""
    if not (wl.get("spec") or {}).get("active", True) or not is_admitted(wl):
        return None
    evicted = kinds.true_condition(wl, "Evicted")
    if evicted is None:
        return None
    reason = str(evicted.get("reason") or "")
    return None if reason in DEACTIVATION_REASONS else reason


#: The text Kueue writes on a Workload it preempts, naming the preemptor, in the ``Preempted`` condition (reason
#: ``InClusterQueue``, ``InCohortReclamation``, …; the condition exists since kueue#1942, 2024) and in the
#: ``Evicted`` condition (reason ``Preempted``). kueue ``pkg/scheduler/preemption/preemption.go``,
#: ``preemptionMessage``: "Preempted to accommodate a workload (UID: <preemptor Workload UID>, JobUID: <its
#: kueue.x-k8s.io/job-uid label>) due to <reason>" since v0.11.0 (kueue#4524; either UID is "UNKNOWN" when
#: unset), with "; preemptor path: /…; preemptee path: /…" appended since v0.15.0 (kueue#7522); "(UID: <uid>)"
#: alone in the releases before v0.11; no UID at all in older ones ("Preempted to accommodate a higher priority
#: Workload"). When Kueue admits the Workload again it sets the condition False and keeps the old text behind
#: "Previously: " (kueue#6819). Only a True condition whose message *starts* with this text is read; any other
#: text, an "UNKNOWN" UID, or two conditions naming different preemptors mean: the preemptor is unknown.
PREEMPTED_FOR = re.compile(
    r"Preempted to accommodate a workload \(UID: (?P<uid>[^,()\s]+)(?:, JobUID: (?P<job>[^,()\s]+))?\)"
)
UNKNOWN_UID = "UNKNOWN"
#: How many preemptors' targets ``KueueGate`` remembers (each a few hundred bytes; far more than Kueue preempts
#: for at once).
PREEMPTORS_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The workload Kueue evicts a Workload for, as its ``Preempted``/``Evicted`` message names it."""

    #: The preemptor's Workload UID.
    uid: str
    #: Its ``kueue.x-k8s.io/job-uid`` label (the Pod's UID for a plain pod), "" when not written or "UNKNOWN".
    job_uid: str = ""


def preemptor(wl: JsonObj) -> Preemptor | None:
    """Who Kueue is evicting ``wl`` for (``PREEMPTED_FOR``), while it evicts it on its own with reason
    ``Preempted`` (``evicting_reason``); None when that is not said in a form read here (never a guess)."""
    if evicting_reason(wl) != "Preempted":
        return None
    found: set[Preemptor] = set()
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("status") != "True" or not (
            c.get("type") == "Preempted" or (c.get("type") == "Evicted" and c.get("reason") == "Preempted")
        ):
            continue
        match = PREEMPTED_FOR.match(str(c.get("message") or "").strip())
        if match is None or match["uid"] == UNKNOWN_UID:
            continue
        job = match["job"] or ""
        found.add(Preemptor(match["uid"], "" if job == UNKNOWN_UID else job))
    return next(iter(found)) if len({p.uid for p in found}) == 1 else None


def admitted_since(wl: JsonObj) -> float | None:
    """When Kueue last admitted the Workload (its ``Admitted`` condition's lastTransitionTime), if admitted."""
    return _true_since(wl, "Admitted")


def running_since(wl: JsonObj) -> float | None:
    """When the admitted Workload's pods last became ready: its ``PodsReady`` condition's lastTransitionTime
    (Kueue sets it with ``waitForPodsReady``) when true and not older than the admission, else the admission
    (``admitted_since``). Provisioning (a TPU slice's AdmissionCheck) and scheduling before it compute nothing."""
    admitted = admitted_since(wl)
    ready = _true_since(wl, "PodsReady")
    if admitted is None or ready is None or ready < admitted:
        return admitted
    return ready


def _true_since(wl: JsonObj, kind: str) -> float | None:
    condition = kinds.true_condition(wl, kind)
    return None if condition is None else _parse_time(condition.get("lastTransitionTime"))


class _Lookup:
    """One ``find``'s reads for naming preemptors (``KueueGate._evicted_for``): each namespace's Workloads and
    each target object read once."""

    def __init__(self) -> None:
        self._workloads: dict[str, list[JsonObj]] = {}
        self._targets: dict[str, JsonObj] = {}

    async def workloads(self, gate: KueueGate, namespace: str) -> list[JsonObj]:
        if namespace not in self._workloads:
            self._workloads[namespace] = await gate._list_workloads(namespace)
        return self._workloads[namespace]

    async def target(self, gate: KueueGate, ref: TargetRef) -> JsonObj:
        if ref.key not in self._targets:
            self._targets[ref.key] = await get_json(gate.api, kinds.of(ref.kind).object_path(ref))
        return self._targets[ref.key]


class KueueGate:
    """Reads the policy's training Workloads and quota; stops and resumes them. See the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        now: Callable[[], float] = time.time,
        owner_kinds: tuple[OwnerKind, ...] = OWNER_KINDS,
    ) -> None:
        self.api = api
        self.retry = retry
        self.now = now
        self.owner_kinds = owner_kinds
        self._custom: Any = client.CustomObjectsApi(api)
        self._version: str | None = None
        #: The slice inventory of a ClusterQueue flavor with topology-aware admission (``controller.inventory``).
        self.slices = inventory.SliceReader(api)
        #: Namespaces of every policy seen and of every Workload stopped or seen held (where ``held`` looks).
        self._held_namespaces: set[str] = set()
        #: List Workloads cluster-wide in ``held`` (needs ``list workloads`` cluster-wide; the shipped RBAC grants
        #: Workloads per namespace): config ``heldSweepAllNamespaces``.
        self.list_all = False
        #: Per Workload UID, its checkpoints seen so far (``arbitration.learn_interval``): the interval of a job
        #: that declares none is learned from two successive LAST_CHECKPOINT values.
        self._checkpoints: dict[str, arbitration.CheckpointMemory] = {}
        #: Every serving target a policy read here scales (by ``TargetRef.key``): a Workload Kueue evicts for a
        #: replica of one of them is named by it (``_evicted_for``), whichever policy reads that Workload. Reset
        #: to the current policies' targets at every ``held`` sweep.
        self._targets: dict[str, TargetRef] = {}
        #: Per preemptor Workload UID, the target it was found to be a replica of, oldest first (at most
        #: ``PREEMPTORS_KEPT``).
        self._preemptors: dict[str, str] = {}

    # --- Kueue API version ---------------------------------------------------------------------------------

    async def version(self) -> str:
        """The Kueue API version to use: v1beta2 when served, else v1beta1 (found once, then kept)."""
        if self._version is None:
            for version in KUEUE_VERSIONS:
                try:
                    await call(self._custom.list_cluster_custom_object(KUEUE_GROUP, version, "clusterqueues", limit=1))
                except NotFound:
                    continue
                self._version = version
                break
            else:
                raise NotFound(
                    404, "NotFound", "Kueue is not installed: neither kueue.x-k8s.io/v1beta2 nor v1beta1 is served"
                )
        return self._version

    # --- reading ---------------------------------------------------------------------------------------------

    async def training(self, policy: CompiledPolicy) -> Training:
        """The loop's ``TrainingReader``: the policy's preemptible Workloads and its ClusterQueue quota."""
        spec = policy.policy.spec
        if spec.capacity is None:
            return Training((), None)
        lookup = _Lookup()
        workloads = await self.find(spec, owner=policy.name, name_preemptors=True, lookup=lookup)
        quota = dataclasses.replace(await self.quota(spec.capacity), evicting=await self.evicting(spec, lookup))
        # Where the ClusterQueue's flavor is carved into slices on admission, that, not the quota number, is
        # what serving can get: its blocks and what occupies them, the same for every policy on it.
        slices = await self.slices.read(policy, await self.version())
        return Training(workloads, quota if slices is None else dataclasses.replace(quota, slices=slices))

    async def find(
        self, spec: Spec, *, owner: str, name_preemptors: bool = False, lookup: _Lookup | None = None
    ) -> tuple[TrainingWorkload, ...]:
        """The policy's preemptible Workloads; with ``name_preemptors`` (the arbitration's read), each one Kueue
        evicts for a serving replica of a known target says so (``TrainingWorkload.evicted_for``). ``lookup``:
        the read's namespace lists, shared with ``evicting``."""
        assert spec.capacity is not None
        mine = [t.ref() for t in spec.targets()]
        self._targets.update((t.key, t) for t in mine)
        found: dict[str, TrainingWorkload] = {}
        lookup = lookup or _Lookup()
        for preemptible in spec.preemptible:
            for wl, job in await self._matching(preemptible, lookup):
                training = await self._to_training(wl, spec.capacity.resource, owner, job)
                by = preemptor(wl) if name_preemptors else None
                if by is not None:
                    named = await self._evicted_for(by, lookup, first={t.namespace for t in mine})
                    training = dataclasses.replace(training, evicted_for=named)
                found.setdefault(training.uid, training)
        return tuple(sorted(found.values(), key=lambda w: (w.namespace, w.name)))

    async def evicting(self, spec: Spec, lookup: _Lookup) -> tuple[EvictedFor, ...]:
        """Every Workload admitted on the policy's ClusterQueue (``status.admission.clusterQueue``) that Kueue is
        evicting for a replica of a known serving target (``preemptor``, named by ``_evicted_for``), whether or
        not the policy's ``preemptible`` selects it (``QuotaStatus.evicting``; the arbitration counts each once:
        ``arbitration.unselected_making_room``). Only training: a Workload owned by a kind that is not one
        (a serving Pod, a LeaderWorkerSet) is left out, as ``_matching`` leaves it out. Read in the namespaces of
        the policy's ``preemptible`` entries (listed for ``find`` already: no read more), and in every namespace
        with ``heldSweepAllNamespaces`` (``list_all``: one cluster-wide list). A Workload elsewhere is not seen:
        its chips are not counted, and the arbitration may stop one of ours for the replica, as before."""
        assert spec.capacity is not None
        capacity = spec.capacity
        items: list[JsonObj] | None = None
        if self.list_all:
            try:
                listed = await call(self._custom.list_cluster_custom_object(KUEUE_GROUP, await self.version(),
                                                                            "workloads"))
                items = listed.get("items") or []
            except (Forbidden, NotFound):
                items = None  # not granted: the namespaces below (``held`` turns ``list_all`` off)
        if items is None:
            items = []
            for namespace in sorted({p.namespace for p in spec.preemptible}):
                try:
                    items.extend(await lookup.workloads(self, namespace))
                except (Forbidden, NotFound):
                    continue
        first = {t.ref().namespace for t in spec.targets()}
        found: dict[str, EvictedFor] = {}
        for wl in items:
            meta = wl.get("metadata") or {}
            if ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") != capacity.cluster_queue:
                continue
            ref = _controller_owner(wl)
            if ref is not None and not any(ref.get("kind") == k.kind for k in self.owner_kinds):
                continue
            by = preemptor(wl)
            target = "" if by is None else await self._evicted_for(by, lookup, first=first)
            if target:
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                found[key] = EvictedFor(key, workload_chips(wl, capacity.resource), target)
        return tuple(found[k] for k in sorted(found))

    async def _evicted_for(self, by: Preemptor, lookup: _Lookup, *, first: set[str]) -> str:
        """The serving target (``TargetRef.key``) whose replica waiting for admission is the preemptor ``by``, or
        "" (not found, admitted already, not a target read here, or a read refused): Kueue is then evicting for
        something else, as far as we know, and the arbitration counts the Workload neither as victim nor room.

        The preemptor's Workload is looked up by UID in the namespaces of the known targets; it must still wait
        (not admitted). Its controller owner names the target: a LeaderWorkerSet, StatefulSet or Deployment of
        that name, or a Pod (Kueue's pod integration; an LWS group's pods) whose labels the target's own pod
        selector (``kinds.TargetKindInfo.pod_selector``; ``matchLabels`` only) matches. The deciding policy's own
        namespaces (``first``) are searched first. A preemptor's target, once named, is remembered by its UID
        (who owns a Workload never changes): the next passes read nothing more, and whether its replica still
        waits is the arbitration's (``waiting_targets``). One not named is looked up again at the next read
        (another policy's targets may not be known here yet)."""
        if by.uid in self._preemptors:
            return self._preemptors[by.uid]
        named = await self._resolve(by, lookup, first)
        if named:
            while len(self._preemptors) >= PREEMPTORS_KEPT:
                del self._preemptors[next(iter(self._preemptors))]
            self._preemptors[by.uid] = named
        return named or ""

    async def _resolve(self, by: Preemptor, lookup: _Lookup, first: set[str]) -> str | None:
        """``_evicted_for`` read from the cluster; None when a read was refused (not remembered)."""
        targets = list(self._targets.values())
        try:
            for namespace in sorted({t.namespace for t in targets}, key=lambda n: (n not in first, n)):
                wl = next((w for w in await lookup.workloads(self, namespace)
                           if (w.get("metadata") or {}).get("uid") == by.uid), None)
                if wl is None:
                    continue
                if is_admitted(wl) or kinds.true_condition(wl, "QuotaReserved") is not None:
                    return ""  # admitted (or its quota reserved) already: nothing of it waits
                ref = _controller_owner(wl) or {}
                kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
                mine = [t for t in targets if t.namespace == namespace]
                named = next((t for t in mine if t.kind.value == kind and t.name == name), None)
                if named is not None:
                    return named.key
                if kind != "Pod":
                    return ""
                try:
                    pod = await get_json(self.api, f"/api/v1/namespaces/{namespace}/pods/{name}")
                except NotFound:
                    return ""  # its pod is gone: nothing of it waits
                labels = (pod.get("metadata") or {}).get("labels") or {}
                for t in mine:
                    selector = kinds.of(t.kind).pod_selector(t, await lookup.target(self, t))
                    wanted = selector.get("matchLabels") or {}
                    if wanted and not selector.get("matchExpressions") and _labels_match(labels, wanted):
                        return t.key
                return ""
        except (NotFound, Forbidden):
            return None
        return ""

    async def _owner_uids(self, namespace: str, match_labels: dict[str, str]) -> dict[str, JsonObj]:
        uids: dict[str, JsonObj] = {}
        for kind in self.owner_kinds:
            try:
                # Plain JSON for every kind: batch/v1 Jobs through the typed client cost a model per field.
                prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
                listed = await get_json(self.api, f"{prefix}/namespaces/{namespace}/{kind.plural}")
                items = listed.get("items") or []
            except NotFound:
                continue  # this job API is not installed
            uids.update(
                (i["metadata"]["uid"], i) for i in items
                if (i.get("metadata") or {}).get("uid") and _owner_matches(i, match_labels)
            )
        return uids

    async def _list_workloads(self, namespace: str) -> list[JsonObj]:
        version = await self.version()
        result = await call(self._custom.list_namespaced_custom_object(KUEUE_GROUP, version, namespace, "workloads"))
        items: list[JsonObj] = result.get("items") or []
        return items

    async def _matching(
        self, preemptible: PreemptibleSpec, lookup: _Lookup | None = None
    ) -> list[tuple[JsonObj, JsonObj | None]]:
        """The Workloads the entry selects, each with its owning Job/JobSet/RayJob when that was found (the
        namespace's Workloads listed through ``lookup`` when given: one list per read)."""
        wanted = dict(preemptible.selector.match_labels)
        owners = await self._owner_uids(preemptible.namespace, wanted)
        matched = []
        listed = (await lookup.workloads(self, preemptible.namespace) if lookup is not None
                  else await self._list_workloads(preemptible.namespace))
        for wl in listed:
            ref = _controller_owner(wl)
            owner = owners.get(str(ref.get("uid"))) if ref is not None else None
            # A Workload owned by something that is not a training kind (a serving LeaderWorkerSet, a Pod) is
            # never training, whatever labels Kueue copied onto it (the codelab's LWS share the queue label).
            trainable = ref is None or any(ref.get("kind") == k.kind for k in self.owner_kinds)
            by_label = trainable and bool(wanted) and _labels_match(
                (wl.get("metadata") or {}).get("labels") or {}, wanted
            )
            if owner is not None or by_label:
                matched.append((wl, owner))
        return matched

    async def _priority(self, wl: JsonObj) -> int:
        spec, meta = wl.get("spec") or {}, wl.get("metadata") or {}
        if spec.get("priority") is not None:
            return int(spec["priority"])
        name: str | None = None
        ref = spec.get("priorityClassRef")
        if isinstance(ref, dict) and ref.get("kind", "WorkloadPriorityClass") == "WorkloadPriorityClass":
            name = ref.get("name")
        elif spec.get("priorityClassName") and spec.get("priorityClassSource", "").endswith("workloadpriorityclass"):
            name = spec["priorityClassName"]
        else:
            name = (meta.get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if not name:
            return 0
        try:
            version = await self.version()
            wpc = await call(
                self._custom.get_cluster_custom_object(KUEUE_GROUP, version, "workloadpriorityclasses", name)
            )
        except NotFound:
            return 0
        return int(wpc.get("value") or 0)

    async def _to_training(self, wl: JsonObj, resource: str, owner: str, job: JsonObj | None) -> TrainingWorkload:
        meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
        annotations = meta.get("annotations") or {}
        now = self.now()
        # The job's own annotation (its training loop or a sidecar writes it); the Workload's as a fallback.
        job_annotations = ((job or {}).get("metadata") or {}).get("annotations") or {}
        checkpoint = _parse_time(job_annotations.get(LAST_CHECKPOINT) or annotations.get(LAST_CHECKPOINT))
        since = None if checkpoint is None else max(0.0, now - checkpoint)
        admitted_at = admitted_since(wl)

        def declared(key: str) -> object:
            return job_annotations.get(key, annotations.get(key))

        if since is not None and admitted_at is not None and checkpoint is not None and admitted_at > checkpoint:
            # Restarted (resumed, or requeued by Kueue) after that checkpoint: it restored from it, so what a stop
            # loses now is at most what it did since its pods became ready again (``running_since``: not the
            # provisioning before), not since the checkpoint; less the restore it declares (``RESTORE_SECONDS``:
            # reloading computes nothing a stop could lose).
            started = running_since(wl) or admitted_at
            restore = _seconds(declared(RESTORE_SECONDS)) or 0.0
            since = min(since, max(0.0, now - started - restore))
        uid = meta.get("uid", "")
        memory = arbitration.learn_interval(self._checkpoints.get(uid), checkpoint)
        if memory is not None and uid:
            self._checkpoints[uid] = memory

        interval = _seconds(declared(INTERVAL_SECONDS))
        grace = grace_seconds(job) if job is not None else None
        evicting = evicting_reason(wl)
        return TrainingWorkload(
            namespace=meta["namespace"],
            name=meta["name"],
            priority=await self._priority(wl),
            chips=round(workload_chips(wl, resource)),
            active=bool(spec.get("active", True)),
            admitted=is_admitted(wl),
            uid=meta.get("uid", ""),
            deactivated_by_us=DEACTIVATED_BY in annotations,
            evicting=evicting is not None,
            evicted_reason=evicting or "",
            since_checkpoint_s=since,
            preempted_at=tuple(
                t for t in _parse_times(annotations.get(PREEMPTED_AT)) if now - t < PREEMPTION_MEMORY_S
            ),
            resumed_at=_parse_time(annotations.get(RESUMED_AT)),
            checkpoint_requested_at=_parse_time(job_annotations.get(CHECKPOINT_REQUESTED)),
            slices=inventory.workload_slices(wl, resource),
            # The job's pod template, else the copy Kueue keeps in the Workload's podSets.
            grace_s=grace if grace is not None else grace_seconds(wl),
            save_s=_seconds(declared(SAVE_SECONDS)),
            saves_on_termination=str(declared(ON_TERMINATION) or "").strip().lower() == "true",
            checkpoint_interval_s=interval if interval is not None and interval > 0 else (
                None if memory is None else memory.interval_s),
            honours_requests=str(declared(ON_REQUEST) or "").strip().lower() == "true",
        )

    async def quota(self, capacity: CapacitySpec) -> QuotaStatus:
        """The ClusterQueue's quota for the resource; with a cohort, what Kueue would lend it on top
        (``arbitration.kueue_borrowable``: the other members' unused lendable quota, capped by our
        ``borrowingLimit``; a ``borrowingLimit`` is never free capacity by itself)."""
        version = await self.version()
        cq: JsonObj = await call(
            self._custom.get_cluster_custom_object(KUEUE_GROUP, version, "clusterqueues", capacity.cluster_queue)
        )
        own = dataclasses.replace(queue_quota(cq, capacity.resource), name=capacity.cluster_queue)
        cohort = _cohort(cq)
        borrowable = 0.0
        others: list[QueueQuota] = []
        if cohort:
            listed = await call(self._custom.list_cluster_custom_object(KUEUE_GROUP, version, "clusterqueues"))
            others = [
                queue_quota(other, capacity.resource) for other in listed.get("items") or []
                if _cohort(other) == cohort and (other.get("metadata") or {}).get("name") != capacity.cluster_queue
            ]
            borrowable = arbitration.kueue_borrowable(own, others, in_cohort=True)
        # The members travel with the quota: the loop counts again what they lend with what serving asks for on
        # them (``arbitration.lent``), and learns the cohort its policies share a lock under.
        return QuotaStatus(capacity.cluster_queue, capacity.resource, own.nominal, own.reserved, borrowable,
                           cohort=cohort, members=(own, *others) if cohort else ())

    # --- writing ---------------------------------------------------------------------------------------------

    async def apply(self, policy: CompiledPolicy, decision: TrainingDecision) -> bool:
        """The loop's actuator call for a training decision; True when a write was made."""
        if decision.action is TrainingAction.DEACTIVATE:
            return await self.deactivate(
                policy.policy.spec, decision.workload, owner=policy.name, reason=decision.message
            )
        if decision.action is TrainingAction.REQUEST_CHECKPOINT:
            return await self.request_checkpoint(policy.policy.spec, decision.workload, owner=policy.name)
        return await self.reactivate(policy.policy.spec, decision.workload, owner=policy.name)

    async def _read_own(self, spec: Spec, workload: TrainingWorkload, owner: str) -> JsonObj:
        """Re-read the Workload and prove it is still one of the policy's: same UID, still matched."""
        if not workload.uid:
            raise UnresolvableWorkload(
                f"Workload {workload.key} has no UID; policy {owner} will not stop what it could not find again"
            )
        version = await self.version()
        try:
            wl: JsonObj = await call(
                self._custom.get_namespaced_custom_object(
                    KUEUE_GROUP, version, workload.namespace, "workloads", workload.name
                )
            )
        except NotFound:
            raise UnresolvableWorkload(f"Workload {workload.key} no longer exists") from None
        if (wl.get("metadata") or {}).get("uid") != workload.uid:
            raise UnresolvableWorkload(
                f"Workload {workload.key} was replaced (UID {wl['metadata'].get('uid')}, expected {workload.uid})"
            )
        for preemptible in spec.preemptible:
            if preemptible.namespace == workload.namespace and any(
                m["metadata"].get("uid") == workload.uid for m, _ in await self._matching(preemptible)
            ):
                return wl
        raise UnresolvableWorkload(
            f"Workload {workload.key} is not resolvable through a controller ownerReference to a Job/JobSet/RayJob "
            f"matching policy {owner}'s preemptible selector (nor labeled with it); it will not be touched"
        )

    async def deactivate(self, spec: Spec, workload: TrainingWorkload, *, owner: str, reason: str = "") -> bool:
        """Stop a training Workload (``spec.active: false``) and record that this policy did it."""

        async def attempt() -> bool:
            wl = await self._read_own(spec, workload, owner)
            annotations = (wl.get("metadata") or {}).get("annotations") or {}
            if not (wl.get("spec") or {}).get("active", True):
                return False  # already stopped (by us, or by someone else: then it is theirs to resume)
            now = self.now()
            stamp = _stamp(now)
            history = [t for t in _parse_times(annotations.get(PREEMPTED_AT)) if now - t < PREEMPTION_MEMORY_S]
            new_annotations = {
                DEACTIVATED_BY: owner, DEACTIVATED_REASON: reason[:1000], DEACTIVATED_AT: stamp,
                PREEMPTED_AT: ",".join(_stamp(t) for t in [*history, now]),
            }
            new_annotations[HELD_FOR] = json.dumps(await self._held_for(spec), sort_keys=True)
            # Remembered before the write: the sweep finds it even if its policy is deleted before a sweep ran.
            self._held_namespaces.add(workload.namespace)
            await self._patch(wl, {"annotations": new_annotations}, active=False)
            return True

        return await retrying(self.retry, attempt)

    async def request_checkpoint(self, spec: Spec, workload: TrainingWorkload, *, owner: str) -> bool:
        """Ask the Workload's job (its controller owner: a Job or JobSet) to checkpoint now: a merge patch of
        ``CHECKPOINT_REQUESTED`` on the job. Nothing is stopped."""

        async def attempt() -> bool:
            wl = await self._read_own(spec, workload, owner)
            ref = _controller_owner(wl)
            kind = next((k for k in self.owner_kinds if ref is not None and ref.get("kind") == k.kind), None)
            if ref is None or kind is None:
                raise UnresolvableWorkload(f"Workload {workload.key} has no Job/JobSet/RayJob owner to ask")
            prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
            path = f"{prefix}/namespaces/{workload.namespace}/{kind.plural}/{ref['name']}"
            body = {"metadata": {"annotations": {CHECKPOINT_REQUESTED: _stamp(self.now())}}}
            await request_json(self.api, "PATCH", path, body=body, content_type=MERGE_PATCH)
            return True

        return await retrying(self.retry, attempt)

    async def reactivate(self, spec: Spec, workload: TrainingWorkload, *, owner: str) -> bool:
        """Resume a Workload this policy stopped (and only such a one); clears our annotations."""

        async def attempt() -> bool:
            wl = await self._read_own(spec, workload, owner)
            annotations = (wl.get("metadata") or {}).get("annotations") or {}
            if DEACTIVATED_BY not in annotations:
                if (wl.get("spec") or {}).get("active", True):
                    return False  # already running and not marked: nothing to do
                raise UnresolvableWorkload(
                    f"Workload {workload.key} was not deactivated by this controller; policy {owner} will not "
                    "resume it"
                )
            cleared: dict[str, str | None] = dict.fromkeys((DEACTIVATED_BY, DEACTIVATED_REASON, DEACTIVATED_AT))
            await self._patch(wl, {"annotations": {**cleared, RESUMED_AT: _stamp(self.now())}}, active=True)
            return True

        return await retrying(self.retry, attempt)

    async def _held_for(self, spec: Spec) -> JsonObj:
        """The stable identities a deactivation is recorded under (the target's UID read now)."""
        assert spec.capacity is not None
        ref = spec.target.ref()
        try:
            target = await get_json(self.api, kinds.of(ref.kind).object_path(ref))
            uid = str((target.get("metadata") or {}).get("uid") or "")
        except NotFound:
            uid = ""
        return {"target": ref.key, "targetUID": uid, "clusterQueue": spec.capacity.cluster_queue,
                "resource": spec.capacity.resource}

    async def held(self, policies: list[CompiledPolicy]) -> list[Held]:
        """Every Workload this controller holds down (its mark, still inactive), and whether a current policy's
        ``preemptible`` selection still covers it. Listed cluster-wide when allowed, else in the namespaces of
        the policies and of every Workload seen held before (``controller/workloads`` RBAC is per namespace)."""
        try:
            version = await self.version()
        except NotFound:
            return []  # Kueue is not installed: nothing can be held
        covered: set[str] = set()
        self._targets = {t.ref().key: t.ref() for cp in policies for t in cp.policy.spec.targets()}
        for cp in policies:
            if cp.policy.spec.capacity is not None:
                covered.update(w.uid for w in await self.find(cp.policy.spec, owner=cp.name))
        items: list[JsonObj] | None = None
        if self.list_all:
            try:
                listed = await call(self._custom.list_cluster_custom_object(KUEUE_GROUP, version, "workloads"))
                items = listed.get("items") or []
            except (Forbidden, NotFound):
                self.list_all = False  # not granted after all: per namespace from now on
        if items is None:
            self._held_namespaces |= {p.namespace for cp in policies for p in cp.policy.spec.preemptible}
            namespaces = set(self._held_namespaces)
            items = []
            for ns in sorted(namespaces):
                try:
                    items.extend(await self._list_workloads(ns))
                except (Forbidden, NotFound):
                    continue  # a namespace we may no longer read
        now = self.now()
        out: list[Held] = []
        claims: dict[tuple[str, str], float] = {}
        for wl in items:
            meta, annotations = wl.get("metadata") or {}, (wl.get("metadata") or {}).get("annotations") or {}
            info = _held_info(annotations)
            if info is None:
                continue
            cq, res = str(info.get("clusterQueue") or ""), str(info.get("resource") or "")
            active, admitted = bool((wl.get("spec") or {}).get("active", True)), is_admitted(wl)
            if active and not admitted:
                claims[(cq, res)] = claims.get((cq, res), 0.0) + workload_chips(wl, res)  # resumed, not admitted
            if DEACTIVATED_BY not in annotations or active:
                continue
            self._held_namespaces.add(str(meta.get("namespace")))
            stopped = _parse_time(annotations.get(DEACTIVATED_AT))
            out.append(Held(
                workload=TrainingWorkload(
                    namespace=str(meta.get("namespace")), name=str(meta.get("name")), priority=await self._priority(wl),
                    chips=round(workload_chips(wl, res)), active=False, admitted=admitted,
                    uid=str(meta.get("uid") or ""), deactivated_by_us=True,
                ),
                cluster_queue=cq, resource=res, policy=str(annotations.get(DEACTIVATED_BY)),
                target=str(info.get("target") or ""), target_uid=str(info.get("targetUID") or ""),
                reason=str(annotations.get(DEACTIVATED_REASON) or ""),
                held_s=None if stopped is None else max(0.0, now - stopped),
                covered=str(meta.get("uid")) in covered,
            ))
        queued = [
            (q, str((q.get("metadata") or {}).get("namespace")), (q.get("spec") or {}).get("queueName"))
            for q in items if (q.get("spec") or {}).get("active", True) and not is_admitted(q)
        ]
        result = []
        for h in out:
            wl_queue = next((i.get("spec") or {}).get("queueName") for i in items
                            if (i.get("metadata") or {}).get("uid") == h.workload.uid)
            waiting = 0.0
            for q, q_ns, q_queue in queued:
                same_queue = q_ns == h.workload.namespace and q_queue == wl_queue
                if same_queue and await self._priority(q) > h.workload.priority:
                    waiting += workload_chips(q, h.resource)
            result.append(dataclasses.replace(
                h, claimed=claims.get((h.cluster_queue, h.resource), 0.0), waiting=waiting
            ))
        return result

    async def resume_held(self, held: Held, message: str) -> bool:
        """Resume a Workload no policy covers any more: same UID, still marked by us, still inactive."""

        async def attempt() -> bool:
            w = held.workload
            try:
                wl: JsonObj = await call(self._custom.get_namespaced_custom_object(
                    KUEUE_GROUP, await self.version(), w.namespace, "workloads", w.name))
            except NotFound:
                return False
            annotations = (wl.get("metadata") or {}).get("annotations") or {}
            if (wl.get("metadata") or {}).get("uid") != w.uid or DEACTIVATED_BY not in annotations:
                return False
            if (wl.get("spec") or {}).get("active", True):
                return False
            cleared: dict[str, str | None] = dict.fromkeys((DEACTIVATED_BY, DEACTIVATED_REASON, DEACTIVATED_AT))
            await self._patch(wl, {"annotations": {**cleared, RESUMED_AT: _stamp(self.now())}}, active=True)
            return True

        return await retrying(self.retry, attempt)

    async def _patch(self, wl: JsonObj, metadata: JsonObj, *, active: bool) -> None:
        meta = wl["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"], **metadata}, "spec": {"active": active}}
        await call(
            self._custom.patch_namespaced_custom_object(
                KUEUE_GROUP, await self.version(), meta["namespace"], "workloads", meta["name"], body,
                _content_type=MERGE_PATCH,
            )
        )
