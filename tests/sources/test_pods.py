"""Direct pod scraping against local HTTP servers serving the exposition text real LLM servers emit."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from autoscaler.core.model import SignalState
from autoscaler.core.signals import judge
from autoscaler.core.sourcespec import PodsSourceSpec
from autoscaler.sources import pods as pods_module
from autoscaler.sources.base import PodRef, SignalRequest
from autoscaler.sources.pods import PodsSource, parse
from tests.sources.helpers import request
from tests.sources.realprom import TextServer, free_port

# What prometheus-client in vLLM V1 serves as classic text: HELP/TYPE, `_created` series, histograms,
# an info-style gauge, label values with escapes.
VLLM_V1 = r"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/model \"x\"\\v1"} {running}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="org/model \"x\"\\v1"} {waiting}
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="org/model \"x\"\\v1"} {kv}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="org/model \"x\"\\v1"} 3.0
vllm:num_preemptions_created{engine="0",model_name="org/model \"x\"\\v1"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.25
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9"} 1.0
"""

VLLM_OLD = """# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} {waiting}
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} {kv}
"""

# vLLM V1 when OpenMetrics was negotiated: names escaped to underscores, `# EOF` terminator.
VLLM_OPENMETRICS = """# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm_num_requests_waiting{engine="0",model_name="m"} {waiting}
# EOF
"""

JETSTREAM = """# HELP jetstream_prefill_backlog_size Size of prefill queue
# TYPE jetstream_prefill_backlog_size gauge
jetstream_prefill_backlog_size{id="js-1"} {backlog}
# HELP jetstream_slots_used_percentage The percentage of decode slots currently being used
# TYPE jetstream_slots_used_percentage gauge
jetstream_slots_used_percentage{id="js-1",idx="0"} {slots0}
jetstream_slots_used_percentage{id="js-1",idx="1"} {slots1}
# TYPE jetstream_time_to_first_token histogram
jetstream_time_to_first_token_bucket{id="js-1",le="0.5"} 1.0
jetstream_time_to_first_token_bucket{id="js-1",le="+Inf"} 2.0
jetstream_time_to_first_token_count{id="js-1"} 2.0
jetstream_time_to_first_token_sum{id="js-1"} 0.75
"""

# TGI (Rust metrics exporter): TYPE lines, no HELP lines.
TGI = """# TYPE tgi_queue_size gauge
tgi_queue_size {queue}
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.1"} 4
tgi_request_queue_duration_bucket{le="+Inf"} 5
tgi_request_queue_duration_sum 0.31
tgi_request_queue_duration_count 5
"""

TPU_HOST = """# TYPE memory_used gauge
memory_used{accelerator_id="0"} {used0}
memory_used{accelerator_id="1"} {used1}
# TYPE memory_total gauge
memory_total{accelerator_id="0"} 100
memory_total{accelerator_id="1"} 100
"""


def fill(template: str, **values: Any) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", str(value))
    return template


@pytest.fixture
def servers() -> Iterator[list[TextServer]]:
    made: list[TextServer] = []
    yield made
    for s in made:
        s.close()


@pytest.fixture
async def source() -> AsyncIterator[PodsSource]:
    src = PodsSource()
    yield src
    await src.aclose()


def serve(servers: list[TextServer], body: str, **kw: Any) -> TextServer:
    s = TextServer(body, **kw)
    servers.append(s)
    return s


PODS = PodsSourceSpec(type="pods")
OM = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@pytest.mark.parametrize(
    ("bodies", "signal", "expected"),
    [
        pytest.param(
            [fill(VLLM_V1, running=2, waiting=3, kv=0.5), fill(VLLM_V1, running=1, waiting=4, kv=0.25)],
            {"preset": "vllm.waiting"},
            7.0,
            id="vllm-v1-waiting-summed",
        ),
        pytest.param(
            [fill(VLLM_V1, running=2, waiting=3, kv=0.5), fill(VLLM_V1, running=1, waiting=4, kv=0.25)],
            {"preset": "vllm.kv_cache_usage"},
            0.375,
            id="vllm-v1-kv-averaged",
        ),
        pytest.param(
            [fill(VLLM_V1, running=2, waiting=3, kv=0.5)],
            {"preset": "vllm.running", "labels": {"model_name": 'org/model "x"\\v1'}},
            2.0,
            id="label-matcher-with-escaped-value",
        ),
        pytest.param(
            [fill(VLLM_OLD, waiting=6, kv=0.8)],
            {"preset": "vllm.kv_cache_usage"},
            0.8,
            id="older-vllm-gpu-cache-usage",
        ),
        pytest.param(
            [fill(VLLM_OLD, waiting=6, kv=0.8), fill(VLLM_V1, running=0, waiting=1, kv=0.1)],
            {"preset": "vllm.waiting"},
            7.0,
            id="old-and-new-vllm-mixed",
        ),
        pytest.param(
            [fill(JETSTREAM, backlog=5, slots0=0.5, slots1=1.0)],
            {"preset": "jetstream.slots_used"},
            0.75,
            id="jetstream-slots-averaged-over-idx",
        ),
        pytest.param(
            [fill(JETSTREAM, backlog=5, slots0=0.5, slots1=1.0), fill(JETSTREAM, backlog=2, slots0=0, slots1=0)],
            {"preset": "jetstream.prefill_backlog"},
            7.0,
            id="jetstream-backlog-summed",
        ),
        pytest.param([fill(TGI, queue=9)], {"preset": "tgi.queue_size"}, 9.0, id="tgi-without-help-lines"),
        pytest.param(
            [fill(TGI, queue=9)], {"metric": "tgi_request_queue_duration_count"}, 5.0, id="raw-metric-histogram-count"
        ),
        pytest.param(
            [fill(TPU_HOST, used0=50, used1=30), fill(TPU_HOST, used0=10, used1=10)],
            {"preset": "tpu.memory_used_ratio"},
            0.25,
            id="tpu-memory-ratio-per-host-averaged",
        ),
    ],
)
async def test_formats(
    servers: list[TextServer], source: PodsSource, bodies: list[str], signal: dict[str, Any], expected: float
) -> None:
    urls = tuple(serve(servers, b).url for b in bodies)
    pods = tuple(PodRef(f"pod-{i}", url) for i, url in enumerate(urls))
    req = request("Deployment/llm/vllm", PODS, signal, pods=pods)

    reading = (await source.read([req], deadline_s=2))[req.key]

    assert reading.error is None
    assert reading.value == pytest.approx(expected)
    assert reading.per_replica is not None
    assert set(reading.per_replica) == {p.name for p in pods}


async def test_openmetrics_answer_with_underscore_names(servers: list[TextServer], source: PodsSource) -> None:
    url = serve(servers, fill(VLLM_OPENMETRICS, waiting=4), content_type=OM).url
    req = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pod_urls=(url,))
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.value == 4.0


async def test_static_endpoints_and_one_fetch_per_url(servers: list[TextServer], source: PodsSource) -> None:
    a = serve(servers, fill(VLLM_V1, running=1, waiting=2, kv=0.5))
    b = serve(servers, fill(VLLM_V1, running=3, waiting=4, kv=0.7))
    spec = PodsSourceSpec(type="pods", endpoints=[a.url, b.url])
    reqs = [
        request("Deployment/llm/vllm", spec, {"preset": "vllm.waiting"}, name="waiting"),
        request("Deployment/llm/vllm", spec, {"preset": "vllm.running"}, name="running"),
        request("Deployment/llm/vllm", spec, {"preset": "vllm.kv_cache_usage"}, name="kv"),
    ]

    readings = await source.read(reqs, deadline_s=2)

    assert {k[1]: r.value for k, r in readings.items()} == {"waiting": 6.0, "running": 4.0, "kv": pytest.approx(0.6)}
    assert source.fetches == 2
    assert a.hits == b.hits == 1
    assert readings[("Deployment/llm/vllm", "waiting")].source == "pods (static endpoints) 2 endpoints"


async def test_lws_reads_leaders_and_workers_only_where_needed(servers: list[TextServer], source: PodsSource) -> None:
    leader = serve(servers, fill(JETSTREAM, backlog=3, slots0=0, slots1=0) + fill(TPU_HOST, used0=80, used1=80))
    worker = serve(servers, fill(TPU_HOST, used0=20, used1=20))
    pods = (PodRef("jet-0", leader.url), PodRef("jet-0-1", worker.url, leader=False))
    backlog = request("LeaderWorkerSet/tpu/jet", PODS, {"preset": "jetstream.prefill_backlog"}, name="b", pods=pods)
    memory = request("LeaderWorkerSet/tpu/jet", PODS, {"preset": "tpu.memory_used_ratio"}, name="m", pods=pods)

    readings = await source.read([backlog, memory], deadline_s=2)

    assert readings[backlog.key].value == 3.0
    assert readings[backlog.key].per_replica == {"jet-0": 3.0}
    assert readings[memory.key].value == pytest.approx(0.5)
    assert worker.hits == 1


def test_sample_timestamps_in_the_exposition_are_kept() -> None:
    parsed = parse("tgi_queue_size 3 1700000000500\n")
    assert parsed["tgi_queue_size"] == [({}, 3.0, 1700000000.5)]


@pytest.mark.parametrize(
    ("body", "status", "content_type", "reason"),
    [
        pytest.param("<html><body>oops</body></html>", 200, "text/html", "unparseable", id="html-page"),
        pytest.param("vllm:num_requests_waiting{engine=0 5\n", 200, "text/plain", "unparseable", id="broken-labels"),
        pytest.param("server exploded", 500, "text/plain", "HTTP 500", id="http-500"),
        pytest.param("not here", 404, "text/plain", "HTTP 404", id="http-404"),
        pytest.param("# TYPE x gauge\nx 1\n", 200, "text/plain", "", id="metric-absent-is-missing"),
    ],
)
async def test_bad_scrapes_are_unknown_with_a_reason(
    servers: list[TextServer], source: PodsSource, body: str, status: int, content_type: str, reason: str
) -> None:
    url = serve(servers, body, status=status, content_type=content_type).url
    req = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pod_urls=(url,))

    reading = (await source.read([req], deadline_s=2))[req.key]

    assert reading.value is None
    judged = judge("waiting", reading, now=0.0, max_age_s=60)
    assert judged.state is SignalState.UNKNOWN
    assert reason in (reading.error or "")
    assert judged.reason.startswith("source error" if reason else "missing: empty result")


async def test_one_failing_pod_makes_the_sum_unknown(servers: list[TextServer], source: PodsSource) -> None:
    ok = serve(servers, fill(VLLM_OLD, waiting=6, kv=0.8))
    bad = serve(servers, "boom", status=503)
    req = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pod_urls=(ok.url, bad.url))
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.value is None
    assert reading.error is not None
    assert reading.error.startswith("1/2 pods failed")
    assert bad.hits == 2  # a 503 is retried once within the deadline


async def test_nan_is_passed_on_and_judged_invalid(servers: list[TextServer], source: PodsSource) -> None:
    url = serve(servers, fill(VLLM_OLD, waiting="NaN", kv=0.1)).url
    req = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pod_urls=(url,))
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.value is not None
    assert math.isnan(reading.value)
    assert judge("w", reading, now=reading.timestamp or 0.0, max_age_s=60).reason == "invalid: NaN"


async def test_down_and_slow_pods(servers: list[TextServer], source: PodsSource) -> None:
    slow = serve(servers, fill(VLLM_OLD, waiting=1, kv=0.1))
    slow.delay_s = 1.0
    down = f"http://127.0.0.1:{free_port()}/metrics"
    r_slow = request("Deployment/llm/a", PODS, {"preset": "vllm.waiting"}, pod_urls=(slow.url,))
    r_down = request("Deployment/llm/b", PODS, {"preset": "vllm.waiting"}, pod_urls=(down,))

    readings = await source.read([r_slow, r_down], deadline_s=0.3)

    assert "deadline" in (readings[r_slow.key].error or "")
    assert "cannot reach" in (readings[r_down.key].error or "")


async def test_a_failing_pod_opens_its_circuit(servers: list[TextServer]) -> None:
    now = [0.0]
    source = PodsSource(circuit_threshold=2, cooldown_s=30, circuit_clock=lambda: now[0])
    bad = serve(servers, "garbage {", status=200)
    req = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pod_urls=(bad.url,))
    try:
        for _ in range(2):
            await source.read([req], deadline_s=1)
        hits = bad.hits
        blocked = (await source.read([req], deadline_s=1))[req.key]
        assert bad.hits == hits  # not asked while open
        assert "circuit open" in (blocked.error or "")
        now[0] = 31.0  # cooldown over: one probe goes out
        bad.body = fill(VLLM_OLD, waiting=2, kv=0.1)
        recovered = (await source.read([req], deadline_s=1))[req.key]
        assert recovered.value == 2.0
    finally:
        await source.aclose()


async def test_port_in_the_source_block_builds_urls_from_pod_ips(servers: list[TextServer], source: PodsSource) -> None:
    s = serve(servers, fill(TGI, queue=4))
    spec = PodsSourceSpec(type="pods", port=s.port, path="/stats")
    req = request("Deployment/llm/tgi", spec, {"preset": "tgi.queue_size"}, pods=(PodRef("tgi-0", ip="127.0.0.1"),))
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.value == 4.0
    assert s.seen[0][1] == "/stats"


async def test_a_pod_without_a_metrics_url_makes_the_signal_unknown(
    servers: list[TextServer], source: PodsSource
) -> None:
    s = serve(servers, fill(TGI, queue=4))
    pods = (PodRef("tgi-0", s.url), PodRef("tgi-1"))
    req = request("Deployment/llm/tgi", PODS, {"preset": "tgi.queue_size"}, pods=pods)
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.value is None
    assert (reading.error or "").startswith("1/2 pods have no metrics URL (tgi-1)")


async def test_circuits_of_endpoints_gone_for_long_are_forgotten(servers: list[TextServer]) -> None:
    now = [1000.0]
    source = PodsSource(clock=lambda: now[0])
    a = serve(servers, fill(TGI, queue=1))
    b = serve(servers, fill(TGI, queue=2))
    ra = request("Deployment/llm/a", PODS, {"preset": "tgi.queue_size"}, pod_urls=(a.url,))
    rb = request("Deployment/llm/b", PODS, {"preset": "tgi.queue_size"}, pod_urls=(b.url,))
    try:
        await source.read([ra, rb], deadline_s=2)
        now[0] += 601.0
        await source.read([ra], deadline_s=2)
        assert a.url in source._circuits
        assert b.url not in source._circuits
    finally:
        await source.aclose()


async def test_a_read_plan_is_kept_per_request_object_and_made_anew_for_another(
    servers: list[TextServer], source: PodsSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe round reads the same request objects every round: each one's plan (endpoints, names, label,
    combine rule) is worked out once. A new request for the same target and signal (its pods moved: the view
    was read again) is planned afresh, never answered from the plan of the request it replaced."""
    made: list[SignalRequest] = []
    real = pods_module._plan

    def counted(req: SignalRequest) -> Any:
        made.append(req)
        return real(req)

    monkeypatch.setattr(pods_module, "_plan", counted)
    old = serve(servers, fill(VLLM_OLD, waiting=2, kv=0.1))
    new = serve(servers, fill(VLLM_OLD, waiting=9, kv=0.1))
    first = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pods=(PodRef("p-1", old.url),))
    for _ in range(3):
        assert (await source.read([first], deadline_s=2))[first.key].value == 2.0
    assert made == [first]
    moved = request("Deployment/llm/vllm", PODS, {"preset": "vllm.waiting"}, pods=(PodRef("p-2", new.url),))
    assert moved.key == first.key
    reading = (await source.read([moved], deadline_s=2))[moved.key]
    assert reading.value == 9.0
    assert reading.per_replica == {"p-2": 9.0}
    assert made == [first, moved]
    # The plan of the request it replaced is not kept (a view read again every 1.5 periods would otherwise
    # leave one more plan per policy behind each time, grown into the collector's frozen set).
    assert [p.request for p in source._planned.values()] == [moved]


@pytest.mark.parametrize(
    ("body", "signal", "value", "stamp"),
    [
        # The sample's own time (ms) is the pod's time, not the scrape's.
        pytest.param("tgi_queue_size 3 1700000000500\n", {"preset": "tgi.queue_size"}, 3.0, 1700000000.5,
                     id="own-time"),
        # A label matcher the pod's one series does not meet: the pod serves no such series (missing).
        pytest.param('vllm:num_requests_waiting{model_name="other"} 4\n',
                     {"preset": "vllm.waiting", "labels": {"model_name": "m"}}, None, None,
                     id="matcher-excludes-the-only-series"),
        pytest.param('vllm:num_requests_waiting{model_name="m"} 4\n',
                     {"preset": "vllm.waiting", "labels": {"model_name": "m"}}, 4.0, "scrape",
                     id="matcher-keeps-the-only-series"),
        # One process's copy of a multiprocess gauge (prometheus-client's pid label) is the gauge.
        pytest.param('vllm:kv_cache_usage_perc{model_name="m",pid="7"} 0.6\n', {"preset": "vllm.kv_cache_usage"},
                     0.6, "scrape", id="one-pid-copy"),
    ],
)
async def test_one_pod_with_one_series(
    servers: list[TextServer], source: PodsSource, body: str, signal: dict[str, Any], value: float | None,
    stamp: float | str | None,
) -> None:
    """The usual case (one pod, one spelling, one series; ``_pod_value`` reads it without the general walk)
    read as the general rule reads it: the sample's own time, the signal's label matchers, the pid copies."""
    url = serve(servers, body).url
    req = request("Deployment/llm/srv", PODS, signal, pod_urls=(url,))
    reading = (await source.read([req], deadline_s=2))[req.key]
    assert reading.error is None
    assert reading.value == value
    if stamp is None:
        assert reading.per_replica is None
        return
    assert reading.per_replica is not None
    assert list(reading.per_replica.values()) == [value]
    assert reading.pod_times is not None
    (seen,) = reading.pod_times.values()
    if stamp == "scrape":
        assert seen != 1700000000.5
        assert abs(seen - time.time()) < 60  # the scrape's send time
    else:
        assert seen == stamp
