"""Counters and histograms as signals: ``rate`` of a counter preset and ``quantile`` of a histogram preset.

Against a real Prometheus scraping exporters that speak the servers' formats (vLLM V1 over OpenMetrics, which
Prometheus 2.42 stores as ``vllm_x``; an older vLLM serving classic text with ``vllm:x``; JetStream), whose
counters and histograms grow at known rates: the Prometheus source (``rate``, bucket rates per pod, the
quantile over the pods' summed buckets in the core) and the pods source (deltas between its own scrapes) agree
with the true values. Counter resets and new pods are checked on the pods source with an explicit clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.core import counters
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import PodStatus, ReplicaStatus, SignalReading
from autoscaler.core.sourcespec import PodsSourceSpec, PrometheusSourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources import pods as pods_module
from autoscaler.sources.base import PodRef
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.prometheus import PrometheusSource, target_query
from tests.sources.helpers import request
from tests.sources.realprom import Exporter, PrometheusServer, ScrapeTarget, TextServer, have_prometheus, running

PODS = ("srv-6b7c8d9f4-aaaaa", "srv-6b7c8d9f4-bbbbb")
JET = "jet-6b7c8d9f4-ccccc"
INF = float("inf")
#: Observations per second and cumulative shares per bucket of each vLLM pod's TTFT histogram.
TTFT = {PODS[0]: (10.0, {0.1: 0.5, 0.5: 0.9, 1.0: 1.0}), PODS[1]: (30.0, {0.1: 0.1, 0.5: 0.5, 1.0: 0.9})}
PROMPT = {PODS[0]: 100.0, PODS[1]: 50.0}


def expected_quantile(q: float) -> float:
    summed: dict[float, float] = {}
    for per_s, shares in TTFT.values():
        counters.add_buckets(summed, {b: per_s * share for b, share in {**shares, INF: 1.0}.items()})
    return counters.histogram_quantile(q, summed)


@dataclass
class Fleet:
    exporters: dict[str, Exporter]
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if not have_prometheus():
        pytest.skip("no prometheus binary (apt-get install prometheus)")
    exporters = {PODS[0]: Exporter(fmt="negotiate"), PODS[1]: Exporter(fmt="text"), JET: Exporter(fmt="negotiate")}
    for pod in PODS:
        exporters[pod].counter("vllm:prompt_tokens_total", PROMPT[pod])
        exporters[pod].histogram("vllm:time_to_first_token_seconds", *TTFT[pod])
    exporters[JET].histogram("jetstream_request_input_length", 20.0, {100.0: 0.5, 1000.0: 1.0})
    targets = [ScrapeTarget(e.address, {"namespace": "llm", "pod": pod}) for pod, e in exporters.items()]
    try:
        with running(targets) as prom:
            # Series older than the 10 s windows read below (a younger series' rate is extrapolated less).
            prom.wait_for("count_over_time(up[15s]) >= 14", lambda r: len(r) == 3, timeout_s=60)
            yield Fleet(exporters, prom)
    finally:
        for e in exporters.values():
            e.close()


def _policy(signal: dict[str, Any]) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "target": {"kind": "Deployment", "name": "srv", "namespace": "llm"},
            "maxReplicas": 4,
            "signals": [{"name": "s", **signal}],
            "policy": {"type": "queue", "work": ["s"], "capacityPerReplica": 10},
        },
    })


async def _prometheus_read(fleet: Fleet, signal: dict[str, Any], target: str = "Deployment/llm/srv") -> SignalReading:
    spec = PrometheusSourceSpec(type="prometheus", url=fleet.prometheus.url)
    source = PrometheusSource(spec)
    req = request(target, spec, signal)
    try:
        return (await source.read([req], deadline_s=5))[req.key]
    finally:
        await source.aclose()


def _combined(signal: dict[str, Any], reading: SignalReading, pods: tuple[str, ...], now: float) -> SignalReading:
    judge = compile_policy(_policy(signal)).judge
    replicas = ReplicaStatus(len(pods), len(pods), pods=tuple(PodStatus(p, True, 60.0) for p in pods))
    return judge.combine({"s": reading}, replicas, now)["s"]


@pytest.mark.prometheus
async def test_prometheus_rate_of_a_counter_in_both_vllm_spellings(fleet: Fleet) -> None:
    signal = {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 10}}
    reading = await _prometheus_read(fleet, signal)
    assert reading.error is None, reading.error
    # One pod is stored as vllm_prompt_tokens_total, the other as vllm:prompt_tokens_total: both count.
    assert dict(reading.per_replica or {}) == pytest.approx(PROMPT, rel=0.05)
    combined = _combined(signal, reading, PODS, (reading.timestamp or 0.0) + 1)
    assert combined.value == pytest.approx(150.0, rel=0.05)


@pytest.mark.prometheus
async def test_prometheus_quantile_over_the_pods_summed_buckets(fleet: Fleet) -> None:
    signal = {"preset": "vllm.ttft", "quantile": {"q": 0.7, "windowSeconds": 10}}
    reading = await _prometheus_read(fleet, signal)
    assert reading.error is None, reading.error
    combined = _combined(signal, reading, PODS, (reading.timestamp or 0.0) + 1)
    # Not the mean of per-pod quantiles: the quantile of the target's observations.
    assert combined.value == pytest.approx(expected_quantile(0.7), rel=0.02)
    own = fleet.prometheus.query(
        'histogram_quantile(0.7, sum by (le) (rate({__name__=~"vllm[:_]time_to_first_token_seconds_bucket"}[10s])))'
    )
    assert combined.value == pytest.approx(float(own[0]["value"][1]), rel=0.02)
    # What record saves for replay: the target's quantile, computed by Prometheus.
    req = request("Deployment/llm/srv", PrometheusSourceSpec(type="prometheus", url="http://x"), signal)
    assert target_query(req, cluster=None).startswith("histogram_quantile(0.7, sum by (le) (rate(")


@pytest.mark.prometheus
async def test_prometheus_jetstream_tokens_from_the_histogram_sum(fleet: Fleet) -> None:
    signal = {"preset": "jetstream.prompt_tokens", "rate": {"windowSeconds": 10}}
    reading = await _prometheus_read(fleet, signal, "Deployment/llm/jet")
    assert reading.error is None, reading.error
    assert reading.value == pytest.approx(20.0 * 0.1, rel=0.05)


@pytest.mark.prometheus
async def test_pods_source_rates_and_quantiles_from_its_own_scrapes(fleet: Fleet) -> None:
    spec = PodsSourceSpec(type="pods")
    pods = tuple(PodRef(p, url=fleet.exporters[p].url) for p in PODS)
    rate_sig: dict[str, Any] = {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 30}}
    q_sig: dict[str, Any] = {"preset": "vllm.ttft", "quantile": {"q": 0.7, "windowSeconds": 30}}
    reqs = [request("Deployment/llm/srv", spec, rate_sig, name="r", pods=pods),
            request("Deployment/llm/srv", spec, q_sig, name="q", pods=pods)]
    source = PodsSource()
    try:
        first = await source.read(reqs, deadline_s=5)
        # One scrape is no rate: a new pod reports only from its second scrape.
        assert "no rate yet" in (first[reqs[0].key].error or "")
        await asyncio.sleep(1.5)
        second = await source.read(reqs, deadline_s=5)
    finally:
        await source.aclose()
    rate = second[reqs[0].key]
    assert rate.error is None, rate.error
    assert dict(rate.per_replica or {}) == pytest.approx(PROMPT, rel=0.05)
    quantile = _combined(q_sig, second[reqs[1].key], PODS, max((second[reqs[1].key].pod_times or {}).values()))
    assert quantile.value == pytest.approx(expected_quantile(0.7), rel=0.02)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


async def test_pods_source_counter_reset_and_window() -> None:
    clock = Clock()
    server = TextServer()
    source = PodsSource(clock=clock)
    spec = PodsSourceSpec(type="pods")
    req = request("Deployment/llm/srv", spec, {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 60}},
                  pods=(PodRef(PODS[0], url=server.url),))
    values = []
    try:
        for t, total in ((1000.0, 100.0), (1010.0, 150.0), (1020.0, 20.0), (1100.0, 80.0)):
            clock.t = t
            server.body = f"vllm:prompt_tokens_total {total}\n"
            values.append((await source.read([req], deadline_s=2))[req.key])
    finally:
        await source.aclose()
        server.close()
    assert "no rate yet" in (values[0].error or "")
    assert values[1].value == pytest.approx(5.0)  # 50 over 10 s
    # The server restarted (150 -> 20): the increase across the reset is the new value, never negative.
    assert values[2].value == pytest.approx((50.0 + 20.0) / 20.0)
    # 80 s later only the samples of the last 60 s count: 1020 -> 1100 is 60 over 80 s... 1020 is outside,
    # so with a single sample in the window there is no rate (unknown, never zero).
    assert "no rate yet" in (values[3].error or "")


class LaggingServer:
    """A vLLM server whose prompt-token counter grows at ``RATE`` tokens/s on the test's clock, and a waiting
    gauge. Having written each answer's values, it moves the clock on by the next of ``lags``: the time our
    event loop takes to read that answer (busy elsewhere), so the answer is read ``lag`` seconds after the
    server took its values. With ``fail_first``, each read's first request is answered 503 (no lag): the source
    tries once more (``PodsSource._second_try``, through ``ScrapeClient.get``)."""

    RATE = 1_000.0

    def __init__(self, clock: Clock, lags: list[float], *, fail_first: bool = False) -> None:
        self.clock, self.lags, self.fail_first = clock, lags, fail_first
        self.server = TextServer()
        self.server.render = self._render
        self.failed = False

    def _render(self, _: str) -> str:
        if self.fail_first and not self.failed:
            self.failed = True
            self.server.status = 503
            return "busy\n"
        self.failed = False
        self.server.status = 200
        body = f"vllm:prompt_tokens_total {self.RATE * (self.clock.t - 1_000.0)}\nvllm:num_requests_waiting 3\n"
        self.clock.t += self.lags.pop(0)  # the answer is read this much later than the values were taken
        return body


@pytest.mark.parametrize(
    ("path", "fail_first"),
    [
        pytest.param("plain-http", False, id="batched-scrape-client"),
        pytest.param("plain-http", True, id="second-try-through-get"),
        pytest.param("credentials", False, id="aiohttp"),
    ],
)
async def test_pods_source_stamps_a_scrape_when_its_request_was_sent_not_when_its_answer_was_read(
    path: str, fail_first: bool
) -> None:
    """Event-loop lag between the server's answer and our reading it is not in the rate, nor in the age.

    The first scrape is read 0.4 s after the server took its values, the second at once, one second later: the
    counter grew 1,000 tokens in that second. Stamped when each answer was read, the rate was 1,000 / 0.6 =
    1,667 tokens/s (+67 %); stamped when each request was sent (as Prometheus stamps a scrape at its start),
    it is 1,000. The gauge of the late answer is as old as its request, not 0.4 s younger."""
    clock = Clock()
    lagging = LaggingServer(clock, [0.4, 0.0], fail_first=fail_first)
    url = lagging.server.url if path == "plain-http" else lagging.server.url.replace("http://", "http://u:p@")
    source = PodsSource(clock=clock)
    spec = PodsSourceSpec(type="pods")
    pods = (PodRef(PODS[0], url=url),)
    rate = request("Deployment/llm/srv", spec, {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 10}},
                   name="r", pods=pods)
    waiting = request("Deployment/llm/srv", spec, {"preset": "vllm.waiting"}, name="w", pods=pods)
    try:
        first = await source.read([rate, waiting], deadline_s=5)
        assert clock.t == 1_000.4  # the answer was read late
        clock.t = 1_001.0
        second = await source.read([rate, waiting], deadline_s=5)
    finally:
        await source.aclose()
        lagging.server.close()
    assert lagging.server.hits == (4 if fail_first else 2)
    got = second[rate.key]
    assert got.error is None, got.error
    assert got.value == pytest.approx(LaggingServer.RATE)
    assert got.timestamp == 1_001.0
    assert first[waiting.key].value == 3.0
    assert first[waiting.key].timestamp == 1_000.0  # its request's time: 0.4 s old when read


class Ticks:
    """A clock that moves on 1 ms at every reading: every request and every answer has a time of its own."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


@pytest.mark.parametrize(
    "reordered",
    [pytest.param(True, id="values-taken-in-the-other-order"), pytest.param(False, id="values-taken-in-send-order")],
)
async def test_two_scrapes_of_one_pod_in_flight_at_once_never_read_as_a_counter_reset(
    monkeypatch: pytest.MonkeyPatch, reordered: bool
) -> None:
    """Two reads of one pod overlap (a probe round's beside a pass's): A's request is sent first, B's second; A's
    is answered once B's is in, and B's only once A's answer was read. Reordered, the server takes B's values
    first (counter 200) and A's after (300): in send order the counter went 300 -> 200, which a rate reads as a
    reset (the whole 200 counted as the increase); B's point is not kept, and both readings are the rate from
    the first scrape (100) to A's (300). In send order (A 200, B 300), B's point is kept: a pod whose scrapes
    overlap (answers read late under load) still has its rate from every scrape."""
    server = TextServer()
    taken = 0
    lock = threading.Lock()
    a_arrived, b_arrived = threading.Event(), threading.Event()
    first_taken, a_read = threading.Event(), threading.Event()

    def render(_: str) -> str:
        nonlocal taken
        with lock:
            arrival = server.hits  # 1: the first scrape, 2: A, 3: B
        if arrival == 2:
            a_arrived.set()
        if arrival == 3:
            b_arrived.set()
        if (arrival == 2 and reordered) or (arrival == 3 and not reordered):
            assert first_taken.wait(5)  # the other request's values are taken first
        with lock:
            taken += 1
            body = f"vllm:prompt_tokens_total {100 * taken}\nvllm:num_requests_waiting 1\n"
        if arrival > 1:
            first_taken.set()
        if arrival == 2:
            assert b_arrived.wait(5)  # A is answered only once B's request is in: the two overlap
        if arrival == 3:
            assert a_read.wait(5)  # B is answered once A's answer was read
        return body

    server.render = render
    real_parse = pods_module.parse
    a_value = "300" if reordered else "200"

    def parse(text: str, content_type: str = "", wanted: frozenset[str] | None = None) -> pods_module.Exposition:
        if a_value in text:
            a_read.set()
        return real_parse(text, content_type, wanted)

    monkeypatch.setattr(pods_module, "parse", parse)  # only to know when A's answer was read
    source = PodsSource(clock=Ticks())
    pods = (PodRef(PODS[0], url=server.url),)
    spec = PodsSourceSpec(type="pods")
    req = request("Deployment/llm/srv", spec, {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 60}},
                  name="r", pods=pods)
    sent = request("Deployment/llm/srv", spec, {"preset": "vllm.waiting"}, name="w", pods=pods)  # its stamp
    try:
        first = await source.read([req, sent], deadline_s=5)
        read_a = asyncio.create_task(source.read([req], deadline_s=5))
        assert await asyncio.to_thread(a_arrived.wait, 5)
        read_b = asyncio.create_task(source.read([req], deadline_s=5))
        a, b = (await read_a)[req.key], (await read_b)[req.key]
    finally:
        await source.aclose()
        server.close()
    assert "no rate yet" in (first[req.key].error or "")
    t0 = first[sent.key].timestamp
    assert t0 is not None
    assert a.timestamp is not None
    assert b.timestamp is not None
    assert t0 < a.timestamp < b.timestamp  # the requests' send times
    if reordered:
        assert a.value == pytest.approx(200 / (a.timestamp - t0))
        assert b.value == pytest.approx(200 / (a.timestamp - t0))  # B's point was not kept
    else:
        assert a.value == pytest.approx(100 / (a.timestamp - t0))
        assert b.value == pytest.approx(200 / (b.timestamp - t0))  # B's point was kept


def test_histogram_quantile_follows_prometheus() -> None:
    buckets = {0.1: 8.0, 0.5: 24.0, 1.0: 37.0, INF: 40.0}
    assert counters.histogram_quantile(0.7, buckets) == pytest.approx(0.5 + 0.5 * 4 / 13)
    assert counters.histogram_quantile(0.1, buckets) == pytest.approx(0.1 * 4 / 8)
    assert counters.histogram_quantile(0.99, buckets) == 1.0  # in +Inf: the highest finite bound
    assert counters.histogram_quantile(0.5, {0.1: 0.0, INF: 0.0}) != counters.histogram_quantile(0.5, {INF: 1.0})
    assert counters.increase([(0, 10.0), (1, 15.0), (2, 3.0), (3, 4.0)]) == pytest.approx(5 + 3 + 1)
