"""A real Prometheus server and test exporters, for tests and benchmarks (importable: ``tests.sources.realprom``).

- ``Exporter``: one pod's ``/metrics`` in a thread (a ``prometheus_client`` registry whose gauges the test
  sets). ``fmt="negotiate"`` answers the scraper's Accept header exactly as vLLM's prometheus-client does
  (OpenMetrics to Prometheus 2.42, which stores ``vllm:x`` as ``vllm_x``); ``fmt="text"`` always serves the
  classic text format (colons kept), as older servers do.
- ``TextServer``: serves whatever body and status the test sets (garbage, 500, hand-written exposition).
- ``PrometheusServer``: ``/usr/bin/prometheus`` on 127.0.0.1 with a free port and a temporary data dir,
  scraping the given exporters every second; ``wait_for`` polls the HTTP API until a query's answer
  satisfies a predicate (a real sample, not readiness: the first sample lands ~5-6 s after start).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

PROMETHEUS_BIN = shutil.which("prometheus") or "/usr/bin/prometheus"


def have_prometheus() -> bool:
    return Path(PROMETHEUS_BIN).is_file()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Server:
    """A threaded HTTP server on 127.0.0.1 with a free port, stopped by ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ExporterHandler(_Quiet):
    def do_GET(self) -> None:
        exporter: Exporter = self.server.owner  # type: ignore[attr-defined]
        exporter.scrapes += 1
        if exporter.fmt == "negotiate":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(exporter.registry)
        else:
            # Classic text without name escaping: `vllm:x` stays `vllm:x`, as older servers serve it.
            body = generate_latest(exporter.registry)
            content_type = "text/plain; version=0.0.4; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with suppress(BrokenPipeError, ConnectionResetError):  # Prometheus stopping mid-scrape
            self.wfile.write(body)


class _Linear:
    """Counters and histograms growing at a fixed rate with wall time (a server under steady load): their true
    rate is known, whenever Prometheus or a test scrapes them."""

    def __init__(self) -> None:
        self.start = time.time()
        self.counters: dict[str, float] = {}
        #: name -> (observations per second, {upper bound: cumulative share of observations})
        self.histograms: dict[str, tuple[float, dict[float, float]]] = {}

    def collect(self) -> Iterator[Metric]:
        elapsed = time.time() - self.start
        for name, per_s in self.counters.items():
            family = CounterMetricFamily(name.removesuffix("_total"), f"test counter {name}")
            family.add_metric([], per_s * elapsed)
            yield family
        for name, (per_s, shares) in self.histograms.items():
            count = per_s * elapsed
            buckets = [(_le(b), share * count) for b, share in sorted(shares.items())]
            hist = HistogramMetricFamily(name, f"test histogram {name}")
            hist.add_metric([], buckets=buckets, sum_value=count * 0.1)
            yield hist


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class Exporter(_Server):
    """One pod's metrics endpoint backed by a prometheus-client registry."""

    def __init__(self, *, fmt: str = "negotiate", labels: dict[str, str] | None = None) -> None:
        self.fmt = fmt
        self.labels = labels or {}
        self.registry = CollectorRegistry()
        self.gauges: dict[str, Gauge] = {}
        self.scrapes = 0
        self.linear = _Linear()
        self.registry.register(self.linear)
        super().__init__(_ExporterHandler)

    def counter(self, name: str, per_second: float) -> None:
        """A counter (``name`` ends in ``_total``) growing by ``per_second`` from now on."""
        self.linear.counters[name] = per_second

    def histogram(self, name: str, per_second: float, shares: dict[float, float]) -> None:
        """A histogram observing ``per_second`` values a second; ``shares``: upper bound -> cumulative share."""
        self.linear.histograms[name] = (per_second, {**shares, float("inf"): 1.0})

    def set(self, name: str, value: float, **labels: str) -> None:
        gauge = self.gauges.get(name)
        if gauge is None:
            gauge = Gauge(name, f"test gauge {name}", sorted(labels), registry=self.registry)
            self.gauges[name] = gauge
        (gauge.labels(**labels) if labels else gauge).set(value)


class _TextHandler(_Quiet):
    def do_GET(self) -> None:
        server: TextServer = self.server.owner  # type: ignore[attr-defined]
        server.hits += 1
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length).decode() if length else ""
        server.seen.append((self.command, self.path, dict(self.headers), sent))
        if server.delay_s:
            time.sleep(server.delay_s)  # a slow backend, for deadline tests (the client gives up first)
        body = (server.render(urllib.parse.unquote_plus(self.path + "?" + sent)) if server.render is not None
                else server.body).encode()
        self.send_response(server.status)
        self.send_header("Content-Type", server.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (deadline tests)
            self.wfile.write(body)

    do_POST = do_GET


class TextServer(_Server):
    """Serves ``body`` with ``status`` for any path, GET or POST."""

    def __init__(self, body: str = "", *, status: int = 200, content_type: str = "text/plain; version=0.0.4") -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.delay_s = 0.0
        #: Called with each request's path and body (URL-decoded) for the answer instead of ``body``, when set (an
        #: exposition that changes with time, an answer per query).
        self.render: Callable[[str], str] | None = None
        self.hits = 0
        #: (method, path, headers, body) of every request, oldest first.
        self.seen: list[tuple[str, str, dict[str, str], str]] = []
        super().__init__(_TextHandler)

    @property
    def base(self) -> str:
        return f"http://{self.address}"


@dataclass
class ScrapeTarget:
    """One scrape job entry: an address and the target labels Prometheus attaches (namespace, pod, ...)."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)
    honor_labels: bool = False


class PrometheusServer:
    """A real Prometheus scraping ``targets`` every ``interval_s`` seconds."""

    def __init__(self, targets: Sequence[ScrapeTarget], *, interval_s: float = 1.0) -> None:
        self.targets = list(targets)
        self.interval_s = interval_s
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="autoscaler-prom-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> dict[str, Any]:
        jobs = []
        for i, t in enumerate(self.targets):
            jobs.append(
                {
                    "job_name": f"t{i}",
                    "honor_labels": t.honor_labels,
                    "static_configs": [{"targets": [t.address], "labels": t.labels}],
                }
            )
        interval = f"{int(self.interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": "10s"},
            "scrape_configs": jobs,
        }

    def start(self) -> None:
        config = self.dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        self.log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                PROMETHEUS_BIN,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def query(self, promql: str) -> list[dict[str, Any]]:
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=15) as resp:
            body = json.loads(resp.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        """The active scrape targets as ``/api/v1/targets`` lists them (``labels``, ``health``, ``lastError``)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=15) as resp:
            active: list[dict[str, Any]] = json.loads(resp.read())["data"]["activeTargets"]
        return active

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout_s: float = 90.0,
    ) -> list[dict[str, Any]]:
        """Poll until ``predicate(result)`` holds; raise with the last answer when ``timeout_s`` passes.

        The limit is generous (below the per-test 120 s) because it only bounds a failure: on a loaded
        2-core machine a starting Prometheus was seen answering its first queries after more than 30 s.
        """
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                last = self.query(promql)
                if predicate(last):
                    return list(last)
            except OSError as exc:  # not listening yet
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"{promql!r} never satisfied the predicate in {timeout_s}s; last: {last!r}")

    def _log_tail(self) -> str:
        try:
            return (self.dir / "prometheus.log").read_text()[-2000:]
        except OSError:
            return ""


@contextmanager
def running(targets: Sequence[ScrapeTarget], *, interval_s: float = 1.0) -> Iterator[PrometheusServer]:
    server = PrometheusServer(targets, interval_s=interval_s)
    server.start()
    try:
        yield server
    finally:
        server.stop()
