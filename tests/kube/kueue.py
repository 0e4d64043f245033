"""A test-side stand-in for Kueue's controllers: every step is an explicit call from the test, never magic.

What each call does mirrors Kueue (``pkg/controller/core/workload_controller.go``, scheduler):

1. ``admit``: reserve quota for a Workload (``status.admission``, conditions ``QuotaReserved`` and ``Admitted``).
2. ``sync``: one reconcile pass: an admitted Workload with ``spec.active: false`` is evicted with reason
   ``Deactivated`` (``Requeued=False``); an evicted-for-deactivation Workload set active again gets
   ``Requeued=True`` reason ``Reactivated``; ClusterQueue usage is recomputed.
3. ``admit_pending``: the scheduler: admit active, pending Workloads of a ClusterQueue, highest priority first,
   while they fit in the nominal quota (+ borrowing limit).

The ClusterQueue's ``status.flavorsReservation``/``flavorsUsage`` always equal the sum over its admitted
Workloads, as Kueue's cache reports them.
"""

from __future__ import annotations

import re
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

    def free(self, cluster_queue: str, resource: str) -> float:
        cq = self.kube.get(V1BETA2, "ClusterQueue", cluster_queue)
        limit = 0.0
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for res in flavor["resources"]:
                    if res["name"] == resource:
                        limit += quantity(res["nominalQuota"]) + quantity(res.get("borrowingLimit", 0))
        return limit - self.reserved(cluster_queue, resource)

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
