"""The pool: one backend per distinct source block, reused; a broken backend never takes the others down."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import yaml

from autoscaler.core.model import SignalReading
from autoscaler.core.sourcespec import PrometheusSourceSpec, SourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources.base import MetricSource, Readings, SignalRequest
from autoscaler.sources.pool import MissingSource, SourcePool, requests_for


class FakeBackend:
    """A backend answering a fixed value per request, or raising (a bug in a real backend)."""

    def __init__(self, spec: SourceSpec, *, broken: bool) -> None:
        self.spec = spec
        self.broken = broken
        self.batches: list[int] = []
        self.closed = False

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        self.batches.append(len(requests))
        if self.broken:
            raise RuntimeError("bug")
        return {r.key: SignalReading(1.0, 0.0, "fake") for r in requests}

    async def aclose(self) -> None:
        self.closed = True


POLICY = """
apiVersion: autoscaler.dev/v1alpha1
kind: ScalingPolicy
metadata: {name: p}
spec:
  target: {kind: Deployment, name: vllm, namespace: llm}
  maxReplicas: 4
  source: {type: prometheus, url: "http://good:9090"}
  signals:
    - {name: a, preset: vllm.waiting}
    - {name: b, preset: vllm.running}
    - {name: c, preset: vllm.waiting, source: {type: prometheus, url: "http://broken:9090"}}
    - {name: d, expr: "a + b"}
  policy: {type: queue, work: [d], capacityPerReplica: 4}
"""


async def test_fan_out_reuse_and_isolation() -> None:
    made: list[FakeBackend] = []

    def factory(spec: SourceSpec) -> MetricSource:
        assert isinstance(spec, PrometheusSourceSpec)
        backend = FakeBackend(spec, broken="broken" in spec.url)
        made.append(backend)
        return backend

    policy = ScalingPolicy.model_validate(yaml.safe_load(POLICY))
    requests = requests_for(policy)
    assert [r.signal.name for r in requests] == ["a", "b", "c"]  # composites are the core's
    pool = SourcePool(factory)

    first = await pool.read(requests, deadline_s=1)
    await pool.read(requests, deadline_s=1)
    await pool.aclose()

    assert len(made) == 2  # one per distinct block, reused on the second tick
    good = next(b for b in made if not b.broken)
    assert good.batches == [2, 2]  # a and b in one batch
    assert first[("Deployment/llm/vllm", "a")].value == 1.0
    broken = first[("Deployment/llm/vllm", "c")]
    assert broken.value is None
    assert broken.error == "internal error: RuntimeError: bug"
    assert all(b.closed for b in made)


def test_a_signal_without_any_source_is_refused() -> None:
    doc = yaml.safe_load(POLICY)
    del doc["spec"]["source"]
    policy = ScalingPolicy.model_validate(doc)
    with pytest.raises(MissingSource, match="signal 'a': no source: set spec"):
        requests_for(policy)


async def test_reads_within_the_window_share_one_batch() -> None:
    made: list[FakeBackend] = []

    def factory(spec: SourceSpec) -> MetricSource:
        made.append(FakeBackend(spec, broken=False))
        return made[-1]

    doc = yaml.safe_load(POLICY)
    doc["spec"]["signals"] = [{"name": "a", "preset": "vllm.waiting"}]
    doc["spec"]["policy"]["work"] = ["a"]
    first = ScalingPolicy.model_validate(doc)
    doc["spec"]["target"]["name"] = "other"
    second = ScalingPolicy.model_validate(doc)
    pool = SourcePool(factory, coalesce_s=0.01)

    # Two callers, as a controller evaluating policies concurrently, one read each.
    one, two = await asyncio.gather(
        pool.read(requests_for(first), deadline_s=1), pool.read(requests_for(second), deadline_s=1)
    )
    await pool.aclose()

    assert [b.batches for b in made] == [[2]]
    assert list(one) == [("Deployment/llm/vllm", "a")]
    assert list(two) == [("Deployment/llm/other", "a")]
