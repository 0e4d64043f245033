"""Fixtures for the sources tests: one real Prometheus for the whole session, scraping a fixed fleet of pods.

The fleet (every pod its own exporter; Prometheus attaches ``cluster``, ``namespace`` and ``pod`` as a
PodMonitoring would):

=========  ==========================  ==========  =========================================
namespace  pod                         cluster     serves
=========  ==========================  ==========  =========================================
tpu        jetstream-7d9f8b-abcde/fghij test       JetStream gauges (prefill backlog, slots)
tpu        jet-lws-0, jet-lws-1         test       LWS leaders (JetStream)
tpu        jet-lws-0-1                  test       LWS worker (must not count for leader presets)
llm        vllm-6b7c8d-aaaaa/bbbbb      test       vLLM V1, OpenMetrics → stored as ``vllm_*``
llm        vllm-old-5f6a7b-ccccc        test       older vLLM, classic text → stored as ``vllm:*``
llm        vllm-6b7c8d-zzzzz            other      same app name in another cluster (never mixes)
llm        tgi-77f8c9-qqqqq             test       TGI
=========  ==========================  ==========  =========================================

Reuse from another test package: in its conftest, ``from tests.sources.conftest import fleet  # noqa: F401``
(checked to work); ``tests.sources.realprom`` has the building blocks for a fleet of your own.
Tests that change a value call ``fleet.apply`` (or ``set_and_wait``) so they never depend on another test's leftovers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from tests.sources.realprom import Exporter, PrometheusServer, ScrapeTarget, have_prometheus

CLUSTER = "test"

_PODS: list[tuple[str, str, str, str]] = [
    # (key, namespace, pod, format)
    ("js-a", "tpu", "jetstream-7d9f8b-abcde", "negotiate"),
    ("js-b", "tpu", "jetstream-7d9f8b-fghij", "negotiate"),
    ("lws-0", "tpu", "jet-lws-0", "negotiate"),
    ("lws-1", "tpu", "jet-lws-1", "negotiate"),
    ("lws-0-w1", "tpu", "jet-lws-0-1", "negotiate"),
    ("vllm-a", "llm", "vllm-6b7c8d-aaaaa", "negotiate"),
    ("vllm-b", "llm", "vllm-6b7c8d-bbbbb", "negotiate"),
    ("vllm-old", "llm", "vllm-old-5f6a7b-ccccc", "text"),
    ("vllm-other", "llm", "vllm-6b7c8d-zzzzz", "negotiate"),
    ("tgi", "llm", "tgi-77f8c9-qqqqq", "negotiate"),
]


@dataclass
class Fleet:
    """The session's exporters by key, and the Prometheus scraping them."""

    pods: dict[str, Exporter]
    prometheus: PrometheusServer

    def set_and_wait(self, key: str, name: str, value: float, **labels: str) -> None:
        """Set a gauge on one pod and wait until Prometheus has scraped that value."""
        self.apply([(key, name, value, labels)])

    def apply(self, changes: Sequence[tuple[str, str, float, dict[str, str]]]) -> None:
        """Set gauges on pods, then wait until Prometheus has scraped every one (waits overlap)."""
        for key, name, value, labels in changes:
            self.pods[key].set(name, value, **labels)
        for key, name, value, labels in changes:
            pod = self.pods[key].labels["pod"]
            stored = name.replace(":", "[:_]")
            extra = "".join(f', {k}="{v}"' for k, v in sorted(labels.items()))
            self.prometheus.wait_for(f'{{__name__=~"{stored}", pod="{pod}"{extra}}} == {value!r}', lambda r: len(r) > 0)


def _initial(key: str, exporter: Exporter) -> None:
    """Every pod starts with its server's full set of gauges (values the tests override as needed)."""
    if key.startswith(("js", "lws")):
        exporter.set("jetstream_prefill_backlog_size", 0, id="0")
        exporter.set("jetstream_slots_used_percentage", 0.0, id="0", idx="0")
    elif key == "vllm-old":
        exporter.set("vllm:num_requests_waiting", 0, model_name="m")
        exporter.set("vllm:num_requests_running", 0, model_name="m")
        exporter.set("vllm:gpu_cache_usage_perc", 0.0, model_name="m")
    elif key.startswith("vllm"):
        exporter.set("vllm:num_requests_waiting", 0, model_name="m", engine="0")
        exporter.set("vllm:num_requests_running", 0, model_name="m", engine="0")
        exporter.set("vllm:kv_cache_usage_perc", 0.0, model_name="m", engine="0")
    else:
        exporter.set("tgi_queue_size", 0)


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    """A real Prometheus (1 s scrape) over the fleet above; yields once the first samples are stored."""
    if not have_prometheus():
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus); real-server tests skipped")
    pods: dict[str, Exporter] = {}
    targets = []
    for key, namespace, pod, fmt in _PODS:
        cluster = "other" if key == "vllm-other" else CLUSTER
        labels = {"cluster": cluster, "namespace": namespace, "pod": pod}
        exporter = Exporter(fmt=fmt, labels=labels)
        _initial(key, exporter)
        pods[key] = exporter
        targets.append(ScrapeTarget(exporter.address, labels))
    server = PrometheusServer(targets, interval_s=1.0)
    server.start()
    try:
        # A real sample from every pod, not mere readiness.
        server.wait_for("count(up == 1)", lambda r: bool(r) and int(r[0]["value"][1]) == len(_PODS))
        yield Fleet(pods, server)
    finally:
        server.stop()
        for exporter in pods.values():
            exporter.close()
