"""Reaction time: from a serving signal crossing its threshold to the scale request reaching the API server.

Three pipelines in one run, on the same machine and the same emulated API server (``tests.kube.emulator``,
real HTTP, the real kubernetes_asyncio client):

1. **direct**: the controller (``autoscaler run``'s ``Runtime``, fast probe every 1 s) scrapes a TGI-like
   ``/metrics`` endpoint itself (the ``pods`` source with a static endpoint);
2. **prometheus-1s**: the same controller reads ``sum(tgi_queue_size)`` from a real Prometheus 2.42 that
   scrapes the endpoint every 1 s (skipped when the ``prometheus`` binary is absent);
3. **hpa-model**: an HPA-style pipeline (a 15 s scrape, then a 15 s HPA sync, each at an independent random
   phase) modelled over 10,000 draws, plus the API write latency measured in (1). No metrics adapter delay is
   added, so the real HPA is slower than this (FACTS.md: ≈85 s end to end measured with an adapter).

Per trial: the queue sits at 5 (1 replica suffices), then at a random phase jumps to 25 (3 replicas needed);
the time from the jump to the arrival of ``PATCH .../deployments/tgi-gemma-deployment/scale`` at the server is
recorded; the Deployment is then reset to 1 replica and the policy's state cleared (each trial is an
independent crossing; otherwise the scale-up rate limit of the previous trials would hold it).

With ``--background N`` the direct pipeline is measured while the same controller holds N other policies,
each scaling its own Deployment (namespace ``bg``) on its own pod endpoint (``/m/<i>`` of one more exporter,
whose queue moves at every scrape but never needs a second replica), all probed every second like the
measured one. There the API server runs in one **child process** and every exporter in another (as the API
server and the pods do in a cluster, on machines of their own), so the controller's process is the controller
alone; the children still share this machine's 2 cores with it. The pods' child flips the queue and the API
server's stamps the scale write's arrival, on the monotonic clock the processes share (``time.monotonic``).
Until 2026-12-07 both ran in one child, on one event loop (``--one-child``): the API server's encoding of a
bulk list of the 5,000 Deployments then held the pods' answers to the probe round.

Run: ``python -m bench.controller_reaction [--trials N] [--background N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import multiprocessing as mp
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from autoscaler.controller import logs
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from autoscaler.controller.scale import ScaleClient
from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.sources import pods as pods_module
from autoscaler.sources.base import MetricSource
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.pool import SourcePool, default_factory
from tests.controller.helpers import TgiMetrics
from tests.controller.policies import tgi_policy
from tests.kube import objects
from tests.kube.emulator import Emulator

SCALE = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"
HPA_SCRAPE_S = 15.0
HPA_SYNC_S = 15.0


def counts(metric: Any) -> dict[str, float]:
    """A labelled prometheus_client Counter's values, by its one label's value."""
    return {next(iter(smp.labels.values()), ""): smp.value for m in metric.collect() for smp in m.samples
            if smp.name.endswith("_total")}


def moved(after: dict[str, float], before: dict[str, float], leave: tuple[str, ...] = ()) -> str:
    """The counts that moved between two ``counts``, as ``why n, ...`` (largest first), without ``leave``."""
    delta = {k: int(v - before.get(k, 0.0)) for k, v in after.items() if k not in leave}
    return ", ".join(f"{k} {n}" for k, n in sorted(delta.items(), key=lambda kv: -kv[1]) if n) or "none"


def watch_counts(rt: Runtime) -> dict[str, tuple[int, int]]:
    """Per watch path: its lists (the first and every relist) and its failures so far."""
    return {spec.path: (w.relists, w.failures) for spec, (w, _) in rt.watchers.items()}


async def started_up(rt: Runtime, policies: int, limit_s: float = 600.0) -> None:
    """Wait until ``policies`` policies were evaluated once, every watch listed and no evaluation is pending."""
    controller: Any = rt.controller
    async with asyncio.timeout(limit_s):
        while (len(controller._runs) < policies or controller._pending
               or not all(w.synced.is_set() for w, _ in rt.watchers.values())):
            await asyncio.sleep(0.1)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


async def measure(kube: Emulator, tgi: TgiMetrics, policy: str, trials: int, rng: random.Random,
                  tmp: Path, others: dict[str, str] | None = None, warmup_s: float = 3.0) -> list[float]:
    """Reaction times (s) of one controller configuration over ``trials`` jumps (``others``: more policy files)."""
    (tmp / "policies").mkdir(parents=True, exist_ok=True)
    (tmp / "policies" / "tgi.yaml").write_text(policy)
    for name, text in (others or {}).items():
        (tmp / "policies" / name).write_text(text)
    clock = LoopClock()

    def factory(spec: SourceSpec) -> MetricSource:
        return PodsSource(clock=clock.wall) if spec.type == "pods" else default_factory(spec)

    api = client.ApiClient(client.Configuration(host=kube.url))
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "fastPollSeconds": 1.0,
                                           "logLevel": "error"})
    rt = Runtime(api=api, config=cfg, policies_dir=tmp / "policies", clock=clock, namespace="autoscaler",
                 source=SourcePool(factory), settle_loaded=True)
    loop = asyncio.get_running_loop()
    arrived: asyncio.Queue[float] = asyncio.Queue()
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    out: list[float] = []
    try:
        tgi.queue = 5
        await asyncio.sleep(warmup_s)  # first evaluations, watches synced
        for _ in range(trials):
            kube.after("PATCH", SCALE, lambda: arrived.put_nowait(loop.time()))
            await asyncio.sleep(rng.uniform(0.0, 1.0))  # a random phase against the probe
            t0 = loop.time()
            tgi.queue = 25
            try:
                t1 = await asyncio.wait_for(arrived.get(), 120)
            except TimeoutError:
                print("trial: no scale write within 120 s", file=sys.stderr, flush=True)
                continue
            out.append(t1 - t0)
            print(f"trial: {t1 - t0:.2f} s", file=sys.stderr, flush=True)
            tgi.queue = 5
            await asyncio.sleep(1.5)
            kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 1})
            # Each trial is an independent crossing from a steady state: forget the scale-up just made, or
            # the policy's rate limit (+4 replicas per 15 s) would hold the next trial's scale-up.
            rt.controller.states.clear()
            await asyncio.sleep(1.5)
    finally:
        stop.set()
        await task
        await api.close()
    return out


@contextlib.asynccontextmanager
async def prometheus(target: str, tmp: Path) -> AsyncIterator[str]:
    """A real Prometheus scraping ``target`` every 1 s; yields its URL once a sample is queryable."""
    port = 19090 + random.randrange(500)
    conf = tmp / "prometheus.yml"
    host = target.split("//", 1)[1].split("/", 1)[0]
    conf.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: tgi, static_configs: [{{targets: ['{host}']}}]}}]\n"
    )
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(300):  # wait for a real sample, not for readiness (FACTS.md)
                with contextlib.suppress(aiohttp.ClientError):
                    r = await s.get(f"{url}/api/v1/query", params={"query": "tgi_queue_size"})
                    if r.status == 200 and (await r.json())["data"]["result"]:
                        break
                await asyncio.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class _Exporter(asyncio.Protocol):
    """One connection of the background exporter: answers each ``GET`` (keep-alive, pipelining allowed) with
    a TGI exposition whose queue is drawn afresh."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            if not head.startswith(b"GET /m/"):
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            body = b"# TYPE tgi_queue_size gauge\ntgi_queue_size %d\n" % self.rng.randint(3, 7)
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def background_exporter() -> tuple[asyncio.Server, str]:
    """``/m/<i>``: a TGI exposition, one path per background pod, whose queue moves at every scrape (as a real
    server's does) but stays where one replica is enough (3..7 with 10 per replica): every background signal
    changes every round, so nothing may be skipped for being unchanged.

    A bare HTTP/1.1 server on asyncio's protocol layer, not aiohttp: it stands in for 5,000 pods that in a
    cluster run on other nodes, so on this 2-core machine it should take as little CPU from the controller as
    it can (aiohttp's server took ~0.15 ms per request, most of a core at 5,000 scrapes a second)."""
    rng = random.Random(7)
    server = await asyncio.get_running_loop().create_server(lambda: _Exporter(rng), "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def background_policies(count: int, exporter: str) -> dict[str, str]:
    """Files of 100 policies each (a policy file is at most 256 KiB)."""
    docs = [
        tgi_policy(name=f"bg-{i:05d}", target=f"app-{i:05d}", capacity=False,
                   source=f"{{type: pods, endpoints: ['{exporter}/m/{i}']}}").replace("namespace: llm", "namespace: bg")
        for i in range(count)
    ]
    return {f"background-{k:03d}.yaml": "---\n".join(docs[k * 100:(k + 1) * 100]) for k in range((count + 99) // 100)}


def serve_world(conn: Connection, background: int, role: str = "both") -> None:
    """Child process: the API server (``role`` "api"), the measured TGI server and the background exporter
    ("pods"), or all three on one event loop ("both", the layout until 2026-12-07). Sends its URLs (None for
    what it does not serve), then answers the parent's commands: ``arm`` (the next scale write of the measured
    Deployment is stamped: ``arrived <trial>`` when it reaches the server), ``jump`` (queue 5 → 25; replies
    ``t0``), ``calm`` (queue back to 5), ``shrink`` (the Deployment back to 1 replica)."""

    async def main() -> None:
        logs.configure("error")
        kube: Emulator | None = None
        tgi: TgiMetrics | None = None
        exporter: str | None = None
        if role in ("api", "both"):
            kube = Emulator()
            kube.add(objects.deployment(replicas=1))
            for i in range(background):
                kube.add(objects.deployment(f"app-{i:05d}", "bg", replicas=1))
            await kube.start()
        if role in ("pods", "both"):
            tgi = TgiMetrics()
            await tgi.start()
            tgi.queue = 5
            _, exporter = await background_exporter()
        conn.send((kube.url if kube else None, tgi.url if tgi else None, exporter))

        arms = 0

        def arrived(trial: int) -> None:
            conn.send((f"arrived {trial}", time.monotonic()))

        def command() -> None:
            nonlocal arms
            what = conn.recv()
            if what == "arm" and kube is not None:
                arms += 1
                # Named by its trial: a write that comes after its trial gave up must not count for the next.
                kube.after("PATCH", SCALE, functools.partial(arrived, arms))
                conn.send(("arm", time.monotonic()))
            elif what == "jump" and tgi is not None:
                conn.send(("t0", time.monotonic()))
                tgi.queue = 25
            elif what == "calm" and tgi is not None:
                tgi.queue = 5
                conn.send(("calm", time.monotonic()))
            elif what == "shrink" and kube is not None:
                kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 1})
                conn.send(("shrink", time.monotonic()))

        asyncio.get_running_loop().add_reader(conn.fileno(), command)
        await asyncio.Event().wait()

    asyncio.run(main())


async def measure_apart(conns: tuple[Connection, Connection], urls: tuple[str, str, str], background: int,
                        trials: int, rng: random.Random, tmp: Path, warmup_s: float, breakdown: bool = False,
                        chunking: tuple[int, int] | None = None, fast_poll_s: float = 1.0) -> list[float]:
    """``measure`` against the child processes' world (see ``serve_world``): ``conns`` are the API server's and
    the pods' (one and the same with ``--one-child``)."""
    api_conn, pods_conn = conns
    kube_url, tgi_url, exporter = urls
    (tmp / "policies").mkdir(parents=True, exist_ok=True)
    (tmp / "policies" / "tgi.yaml").write_text(
        tgi_policy(source=f"{{type: pods, endpoints: ['{tgi_url}']}}", capacity=False))
    for name, text in background_policies(background, exporter).items():
        (tmp / "policies" / name).write_text(text)
    clock = LoopClock()

    scrapers: list[PodsSource] = []

    def factory(spec: SourceSpec) -> MetricSource:
        if spec.type != "pods":
            return default_factory(spec)
        scrapers.append(PodsSource(clock=clock.wall))
        return scrapers[-1]

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
    for c in {api_conn, pods_conn}:
        loop.add_reader(c.fileno(), functools.partial(lambda c: inbox.put_nowait(c.recv()), c))

    async def ask(what: str) -> float:
        (api_conn if what in ("arm", "shrink") else pods_conn).send(what)
        while True:
            kind, at = await inbox.get()
            if kind == what or (what == "jump" and kind == "t0"):
                return at

    api = client.ApiClient(client.Configuration(host=kube_url))
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "fastPollSeconds": fast_poll_s,
                                           "logLevel": "error"})
    rt = Runtime(api=api, config=cfg, policies_dir=tmp / "policies", clock=clock, namespace="autoscaler",
                 source=SourcePool(factory), settle_loaded=True)
    if chunking is not None:  # ``--probe-chunk``: the round's chunk size and chunks in flight, for experiments
        rt.controller.probe_chunk, rt.controller.probe_parallel = chunking
    # Each probe round's process CPU and wall time (whatever else ran meanwhile counts too: periodic passes,
    # escalated evaluations): a round's wall time bounds the wait for a crossing to be screened.
    # The last field: how many screens stood as their policy's periodic evaluation in the round.
    rounds: list[tuple[float, float, int, int]] = []
    inner = rt.controller.probe_round

    async def timed_round() -> None:
        c0, w0, s0, st0 = time.process_time(), time.monotonic(), rt.controller.screens, paths["stood"]
        await inner()
        rounds.append((time.process_time() - c0, time.monotonic() - w0, rt.controller.screens - s0,
                       paths["stood"] - st0))

    rt.controller.probe_round = timed_round  # type: ignore[method-assign]
    # How each screen ended and how each periodic evaluation was made: a quiet screen (no decide), a screen that
    # stood as its policy's periodic evaluation, an evaluation (pass, escalation or watch) that ran in full.
    paths = {"quiet": 0, "stood": 0, "evaluated": 0}
    controller: Any = rt.controller
    tel = rt.telemetry

    def counted(name: str, method: Any) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            got = await method(*args, **kwargs)
            if name == "evaluated" or got:
                paths[name] += 1
            return got
        return wrapper

    controller._quiet = counted("quiet", controller._quiet)
    controller._stand = counted("stood", controller._stand)
    controller.evaluate = counted("evaluated", controller.evaluate)
    # What a trial's reaction is made of: when the measured policy's screen that found the crossing started (its
    # chunk's start), when that screen escalated it (an evaluation on a fresh read), and the write's arrival.
    escalated: list[tuple[float, float]] = []  # (its screen's start, the escalation), loop clock
    escalate = controller._escalate

    def noted(cp: Any) -> None:
        if cp.name == "tgi-gemma":
            escalated.append((controller._screened.get(cp.name, math.nan), loop.time()))
        escalate(cp)

    controller._escalate = noted
    # The probe rounds' bulk reads of target views grown too old (every view read together ages out together):
    # when each started and how long it took (a trial that overlaps one says so).
    bulk: list[tuple[float, float, int]] = []  # (start, duration, views read)
    read_targets = controller._read_targets

    async def timed_read(policies: Any) -> None:
        w = loop.time()
        await read_targets(policies)
        if len(policies) > 1:
            bulk.append((w, loop.time() - w, len(policies)))

    controller._read_targets = timed_read
    # Where a round's CPU goes (``--breakdown``): the exposition parse, the per-target combine (``_reading``), and
    # the screens themselves (``_quiet``, ``_screen``, ``_stand``), each summed as process CPU around the call.
    spent = {"parse": 0.0, "combine": 0.0, "screen": 0.0}
    if breakdown:
        def timed(name: str, fn: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                c = time.process_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    spent[name] += time.process_time() - c
            return wrapper

        def timed_async(name: str, fn: Any) -> Any:
            async def wrapper(*args: Any, **kwargs: Any) -> Any:  # these run to the end without suspending
                c = time.process_time()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    spent[name] += time.process_time() - c
            return wrapper

        pods_module.parse = timed("parse", pods_module.parse)
        pods_module._reading = timed("combine", pods_module._reading)
        controller._quiet = timed_async("screen", controller._quiet)
        controller._screen = timed_async("screen", controller._screen)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    out: list[float] = []
    try:
        started = time.monotonic()
        await asyncio.sleep(warmup_s)  # policies loaded, watches synced, first evaluations done
        # Under load start-up outlasts any fixed warm-up: the trials measure the reaction once every policy was
        # evaluated once, the watches listed and no pass is pending (start-up's own length is printed).
        await started_up(rt, background + 1)
        print(f"start-up: every policy evaluated once and every watch listed {time.monotonic() - started:.1f} s "
              f"after the start (warm-up {warmup_s:g} s); full evaluations so far by why: "
              f"{moved(counts(tel.full_evaluations), {})}; target views read: {moved(counts(tel.view_reads), {})}",
              file=sys.stderr, flush=True)
        del rounds[:]
        del bulk[:]
        cpu0, wall0, load0 = time.process_time(), time.monotonic(), os.getloadavg()[0]
        # Why evaluations ran in full and why target views were read (the controller's own counters), over the
        # trials and per trial: a burst of full evaluations names its cause, and the trial it came in.
        full0, reads0, watches0 = counts(tel.full_evaluations), counts(tel.view_reads), watch_counts(rt)
        full_t, reads_t = dict(full0), dict(reads0)
        screens0 = rt.controller.screens
        paths0 = dict(paths)
        resyncs0 = rt.observer.resyncs
        fetches0 = sum(p.fetches for p in scrapers)
        spent0 = dict(spent)
        parts: list[tuple[float, float, float]] = []
        for trial in range(1, trials + 1):
            await asyncio.sleep(rng.uniform(0.0, 1.0))  # a random phase against the probe rounds
            del escalated[:]
            await ask("arm")
            t0 = await ask("jump")
            try:
                async with asyncio.timeout(120):
                    while (got := await inbox.get())[0] != f"arrived {trial}":
                        pass
                out.append(got[1] - t0)
                made = ""
                if escalated:
                    screen, esc = escalated[0]
                    parts.append((screen - t0, esc - screen, got[1] - esc))
                    made = (f" (its screen started {screen - t0:+.2f} s after the jump, escalated "
                            f"{esc - screen:.2f} s later, written {got[1] - esc:.2f} s after that)")
                else:
                    made = " (not from a screen: a pass or a watch evaluated it)"
                overlapping = [b for b in bulk if b[0] < got[1] and b[0] + b[1] > t0]
                if overlapping:
                    made += f"; a bulk read of {overlapping[0][1]:.2f} s overlapped it"
                print(f"trial: {got[1] - t0:.2f} s{made}", file=sys.stderr, flush=True)
            except TimeoutError:
                # Missed: the world is reset all the same (a trial that skipped it left the queue at 25 and,
                # once the late write came, the target at 3: every later trial then had nothing to cross).
                print("trial: no scale write within 120 s", file=sys.stderr, flush=True)
            await ask("calm")
            await asyncio.sleep(1.5)
            await ask("shrink")
            # Each trial is an independent crossing from a steady state (see ``measure``).
            rt.controller.states.clear()
            await asyncio.sleep(1.5)
            # Beyond the trial's own (its escalation, and the watch events of its write and its reset): say so.
            full_now, reads_now = counts(tel.full_evaluations), counts(tel.view_reads)
            # The trial's own: its escalation, the watch events of its write and its reset, their target reads.
            own = {"probe": 1, "watch": 3, "dropped_target": 3}
            if any(v - full_t.get(k, 0.0) > own.get(k, 0) for k, v in full_now.items()) or any(
                    v - reads_t.get(k, 0.0) > own.get(k, 0) for k, v in reads_now.items()):
                print(f"  after trial {trial} ({time.monotonic() - wall0:.0f} s in): full evaluations "
                      f"{moved(full_now, full_t)}; target views read: {moved(reads_now, reads_t)}",
                      file=sys.stderr, flush=True)
            full_t, reads_t = full_now, reads_now
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        screens = rt.controller.screens - screens0
        # CPU per screen counts everything the process did (periodic passes, escalations, the trials' writes)
        # over the screens: an upper bound on a probe's own cost.
        print(f"controller process during the trials: {cpu:.1f} s CPU in {wall:.1f} s wall "
              f"({cpu / wall:.2f} of a core); {screens} screens ({screens / wall:.0f}/s, "
              f"{1000 * cpu / max(1, screens):.2f} ms CPU per screen); "
              f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; "
              f"{sum(p.fetches for p in scrapers) - fetches0} scrapes, "
              f"{sum(p.connections for p in scrapers)} connections opened in all",
              file=sys.stderr, flush=True)
        print("of the screens, " + ", ".join(f"{k} {v - paths0[k]}" for k, v in paths.items() if k != "evaluated")
              + f"; evaluations run in full (passes, escalations, watches): {paths['evaluated'] - paths0['evaluated']}",
              file=sys.stderr, flush=True)
        # The re-reads of vouched views (``viewResyncSeconds``: a share each round), and those found wrong.
        resynced = rt.observer.resyncs - resyncs0
        print(f"vouched views read again: {resynced} ({resynced / wall:.1f}/s); found wrong: "
              f"{rt.telemetry.view_drift._value.get():.0f}", file=sys.stderr, flush=True)
        print(f"full evaluations by why (autoscaler_full_evaluations): {moved(counts(tel.full_evaluations), full0)}; "
              f"target views read by why (autoscaler_target_view_reads): {moved(counts(tel.view_reads), reads0)}",
              file=sys.stderr, flush=True)
        watches = watch_counts(rt)
        print("watches, lists and failures during the trials: " + ", ".join(
            f"{path} {lists - watches0.get(path, (0, 0))[0]}/{fails - watches0.get(path, (0, 0))[1]}"
            for path, (lists, fails) in sorted(watches.items())), file=sys.stderr, flush=True)
        if bulk:
            print(f"bulk reads of target views: {len(bulk)}, median {statistics.median(b[1] for b in bulk):.2f} s, "
                  f"max {max(b[1] for b in bulk):.2f} s; views read: {', '.join(str(b[2]) for b in bulk)}",
                  file=sys.stderr, flush=True)
        if parts:
            print(f"of the {len(parts)} reactions found by a screen, medians: to the screen's start "
                  f"{statistics.median(p[0] for p in parts):+.2f} s (max {max(p[0] for p in parts):+.2f}), screen to "
                  f"escalation {statistics.median(p[1] for p in parts):.2f} s (max {max(p[1] for p in parts):.2f}), "
                  f"escalation to the write {statistics.median(p[2] for p in parts):.2f} s "
                  f"(max {max(p[2] for p in parts):.2f})", file=sys.stderr, flush=True)
            # The floor of the figure: a crossing at a random phase waits for its pod's next scrape, which comes
            # once a probe period while rounds are shorter than the period (else once a round): the wait to the
            # screen's start is spread over [0, period], so p99 of 30 trials is >= ~0.97 of the period plus the
            # screen, the escalation and the write, however cheap the round.
            cycle = max(fast_poll_s, statistics.median(r[1] for r in rounds)) if rounds else fast_poll_s
            print(f"probe period {fast_poll_s:.2f} s, rounds start every {cycle:.2f} s (median): waits to the screen's "
                  f"start over that cycle: median {statistics.median(p[0] for p in parts) / cycle:.2f}, max "
                  f"{max(p[0] for p in parts) / cycle:.2f}", file=sys.stderr, flush=True)
        if breakdown and screens:
            print("process CPU per screen: " + ", ".join(
                f"{k} {1e6 * (v - spent0[k]) / screens:.0f} us" for k, v in spent.items())
                + f", the rest {1e6 * (cpu - sum(spent.values()) + sum(spent0.values())) / screens:.0f} us "
                  "(scrape client, event loop, planning, passes, escalations, collector)",
                file=sys.stderr, flush=True)
        full = [r for r in rounds if r[2] >= background]
        if full:
            print(f"probe rounds of >= {background} policies: {len(full)}; median wall "
                  f"{statistics.median(r[1] for r in full):.2f} s, max {max(r[1] for r in full):.2f} s; median "
                  f"process CPU {statistics.median(r[0] for r in full):.2f} s "
                  f"({1e6 * statistics.median(r[0] / r[2] for r in full):.0f} us per screened policy)",
                  file=sys.stderr, flush=True)
            # How the periodic stands spread over the rounds (policies due together stand together) and what
            # the rounds carrying the most of them cost.
            stands = sorted(float(r[3]) for r in full)
            cpus = sorted(r[0] for r in full)
            print(f"stands per round: median {statistics.median(stands):.0f}, p90 {pct(stands, 90):.0f}, "
                  f"max {stands[-1]:.0f}; round process CPU p90 {pct(cpus, 90):.2f} s, max {cpus[-1]:.2f} s; "
                  f"round wall p90 {pct(sorted(r[1] for r in full), 90):.2f} s",
                  file=sys.stderr, flush=True)
    finally:
        for c in {api_conn, pods_conn}:
            loop.remove_reader(c.fileno())
        stop.set()
        await task
        await api.close()
    return out


async def main_many(trials: int, background: int, conns: tuple[Connection, Connection], urls: tuple[str, str, str],
                    warmup_s: float, breakdown: bool = False,
                    chunking: tuple[int, int] | None = None, fast_poll_s: float = 1.0) -> dict[str, list[float]]:
    logs.configure("error")
    with tempfile.TemporaryDirectory() as d:
        values = await measure_apart(conns, urls, background, trials, random.Random(20261130), Path(d), warmup_s,
                                     breakdown, chunking, fast_poll_s)
    return {f"direct, with {background} other policies": values}


def run_many(trials: int, background: int, warmup_s: float, breakdown: bool = False,
             chunking: tuple[int, int] | None = None, one_child: bool = False,
             fast_poll_s: float = 1.0) -> dict[str, list[float]]:
    """The API server and the pods in two child processes (in a cluster they are on other machines, and apart
    from each other: on one event loop, the API server's encoding of each page of a bulk list of 5,000
    Deployments held the pods' answers to the probe round, whose rounds then took 2.3 s wall for 0.7 s of
    the controller's CPU, 2026-12-07 04:38 UTC), or, with ``one_child``, in one (the layout until then)."""
    roles = ["both"] if one_child else ["api", "pods"]
    pipes = [mp.Pipe() for _ in roles]
    procs = [mp.get_context("fork").Process(target=serve_world, args=(child, background, role), daemon=True)
             for (_, child), role in zip(pipes, roles, strict=True)]
    for proc in procs:
        proc.start()
    try:
        got: list[Any] = [parent.recv() for parent, _ in pipes]
        kube_url = next(g[0] for g in got if g[0] is not None)
        tgi_url, exporter = next((g[1], g[2]) for g in got if g[1] is not None)
        conns = (pipes[0][0], pipes[-1][0])  # the API server's, the pods'
        return asyncio.run(main_many(trials, background, conns, (kube_url, tgi_url, exporter), warmup_s, breakdown,
                                     chunking, fast_poll_s))
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(10)


def hpa_model(write_latencies: list[float], rng: random.Random, draws: int = 10_000) -> list[float]:
    """Time to the next 15 s scrape, then to the next 15 s sync (independent phases), then one API write."""
    return [
        rng.uniform(0, HPA_SCRAPE_S) + rng.uniform(0, HPA_SYNC_S) + rng.choice(write_latencies)
        for _ in range(draws)
    ]


async def main_async(trials: int) -> dict[str, list[float]]:
    logs.configure("error")
    rng = random.Random(20261130)
    kube = Emulator()
    await kube.start()
    kube.add(objects.deployment(replicas=1))
    tgi = TgiMetrics()
    await tgi.start()
    results: dict[str, list[float]] = {}
    write_latency: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            direct = tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False)
            results["direct (pods source, 1 s probe)"] = await measure(kube, tgi, direct, trials, rng, tmp / "a")
            # The API write alone: the scale write's round trip, for the HPA model.
            api = client.ApiClient(client.Configuration(host=kube.url))
            scales = ScaleClient(api)
            ref = TargetRef(TargetKind.DEPLOYMENT, "tgi-gemma-deployment", "llm")
            loop = asyncio.get_running_loop()
            for i in range(50):
                read = await scales.read(ref)
                t0 = loop.time()
                await scales.write(ref, 1 + i % 2, read=read)
                write_latency.append(loop.time() - t0)
            await api.close()
            kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 1})
            if shutil.which("prometheus"):
                (tmp / "b").mkdir()
                async with prometheus(tgi.url, tmp / "b") as url:
                    via_prom = tgi_policy(source=f"{{type: prometheus, url: '{url}'}}", capacity=False).replace(
                        "preset: tgi.queue_size", "query: sum(tgi_queue_size)"
                    )
                    results["prometheus, 1 s scrape"] = await measure(kube, tgi, via_prom, trials, rng, tmp / "c")
            else:
                print("prometheus binary not found: skipping the Prometheus pipeline", file=sys.stderr)
    finally:
        await tgi.stop()
        await kube.stop()
    results["HPA-style model (15 s scrape + 15 s sync)"] = hpa_model(write_latency, rng)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--background", type=int, default=0, metavar="N",
                        help="other policies the controller holds (each probed, each its own pod endpoint)")
    parser.add_argument("--warmup", type=float, default=30.0, metavar="S",
                        help="with --background: seconds before the first trial (loading, first evaluations)")
    parser.add_argument("--breakdown", action="store_true",
                        help="with --background: also split the process CPU per screen (parse, combine, screen, rest)")
    parser.add_argument("--probe-chunk", type=int, nargs=2, default=None, metavar=("SIZE", "PARALLEL"),
                        help="with --background: the probe round's chunk size and chunks in flight "
                             "(default: the controller's, 250 and 2)")
    parser.add_argument("--one-child", action="store_true",
                        help="with --background: the API server and the pods in one child process, on one event loop "
                             "(the layout until 2026-12-07; its bulk target reads held the pods' answers)")
    default_poll = ControllerConfig.model_fields["fast_poll_seconds"].default
    parser.add_argument("--fast-poll", type=float, default=default_poll, metavar="S",
                        help=f"with --background: the controller's fastPollSeconds, the probe period (default "
                             f"{default_poll:g}, the controller's default): a crossing waits up to one period for its "
                             "pod's next scrape")
    args = parser.parse_args()
    if args.background:
        chunking = None if args.probe_chunk is None else (args.probe_chunk[0], args.probe_chunk[1])
        results = run_many(args.trials, args.background, args.warmup, args.breakdown, chunking, args.one_child,
                           args.fast_poll)
    else:
        results = asyncio.run(main_async(args.trials))
    print(f"{'pipeline':45} {'n':>6} {'p50 s':>8} {'p99 s':>8} {'max s':>8}")
    for name, values in results.items():
        print(f"{name:45} {len(values):6d} {statistics.median(values):8.2f} {pct(values, 99):8.2f} "
              f"{max(values):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
