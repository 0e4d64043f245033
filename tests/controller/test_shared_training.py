"""SharedTraining: policies with the same capacity and preemptible blocks share one read of Kueue."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autoscaler.controller.observer import SharedTraining, Training
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import QuotaStatus
from autoscaler.policyfile.loader import load_paths
from tests.controller.policies import tgi_policy


class CountingReader:
    """A TrainingReader that answers after ``gate`` opens and counts its reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.fail = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def training(self, policy: CompiledPolicy) -> Training:
        self.reads += 1
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("kueue unreachable")
        return Training((), QuotaStatus("cluster-queue", "nvidia.com/gpu", 6, self.reads))


def policy(tmp_path: Path, name: str, target: str, *, capacity: bool = True) -> CompiledPolicy:
    f = tmp_path / f"{name}.yaml"
    f.write_text(tgi_policy(name=name, target=target, capacity=capacity))
    return compile_policy(load_paths([f])[0].policy)


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_same_blocks_share_one_read_until_the_ttl(tmp_path: Path) -> None:
    inner, clock = CountingReader(), Clock()
    shared = SharedTraining(inner, now=clock, ttl_s=1.0)
    a, b = policy(tmp_path, "a", "one"), policy(tmp_path, "b", "two")
    first = await shared.training(a)
    assert await shared.training(b) == first
    assert inner.reads == 1
    clock.t = 1.5
    await shared.training(a)
    assert inner.reads == 2


async def test_a_write_invalidates(tmp_path: Path) -> None:
    inner = CountingReader()
    shared = SharedTraining(inner, now=Clock(), ttl_s=60)
    a = policy(tmp_path, "a", "one")
    await shared.training(a)
    shared.invalidate()
    await shared.training(a)
    assert inner.reads == 2


async def test_concurrent_reads_wait_for_the_one_in_flight(tmp_path: Path) -> None:
    inner = CountingReader()
    inner.gate.clear()
    shared = SharedTraining(inner, now=Clock(), ttl_s=60)
    a, b = policy(tmp_path, "a", "one"), policy(tmp_path, "b", "two")
    both = asyncio.gather(shared.training(a), shared.training(b))
    await asyncio.sleep(0)
    inner.gate.set()
    ra, rb = await both
    assert ra == rb
    assert inner.reads == 1


async def test_a_failure_is_not_cached(tmp_path: Path) -> None:
    inner = CountingReader()
    inner.fail = True
    shared = SharedTraining(inner, now=Clock(), ttl_s=60)
    a = policy(tmp_path, "a", "one")
    with pytest.raises(RuntimeError):
        await shared.training(a)
    inner.fail = False
    assert (await shared.training(a))[1] is not None
    assert inner.reads == 2


async def test_policies_without_capacity_read_nothing(tmp_path: Path) -> None:
    inner = CountingReader()
    shared = SharedTraining(inner, now=Clock())
    assert await shared.training(policy(tmp_path, "a", "one", capacity=False)) == ((), None)
    assert inner.reads == 0
