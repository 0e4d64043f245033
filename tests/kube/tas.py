"""A test-side Kueue with topology-aware admission (TAS), as the TPU dynamic-slicing codelab runs it.

Kueue, the JobSet and LeaderWorkerSet controllers, GKE's slice controller (the AdmissionCheck ``ac``) and the
kubelet as one background task (``run``) or explicit steps (``step``), each after its delay, on the event loop's
clock. Every ``tick_s``:

1. LeaderWorkerSet controller: each LWS gets ``spec.replicas`` groups of ``size`` pods (group-index labels,
   Kueue's admission gate) and one Workload per group (the group's podSet: ``size`` pods with the template's
   slice annotation); extra groups go, highest index first, with their Workloads. Status follows. As Kueue's
   LWS integration names them: ``leaderworkerset-<lws>-<index>-<hash>`` (``group_workload``; nobody may parse
   the index out of it), the LWS as controller owner, the index in ``kueue.x-k8s.io/component-workload-index``
   (``index_annotation=False``: an older Kueue without it) and the Workload's name on the group's pods.
2. JobSet controller: each JobSet gets one Workload (one podSet per replicated Job: ``replicas × parallelism``
   pods; priority from its ``kueue.x-k8s.io/priority-class`` WorkloadPriorityClass).
3. Workload controller: a Workload set inactive while admitted is evicted ``evict_s`` after (the eviction
   grace: ``terminationGracePeriodSeconds``, which training uses to checkpoint); reactivated → ``Requeued``.
4. Scheduler (TAS): pending active Workloads that waited ``admit_s`` are tried highest priority first, then
   oldest: each slice of a podSet needs one free domain at the Topology level its shape names
   (``…-partition-2x2x2-id`` for ``2x2x2``), or, larger than a block, that many whole free blocks; a slice goes
   to the candidate in the block with the fewest free nodes (packing), then by name. This placement is written
   here, independently of ``core.topology``. Reserved: ``status.admission`` with a ``topologyAssignment`` per
   podSet (v1beta2 ``slices`` form, one domain per node at the hostname level), ``QuotaReserved``; the
   AdmissionCheck is ``Pending``.
5. Slice controller: ``provision_s`` after the reservation the check is ``Ready`` and the Workload ``Admitted``.
6. Kubelet: an admitted group's pods lose the gate and are Ready ``ready_s`` later.

No preemption by Kueue itself: every hand-off is the controller's. ``violations`` records what must never be:
a node assigned to two Workloads, a slice outside one domain of its level.
"""

from __future__ import annotations

import hashlib

from tests.kube.codelab import LEVELS, NAMESPACE, SLICE_TOPOLOGY_ANNOTATION
from tests.kube.emulator import Emulator, JsonObj
from tests.kube.kueue import GATE, TAS_TIMING, V1BETA2, AdmissionLoop, Timing, _condition, _has_condition, quantity

LWS = "leaderworkerset.x-k8s.io/v1"
JOBSET = "jobset.x-k8s.io/v1alpha2"
HOSTNAME = "kubernetes.io/hostname"
BLOCK_LEVEL = "cloud.google.com/gke-tpu-partition-4x4x4-id"
TPU = "google.com/tpu"


def _shape(text: str) -> tuple[int, int, int]:
    x, y, z = (int(p) for p in text.lower().split("x"))
    return x, y, z


class LiveTas(AdmissionLoop):
    """Kueue's topology mode (``AdmissionLoop`` with admission into partition domains), with the LWS, JobSet and
    slice controllers and the kubelet (module docstring)."""

    def __init__(self, kube: Emulator, timing: Timing = TAS_TIMING, namespace: str = NAMESPACE, *,
                 index_annotation: bool = True) -> None:
        super().__init__(kube, timing, namespace)
        self.namespace = namespace
        self.index_annotation = index_annotation
        self.violations: list[str] = []
        #: Workload names in the order they were evicted for deactivation (the tests read the order of stops).
        self.evicted: list[str] = []
        self._reserved_at: dict[str, float] = {}
        self._admitted_at: dict[str, float] = {}

    def step(self, now: float) -> None:
        self.create_workloads()
        self._deactivations(now)
        self._schedule(now)
        self._provision(now)
        for lws in self.kube.list(LWS, "LeaderWorkerSet", self.namespace):
            self._kubelet(lws, now)
        self._audit()

    def create_workloads(self) -> None:
        """Steps 1 and 2 only (the LWS and JobSet controllers): a test may then place them by hand (``reserve``)."""
        for lws in self.kube.list(LWS, "LeaderWorkerSet", self.namespace):
            self._lws(lws)
        for js in self.kube.list(JOBSET, "JobSet", self.namespace):
            self._jobset(js)

    # 1. ------------------------------------------------------------------------------------------------
    def group_pods(self, name: str) -> dict[int, list[JsonObj]]:
        groups: dict[int, list[JsonObj]] = {}
        for pod in self.kube.list("v1", "Pod", self.namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("leaderworkerset.sigs.k8s.io/name") == name:
                groups.setdefault(int(labels["leaderworkerset.sigs.k8s.io/group-index"]), []).append(pod)
        return groups

    def group_workload(self, lws: str, index: int) -> str:
        """The Workload of group ``index`` of LWS ``lws``, named as Kueue does (a hash of the owner's UID)."""
        uid = str(self.kube.get(LWS, "LeaderWorkerSet", lws, self.namespace)["metadata"].get("uid"))
        return f"leaderworkerset-{lws}-{index}-{hashlib.sha1(uid.encode()).hexdigest()[:5]}"

    def _lws(self, lws: JsonObj) -> None:
        name = lws["metadata"]["name"]
        want, size = int(lws["spec"]["replicas"]), int(lws["spec"]["leaderWorkerTemplate"]["size"])
        template = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        groups = self.group_pods(name)
        for index in range(want):
            if index in groups:
                continue
            wl_name = self.group_workload(name, index)
            for worker in range(size):
                self.kube.add({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{index}-{worker}" if worker else f"{name}-{index}",
                                 "namespace": self.namespace,
                                 "labels": {**(template["metadata"].get("labels") or {}),
                                            "leaderworkerset.sigs.k8s.io/name": name,
                                            "leaderworkerset.sigs.k8s.io/group-index": str(index),
                                            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
                                            "kueue.x-k8s.io/pod-group-name": wl_name,
                                            "kueue.x-k8s.io/prebuilt-workload-name": wl_name},
                                 "annotations": dict(template["metadata"].get("annotations") or {})},
                    "spec": {**template["spec"], "schedulingGates": [{"name": GATE}]},
                    "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
                })
            self.kube.add({
                "apiVersion": V1BETA2, "kind": "Workload",
                "metadata": {"name": wl_name, "namespace": self.namespace,
                             "annotations": {"kueue.x-k8s.io/component-workload-index": str(index)}
                             if self.index_annotation else {},
                             "ownerReferences": [{"apiVersion": LWS, "kind": "LeaderWorkerSet", "name": name,
                                                  "uid": lws["metadata"]["uid"], "controller": True}]},
                "spec": {"queueName": "lq", "priority": 0, "podSets": [
                    {"name": "main", "count": size, "template": template}]},
            })
        for index in sorted(groups, reverse=True):
            if index < want:
                break
            for pod in groups[index]:
                self.kube.remove("v1", "Pod", pod["metadata"]["name"], self.namespace)
            wl_name = self.group_workload(name, index)
            self._forget_workload(wl_name)
            self.kube.remove(V1BETA2, "Workload", wl_name, self.namespace)

    def _forget_workload(self, wl_name: str) -> None:
        self._forget(wl_name, self.namespace)
        for book in (self._reserved_at, self._admitted_at):
            book.pop(wl_name, None)

    # 2. ------------------------------------------------------------------------------------------------
    def _jobset(self, js: JsonObj) -> None:
        name = js["metadata"]["name"]
        wl_name = f"jobset-{name}"
        if self.kube.exists(V1BETA2, "Workload", wl_name, self.namespace):
            return
        labels = js["metadata"].get("labels") or {}
        priority = 0
        if labels.get("kueue.x-k8s.io/priority-class"):
            priority = int(self.kube.get(V1BETA2, "WorkloadPriorityClass", labels["kueue.x-k8s.io/priority-class"])
                           ["value"])
        pod_sets = [
            {"name": rj["name"], "count": int(rj["replicas"]) * int(rj["template"]["spec"]["parallelism"]),
             "template": rj["template"]["spec"]["template"]}
            for rj in js["spec"]["replicatedJobs"]
        ]
        self.kube.add({
            "apiVersion": V1BETA2, "kind": "Workload",
            "metadata": {"name": wl_name, "namespace": self.namespace,
                         "ownerReferences": [{"apiVersion": JOBSET, "kind": "JobSet", "name": name,
                                              "uid": js["metadata"]["uid"], "controller": True}]},
            "spec": {"queueName": labels.get("kueue.x-k8s.io/queue-name", "lq"), "priority": priority,
                     "podSets": pod_sets},
        })

    # 3. ------------------------------------------------------------------------------------------------
    def evict_deactivated(self, name: str, namespace: str) -> None:
        self.evict(name)

    def evict(self, name: str) -> None:
        def change(obj: JsonObj) -> None:
            obj.setdefault("status", {}).pop("admission", None)
            obj["status"].pop("admissionChecks", None)
            _condition(obj, "Evicted", True, "Deactivated", "The workload is deactivated")
            _condition(obj, "QuotaReserved", False, "Pending")
            _condition(obj, "Admitted", False, "NoReservation")
            _condition(obj, "Requeued", False, "Deactivated", "The workload is deactivated")

        self.kube.modify(V1BETA2, "Workload", name, self.namespace, change)
        self._reserved_at.pop(name, None)
        self._admitted_at.pop(name, None)
        self.evicted.append(name)

    # 4. ------------------------------------------------------------------------------------------------
    def nodes(self) -> list[JsonObj]:
        return sorted(self.kube.list("v1", "Node"), key=lambda n: n["metadata"]["name"])

    def used_nodes(self) -> dict[str, str]:
        """Node -> the Workload holding it (every reserved or admitted Workload's assignment)."""
        used: dict[str, str] = {}
        for wl in self.kube.list(V1BETA2, "Workload", self.namespace):
            for host in assigned_hosts(wl):
                if host in used:
                    self.violations.append(f"node {host} held by {used[host]} and {wl['metadata']['name']}")
                used[host] = wl["metadata"]["name"]
        return used

    def _schedule(self, now: float) -> None:
        for wl in self._pending(now):
            hosts = self.place(wl)
            if hosts is not None:
                self.reserve(wl["metadata"]["name"], hosts, now)

    def place(self, wl: JsonObj) -> list[list[str]] | None:
        """Hosts for each podSet of ``wl`` (slice by slice), or None when a slice does not fit now."""
        nodes = self.nodes()
        free = {n["metadata"]["name"] for n in nodes} - set(self.used_nodes())
        out: list[list[str]] = []
        for pod_set in wl["spec"]["podSets"]:
            template = pod_set["template"]
            topology = (template.get("metadata") or {}).get("annotations", {}).get(SLICE_TOPOLOGY_ANNOTATION)
            per_pod = sum(quantity((c.get("resources") or {}).get("requests", {}).get(TPU, 0))
                          for c in template["spec"]["containers"])
            if not topology or per_pod <= 0:
                return None
            sx, sy, sz = _shape(topology)
            hosts_per_slice = int(sx * sy * sz // per_pod)
            slices = int(pod_set["count"]) // hosts_per_slice
            chosen: list[str] = []
            for _ in range(slices):
                got = self._one_slice(nodes, free, topology, hosts_per_slice)
                if got is None:
                    return None
                free -= set(got)
                chosen.extend(got)
            out.append(chosen)
        return out

    def _one_slice(self, nodes: list[JsonObj], free: set[str], topology: str, hosts: int) -> list[str] | None:
        level = f"cloud.google.com/gke-tpu-partition-{topology}-id"
        by_domain: dict[str, list[str]] = {}
        by_block: dict[str, list[str]] = {}
        for n in nodes:
            labels = n["metadata"]["labels"]
            by_block.setdefault(labels[BLOCK_LEVEL], []).append(n["metadata"]["name"])
            if level in labels:
                by_domain.setdefault(labels[level], []).append(n["metadata"]["name"])
        free_in = {b: sum(1 for h in hs if h in free) for b, hs in by_block.items()}
        if level in LEVELS:
            candidates = [(free_in[self._block_of(nodes, hs[0])], d, hs) for d, hs in by_domain.items()
                          if all(h in free for h in hs)]
            if not candidates:
                return None
            return sorted(candidates)[0][2]
        # Larger than a block (4x4x8): whole free blocks.
        whole = [hs for _, hs in sorted(by_block.items()) if all(h in free for h in hs)]
        need = -(-hosts // len(next(iter(by_block.values()))))
        if len(whole) < need:
            return None
        return [h for hs in whole[:need] for h in hs]

    @staticmethod
    def _block_of(nodes: list[JsonObj], host: str) -> str:
        return str(next(n for n in nodes if n["metadata"]["name"] == host)["metadata"]["labels"][BLOCK_LEVEL])

    def reserve(self, name: str, hosts: list[list[str]], now: float) -> None:
        def change(obj: JsonObj) -> None:
            assignments = []
            for pod_set, names in zip(obj["spec"]["podSets"], hosts, strict=True):
                assignments.append({
                    "name": pod_set["name"], "count": pod_set["count"], "flavors": {TPU: "slice-rf"},
                    "topologyAssignment": {"levels": [HOSTNAME], "slices": [{
                        "domainCount": len(names),
                        "valuesPerLevel": [{"individual": {"prefix": "gke-tpu7-",
                                                           "roots": [n.removeprefix("gke-tpu7-") for n in names]}}],
                        "podCounts": {"universal": 1},
                    }]},
                })
            obj.setdefault("status", {})["admission"] = {"clusterQueue": "cq", "podSetAssignments": assignments}
            obj["status"]["admissionChecks"] = [{"name": "ac", "state": "Pending", "message": "provisioning"}]
            _condition(obj, "QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cq")
            _condition(obj, "Evicted", False, "QuotaReserved")

        self.kube.modify(V1BETA2, "Workload", name, self.namespace, change)
        self._reserved_at[name] = now

    # 5. ------------------------------------------------------------------------------------------------
    def _provision(self, now: float) -> None:
        for name, at in list(self._reserved_at.items()):
            if now - at < self.timing.provision_s:
                continue

            def change(obj: JsonObj) -> None:
                obj["status"]["admissionChecks"] = [{"name": "ac", "state": "Ready", "message": "slice ready"}]
                _condition(obj, "Admitted", True, "Admitted", "The workload is admitted")

            self.kube.modify(V1BETA2, "Workload", name, self.namespace, change)
            self._reserved_at.pop(name)
            self._admitted_at[name] = now

    # 6. ------------------------------------------------------------------------------------------------
    def _kubelet(self, lws: JsonObj, now: float) -> None:
        name = lws["metadata"]["name"]
        ready_groups = 0
        groups = self.group_pods(name)
        for index, pods in groups.items():
            at = self._admitted_at.get(self.group_workload(name, index))
            for pod in pods:
                pod_name = pod["metadata"]["name"]
                if at is not None and pod["spec"].get("schedulingGates"):
                    self.kube.modify("v1", "Pod", pod_name, self.namespace,
                                     lambda p: p["spec"].pop("schedulingGates", None))
                    self.kube.modify("v1", "Pod", pod_name, self.namespace, status={"phase": "Running"})
                ready = at is not None and now - at >= self.timing.ready_s
                if ready and not _ready(pod):
                    self.kube.modify("v1", "Pod", pod_name, self.namespace,
                                     status={"conditions": [{"type": "Ready", "status": "True"}]})
            if at is not None and now - at >= self.timing.ready_s:
                ready_groups += 1
        status = {"replicas": len(groups), "readyReplicas": ready_groups}
        current = lws.get("status") or {}
        if {k: current.get(k) for k in status} != status:
            self.kube.modify(LWS, "LeaderWorkerSet", name, self.namespace, status=status)

    # audit ---------------------------------------------------------------------------------------------
    def _audit(self) -> None:
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in self.kube.list("v1", "Node")}
        self.used_nodes()  # records double-held nodes
        for wl in self.kube.list(V1BETA2, "Workload", self.namespace):
            if not wl["metadata"]["name"].startswith("leaderworkerset-"):
                continue
            hosts = assigned_hosts(wl)
            topology = ((wl["spec"]["podSets"][0]["template"].get("metadata") or {}).get("annotations") or {}).get(
                SLICE_TOPOLOGY_ANNOTATION, "2x2x2")
            level = f"cloud.google.com/gke-tpu-partition-{topology}-id"
            domains = {nodes[h].get(level) for h in hosts if h in nodes}
            if hosts and len(domains) != 1:
                self.violations.append(f"{wl['metadata']['name']} is not one {topology} slice: {sorted(hosts)}")

    # what tests assert -----------------------------------------------------------------------------------
    def admitted(self, name: str) -> bool:
        wl = self.kube.get(V1BETA2, "Workload", name, self.namespace)
        return _has_condition(wl, "Admitted") and bool((wl.get("status") or {}).get("admission"))

    def ready_groups(self, lws: str) -> int:
        return int((self.kube.get(LWS, "LeaderWorkerSet", lws, self.namespace).get("status") or {})
                   .get("readyReplicas") or 0)


def assigned_hosts(wl: JsonObj) -> list[str]:
    hosts: list[str] = []
    for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for piece in (a.get("topologyAssignment") or {}).get("slices") or []:
            for values in piece.get("valuesPerLevel") or []:
                ind = values.get("individual") or {}
                hosts.extend(f"{ind.get('prefix', '')}{r}" for r in ind.get("roots") or [])
    return hosts


def _ready(pod: JsonObj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", []))

