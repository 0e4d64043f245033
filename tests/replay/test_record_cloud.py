"""``record`` of a Cloud Monitoring signal, replayed, gives the core what ``run`` gave it.

The real google-cloud-monitoring async client talks to the in-process gRPC ``MetricService`` of
tests/sources/test_cloud_monitoring.py. ``run`` is the Cloud Monitoring source reading now (its clock at ``NOW``);
``record`` reads the same series over the last five minutes with the same filter and aligner
(``CloudMonitoringSource.history``) and writes each pod's samples at their own times; replay, at ``NOW``, must see
the same per-pod samples, judge them by the same ages and decide alike.

Cases: Managed Prometheus series of a queue, sampled every 60 s at different phases per pod (one pod's newest
sample 70 s old: fresh; in the next case 130 s old: stale, so 1 of 2 pods reports and the decision holds), a pod of
another Deployment in the same namespace (not the target's: neither path may count it), token counters aligned
with ``ALIGN_RATE`` (a pod's two series add up), and a latency histogram's distributions (``ALIGN_DELTA``: the
quantile over both pods' summed buckets).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcAsyncIOTransport

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import Observation, PolicyState, ReplicaStatus, ScaleDecision
from autoscaler.core.sourcespec import CloudMonitoringSourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine as replay_engine
from autoscaler.replay.traces import load
from autoscaler.sources.cloud_monitoring import CloudMonitoringSource
from autoscaler.sources.command import Planned, record
from autoscaler.sources.pool import plan
from tests.sources.test_cloud_monitoring import KV, KV_COPIES, NOW, FakeMetricService, fake, series

__all__ = ["fake"]  # the fixture, used by name

NS = "llm"
A, B = "srv-6b7c8d9f4-aaaaa", "srv-6b7c8d9f4-bbbbb"
OTHER = "other-5f6d7c8b9-zzzzz"
WAITING = "prometheus.googleapis.com/vllm:num_requests_waiting/gauge"
TOKENS = "prometheus.googleapis.com/vllm:generation_tokens_total/counter"
TTFT = "prometheus.googleapis.com/vllm:time_to_first_token_seconds/histogram"


def policy(signal: dict[str, Any], value: float) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "cm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "srv", "namespace": NS},
            "minReplicas": 1,
            "maxReplicas": 16,
            "evaluationPeriodSeconds": 15,
            "source": {"type": "cloud-monitoring", "project": "my-project", "cluster": "prod-1"},
            "signals": [{"name": "sig", **signal}],
            "policy": {
                "type": "hpa",
                "metrics": [{"signal": "sig", "type": "External", "target": {"type": "Value", "value": value}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
        },
    })


def gmp(metric_type: str, pod: str, points: list[tuple[float, float]]) -> Any:
    where = {"cluster": "prod-1", "namespace": NS, "job": "vllm", "instance": f"{pod}:8000"}
    return series(metric_type, where, points)


def with_distributions(one: Any, below: int) -> Any:
    """``one``'s points as what ALIGN_DELTA over 60 s returns for a histogram: 240 observations a minute, ``below``
    of them at or under 0.5 s, the rest under 1 s."""
    for point in one.points:
        point.value = monitoring_v3.TypedValue(distribution_value={
            "count": 240, "bucket_options": {"explicit_buckets": {"bounds": [0.5, 1.0]}},
            "bucket_counts": [below, 240 - below, 0],
        })
    return one


def every_minute(newest_age_s: float, value: float) -> list[tuple[float, float]]:
    """Samples every 60 s over the last ten minutes, the newest ``newest_age_s`` before ``NOW``."""
    return [(NOW - newest_age_s - 60 * k, value) for k in range(10, -1, -1)]


def client_factory(address: str) -> Any:
    def make(spec: CloudMonitoringSourceSpec) -> CloudMonitoringSource:
        # Made inside record's own event loop (it runs one per Cloud Monitoring signal).
        transport = MetricServiceGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(address))
        return CloudMonitoringSource(spec, client=monitoring_v3.MetricServiceAsyncClient(transport=transport),
                                     clock=lambda: NOW)
    return make


async def run_and_replay(p: ScalingPolicy, address: str, out: Path) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(value, state, current, desired, reason) as ``run`` saw it at ``NOW``, and as replay of ``record`` did."""
    cp = compile_policy(p)
    replicas = ReplicaStatus(spec=2, ready=2)  # outside a cluster: the pods are found by their name pattern
    source = client_factory(address)(p.spec.source)
    try:
        (req,) = plan(p).requests
        readings = await source.read([req], deadline_s=5)
    finally:
        await source.aclose()

    def seen(obs: Observation, now: float) -> tuple[Any, ...]:
        decisions, _ = decide(cp, obs, PolicyState(), now)
        (d,) = (d for d in decisions if isinstance(d, ScaleDecision))
        judged = cp.judge.judge_all(cp.judge.combine(obs.signals, obs.replicas, now), now)["sig"]
        value = None if judged.value is None else round(judged.value, 9)
        return value, judged.state, d.current, d.desired, d.reason.value

    ran = seen(Observation(p.spec.target.ref(), replicas, {"sig": readings[req.key]}), NOW)
    lines = await asyncio.to_thread(
        record, [p], [Planned(plan(p), None)], start=NOW - 300, end=NOW, step=15.0, out=out,
        cloud_monitoring=client_factory(address),
    )
    assert any(line.startswith("sig: ") and "Cloud Monitoring" in line for line in lines), lines
    steps = replay_engine.run(cp, load([out]), replay_engine.Options(initial_replicas=2)).steps
    last = steps[-1]
    assert last.time == NOW
    return ran, seen(Observation(p.spec.target.ref(), last.replicas, last.readings), NOW)


@pytest.mark.parametrize(
    ("metric_type", "signal", "b_age_s", "expected"),
    [
        # 3 + 5 against 5: 2 -> 4; the other Deployment's pod (20 waiting) is not the target's.
        pytest.param(WAITING, {"preset": "vllm.waiting"}, 70.0, (8.0, "ok", 2, 4, "ScaleUp"), id="queue"),
        # b's newest sample is 130 s old (maxAgeSeconds 120): 1 of 2 pods reports, unknown, hold.
        pytest.param(WAITING, {"preset": "vllm.waiting"}, 130.0, (None, "unknown", 2, 2, "MetricsUnknown"),
                     id="queue-stale-pod"),
        # Rates as ALIGN_RATE returns them; pod a's two series (two engines) add up: 3 + 3 + 5 = 11 vs 5 -> 5.
        pytest.param(TOKENS, {"preset": "vllm.generation_tokens", "rate": {"windowSeconds": 60}}, 70.0,
                     (11.0, "ok", 2, 5, "ScaleUp"), id="token-rates"),
        # Distributions (ALIGN_DELTA): the median of both pods' summed buckets, 0.5 + 0.5 x (240-200)/(480-200)
        # = 0.5714 s against 0.5: 2 -> 3 (the other Deployment's pod, all under 0.5 s, would pull it under 0.5).
        pytest.param(TTFT, {"preset": "vllm.ttft", "quantile": {"q": 0.5, "windowSeconds": 60}}, 70.0,
                     (0.571428571, "ok", 2, 3, "ScaleUp"), id="ttft-median"),
    ],
)
async def test_cloud_monitoring_recorded_and_replayed_decides_as_run(
    fake: tuple[FakeMetricService, str], tmp_path: Path, metric_type: str, signal: dict[str, Any],
    b_age_s: float, expected: tuple[Any, ...],
) -> None:
    service, address = fake
    # a's newest sample is at NOW, and its first in the range at NOW - 300: replay evaluates at NOW too.
    a = [gmp(metric_type, A, every_minute(0.0, 3.0))]
    if metric_type == TOKENS:
        a.append(gmp(metric_type, A, every_minute(0.0, 3.0)))
    found = [*a, gmp(metric_type, B, every_minute(b_age_s, 5.0)), gmp(metric_type, OTHER, every_minute(10.0, 20.0))]
    if metric_type == TTFT:
        found = [with_distributions(one, below) for one, below in zip(found, (200, 0, 240), strict=True)]
    service.by_type = {metric_type: found}
    p = policy(signal, 0.5 if metric_type == TTFT else 5.0)
    ran, replayed = await run_and_replay(p, address, tmp_path)
    value, state, *decision = expected
    assert (ran[0], ran[1].value, *ran[2:]) == (value, state, *decision)
    assert replayed == ran
    # record asked what run asks (the same filter and aligner), over the range.
    asked = [(r.filter, monitoring_v3.Aggregation.to_json(r.aggregation)) for r in service.requests]
    half = len(asked) // 2  # run's requests (one per metric type: both spellings), then record's
    live, ranged = service.requests[:half], service.requests[half:]
    assert sorted(asked[:half]) == sorted(asked[half:])
    assert [r.interval.end_time.timestamp() for r in live] == [NOW + 1] * half
    assert [r.interval.start_time.timestamp() for r in ranged] == [NOW - 300 - 600] * len(ranged)


async def test_a_gauges_copies_per_process_recorded_and_replayed_as_run(
    fake: tuple[FakeMetricService, str], tmp_path: Path
) -> None:
    """vLLM's KV gauge once per API-server process (``pid``): ``record`` reads each moment's largest copy per
    engine, as ``run`` does (the copies sampled together: replay's last step must be at ``NOW``)."""
    service, address = fake
    where = {"cluster": "prod-1", "namespace": NS, "job": "vllm", "instance": f"{A}:8000"}
    found = [series(KV, where, every_minute(0.0, value), engine=engine, pid=pid)
             for pid, engines in KV_COPIES.items() for engine, value in engines.items()]
    found.append(gmp(KV, B, every_minute(10.0, 0.65)))
    service.by_type = {KV: found}
    ran, replayed = await run_and_replay(policy({"preset": "vllm.kv_cache_usage"}, 0.5), address, tmp_path)
    # a: engines 0.9 and 0.4, averaged 0.65; b 0.65: 0.65 against 0.5, 2 -> 3. Every copy its own series: a read
    # 0.45, the target 0.55, within HPA's tolerance: held at 2.
    assert (ran[0], ran[1].value, *ran[2:]) == (0.65, "ok", 2, 3, "ScaleUp")
    assert replayed == ran
