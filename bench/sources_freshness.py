"""Signal freshness: from a value changing in an exporter to a source returning it, Prometheus vs direct scraping.

One exporter (a pod serving ``tgi_queue_size``) is scraped by a real Prometheus every second and read
directly by the pods source. For each of ``--changes`` changes, the value is set at a random phase
relative to the scrape cycle, then both sources are polled side by side every ``--poll-ms`` until each
returns the new value; the delay from the change to the first read that shows it is recorded.

The poll interval bounds the resolution (a controller ticking every P seconds adds up to P on top).
Run: ``python -m bench.sources_freshness [--changes 40] [--poll-ms 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.sourcespec import PodsSourceSpec, PrometheusSourceSpec
from autoscaler.core.spec import SignalSpec
from autoscaler.sources.base import PodRef, SignalRequest
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.realprom import Exporter, PrometheusServer, ScrapeTarget, have_prometheus

POD = "tgi-77f8c9-qqqqq"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def until_seen(
    source: PrometheusSource | PodsSource, req: SignalRequest, value: float, start: float, poll_s: float
) -> float:
    while True:
        got = (await source.read([req], deadline_s=2))[req.key]
        if got.value == value:
            return time.perf_counter() - start
        await asyncio.sleep(poll_s)


async def run(changes: int, poll_s: float, seed: int) -> None:
    rng = random.Random(seed)
    exporter = Exporter(labels={"namespace": "llm", "pod": POD})
    exporter.set("tgi_queue_size", 0)
    server = PrometheusServer([ScrapeTarget(exporter.address, exporter.labels)], interval_s=1.0)
    server.start()
    target = TargetRef(TargetKind.DEPLOYMENT, "tgi", "llm")
    signal = SignalSpec(name="queue", preset="tgi.queue_size")
    prom_spec = PrometheusSourceSpec(type="prometheus", url=server.url)
    prom_req = SignalRequest(target, signal, prom_spec)
    pods_req = SignalRequest(target, signal, PodsSourceSpec(type="pods"), pods=(PodRef(POD, exporter.url),))
    prom, pods = PrometheusSource(prom_spec), PodsSource()
    try:
        server.wait_for('tgi_queue_size{namespace="llm"}', timeout_s=60)
        via_prom: list[float] = []
        via_pods: list[float] = []
        for i in range(1, changes + 1):
            await asyncio.sleep(rng.uniform(0.0, 1.0))  # a random phase against the 1 s scrape
            exporter.set("tgi_queue_size", i)
            start = time.perf_counter()
            a, b = await asyncio.gather(
                until_seen(prom, prom_req, float(i), start, poll_s), until_seen(pods, pods_req, float(i), start, poll_s)
            )
            via_prom.append(a)
            via_pods.append(b)
    finally:
        await prom.aclose()
        await pods.aclose()
        server.stop()
        exporter.close()
    for name, xs in (("prometheus (1 s scrape)", via_prom), ("direct pod scrape", via_pods)):
        print(
            f"{name:<24} p50 {1000 * statistics.median(xs):6.0f} ms   p99 {1000 * pct(xs, 0.99):6.0f} ms   "
            f"max {1000 * max(xs):6.0f} ms   (n={len(xs)}, poll {poll_s * 1000:.0f} ms)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--poll-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not have_prometheus():
        raise SystemExit("bench.sources_freshness needs the prometheus binary (apt-get install prometheus)")
    asyncio.run(run(args.changes, args.poll_ms / 1000, args.seed))


if __name__ == "__main__":
    main()
