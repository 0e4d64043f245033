"""The Prometheus source against a real Prometheus 2.42 scraping the session's fleet (see conftest)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from autoscaler.core.sourcespec import PrometheusSourceSpec
from autoscaler.sources.base import PodRef
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.conftest import CLUSTER, Fleet
from tests.sources.helpers import request

pytestmark = pytest.mark.prometheus


@pytest.fixture
async def source(fleet: Fleet) -> AsyncIterator[PrometheusSource]:
    src = PrometheusSource(PrometheusSourceSpec(type="prometheus", url=fleet.prometheus.url, cluster=CLUSTER))
    yield src
    await src.aclose()


# (pod key, metric, value, labels) set before reading; then the expected value for the target.
Setup = list[tuple[str, str, float, dict[str, str]]]
V1 = {"model_name": "m", "engine": "0"}
OLD = {"model_name": "m"}
JS = {"id": "0"}


@pytest.mark.parametrize(
    ("target", "signal", "setup", "expected"),
    [
        pytest.param(
            "Deployment/llm/vllm",
            {"preset": "vllm.waiting"},
            [
                ("vllm-a", "vllm:num_requests_waiting", 3, V1),
                ("vllm-b", "vllm:num_requests_waiting", 4, V1),
                ("vllm-other", "vllm:num_requests_waiting", 1000, V1),
                ("vllm-old", "vllm:num_requests_waiting", 50, OLD),
            ],
            7.0,
            id="vllm-v1-underscore-spelling-summed-other-cluster-and-app-excluded",
        ),
        pytest.param(
            "Deployment/llm/vllm-old",
            {"preset": "vllm.waiting"},
            [("vllm-old", "vllm:num_requests_waiting", 5, OLD), ("vllm-a", "vllm:num_requests_waiting", 9, V1)],
            5.0,
            id="older-vllm-colon-spelling",
        ),
        pytest.param(
            "Deployment/llm/vllm",
            {"preset": "vllm.kv_cache_usage"},
            [("vllm-a", "vllm:kv_cache_usage_perc", 0.25, V1), ("vllm-b", "vllm:kv_cache_usage_perc", 0.75, V1)],
            0.5,
            id="vllm-kv-cache-ratio-averaged",
        ),
        pytest.param(
            "Deployment/llm/vllm-old",
            {"preset": "vllm.kv_cache_usage"},
            [("vllm-old", "vllm:gpu_cache_usage_perc", 0.625, OLD)],
            0.625,
            id="older-vllm-gpu-cache-usage-name",
        ),
        pytest.param(
            "Deployment/llm/vllm",
            {"preset": "vllm.kv_cache_usage", "aggregate": "max"},
            [("vllm-a", "vllm:kv_cache_usage_perc", 0.25, V1), ("vllm-b", "vllm:kv_cache_usage_perc", 0.75, V1)],
            0.75,
            id="aggregate-override-max",
        ),
        pytest.param(
            "Deployment/tpu/jetstream",
            {"preset": "jetstream.prefill_backlog"},
            [
                ("js-a", "jetstream_prefill_backlog_size", 2, JS),
                ("js-b", "jetstream_prefill_backlog_size", 6, JS),
            ],
            8.0,
            id="jetstream-backlog-summed",
        ),
        pytest.param(
            "Deployment/tpu/jetstream",
            {"preset": "jetstream.slots_used"},
            [
                ("js-a", "jetstream_slots_used_percentage", 0.5, {"id": "0", "idx": "0"}),
                ("js-b", "jetstream_slots_used_percentage", 0.25, {"id": "0", "idx": "0"}),
            ],
            0.375,
            id="jetstream-slots-fraction-averaged",
        ),
        pytest.param(
            "LeaderWorkerSet/tpu/jet-lws",
            {"preset": "jetstream.prefill_backlog"},
            [
                ("lws-0", "jetstream_prefill_backlog_size", 2, JS),
                ("lws-1", "jetstream_prefill_backlog_size", 3, JS),
                ("lws-0-w1", "jetstream_prefill_backlog_size", 100, JS),
            ],
            5.0,
            id="lws-leaders-only",
        ),
        pytest.param(
            "Deployment/llm/tgi",
            {"preset": "tgi.queue_size"},
            [("tgi", "tgi_queue_size", 11, {})],
            11.0,
            id="tgi-queue",
        ),
        pytest.param(
            "Deployment/llm/tgi",
            {"metric": "tgi_queue_size"},
            [("tgi", "tgi_queue_size", 12, {})],
            12.0,
            id="raw-metric-name",
        ),
        pytest.param(
            "Deployment/llm/tgi",
            {"query": 'sum(tgi_queue_size{namespace="llm", cluster="test"}) * 2'},
            [("tgi", "tgi_queue_size", 13, {})],
            26.0,
            id="raw-query",
        ),
    ],
)
async def test_preset_values(
    fleet: Fleet, source: PrometheusSource, target: str, signal: dict[str, str], setup: Setup, expected: float
) -> None:
    fleet.apply(setup)
    req = request(target, source.spec, signal)

    readings = await source.read([req], deadline_s=5)

    reading = readings[req.key]
    assert reading.error is None
    assert reading.value == pytest.approx(expected)
    assert reading.source == f"prometheus {fleet.prometheus.url}"


async def test_sample_age_is_the_scrape_time(fleet: Fleet, source: PrometheusSource) -> None:
    fleet.set_and_wait("tgi", "tgi_queue_size", 21)
    req = request("Deployment/llm/tgi", source.spec, {"preset": "tgi.queue_size"})
    before = time.time()
    reading = (await source.read([req], deadline_s=5))[req.key]
    # The sample was scraped before the read (1 s interval), and recently: a real scrape time,
    # not the query's evaluation time (which would be >= before).
    assert reading.timestamp is not None
    assert before - 5.0 < reading.timestamp < before + 0.001


async def test_one_query_per_signal_for_all_targets(fleet: Fleet, source: PrometheusSource) -> None:
    fleet.apply(
        [
            ("vllm-a", "vllm:num_requests_waiting", 1, V1),
            ("vllm-b", "vllm:num_requests_waiting", 2, V1),
            ("vllm-old", "vllm:num_requests_waiting", 4, OLD),
            ("tgi", "tgi_queue_size", 8, {}),
        ]
    )
    reqs = [
        request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"}, name="waiting"),
        request("Deployment/llm/vllm-old", source.spec, {"preset": "vllm.waiting"}, name="waiting"),
        request("Deployment/llm/absent", source.spec, {"preset": "vllm.waiting"}, name="waiting"),
        request("Deployment/llm/tgi", source.spec, {"preset": "tgi.queue_size"}, name="queue"),
    ]

    readings = await source.read(reqs, deadline_s=5)

    assert source.queries_sent == 2
    assert {k: r.value for k, r in readings.items()} == {
        ("Deployment/llm/vllm", "waiting"): 3.0,
        ("Deployment/llm/vllm-old", "waiting"): 4.0,
        ("Deployment/llm/absent", "waiting"): None,
        ("Deployment/llm/tgi", "queue"): 8.0,
    }
    assert readings[("Deployment/llm/vllm", "waiting")].per_replica == {
        "vllm-6b7c8d-aaaaa": 1.0,
        "vllm-6b7c8d-bbbbb": 2.0,
    }
    # A target without series is missing (no value, no error), never zero.
    assert readings[("Deployment/llm/absent", "waiting")].error is None


async def test_pods_named_by_the_caller_win_over_the_name_pattern(fleet: Fleet, source: PrometheusSource) -> None:
    fleet.apply([("vllm-a", "vllm:num_requests_waiting", 5, V1), ("vllm-b", "vllm:num_requests_waiting", 6, V1)])
    req = request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"}, pods=(PodRef("vllm-6b7c8d-bbbbb"),))
    reading = (await source.read([req], deadline_s=5))[req.key]
    assert reading.value == 6.0


@pytest.mark.parametrize(
    ("signal", "error"),
    [
        pytest.param({"query": "sum(rate(x[5m]"}, "bad_data", id="syntax-error"),
        pytest.param({"query": 'up{cluster="test"}'}, "wrap it in sum", id="many-series-without-aggregate"),
        pytest.param({"query": "up[1m]"}, "not an instant vector", id="range-vector"),
    ],
)
async def test_query_errors_are_unknown_with_reason(
    fleet: Fleet, source: PrometheusSource, signal: dict[str, str], error: str
) -> None:
    req = request("Deployment/llm/tgi", source.spec, signal)
    reading = (await source.read([req], deadline_s=5))[req.key]
    assert reading.value is None
    assert reading.error is not None
    assert error in reading.error
    assert source.circuit.failures == 0  # a bad query is not the backend failing
