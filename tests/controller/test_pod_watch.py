"""The pod watch: a pod's change that leaves its target's counts as they were (an annotation edited in place, a
pod not yet ready) drops the target views it touches, and a target watch vouches for a view only while the pod
watch of its namespace is live too (a view is its target and its pods).

Against the emulated API server (watches, bookmarks, ``410 Gone`` relists) and a stand-in TGI server; the
controller's clock is explicit (``ManualClock``), the streams are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.observer import POD_LOG_S, Watcher, WatchSpec, pods_watch
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, TgiMetrics, deployment_runtime, stop_watching
from tests.kube import objects
from tests.kube.emulator import Emulator

TARGET = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment"
COLLECTION = "/apis/apps/v1/namespaces/llm/deployments"
PODS = "/api/v1/namespaces/llm/pods"
SPEC = WatchSpec("apps", "v1", "deployments", "llm")
PORT = "prometheus.io/port"


async def until(what: Callable[[], bool]) -> None:
    """Wait (real time, the streams are real) until ``what`` holds."""
    async with asyncio.timeout(10):
        while not what():
            await asyncio.sleep(0.01)


def serving_pod(name: str, ip: str, port: str = "8000", labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = objects.pod(name, ip=ip, labels=labels)
    pod["metadata"]["annotations"] = {PORT: port}
    return pod


Watched = tuple[Runtime, ManualClock, Watcher, Watcher]


@pytest.fixture
async def watched(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> AsyncIterator[Watched]:
    """A controller whose one policy (a static endpoint: the pods only make the view) was evaluated once, with
    its target watch and its namespace's pod watch running and synced; the target has one serving pod."""
    clock = ManualClock()
    kube.add(serving_pod("tgi-0", "10.0.0.1"))
    r = deployment_runtime(kube, kube_client, tmp_path, clock, endpoint=tgi.url)
    r.watchers.clear()
    tgi.queue = 5
    r.sync_watches()
    assert pods_watch("llm").path == PODS
    target, pods = r.watchers[SPEC][0], r.watchers[pods_watch("llm")][0]
    await asyncio.wait_for(target.synced.wait(), 10)
    await asyncio.wait_for(pods.synced.wait(), 10)
    assert await r.controller.run_once()
    r.controller._due["tgi-gemma"] = clock.monotonic() + 1000  # probed, not due
    yield r, clock, target, pods
    await stop_watching(r)


def reads(kube: Emulator) -> list[str]:
    """The target and pod reads (not the watches' lists and streams) since the log was last cleared."""
    return [q.path for q in kube.requests
            if q.method == "GET" and (q.path == TARGET or (q.path == COLLECTION and "watch" not in q.query)
                                      or (q.path == PODS and "labelSelector" in q.query))]


async def probe(r: Runtime) -> None:
    await r.controller.probe_round()
    await asyncio.gather(*list(r.controller._escalations))


async def heard(kube: Emulator, clock: ManualClock, *watchers: Watcher) -> None:
    """A bookmark (as the API server sends one a minute) reaches the watchers at the clock's time."""
    kube.bookmark()
    await until(lambda: all(w.heard_at == clock.monotonic() for w in watchers))


def urls(r: Runtime) -> list[str | None]:
    return [p.url for p in r.observer.views["tgi-gemma"].view.pods]


async def test_a_pod_only_change_drops_the_view_and_the_next_read_sees_it(
    kube: Emulator, watched: Watched
) -> None:
    """The gap the pod watch closes: the metrics port annotation edited in place changes no count of the target,
    so no target event comes; the view the target watch vouches for kept the old scrape address."""
    r, clock, target, pods = watched
    assert urls(r) == ["http://10.0.0.1:8000/metrics"]
    clock.advance(60.0)  # older than two periods (30 s): kept only because both watches vouch for it
    await heard(kube, clock, target, pods)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == []
    kube.modify("v1", "Pod", "tgi-0", "llm", metadata={"annotations": {PORT: "9000"}})
    await until(lambda: "tgi-gemma" not in r.observer.views)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == [TARGET, PODS]
    assert urls(r) == ["http://10.0.0.1:9000/metrics"]
    # Read since both watches began, no change since: kept again, however old.
    clock.advance(60.0)
    await heard(kube, clock, target, pods)
    kube.requests.clear()
    await probe(r)
    assert reads(kube) == []


@pytest.mark.parametrize(("pod", "touches"), [
    pytest.param(lambda: objects.pod("tgi-1", ready=False), True, id="a-new-pod-its-selector-matches"),
    pytest.param(lambda: objects.pod("other-0", labels={"app": "other"}), False, id="a-pod-of-another-selector"),
])
async def test_a_new_pod_drops_the_views_whose_selector_matches_it_only(
    kube: Emulator, watched: Watched, pod: Callable[[], dict[str, Any]], touches: bool
) -> None:
    r, clock, _target, pods = watched
    kube.add(pod())
    clock.advance(1.0)
    await heard(kube, clock, pods)  # every event before the bookmark was delivered
    assert ("tgi-gemma" not in r.observer.views) is touches


async def test_a_pod_relabelled_out_of_the_selector_drops_the_view(kube: Emulator, watched: Watched) -> None:
    r = watched[0]
    kube.modify("v1", "Pod", "tgi-0", "llm", metadata={"labels": {"app": "debugging"}})
    await until(lambda: "tgi-gemma" not in r.observer.views)
    await probe(r)
    assert urls(r) == []


async def test_a_pod_deleted_drops_the_view(kube: Emulator, watched: Watched) -> None:
    r = watched[0]
    kube.remove("v1", "Pod", "tgi-0", "llm")
    await until(lambda: "tgi-gemma" not in r.observer.views)


async def break_pods_by_failure(kube: Emulator, pods: Watcher, clock: ManualClock) -> None:
    failures = pods.failures
    kube.inject(500, PODS, times=1000, method="GET")  # the pod stream and its reconnects fail (and pod lists)
    kube.drop_watches("pods")
    await until(lambda: pods.failures > failures)
    clock.advance(60.0)


async def break_pods_by_relist(kube: Emulator, pods: Watcher, clock: ManualClock) -> None:
    relists = pods.relists
    clock.advance(60.0)
    kube.drop_watches("pods")
    kube.add(objects.pod("elsewhere-0", labels={"app": "other"}))  # history the resume needs, then compacted
    kube.compact()  # the resume gets 410 Gone: a fresh list (SYNC, no event for our pod)
    await until(lambda: pods.relists > relists)


@pytest.mark.parametrize("broken", [
    pytest.param(break_pods_by_failure, id="pod-stream-failed"),
    pytest.param(break_pods_by_relist, id="pods-relisted-after-410"),
])
async def test_the_target_watch_vouches_only_while_the_pod_watch_does(
    kube: Emulator, watched: Watched, broken: Callable[[Emulator, Watcher, ManualClock], Any]
) -> None:
    """Only the pod watch is broken or relisted; the target watch stays live throughout. The view is 60+ s old
    (two periods: 30 s) and was read before: it is not kept for its age (read again, unknown if that fails)."""
    r, clock, target, pods = watched
    before = r.observer.views["tgi-gemma"]
    await broken(kube, pods, clock)
    await heard(kube, clock, target)
    assert target.vouches(clock.monotonic()) is not None
    kube.requests.clear()
    await probe(r)
    assert PODS in reads(kube)
    assert r.observer.views.get("tgi-gemma") is not before


async def test_a_read_started_before_a_pod_change_is_not_kept(kube: Emulator, watched: Watched) -> None:
    """A read in flight when a pod event arrives may have listed the pods before it: kept, the live watches would
    vouch for it however old (no event comes again)."""
    r, _clock, _target, _pods = watched
    policy = r.store.policies["tgi-gemma"]
    inner = r.observer.targets.observe
    pod = kube.get("v1", "Pod", "tgi-0", "llm")

    async def slow(cp: object) -> object:
        view = await inner(policy)
        r._on_watch_event(pods_watch("llm"), "MODIFIED", pod)
        return view

    r.observer.targets.observe = slow  # type: ignore[method-assign,assignment]
    await r.observer.observe(policy)
    assert "tgi-gemma" not in r.observer.views


async def test_a_read_is_not_kept_when_the_pod_events_since_its_start_were_dropped(
    kube: Emulator, watched: Watched
) -> None:
    """Pod events are kept ``POD_LOG_S`` for the reads they may overtake; a read older than that keeps nothing."""
    r, clock, _target, _pods = watched
    policy = r.store.policies["tgi-gemma"]
    inner = r.observer.targets.observe
    other = objects.pod("other-0", labels={"app": "other"})  # touches no view of ours

    async def slow(cp: object) -> object:
        view = await inner(policy)
        r._on_watch_event(pods_watch("llm"), "ADDED", other)
        clock.advance(POD_LOG_S + 1.0)
        r._on_watch_event(pods_watch("llm"), "MODIFIED", other)  # drops the first from the log
        return view

    before = r.observer.views["tgi-gemma"]  # the event touches it not: it stays, the new read is not kept
    r.observer.targets.observe = slow  # type: ignore[method-assign,assignment]
    await r.observer.observe(policy)
    assert r.observer.views["tgi-gemma"] is before
    # And an event that touches nothing leaves a read that started after the log's oldest kept.
    r.observer.targets.observe = inner  # type: ignore[method-assign]
    await r.observer.observe(policy)
    assert r.observer.views["tgi-gemma"] is not before


# Why views are read and why policies are evaluated in full (autoscaler_target_view_reads, _full_evaluations):
# the counters that named the cause of the reaction bench's bursts of full evaluations (test_first_list.py).
def why_counts(metric: Any) -> dict[str, float]:
    return {s.labels["why"]: s.value for m in metric.collect() for s in m.samples if s.name.endswith("_total")}


async def test_a_view_read_again_is_counted_by_why_the_kept_one_did_not_serve(
    kube: Emulator, watched: Watched
) -> None:
    r, clock, _target, pods = watched
    reads = r.telemetry.view_reads
    before = why_counts(reads)
    kube.modify("v1", "Pod", "tgi-0", "llm", metadata={"annotations": {PORT: "9000"}})
    await until(lambda: "tgi-gemma" not in r.observer.views)
    await probe(r)
    assert why_counts(reads) == {**before, "dropped_pod": 1.0}
    # The pod watch fails; the view, past two periods, is read again because that watch does not vouch.
    await break_pods_by_failure(kube, pods, clock)
    await probe(r)
    assert why_counts(reads) == {**before, "dropped_pod": 1.0, "aged_pods_broken": 1.0}


async def test_the_pass_names_why_it_took_a_screened_policy(
    kube: Emulator, watched: Watched, tgi: TgiMetrics
) -> None:
    """A due policy whose screen failed to read its signal is taken by the pass as ``signal_failed``; one no
    screen reached while it was due as ``not_screened``; a policy never evaluated as ``first``."""
    r, clock, _target, _pods = watched
    c = r.controller
    full = r.telemetry.full_evaluations
    c._pending.clear()  # only what this test triggers
    c._due["tgi-gemma"] = clock.monotonic()  # due now
    await tgi.stop()  # every scrape fails
    await probe(r)
    assert c._pending == {"tgi-gemma": "period"}
    c._count_full(c._pending, probing=True)
    assert why_counts(full) == {"signal_failed": 1.0}
    c._count_full({"tgi-gemma": "period"}, probing=True)
    assert why_counts(full) == {"signal_failed": 1.0, "not_screened": 1.0}
    c._count_full({"never-evaluated": "period", "tgi-gemma": "watch"}, probing=True)
    assert why_counts(full) == {"signal_failed": 1.0, "not_screened": 1.0, "first": 1.0, "watch": 1.0}
