"""A test-side stand-in for Kueue's controllers: every step is an explicit call from the test, never magic.

What each call does mirrors Kueue (``pkg/controller/core/workload_controller.go``, scheduler):

1. ``admit``: reserve quota for a Workload (``status.admission``, conditions ``QuotaReserved`` and ``Admitted``).
2. ``sync``: one reconcile pass: an admitted Workload with ``spec.active: false`` is evicted with reason
   ``Deactivated`` (``Requeued=False``); an evicted-for-deactivation Workload set active again gets
   ``Requeued=True`` reason ``Reactivated``; ClusterQueue usage is recomputed.
3. ``admit_pending``: the scheduler: admit active, pending Workloads of a ClusterQueue, highest priority first,
   while they fit in what Kueue finds available (``free``: the nominal quota, and in a cohort what the cohort
   lends within ``lendingLimit``/``borrowingLimit``).

The ClusterQueue's ``status.flavorsReservation``/``flavorsUsage`` always equal the sum over its admitted
Workloads, as Kueue's cache reports them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.kube.emulator import Emulator, JsonObj

V1BETA2 = "kueue.x-k8s.io/v1beta2"
_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4,
}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("6", "6000m", "1Gi") as a number (independent of the code under test)."""
    if isinstance(value, int | float):
        return float(value)
    match = re.fullmatch(r"\s*([0-9.]+)([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{round(value * 1000)}m"


def workload_usage(wl: JsonObj) -> dict[str, float]:
    usage: dict[str, float] = {}
    for pod_set in wl["spec"].get("podSets", []):
        for ctr in pod_set["template"]["spec"].get("containers", []):
            for res, qty in (ctr.get("resources", {}).get("requests") or {}).items():
                usage[res] = usage.get(res, 0.0) + quantity(qty) * int(pod_set.get("count", 1))
    return usage


def _condition(wl: JsonObj, type_: str, status: bool, reason: str, message: str = "") -> None:
    conditions = [c for c in wl.setdefault("status", {}).get("conditions", []) if c["type"] != type_]
    conditions.append({
        "type": type_, "status": "True" if status else "False", "reason": reason, "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    })
    wl["status"]["conditions"] = conditions


def _has_condition(wl: JsonObj, type_: str, reason: str | None = None) -> bool:
    return any(
        c["type"] == type_ and c["status"] == "True" and reason in (None, c.get("reason"))
        for c in (wl.get("status") or {}).get("conditions", [])
    )


class Kueue:
    """Drive Kueue's side of a scenario explicitly (see the module docstring)."""

    def __init__(self, kube: Emulator) -> None:
        self.kube = kube

    def workload(self, name: str, namespace: str = "llm") -> JsonObj:
        return self.kube.get(V1BETA2, "Workload", name, namespace)

    def _cluster_queue_of(self, wl: JsonObj) -> str:
        queue = wl["spec"].get("queueName", "")
        lq = self.kube.get(V1BETA2, "LocalQueue", queue, wl["metadata"]["namespace"])
        return str(lq["spec"]["clusterQueue"])

    def admit(self, name: str, namespace: str = "llm") -> None:
        """Admit one Workload into its LocalQueue's ClusterQueue (whether it fits is the test's business)."""
        wl = self.workload(name, namespace)
        cq_name = self._cluster_queue_of(wl)
        cq = self.kube.get(V1BETA2, "ClusterQueue", cq_name)
        flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]["name"]
        usage = workload_usage(wl)

        def change(obj: JsonObj) -> None:
            obj.setdefault("status", {})["admission"] = {
                "clusterQueue": cq_name,
                "podSetAssignments": [
                    {
                        "name": ps["name"],
                        "count": ps.get("count", 1),
                        "flavors": dict.fromkeys(usage, flavor),
                        "resourceUsage": {r: _fmt(v) for r, v in usage.items()},
                    }
                    for ps in obj["spec"]["podSets"]
                ],
            }
            _condition(obj, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}")
            _condition(obj, "Admitted", True, "Admitted", "The workload is admitted")
            _condition(obj, "Evicted", False, "Admitted")

        self.kube.modify(V1BETA2, "Workload", name, namespace, change)
        self.recompute(cq_name)

    def preempt(self, name: str, namespace: str = "llm", message: str = "") -> None:
        """Kueue starts evicting an admitted Workload for one of its own: ``Evicted`` (reason ``Preempted``) and
        ``Preempted`` (reason ``InClusterQueue``) become True while its quota stays reserved and ``Admitted`` True,
        until its pods are gone (then ``evict`` clears the admission, as kueue's job reconciler does after
        ``stopJob``: ``UnsetQuotaReservationWithCondition``)."""
        text = message or "Preempted to accommodate a workload due to prioritization in the ClusterQueue"

        def change(obj: JsonObj) -> None:
            _condition(obj, "Evicted", True, "Preempted", text)
            _condition(obj, "Preempted", True, "InClusterQueue", text)

        self.kube.modify(V1BETA2, "Workload", name, namespace, change)

    def evict(self, name: str, namespace: str = "llm", reason: str = "Preempted", message: str = "") -> None:
        wl = self.workload(name, namespace)
        cq_name = (wl.get("status") or {}).get("admission", {}).get("clusterQueue")

        def change(obj: JsonObj) -> None:
            obj.setdefault("status", {}).pop("admission", None)
            _condition(obj, "Evicted", True, reason, message or f"The workload is evicted: {reason}")
            _condition(obj, "QuotaReserved", False, "Pending", message)
            _condition(obj, "Admitted", False, "NoReservation", message)
            if reason == "Deactivated":
                _condition(obj, "Requeued", False, "Deactivated", "The workload is deactivated")

        self.kube.modify(V1BETA2, "Workload", name, namespace, change)
        if cq_name:
            self.recompute(cq_name)

    def sync(self) -> None:
        """One reconcile pass of Kueue's workload controller over every Workload."""
        for wl in self.kube.list(V1BETA2, "Workload"):
            meta = wl["metadata"]
            active = wl["spec"].get("active", True)
            admitted = bool((wl.get("status") or {}).get("admission"))
            if not active and admitted:
                self.evict(meta["name"], meta["namespace"], "Deactivated", "The workload is deactivated")
            elif active and _has_condition(wl, "Evicted", "Deactivated"):

                def change(obj: JsonObj) -> None:
                    _condition(obj, "Requeued", True, "Reactivated", "The workload was reactivated")
                    _condition(obj, "Evicted", False, "Reactivated")

                self.kube.modify(V1BETA2, "Workload", meta["name"], meta["namespace"], change)
        for cq in self.kube.list(V1BETA2, "ClusterQueue"):
            self.recompute(cq["metadata"]["name"])

    def admit_pending(self, cluster_queue: str = "cluster-queue") -> list[str]:
        """Admit pending active Workloads of ``cluster_queue``, highest priority first, while they fit."""
        admitted: list[str] = []
        pending = [
            wl for wl in self.kube.list(V1BETA2, "Workload")
            if wl["spec"].get("active", True) and not (wl.get("status") or {}).get("admission")
            and self._cluster_queue_of(wl) == cluster_queue
        ]
        pending.sort(key=lambda wl: (-int(wl["spec"].get("priority", 0)), wl["metadata"]["name"]))
        for wl in pending:
            if all(self.free(cluster_queue, res) >= need for res, need in workload_usage(wl).items()):
                self.admit(wl["metadata"]["name"], wl["metadata"]["namespace"])
                admitted.append(wl["metadata"]["name"])
        return admitted

    def reserved(self, cluster_queue: str, resource: str) -> float:
        total = 0.0
        for wl in self.kube.list(V1BETA2, "Workload"):
            if (wl.get("status") or {}).get("admission", {}).get("clusterQueue") == cluster_queue:
                total += workload_usage(wl).get(resource, 0.0)
        return total

    def _limits(self, cq: JsonObj, resource: str) -> tuple[float, float | None, float | None]:
        """Nominal quota, borrowingLimit and lendingLimit of ``resource`` (one flavor, as these tests use)."""
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for res in flavor["resources"]:
                    if res["name"] == resource:
                        borrow, lend = res.get("borrowingLimit"), res.get("lendingLimit")
                        return (quantity(res["nominalQuota"]), None if borrow is None else quantity(borrow),
                                None if lend is None else quantity(lend))
        return 0.0, None, None

    def free(self, cluster_queue: str, resource: str) -> float:
        """What Kueue's scheduler finds available to ``cluster_queue`` (``available`` in Kueue's
        ``pkg/cache/resource_node.go``, a cohort without a parent: written here from Kueue's rule, not from the
        code under test). Without a cohort: nominal − usage (a ``borrowingLimit`` lends nothing by itself). In a
        cohort: the room left in its unlent part (nominal − ``lendingLimit``) plus the cohort's pool (every
        member's lendable quota less every member's usage past its unlent part), the latter capped by its
        ``borrowingLimit`` over what it already holds in the pool."""
        cq = self.kube.get(V1BETA2, "ClusterQueue", cluster_queue)
        cohort = cq["spec"].get("cohortName") or cq["spec"].get("cohort")
        nominal, borrow, lend = self._limits(cq, resource)
        usage = self.reserved(cluster_queue, resource)
        if not cohort:
            return nominal - usage
        kept = 0.0 if lend is None else max(0.0, nominal - lend)
        pool = 0.0
        for member in self.kube.list(V1BETA2, "ClusterQueue"):
            if (member["spec"].get("cohortName") or member["spec"].get("cohort")) != cohort:
                continue
            m_nominal, _, m_lend = self._limits(member, resource)
            m_kept = 0.0 if m_lend is None else max(0.0, m_nominal - m_lend)
            pool += m_nominal - m_kept - max(0.0, self.reserved(member["metadata"]["name"], resource) - m_kept)
        if borrow is not None:
            pool = min(pool, nominal - kept - max(0.0, usage - kept) + borrow)
        return max(0.0, kept - usage) + pool

    def recompute(self, cluster_queue: str) -> None:
        """Write the ClusterQueue's reservation/usage status from its admitted Workloads."""
        cq = self.kube.get(V1BETA2, "ClusterQueue", cluster_queue)
        admitted = [
            wl for wl in self.kube.list(V1BETA2, "Workload")
            if (wl.get("status") or {}).get("admission", {}).get("clusterQueue") == cluster_queue
        ]
        flavors = []
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                resources = []
                for res in flavor["resources"]:
                    total = sum(workload_usage(wl).get(res["name"], 0.0) for wl in admitted)
                    resources.append({"name": res["name"], "total": _fmt(total), "borrowed": "0"})
                flavors.append({"name": flavor["name"], "resources": resources})
        status = {
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
            "admittedWorkloads": len(admitted),
            "reservingWorkloads": len(admitted),
        }
        if cq.get("status", {}) != {**cq.get("status", {}), **status}:
            self.kube.modify(V1BETA2, "ClusterQueue", cluster_queue, status=status)


# --- Kueue with time: the stand-in the real loop runs against ------------------------------------------------

GATE = "kueue.x-k8s.io/admission"


@dataclass(frozen=True)
class Timing:
    """How long each step of a real cluster takes, scaled down 100× so a test of the real loop runs in seconds.

    Unscaled (sources): Kueue's workload controller reacts to ``spec.active: false`` within its reconcile
    (sub-second), then the evicted pods get ``terminationGracePeriodSeconds`` (Kubernetes default 30 s; a
    training job uses it to save) before the quota is released → ``evict_s`` 0.3 s; the scheduler admits a
    pending Workload on its next cycle (sub-second to ~1 s: ``estimate``) → ``admit_s`` 0.01 s; a serving pod,
    once admitted, is scheduled, pulls its image and loads the model (1–4 min for a 9B model: ``estimate``,
    the bundled simulator clusters use 120–245 s) → ``ready_s`` 1.2 s.
    """

    evict_s: float = 0.3
    admit_s: float = 0.01
    ready_s: float = 1.2
    tick_s: float = 0.02
    #: An AdmissionCheck's delay between quota reservation and admission (GKE's slice controller configures a
    #: TPU slice: ``TAS_TIMING``); 0 where the ClusterQueue has none.
    provision_s: float = 0.0


#: The topology mode's delays (``tests.kube.tas.LiveTas``), the same scale: the slice controller configures a
#: slice on admission (GKE reconfigures the ICI/OCS links: seconds to a minute, ``estimate``) → 0.2 s; the vLLM
#: model load of a 397B model on a fresh slice (minutes, ``estimate``) → 1.5 s; the TAS scheduler's cycle → 0.02 s.
TAS_TIMING = Timing(admit_s=0.02, ready_s=1.5, provision_s=0.2)


class AdmissionLoop:
    """What every live Kueue stand-in does on its clock, in one place: the task that steps it every ``tick_s``,
    the workload controller's eviction of a Workload set inactive while it holds quota (``evict_s`` after it was
    first seen inactive, reason ``Deactivated``) and its ``Requeued`` when set active again, and the pending
    queue in the scheduler's order (active, not admitted, waited ``admit_s``; highest priority first, then
    oldest, then name). How a pending Workload is admitted is the mode's: by quota (``LiveKueue``) or by
    topology (``tests.kube.tas.LiveTas``)."""

    def __init__(self, kube: Emulator, timing: Timing, namespace: str | None = None) -> None:
        self.kube, self.timing, self.scope = kube, timing, namespace
        #: By ``namespace/name``: when a Workload was first seen inactive, and pending.
        self._inactive_since: dict[str, float] = {}
        self._pending_since: dict[str, float] = {}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.step(loop.time())
            await asyncio.sleep(self.timing.tick_s)

    def step(self, now: float) -> None:
        raise NotImplementedError

    def evict_deactivated(self, name: str, namespace: str) -> None:
        raise NotImplementedError

    def _deactivations(self, now: float) -> None:
        for wl in self.kube.list(V1BETA2, "Workload", self.scope):
            meta = wl["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if wl["spec"].get("active", True):
                self._inactive_since.pop(key, None)
                if _has_condition(wl, "Evicted", "Deactivated"):

                    def requeue(obj: JsonObj) -> None:
                        _condition(obj, "Requeued", True, "Reactivated", "The workload was reactivated")
                        _condition(obj, "Evicted", False, "Reactivated")

                    self.kube.modify(V1BETA2, "Workload", meta["name"], meta["namespace"], requeue)
                continue
            since = self._inactive_since.setdefault(key, now)
            if (wl.get("status") or {}).get("admission") and now - since >= self.timing.evict_s:
                self.evict_deactivated(meta["name"], meta["namespace"])

    def _pending(self, now: float) -> list[JsonObj]:
        waiting = []
        for wl in self.kube.list(V1BETA2, "Workload", self.scope):
            key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
            if not wl["spec"].get("active", True) or (wl.get("status") or {}).get("admission"):
                self._pending_since.pop(key, None)
                continue
            since = self._pending_since.setdefault(key, now)
            if now - since >= self.timing.admit_s:
                waiting.append((since, wl))
        waiting.sort(key=lambda p: (-int(p[1]["spec"].get("priority", 0)), p[0], p[1]["metadata"]["name"]))
        return [wl for _, wl in waiting]

    def _forget(self, name: str, namespace: str) -> None:
        self._inactive_since.pop(f"{namespace}/{name}", None)
        self._pending_since.pop(f"{namespace}/{name}", None)


@dataclass(frozen=True)
class ServingDeployment:
    """A Deployment whose pods Kueue manages (pod integration): one pod = one Workload of ``gpus`` chips."""

    name: str
    namespace: str = "llm"
    gpus: int = 2
    priority: int = 30
    #: The LocalQueue its pods name (``kueue.x-k8s.io/queue-name``): their ClusterQueue is that queue's.
    queue: str = "lq"


class LiveKueue(AdmissionLoop):
    """Kueue, the Deployment controller and the kubelet as one background task, each step after its delay.

    Every ``tick_s`` (on the event loop's clock):
    1. Deployment controller: a Deployment with fewer pods than ``spec.replicas`` gets new pods, each with
       Kueue's scheduling gate and a one-pod Workload (serving priority); extra pods are deleted gated ones
       first, then the newest, with their Workloads;
    2. workload controller: a Workload set inactive while admitted is evicted (reason ``Deactivated``)
       ``evict_s`` after we first saw it inactive; one set active again after that gets ``Requeued=True``;
    3. scheduler: pending active Workloads that have waited ``admit_s`` are admitted, highest priority first,
       then oldest, while they fit in their ClusterQueue (``Kueue.free``: in a cohort, with what it lends;
       BestEffortFIFO: one that does not fit does not block smaller ones).
       No preemption unless ``preempt_s`` is set: what our controller does not stop, stays (as with Kueue
       preemption off). With ``preempt_s`` (``withinClusterQueue: LowerPriority``): a pending serving Workload
       that does not fit even once every Workload already leaving is gone (set inactive, or evicted: those
       count first, as Kueue's candidate order puts evicted Workloads first) has Kueue preempt admitted
       lower-priority Workloads, lowest priority first, then by name, as few as make it fit; each carries
       ``Evicted``/``Preempted`` True with Kueue's message naming the preemptor (``preemption_message``) while
       it stays admitted, and is evicted (requeued) ``preempt_s`` later, its pods' grace period;
    4. kubelet: an admitted pod loses its gate and is Ready ``ready_s`` later; Deployment status follows.

    ``violations`` collects what must never happen, checked at every tick.
    """

    def __init__(
        self, kube: Emulator, kueue: Kueue, serving: list[ServingDeployment], *, timing: Timing | None = None,
        preempt_s: float | None = None, message: Callable[[JsonObj, str], str] | None = None,
    ) -> None:
        super().__init__(kube, timing or Timing())
        self.kueue, self.serving = kueue, serving
        self._admitted_at: dict[str, float] = {}
        self._counter = 0
        self.ticks = 0
        self.preempt_s = preempt_s
        self.message = message or preemption_message
        #: By ``namespace/name``: when Kueue preempted it (evicted ``preempt_s`` later), and every preemption.
        self._preempted_at: dict[str, float] = {}
        self.preempted: list[str] = []

    def step(self, now: float) -> None:
        self.ticks += 1
        for dep in self.serving:
            self._deployment(dep)
        self._deactivations(now)
        if self.preempt_s is not None:
            self._preemptions(now)
        self._admissions(now)
        for dep in self.serving:
            self._kubelet(dep, now)

    # 1. -------------------------------------------------------------------------------------------------
    def pods(self, dep: ServingDeployment) -> list[JsonObj]:
        return sorted(
            (p for p in self.kube.list("v1", "Pod", dep.namespace)
             if (p["metadata"].get("labels") or {}).get("app") == dep.name),
            key=lambda p: int(p["metadata"]["annotations"]["ordinal"]),
        )

    def _deployment(self, dep: ServingDeployment) -> None:
        want = int(self.kube.get("apps/v1", "Deployment", dep.name, dep.namespace)["spec"]["replicas"])
        pods = self.pods(dep)
        for _ in range(len(pods), want):
            self._counter += 1
            name = f"{dep.name}-{self._counter}"
            pod = self.kube.add({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": dep.namespace, "labels": {"app": dep.name},
                             "annotations": {"ordinal": str(self._counter)}},
                "spec": {"schedulingGates": [{"name": GATE}],
                         "containers": [{"name": "main", "image": "tgi",
                                         "resources": {"requests": {"nvidia.com/gpu": str(dep.gpus)}}}]},
                "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
            })
            self.kube.add({
                "apiVersion": V1BETA2, "kind": "Workload",
                "metadata": {"name": f"pod-{name}", "namespace": dep.namespace, "labels": {},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                                  "uid": pod["metadata"]["uid"], "controller": True}]},
                "spec": {"queueName": dep.queue, "priority": dep.priority, "podSets": [{
                    "name": "main", "count": 1,
                    "template": {"spec": {"containers": [{"name": "main", "resources": {
                        "requests": {"nvidia.com/gpu": str(dep.gpus)}}}]}},
                }]},
            })
        if len(pods) > want:
            # The ReplicaSet controller deletes unscheduled (gated) pods first, then the newest.
            doomed = sorted(pods, key=lambda p: (not _gated(p), -int(p["metadata"]["annotations"]["ordinal"])))
            for pod in doomed[: len(pods) - want]:
                name = pod["metadata"]["name"]
                self.kube.remove("v1", "Pod", name, dep.namespace)
                self.kube.remove(V1BETA2, "Workload", f"pod-{name}", dep.namespace)
                self._admitted_at.pop(name, None)
            for cq in self.kube.list(V1BETA2, "ClusterQueue"):
                self.kueue.recompute(cq["metadata"]["name"])

    # 2. -------------------------------------------------------------------------------------------------
    def evict_deactivated(self, name: str, namespace: str) -> None:
        self.kueue.evict(name, namespace, "Deactivated", "The workload is deactivated")

    # 3. -------------------------------------------------------------------------------------------------
    def _admissions(self, now: float) -> None:
        for wl in self._pending(now):
            usage = workload_usage(wl)
            cq = self.kueue._cluster_queue_of(wl)
            if all(self.kueue.free(cq, res) >= need - 1e-9 for res, need in usage.items()):
                self.kueue.admit(wl["metadata"]["name"], wl["metadata"]["namespace"])

    def _preemptions(self, now: float) -> None:
        assert self.preempt_s is not None
        for key, since in list(self._preempted_at.items()):
            if now - since >= self.preempt_s:
                namespace, name = key.split("/", 1)
                text = next((c.get("message", "") for c in self.kueue.workload(name, namespace)["status"]["conditions"]
                             if c["type"] == "Preempted"), "")
                self.kueue.evict(name, namespace, "Preempted", text)
                del self._preempted_at[key]
        workloads = self.kube.list(V1BETA2, "Workload")
        promised: dict[str, float] = {}  # what is leaving, already counted for an earlier pending Workload
        for wl in self._pending(now):
            priority, usage = int(wl["spec"].get("priority", 0)), workload_usage(wl)
            cq = self.kueue._cluster_queue_of(wl)
            admitted = [w for w in workloads if (w.get("status") or {}).get("admission", {}).get("clusterQueue") == cq]
            leaving = [w for w in admitted if not w["spec"].get("active", True) or _has_condition(w, "Evicted")]
            room = {r: self.kueue.free(cq, r) + sum(workload_usage(w).get(r, 0.0) for w in leaving)
                    - promised.get(r, 0.0) for r in usage}
            if all(room[r] >= need - 1e-9 for r, need in usage.items()):
                for r, need in usage.items():  # fits, now or once what is leaving is gone: nothing to preempt
                    promised[r] = promised.get(r, 0.0) + need
                continue
            candidates = sorted(
                (w for w in admitted if w not in leaving and int(w["spec"].get("priority", 0)) < priority),
                key=lambda w: (int(w["spec"].get("priority", 0)), w["metadata"]["name"]))
            chosen = []
            for cand in candidates:
                if all(room[r] >= need - 1e-9 for r, need in usage.items()):
                    break
                chosen.append(cand)
                for r in usage:
                    room[r] += workload_usage(cand).get(r, 0.0)
            if not all(room[r] >= need - 1e-9 for r, need in usage.items()):
                continue
            for victim in chosen:
                meta = victim["metadata"]
                self.kueue.preempt(meta["name"], meta["namespace"], self.message(wl, cq))
                self._preempted_at[f"{meta['namespace']}/{meta['name']}"] = now
                self.preempted.append(meta["name"])
            return  # one preemptor per cycle, as Kueue's scheduler nominates one head per ClusterQueue

    # 4. -------------------------------------------------------------------------------------------------
    def _kubelet(self, dep: ServingDeployment, now: float) -> None:
        ready = 0
        pods = self.pods(dep)
        for pod in pods:
            name = pod["metadata"]["name"]
            wl = self.kube.get(V1BETA2, "Workload", f"pod-{name}", dep.namespace)
            if _gated(pod) and (wl.get("status") or {}).get("admission"):
                self._admitted_at[name] = now
                self.kube.modify("v1", "Pod", name, dep.namespace, lambda p: p["spec"].pop("schedulingGates", None))
                self.kube.modify("v1", "Pod", name, dep.namespace, status={"phase": "Running"})
            admitted = self._admitted_at.get(name)
            if admitted is not None and now - admitted >= self.timing.ready_s:
                if not _pod_ready(pod):
                    self.kube.modify("v1", "Pod", name, dep.namespace,
                                     status={"conditions": [{"type": "Ready", "status": "True"}]})
                ready += 1
        status = {"replicas": len(pods), "readyReplicas": ready}
        current = self.kube.get("apps/v1", "Deployment", dep.name, dep.namespace).get("status") or {}
        if {k: current.get(k) for k in status} != status:
            self.kube.modify("apps/v1", "Deployment", dep.name, dep.namespace, status=status)

    # what tests assert -------------------------------------------------------------------------------------
    def gated(self) -> int:
        """Serving pods waiting for admission right now, over every Deployment."""
        return sum(1 for dep in self.serving for pod in self.pods(dep) if _gated(pod))

    def serving_ready(self, dep: ServingDeployment) -> int:
        return sum(1 for pod in self.pods(dep) if _pod_ready(pod))


def preemption_message(preemptor: JsonObj, cluster_queue: str) -> str:
    """Kueue's text on a Workload it preempts within a ClusterQueue (v0.15 on, kueue
    ``pkg/scheduler/preemption/preemption.go``, ``preemptionMessage``): the preemptor's Workload UID and its
    job's UID (the ``kueue.x-k8s.io/job-uid`` label: for a plain pod, the Pod's UID)."""
    owner = _controller(preemptor)
    job = (preemptor["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") or owner.get("uid") or "UNKNOWN"
    return (f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, JobUID: {job}) due to "
            f"prioritization in the ClusterQueue; preemptor path: /{cluster_queue}; preemptee path: /{cluster_queue}")


def _controller(obj: JsonObj) -> JsonObj:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), {})


def _gated(pod: JsonObj) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _pod_ready(pod: JsonObj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", []))
