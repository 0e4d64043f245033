"""Target views kept by the target watch: a live watch's event updates the view (the target from the event, its
pods listed), a view read since the watch began is not read again for its age, and a watch that is broken,
silent or relisting vouches for nothing (its views age as if unwatched and are read again).

Against the emulated API server (resourceVersions, 410 Gone, bookmarks as the watch cache sends them) and a
stand-in TGI server; the controller's clock is explicit (``ManualClock``), the streams are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.observer import WATCH_SILENCE_S, Watcher, WatchSpec, pods_watch
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, TgiMetrics, deployment_runtime, replicas, stop_watching
from tests.kube import objects
from tests.kube.emulator import Emulator

TARGET = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment"
COLLECTION = "/apis/apps/v1/namespaces/llm/deployments"
PODS = "/api/v1/namespaces/llm/pods"
SPEC = WatchSpec("apps", "v1", "deployments", "llm")


async def until(what: Callable[[], bool]) -> None:
    """Wait (real time, the streams are real) until ``what`` holds."""
    async with asyncio.timeout(10):
        while not what():
            await asyncio.sleep(0.01)


@pytest.fixture
async def watched(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> AsyncIterator[tuple[Runtime, ManualClock, Watcher]]:
    """A controller whose one policy was evaluated once, with its target watch running and synced."""
    clock = ManualClock()
    r = deployment_runtime(kube, kube_client, tmp_path, clock, endpoint=tgi.url)
    r.watchers.clear()
    tgi.queue = 5
    r.sync_watches()
    watcher = r.watchers[SPEC][0]
    await asyncio.wait_for(watcher.synced.wait(), 10)
    assert await r.controller.run_once()
    r.controller._due["tgi-gemma"] = clock.monotonic() + 1000  # probed, not due
    yield r, clock, watcher
    await stop_watching(r)


def reads(kube: Emulator) -> list[str]:
    """The paths of the target and pod reads since the log was last cleared."""
    return [q.path for q in kube.requests if q.method == "GET" and q.path in (TARGET, COLLECTION, PODS)]


async def probe(r: Runtime) -> None:
    await r.controller.probe_round()
    await asyncio.gather(*list(r.controller._escalations))


async def heard(kube: Emulator, watcher: Watcher, clock: ManualClock) -> None:
    """A bookmark (as the API server sends one a minute) reaches the watcher at the clock's time."""
    kube.bookmark()
    await until(lambda: watcher.heard_at == clock.monotonic())


async def test_a_live_watch_keeps_the_view_and_its_event_updates_it(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher], tgi: TgiMetrics
) -> None:
    r, clock, watcher = watched
    assert watcher.vouches(clock.monotonic()) is not None
    # Older than two periods (30 s), no event since: a live watch says it is as read; nothing is read again.
    clock.advance(60.0)
    await heard(kube, watcher, clock)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == []
    # The target changes: the event carries it; the next read lists only its pods, and the view shows the change.
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2},
                status={"replicas": 2, "readyReplicas": 1})
    tgi.queue = 15  # 2 replicas' worth: the screens hold (an escalation would read the target itself)
    await until(lambda: "tgi-gemma" not in r.observer.views)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == [PODS]  # the target itself came with the event
    view = r.observer.views["tgi-gemma"].view
    assert (view.replicas.spec, view.replicas.ready) == (2, 1)
    # And that view is kept from then on, however old, while the watch stays live.
    clock.advance(60.0)
    await heard(kube, watcher, clock)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == []


async def break_by_failure(kube: Emulator, watcher: Watcher, clock: ManualClock) -> None:
    failures = watcher.failures
    kube.inject(500, COLLECTION, times=1000, method="GET")  # the stream and its reconnects fail
    kube.drop_watches()
    await until(lambda: watcher.failures > failures)
    clock.advance(60.0)
    kube.clear_faults()


async def break_by_silence(kube: Emulator, watcher: Watcher, clock: ManualClock) -> None:
    clock.advance(WATCH_SILENCE_S + 1.0)  # no event, no bookmark: a hung stream, as far as anyone can tell


async def break_by_relist(kube: Emulator, watcher: Watcher, clock: ManualClock) -> None:
    relists = watcher.relists
    clock.advance(60.0)
    kube.drop_watches()
    kube.add(objects.deployment("another", "llm"))  # history the watch would resume from, then compacted away
    kube.compact()  # the resume gets 410 Gone: a fresh list, in which our target is as it was (no event)
    await until(lambda: watcher.relists > relists)


@pytest.mark.parametrize("broken", [
    pytest.param(break_by_failure, id="stream-failed"),
    pytest.param(break_by_silence, id="stream-silent"),
    pytest.param(break_by_relist, id="relisted-after-410"),
])
async def test_a_broken_watch_vouches_for_no_old_view(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher],
    broken: Callable[[Emulator, Watcher, ManualClock], Awaitable[None]],
) -> None:
    r, clock, watcher = watched
    await broken(kube, watcher, clock)
    # The view is 60+ s old (two periods: 30 s) and no live watch stands for it: it is read again.
    kube.requests.clear()
    await probe(r)
    assert TARGET in reads(kube) or COLLECTION in reads(kube)
    assert r.observer.views["tgi-gemma"].read_at == clock.monotonic()


async def test_a_view_is_unknown_when_the_watch_is_broken_and_the_target_cannot_be_read(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher]
) -> None:
    r, clock, watcher = watched
    await break_by_failure(kube, watcher, clock)
    kube.inject(500, TARGET, times=1000, method="GET")
    await probe(r)
    assert "tgi-gemma" not in r.observer.views  # not silently old: no view, the screen had nothing to use
    assert "tgi-gemma" not in r.controller._kept


async def test_a_read_started_before_a_watched_change_is_not_kept(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher]
) -> None:
    """A read in flight when the change arrives may have seen the target before it: kept, a live watch would
    then vouch for it however old (no event comes again)."""
    r, _clock, _watcher = watched
    obj = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    policy = r.store.policies["tgi-gemma"]
    inner = r.observer.targets.observe

    async def slow(cp: object) -> object:
        view = await inner(policy)
        r._on_watch_event(SPEC, "MODIFIED", {**obj, "spec": {**obj["spec"], "replicas": 3}})
        return view

    r.observer.targets.observe = slow  # type: ignore[method-assign,assignment]
    await r.observer.observe(policy)
    assert "tgi-gemma" not in r.observer.views


async def test_a_read_overtaken_by_a_change_is_not_kept_after_a_later_read_ended_first(
    kube: Emulator, watched: tuple[Runtime, ManualClock, Watcher], tgi: TgiMetrics
) -> None:
    """A read that started before a change and ends after a later read (one started after the change, which
    kept what it read and so closed the change) keeps nothing either: kept, its older view replaced the newer
    one, and the live watch vouched for it however old (no event comes again). The safety property: a crossing
    on a target whose count moved back and forth during a slow read is still written.

    The sequence (as in the reaction bench's stalled run, 2026-12-07 10:42 UTC: the count written 1 -> 3, then
    set back to 1 behind the controller's back): R1 reads the target at 3 and is slow; the target goes back to
    1 (an event); a probe round's read R2 of the target at 1 ends first; R1 ends. Before the fix, R1's view (3)
    was kept and vouched for: every screen on queue 25 (3 replicas' worth) found 3 = 3, quiet, and nothing was
    ever written (a due screen stood as the periodic evaluation, which then read nothing afresh)."""
    r, clock, watcher = watched
    policy = r.store.policies["tgi-gemma"]
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 3})
    await until(lambda: "tgi-gemma" not in r.observer.views)  # the event dropped the view
    inner = r.observer.targets.observe

    async def slow(cp: object) -> object:
        view = await inner(policy)  # R1 read the target at 3
        seq = r.observer._seq
        kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 1})
        await until(lambda: r.observer._seq > seq)  # the event reached the observer
        await probe(r)  # R2: a probe round reads the target (at 1) and keeps it, ending before R1
        assert r.observer.views["tgi-gemma"].view.replicas.spec == 1
        return view

    r.observer.targets.observe = slow  # type: ignore[method-assign,assignment]
    await r.observer.observe(policy)  # R1 ends last
    r.observer.targets.observe = inner  # type: ignore[method-assign]
    assert r.observer.views["tgi-gemma"].view.replicas.spec == 1  # R2's view, not R1's older one
    # The crossing: 25 in the queue needs 3 replicas; the target has 1. It is written, however long the watch
    # stays live and however often the policy is screened.
    tgi.queue = 25
    pods = r.watchers[pods_watch("llm")][0]
    for _ in range(3):
        clock.advance(60.0)
        await heard(kube, watcher, clock)
        await until(lambda: pods.heard_at == clock.monotonic())
        assert "Deployment/llm" in r._live_watches()  # the target and pod watches still vouch
        await probe(r)
    assert replicas(kube) == 3
