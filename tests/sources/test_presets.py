"""Presets: exactly the names the policy language knows, every spelling, and scoping that never mixes apps."""

from __future__ import annotations

import re

import pytest

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.sourcespec import PrometheusSourceSpec
from autoscaler.core.spec import KNOWN_PRESETS
from autoscaler.sources import presets
from autoscaler.sources.base import PodMatcher, pod_pattern
from autoscaler.sources.prometheus import batch_query, target_query
from tests.sources.helpers import request

PROM = PrometheusSourceSpec(type="prometheus", url="http://p:9090")


def test_presets_are_exactly_the_known_presets() -> None:
    assert sorted(presets.PRESETS) == sorted(KNOWN_PRESETS)


@pytest.mark.parametrize(
    ("preset", "names", "aggregate"),
    [
        pytest.param("vllm.waiting", {"vllm:num_requests_waiting", "vllm_num_requests_waiting"}, "sum", id="waiting"),
        pytest.param("vllm.running", {"vllm:num_requests_running", "vllm_num_requests_running"}, "sum", id="running"),
        pytest.param(
            "vllm.kv_cache_usage",
            {
                "vllm:kv_cache_usage_perc",
                "vllm_kv_cache_usage_perc",
                "vllm:gpu_cache_usage_perc",
                "vllm_gpu_cache_usage_perc",
            },
            "avg",
            id="kv-both-generations-both-spellings",
        ),
        pytest.param("jetstream.prefill_backlog", {"jetstream_prefill_backlog_size"}, "sum", id="backlog"),
        pytest.param("jetstream.slots_used", {"jetstream_slots_used_percentage"}, "avg", id="slots"),
        pytest.param("tgi.queue_size", {"tgi_queue_size"}, "sum", id="tgi"),
    ],
)
def test_names_and_default_aggregation(preset: str, names: set[str], aggregate: str) -> None:
    p = presets.get(preset)
    assert set(p.metrics) == names
    assert p.combine == aggregate
    # Every spelling as an exact-name selector (GMP matches metric names exactly, never by regex).
    promql = presets.selector(p.metrics, ['namespace="llm"'])
    assert "__name__" not in promql
    assert all(f'{n}{{namespace="llm"}}' in promql for n in names)


def test_unknown_preset_lists_the_known_ones() -> None:
    known = "known: jetstream.generation_tokens, jetstream.kv_cache_usage, jetstream.prefill_backlog"
    with pytest.raises(presets.PresetError, match=re.escape(known)):
        presets.get("vllm.wating")


def test_every_query_carries_namespace_and_cluster() -> None:
    reqs = [
        request("Deployment/llm/vllm", PROM, {"preset": "vllm.waiting", "labels": {"model_name": 'a"b'}}),
        request("Deployment/chat/vllm", PROM, {"preset": "vllm.waiting", "labels": {"model_name": 'a"b'}}),
    ]
    batch = batch_query(reqs, cluster="prod-1")
    assert 'cluster="prod-1"' in batch
    assert 'namespace=~"chat|llm"' in batch
    assert 'model_name="a\\"b"' in batch
    assert 'vllm:num_requests_waiting{cluster="prod-1", model_name="a\\"b", namespace=~"chat|llm"' in batch
    assert "timestamp(vllm_num_requests_waiting{" in batch
    assert "__name__" not in batch
    single = target_query(reqs[0], cluster="prod-1")
    assert single.startswith("sum(sum by (namespace, pod) (")
    assert 'namespace="llm"' in single
    assert 'cluster="prod-1"' in single


def test_ratio_of_two_metrics_divides_per_pod() -> None:
    req = request("LeaderWorkerSet/tpu/jet", PROM, {"preset": "tpu.memory_used_ratio"})
    q = target_query(req, cluster=None)
    # The device plugin is scraped in kube-system: the workload's namespace and pod are the exported_ labels.
    assert q.startswith("avg((sum by (exported_namespace, exported_pod) (")
    assert ") / (sum by (exported_namespace, exported_pod) (" in q
    assert 'exported_pod=~"jet-[0-9]+(-[0-9]+)?"' in q  # every host of the slice
    assert 'exported_namespace="tpu"' in q
    assert 'namespace="tpu"' not in q.replace("exported_namespace", "")


def test_bad_label_name_is_rejected() -> None:
    with pytest.raises(presets.PresetError, match="not a valid Prometheus label name"):
        presets.matchers({"bad-name": "x"}, namespace="llm", cluster=None)


DEPLOY = TargetRef(TargetKind.DEPLOYMENT, "vllm", "llm")
LWS = TargetRef(TargetKind.LEADER_WORKER_SET, "jet", "tpu")
STS = TargetRef(TargetKind.STATEFUL_SET, "tgi", "llm")


@pytest.mark.parametrize(
    ("target", "workers", "pod", "mine"),
    [
        pytest.param(DEPLOY, False, "vllm-6b7c8d9f4-x2x7q", True, id="deployment-pod"),
        pytest.param(DEPLOY, False, "vllm-big-6b7c8d9f4-x2x7q", False, id="longer-deployment-name"),
        pytest.param(DEPLOY, False, "vllm-x2x7q", False, id="bare-pod-not-from-a-replicaset"),
        pytest.param(LWS, False, "jet-3", True, id="lws-leader"),
        pytest.param(LWS, False, "jet-3-1", False, id="lws-worker-excluded"),
        pytest.param(LWS, True, "jet-3-1", True, id="lws-worker-for-per-host-preset"),
        pytest.param(LWS, True, "jet-big-3", False, id="other-lws"),
        pytest.param(STS, False, "tgi-0", True, id="statefulset-ordinal"),
        pytest.param(STS, False, "tgi-12", True, id="statefulset-ordinal-two-digits"),
        pytest.param(STS, False, "tgi-big-0", False, id="longer-statefulset-name"),
        pytest.param(STS, False, "tgi-6b7c8d9f4-x2x7q", False, id="deployment-pod-of-the-same-name"),
    ],
)
def test_pod_patterns(target: TargetRef, workers: bool, pod: str, mine: bool) -> None:
    assert bool(re.fullmatch(pod_pattern(target, workers=workers), pod)) is mine


@pytest.mark.parametrize(
    ("target", "workers", "pod", "mine"),
    [
        pytest.param(DEPLOY, False, "vllm-6b7c8d9f4-x2x7q", True, id="deployment-pod"),
        pytest.param(DEPLOY, False, "vllm-big-6b7c8d9f4-x2x7q", False, id="longer-deployment-name"),
        pytest.param(DEPLOY, False, "vllm-x2x7q", False, id="bare-pod-not-from-a-replicaset"),
        pytest.param(LWS, False, "jet-3", True, id="lws-leader"),
        pytest.param(LWS, False, "jet-3-1", False, id="lws-worker-excluded"),
        pytest.param(LWS, True, "jet-3-1", True, id="lws-worker-for-per-host-preset"),
        pytest.param(LWS, True, "jet-big-3", False, id="other-lws"),
        pytest.param(STS, False, "tgi-0", True, id="statefulset-ordinal"),
        pytest.param(STS, False, "tgi-12", True, id="statefulset-ordinal-two-digits"),
        pytest.param(STS, False, "tgi-big-0", False, id="longer-statefulset-name"),
        pytest.param(STS, False, "tgi-6b7c8d9f4-x2x7q", False, id="deployment-pod-of-the-same-name"),
    ],
)
def test_pod_matcher_agrees_with_the_patterns(target: TargetRef, workers: bool, pod: str, mine: bool) -> None:
    req = request(target.key, PROM, {"preset": "vllm.waiting"})
    matcher = PodMatcher([req], workers=workers)
    assert bool(matcher.owners(target.namespace, pod)) is mine
    assert bool(matcher.owners("elsewhere", pod)) is False


def _generated(name: str, pod_template_hash: str, random5: str = "x2x7q") -> str:
    """A Deployment pod's name as Kubernetes makes it: the base ``<Deployment>-<hash>-`` (its ReplicaSet's name and
    a dash) cut to 58 characters, then five random ones (the API server's SimpleNameGenerator)."""
    return f"{name}-{pod_template_hash}-"[:58] + random5


@pytest.mark.parametrize("length", [20, 46, 47, 50, 52, 54, 55, 56, 57, 58, 60, 63])
@pytest.mark.parametrize("pod_template_hash", ["7", "6b7c8d9f4", "6b7c8d9f4b"])
def test_a_long_deployments_pods_are_found_where_kubernetes_cut_their_names(
    length: int, pod_template_hash: str
) -> None:
    # From 47 characters on a Deployment's pods lose the tail of their hash (then its dash, then the end of the
    # Deployment's own name): the pattern (queries) and the matcher (attribution) still find them.
    name = ("vllm-" + "x" * 70)[:length]
    target = TargetRef(TargetKind.DEPLOYMENT, name, "llm")
    pod = _generated(name, pod_template_hash)
    matcher = PodMatcher([request(target.key, PROM, {"preset": "vllm.waiting"})], workers=False)
    assert re.fullmatch(pod_pattern(target), pod), pod
    assert matcher.owners("llm", pod), pod
    assert not matcher.owners("elsewhere", pod)
    if length <= 54:
        # Where the names still tell them apart, a Deployment whose name extends this one's keeps its pods.
        sibling = _generated(f"{name}-b", pod_template_hash)
        assert not re.fullmatch(pod_pattern(target), sibling), sibling
        assert not matcher.owners("llm", sibling), sibling
