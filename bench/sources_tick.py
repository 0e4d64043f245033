"""Cost of one tick for 1,000 targets with three signals each, through the Prometheus source (batched).

A real Prometheus (1 s scrape) scrapes one exporter holding 1,000 vLLM Deployments x 2 pods x 3 gauges
(6,000 series, ``honor_labels`` so each series keeps its own namespace/pod). Then, on the same data:

- batched: ``PrometheusSource.read`` of 3,000 requests (3 queries per tick, aiohttp), wall time and memory;
- client: the same 3 queries, HTTP and JSON only, through aiohttp and through prometheus-api-client
  (synchronous, one thread each), wall time;
- unbatched: one query per target per signal (3,000 queries, aiohttp, 32 connections), one tick.

Run: ``python -m bench.sources_tick [--targets 1000] [--ticks 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
import tracemalloc
from typing import Any

import aiohttp
from prometheus_api_client import PrometheusConnect

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.sourcespec import PrometheusSourceSpec
from autoscaler.core.spec import SignalSpec
from autoscaler.sources.base import SignalRequest
from autoscaler.sources.prometheus import PrometheusSource, batch_query, target_query
from tests.sources.realprom import PrometheusServer, ScrapeTarget, TextServer, have_prometheus

PRESETS = (("waiting", "vllm.waiting"), ("running", "vllm.running"), ("kv", "vllm.kv_cache_usage"))


def exposition(targets: int) -> str:
    lines = []
    for metric, value in (
        ("vllm:num_requests_waiting", "3"),
        ("vllm:num_requests_running", "5"),
        ("vllm:kv_cache_usage_perc", "0.5"),
    ):
        lines.append(f"# TYPE {metric} gauge")
        for t in range(targets):
            for p in ("aaaaa", "bbbbb"):
                pod = f"app-{t:04d}-6b7c8d-{p}"
                lines.append(f'{metric}{{namespace="bench",pod="{pod}",model_name="m",engine="0"}} {value}')
    return "\n".join(lines) + "\n"


def requests(targets: int, spec: PrometheusSourceSpec) -> list[SignalRequest]:
    out = []
    for t in range(targets):
        ref = TargetRef(TargetKind.DEPLOYMENT, f"app-{t:04d}", "bench")
        for name, preset in PRESETS:
            out.append(SignalRequest(ref, SignalSpec(name=name, preset=preset), spec))
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def batched(source: PrometheusSource, reqs: list[SignalRequest], ticks: int) -> dict[str, Any]:
    await source.read(reqs, deadline_s=30)  # warm the connection
    times = []
    for _ in range(ticks):
        start = time.perf_counter()
        readings = await source.read(reqs, deadline_s=30)
        times.append(time.perf_counter() - start)
    ok = sum(1 for r in readings.values() if r.value is not None)
    tracemalloc.start()
    before = source.queries_sent
    await source.read(reqs, deadline_s=30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "p50_ms": 1000 * statistics.median(times),
        "max_ms": 1000 * max(times),
        "peak_mib": peak / 2**20,
        "queries": source.queries_sent - before,
        "ok": ok,
    }


async def with_client(url: str, queries: list[str], ticks: int) -> float:
    client = PrometheusConnect(url=url, timeout=30)
    times = []
    for _ in range(ticks + 1):
        start = time.perf_counter()
        await asyncio.gather(*(asyncio.to_thread(client.custom_query, q) for q in queries))
        times.append(time.perf_counter() - start)
    client.close()
    return 1000 * statistics.median(times[1:])


async def with_aiohttp(url: str, queries: list[str], ticks: int) -> float:
    async with aiohttp.ClientSession() as session:

        async def one(q: str) -> None:
            async with session.post(f"{url}/api/v1/query", data={"query": q}) as resp:
                await resp.json()

        times = []
        for _ in range(ticks + 1):
            start = time.perf_counter()
            await asyncio.gather(*(one(q) for q in queries))
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


async def unbatched(url: str, reqs: list[SignalRequest]) -> float:
    sem = asyncio.Semaphore(32)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:

        async def one(q: str) -> None:
            async with sem, session.post(f"{url}/api/v1/query", data={"query": q}) as resp:
                await resp.read()

        queries = [target_query(r, cluster=None) for r in reqs]
        start = time.perf_counter()
        await asyncio.gather(*(one(q) for q in queries))
        return 1000 * (time.perf_counter() - start)


async def main_async(args: argparse.Namespace) -> None:
    exporter = TextServer(exposition(args.targets))
    server = PrometheusServer([ScrapeTarget(exporter.address, {"job_label": "bench"}, honor_labels=True)])
    server.start()
    try:
        expected = 6 * args.targets
        server.wait_for(
            'count({__name__=~"vllm.*", namespace="bench"})',
            lambda r: bool(r) and int(r[0]["value"][1]) == expected,
            timeout_s=60,
        )
        spec = PrometheusSourceSpec(type="prometheus", url=server.url, timeout_seconds=30)
        reqs = requests(args.targets, spec)
        source = PrometheusSource(spec)
        res = await batched(source, reqs, args.ticks)
        await source.aclose()
        groups = [[r for r in reqs if r.signal.name == name] for name, _ in PRESETS]
        queries = [batch_query(g, cluster=None) for g in groups]
        client_ms = await with_client(server.url, queries, args.ticks)
        aiohttp_ms = await with_aiohttp(server.url, queries, args.ticks)
        unbatched_ms = await unbatched(server.url, reqs)
    finally:
        server.stop()
        exporter.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = len(reqs)
    print(f"targets {args.targets} x 3 signals = {n} readings per tick ({res['ok']} with a value)")
    print(
        f"batched (aiohttp, {res['queries']} queries): p50 {res['p50_ms']:.0f} ms, max {res['max_ms']:.0f} ms, "
        f"peak Python memory during a tick {res['peak_mib']:.1f} MiB, process max RSS {rss:.0f} MiB"
    )
    print(
        f"the same 3 queries, HTTP + JSON only: aiohttp p50 {aiohttp_ms:.0f} ms, "
        f"prometheus-api-client (3 threads) p50 {client_ms:.0f} ms"
    )
    print(f"unbatched ({n} queries, aiohttp, 32 connections): one tick {unbatched_ms:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=10)
    args = parser.parse_args()
    if not have_prometheus():
        raise SystemExit("bench.sources_tick needs the prometheus binary (apt-get install prometheus)")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
