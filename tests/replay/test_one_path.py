"""One path from readings to decisions: the same per-pod data through ``run`` (the controller's observer over the
Prometheus source, and over the pods source scraping each pod itself), ``observe``, ``replay`` (a per-pod
``record`` dump) and ``simulate`` (the metric pipeline) gives the same combined reading and the same decision;
for a counter's rate and a histogram's quantile too (the pods source and the simulator take the rates from two
scrapes of the counters or buckets, Prometheus and replay are given each pod's rates).

The cases are the issue's: an hpa policy on ``vllm.kv_cache_usage`` (target 0.5) with two pods at 0.4 each,
which replay used to sum to 0.8 (2 → 4) while the controller averaged it (hold 2); the same with an explicit
``aggregate: max`` on a ``perReplica`` signal, which simulate ignored; and one pod of three reporting, which
must never scale down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from autoscaler.controller.lookups import ObserverView
from autoscaler.controller.observer import NoTraining, PolicyObserver
from autoscaler.controller.targets import TargetView
from autoscaler.core.engine import CompiledPolicy, compile_policy, decide
from autoscaler.core.model import Observation, PodStatus, PolicyState, ReplicaStatus, ScaleDecision, TargetRef
from autoscaler.core.sourcespec import PodsSourceSpec, PrometheusSourceSpec
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine as replay_engine
from autoscaler.replay.traces import load
from autoscaler.sim import pipeline
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import ReplicaGauges
from autoscaler.sources.base import PodRef
from autoscaler.sources.command import observe_once
from autoscaler.sources.pods import PodsSource
from autoscaler.sources.prometheus import PrometheusSource
from tests.sources.realprom import TextServer

NOW = 1_800_000_000.0
PODS = ("srv-6b7c8d9f4-aaaaa", "srv-6b7c8d9f4-bbbbb", "srv-6b7c8d9f4-ccccc")


def policy(signal: dict[str, Any], url: str) -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "kv"},
        "spec": {
            "target": {"kind": "Deployment", "name": "srv", "namespace": "llm"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "source": {"type": "prometheus", "url": url},
            "signals": [{"name": "kv", "preset": "vllm.kv_cache_usage", **signal}],
            "policy": {
                "type": "hpa",
                "metrics": [{"signal": "kv", "type": "External", "target": {"type": "Value", "value": 0.5}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
        },
    })


def status(n: int) -> ReplicaStatus:
    return ReplicaStatus(spec=n, ready=n, pods=tuple(PodStatus(p, True, 600.0) for p in PODS[:n]))


class Targets:
    """The ``TargetReader`` of a cluster whose every target is seen as ``view``."""

    def __init__(self, view: TargetView) -> None:
        self.view = view

    async def observe(self, policy: CompiledPolicy) -> TargetView:
        return self.view

    async def observe_many(
        self, policies: Sequence[CompiledPolicy], *, known: Mapping[str, dict[str, Any]] | None = None
    ) -> dict[str, TargetView | Exception]:
        return {cp.name: self.view for cp in policies}

    async def observe_ref(self, policy: CompiledPolicy, ref: TargetRef) -> TargetView:
        raise AssertionError(f"a single-target policy reads no other target ({ref.key})")


def _vector(values: dict[str, float]) -> str:
    result: list[dict[str, Any]] = []
    for pod, value in values.items():
        labels = {"namespace": "llm", "pod": pod}
        result.append({"metric": {**labels, "autoscaler_part": "value"}, "value": [NOW, str(value)]})
        result.append({"metric": {**labels, "autoscaler_part": "time"}, "value": [NOW, str(NOW - 5)]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


async def run_path(
    p: ScalingPolicy, values: dict[str, float], replicas: int, answer: str | None = None
) -> tuple[float | None, ScaleDecision]:
    """The controller: its observer reads Prometheus (an HTTP fake answering as Prometheus would: ``answer``, or
    the per-pod gauge ``values``)."""
    server = TextServer(answer or _vector(values), content_type="application/json")
    assert isinstance(p.spec.source, PrometheusSourceSpec)
    src = PrometheusSource(p.spec.source.model_copy(update={"url": server.base}))
    view = TargetView(status(replicas), tuple(PodRef(pod) for pod in PODS[:replicas]))
    observer = PolicyObserver(targets=Targets(view), training=NoTraining(), source=src)
    cp = compile_policy(p)
    try:
        obs = await observer.observe(cp)
    finally:
        await src.aclose()
        server.close()
    return _decide(cp, obs)


async def run_pods_path(
    p: ScalingPolicy, scrapes: list[tuple[float, dict[str, str]]], replicas: int
) -> tuple[float | None, ScaleDecision]:
    """The controller with the pods source: its observer scrapes each ready pod's ``/metrics`` itself (one server
    per pod; a pod that serves nothing answers 404), once per (time, expositions) in ``scrapes``; the last
    observation decides."""
    servers = {pod: TextServer("", status=404) for pod in PODS[:replicas]}
    clock = [0.0]
    src = PodsSource(clock=lambda: clock[0])
    moved = p.model_copy(deep=True)
    object.__setattr__(moved.spec, "source", PodsSourceSpec(type="pods", timeout_seconds=5))
    view = TargetView(status(replicas), tuple(PodRef(pod, url=f"{servers[pod].base}/metrics") for pod in servers))
    observer = PolicyObserver(targets=Targets(view), training=NoTraining(), source=src)
    cp = compile_policy(moved)
    try:
        for at, bodies in scrapes:
            clock[0] = at
            for pod, server in servers.items():
                server.body, server.status = (bodies[pod], 200) if pod in bodies else ("", 404)
            obs = await observer.observe(cp)
    finally:
        await src.aclose()
        for server in servers.values():
            server.close()
    return _decide(cp, obs)


def _gauge_exposition(values: dict[str, float]) -> dict[str, str]:
    return {pod: f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc {v}\n" for pod, v in values.items()}


async def observe_path(
    p: ScalingPolicy, values: dict[str, float], replicas: int, answer: str | None = None
) -> tuple[float | None, str]:
    """``autoscaler observe``: the controller's observer (``controller.lookups.ObserverView``), with the replica
    status a cluster gives, then observe's own judgement and display."""
    server = TextServer(answer or _vector(values), content_type="application/json")
    assert isinstance(p.spec.source, PrometheusSourceSpec)
    moved = p.model_copy(deep=True)
    object.__setattr__(moved.spec, "source", p.spec.source.model_copy(update={"url": server.base}))
    src = PrometheusSource(moved.spec.source)  # type: ignore[arg-type]
    seen = TargetView(status(replicas), tuple(PodRef(pod) for pod in PODS[:replicas]))
    observing = ObserverView(PolicyObserver(targets=Targets(seen), training=NoTraining(), source=src))
    try:
        view = await observe_once([moved], observing, clock=lambda: NOW)
    finally:
        await src.aclose()
        server.close()
    (target,) = view["targets"]
    return target["signals"]["kv"]["value"], target["decision"]["reason"]


def replay_path(
    p: ScalingPolicy, values: dict[str, float], replicas: int, tmp: Path
) -> tuple[float | None, ScaleDecision]:
    """``autoscaler replay`` of what ``record`` saves: one series per pod, and the recorded replica count."""
    times = [NOW - 30, NOW - 15, NOW]
    series = [
        {"metric": {"namespace": "llm", "pod": pod}, "values": [[t, str(v)] for t in times]}
        for pod, v in values.items()
    ]
    body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
    (tmp / "kv.json").write_text(json.dumps(body))
    reps = {"metric": {}, "values": [[t, str(replicas)] for t in times]}
    recorded = {"status": "success", "data": {"resultType": "matrix", "result": [reps]}}
    (tmp / "replicas.json").write_text(json.dumps(recorded))
    cp = compile_policy(p)
    result = replay_engine.run(cp, load([tmp]), replay_engine.Options())
    step = result.steps[-1]
    combined = cp.judge.combine(step.readings, step.replicas, step.time)["kv"]
    return combined.value, step.decision


def simulate_path(p: ScalingPolicy, values: dict[str, float], replicas: int) -> tuple[float | None, ScaleDecision]:
    """``autoscaler simulate``: simulated replicas export the gauge; the pipeline scrapes them."""
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=15), pipeline.bind(p.spec))
    gauges = {pod: ReplicaGauges(0, 0, 1, 1, 0.1, kv) for pod, kv in values.items()}
    pipe.scrape(NOW - 5, gauges)
    obs = Observation(p.spec.target.ref(), status(replicas), pipe.visible(NOW))
    return _decide(compile_policy(p), obs)


def _decide(cp: CompiledPolicy, obs: Observation) -> tuple[float | None, ScaleDecision]:
    decisions, _ = decide(cp, obs, PolicyState(), NOW)
    combined = cp.judge.combine(obs.signals, obs.replicas, NOW)["kv"]
    (decision,) = (d for d in decisions if isinstance(d, ScaleDecision))
    return combined.value, decision


CASES = [
    pytest.param({}, {PODS[0]: 0.4, PODS[1]: 0.4}, 2, pytest.approx(0.4), 2, "Steady", id="kv-averaged"),
    pytest.param({"scope": "perReplica", "aggregate": "max"}, {PODS[0]: 0.2, PODS[1]: 0.9}, 2, pytest.approx(0.9),
                 4, "ScaleUp", id="explicit-max-on-per-replica"),
    pytest.param({}, {PODS[0]: 0.1}, 3, None, 3, "MetricsUnknown", id="1-of-3-pods-never-scales-down"),
]


@pytest.mark.parametrize(("signal", "values", "replicas", "value", "desired", "reason"), CASES)
async def test_every_command_sees_and_decides_the_same(
    signal: dict[str, Any], values: dict[str, float], replicas: int, value: Any, desired: int, reason: str,
    tmp_path: Path,
) -> None:
    p = policy(signal, "http://unused")
    outcomes = {
        "run": await run_path(p, values, replicas),
        "replay": replay_path(p, values, replicas, tmp_path),
        "simulate": simulate_path(p, values, replicas),
    }
    pods = await run_pods_path(p, [(NOW - 5, _gauge_exposition(values))], replicas)
    for path, (seen, decision) in {**outcomes, "run-pods": pods}.items():
        assert seen == value, path
        assert (decision.desired, decision.reason.value) == (desired, reason), (path, decision.message)
    # The pods source knows why the others are missing (their scrapes failed), where the others only count them.
    messages = {d.message for _, d in outcomes.values()}
    if reason == "MetricsUnknown":
        assert all("1 of 3 ready pods reported" in m for m in messages), messages
    shown, shown_reason = await observe_path(p, values, replicas)
    assert shown == value
    assert shown_reason == reason


def _rate_policy() -> ScalingPolicy:
    doc = policy({}, "http://unused").model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["signals"] = [{"name": "kv", "preset": "vllm.generation_tokens", "rate": {"windowSeconds": 60}}]
    doc["spec"]["policy"]["metrics"][0]["target"] = {"type": "Value", "value": 100}
    return ScalingPolicy.model_validate(doc)


RATE_CASES = [
    # 80 + 70 tokens a second summed (not averaged: 75): 150 for a target of 100 per replica, 2 -> 3.
    pytest.param({PODS[0]: (1000.0, 2200.0), PODS[1]: (500.0, 1550.0)}, 2, pytest.approx(150.0), 3, "ScaleUp",
                 id="per-pod-rates-summed"),
    # The second pod's counter restarted (a new server process): its increase is its new value, 600 in 15 s.
    pytest.param({PODS[0]: (1000.0, 2200.0), PODS[1]: (5000.0, 600.0)}, 2, pytest.approx(120.0), 3, "ScaleUp",
                 id="counter-reset"),
    pytest.param({PODS[0]: (1000.0, 1100.0)}, 2, None, 2, "MetricsUnknown", id="1-of-2-pods-is-unknown"),
]


@pytest.mark.parametrize(("counters", "replicas", "value", "desired", "reason"), RATE_CASES)
async def test_every_command_sees_and_decides_a_counters_rate_the_same(
    counters: dict[str, tuple[float, float]], replicas: int, value: Any, desired: int, reason: str, tmp_path: Path,
) -> None:
    """Two scrapes 15 s apart of each pod's generation-token counter: the pods source (``run`` without
    Prometheus) and the simulator take the rate themselves from the two scrapes; the Prometheus source and
    ``replay`` (what ``record`` saves) are given each pod's rate, as Prometheus' ``rate()`` computes it over these
    two points. Every command then combines and decides alike."""
    p = _rate_policy()
    first, second = NOW - 20, NOW - 5
    rates = {pod: (b - a if b >= a else b) / (second - first) for pod, (a, b) in counters.items()}
    scrapes = [
        (at, {pod: f"# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total {pair[i]}\n"
              for pod, pair in counters.items()})
        for i, at in enumerate((first, second))
    ]
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=15), pipeline.bind(p.spec))
    for i, at in enumerate((first, second)):
        pipe.scrape(at, {pod: ReplicaGauges(0, 0, 1, 1, 0.1, 0.1, generation_tokens=pair[i])
                         for pod, pair in counters.items()})
    outcomes = {
        "run": await run_path(p, rates, replicas),
        "run-pods": await run_pods_path(p, scrapes, replicas),
        "replay": replay_path(p, rates, replicas, tmp_path),
        "simulate": _decide(compile_policy(p), Observation(p.spec.target.ref(), status(replicas), pipe.visible(NOW))),
    }
    for path, (seen, decision) in outcomes.items():
        assert seen == value, path
        assert (decision.desired, decision.reason.value) == (desired, reason), (path, decision.message)


def test_replay_reads_recorded_per_pod_rates_like_the_controller(tmp_path: Path) -> None:
    # What `record` saves for a rate signal: each pod's rate(...) series; replay sums them through the core and
    # judges partial data against the recorded replica count, as the controller does.
    p = policy({}, "http://unused")
    doc = p.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["signals"] = [{"name": "kv", "preset": "vllm.generation_tokens", "rate": {"windowSeconds": 60}}]
    doc["spec"]["policy"]["metrics"][0]["target"] = {"type": "Value", "value": 100}
    rated = ScalingPolicy.model_validate(doc)
    value, decision = replay_path(rated, {PODS[0]: 80.0, PODS[1]: 70.0}, 2, tmp_path)
    assert value == pytest.approx(150.0)
    assert (decision.desired, decision.reason.value) == (3, "ScaleUp")
    value, decision = replay_path(rated, {PODS[0]: 80.0}, 2, tmp_path)
    assert value is None
    assert decision.reason.value == "MetricsUnknown"
    assert "1 of 2" in decision.message


def _bucket_dump(tmp: Path, pods: dict[str, dict[float, float]], replicas: int) -> None:
    """What `record` saves for a quantile signal: each pod's bucket rates, labelled by pod and `le`."""
    times = [NOW - 30, NOW - 15, NOW]
    series = [
        {"metric": {"namespace": "llm", "pod": pod, "le": "+Inf" if bound == float("inf") else repr(bound)},
         "values": [[t, str(rate)] for t in times]}
        for pod, buckets in pods.items() for bound, rate in buckets.items()
    ]
    (tmp / "kv.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}))
    reps = {"metric": {}, "values": [[t, str(replicas)] for t in times]}
    (tmp / "replicas.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                                                  "result": [reps]}}))


@pytest.mark.parametrize("mode", ["recorded", "whatif"])
def test_replay_takes_a_quantile_over_the_recorded_pods_summed_buckets_like_the_controller(
    tmp_path: Path, mode: replay_engine.Mode
) -> None:
    # The core's rule: the reporting pods' bucket rates summed, then the quantile (histogram_quantile over
    # sum by (le)); recorded mode counts the pods reporting against the recorded replicas, as the controller
    # does; whatif (our own count, which the trace has no pods for) takes the quantile over the pods as recorded.
    p = policy({}, "http://unused")
    doc = p.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["signals"] = [{"name": "kv", "preset": "vllm.ttft", "quantile": {"q": 0.5, "windowSeconds": 60}}]
    doc["spec"]["policy"]["metrics"][0]["target"] = {"type": "Value", "value": 0.2}
    cp = compile_policy(ScalingPolicy.model_validate(doc))
    inf = float("inf")
    # Summed: 6 at or below 0.1 s, 17 at or below 0.5 s, 20 in all: the median is 0.1 + 0.4 × (10 − 6) / (17 − 6).
    both = {PODS[0]: {0.1: 5.0, 0.5: 9.0, inf: 10.0}, PODS[1]: {0.1: 1.0, 0.5: 8.0, inf: 10.0}}
    _bucket_dump(tmp_path, both, 2)
    step = replay_engine.run(cp, load([tmp_path]), replay_engine.Options(mode=mode)).steps[-1]
    seen = cp.judge.combine(step.readings, step.replicas, step.time)["kv"]
    assert seen.value == pytest.approx(0.1 + 0.4 * 4 / 11)
    assert step.decision.reason.value == "ScaleUp", step.decision.message
    if mode == "recorded":  # whatif has applied its own earlier scale-ups by the last step
        assert (step.decision.current, step.decision.desired) == (2, 3)

    _bucket_dump(tmp_path, {PODS[0]: both[PODS[0]]}, 2)  # 1 of the 2 recorded replicas' pods reported
    step = replay_engine.run(cp, load([tmp_path]), replay_engine.Options(mode="recorded")).steps[-1]
    assert step.decision.reason.value == "MetricsUnknown"
    assert "1 of 2 ready pods reported" in step.decision.message


#: The simulator's TTFT bounds (+Inf last): every path is fed the same buckets, so the simulated replicas can
#: export them as they are.
TTFT_BOUNDS = pipeline.BOUNDS["ttft"]


def _counts(at_or_below: dict[float, int], base: int = 0) -> tuple[int, ...]:
    """Cumulative counts over ``TTFT_BOUNDS``, given the count at or below a few bounds (``base`` added to all)."""
    return tuple(base + max((n for b, n in at_or_below.items() if b <= bound), default=0) for bound in TTFT_BOUNDS)


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)


def _ttft_exposition(counts: tuple[int, ...]) -> str:
    """A vLLM server's TTFT histogram as it exposes it (``le`` written as its client library writes it)."""
    name = "vllm:time_to_first_token_seconds"
    lines = [f"# HELP {name} Histogram of time to first token in seconds.", f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{_le(b)}",model_name="m"}} {n}.0' for b, n in zip(TTFT_BOUNDS, counts, strict=True)]
    lines += [f'{name}_count{{model_name="m"}} {counts[-1]}.0', f'{name}_sum{{model_name="m"}} {counts[-1] * 0.4}']
    return "\n".join(lines) + "\n"


def _bucket_vector(rates: dict[str, dict[float, float]], at: float) -> str:
    """The Prometheus source's batch answer for a quantile signal: each pod's bucket rates (``sum by (namespace,
    pod, le)``) and the pod's sample time, as ``batch_query`` asks for them."""
    result: list[dict[str, Any]] = []
    for pod, buckets in rates.items():
        labels = {"namespace": "llm", "pod": pod}
        result += [{"metric": {**labels, "le": _le(b), "autoscaler_part": "value"}, "value": [NOW, repr(r)]}
                   for b, r in buckets.items()]
        result.append({"metric": {**labels, "autoscaler_part": "time"}, "value": [NOW, str(at)]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _quantile_policy() -> ScalingPolicy:
    doc = policy({}, "http://unused").model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["signals"] = [{"name": "kv", "preset": "vllm.ttft", "quantile": {"q": 0.9, "windowSeconds": 60}}]
    doc["spec"]["policy"]["metrics"][0]["target"] = {"type": "Value", "value": 1.0}
    return ScalingPolicy.model_validate(doc)


# Observations in the 15 s between the two scrapes, at or below each bound. Pod a: 30, all within 1 s; pod b: 30,
# a slower tail. Summed: 51 at or below 1 s, 60 in all: the 0.9 quantile (rank 54) is in (1, 2.5]:
# 1 + 1.5 × (54 − 51) / (60 − 51) = 1.5 s, for a target of 1 s: 2 -> 3. Pod a alone would read 0.5 s (rank 27 is
# its 0.5 s bucket's count), which would scale 2 -> 1: partial data must not be taken for the whole.
A_NEW = {0.1: 15, 0.5: 27, 1.0: 30}
B_NEW = {0.1: 3, 0.5: 12, 1.0: 21, 2.5: 30}
A_SCRAPES = (_counts({0.1: 400, 0.5: 800, 1.0: 900}), _counts({0.1: 415, 0.5: 827, 1.0: 930}))
B_SCRAPES = (_counts({0.1: 100, 0.5: 300, 1.0: 350, 2.5: 400}), _counts({0.1: 103, 0.5: 312, 1.0: 371, 2.5: 430}))
assert all(y - x == n for x, y, n in zip(*A_SCRAPES, _counts(A_NEW), strict=True))
assert all(y - x == n for x, y, n in zip(*B_SCRAPES, _counts(B_NEW), strict=True))
QUANTILE_CASES = [
    pytest.param({PODS[0]: A_SCRAPES, PODS[1]: B_SCRAPES}, pytest.approx(1.5), 3, "ScaleUp",
                 id="two-pods-buckets-summed"),
    # Pod b restarted between the scrapes (every bucket counter went down, from 1000 observations under 1 ms):
    # each bucket's increase is its new value, so the reading is the same 1.5 s.
    pytest.param({PODS[0]: A_SCRAPES, PODS[1]: ((1000,) * len(TTFT_BOUNDS), _counts(B_NEW))}, pytest.approx(1.5), 3,
                 "ScaleUp", id="bucket-counters-reset"),
    pytest.param({PODS[0]: A_SCRAPES}, None, 2, "MetricsUnknown", id="1-of-2-pods-never-reported"),
    # Pod b's first scrape is the newest one: no rate yet, so it has not reported either.
    pytest.param({PODS[0]: A_SCRAPES, PODS[1]: (None, B_SCRAPES[1])}, None, 2, "MetricsUnknown",
                 id="1-of-2-pods-has-no-rate-yet"),
]


@pytest.mark.parametrize(("histograms", "value", "desired", "reason"), QUANTILE_CASES)
async def test_every_command_sees_and_decides_a_histograms_quantile_the_same(
    histograms: dict[str, tuple[tuple[int, ...] | None, tuple[int, ...]]], value: Any, desired: int, reason: str,
    tmp_path: Path,
) -> None:
    """Two scrapes 15 s apart of each pod's vLLM TTFT histogram, ``quantile: {q: 0.9, windowSeconds: 60}``: the
    pods source (``run`` without Prometheus) and the simulator take each bucket's rate from the two scrapes
    themselves; the Prometheus source (``run``, ``observe``) and ``replay`` (what ``record`` saves) are given each
    pod's bucket rates, as ``rate()`` of each bucket series computes them over these two points (a counter that
    went down was reset: its increase is its new value). Every command then sums the reporting pods' buckets,
    takes the quantile, judges partial data and decides alike."""
    p = _quantile_policy()
    replicas = 2
    first, second = NOW - 20, NOW - 5
    rates = {
        pod: {b: (y - x if y >= x else y) / (second - first) for b, x, y in zip(TTFT_BOUNDS, old, new, strict=True)}
        for pod, (old, new) in histograms.items() if old is not None
    }
    scrapes = [
        (at, {pod: _ttft_exposition(counts) for pod, pair in histograms.items() if (counts := pair[i]) is not None})
        for i, at in enumerate((first, second))
    ]
    pipe = pipeline.MetricPipeline(PipelineSpec(scrape_interval_seconds=15), pipeline.bind(p.spec))
    for i, at in enumerate((first, second)):
        pipe.scrape(at, {pod: ReplicaGauges(0, 0, 1, 1, 0.1, 0.1, ttft=counts)
                         for pod, pair in histograms.items() if (counts := pair[i]) is not None})
    _bucket_dump(tmp_path, rates, replicas)
    cp = compile_policy(p)
    step = replay_engine.run(cp, load([tmp_path]), replay_engine.Options()).steps[-1]
    answer = _bucket_vector(rates, second)
    outcomes = {
        "run": await run_path(p, {}, replicas, answer),
        "run-pods": await run_pods_path(p, scrapes, replicas),
        "replay": (cp.judge.combine(step.readings, step.replicas, step.time)["kv"].value, step.decision),
        "simulate": _decide(cp, Observation(p.spec.target.ref(), status(replicas), pipe.visible(NOW))),
    }
    for path, (seen, decision) in outcomes.items():
        assert seen == value, path
        assert (decision.desired, decision.reason.value) == (desired, reason), (path, decision.message)
    if reason == "MetricsUnknown":  # the pods source says why the other is missing (its scrape failed or is new)
        for path in ("run", "replay", "simulate"):
            assert "1 of 2 ready pods reported" in outcomes[path][1].message, (path, outcomes[path][1].message)
    shown, shown_reason = await observe_path(p, {}, replicas, answer)
    assert shown == value
    assert shown_reason == reason
