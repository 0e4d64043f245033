"""Prometheus/GMP faults against fake HTTP servers at the wire: every fault is unknown with a reason."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.core.model import SignalState
from autoscaler.core.signals import judge
from autoscaler.core.sourcespec import GmpSourceSpec, PrometheusSourceSpec
from autoscaler.sources.circuit import Circuit
from autoscaler.sources.prometheus import GMP_URL, PrometheusSource
from tests.sources.helpers import request
from tests.sources.realprom import TextServer, free_port


def vector(*series: tuple[dict[str, str], str, float]) -> str:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": m, "value": [t, v]} for m, v, t in series],
            },
        }
    )


POD = {"namespace": "llm", "pod": "vllm-6b7c8d-aaaaa", "autoscaler_part": "value"}
POD_T = {**POD, "autoscaler_part": "time"}


@pytest.fixture
def server() -> Iterator[TextServer]:
    s = TextServer(content_type="application/json")
    yield s
    s.close()


def spec_for(url: str) -> PrometheusSourceSpec:
    return PrometheusSourceSpec(type="prometheus", url=url, timeout_seconds=1)


@pytest.mark.parametrize(
    ("body", "status", "delay_s", "reason"),
    [
        pytest.param(vector(), 200, 0.0, "missing: empty result", id="empty-result"),
        pytest.param(vector((POD, "NaN", 100.0), (POD_T, "99", 100.0)), 200, 0.0, "invalid: NaN", id="nan"),
        pytest.param(vector((POD, "+Inf", 100.0), (POD_T, "99", 100.0)), 200, 0.0, "invalid: infinite", id="inf"),
        pytest.param(
            json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}),
            400,
            0.0,
            "source error: HTTP 400 bad_data: parse error at char 4",
            id="api-error",
        ),
        pytest.param("<html>bad gateway</html>", 502, 0.0, "source error: HTTP 502", id="http-502"),
        pytest.param("{not json", 200, 0.0, "not a Prometheus API response", id="garbage"),
        # Nested deeper than Python's JSON decoder recurses: RecursionError escaped the source (robust3).
        pytest.param("[" * 100_000 + "]" * 100_000, 200, 0.0, "not a Prometheus API response", id="nested-deeply"),
        pytest.param(json.dumps({"status": "success"}), 200, 0.0, "without data", id="success-without-data"),
        pytest.param(vector((POD, "1", 100.0)), 200, 1.0, "within the 0.3s deadline", id="slow"),
    ],
)
async def test_faults_are_unknown_never_zero(
    server: TextServer, body: str, status: int, delay_s: float, reason: str
) -> None:
    server.body, server.status, server.delay_s = body, status, delay_s
    source = PrometheusSource(spec_for(server.base))
    req = request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"})
    try:
        reading = (await source.read([req], deadline_s=0.3))[req.key]
    finally:
        await source.aclose()
    judged = judge("waiting", reading, now=100.0, max_age_s=60)
    assert judged.state is SignalState.UNKNOWN
    assert judged.value is None
    assert reason in judged.reason


async def test_prometheus_down_retries_then_opens_the_circuit() -> None:
    now = [0.0]
    source = PrometheusSource(
        spec_for(f"http://127.0.0.1:{free_port()}"), circuit=Circuit(threshold=3, cooldown_s=30, clock=lambda: now[0])
    )
    req = request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"})
    try:
        errors = [(await source.read([req], deadline_s=1))[req.key].error or "" for _ in range(4)]
    finally:
        await source.aclose()
    assert all("cannot reach" in e for e in errors[:3])
    assert errors[3].startswith("circuit open after 3 consecutive failures")
    assert source.queries_sent == 9  # 3 reads x 3 attempts; none while open


async def test_values_and_sample_times_are_attributed(server: TextServer) -> None:
    other = {"namespace": "llm", "pod": "vllm-big-6b7c8d-aaaaa", "autoscaler_part": "value"}
    server.body = vector(
        (POD, "4", 200.0),
        (POD_T, "190.5", 200.0),
        (other, "100", 200.0),
        ({**other, "autoscaler_part": "time"}, "199", 200.0),
    )
    source = PrometheusSource(spec_for(server.base))
    req = request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"})
    try:
        reading = (await source.read([req], deadline_s=1))[req.key]
    finally:
        await source.aclose()
    assert (reading.value, reading.timestamp) == (4.0, 190.5)
    method, path, _, sent = server.seen[0]
    query = urllib.parse.parse_qs(sent)["query"][0]
    assert (method, path) == ("POST", "/api/v1/query")
    assert 'namespace=~"llm"' in query
    assert 'pod=~"vllm-[a-z0-9]{1,10}-[a-z0-9]{5}"' in query


async def test_gmp_sends_a_bearer_token_to_the_project_endpoint(server: TextServer) -> None:
    server.body = vector()
    calls: list[int] = []

    async def token() -> str:
        calls.append(1)
        return "ya29.test-token"

    spec = GmpSourceSpec(type="gmp", project="my-project", cluster="prod-1")
    base = GMP_URL.format(project="my-project", location="global").replace(
        "https://monitoring.googleapis.com", server.base
    )
    source = PrometheusSource(spec, base_url=base, token=token)
    req = request("Deployment/llm/vllm", spec, {"preset": "vllm.waiting"})
    try:
        reading = (await source.read([req], deadline_s=1))[req.key]
    finally:
        await source.aclose()
    assert reading.source == "gmp my-project"
    _, path, headers, sent = server.seen[0]
    assert path == "/v1/projects/my-project/location/global/prometheus/api/v1/query"
    assert headers["Authorization"] == "Bearer ya29.test-token"
    assert 'cluster="prod-1"' in urllib.parse.parse_qs(sent)["query"][0]
    assert calls == [1]


async def test_gmp_without_credentials_is_unknown_not_a_crash(server: TextServer) -> None:
    async def no_token() -> str:
        raise RuntimeError("Your default credentials were not found")

    spec = GmpSourceSpec(type="gmp", project="p")
    source = PrometheusSource(spec, base_url=server.base, token=no_token)
    req = request("Deployment/llm/vllm", spec, {"preset": "vllm.waiting"})
    try:
        reading = (await source.read([req], deadline_s=1))[req.key]
    finally:
        await source.aclose()
    assert "no credentials" in (reading.error or "")
    assert server.hits == 0


def _shapes() -> list[Any]:
    return [
        pytest.param({"resultType": "scalar", "result": [10.0, "3"]}, 3.0, id="scalar"),
        pytest.param({"resultType": "vector", "result": [{"metric": {}, "value": [10.0, "5"]}]}, 5.0, id="one-series"),
    ]


@pytest.mark.parametrize(("data", "expected"), _shapes())
async def test_raw_query_result_shapes(server: TextServer, data: dict[str, Any], expected: float) -> None:
    server.body = json.dumps({"status": "success", "data": data})
    source = PrometheusSource(spec_for(server.base))
    req = request("Deployment/llm/vllm", source.spec, {"query": "sum(x)"})
    try:
        reading = (await source.read([req], deadline_s=1))[req.key]
    finally:
        await source.aclose()
    assert (reading.value, reading.timestamp) == (expected, 10.0)


async def test_a_pod_far_behind_the_others_is_taken_as_gone(server: TextServer) -> None:
    gone = {"namespace": "llm", "pod": "vllm-6b7c8d-zzzzz", "autoscaler_part": "value"}
    server.body = vector(
        (POD, "4", 300.0),
        (POD_T, "295", 300.0),
        (gone, "50", 300.0),
        ({**gone, "autoscaler_part": "time"}, "200", 300.0),  # GMP keeps a deleted pod for the lookback
    )
    source = PrometheusSource(spec_for(server.base))
    req = request("Deployment/llm/vllm", source.spec, {"preset": "vllm.waiting"})
    try:
        reading = (await source.read([req], deadline_s=1))[req.key]
    finally:
        await source.aclose()
    assert (reading.value, reading.timestamp) == (4.0, 295.0)
    assert reading.per_replica == {"vllm-6b7c8d-aaaaa": 4.0}
