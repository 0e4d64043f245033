"""One controller, 1,000 targets and 500 training workloads: CPU per tick and memory.

The emulated API server (``tests.kube.emulator``) runs in a **separate process** so that the CPU measured here
(``time.process_time`` of this process) is the controller's alone: the real kubernetes_asyncio client,
JSON (de)serialisation, the core's ``decide`` for every policy, Kueue arbitration, metrics and logs (at
``warning``). The cluster: 50 namespaces × 20 Deployments (1,000 policies, one per target) and 10 fine-tune
Jobs with their Workloads per namespace (500), one ClusterQueue per namespace; half of the policies
(500) have ``capacity`` and ``preemptible`` (they read Jobs, Workloads and the ClusterQueue each tick).
Signals come from an in-process source answering at once (the cost of scraping 1,000 servers is the
sources' benchmark, not this one); it counts the ``read`` calls it gets (one per tick when the pass is
batched). One tick = one ``run_once`` over all policies, as ``--once`` does. The emulator counts the API
requests it answers (reported per tick).

Run: ``python -m bench.controller_scale [--ticks N] [--targets N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path

from kubernetes_asyncio import client

from autoscaler.controller import logs
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from autoscaler.core.model import SignalReading
from autoscaler.sources.base import Readings, SignalRequest
from tests.kube import objects
from tests.kube.emulator import Emulator

NAMESPACES = 50
JOBS_PER_NAMESPACE = 10


def serve_cluster(conn: Connection, targets: int) -> None:
    """Child process: build the cluster in an emulator, send its URL, serve until terminated."""

    async def main() -> None:
        kube = Emulator()
        per_ns = targets // NAMESPACES
        for n in range(NAMESPACES):
            ns = f"team-{n:02d}"
            kube.add(objects.cluster_queue(f"cq-{n:02d}", nominal="64"))
            kube.add(objects.local_queue("lq", ns, f"cq-{n:02d}"))
            for t in range(per_ns):
                kube.add(objects.deployment(f"llm-{t:02d}", ns, replicas=2))
            for j in range(JOBS_PER_NAMESPACE):
                job = kube.add(objects.job(f"finetune-{j}", ns))
                kube.add(objects.workload(f"job-finetune-{j}-abcde", ns, owner=job, priority=10 + j))
        url = await kube.start()
        conn.send(url)

        def answer() -> None:
            conn.recv()  # "count": how many API requests so far
            conn.send(len(kube.requests))

        asyncio.get_running_loop().add_reader(conn.fileno(), answer)
        await asyncio.Event().wait()

    asyncio.run(main())


def policies_text(targets: int) -> dict[str, str]:
    """One file per namespace, one policy per Deployment; even-numbered targets arbitrate with training."""
    files: dict[str, str] = {}
    per_ns = targets // NAMESPACES
    for n in range(NAMESPACES):
        ns = f"team-{n:02d}"
        docs = []
        for t in range(per_ns):
            capacity = (
                f"  capacity: {{clusterQueue: cq-{n:02d}, resource: nvidia.com/gpu, perReplica: 2}}\n"
                f"  preemptible: [{{namespace: {ns}, selector: {{matchLabels: {{app: finetune-job}}}}}}]\n"
                if t % 2 == 0 else ""
            )
            docs.append(
                "apiVersion: autoscaler.dev/v1alpha1\nkind: ScalingPolicy\n"
                f"metadata: {{name: {ns}-llm-{t:02d}}}\n"
                "spec:\n"
                f"  target: {{kind: Deployment, name: llm-{t:02d}, namespace: {ns}}}\n"
                "  minReplicas: 1\n  maxReplicas: 8\n"
                "  source: {type: pods, port: 8000}\n"
                "  signals: [{name: queue, preset: tgi.queue_size}]\n"
                "  policy: {type: queue, work: [queue], capacityPerReplica: 10}\n" + capacity
            )
        files[f"{ns}.yaml"] = "---\n".join(docs)
    return files


class ConstantSource:
    """Answers every request at once with a fresh sample (queue 15: two replicas wanted, as they have)."""

    def __init__(self, clock: LoopClock) -> None:
        self.clock = clock
        self.reads = 0

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        self.reads += 1
        now = self.clock.wall()
        return {r.key: SignalReading(15.0, now, "synthetic") for r in requests}

    async def aclose(self) -> None:
        return None


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def api_requests(conn: Connection) -> int:
    """How many API requests the emulator (in the child process) has answered so far."""
    conn.send("count")
    count: int = conn.recv()
    return count


async def run(url: str, targets: int, ticks: int, conn: Connection) -> None:
    logs.configure("warning")
    with tempfile.TemporaryDirectory() as d:
        for name, text in policies_text(targets).items():
            (Path(d) / name).write_text(text)
        conf = client.Configuration(host=url)
        conf.connection_pool_maxsize = 64  # the Controller evaluates up to 64 policies at once
        api = client.ApiClient(conf)
        clock = LoopClock()
        cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "logLevel": "warning"})
        rss0 = rss_mib()
        source = ConstantSource(clock)
        rt = Runtime(api=api, config=cfg, policies_dir=Path(d), clock=clock, namespace="autoscaler",
                     source=source)
        t0, c0 = time.perf_counter(), time.process_time()
        result = rt.store.reload()
        load_wall, load_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert not result.rejected, result.rejected[0].message
        print(f"policies: {len(rt.store.policies)} loaded in {load_wall:.2f} s (CPU {load_cpu:.2f} s)")
        walls, cpus, calls = [], [], []
        for i in range(ticks):
            # Ticks are a period (15 s) apart in a cluster: no tick reuses the previous one's training read.
            rt.training.invalidate()
            n0, r0 = api_requests(conn), source.reads
            t0, c0 = time.perf_counter(), time.process_time()
            ok = await rt.controller.run_once()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            calls.append(api_requests(conn) - n0)
            print(f"tick {i}: ok={ok} wall {walls[-1]:.2f} s, controller CPU {cpus[-1]:.2f} s, "
                  f"RSS {rss_mib():.0f} MiB, {calls[-1]} API requests, {source.reads - r0} signal read(s)")
        await api.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{targets} targets, {NAMESPACES * JOBS_PER_NAMESPACE} training workloads, {ticks} ticks")
    print(f"controller CPU per tick: median {statistics.median(cpus):.2f} s "
          f"({statistics.median(cpus) / targets * 1000:.2f} ms per policy); wall per tick median "
          f"{statistics.median(walls):.2f} s (includes the emulator answering in its own process)")
    print(f"API requests per tick: median {statistics.median(calls):.0f}")
    print(f"memory: RSS {rss_mib():.0f} MiB now, peak {peak:.0f} MiB (before the controller: {rss0:.0f} MiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument("--targets", type=int, default=1000)
    args = parser.parse_args()
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=serve_cluster, args=(child, args.targets), daemon=True)
    proc.start()
    try:
        url = parent.recv()
        asyncio.run(run(url, args.targets, args.ticks, parent))
    finally:
        proc.terminate()
        proc.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
