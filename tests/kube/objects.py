"""Builders for the Kubernetes objects tests put into the emulator (shapes as the real APIs define them).

Each returns a plain dict ready for ``Emulator.add``. Defaults follow the GKE mixed training/inference
tutorial (namespace ``llm``, 2 GPUs per TGI replica, a 2-pod fine-tune Job, a 6-GPU ClusterQueue).
"""

from __future__ import annotations

from typing import Any

JsonObj = dict[str, Any]
GPU = "nvidia.com/gpu"
KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"


def _meta(name: str, namespace: str | None, labels: dict[str, str] | None = None, **extra: Any) -> JsonObj:
    meta: JsonObj = {"name": name, "labels": dict(labels or {})}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update({k: v for k, v in extra.items() if v is not None})
    return meta


def container(requests: dict[str, str] | None = None, name: str = "main") -> JsonObj:
    return {"name": name, "image": "example", "resources": {"requests": dict(requests or {})}}


def deployment(
    name: str = "tgi-gemma-deployment",
    namespace: str = "llm",
    *,
    replicas: int = 1,
    ready: int | None = None,
    gpus: int = 2,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> JsonObj:
    selector = {"app": "gemma-server"}
    ready = replicas if ready is None else ready
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, labels, annotations=annotations),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [container({GPU: str(gpus)})]},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready},
    }


def stateful_set(
    name: str = "tgi-gemma",
    namespace: str = "llm",
    *,
    replicas: int = 1,
    ready: int | None = None,
    gpus: int = 2,
) -> JsonObj:
    """A serving StatefulSet (pods ``<name>-<ordinal>``), e.g. a server keeping a per-replica cache volume."""
    selector = {"app": "gemma-server"}
    ready = replicas if ready is None else ready
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [container({GPU: str(gpus)})]},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready},
    }


def leader_worker_set(
    name: str = "jetstream",
    namespace: str = "llm",
    *,
    replicas: int = 1,
    ready: int | None = None,
    size: int = 4,
    chips_per_pod: int = 4,
    annotations: dict[str, str] | None = None,
) -> JsonObj:
    ready = replicas if ready is None else ready
    template = {"spec": {"containers": [container({"google.com/tpu": str(chips_per_pod)})]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, namespace, annotations=annotations),
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": template, "workerTemplate": template},
        },
        "status": {
            "replicas": replicas,
            "readyReplicas": ready,
            "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={name},leaderworkerset.sigs.k8s.io/worker-index=0",
        },
    }


def pod(
    name: str,
    namespace: str = "llm",
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    start_time: str = "2026-01-01T00:00:00Z",
    phase: str = "Running",
    deleting: bool = False,
    ip: str | None = None,
) -> JsonObj:
    meta = _meta(name, namespace, labels or {"app": "gemma-server"})
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container()]},
        "status": {
            "phase": phase,
            "startTime": start_time,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            **({"podIP": ip} if ip else {}),
        },
    }


def hpa(
    name: str,
    namespace: str = "llm",
    *,
    target_kind: str = "Deployment",
    target_name: str = "tgi-gemma-deployment",
    min_replicas: int = 1,
    max_replicas: int = 3,
) -> JsonObj:
    api_version = "apps/v1" if target_kind == "Deployment" else "leaderworkerset.x-k8s.io/v1"
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(name, namespace),
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": target_kind, "name": target_name},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [],
        },
    }


def job(
    name: str = "finetune-gemma-l4",
    namespace: str = "llm",
    *,
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    parallelism: int = 2,
    gpus: int = 2,
) -> JsonObj:
    """The tutorial's fine-tune Job: only the queue label on the Job, ``app: finetune-job`` on its pods."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace, {"kueue.x-k8s.io/queue-name": "lq", **(labels or {})}),
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": True,
            "template": {
                "metadata": {"labels": {"app": "finetune-job"} if pod_labels is None else pod_labels},
                # The tutorial's fine-tune pods get 60 s to save a checkpoint after SIGTERM.
                "spec": {"containers": [container({GPU: str(gpus)})], "restartPolicy": "OnFailure",
                         "terminationGracePeriodSeconds": 60},
            },
        },
    }


def owner_reference(owner: JsonObj) -> JsonObj:
    """The controller ownerReference Kueue's job framework puts on a Workload it creates for ``owner``."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload(
    name: str,
    namespace: str = "llm",
    *,
    owner: JsonObj | None = None,
    pods: int = 2,
    gpus_per_pod: int = 2,
    resource: str = GPU,
    priority: int | None = None,
    priority_class: str | None = None,
    active: bool | None = None,
    queue: str = "lq",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    api_version: str = KUEUE_V1BETA2,
) -> JsonObj:
    """A Workload with one podSet of ``pods`` pods × ``gpus_per_pod``; owned by ``owner`` when given."""
    meta = _meta(name, namespace, labels, annotations=annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    spec: JsonObj = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": pods,
                "template": {"spec": {"containers": [container({resource: str(gpus_per_pod)})]}},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        if api_version == KUEUE_V1BETA1:
            spec["priorityClassName"] = priority_class
            spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        else:
            spec["priorityClassRef"] = {
                "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class,
            }
    if active is not None:
        spec["active"] = active
    return {"apiVersion": api_version, "kind": "Workload", "metadata": meta, "spec": spec}


def workload_priority_class(name: str, value: int, api_version: str = KUEUE_V1BETA2) -> JsonObj:
    return {"apiVersion": api_version, "kind": "WorkloadPriorityClass", "metadata": _meta(name, None), "value": value}


def cluster_queue(
    name: str = "cluster-queue",
    *,
    resource: str = GPU,
    nominal: str = "6",
    borrowing_limit: str | None = None,
    flavor: str = "default-flavor",
    api_version: str = KUEUE_V1BETA2,
    cohort: str | None = None,
) -> JsonObj:
    quota: JsonObj = {"name": resource, "nominalQuota": nominal}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    spec: JsonObj = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {"coveredResources": [resource], "flavors": [{"name": flavor, "resources": [quota]}]}
        ],
    }
    if cohort is not None:
        spec["cohortName" if api_version == KUEUE_V1BETA2 else "cohort"] = cohort
    return {"apiVersion": api_version, "kind": "ClusterQueue", "metadata": _meta(name, None), "spec": spec}


def local_queue(name: str = "lq", namespace: str = "llm", cluster_queue_name: str = "cluster-queue") -> JsonObj:
    return {
        "apiVersion": KUEUE_V1BETA2,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace),
        "spec": {"clusterQueue": cluster_queue_name},
    }
