"""Soak: one hour of virtual time with random (seeded) faults, the invariants checked every second, and the
controller's memory flat: tracemalloc traces the last 10 minutes (tracing the whole hour would make the run
~5x slower), and what ``autoscaler/`` code allocated then and still holds at the end must stay under
64 KiB; a leak of a few hundred bytes per evaluation (120 evaluations in 10 minutes) would exceed it.

Every 30 s of virtual time the fault of the next half minute is drawn: nothing, API 503s, a black hole,
slow answers, 409s, watches dropped, history compacted (410 on resume), or a service's metric source down /
NaN / stale / missing; and the load of one service changes. Invariants:
- health tells the truth: ``/healthz`` stays true (the loop never stalls, whatever the API does);
- no scale-down on unknown data: while a service's source is broken, its replica count never falls (an
  evaluation that read good data just before the break may still land: 25 s of grace, the pass deadline
  plus a margin);
- no double action: no two successful writes of the same count in a row to one target;
- the other policies keep being evaluated: every policy decides at least 80 times in the hour (a quiet hour
  at a 15 s period is 240).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import tracemalloc

import pytest

from tests.faults.harness import World, decisions, deployment_path, scale_puts

pytestmark = pytest.mark.looptime

SERVICES = 3
HOUR = 3600.0
GRACE_S = 25.0


def _autoscaler_bytes(snapshot: tracemalloc.Snapshot) -> int:
    ours = snapshot.filter_traces([tracemalloc.Filter(True, "*/autoscaler/*")])
    return sum(stat.size for stat in ours.statistics("filename"))


@pytest.mark.fault("soak-1h-random-faults")
@pytest.mark.timeout(300)
async def test_one_virtual_hour_of_random_faults(world: World) -> None:
    rng = random.Random(20261130)
    world.add_services(SERVICES, queue=15)
    rt = world.runtime(reloadPollSeconds=10)
    loop = asyncio.get_running_loop()
    broken_since: dict[int, float] = {}
    replicas_seen = {i: world.replicas(i) for i in range(SERVICES)}
    violations: list[str] = []
    written: dict[int, list[int]] = {i: [] for i in range(SERVICES)}
    traced = False
    try:
        async with world.running(rt):
            start = loop.time()
            next_fault = start
            while loop.time() - start < HOUR:
                now = loop.time()
                if now >= next_fault:
                    next_fault = now + 30.0
                    world.kube.clear_faults()
                    for i in list(broken_since):
                        world.signals.mode[f"svc-{i}"] = "ok"
                        broken_since.pop(i)
                    _draw(world, rng, broken_since, now)
                    _collect(world, written)
                    world.kube.clear_log()  # the emulator's log and history, not the controller's memory
                    world.kube.compact()
                if not rt.telemetry.healthy():
                    violations.append(f"t={now - start:.0f}: /healthz false")
                for i in range(SERVICES):
                    r = world.replicas(i)
                    since = broken_since.get(i)
                    if since is not None and now - since > GRACE_S and r < replicas_seen[i]:
                        violations.append(f"t={now - start:.0f}: svc-{i} scaled down {replicas_seen[i]}->{r} "
                                          "on unknown data")
                    replicas_seen[i] = r
                if not traced and now - start >= HOUR - 600:
                    tracemalloc.start(1)  # from here on: what is allocated and never freed is growth
                    traced = True
                await asyncio.sleep(1.0)
            world.kube.clear_faults()
        end = _autoscaler_bytes(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    _collect(world, written)
    assert violations == []
    for i, counts in written.items():
        assert len(counts) >= 4, f"svc-{i} was scaled during the hour"
        twice = [a for a, b in itertools.pairwise(counts) if a == b]
        assert twice == [], f"svc-{i}: the same count written twice in a row (double action): {counts}"
    for i in range(SERVICES):
        assert decisions(rt, f"svc-{i}") >= 80
    assert traced
    # Flat: of what autoscaler/ code allocated in the last 10 minutes, less than 64 KiB is still held.
    assert end < 64 * 1024, f"{end} bytes allocated by autoscaler/ in the last 10 minutes are still held"


def _draw(world: World, rng: random.Random, broken: dict[int, float], now: float) -> None:
    kube = world.kube
    i = rng.randrange(SERVICES)
    ns = f"/apis/apps/v1/namespaces/ns-{i}/*"
    fault = rng.choice(["none", "503", "black-hole", "slow", "409", "drop", "compact", "down", "nan", "stale",
                        "missing"])
    if fault == "503":
        kube.inject(503, ns, times=1000)
    elif fault == "black-hole":
        kube.black_hole(ns)
    elif fault == "slow":
        kube.slow(ns, rng.uniform(0.5, 6.0))
    elif fault == "409":
        kube.inject(409, deployment_path(i) + "/scale", method="PATCH", times=rng.randint(1, 6))
    elif fault == "drop":
        kube.drop_watches()
    elif fault == "compact":
        kube.compact()
        kube.drop_watches()
    elif fault in ("down", "nan", "stale", "missing"):
        world.signals.mode[f"svc-{i}"] = fault  # type: ignore[assignment]
        broken[i] = now
    # The load of one service moves (so scale-ups and scale-downs both happen during the hour).
    world.queue(rng.randrange(SERVICES), rng.choice([0.0, 5.0, 15.0, 25.0, 45.0]))


def _collect(world: World, written: dict[int, list[int]]) -> None:
    for i in range(SERVICES):
        written[i] += [r.body["spec"]["replicas"] for r in scale_puts(world.kube, i) if r.status == 200]
