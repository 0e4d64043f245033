"""The pods source on expositions written as the servers' own code writes them (fixtures written here from what
each source says it emits; no server code copied), read the way Prometheus stores them.

- TGI's router renders its metrics with the Rust ``metrics-exporter-prometheus`` crate
  (metrics-rs/metrics, ``metrics-exporter-prometheus/src/formatting.rs`` and ``render.rs``): ``# TYPE`` lines, a
  ``# HELP`` line only for a described metric, labels in the order given with ``le`` last, the ``+Inf`` bucket,
  ``_sum`` then ``_count``, a blank line after each family, counter values as integers, floats in Rust's
  shortest round-trip form, and **counters named without ``_total``** (the crate adds a suffix only when asked;
  TGI's metric names, docs/source/reference/metrics.md: ``tgi_request_success``, ``tgi_request_count``,
  ``tgi_batch_inference_count`` are counters). Prometheus stores ``tgi_request_success`` as written;
  prometheus-client's parser renamed it ``tgi_request_success_total``, so a ``metric: tgi_request_success``
  signal read through the pods source found nothing while the same signal through Prometheus had its rate.
- vLLM (vllm/v1/metrics/loggers.py) exports a renamed metric under both names for a release (later ones with
  ``show_hidden_metrics``): 0.9 both ``vllm:gpu_cache_usage_perc`` and ``vllm:kv_cache_usage_perc`` ("Deprecated
  in 0.9"), 0.11 both
  ``vllm:time_per_output_token_seconds`` and ``vllm:inter_token_latency_seconds`` ("Deprecated in 0.11") with
  the same observations. A preset lists both spellings; the Prometheus source joins them with PromQL ``or``,
  which keeps one series per label set; the pods source summed both, doubling a histogram's observations.
- vLLM with several API-server processes runs prometheus-client in multiprocess mode: a gauge without a
  ``multiprocess_mode`` (``vllm:kv_cache_usage_perc`` at 0.10) is exported once per process with a ``pid`` label
  (prometheus_client/multiprocess.py). The fixture is written by prometheus-client itself (its multiprocess
  files and collector); the copies are read as one series, their largest (``presets.PROCESS_LABEL``), by the
  pods source and, through a real Prometheus, by the Prometheus source alike.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

from autoscaler.core.sourcespec import PodsSourceSpec, PrometheusSourceSpec
from autoscaler.sources.base import PodRef
from autoscaler.sources.pods import PodsSource, parse
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.helpers import request
from tests.sources.realprom import ScrapeTarget, TextServer, have_prometheus, running

POD = "tgi-7d9f8c6b5-abcde"


def tgi(*, success: int, count: int, prefill_sum: float, decode_sum: float, queue: float) -> str:
    """A TGI router's /metrics as metrics-exporter-prometheus renders it (a few of its families)."""
    return (
        "# TYPE tgi_request_success counter\n"
        f"tgi_request_success {success}\n"
        "\n"
        "# TYPE tgi_request_count counter\n"
        f"tgi_request_count {count}\n"
        "\n"
        "# TYPE tgi_queue_size gauge\n"
        f"tgi_queue_size {queue:g}\n"
        "\n"
        "# TYPE tgi_batch_forward_duration histogram\n"
        'tgi_batch_forward_duration_bucket{method="prefill",le="0.00015000000000000001"} 0\n'
        'tgi_batch_forward_duration_bucket{method="prefill",le="0.5"} 3\n'
        'tgi_batch_forward_duration_bucket{method="prefill",le="+Inf"} 4\n'
        f'tgi_batch_forward_duration_sum{{method="prefill"}} {prefill_sum!r}\n'
        'tgi_batch_forward_duration_count{method="prefill"} 4\n'
        'tgi_batch_forward_duration_bucket{method="decode",le="0.00015000000000000001"} 0\n'
        'tgi_batch_forward_duration_bucket{method="decode",le="0.5"} 90\n'
        'tgi_batch_forward_duration_bucket{method="decode",le="+Inf"} 90\n'
        f'tgi_batch_forward_duration_sum{{method="decode"}} {decode_sum!r}\n'
        'tgi_batch_forward_duration_count{method="decode"} 90\n'
        "\n"
    )


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


async def _two_reads(bodies: tuple[str, ...], signals: dict[str, dict[str, Any]], *, gap_s: float = 10.0,
                     content_type: str = "text/plain; version=0.0.4") -> dict[str, Any]:
    """The readings of ``signals`` after one scrape per body, ``gap_s`` apart (a rate needs two)."""
    clock = Clock()
    server = TextServer(content_type=content_type)
    source = PodsSource(clock=clock)
    spec = PodsSourceSpec(type="pods")
    reqs = {name: request("Deployment/llm/tgi", spec, sig, name=name, pods=(PodRef(POD, url=server.url),))
            for name, sig in signals.items()}
    try:
        for body in bodies:
            server.body = body
            got = await source.read(list(reqs.values()), deadline_s=2)
            clock.t += gap_s
    finally:
        await source.aclose()
        server.close()
    return {name: got[req.key] for name, req in reqs.items()}


def test_a_counter_typed_without_total_keeps_its_name() -> None:
    body = tgi(success=7, count=9, prefill_sum=0.5, decode_sum=2.0, queue=3)
    assert parse(body, "text/plain; version=0.0.4")["tgi_request_success"][0].value == 7
    assert "tgi_request_success_total" not in parse(body, "text/plain; version=0.0.4")
    # The same through prometheus-client's parser (an escaped label value elsewhere sends the body there).
    escaped = body + '# TYPE tgi_info gauge\ntgi_info{model="a\\\\b"} 1\n'
    assert parse(escaped, "text/plain")["tgi_request_success"][0].value == 7


async def test_tgi_counters_and_the_prefill_sum_as_rates() -> None:
    before = tgi(success=100, count=110, prefill_sum=1.25, decode_sum=10.0, queue=2)
    after = tgi(success=150, count=170, prefill_sum=3.75, decode_sum=30.0, queue=5)
    got = await _two_reads((before, after), {
        "ok": {"metric": "tgi_request_success", "rate": {"windowSeconds": 60}},
        "all": {"metric": "tgi_request_count", "rate": {"windowSeconds": 60}},
        "prefill": {"preset": "tgi.prefill_seconds", "labels": {"method": "prefill"}, "rate": {"windowSeconds": 60}},
        "queue": {"preset": "tgi.queue_size"},
    })
    for name in got:
        assert got[name].error is None, (name, got[name].error)
    assert got["ok"].value == pytest.approx(5.0)  # 50 over 10 s
    assert got["all"].value == pytest.approx(6.0)
    assert got["prefill"].value == pytest.approx(0.25)  # the prefill passes only, not the decode ones
    assert got["queue"].value == 5


def vllm_both_names(*, observations: int, kv: float) -> str:
    """vLLM 0.11's /metrics (prometheus-client classic text) for one engine: the renamed inter-token histogram
    under both names with the same observations, and 0.9's two KV-cache gauges."""
    labels = 'engine="0",model_name="m"'
    lines = []
    for name in ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"):
        lines += [f"# HELP {name} Histogram of inter-token latency in seconds.", f"# TYPE {name} histogram"]
        for le, share in (("0.01", 0.0), ("0.025", 0.5), ("0.05", 0.9), ("+Inf", 1.0)):
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {float(observations * share)!r}')
        lines += [f"{name}_count{{{labels}}} {float(observations)!r}",
                  f"{name}_sum{{{labels}}} {observations * 0.03!r}",
                  f"{name}_created{{{labels}}} 1.7331e+09"]
    for name in ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"):
        lines += [f"# HELP {name} KV-cache usage.", f"# TYPE {name} gauge", f"{name}{{{labels}}} {kv!r}"]
    return "\n".join(lines) + "\n"


async def test_a_metric_exported_under_its_old_and_new_name_is_read_once() -> None:
    got = await _two_reads((vllm_both_names(observations=1000, kv=0.5), vllm_both_names(observations=1400, kv=0.5)), {
        "tpot": {"preset": "vllm.time_per_output_token", "quantile": {"q": 0.5, "windowSeconds": 60}},
        "kv": {"preset": "vllm.kv_cache_usage"},
    })
    tpot = got["tpot"]
    assert tpot.error is None, tpot.error
    # 400 observations over 10 s: 40/s, as either histogram alone (PromQL's `or` keeps one), not 80/s.
    assert tpot.per_replica == {POD: pytest.approx(40.0)}
    assert (tpot.buckets or {})[POD] == pytest.approx({0.01: 0.0, 0.025: 20.0, 0.05: 36.0, float("inf"): 40.0})
    assert got["kv"].value == 0.5


def vllm_multiprocess(kv: dict[int, dict[str, float]]) -> str:
    """vLLM 0.10's /metrics with several API-server processes, as prometheus-client's multiprocess collector
    renders it: ``kv`` is process id -> engine -> that process's copy of ``vllm:kv_cache_usage_perc`` (no
    ``multiprocess_mode``: a copy per process, labelled ``pid``); ``vllm:num_requests_waiting`` has ``mostrecent``
    (one series) and ``vllm:prompt_tokens`` is a counter (summed over the processes). Each process writes its own
    file through the library's own value class, as each API-server process does."""
    directory = tempfile.mkdtemp(prefix="vllm-multiproc-")
    saved, env = values.ValueClass, os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        for pid, engines in kv.items():
            values.ValueClass = values.MultiProcessValue(lambda pid=pid: pid)  # type: ignore[no-untyped-call]
            labels = ["model_name", "engine"]
            gauge = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                          registry=None)
            waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
                            registry=None, multiprocess_mode="mostrecent")
            tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=None)
            for engine, value in engines.items():
                gauge.labels("m", engine).set(value)
                waiting.labels("m", engine).set(3)
                tokens.labels("m", engine).inc(10)
    finally:
        values.ValueClass = saved
        if env is None:
            del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = env
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry).decode()


#: Two API-server processes, two engines: engine 0's copies 0.9 and 0.3, engine 1's 0.2 and 0.4.
COPIES = {101: {"0": 0.9, "1": 0.2}, 102: {"0": 0.3, "1": 0.4}}
#: One series per engine, the largest copy (0.9, 0.4): the preset averages the engines, a ``sum`` adds them.
#: Averaging the four copies read 0.45; adding them, 1.8.
KV_AVG, KV_SUM = 0.65, 1.3


async def test_a_gauges_copies_per_process_are_read_as_one_series() -> None:
    body = vllm_multiprocess(COPIES)
    assert body.count('vllm:kv_cache_usage_perc{engine="0",model_name="m",pid=') == 2  # the layout under test
    got = await _two_reads((body,), {
        "kv": {"preset": "vllm.kv_cache_usage"},
        "kv_sum": {"metric": "vllm:kv_cache_usage_perc", "aggregate": "sum"},
        "waiting": {"preset": "vllm.waiting"},
    })
    for name in got:
        assert got[name].error is None, (name, got[name].error)
    assert got["kv"].value == pytest.approx(KV_AVG)
    assert got["kv_sum"].value == pytest.approx(KV_SUM)
    assert got["waiting"].value == 6  # two engines, one series each (mostrecent): nothing to combine


POD = "vllm-6b7c8d-aaaaa"


async def _read_through_prometheus(exposition: str, metric: str, signals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each signal read by the Prometheus source from a real Prometheus that scraped ``exposition`` as pod ``POD``
    (GMP's label layout), once ``metric`` is stored; signal name -> its reading."""
    if not have_prometheus():
        pytest.skip("the prometheus binary is not installed")
    server = TextServer(exposition)
    try:
        with running([ScrapeTarget(server.address, {"namespace": "llm", "pod": POD})]) as prom:
            prom.wait_for(f'count({metric}{{pod="{POD}"}})', bool)
            spec = PrometheusSourceSpec(type="prometheus", url=prom.url)
            source = PrometheusSource(spec)
            reqs = {name: request("Deployment/llm/vllm", spec, sig, name=name, pods=(PodRef(POD),))
                    for name, sig in signals.items()}
            try:
                got = await source.read(list(reqs.values()), deadline_s=5)
            finally:
                await source.aclose()
    finally:
        server.close()
    return {name: got[req.key] for name, req in reqs.items()}


@pytest.mark.prometheus
async def test_prometheus_reads_the_copies_per_process_as_the_pods_source_does() -> None:
    got = await _read_through_prometheus(vllm_multiprocess(COPIES), "vllm:kv_cache_usage_perc", {
        "kv": {"preset": "vllm.kv_cache_usage"},
        "kv_sum": {"metric": "vllm:kv_cache_usage_perc", "aggregate": "sum"},
    })
    assert dict(got["kv"].per_replica or {}) == {POD: pytest.approx(KV_AVG)}
    assert dict(got["kv_sum"].per_replica or {}) == {POD: pytest.approx(KV_SUM)}


#: A series written twice in one exposition (the same name and labels), a gauge and a counter.
TWICE = (
    'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 5\n'
)


async def test_a_series_written_twice_is_read_once_as_prometheus_stores_it() -> None:
    got = await _two_reads((TWICE,), {"waiting": {"preset": "vllm.waiting"}})
    assert got["waiting"].value == 3  # summed: 8
    counter = 'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {n}\n'
    got = await _two_reads((counter.format(n=1000) * 2, counter.format(n=1600) * 2),
                           {"tokens": {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 60}}})
    assert got["tokens"].value == pytest.approx(60.0)  # 600 over 10 s; summed: 120


@pytest.mark.prometheus
async def test_prometheus_keeps_the_first_of_a_series_written_twice() -> None:
    """What the pods source copies: Prometheus stores the first sample and refuses the second."""
    got = await _read_through_prometheus(TWICE, "vllm:num_requests_waiting", {"waiting": {"preset": "vllm.waiting"}})
    assert dict(got["waiting"].per_replica or {}) == {POD: 3}


def _hist(n: int, buckets: tuple[tuple[str, float], ...] = (("0.1", 0.2), ("1.0", 0.8), ("+Inf", 1.0)),
          exemplar: str = "", created: bool = True) -> str:
    name = "vllm:time_to_first_token_seconds"
    out = f"# TYPE {name} histogram\n"
    out += "".join(f'{name}_bucket{{engine="0",le="{le}"}} {n * share}{exemplar}\n' for le, share in buckets)
    out += f'{name}_count{{engine="0"}} {n}\n{name}_sum{{engine="0"}} {n * 0.5}\n'
    return out + (f'{name}_created{{engine="0"}} 1.7e9\n' if created else "")


W = 'vllm:num_requests_waiting{engine="0",model_name="m"}'
OM = "application/openmetrics-text; version=1.0.0"
WAITING = {"s": {"preset": "vllm.waiting"}}
TTFT = {"s": {"preset": "vllm.ttft", "quantile": {"q": 0.5, "windowSeconds": 60}}}
TOKENS = {"s": {"preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 60}}}
C = 'vllm:prompt_tokens_total{{engine="0"}} {n}\n'


HELP = "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
TYPE = "# TYPE vllm:num_requests_waiting gauge\n"
#: OpenMetrics bodies whose family's metadata comes again, which Prometheus 2.42 stores (its samples as written).
METADATA_AGAIN = {
    "openmetrics-help-twice": f"{HELP}{HELP}{TYPE}{W} 3\nother 4\n# EOF\n",
    "openmetrics-type-twice": f"{TYPE}{HELP}{TYPE}{W} 3\nother 4\n# EOF\n",
    "openmetrics-help-after-samples": f"{TYPE}{W} 3\n{HELP}other 4\n# EOF\n",
}


#: Scrape oddities and what the pods source reads from each (robust2's sweep, 2026-12-07; docs/sources.md lists
#: them). ``value``: the signal's value (NaN, ±Inf and negatives are passed on and judged unknown by the core);
#: ``per``: a quantile's per-pod observation rate; ``error``: a fragment of the reason the reading is unknown.
ODDITIES = [
    pytest.param((f"# TYPE vllm:num_requests_waiting gauge\r\n{W} 3\r\n",), WAITING, "text/plain", {"value": 3.0},
                 id="crlf"),
    # A byte-order mark: Prometheus refuses the scrape (test_prometheus_refuses_what_the_pods_source_refuses);
    # before robust3 the pods source read 3 here, and before a sample the mark hid that sample alone.
    pytest.param((f"\ufeff# TYPE vllm:num_requests_waiting gauge\n{W} 3\n",), WAITING, "text/plain",
                 {"error": "byte-order mark (U+FEFF), which Prometheus refuses too"}, id="bom-before-a-comment"),
    pytest.param((f"\ufeff{W} 3\n",), WAITING, "text/plain", {"error": "byte-order mark"},
                 id="bom-before-the-first-sample"),
    pytest.param((f"# TYPE vllm:num_requests_waiting gauge\n# UNIT vllm:num_requests_waiting requests\n{W} 3\n"
                  "# EOF\n",), WAITING, OM, {"error": "# UNIT to end its name, and Prometheus refuses this scrape too"},
                 id="openmetrics-unit-not-a-suffix"),
    pytest.param((f"{W}\t3\n",), WAITING, "text/plain", {"value": 3.0}, id="tab-separated"),
    pytest.param((f"{W} 3 # {{trace_id=\"a\"}} 1\n",), WAITING, "text/plain", {"value": 3.0}, id="exemplar-in-text"),
    pytest.param((f"# TYPE vllm:num_requests_waiting gauge\n# UNIT vllm:num_requests_waiting requests\n{W} 3\n",),
                 WAITING, "text/plain", {"value": 3.0}, id="unit-line-in-text"),
    pytest.param(('vllm:num_requests_waiting{engine="0",model_name="a\\"b\\\\c\\nd"} 3\n',), WAITING, "text/plain",
                 {"value": 3.0}, id="escaped-label-value"),
    pytest.param(('vllm:num_requests_waiting{engine="0",model_name="a}b,c#d"} 3\n',), WAITING, "text/plain",
                 {"value": 3.0}, id="brace-comma-hash-in-a-label-value"),
    pytest.param((f"{W} 3 1700000000000\n",), WAITING, "text/plain", {"value": 3.0}, id="timestamp-in-ms"),
    pytest.param((f"{W} NaN\n",), WAITING, "text/plain", {"value": math.nan}, id="nan"),
    pytest.param((f"{W} +Inf\n",), WAITING, "text/plain", {"value": math.inf}, id="inf"),
    pytest.param((f"{W} 1e400\n",), WAITING, "text/plain", {"value": math.inf}, id="overflow"),
    pytest.param((f"{W} 3\n{W} 5\n",), WAITING, "text/plain", {"value": 3.0}, id="series-written-twice"),
    pytest.param((f"# TYPE vllm:num_requests_waiting gauge\n{W} 3\n",), WAITING, OM, {"error": "Missing # EOF"},
                 id="openmetrics-cut-short"),
    pytest.param(("<html>oops</html>",), WAITING, "text/plain", {"error": "unparseable exposition"}, id="html"),
    pytest.param(("",), WAITING, "text/plain", {"value": None}, id="empty-body"),
    pytest.param((_hist(100), _hist(200)), TTFT, "text/plain", {"per": 10.0}, id="histogram-with-created"),
    pytest.param((_hist(100, exemplar=' # {trace_id="a"} 0.05 1.7e9', created=False) + "# EOF\n",
                  _hist(200, exemplar=' # {trace_id="b"} 0.05 1.7e9', created=False) + "# EOF\n"), TTFT, OM,
                 {"per": 10.0}, id="openmetrics-exemplars"),
    pytest.param((_hist(100, (("+Inf", 1.0),)), _hist(200, (("+Inf", 1.0),))), TTFT, "text/plain", {"per": 10.0},
                 id="only-the-inf-bucket"),
    pytest.param((_hist(100, (("0.1", 0.2), ("1.0", 0.8))), _hist(200, (("0.1", 0.2), ("1.0", 0.8)))), TTFT,
                 "text/plain", {"per": math.nan}, id="no-inf-bucket"),
    pytest.param((C.format(n=1000), C.format(n=50)), TOKENS, "text/plain", {"value": 5.0}, id="counter-reset"),
    pytest.param((C.format(n=1000) + 'vllm:prompt_tokens_created{engine="0"} 1.7e9\n',
                  C.format(n=1600) + 'vllm:prompt_tokens_created{engine="0"} 1.7e9\n'), TOKENS, "text/plain",
                 {"value": 60.0}, id="counter-with-created"),
    pytest.param((C.format(n=1000) * 2, C.format(n=1600) * 2), TOKENS, "text/plain", {"value": 60.0},
                 id="counter-written-twice"),
    # A family's metadata written again (audit4): prometheus-client's OpenMetrics parser refused the scrape whole,
    # Prometheus stores it (test_prometheus_stores_what_the_pods_source_reads); classic text never minded.
    *(pytest.param((body,), WAITING, OM, {"value": 3.0}, id=case) for case, body in METADATA_AGAIN.items()),
    pytest.param((f"{HELP}{HELP}{TYPE}{W} 3\n",), WAITING, "text/plain", {"value": 3.0}, id="help-twice-in-text"),
]


#: Bodies Prometheus 2.42 refuses whole (``up`` 0, nothing stored), with its words; the pods source refuses them
#: too (ODDITIES), so both sources see the same server.
REFUSED_BY_PROMETHEUS = {
    "bom-before-a-sample": (f"\ufeff{W} 3\nother 4\n", "text/plain; version=0.0.4", "not a valid start token"),
    "bom-before-a-comment": (f"\ufeff# TYPE vllm:num_requests_waiting gauge\n{W} 3\nother 4\n",
                             "text/plain; version=0.0.4", "not a valid start token"),
    "unit-not-a-suffix": (f"# TYPE vllm:num_requests_waiting gauge\n# UNIT vllm:num_requests_waiting requests\n"
                          f"{W} 3\nother 4\n# EOF\n", OM, "unit not a suffix of metric"),
}


@pytest.mark.prometheus
def test_prometheus_refuses_what_the_pods_source_refuses() -> None:
    if not have_prometheus():
        pytest.skip("the prometheus binary is not installed")
    servers = {case: TextServer(body, content_type=kind) for case, (body, kind, _) in REFUSED_BY_PROMETHEUS.items()}
    servers["fine"] = TextServer(f"{W} 3\nother 4\n")
    try:
        with running([ScrapeTarget(server.address, {"case": case}) for case, server in servers.items()]) as prom:
            prom.wait_for('up{case="fine"} == 1')
            prom.wait_for("count(up) == 4")
            errors = {t["labels"]["case"]: t["lastError"] for t in prom.active_targets()}
            up = {r["metric"]["case"]: r["value"][1] for r in prom.query("up")}
            stored = {r["metric"]["case"] for r in prom.query('other{case!=""}')}
    finally:
        for server in servers.values():
            server.close()
    assert up == {"fine": "1", **dict.fromkeys(REFUSED_BY_PROMETHEUS, "0")}
    assert stored == {"fine"}
    for case, (_, _, words) in REFUSED_BY_PROMETHEUS.items():
        assert words in errors[case], (case, errors)
    for body, kind, _ in REFUSED_BY_PROMETHEUS.values():
        with pytest.raises(ValueError, match="unparseable exposition"):
            parse(body, kind)


@pytest.mark.prometheus
def test_prometheus_stores_what_the_pods_source_reads() -> None:
    """The OpenMetrics bodies of ``METADATA_AGAIN`` are stored by a real Prometheus (``up`` 1, the sample as
    written), so the pods source reads them too (ODDITIES) rather than judging the server unparseable."""
    if not have_prometheus():
        pytest.skip("the prometheus binary is not installed")
    servers = {case: TextServer(body, content_type=OM) for case, body in METADATA_AGAIN.items()}
    try:
        with running([ScrapeTarget(server.address, {"case": case}) for case, server in servers.items()]) as prom:
            prom.wait_for(f'count(up == 1) == {len(servers)}')
            stored = {r["metric"]["case"]: r["value"][1] for r in prom.query('vllm:num_requests_waiting')}
    finally:
        for server in servers.values():
            server.close()
    assert stored == dict.fromkeys(METADATA_AGAIN, "3")
    for body in METADATA_AGAIN.values():
        assert parse(body, OM)["vllm:num_requests_waiting"][0].value == 3.0


@pytest.mark.parametrize(("bodies", "signals", "content_type", "expected"), ODDITIES)
async def test_what_the_pods_source_reads_from_a_scrape_oddity(
    bodies: tuple[str, ...], signals: dict[str, dict[str, Any]], content_type: str, expected: dict[str, Any]
) -> None:
    got = (await _two_reads(bodies, signals, content_type=content_type))["s"]
    if "error" in expected:
        assert got.value is None, got
        assert expected["error"] in (got.error or ""), got
        return
    assert got.error is None, got.error
    if "value" in expected:
        want = expected["value"]
        assert (got.value is None) if want is None else (got.value == pytest.approx(want, nan_ok=True)), got
    if "per" in expected:
        assert dict(got.per_replica or {}) == {POD: pytest.approx(expected["per"], nan_ok=True)}, got
