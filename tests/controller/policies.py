"""Policy texts the controller tests share (the tutorial's TGI policy, and variations)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TGI_POLICY = (REPO / "policies" / "tgi-finetune-6gpu.yaml").read_text()


def tgi_policy(
    *, name: str = "tgi-gemma", target: str = "tgi-gemma-deployment", source: str = "{type: pods, port: 8000}",
    period: float = 15, capacity_per_replica: float = 10, max_replicas: int = 3, capacity: bool = True,
    scale_down_window: float | None = None, min_run_seconds: float | None = None, selector: str = "finetune-job",
    cluster_queue: str = "cluster-queue",
) -> str:
    """The tutorial's policy shape with the parts tests vary (``capacity=False``: no training arbitration;
    ``scale_down_window``: the queue type's scale-down stabilization; ``min_run_seconds``: the capacity's)."""
    behavior = (
        "" if scale_down_window is None
        else f"    behavior: {{scaleDown: {{stabilizationWindowSeconds: {scale_down_window:g}}}}}\n"
    )
    min_run = "" if min_run_seconds is None else f", minRunSeconds: {min_run_seconds:g}"
    text = f"""\
apiVersion: autoscaler.dev/v1alpha1
kind: ScalingPolicy
metadata:
  name: {name}
spec:
  target: {{kind: Deployment, name: {target}, namespace: llm}}
  minReplicas: 1
  maxReplicas: {max_replicas}
  evaluationPeriodSeconds: {period}
  source: {source}
  signals:
    - name: queue
      preset: tgi.queue_size
  policy:
    type: queue
    work: [queue]
    capacityPerReplica: {capacity_per_replica}
{behavior}  capacity: {{clusterQueue: {cluster_queue}, resource: nvidia.com/gpu, perReplica: 2{min_run}}}
  preemptible:
    - namespace: llm
      selector: {{matchLabels: {{app: {selector}}}}}
"""
    return text if capacity else text.split("  capacity:", maxsplit=1)[0]
