"""Probes at scale: a probe round screens on the targets as last read (no API read), and only a policy
whose decision would change is evaluated at once, on a fresh read, before anything is written.

Against the emulated API server and a stand-in TGI server; the clock is explicit (``ManualClock``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from autoscaler.controller import targets
from autoscaler.controller.loop import Controller, Stamped, _chunks
from autoscaler.controller.observer import Prepared, WatchSpec
from autoscaler.controller.runtime import Runtime
from autoscaler.core import engine
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import Reason
from autoscaler.policyfile.loader import load_text
from tests.controller.helpers import (
    ManualClock,
    TgiMetrics,
    deployment_runtime,
    replicas,
    runtime,
    runtime_of_many,
)
from tests.controller.policies import tgi_policy
from tests.kube import objects
from tests.kube.emulator import Emulator

TARGET = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment"


@pytest.fixture
async def rt(kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path) -> AsyncIterator[Runtime]:
    clock = ManualClock()
    r = deployment_runtime(kube, kube_client, tmp_path, clock, endpoint=tgi.url)
    tgi.queue = 5
    assert await r.controller.run_once()  # an evaluation: the observer keeps the target's view
    # Probed between periods (the loop sets this after each periodic evaluation).
    r.controller._due["tgi-gemma"] = clock.monotonic() + 15
    yield r
    await r.observer.aclose()


async def settle(rt: Runtime) -> None:
    """Wait for the evaluations the last probe round started."""
    await asyncio.gather(*list(rt.controller._escalations))


async def test_a_probe_round_reads_no_target_from_the_api_server(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    kube.requests.clear()
    scrapes = tgi.scrapes
    await rt.controller.probe_round()
    await settle(rt)
    assert tgi.scrapes == scrapes + 1  # the signal is read afresh
    assert kube.requests == []  # the target is not: it is the view the last evaluation kept


async def test_a_crossing_is_evaluated_on_a_fresh_read_before_the_write(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    kube.requests.clear()
    tgi.queue = 25  # needs 3 replicas
    await rt.controller.probe_round()
    await settle(rt)
    assert replicas(kube) == 3
    paths = [(r.method, r.path) for r in kube.requests]
    write = paths.index(("PATCH", TARGET + "/scale"))
    assert ("GET", TARGET) in paths[:write]  # the evaluation read the target itself
    assert rt.controller.outcomes["tgi-gemma"].acted == ("scale",)


async def test_nothing_is_written_from_the_kept_view(kube: Emulator, rt: Runtime, tgi: TgiMetrics) -> None:
    # Someone scaled the target to 3 since the last evaluation; no watch runs here, so the kept view still
    # says 1. The screen (1 replica for a queue of 25) would scale; the fresh evaluation sees 3 and holds.
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 3},
                status={"replicas": 3, "readyReplicas": 3, "availableReplicas": 3})
    kube.requests.clear()
    tgi.queue = 25
    await rt.controller.probe_round()
    await settle(rt)
    assert kube.writes() == []
    assert replicas(kube) == 3


async def test_a_watched_change_of_the_target_drops_its_kept_view(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    obj = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    rt._on_watch_event(WatchSpec("apps", "v1", "deployments", "llm"), "MODIFIED", obj)
    kube.requests.clear()
    await rt.controller.probe_round()
    await settle(rt)
    assert ("GET", TARGET) in [(r.method, r.path) for r in kube.requests]


def test_a_pass_is_chunked_with_each_cluster_queue_in_one_chunk() -> None:
    texts = [
        tgi_policy(name=f"p{i}", target=f"t{i}", capacity=i % 3 == 0) for i in range(10)
    ]
    policies = [compile_policy(lp.policy) for lp in load_text("---\n".join(texts), "many.yaml")]
    chunks = _chunks(policies, 3)
    assert sorted(cp.name for c in chunks for cp in c) == sorted(cp.name for cp in policies)
    with_queue = [i for i, c in enumerate(chunks) if any(cp.policy.spec.capacity is not None for cp in c)]
    assert len(with_queue) == 1  # p0, p3, p6, p9 share cluster-queue: one chunk, the first one's
    assert [cp.name for cp in chunks[0]][:1] == ["p0"]
    assert all(len(c) <= 3 for i, c in enumerate(chunks) if i not in with_queue)


def test_a_round_with_no_policy_on_a_cluster_queue_is_chunked_in_plain_slices_that_are_the_same_chunks() -> None:
    """``_chunks(..., ungrouped=True)`` (a round whose index has no probed policy on a ClusterQueue) gives the
    chunks the grouping gives, in the same order: the round screens the same policies together."""
    texts = [tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False) for i in range(23)]
    policies = [compile_policy(lp.policy) for lp in load_text("---\n".join(texts), "many.yaml")]
    for size in (1, 4, 5, 23, 250):
        grouped = _chunks(policies, size)
        assert [[cp.name for cp in c] for c in _chunks(policies, size, ungrouped=True)] == [
            [cp.name for cp in c] for c in grouped]
    assert _chunks([], 5, ungrouped=True) == _chunks([], 5) == []
    # The round takes the slices only when its index says no probed policy is on a ClusterQueue.
    anything = cast(Any, None)
    for capacity in (False, True):
        queued = [compile_policy(lp.policy) for lp in load_text(tgi_policy(capacity=capacity), "one.yaml")]
        c = Controller(store=cast(Any, SimpleNamespace(policies={cp.name: cp for cp in policies + queued})),
                       observer=anything, actuator=anything, telemetry=anything, clock=anything, leader=anything)
        assert c._index().queued is capacity


async def test_a_pass_in_chunks_reads_the_targets_once(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    docs = [tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False,
                       source=f"{{type: pods, endpoints: ['{tgi.url}']}}") for i in range(7)]
    for i in range(7):
        kube.add(objects.deployment(f"t{i}", "llm", replicas=1))
    r = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False)
    (tmp_path / "tgi.yaml").unlink()
    (tmp_path / "many.yaml").write_text("---\n".join(docs))
    r.store.reload()
    r.controller.pass_chunk = 3
    tgi.queue = 5
    kube.requests.clear()
    scrapes = tgi.scrapes
    assert await r.controller.run_once()
    lists = [q for q in kube.requests if q.method == "GET" and q.path == "/apis/apps/v1/namespaces/llm/deployments"]
    assert len(lists) == 1  # one bulk read for the pass, not one per chunk
    assert tgi.scrapes - scrapes == 3  # the signals are read chunk by chunk: 3 chunks
    assert len(r.controller.outcomes) == 7
    await r.observer.aclose()


async def periodic_pass(controller: Controller) -> None:
    """One periodic pass over every policy, as ``Controller.run`` makes it when they are due."""
    policies = list(controller.store.policies.values())
    await controller._pass(policies, lambda cp, part: controller.evaluate(cp, "period", prepared=part))


async def test_a_periodic_evaluation_decides_on_the_last_screen_without_reading_again(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    await rt.controller.probe_round()  # queue 5: nothing to do
    await settle(rt)
    kube.requests.clear()
    scrapes, runs = tgi.scrapes, rt.controller._runs["tgi-gemma"]
    await periodic_pass(rt.controller)
    assert rt.controller._runs["tgi-gemma"] == runs + 1  # evaluated (its history recorded) ...
    assert rt.controller.outcomes["tgi-gemma"].committed
    assert tgi.scrapes == scrapes  # ... on what the screen read: no scrape,
    assert kube.requests == []  # no target read


async def test_a_screen_is_not_reused_once_its_target_changed_or_it_aged(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    await rt.controller.probe_round()
    await settle(rt)
    obj = kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")
    rt._on_watch_event(WatchSpec("apps", "v1", "deployments", "llm"), "MODIFIED", obj)
    kube.requests.clear()
    scrapes = tgi.scrapes
    await periodic_pass(rt.controller)
    assert tgi.scrapes == scrapes + 1  # the watched change dropped the view the screen was read on
    assert ("GET", TARGET) in [(r.method, r.path) for r in kube.requests]

    await rt.controller.probe_round()
    await settle(rt)
    clock = rt.controller.clock
    assert isinstance(clock, ManualClock)
    clock.advance(30)  # a screen older than twice the policy's evaluation period: read again
    scrapes = tgi.scrapes
    await periodic_pass(rt.controller)
    assert tgi.scrapes == scrapes + 1


async def test_an_evaluation_on_a_screen_reads_afresh_before_it_acts(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics
) -> None:
    cp = rt.store.policies["tgi-gemma"]
    tgi.queue = 25  # the screen reads 25 on the kept view (1 replica): it would scale to 3
    found = await rt.observer.probe([cp])
    part = found["tgi-gemma"]
    assert isinstance(part, Prepared)
    # Meanwhile someone scaled the target to 3 (no watch runs here: the kept view still says 1).
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", spec={"replicas": 3},
                status={"replicas": 3, "readyReplicas": 3, "availableReplicas": 3})
    kube.requests.clear()
    stamp = rt.controller._runs["tgi-gemma"]
    outcome = await rt.controller.evaluate(cp, "period", prepared=Stamped(stamp, dataclasses.replace(part, kept=True)))
    assert kube.writes() == []  # decided again on the fresh read: 3 replicas for 25 is right
    assert ("GET", TARGET) in [(r.method, r.path) for r in kube.requests]
    assert outcome.committed
    assert outcome.acted == ()


async def test_every_policy_waits_one_round_between_two_screens(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Least recently screened first: the order is kept from round to round even when every signal moves
    (screening what moved first reversed it, so the first of one round waited almost two for its next)."""
    docs = [tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False,
                       source=f"{{type: pods, endpoints: ['{tgi.url}']}}") for i in range(4)]
    for i in range(4):
        kube.add(objects.deployment(f"t{i}", "llm", replicas=1))
    clock = ManualClock()
    r = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, capacity=False)
    (tmp_path / "tgi.yaml").unlink()
    (tmp_path / "many.yaml").write_text("---\n".join(docs))
    r.store.reload()
    tgi.queue = 5
    assert await r.controller.run_once()
    for name in r.store.policies:
        r.controller._due[name] = clock.monotonic() + 15
    r.controller.probe_chunk, r.controller.probe_parallel = 1, 1
    order: list[str] = []
    inner = r.observer.probe

    async def probe(policies: Sequence[CompiledPolicy], *, at: float | None = None) -> dict[str, Prepared | Exception]:
        order.extend(cp.name for cp in policies)
        clock.advance(0.1)  # screening takes time: a round's chunks start one after another
        return await inner(policies, at=at)

    r.observer.probe = probe  # type: ignore[method-assign]
    for queue in (6, 7, 5):
        tgi.queue = queue  # every signal moves every round, as real queues do (none needs a second replica)
        await r.controller.probe_round()
        clock.advance(1.0)
    assert len(order) == 12
    assert order[0:4] == order[4:8] == order[8:12]
    await r.observer.aclose()


def counting_decide(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count ``decide`` calls (by policy name): ``CompiledPolicy.decide`` calls ``engine.decide``."""
    calls: list[str] = []
    inner = engine.decide

    def counted(compiled: CompiledPolicy, *args: object) -> object:
        calls.append(compiled.name)
        return inner(compiled, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "decide", counted)
    return calls


async def test_a_due_policys_screen_stands_as_its_periodic_evaluation(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``decide`` on one read: the screen of a due policy that would change nothing is its periodic
    evaluation (state committed, outcome, next due time), and the periodic pass then finds nothing due."""
    c = rt.controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    calls = counting_decide(monkeypatch)
    runs, state = c._runs["tgi-gemma"], c.states["tgi-gemma"]
    await c.probe_round()  # not due yet: a screen only, nothing committed
    await settle(rt)
    assert calls == []  # the queue type says 5 keeps 1 replica: no decide at all (core.screen.quiet)
    assert c._runs["tgi-gemma"] == runs
    assert c.states["tgi-gemma"] is state

    clock.advance(15)  # due now
    kube.requests.clear()
    scrapes = tgi.scrapes
    await c.probe_round()
    await settle(rt)
    assert calls == ["tgi-gemma"]  # one decide for the screen and the evaluation both
    assert tgi.scrapes == scrapes + 1  # one read ...
    assert kube.requests == []  # ... and no target read
    assert c._runs["tgi-gemma"] == runs + 1
    assert c.states["tgi-gemma"] is not state
    assert c.states["tgi-gemma"].last_decision_time == clock.wall()  # committed: decided at the screen
    assert c.outcomes["tgi-gemma"].committed
    assert c.outcomes["tgi-gemma"].acted == ()
    assert c._due["tgi-gemma"] == clock.monotonic() + 15
    assert c.due_now(clock.monotonic(), probing=True) == []  # the pass has nothing left to evaluate


async def test_a_due_screen_that_would_act_does_not_stand(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due policy's screen that would scale is evaluated on a fresh read (which writes), never committed
    from the kept view: two decides, a target read before the write."""
    c = rt.controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    clock.advance(15)
    calls = counting_decide(monkeypatch)
    runs = c._runs["tgi-gemma"]
    tgi.queue = 25
    kube.requests.clear()
    await c.probe_round()
    await settle(rt)
    assert calls == ["tgi-gemma"] * 2
    assert c._runs["tgi-gemma"] == runs + 1  # the escalated evaluation only: the screen was not committed
    assert c.outcomes["tgi-gemma"].acted == ("scale",)
    paths = [(r.method, r.path) for r in kube.requests]
    assert ("GET", TARGET) in paths[: paths.index(("PATCH", TARGET + "/scale"))]
    assert replicas(kube) == 3


async def test_a_due_screen_with_a_failing_signal_leaves_the_evaluation_to_the_pass_at_once(
    rt: Runtime, tgi: TgiMetrics
) -> None:
    c = rt.controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    clock.advance(15)
    runs = c._runs["tgi-gemma"]
    await tgi.stop()  # the signal fails: unknown, which the periodic evaluation reads itself and reports
    await c.probe_round()
    await settle(rt)
    assert c._runs["tgi-gemma"] == runs  # the screen did not stand ...
    assert c._pending == {"tgi-gemma": "period"}  # ... and the pass evaluates it now, not after its grace


async def test_a_round_waits_for_the_evaluation_a_crossing_started(rt: Runtime, tgi: TgiMetrics) -> None:
    """While an evaluation a screen escalated runs, the next chunk neither scrapes nor screens, for up to
    ``yield_s`` after that evaluation started (the controller's clock): the crossing's reads and write do not
    queue behind the round's work in the event loop."""
    c = rt.controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    release = asyncio.Event()
    evaluated: list[str] = []

    async def held(cp: CompiledPolicy) -> None:
        evaluated.append(cp.name)
        await release.wait()

    c._escalated = held  # type: ignore[method-assign]
    tgi.queue = 25
    await c.probe_round()
    assert evaluated == ["tgi-gemma"]
    assert len(c._escalations) == 1
    scrapes = tgi.scrapes
    next_round = asyncio.create_task(c.probe_round())
    await asyncio.sleep(0.1)
    assert tgi.scrapes == scrapes  # waits for the running evaluation
    release.set()
    await next_round
    assert tgi.scrapes == scrapes + 1
    await settle(rt)
    # Bounded: an evaluation running for longer than ``yield_s`` holds no round.
    release.clear()
    await c.probe_round()
    assert len(c._escalations) == 1
    clock.advance(c.yield_s)
    scrapes = tgi.scrapes
    async with asyncio.timeout(5):
        await c.probe_round()
    assert tgi.scrapes == scrapes + 1
    # And a round waits ``yield_s`` in all, not at each of its chunks' two waits.
    clock.advance(-c.yield_s)
    c.yield_s = 0.2
    async with asyncio.timeout(5):
        await c.probe_round()
    assert tgi.scrapes == scrapes + 2
    assert c._yield_left <= 0  # its first wait used the whole allowance: the second did not wait
    release.set()
    await settle(rt)


def test_the_pass_leaves_a_screened_policy_to_the_probes_for_one_period(rt: Runtime) -> None:
    c = rt.controller
    now = c.clock.monotonic()
    c._due["tgi-gemma"] = now  # due now
    assert c.due_now(now, probing=True) == []  # a screen stands for it within its grace ...
    assert c.next_due(now, probing=True) == now + 15
    assert c.due_now(now + 15, probing=True) == ["tgi-gemma"]  # ... the pass takes over after it
    assert c.due_now(now, probing=False) == ["tgi-gemma"]  # without probes: at once
    del c._due["tgi-gemma"]
    assert c.due_now(now, probing=True) == ["tgi-gemma"]  # never evaluated: at once


async def test_a_signal_value_gauge_goes_while_unknown_and_comes_back_with_a_value(
    rt: Runtime, tgi: TgiMetrics
) -> None:
    """The metric children the loop keeps (``_child``) must not outlive their removal: a value known again is
    shown again."""
    c = rt.controller
    gauge = 'autoscaler_signal_value{policy="tgi-gemma",signal="queue"}'
    assert f"{gauge} 5.0" in rt.telemetry.exposition().decode()
    tgi.queue = math.nan  # unknown (NaN is never a value)
    await c.run_once()
    assert c.outcomes["tgi-gemma"].decisions[0].reason is Reason.METRICS_UNKNOWN
    assert gauge not in rt.telemetry.exposition().decode()
    tgi.queue = 6
    await c.run_once()
    assert f"{gauge} 6.0" in rt.telemetry.exposition().decode()


async def test_a_quiet_screen_does_not_decide_and_a_moving_one_does(
    kube: Emulator, rt: Runtime, tgi: TgiMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not due: a reading the type says keeps the count is screened without ``decide``; one outside that band
    is decided (and, as it would scale, evaluated on a fresh read)."""
    c = rt.controller
    calls = counting_decide(monkeypatch)
    for queue in (1, 7, 10):  # 1 replica holds a queue of 0 < work <= 10
        tgi.queue = queue
        await c.probe_round()
        await settle(rt)
    assert calls == []
    tgi.queue = 11  # needs 2
    await c.probe_round()
    await settle(rt)
    assert calls == ["tgi-gemma"] * 2  # the screen's decide, then the escalated evaluation's
    assert replicas(kube) == 2


async def test_a_few_targets_among_many_are_read_one_by_one_not_listed(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """A pass of a few policies in a namespace of many targets (a due screen handed to the pass, a watch)
    reads them one by one: listing 60 Deployments to keep 2 is what LISTED_PER_READ weighs against."""
    n = 60
    r = runtime_of_many(kube, kube_client, tmp_path, ManualClock(), endpoint=tgi.url, n=n)
    tgi.queue = 5
    assert await r.controller.run_once()  # every policy: one list, which says how many the namespace holds
    policies = list(r.store.policies.values())
    listing = ("GET", "/apis/apps/v1/namespaces/llm/deployments")

    async def reads(some: list[CompiledPolicy]) -> list[tuple[str, str]]:
        kube.requests.clear()
        views = await r.observer.targets.observe_many(some)
        assert all(not isinstance(v, Exception) for v in views.values())
        return [(q.method, q.path) for q in kube.requests if q.path.startswith(listing[1])]

    few = await reads(policies[:2])
    assert listing not in few
    assert sorted(few) == [("GET", f"{listing[1]}/t0"), ("GET", f"{listing[1]}/t1")]
    assert await reads(policies[:3]) == [listing]  # 3 × 25 ≥ 60: the list pays
    await r.observer.aclose()


async def test_a_namespace_is_listed_in_pages_with_the_views_of_one_list(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Targets listed ``LIST_PAGE`` at a time (the loop runs between pages) read exactly as from one list."""
    n = 25
    r = runtime_of_many(kube, kube_client, tmp_path, ManualClock(), endpoint=tgi.url, n=n,
                        replicas=lambda i: 1 + i % 3)
    policies = list(r.store.policies.values())
    listing = "/apis/apps/v1/namespaces/llm/deployments"

    async def views(page: int) -> tuple[dict[str, object], list[dict[str, str]]]:
        monkeypatch.setattr(targets, "LIST_PAGE", page)
        kube.requests.clear()
        got = await r.observer.targets.observe_many(policies)
        return {k: v if isinstance(v, Exception) else (v.replicas, v.pods) for k, v in got.items()}, [
            q.query for q in kube.requests if q.path == listing
        ]

    whole, one = await views(10_000)
    paged, pages = await views(10)
    assert len(one) == 1
    assert [q.get("limit") for q in pages] == ["10", "10", "10"]
    assert paged == whole
    assert len(whole) == n
    await r.observer.aclose()


async def many_runtime(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path, n: int
) -> tuple[Runtime, ManualClock]:
    """``n`` policies in one namespace, each evaluated once (their target views kept), probed between periods."""
    clock = ManualClock()
    r = runtime_of_many(kube, kube_client, tmp_path, clock, endpoint=tgi.url, n=n)
    tgi.queue = 5
    assert await r.controller.run_once()
    for name in r.store.policies:
        r.controller._due[name] = clock.monotonic() + 1000  # not due: probes only screen
    return r, clock


async def test_a_round_judges_its_views_age_at_its_start_not_at_each_chunk(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Views the round found young enough serve all its chunks: judged chunk by chunk, views read together
    aged out together in the middle of a long round, and every later chunk listed the namespace again."""
    r, clock = await many_runtime(kube, kube_client, tgi, tmp_path, 4)
    r.controller.probe_chunk, r.controller.probe_parallel = 1, 1
    r.controller.refresh_periods = 2.0  # nothing read ahead here: only what the chunks themselves read
    inner = r.observer.probe
    chunks: list[str] = []

    async def probe(policies: Sequence[CompiledPolicy], *, at: float | None = None) -> dict[str, Prepared | Exception]:
        chunks.extend(cp.name for cp in policies)
        clock.advance(2.0)  # a slow round: each chunk 2 s after the last
        return await inner(policies, at=at)

    r.observer.probe = probe  # type: ignore[method-assign]
    clock.advance(27.0)  # the views are 27 s old at the round's start (kept up to 2 × 15 s): 29, 31, 33 s later
    kube.requests.clear()
    await r.controller.probe_round()
    await settle(r)
    assert len(chunks) == 4
    assert [q.path for q in kube.requests if q.method == "GET" and "/deployments" in q.path] == []
    await r.observer.aclose()


async def test_aging_views_are_read_again_in_the_background_while_the_round_screens(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Views past ``refresh_periods`` (and still kept) are read again in a task of their own: the round does not
    wait for it; once it is done the views are new; views past two periods are still read before screening."""
    r, clock = await many_runtime(kube, kube_client, tgi, tmp_path, 4)
    release = asyncio.Event()
    started: list[int] = []
    inner = r.observer.read_targets

    async def slow_read(policies: Sequence[CompiledPolicy]) -> None:
        started.append(len(policies))
        await release.wait()  # the bulk read takes long (thousands of views, a loaded machine)
        await inner(policies)

    r.observer.read_targets = slow_read  # type: ignore[method-assign]
    before = {n: v.read_at for n, v in r.observer.views.items()}
    clock.advance(25.0)  # past 1.5 periods, not past 2
    scrapes = tgi.scrapes
    await r.controller.probe_round()  # returns while the read is held: the round did not wait for it
    await settle(r)
    assert started == [4]
    assert tgi.scrapes == scrapes + 1  # screened meanwhile, on the kept views
    assert {n: v.read_at for n, v in r.observer.views.items()} == before
    refreshing = r.controller._refreshing
    assert refreshing is not None
    assert not refreshing.done()
    await r.controller.probe_round()  # one background read at a time
    await settle(r)
    assert started == [4]
    release.set()
    await refreshing
    assert all(v.read_at == clock.monotonic() for v in r.observer.views.values())
    clock.advance(31.0)  # past two periods: the round reads them itself first
    r.controller._refreshing = None
    started.clear()
    await r.controller.probe_round()
    await settle(r)
    assert started[:1] == [4]
    await r.observer.aclose()


async def test_a_background_read_takes_along_the_views_past_half_its_age(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Views read in separate groups would stay separate (a list of the whole namespace each): the background
    read of the views past ``refresh_periods`` also reads those past half that age, not the younger ones."""
    r, clock = await many_runtime(kube, kube_client, tgi, tmp_path, 4)
    read: list[list[str]] = []
    inner = r.observer.read_targets

    async def recorded(policies: Sequence[CompiledPolicy]) -> None:
        read.append(sorted(cp.name for cp in policies))
        await inner(policies)

    r.observer.read_targets = recorded  # type: ignore[method-assign]
    now = clock.monotonic()
    views = r.observer.views
    names = sorted(views)
    # p0, p1: past 1.5 periods (22.5 s); p2: past 0.75 periods (11.25 s), not 1.5; p3: younger.
    for name, age in zip(names, (25.0, 23.0, 15.0, 5.0), strict=True):
        views[name] = views[name]._replace(read_at=now - age)
    r.controller._refresh_ahead([r.store.policies[n] for n in names])
    assert r.controller._refreshing is not None
    await r.controller._refreshing
    assert read == [names[:3]]  # with the coalescing broken: names[:2], and p2 later in a list of its own
    assert views[names[3]].read_at == now - 5.0
    await r.observer.aclose()


async def test_each_probe_round_ends_with_after_round(rt: Runtime) -> None:
    """``Runtime`` freezes what a round left behind there (``core.fast.freeze_survivors``)."""
    calls: list[int] = []
    rt.controller.after_round = lambda: calls.append(1)
    await rt.controller.probe_round()
    await rt.controller.probe_round()
    await settle(rt)
    assert calls == [1, 1]


async def test_a_screens_observation_built_at_once_is_the_one_observe_builds(rt: Runtime, tgi: TgiMetrics) -> None:
    """``observed`` (a screen's observation without an ``await``) gives what ``observe`` gives on the same
    probe, and nothing for a policy whose observation reads more (its training picture and quota)."""
    plain = compile_policy(load_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}",
                                                capacity=False), "a.yaml")[0].policy)
    found = await rt.observer.probe([plain])
    part = found[plain.name]
    assert isinstance(part, Prepared)
    at_once = rt.observer.observed(plain, part)
    assert at_once is not None
    assert at_once == await rt.observer.observe(plain, part)
    assert rt.observer.observed(plain, part) == at_once  # kept per compiled policy: the same answer again
    with_capacity = compile_policy(load_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}",
                                                        capacity=True), "b.yaml")[0].policy)
    assert with_capacity.policy.spec.capacity is not None
    assert rt.observer.observed(with_capacity, part) is None
