"""Watch streams against the emulator: events, dropped streams resumed, expired ones relisted (410 Gone)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.kube import Backoff
from autoscaler.controller.observer import Watcher, WatchSpec
from tests.kube import objects
from tests.kube.emulator import Emulator

DEPLOYMENTS = WatchSpec("apps", "v1", "deployments", "llm")


class Seen:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()

    def __call__(self, spec: WatchSpec, type_: str, obj: dict[str, Any]) -> None:
        self.queue.put_nowait((type_, obj["metadata"]["name"], (obj.get("spec") or {}).get("replicas")))

    async def next(self) -> tuple[str, str, Any]:
        return await asyncio.wait_for(self.queue.get(), 10)


@pytest.fixture
async def watching(kube: Emulator, kube_client: client.ApiClient) -> AsyncIterator[tuple[Watcher, Seen]]:
    kube.add(objects.deployment(replicas=1))
    seen = Seen()
    w = Watcher(kube_client, DEPLOYMENTS, seen, backoff=Backoff(base_s=0.01, cap_s=0.01, floor_s=0.0))
    task = asyncio.create_task(w.run())
    await asyncio.wait_for(w.synced.wait(), 10)
    yield w, seen
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def scale(kube: Emulator, n: int) -> None:
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": n})


async def test_list_then_events(kube: Emulator, watching: tuple[Watcher, Seen]) -> None:
    _w, seen = watching
    assert await seen.next() == ("SYNC", "tgi-gemma-deployment", 1)
    await kube.wait_for_watchers(1, plural="deployments")
    scale(kube, 2)
    assert await seen.next() == ("MODIFIED", "tgi-gemma-deployment", 2)


async def test_a_dropped_stream_resumes_without_relisting(kube: Emulator, watching: tuple[Watcher, Seen]) -> None:
    w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    kube.drop_watches()
    scale(kube, 2)  # happens while no stream is open: the resumed watch replays it from its resourceVersion
    assert await seen.next() == ("MODIFIED", "tgi-gemma-deployment", 2)
    assert w.relists == 1


async def test_an_expired_resource_version_relists(kube: Emulator, watching: tuple[Watcher, Seen]) -> None:
    w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    kube.drop_watches()
    scale(kube, 3)
    kube.compact()  # the history the watcher would resume from is gone: 410 Gone, then a fresh list
    assert await seen.next() == ("SYNC", "tgi-gemma-deployment", 3)
    assert w.relists == 2


@pytest.mark.parametrize(
    ("code", "reason", "message", "relists"),
    [
        pytest.param(500, None, "etcdserver: request timed out", 1, id="500-resumes"),
        pytest.param(504, None, "Too large resource version: 900, current: 120", 1, id="504-too-large-resumes"),
        pytest.param(410, "Gone", "too old resource version: 1 (2)", 2, id="410-gone-relists"),
        pytest.param(410, None, "The resourceVersion for the provided watch is too old.", 2,
                     id="410-from-the-etcd-watcher-relists"),
    ],
)
async def test_an_error_event_inside_the_stream(
    kube: Emulator, kube_client: client.ApiClient, code: int, reason: str | None, message: str, relists: int
) -> None:
    """An accepted watch that fails sends 200 and one ERROR event (``Emulator.stream_error``). A 410, whatever its
    reason (``Expired``, or ``Gone`` from older servers) or text, means the history is gone: relist. Anything else
    (an internal error, a cache behind the version asked for) is a failure: back off, name it, and resume from the
    last resourceVersion, which replays what happened meanwhile without a relist (client-go's reflector resumes on
    an internal error too)."""
    kube.add(objects.deployment(replicas=1))
    seen, errors = Seen(), list[str]()
    w = Watcher(kube_client, DEPLOYMENTS, seen, on_error=errors.append,
                backoff=Backoff(base_s=0.01, cap_s=0.01, floor_s=0.0))
    task = asyncio.create_task(w.run())
    try:
        assert await seen.next() == ("SYNC", "tgi-gemma-deployment", 1)
        await kube.wait_for_watchers(1, plural="deployments")
        kube.inject(code, "/apis/apps/v1/namespaces/llm/deployments", method="GET", in_stream=True, reason=reason,
                    message=message)
        kube.drop_watches()
        scale(kube, 2)  # while the stream is gone
        assert await seen.next() == ("MODIFIED" if relists == 1 else "SYNC", "tgi-gemma-deployment", 2)
        assert w.relists == relists
        if relists == 1:
            (error,) = errors
            assert error.startswith(f"watch {DEPLOYMENTS.path}: {code} ")
            assert message in error
        else:
            assert errors == []  # a 410 is the protocol, not a failure
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_bookmark_moves_the_version_a_watch_resumes_from(
    kube: Emulator, watching: tuple[Watcher, Seen]
) -> None:
    """A quiet collection's own events stop at an old resourceVersion while the server's moves on (other namespaces,
    other kinds). The bookmark carries the current one (``allowWatchBookmarks``, which the Watcher asks for): a
    stream resumed after compaction from the bookmark's version goes on without a relist; from the last event's
    it would meet 410 and list the whole collection again."""
    w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    assert kube.requests[-1].query.get("allowWatchBookmarks", "").lower() == "true"  # Go reads "True" as true
    kube.add(objects.deployment(name="elsewhere", namespace="other"))  # moves the server's resourceVersion only
    heard = w.heard_at
    kube.bookmark()
    while w.heard_at == heard:
        await asyncio.sleep(0.01)
    kube.compact()
    kube.drop_watches()
    await kube.wait_for_watchers(1, plural="deployments")
    scale(kube, 2)
    assert await seen.next() == ("MODIFIED", "tgi-gemma-deployment", 2)
    assert w.relists == 1


async def test_irrelevant_changes_do_not_wake_the_loop(kube: Emulator, watching: tuple[Watcher, Seen]) -> None:
    _w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm",
                metadata={"managedFields": [{"manager": "kubectl"}]})
    scale(kube, 2)
    # The managedFields-only change produced no callback: the next one is the scale.
    assert await seen.next() == ("MODIFIED", "tgi-gemma-deployment", 2)


async def test_an_object_deleted_while_the_stream_was_gone_is_deleted_by_the_relist(
    kube: Emulator, watching: tuple[Watcher, Seen]
) -> None:
    """The real server gives no DELETED for an object removed while the watch was away and its history compacted
    (410): only the relist's absence of it says so, and client-go's informer then delivers the deletion
    (``DeltaFIFO.Replace``). Without ``Watcher._replace`` the object lived on in every consumer."""
    w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    kube.add(objects.deployment(name="other", replicas=1))
    assert await seen.next() == ("ADDED", "other", 1)
    kube.drop_watches()
    kube.remove("apps/v1", "Deployment", "other", "llm")
    kube.compact()
    assert await seen.next() == ("DELETED", "other", None)
    assert w.relists == 2
    kube.add(objects.deployment(name="other", replicas=2))  # and it may come back: ADDED, not swallowed
    assert await seen.next() == ("ADDED", "other", 2)


async def test_a_watch_event_larger_than_aiohttp_s_default_line_is_delivered(
    kube: Emulator, watching: tuple[Watcher, Seen]
) -> None:
    """A watch event is one JSON line, as large as the object (etcd takes requests up to 1.5 MiB). aiohttp refuses a
    line over twice its read buffer (64 KiB by default: "Line is too long"/"Chunk too big", kopf#275,
    kubernetes_asyncio#137), and the Watcher would then retry the same event forever. kubernetes_asyncio's session
    reads with a 2 MiB buffer (lines to 4 MiB); this holds it to that."""
    _w, seen = watching
    await seen.next()
    await kube.wait_for_watchers(1, plural="deployments")
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm",
                metadata={"annotations": {"big": "x" * 600_000}}, spec={"replicas": 2})
    assert await seen.next() == ("MODIFIED", "tgi-gemma-deployment", 2)
