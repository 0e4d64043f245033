"""Policies for the actuator tests: the tutorial's TGI policy, varied by target kind and actuation mode."""

from __future__ import annotations

from typing import Any

from autoscaler.controller.kube import RetryPolicy
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.spec import ScalingPolicy

#: No waiting between retries: the tests count attempts, never time.
FAST_RETRY = RetryPolicy(attempts=4, base_s=0.0, max_wait_s=0.0)


def policy(
    *,
    name: str = "tgi-gemma",
    kind: str = "Deployment",
    target: str = "tgi-gemma-deployment",
    mode: str = "direct",
    hpa_name: str | None = None,
    match_labels: dict[str, str] | None = None,
    max_replicas: int = 3,
) -> CompiledPolicy:
    actuation: dict[str, Any] = {"mode": mode}
    if hpa_name is not None:
        actuation["hpaName"] = hpa_name
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": name},
        "spec": {
            "target": {"kind": kind, "name": target, "namespace": "llm"},
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "signals": [{"name": "queue", "preset": "tgi.queue_size"}],
            "policy": {"type": "queue", "work": ["queue"], "capacityPerReplica": 10},
            "capacity": {"clusterQueue": "cluster-queue", "resource": "nvidia.com/gpu", "perReplica": 2},
            "preemptible": [
                {"namespace": "llm", "selector": {"matchLabels": match_labels or {"app": "finetune-job"}}}
            ],
            "actuation": actuation,
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))
