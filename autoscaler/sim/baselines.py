"""The baselines every simulation scores policies against, in the same run: what a careful operator would run.

* ``static-peak``: a constant count: the most replicas the oracle (at the SLO target) ever holds.
* ``hpa``: a Kubernetes HPA (``type: hpa``, default behavior) as the tutorials configure it: on JetStream the
  prefill backlog (``jetstream_prefill_backlog_size``) at ``AverageValue`` 10, the JetStream guide's manifest;
  on GPU servers the batch size (``tgi_batch_current_size``, ``vllm:num_requests_running``), which GKE's
  inference-autoscaling guidance recommends for latency targets, at ``HPA_BATCH_FRACTION`` of the replica's
  slots. It sees metrics through the cluster's ``hpa`` pipeline (scrape, custom-metrics adapter, 15 s sync).
* ``hpa-tuned``: the best HPA over a grid of metrics × targets, chosen **with hindsight on the trace itself**
  (``tuned_with_hindsight: true``): per metric of ``TUNED_METRICS``, bisection on the target over its range
  for the cheapest run that reaches the SLO attainment target (else the best attainment). No operator can
  tune this well before the traffic happens; it is the best an HPA could possibly do on this trace.
* ``keda``: KEDA's Prometheus scaler on the same metric and target as ``hpa``: an ``External`` metric
  (``AverageValue``: the query's sum over the replica count) that KEDA polls every 30 s and hands to the HPA
  it manages, through the cluster's ``keda`` pipeline (or ``KEDA_PIPELINE``).
* ``kueue-only``: our first policy exactly, without its ``capacity``/``preemptible`` blocks: the same scaling
  decisions, with training preempted by Kueue alone (reactively, when a serving pod cannot be admitted)
  instead of by our arbitration.
* ``oracle``: see ``autoscaler.sim.oracle``.

Every HPA-like baseline is a real ``ScalingPolicy`` decided by ``autoscaler.core`` like any other policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim.cluster import Cluster, PipelineSpec, PoolSpec

if TYPE_CHECKING:
    from autoscaler.sim.simulation import RunResult

#: The tutorials' HPA signal per server: (preset, target per replica or None for a fraction of the slots).
HPA_SIGNAL: dict[str, tuple[str, float | None]] = {
    "jetstream": ("jetstream.prefill_backlog", 10.0),
    "tgi": ("tgi.batch_size", None),
    "vllm": ("vllm.running", None),
}
#: Batch-size target as a fraction of the replica's slots (estimate: GKE's guidance sets the batch-size
#: threshold below the server's maximum batch, leaving headroom for the latency target; 0.6 × 48 ≈ 30).
HPA_BATCH_FRACTION = 0.6

#: The hindsight grid: per server, (preset, lowest target, highest target, step) for each metric.
TUNED_METRICS: dict[str, tuple[tuple[str, float, float, float], ...]] = {
    "jetstream": (("jetstream.prefill_backlog", 1.0, 64.0, 1.0), ("jetstream.slots_used", 0.05, 1.0, 0.01)),
    "tgi": (("tgi.batch_size", 1.0, 128.0, 1.0), ("tgi.queue_size", 1.0, 64.0, 1.0)),
    "vllm": (("vllm.running", 1.0, 256.0, 1.0), ("vllm.waiting", 1.0, 64.0, 1.0)),
}

#: KEDA's pipeline when the cluster file has none: PodMonitoring scrape 15 s, Managed Prometheus ingestion
#: (estimate: a few seconds, FACTS), the scaler's 30 s polling interval (KEDA's default) as the period.
KEDA_PIPELINE = PipelineSpec(scrape_interval_seconds=15.0, ingestion_delay_seconds=10.0, sync_period_seconds=30.0)


def _doc(name: str, pool: PoolSpec, preset: str, metric: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": name},
        "spec": {
            "target": {"kind": pool.target.kind.value, "name": pool.target.name, "namespace": pool.target.namespace},
            "minReplicas": pool.min_replicas,
            "maxReplicas": pool.max_replicas,
            "evaluationPeriodSeconds": 15,
            "signals": [{"name": "load", "preset": preset}],
            "policy": {"type": "hpa", "metrics": [metric]},
        },
    }


class HpaTarget(NamedTuple):
    """The metric an HPA baseline scales on, and its AverageValue."""

    preset: str
    target: float


def hpa_target(cluster: Cluster, pool: PoolSpec) -> HpaTarget:
    """The tutorials' preset and AverageValue for this pool's server."""
    prof = cluster.profile(pool)
    preset, target = HPA_SIGNAL[prof.server]
    return HpaTarget(preset, target if target is not None else float(max(1, round(HPA_BATCH_FRACTION * prof.slots))))


def hpa_policy(
    cluster: Cluster, pool: PoolSpec, *, preset: str | None = None, target: float | None = None, name: str = "hpa"
) -> ScalingPolicy:
    """An HPA on one per-pod metric (``Pods``/``AverageValue``), default: the tutorials' ``hpa`` baseline."""
    default = hpa_target(cluster, pool)
    metric = {"signal": "load", "type": "Pods",
              "target": {"type": "AverageValue", "averageValue": default.target if target is None else target}}
    return ScalingPolicy.model_validate(_doc(name, pool, preset or default.preset, metric))


def keda_policy(cluster: Cluster, pool: PoolSpec) -> ScalingPolicy:
    """KEDA's Prometheus scaler: an External AverageValue metric on the same query and target as ``hpa``."""
    tutorial = hpa_target(cluster, pool)
    metric = {"signal": "load", "type": "External",
              "target": {"type": "AverageValue", "averageValue": tutorial.target}}
    return ScalingPolicy.model_validate(_doc("keda", pool, tutorial.preset, metric))


class NamedPipeline(NamedTuple):
    """A metric pipeline and the name reports give it."""

    name: str
    spec: PipelineSpec


def keda_pipeline(cluster: Cluster) -> NamedPipeline:
    """The cluster's ``keda`` pipeline if it maps one, else ``KEDA_PIPELINE``."""
    name = cluster.spec.policy_pipelines.get("keda")
    if name is not None:
        return NamedPipeline(name, cluster.spec.metric_pipelines[name])
    return NamedPipeline("keda (built-in)", KEDA_PIPELINE)


class Trial(NamedTuple):
    """What ``tune_hpa``'s ``evaluate`` learns from simulating one policy."""

    attainment: float
    chip_s: float
    #: False when the run stopped early (past the miss budget): it fails.
    exact: bool


class Tuned(NamedTuple):
    """``tune_hpa``'s result: the policy chosen, and every candidate simulated."""

    policy: ScalingPolicy
    tried: list[TunedCandidate]


class TunedRun(NamedTuple):
    """``hpa-tuned``'s row: the chosen policy's run, and how it was chosen (the summary's ``hpa_tuned`` block)."""

    result: RunResult
    info: dict[str, Any]


@dataclass
class TunedCandidate:
    preset: str
    target: float
    attainment: float
    chip_s: float
    exact: bool


def tune_hpa(
    cluster: Cluster,
    pool: PoolSpec,
    *,
    attainment_target: float,
    evaluate: Callable[[ScalingPolicy, int | None], Trial],
    misses_allowed: int,
) -> Tuned:
    """``hpa-tuned``: per metric of the grid, bisection on the target (a larger target means fewer replicas
    and a lower attainment) for the largest target whose run reaches ``attainment_target``.

    ``evaluate(policy, stop_after_misses)`` simulates a policy and returns its ``Trial``;
    a run that passes the miss budget may stop early (it fails: ``exact`` False). Among every run simulated,
    the cheapest that reaches the target wins; if none does, the one with the best attainment.
    """
    server = cluster.profile(pool).server
    tried: list[TunedCandidate] = []
    policies: dict[tuple[str, float], ScalingPolicy] = {}

    def run(preset: str, target: float, stop: int | None) -> TunedCandidate:
        pol = hpa_policy(cluster, pool, preset=preset, target=target, name="hpa-tuned")
        trial = evaluate(pol, stop)
        cand = TunedCandidate(preset, target, trial.attainment, trial.chip_s, trial.exact)
        tried.append(cand)
        policies[(preset, target)] = pol
        return cand

    def passes(c: TunedCandidate) -> bool:
        return c.exact and c.attainment >= attainment_target

    for preset, lo_t, hi_t, step in TUNED_METRICS[server]:
        # Grid points are multiples of ``step``: bisection over their indices.
        lo_i, hi_i = 0, round((hi_t - lo_t) / step)
        lo = run(preset, lo_t, None)  # the most generous target runs to the end: the fallback if none passes
        if not passes(lo):
            continue
        hi = run(preset, hi_t, misses_allowed)
        if passes(hi):
            continue
        while hi_i - lo_i > 1:
            mid_i = (lo_i + hi_i) // 2
            if passes(run(preset, lo_t + mid_i * step, misses_allowed)):
                lo_i = mid_i
            else:
                hi_i = mid_i
    ok = [c for c in tried if passes(c)]
    if ok:
        best = min(ok, key=lambda c: (c.chip_s, -c.attainment))
    else:
        best = max((c for c in tried if c.exact), key=lambda c: (c.attainment, -c.chip_s))
    return Tuned(policies[(best.preset, best.target)], tried)


def kueue_only_policy(policy: ScalingPolicy) -> ScalingPolicy | None:
    """``policy`` with training left to Kueue alone, named ``kueue-only``; None when it arbitrates nothing."""
    if policy.spec.capacity is None:
        return None
    doc = policy.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["metadata"]["name"] = "kueue-only"
    del doc["spec"]["capacity"]
    doc["spec"]["preemptible"] = []
    return ScalingPolicy.model_validate(doc)


def grid_size(server: str) -> int:
    """How many targets the hindsight grid holds for a server (for the report)."""
    return sum(math.floor((hi - lo) / step) + 1 for _, lo, hi, step in TUNED_METRICS[server])
