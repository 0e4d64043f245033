"""A target watch's first list is a baseline, not a change: it triggers no evaluation and drops no kept view, not
even a read still in flight; a relist's ``SYNC`` (a target that changed while the stream was gone) still does both.

Treated as a change, the first list of a namespace's 5,000 Deployments made a second full pass of all 5,000
policies right after their first one, and discarded the first pass's bulk read in flight: the bursts of
thousands of full evaluations in the reaction bench whenever start-up outlasted its warm-up (2026-12-07 12:39-12:55
UTC, load 9-13: ``autoscaler_full_evaluations{why="watch"}`` 5,044-5,047 in three runs of four).

Against the emulated API server (real list and watch streams, ``410 Gone``); the controller's clock is explicit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.observer import KEPT_PERIODS, Watcher, WatchSpec, pods_watch
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, TgiMetrics, deployment_runtime, stop_watching
from tests.kube.emulator import Emulator

SPEC = WatchSpec("apps", "v1", "deployments", "llm")


async def watching(r: Runtime) -> tuple[Watcher, Watcher]:
    """Start the runtime's watches; return the target's and the pods' once both have listed."""
    r.sync_watches()
    target, pods = r.watchers[SPEC][0], r.watchers[pods_watch("llm")][0]
    await asyncio.wait_for(target.synced.wait(), 10)
    await asyncio.wait_for(pods.synced.wait(), 10)
    return target, pods


@pytest.fixture
async def started(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> AsyncIterator[tuple[Runtime, ManualClock]]:
    """A controller with one policy (a static endpoint), its watches not started yet."""
    clock = ManualClock()
    r = deployment_runtime(kube, kube_client, tmp_path, clock, endpoint=tgi.url)
    r.watchers.clear()
    tgi.queue = 5
    yield r, clock
    await stop_watching(r)


async def test_a_target_watch_s_first_list_triggers_no_evaluation_and_keeps_the_views(
    started: tuple[Runtime, ManualClock],
) -> None:
    """The first evaluation ran before the watch listed (as when start-up is slow): the list evaluates nothing
    again, and the view stays kept; read before the list, the watch does not vouch for it, so it ages as an
    unwatched view does (read again past ``KEPT_PERIODS`` periods)."""
    r, clock = started
    policy = r.store.policies["tgi-gemma"]
    assert await r.controller.run_once()
    kept = r.observer.views["tgi-gemma"]
    clock.advance(1.0)
    await watching(r)
    assert r.controller._pending == {}
    assert r.observer.views["tgi-gemma"] is kept
    assert r.observer.unkept([policy]) == []
    clock.advance(KEPT_PERIODS * policy.policy.spec.evaluation_period_seconds + 1.0)
    assert "Deployment/llm" in r._live_watches()
    assert r.observer.unkept([policy]) == [policy]


async def test_a_read_in_flight_when_the_first_list_comes_is_kept(started: tuple[Runtime, ManualClock]) -> None:
    """The first pass's bulk read is still in flight when the watch's first list arrives: what it read is kept
    (it was discarded as overtaken by 5,000 changes, and every view was read again)."""
    r, _clock = started
    policy = r.store.policies["tgi-gemma"]
    inner = r.observer.targets.observe_many

    async def slow(policies: Sequence[Any], **kwargs: Any) -> Any:
        views = await inner(policies, **kwargs)
        await watching(r)  # the list and its SYNC arrive while the read is in flight
        return views

    r.observer.targets.observe_many = slow  # type: ignore[method-assign]
    await r.observer.read_targets([policy])
    assert "tgi-gemma" in r.observer.views
    assert r.controller._pending == {}


async def test_a_relist_s_sync_of_a_changed_target_drops_its_view_and_evaluates_it(
    kube: Emulator, started: tuple[Runtime, ManualClock]
) -> None:
    """After ``410 Gone`` the relist delivers the target that changed while no stream was open: that is a change
    (the view is dropped, the policy evaluated), as before."""
    r, _clock = started
    target, _pods = await watching(r)
    assert await r.controller.run_once()
    assert "tgi-gemma" in r.observer.views
    await kube.wait_for_watchers(1, plural="deployments")
    kube.drop_watches("deployments")
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 2})
    kube.compact()  # the resume gets 410 Gone: a fresh list, whose SYNC carries the change
    async with asyncio.timeout(10):
        while target.relists < 2:  # the relist's objects are delivered in the same step as it is counted
            await asyncio.sleep(0.01)
    assert r.controller._pending == {"tgi-gemma": "watch"}
    assert "tgi-gemma" not in r.observer.views
