"""The dynamic-slicing codelab's cluster (seed ``003_…``) as API objects, for the emulated API server.

Written here from the codelab's manifests (GoogleCloudPlatform/devrel-demos ``ai-ml/dynamic-slicing``:
``kueue-resources.yaml``, ``workload-priority-class.yaml``, ``kueue-jobset-simple-{sub,super}slicing.yaml``,
``kueue-lws-{prefill,decode}-model-streamer.yaml``), trimmed to what the control plane reads: names, labels,
annotations, queue and priority labels, slice topologies, pod counts and TPU requests. Container commands,
images, volumes and environment are left out (no kubelet runs them here).

The nodes: two node pools of 16 ``tpu7x-standard-4t`` VMs (4 chips each), one 4x4x4 block each, labelled as
the codelab's Topology ``slice-topology`` levels name them. GKE does not publish the values of the partition
labels; the ones here (``<block>-x0``, …) are made up, and only their nesting matters.
"""

from __future__ import annotations

import itertools
from typing import Any

import yaml

NAMESPACE = "llm-d-pd-disaggregation"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gke-tpu-partition-4x4x4-id",
    "cloud.google.com/gke-tpu-partition-2x4x4-id",
    "cloud.google.com/gke-tpu-partition-2x2x4-id",
    "cloud.google.com/gke-tpu-partition-2x2x2-id",
    "cloud.google.com/gke-tpu-partition-2x2x1-id",
    "kubernetes.io/hostname",
)

KUEUE_RESOURCES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: slice-topology}
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gke-tpu-partition-4x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x2-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x1-id
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: slice-rf}
spec:
  nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu7x}
  topologyName: slice-topology
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: ac}
spec: {controllerName: accelerator.gke.io/slice}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks: [{name: ac}]
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [google.com/tpu, cpu, memory]
    flavors:
    - name: slice-rf
      resources:
      - {name: google.com/tpu, nominalQuota: "999999"}
      - {name: cpu, nominalQuota: "999999"}
      - {name: memory, nominalQuota: "999999Pi"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: llm-d-pd-disaggregation}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low-priority-1000}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: medium-priority-2000}
value: 2000
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high-priority-3000}
value: 3000
"""


def _jobset(name: str, *, replicas: int, pods: int, topology: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"replicatedJobs": [{
            "name": "job-jax", "replicas": replicas,
            "template": {"spec": {"parallelism": pods, "completions": pods, "backoffLimit": 10, "template": {
                "metadata": {"annotations": {SLICE_TOPOLOGY_ANNOTATION: topology}},
                "spec": {"nodeSelector": {ACCELERATOR_LABEL: "tpu7x"}, "restartPolicy": "Never",
                         "containers": [{"name": "simple-container", "image": "python:3.12", "resources": {
                             "requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": 4}}}]},
            }}},
        }]},
    }


def subslicing_jobset() -> dict[str, Any]:
    """``kueue-jobset-simple-subslicing``: 6 Jobs of 2 pods, each Job one 2x2x2 sub-slice, low priority."""
    return _jobset("kueue-jobset-simple-subslicing", replicas=6, pods=2, topology="2x2x2",
                   labels={"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": "low-priority-1000"})


def superslicing_jobset() -> dict[str, Any]:
    """``kueue-jobset-simple-superslicing``: one Job of 32 pods on a 4x4x8 super-slice (both blocks)."""
    return _jobset("kueue-jobset-simple-superslicing", replicas=1, pods=32, topology="4x4x8",
                   labels={"kueue.x-k8s.io/queue-name": "lq"})


def vllm_lws(role: str, *, replicas: int = 1, topology: str = "2x2x2", name: str | None = None) -> dict[str, Any]:
    """``kueue-vllm-<role>-model-streamer``: groups of 2 hosts on one 2x2x2 slice, ``llm-d.ai/role: <role>``.
    ``topology``/``name``: a variant of another slice shape (not in the codelab; its own LWS, one VM of 4 chips
    per 2x2x1 of the slice)."""
    labels = {"llm-d.ai/guide": "pd-disaggregation", "llm-d.ai/model": "Qwen3.5-397B-A17B-FP8", "llm-d.ai/role": role,
              "inference.networking.k8s.io/engine-type": "vllm"}
    template = {
        "metadata": {"labels": labels, "annotations": {SLICE_TOPOLOGY_ANNOTATION: topology}},
        "spec": {"nodeSelector": {ACCELERATOR_LABEL: "tpu7x"}, "containers": [{
            "name": "vllm", "image": "vllm/vllm-tpu", "ports": [{"containerPort": 8000}],
            "resources": {"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}}}]},
    }
    name = name or f"kueue-vllm-{role}-model-streamer"
    x, y, z = (int(p) for p in topology.split("x"))
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "annotations": {EXCLUSIVE: "cloud.google.com/gke-tpu-slice"},
                     "labels": {**labels, "kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {
            "size": x * y * z // 4, "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": template, "workerTemplate": template}},
        "status": {"replicas": 0, "readyReplicas": 0,
                   "hpaPodSelector": f"{LWS_NAME}={name},leaderworkerset.sigs.k8s.io/worker-index=0"},
    }


def kueue_resources() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(KUEUE_RESOURCES) if doc]


def nodes(blocks: tuple[str, ...] = ("cube-a", "cube-b")) -> list[dict[str, Any]]:
    """16 VMs per 4x4x4 block, labelled with the partitions they belong to (each level halves the last)."""
    out = []
    for block in blocks:
        for x, y, z, w in itertools.product(range(2), repeat=4):
            ids = [f"{block}-x{x}", f"{block}-x{x}y{y}", f"{block}-x{x}y{y}z{z}", f"{block}-x{x}y{y}z{z}w{w}"]
            host = f"gke-tpu7-{block}-{x}{y}{z}{w}"
            labels = dict(zip(LEVELS, ["reservation-block-0", block, *ids, host], strict=True))
            labels.update({ACCELERATOR_LABEL: "tpu7x", TOPOLOGY_LABEL: "4x4x4", "google.com/tpu": "present"})
            out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host, "labels": labels},
                        "status": {"allocatable": {"google.com/tpu": "4"}}})
    return out


def router() -> dict[str, Any]:
    """The llm-d router (``09_deploy_llm_d_router.sh``: a Helm release in gateway mode; its pods carry
    ``llm-d.ai/igw-mode: llm-d-router-gateway``). Not under Kueue and not a slice: it routes to both pools."""
    labels = {"llm-d.ai/igw-mode": "llm-d-router-gateway", "app": "llm-d-router"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "pd-disaggregation-router", "namespace": NAMESPACE, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "epp", "image": "ghcr.io/llm-d/llm-d-inference-scheduler"}]}}},
        "status": {"replicas": 1, "readyReplicas": 1},
    }
