"""The baselines every simulation scores policies against, in the same run.

* ``static-peak``: a constant count, enough replicas for the trace's peak all the time: the most
  replicas the oracle ever needs (``oracle.Oracle.peak``).
* ``hpa``: a Kubernetes HPA (``type: hpa``, default behavior) on the signal Google's guides recommend for
  latency: JetStream's prefill backlog (``jetstream_prefill_backlog_size``) on TPU, the request queue on GPU
  servers (``tgi_queue_size``, ``vllm:num_requests_waiting``), 10 per replica (``Pods``/``AverageValue``), as
  the guide's HPA manifest; it sees metrics through the cluster's ``hpa`` pipeline (scrape, custom-metrics
  adapter delay, 15 s sync). Training is preempted by Kueue alone (the arbiter of every run).
* ``kueue-only``: our first policy exactly, but without its ``capacity``/``preemptible`` blocks: the same
  scaling decisions, with training preempted by Kueue alone (reactively, when a serving pod cannot be
  admitted) instead of by our arbitration. The difference between the two rows is what the arbitration buys.
* ``oracle``: see ``autoscaler.sim.oracle``.

The HPA baseline is a real ``ScalingPolicy`` decided by ``autoscaler.core`` like any other policy.
"""

from __future__ import annotations

from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim.cluster import Cluster, PoolSpec

#: Google's latency signal per server, as a preset.
HPA_SIGNAL = {
    "jetstream": "jetstream.prefill_backlog",
    "tgi": "tgi.queue_size",
    "vllm": "vllm.waiting",
}
HPA_TARGET_PER_REPLICA = 10.0


def hpa_policy(cluster: Cluster, pool: PoolSpec, *, target: float = HPA_TARGET_PER_REPLICA) -> ScalingPolicy:
    """The ``hpa`` baseline for a pool, as the policy document an HPA user would write."""
    server = cluster.profile(pool).server
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "hpa"},
        "spec": {
            "target": {"kind": pool.target.kind.value, "name": pool.target.name, "namespace": pool.target.namespace},
            "minReplicas": pool.min_replicas,
            "maxReplicas": pool.max_replicas,
            "evaluationPeriodSeconds": 15,
            "signals": [{"name": "backlog", "preset": HPA_SIGNAL[server]}],
            "policy": {
                "type": "hpa",
                "metrics": [
                    {"signal": "backlog", "type": "Pods", "target": {"type": "AverageValue", "averageValue": target}}
                ],
            },
        },
    }
    return ScalingPolicy.model_validate(doc)


def kueue_only_policy(policy: ScalingPolicy) -> ScalingPolicy | None:
    """``policy`` with training left to Kueue alone, named ``kueue-only``; None when it arbitrates nothing."""
    if policy.spec.capacity is None:
        return None
    doc = policy.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["metadata"]["name"] = "kueue-only"
    del doc["spec"]["capacity"]
    doc["spec"]["preemptible"] = []
    return ScalingPolicy.model_validate(doc)
