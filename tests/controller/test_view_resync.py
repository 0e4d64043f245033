"""Bounded staleness of the target views a live watch vouches for (``viewResyncSeconds``): each is read again
within that long, a share of them each probe round (never all at once); a re-read that finds a vouched view
different from the target, with no event to explain it, is counted and logged; and the record of changes a read
may be overtaken by (``PolicyObserver._changed_at``) keeps only what a read in flight still needs.

Against the emulated API server (real streams, resourceVersions, bookmarks) and a stand-in TGI server; the
controller's clock is explicit (``ManualClock``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from autoscaler.controller.observer import RESYNC_STEP_MAX_S, WATCH_SILENCE_S, Watcher, pods_watch
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, TgiMetrics, replicas, runtime_of_many, stop_watching
from tests.controller.test_watched_views import SPEC, heard, probe, until, watched
from tests.kube.emulator import Emulator

__all__ = ["watched"]  # the fixture, shared with test_watched_views


async def live(kube: Emulator, r: Runtime, clock: ManualClock) -> None:
    """Both watches of ``llm`` (targets, pods) heard at the clock's time: they keep vouching."""
    watcher, pods = r.watchers[SPEC][0], r.watchers[pods_watch("llm")][0]
    await heard(kube, watcher, clock)
    await until(lambda: pods.heard_at == clock.monotonic())
    assert "Deployment/llm" in r._live_watches()


async def round_and_resync(r: Runtime) -> None:
    """A probe round, its escalations and the background re-read it started."""
    await probe(r)
    if r.controller._resyncing is not None:
        await r.controller._resyncing


def drifts(r: Runtime) -> float:
    return float(r.telemetry.view_drift._value.get())


async def test_a_vouched_view_kept_wrong_heals_within_view_resync_seconds_and_is_reported(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher], tgi: TgiMetrics
) -> None:
    """stall1's race left a view at 3 replicas while the target was at 1, vouched for by live watches: every
    screen on a queue of 25 (3 replicas' worth) found 3 = 3 and the crossing was never written. Re-read within
    ``viewResyncSeconds``, the view heals, the crossing is written, and the wrong view is reported once no event
    explains it (our own write's event, after the re-read, does not)."""
    r, clock, _ = watched
    resync = 120.0
    r.observer.resync_s = resync
    kept = r.observer.views["tgi-gemma"]
    assert kept.view.replicas.spec == 1
    wrong = kept.view._replace(replicas=dataclasses.replace(kept.view.replicas, spec=3, ready=3))
    r.observer.views["tgi-gemma"] = kept._replace(view=wrong)
    tgi.queue = 25
    start, step = clock.monotonic(), 10.0
    written_after: float | None = None
    with capture_logs() as logs:
        while clock.monotonic() - start < resync + WATCH_SILENCE_S + 3 * step:
            clock.advance(step)
            await live(kube, r, clock)
            await round_and_resync(r)
            if written_after is None and replicas(kube) == 3:
                written_after = clock.monotonic() - start
    # Not before the bound was nearly reached (nothing else reads a vouched view), and within it plus two rounds
    # (the first round only starts the count; the re-read's round may screen before the re-read ends).
    assert written_after is not None
    assert resync - step <= written_after <= resync + 2 * step
    assert drifts(r) == 1
    [line] = [e for e in logs if e["event"] == "view_drift"]
    assert line["policy"] == "tgi-gemma"
    assert line["differed"] == {"spec": "3 -> 1", "ready": "3 -> 1"}
    assert line["log_level"] == "warning"
    assert r.telemetry.view_resyncs._value.get() >= 1


async def test_a_change_whose_event_comes_after_the_re_read_is_not_reported(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher], tgi: TgiMetrics
) -> None:
    """A change made just before a re-read whose event reaches the watch just after it (the watch's lag) makes
    the re-read find the vouched view different, but the event then delivers the very state the re-read saw
    (its resourceVersion): no bug, nothing reported. The lag is made by holding the target's events back."""
    r, clock, _ = watched
    r.observer.resync_s = 10.0
    policy = r.store.policies["tgi-gemma"]
    held: list[tuple[list[str], dict[str, Any] | None]] = []
    inner = r.observer.changed

    def late(names: Any, obj: dict[str, Any] | None) -> None:
        held.append((list(names), obj))

    r.observer.changed = late  # type: ignore[method-assign]
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2},
                status={"replicas": 2, "readyReplicas": 2})
    await until(lambda: bool(held))
    clock.advance(20.0)
    await live(kube, r, clock)
    await r.observer.resync([policy])  # the view (1) is still vouched for: the event has not come
    assert r.observer.views["tgi-gemma"].view.replicas.spec == 2
    r.observer.changed = inner  # type: ignore[method-assign]
    for names, obj in held:
        r.observer.changed(names, obj)  # the event comes after the re-read
    clock.advance(WATCH_SILENCE_S + 1.0)
    await live(kube, r, clock)
    assert r.observer.drifted() == []
    assert r.observer._suspects == {}


async def many_watched(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path, n: int
) -> tuple[Runtime, ManualClock]:
    """``n`` policies in one namespace, their targets and pods watched, each evaluated once after the watches
    synced (their views vouched for), probed between periods."""
    clock = ManualClock()
    r = runtime_of_many(kube, kube_client, tmp_path, clock, endpoint=tgi.url, n=n)
    r.watchers.clear()
    r.sync_watches()
    await asyncio.wait_for(r.watchers[SPEC][0].synced.wait(), 10)
    await until(lambda: "Deployment/llm" in r._live_watches())
    tgi.queue = 5
    assert await r.controller.run_once()
    for name in r.store.policies:
        r.controller._due[name] = clock.monotonic() + 10_000  # not due: probes only screen
    return r, clock


@pytest.fixture
async def many(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> AsyncIterator[tuple[Runtime, ManualClock]]:
    r, clock = await many_watched(kube, kube_client, tgi, tmp_path, 20)
    yield r, clock
    await stop_watching(r)


async def test_the_re_reads_are_spread_over_the_rounds_and_reach_every_view_within_the_bound(
    kube: Emulator, many: tuple[Runtime, ManualClock]
) -> None:
    """20 vouched views, ``viewResyncSeconds`` 20, a round a second: one re-read a round (never more than its
    share, ceil(N x period / resync)), the oldest first, so every view is read again within 20 s and a round; after
    a stall of 100 s a round reads at most ``RESYNC_STEP_MAX_S``'s share, not all 20 at once."""
    r, clock = many
    n, resync = 20, 20.0
    r.observer.resync_s = resync
    read_at = {name: kept.read_at for name, kept in r.observer.views.items()}
    assert len(read_at) == n
    per_round: list[int] = []
    oldest: list[float] = []
    for i in range(3 * int(resync)):
        clock.advance(1.0)
        if i % 20 == 0:
            await live(kube, r, clock)
        before = r.observer.resyncs
        await round_and_resync(r)
        per_round.append(r.observer.resyncs - before)
        oldest.append(clock.monotonic() - min(kept.read_at for kept in r.observer.views.values()))
    share = math.ceil(n * 1.0 / resync)
    assert max(per_round) <= share
    assert sum(per_round[1:]) >= 2 * n  # every view, twice over (the first round only starts the count)
    assert max(oldest[int(resync) + 1:]) <= resync + 1.0
    # A stall (rounds held for 100 s): the next round catches up at RESYNC_STEP_MAX_S's pace, not in one bulk read.
    clock.advance(100.0)
    await live(kube, r, clock)
    before = r.observer.resyncs
    await round_and_resync(r)
    assert 0 < r.observer.resyncs - before <= math.ceil(n * RESYNC_STEP_MAX_S / resync) < n


async def test_changed_at_keeps_only_the_changes_a_read_in_flight_can_be_overtaken_by(
    kube: Emulator, many: tuple[Runtime, ManualClock]
) -> None:
    """``_changed_at`` held one entry per policy whose target ever changed, removed policies too. Now a change
    stays only while a read that started before it is in flight (stall1's race needs exactly that one), and goes
    once no such read is left."""
    r, _ = many
    obs = r.observer
    policies = [r.store.policies[f"p{i}"] for i in range(3)]
    gate = asyncio.Event()
    inner = obs.targets.observe_many

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await inner(*args, **kwargs)

    obs.targets.observe_many = slow  # type: ignore[method-assign]
    reading = asyncio.create_task(obs.read_targets(policies[:1]))  # R1 starts
    await asyncio.sleep(0)
    for i in range(3):
        kube.modify("apps/v1", "Deployment", f"t{i}", "llm", spec={"replicas": 2})
    await until(lambda: len(obs._changed_at) == 3)
    obs.targets.observe_many = inner  # type: ignore[method-assign]
    await obs.read_targets(policies)  # R2, after the changes, ends first: R1 may still be overtaken by them
    assert set(obs._changed_at) == {"p0", "p1", "p2"}
    gate.set()
    await reading
    assert obs.views["p0"].view.replicas.spec == 2  # R2's view; R1's (older) not kept
    assert obs._changed_at == {}  # no read in flight started before them
    # A removed policy's change goes the same way.
    kube.modify("apps/v1", "Deployment", "t5", "llm", spec={"replicas": 3})
    await until(lambda: "p5" in obs._changed_at)
    (r.policies_dir / "many.yaml").write_text((r.policies_dir / "many.yaml").read_text().split("---\n")[0])
    r.store.reload()
    await obs.read_targets(policies[:1])
    assert obs._changed_at == {}
