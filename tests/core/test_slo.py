"""The ``slo`` policy type: replicas from the TTFT objective, capacity learned online in tokens.

Table cases drive ``SloAlgorithm.recommend`` directly (one evaluation, a given state); sequences drive it
step by step with the state it returns, as the engine does; engine cases go through ``compile_policy`` +
``decide``. Properties (hypothesis): unknown data never scales down; the forecast never removes capacity the
load needs; a steady load never flaps; equal inputs give equal outputs.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core import counters, sizing
from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    NO_OBSERVATIONS,
    Observation,
    PolicyState,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
)
from autoscaler.core.policies import slo
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import ScalingPolicy

#: A LeaderWorkerSet: one replica is one group, and the facts below are a group's.
TARGET = TargetRef(TargetKind.LEADER_WORKER_SET, "llm", "serving")
T0 = 10_000.0
STEP = 5.0
SIGNALS: list[dict[str, Any]] = [
    {"name": "waiting", "query": "w"},
    {"name": "running", "query": "r"},
    {"name": "used", "query": "u", "aggregate": "avg"},
    {"name": "kv", "query": "k", "aggregate": "avg"},
    {"name": "prompt", "query": "p"},
    {"name": "gen", "query": "g"},
    {"name": "ttft", "query": "t"},
    {"name": "qtime", "query": "q"},
    {"name": "plen", "query": "l"},
    {"name": "prefill", "query": "f"},
    {"name": "burst", "preset": "tgi.prompt_tokens", "rate": {"windowSeconds": 10}},
    {"name": "ttfth", "preset": "jetstream.ttft", "quantile": {"q": 0.99, "windowSeconds": 60}},
    {"name": "qtimeh", "preset": "jetstream.queue_time", "quantile": {"q": 0.99, "windowSeconds": 60}},
]
#: Prior: 5,000 prompt tokens/s, 600 generated tokens/s at a full batch of 48 slots; cold start 120 s.
BASE: dict[str, Any] = {
    "type": "slo",
    "objective": {"ttftSeconds": 2.0, "percentile": 0.99},
    "replica": {
        "slots": 48,
        "kvCacheTokens": 64000,
        "coldStartSeconds": 120,
        "prior": {"prefillTokensPerSecond": 5000, "generationTokensPerSecond": 600},
    },
    "signals": {"waiting": "waiting", "running": "running"},
}
TOKENS = {"signals": {"waiting": "waiting", "running": "running", "promptTokens": "prompt",
                      "generationTokens": "gen", "ttft": "ttft"}}
#: With a time-per-output-token objective, generated tokens count as work too (the additive model).
ADDITIVE = {**TOKENS, "objective": {"ttftSeconds": 2.0, "timePerOutputTokenSeconds": 0.1}}
#: Token rates and latency only: no gauge sees the decode, so generated tokens count as work.
TOKENS_ONLY = {"signals": {"waiting": "waiting", "promptTokens": "prompt", "generationTokens": "gen", "ttft": "ttft"}}


def config(**over: Any) -> dict[str, Any]:
    return {**BASE, **over}


def policy(cfg: Mapping[str, Any] | None = None, **spec: Any) -> ScalingPolicy:
    return ScalingPolicy.model_validate(
        {
            "apiVersion": "autoscaler.dev/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "s"},
            "spec": {
                "target": {"kind": "LeaderWorkerSet", "name": "llm", "namespace": "serving"},
                "maxReplicas": 200,
                "signals": SIGNALS,
                "policy": dict(cfg or BASE),
                **spec,
            },
        }
    )


class Driver:
    """Evaluates one policy step by step, feeding back the state it returns (as the engine does)."""

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        self.pol = policy(cfg)
        assert isinstance(self.pol.spec.policy, slo.SloPolicyConfig)
        self.algo = slo.build(self.pol.spec.policy)
        self.judge = SignalJudge(self.pol.spec)
        self.state: object | None = None
        self.now = T0
        #: Each replica's own value of some signals (what a pods source gives), for the next steps.
        self.per_replica: Mapping[str, Mapping[str, float]] = {}
        #: The engine's ``Context.eviction_s`` (a hand-off's victims' eviction), for every step.
        self.eviction_s: float | None = None
        #: Histogram buckets for the next step (``step``), by signal.
        self.histograms: Mapping[str, Mapping[float, float]] = {}
        #: A source's error for the next step (``step``), by signal (e.g. a histogram window with no request).
        self.errors: Mapping[str, str] = {}
        #: Of ``spec``, replicas waiting for Kueue's admission (``ReplicaStatus.gated``), for every step.
        self.gated = 0

    def step(self, spec: int, ready: int, starting: int = 0, /, **values: float | None) -> Recommendation:
        readings = {k: SignalReading(math.nan if v is None else v, self.now - 1) for k, v in values.items()}
        # A histogram signal's buckets (one pod's), as a pods source gives them, for the next step only.
        for k, buckets in self.histograms.items():
            readings[k] = SignalReading(values.get(k) or 1.0, self.now - 1, buckets={"pod-0": buckets})
        self.histograms = {}
        for k, error in self.errors.items():
            readings[k] = SignalReading(None, self.now - 1, "", error)
        self.errors = {}
        signals = self.judge.judge_all(readings, self.now)
        ctx = Context(
            self.now, TARGET, ReplicaStatus(spec, ready, starting, gated=self.gated), signals, self.pol.spec,
            self.per_replica,
            self.eviction_s,
        )
        rec, self.state = self.algo.recommend(ctx, self.state)
        self.now += STEP
        return rec

    def steady(self, seconds: float, spec: int, **values: float | None) -> Recommendation:
        """The same observation for ``seconds``, the count held at ``spec``; the last recommendation."""
        rec = None
        for _ in range(int(seconds / STEP)):
            rec = self.step(spec, spec, **values)
        assert rec is not None
        return rec

    @property
    def learned(self) -> slo.SloState:
        assert isinstance(self.state, slo.SloState)
        return self.state


# --- single evaluations ---------------------------------------------------------------------------------

CASES = [
    # (config, spec, ready, starting, signals, expected, reason, words in the message)
    pytest.param(None, 2, 2, 0, {"waiting": 20, "running": 80}, 3, Reason.SCALE_UP,
                 ["load 2.40", "80 running + 20 waiting of 42/replica", "utilization 0.80", "needs 3",
                  "scaling to 3"], id="slots-scale-up"),
    pytest.param(TOKENS_ONLY, 2, 2, 0, {"waiting": 0, "prompt": 8000, "gen": 600, "ttft": 0.5}, 4,
                 Reason.SCALE_UP, ["tokens 2.60 (8000 prompt + 600 generated tok/s)", "capacity 5000 prompt / 600",
                                   "TTFT p99 0.5s vs 2s", "needs 4"], id="tokens-scale-up"),
    # With a gauge of the running sequences, the first token's work is the prefill: the decode's share of the
    # replicas shows in the slots it holds, not in its tokens.
    pytest.param(TOKENS, 2, 2, 0, {"waiting": 0, "running": 10, "prompt": 12000, "gen": 6000, "ttft": 0.5}, 3,
                 Reason.SCALE_UP, ["tokens 2.40 (12000 prompt + 6000 generated tok/s, prefill only",
                                   "slots 0.24", "needs 3"], id="tokens-prefill-only-with-gauges"),
    pytest.param({**TOKENS, "objective": {"ttftSeconds": 2.0, "timePerOutputTokenSeconds": 0.1}}, 2, 2, 0,
                 {"waiting": 0, "running": 10, "prompt": 8000, "gen": 600, "ttft": 0.5}, 4, Reason.SCALE_UP,
                 ["tokens 2.60 (8000 prompt + 600 generated tok/s)", "needs 4"], id="tokens-with-a-tpot-objective"),
    pytest.param(None, 3, 1, 2, {"waiting": 20, "running": 80}, 3, Reason.WAITING_FOR_STARTING,
                 ["1 ready + 2 starting", "not scaling again"], id="starting-replicas-cover-the-need"),
    pytest.param(None, 3, 1, 2, {"waiting": 100, "running": 80}, 6, Reason.SCALE_UP,
                 ["needs 6"], id="more-than-starting-can-absorb"),
    pytest.param(None, 8, 8, 0, {"waiting": 0, "running": 10}, 8, Reason.STEADY,
                 ["observed 0s < the 120s hold window"], id="first-evaluation-never-scales-down"),
    pytest.param(TOKENS, 2, 2, 0, {"waiting": 5, "running": 40, "prompt": 2000, "gen": 200, "ttft": 3.0}, 3,
                 Reason.SCALE_UP, ["TTFT p99 3s vs 2s", "SLO missed with 2 ready: at least 3"],
                 id="slo-missed-adds-capacity-the-model-does-not-see"),
    pytest.param(TOKENS, 2, 2, 1, {"waiting": 5, "running": 40, "prompt": 2000, "gen": 200, "ttft": 3.0}, 2,
                 Reason.STEADY, [], id="slo-missed-while-starting-waits-for-them"),
    pytest.param({**BASE, "signals": {"kvCacheUsage": "kv"}}, 2, 2, 0, {"kv": 0.95}, 3, Reason.SCALE_UP,
                 ["KV 1.90 (95% of 2)"], id="kv-cache-load"),
    pytest.param({**BASE, "signals": {"slotsUsed": "used", "waiting": "waiting"}}, 2, 2, 0,
                 {"used": 1.0, "waiting": 10}, 4, Reason.SCALE_UP, ["96 running + 10 waiting"],
                 id="slots-used-fraction-times-slots"),
]


@pytest.mark.parametrize(("cfg", "spec", "ready", "starting", "values", "expected", "reason", "words"), CASES)
def test_recommendation(
    cfg: dict[str, Any] | None, spec: int, ready: int, starting: int, values: dict[str, float],
    expected: int, reason: Reason, words: list[str],
) -> None:
    rec = Driver(config(**cfg) if cfg else None).step(spec, ready, starting, **values)
    assert (rec.replicas, rec.reason) == (expected, reason), rec.message
    for word in words:
        assert word in rec.message, rec.message


UNKNOWN_CASES = [
    pytest.param(None, 2, 2, 0, {"waiting": 150, "running": None}, 5, Reason.SCALE_UP,
                 ["at least 5 on known signals", "unknown: running"], id="known-part-alone-needs-more"),
    pytest.param(None, 6, 6, 0, {"waiting": 10, "running": None}, None, Reason.METRICS_UNKNOWN,
                 ["unknown: running"], id="known-part-fits-hold"),
    pytest.param(None, 2, 2, 4, {"waiting": 150, "running": None}, None, Reason.METRICS_UNKNOWN, [],
                 id="known-part-covered-by-starting-hold"),
    pytest.param(TOKENS, 6, 6, 0, {"waiting": 0, "running": 1, "prompt": 100, "gen": 10, "ttft": None}, 6,
                 Reason.METRICS_UNKNOWN, ["no scale-down while ttft is unknown"], id="latency-unknown-no-scale-down"),
    pytest.param(TOKENS, 2, 2, 0, {"waiting": 0, "running": 10, "prompt": 13000, "gen": 600, "ttft": None}, 4,
                 Reason.SCALE_UP, ["unknown: ttft"], id="latency-unknown-still-scales-up"),
    pytest.param({**BASE, "signals": {"kvCacheUsage": "kv"}}, 3, 0, 3, {"kv": 0.5}, None, Reason.METRICS_UNKNOWN,
                 ["unknown: kv"], id="a-fraction-with-no-ready-replica-is-unknown"),
]


@pytest.mark.parametrize(("cfg", "spec", "ready", "starting", "values", "expected", "reason", "words"), UNKNOWN_CASES)
def test_unknown(
    cfg: dict[str, Any] | None, spec: int, ready: int, starting: int, values: dict[str, float | None],
    expected: int | None, reason: Reason, words: list[str],
) -> None:
    drv = Driver(config(**cfg) if cfg else None)
    drv.now -= 1000  # a long-observed target: only the unknown may hold it
    drv.state = slo.SloState(since=drv.now - 1000)
    rec = drv.step(spec, ready, starting, **values)
    assert (rec.replicas, rec.reason) == (expected, reason), rec.message
    if expected is None:
        assert rec.unknown_signals
    for word in words:
        assert word in rec.message, rec.message


def test_an_idle_targets_empty_latency_histogram_does_not_block_scale_down() -> None:
    drv = Driver(config(**TOKENS))
    idle = {"waiting": 0, "running": 0, "prompt": 0, "gen": 0, "ttft": None}
    rec = drv.steady(200, 4, **idle)
    assert rec.reason is Reason.SCALE_DOWN, rec.message
    assert rec.replicas == 0  # the engine bounds it by minReplicas


# --- sequences: learning, the SLO loop, the forecast, scale-down ------------------------------------------


def test_capacity_converges_within_minutes_from_saturated_serving() -> None:
    """Replicas that really serve 1.5× the prior, saturated (requests waiting): κ → 1.5 within 5 minutes."""
    drv = Driver(config(**TOKENS))
    true = 1.5
    for _ in range(int(300 / STEP)):
        # 4 ready, queue on each, prefilling 1.5× the prior per replica (the decode's tokens do not count: a
        # gauge of the running sequences is given).
        drv.step(40, 4, waiting=40, running=192, prompt=4 * true * 5000, gen=4 * 600, ttft=5.0)
    assert drv.learned.capacity_scale == pytest.approx(true, rel=0.05)
    assert drv.learned.capacity_samples > 0


def test_capacity_is_at_least_what_is_served_without_a_queue() -> None:
    drv = Driver(config(**TOKENS))
    drv.steady(120, 2, waiting=0, running=20, prompt=2 * 1.3 * 5000, gen=0, ttft=0.4)
    assert drv.learned.capacity_scale == pytest.approx(1.3)
    assert "1.30× prior" in drv.step(2, 2, waiting=0, running=20, prompt=13000, gen=0, ttft=0.4).message


def test_capacity_does_not_learn_while_the_ready_count_just_changed() -> None:
    drv = Driver(config(**TOKENS))
    drv.steady(30, 2, waiting=0, running=20, prompt=2 * 3 * 5000, gen=0, ttft=0.4)
    assert drv.learned.capacity_scale == 1.0  # rates still hold the work of replicas that went away


def test_the_latency_loop_lowers_utilization_at_risk_and_recovers_when_met() -> None:
    drv = Driver(config(**TOKENS))
    obs = {"waiting": 0, "running": 40, "prompt": 4000, "gen": 300}
    drv.steady(60, 4, **obs, ttft=1.9)  # 0.95 of the target: at risk
    lowered = drv.learned.utilization
    assert lowered is not None
    assert lowered < 0.8
    drv.steady(1800, 8, **obs, ttft=0.3)  # comfortably met for a long time
    recovered = drv.learned.utilization
    assert recovered is not None
    assert lowered < recovered <= 0.8
    assert recovered == pytest.approx(0.8, abs=0.01)


def _at_risk_while_one_replica_waits(cfg: dict[str, Any], *, gated: int, starting: int) -> tuple[float, float]:
    """4 ready replicas the model finds enough (load 1.6 at c 0.8), the TTFT p99 over its objective: the loop lowers
    ``c`` once and the floor asks for a fifth. Then 600 s with that fifth not serving (``gated`` waiting for
    Kueue's admission, or ``starting``), the quantile still over. ``c`` after the first step and at the end."""
    drv = Driver(cfg)
    drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP, utilization=0.8)
    obs = {"waiting": 0, "running": 40, "prompt": 4 * 0.4 * 5000, "gen": 300, "ttft": 2.4}
    first = drv.step(4, 4, **obs)
    assert first.replicas == 5, first.message  # the SLO missed with 4 ready: at least 5
    after_first = drv.learned.utilization
    assert after_first is not None
    drv.gated = gated
    for _ in range(int(600 / STEP)):
        drv.step(5, 4, starting, **obs)
    assert drv.learned.utilization is not None
    return after_first, drv.learned.utilization


@pytest.mark.parametrize("option", [True, False], ids=["waitForAdmission", "as-before"])
def test_a_risk_while_a_replica_asked_for_waits_for_admission_does_not_lower_the_utilization(option: bool) -> None:
    """``waitForAdmission``: a replica waiting for Kueue's admission is the answer to the risk already given, like
    one starting: until it serves, the risk persisting is the same evidence again, so ``c`` does not fall however
    long the wait for chips. Without the option ``c`` falls all the while (ho4: 0.844 → 0.580 over one wait)."""
    before, after = _at_risk_while_one_replica_waits(
        config(**TOKENS, waitForAdmission=option), gated=1, starting=0
    )
    assert before < 0.8
    if option:
        assert after == before
    else:
        assert after < before * 0.8


def test_a_replica_starting_holds_the_utilization_with_or_without_the_option() -> None:
    """The rule that already held for a replica starting: the option makes admission the same, nothing more."""
    for option in (True, False):
        before, after = _at_risk_while_one_replica_waits(
            config(**TOKENS, waitForAdmission=option), gated=0, starting=1
        )
        assert after == before


def test_the_utilization_falls_again_once_the_replica_waited_for_serves_and_the_risk_remains() -> None:
    """The hold lasts only while a replica asked for does not serve: with all five ready and the quantile still
    over its objective while the model finds them enough, the loop lowers ``c`` again. The message says why it
    held, with the count."""
    drv = Driver(config(**TOKENS, waitForAdmission=True))
    drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP, utilization=0.8)
    obs = {"waiting": 0, "running": 40, "prompt": 4 * 0.4 * 5000, "gen": 300, "ttft": 2.4}
    drv.step(4, 4, **obs)
    drv.gated = 1
    message = drv.step(5, 4, **obs).message
    assert "not lowered: 1 replica(s) asked for wait for Kueue's admission" in message, message
    held = drv.learned.utilization
    assert held is not None
    drv.gated = 0
    for _ in range(24):
        message = drv.step(5, 5, **obs).message
    assert drv.learned.utilization is not None
    assert drv.learned.utilization < held
    assert "wait for Kueue's admission" not in message


def test_a_quantile_comfortably_met_still_raises_the_utilization_while_a_replica_waits_for_admission() -> None:
    drv = Driver(config(**TOKENS, waitForAdmission=True))
    drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP, utilization=0.5)
    drv.gated = 1
    for _ in range(60):
        drv.step(5, 4, waiting=0, running=40, prompt=4 * 0.4 * 5000, gen=300, ttft=0.3)
    assert drv.learned.utilization is not None
    assert drv.learned.utilization > 0.5


def test_the_upward_probe_raises_utilization_where_the_slo_holds_at_loaded_replicas() -> None:
    """A conservative start (targetUtilization 0.8) is corrected upward, bounded by 1, only on evidence: the
    quantile comfortably met while the replicas ran in the upper part of the hysteresis band."""
    drv = Driver(config(**TOKENS))
    # 4 replicas at 0.75 replica-equivalents each (prefill), latency comfortably met, for 20 minutes.
    drv.steady(1200, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttft=0.3)
    c = drv.learned.utilization
    assert c is not None
    assert 0.8 < c <= 1.0
    assert c == pytest.approx(min(1.0, 0.75 / 0.8), abs=0.02)
    assert drv.learned.proven == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("ttft", "short", "per_replica"),
    [
        pytest.param(1.2, False, 0.75, id="quantile-not-comfortably-met"),
        pytest.param(0.3, True, 0.75, id="a-count-was-short-at-this-load"),
        pytest.param(0.3, False, 0.4, id="replicas-lightly-loaded"),
    ],
)
def test_the_upward_probe_needs_its_evidence(ttft: float, short: bool, per_replica: float) -> None:
    drv = Driver(config(**TOKENS))
    if short:
        drv.state = slo.SloState(short=(slo.ShortCount(drv.now - 10, 3, 3.0, 4),))
    drv.steady(1200, 4, waiting=0, running=40, prompt=4 * per_replica * 5000, gen=300, ttft=ttft)
    c = drv.learned.utilization
    assert c is not None
    assert c <= 0.8 + 1e-9


#: The TTFT read as a quantile over a 60 s window (what ``proveOverWindow`` takes the evidence's span from).
TOKENS_WINDOW = {"signals": {**TOKENS["signals"], "ttft": "ttfth"}}


@pytest.mark.parametrize("over_window", [True, False], ids=["over-window", "load-now"])
def test_the_probe_proves_only_a_load_its_quantile_window_held(over_window: bool) -> None:
    """``proveOverWindow``: a 60 s quantile comfortably met says the objective held at the loads its window held
    throughout, not at a load reached at its end (those requests are still waiting): only the window's lowest
    load is proven, and a load becomes proven once it has held for the whole window."""
    drv = Driver(config(**TOKENS_WINDOW, proveOverWindow=over_window))
    drv.steady(1200, 4, waiting=0, running=40, prompt=4 * 0.5 * 5000, gen=300, ttfth=0.3)
    assert drv.learned.proven == pytest.approx(0.5)
    drv.steady(15, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttfth=0.3)  # a climb, 15 s old
    assert drv.learned.proven == pytest.approx(0.5 if over_window else 0.75)
    drv.steady(65, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttfth=0.3)  # held a whole window
    assert drv.learned.proven == pytest.approx(0.75)


def test_over_its_window_a_history_shorter_than_the_window_proves_nothing() -> None:
    """A settled count whose load history does not yet span the quantile's window (a controller just started)
    proves nothing with ``proveOverWindow``; the load now, without it."""
    for over_window, proven in ((True, 0.0), (False, 0.75)):
        drv = Driver(config(**TOKENS_WINDOW, proveOverWindow=over_window))
        drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP)
        drv.step(4, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttfth=0.3)
        assert drv.learned.proven == pytest.approx(proven)


def test_over_its_window_nothing_is_proven_while_requests_wait() -> None:
    """Requests waiting now are in no latency window yet: with ``proveOverWindow`` the load is not proven while
    they wait, however long the load has held; without it, as before."""
    for over_window, proven in ((True, 0.0), (False, 0.75)):
        drv = Driver(config(**TOKENS_WINDOW, proveOverWindow=over_window))
        drv.steady(1200, 4, waiting=2, running=40, prompt=4 * 0.75 * 5000, gen=300, ttfth=0.3)
        assert drv.learned.proven == pytest.approx(proven)


#: Gauges and the TTFT read as a quantile over a 60 s window (``breachOverWindow`` judges a miss over that window).
GAUGES_WINDOW = {"signals": {"waiting": "waiting", "running": "running", "ttft": "ttfth"}}


def _burst_then(drv: Driver, running: float) -> None:
    """Two replicas at a quiet load, a burst of 15 s (70 running: the model asks for 3), then ``running`` for 25 s,
    the TTFT comfortably met throughout; the count held at 2."""
    drv.steady(600, 2, waiting=0, running=20, ttfth=0.3)
    drv.steady(15, 2, waiting=0, running=70, ttfth=0.3)
    drv.steady(25, 2, waiting=0, running=running, ttfth=0.3)


@pytest.mark.parametrize("over_window", [True, False], ids=["over-window", "load-now"])
def test_a_miss_after_its_burst_has_passed_adds_no_replica_over_its_window(over_window: bool) -> None:
    """``breachOverWindow``: a 60 s TTFT quantile over the objective once the burst that caused it has passed (the
    load now well below the window's highest) is no floor of one replica more: a replica ready a cold start later
    answers no request of that window. The model sizes, and it needs 2. Without the option, the floor: 3."""
    drv = Driver(config(**GAUGES_WINDOW, breachOverWindow=over_window))
    _burst_then(drv, running=8)
    c = drv.learned.utilization
    assert c is not None
    rec = drv.step(2, 2, waiting=0, running=8, ttfth=2.6)
    if over_window:
        assert rec.replicas == 2
        assert "no floor, the model sizes" in rec.message
        assert "SLO missed with 2 ready: at least 3" not in rec.message
    else:
        assert rec.replicas == 3
        assert "SLO missed with 2 ready: at least 3" in rec.message
    # The loop judges the miss at the window's highest load: there the model had asked for more (a risk it
    # explains is under-provisioning, not a model error), so the utilization at the SLO does not drop.
    assert drv.learned.utilization == (pytest.approx(c) if over_window else pytest.approx(c * math.exp(-5 / 30 * 0.5)))


@pytest.mark.parametrize("over_window", [True, False], ids=["over-window", "load-now"])
def test_a_miss_at_a_load_comparable_to_its_window_keeps_the_floor(over_window: bool) -> None:
    """The load now within the hysteresis of the window's highest (the burst still on): the floor holds, with the
    option as without it."""
    drv = Driver(config(**GAUGES_WINDOW, breachOverWindow=over_window))
    _burst_then(drv, running=60)
    rec = drv.step(2, 2, waiting=0, running=60, ttfth=2.6)
    assert rec.replicas == 3
    assert "SLO missed with 2 ready: at least 3" in rec.message


@pytest.mark.parametrize("level", [True, False], ids=["level", "load-now"])
def test_a_peak_of_a_steady_occupancy_starts_no_replica_at_its_level(level: bool) -> None:
    """``loadLevel``: the slot unit is a mean occupancy (its fluctuations priced by the Poisson rule), so one sample
    above what the ready replicas carry at the SLO, on a steady load well within it, is a fluctuation: the scale-up
    sizes the load's level (the trend's fitted line now), and holds 2. Without the option that one sample starts a
    third replica."""
    drv = Driver(config(**GAUGES_WINDOW, loadLevel=level))
    drv.steady(600, 2, waiting=0, running=55, ttfth=0.3)
    rec = drv.step(2, 2, waiting=0, running=72, ttfth=0.3)
    if level:
        assert rec.replicas == 2
        assert "sized at its level" in rec.message
    else:
        assert rec.replicas == 3


def test_at_its_level_a_ramp_is_sized_without_lag() -> None:
    """On a ramp the fitted line's value now is the load now (an average over a window would lag it by half the
    window; a ramp out of a flat stretch is bent, and there the line lags until the ramp fills the trend's span):
    every recommendation along it is the same with ``loadLevel`` as without. The forecast is off, so that
    the level alone sizes (on a ramp the trend would cover a lag)."""
    recs: dict[bool, list[int | None]] = {}
    for level in (True, False):
        drv = Driver(config(**GAUGES_WINDOW, loadLevel=level, forecast={"enabled": False}))
        recs[level] = [drv.step(2, 2, waiting=0, running=20 + 0.3 * k, ttfth=0.3).replicas for k in range(200)]
    assert recs[True] == recs[False]
    assert recs[True][-1] == 3


def test_at_its_level_a_held_queue_or_too_short_a_history_is_sized_now() -> None:
    """A queue held on every replica for as long as saturation takes is no fluctuation, and fewer than 4 samples
    fit no line: in both the load now is sized, as without ``loadLevel``."""
    last: dict[bool, Recommendation] = {}
    for level in (True, False):
        drv = Driver(config(**GAUGES_WINDOW, loadLevel=level))
        drv.steady(600, 2, waiting=0, running=55, ttfth=0.3)
        recs = [drv.step(2, 2, waiting=4, running=72, ttfth=0.3) for _ in range(slo.SATURATED_EVALUATIONS)]
        last[level] = recs[-1]
    assert last[True].replicas == last[False].replicas
    assert (last[True].replicas or 0) > 2
    assert "sized at its level" not in last[True].message
    fresh = Driver(config(**GAUGES_WINDOW, loadLevel=True))
    fresh.steady(10, 2, waiting=0, running=55, ttfth=0.3)
    assert fresh.step(2, 2, waiting=0, running=68, ttfth=0.3).replicas == 3


def _ar1(rng: random.Random, n: int, phi: float, sd: float) -> list[float]:
    """``n`` samples of a stationary AR(1) series (lag-1 correlation ``phi``, standard deviation ``sd``)."""
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, sd * math.sqrt(1.0 - phi * phi))
        out.append(x)
    return out


def test_the_slow_ramp_forecast_adds_ahead_of_a_ramp_and_never_removes() -> None:
    """``forecast.ramp`` on and off on the same inputs: two replicas, a load rising from 0.6 by +0.06
    replica-equivalents a minute (0.12 per 120 s cold start) with AR(1) noise of 0.15 sd, on ten seeded ramps.
    Every recommendation with it is at least the one without (it only adds), and never below what the load now
    needs at the utilization (0.8, nothing measured). On most ramps it starts the third replica earlier, at a lower
    load, citing the slow ramp; on none later."""
    earlier = 0
    for seed in range(10):
        noise = _ar1(random.Random(f"policy-ramp/{seed}"), 300, 0.75, 0.15)
        with_ramp, without = Driver(config(forecast={"ramp": True})), Driver(config())
        first: dict[bool, int] = {}
        for k, e in enumerate(noise):
            load = max(0.0, 0.6 + 0.06 / 60 * STEP * k + e)
            a = with_ramp.step(2, 2, waiting=0, running=42 * load)
            b = without.step(2, 2, waiting=0, running=42 * load)
            assert a.replicas is not None
            assert b.replicas is not None
            assert a.replicas >= b.replicas, (a.message, b.message)
            assert a.replicas >= math.ceil(float(a.message.split("load ")[1].split()[0]) / 0.8 - 1e-9)
            for ramp, rec in ((True, a), (False, b)):
                if ramp not in first and (rec.replicas or 0) > 2:
                    first[ramp] = k
                    if ramp and "slow ramp +" in rec.message:
                        assert "over the cold start" in rec.message
            if len(first) == 2:
                break
        assert first[True] <= first[False]
        earlier += first[True] < first[False]
    assert earlier >= 6


def test_a_risk_withdraws_what_the_probe_proved() -> None:
    drv = Driver(config(**TOKENS))
    drv.steady(1200, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttft=0.3)
    drv.steady(60, 4, waiting=0, running=40, prompt=4 * 0.75 * 5000, gen=300, ttft=1.9)
    assert drv.learned.proven < 0.75
    c = drv.learned.utilization
    assert c is not None
    assert c < 0.8


def test_counter_rates_filling_their_window_are_not_a_trend() -> None:
    """A fresh controller's rates ramp from nothing over their window: not a rise, not a trend."""
    signals = [
        {"name": s["name"], "preset": f"tgi.{s['name'].replace('gen', 'generation')}_tokens",
         "rate": {"windowSeconds": 60}} if s["name"] in ("prompt", "gen") else s
        for s in SIGNALS
    ]
    pol = policy(config(**TOKENS), signals=signals)
    drv = Driver(config(**TOKENS))
    drv.pol = pol
    drv.judge = SignalJudge(pol.spec)
    rec = None
    for i in range(24):  # 120 s; the rate reaches its level after 60 s
        filled = min(1.0, (i * STEP + STEP) / 60)
        rec = drv.step(3, 3, waiting=0, running=20, prompt=filled * 2 * 5000, gen=300, ttft=0.3)
    assert rec is not None
    assert "trend" not in rec.message, rec.message
    assert "largest rise within a cold start seen in 1800s 0.00" in rec.message or rec.reason is Reason.STEADY
    assert all(x.t >= T0 + 60 for x in drv.learned.history)


def test_queue_time_and_tpot_close_the_loop_too() -> None:
    cfg = config(
        objective={"ttftSeconds": 2.0, "timePerOutputTokenSeconds": 0.1},
        signals={"running": "running", "queueTime": "qtime", "timePerOutputToken": "ttft"},
    )
    rec = Driver(cfg).step(2, 2, running=10, qtime=0.1, ttft=0.25)
    assert "TPOT p99 0.25s vs 0.1s" in rec.message
    assert "SLO missed" in rec.message
    assert rec.replicas == 3


def test_a_ramp_is_forecast_over_the_cold_start() -> None:
    drv = Driver()
    rec = None
    for i in range(48):  # 240 s of a ramp: +0.5 replica-equivalents a minute
        running = 48 * (1.0 + 0.5 * i * STEP / 60)
        rec = drv.step(8, 8, waiting=0, running=running)
    assert rec is not None
    assert "trend ≥ +" in rec.message
    load = 1.0 + 0.5 * 47 * STEP / 60
    forecast = float(rec.message.split("forecast ")[1].split()[0])
    assert load < forecast <= 2 * load
    # Sized on the forecast, not on the load now.
    assert rec.replicas is not None
    assert rec.replicas >= math.ceil(forecast / 0.8) > math.ceil(load / 0.8)


def test_a_ramp_is_forecast_further_over_a_hand_offs_lead_for_the_arbitration() -> None:
    """``Recommendation.ahead``: the same trend over two cold starts (a hand-off's lead: the victim's eviction
    plus the cold start), never below the count decided now; without a trend it says no more than that."""
    drv = Driver()
    rec = None
    for i in range(48):
        rec = drv.step(8, 8, waiting=0, running=48 * (1.0 + 0.5 * i * STEP / 60))
    assert rec is not None
    assert rec.ahead is not None
    assert rec.ahead.within_s == 2 * 120
    needs = int(rec.message.split("⇒ needs ")[1].split()[0].rstrip(";"))  # over one cold start
    assert rec.ahead.replicas > needs
    flat = Driver()
    for i in range(60):
        rec = flat.step(3, 3, waiting=0, running=96 + (12 if i % 2 else -12))
    assert rec is not None
    assert rec.ahead is not None
    assert rec.ahead.replicas == int(rec.message.split("⇒ needs ")[1].split()[0].rstrip(";"))


def test_noise_without_a_trend_forecasts_nothing() -> None:
    drv = Driver()
    rec = None
    for i in range(60):
        rec = drv.step(3, 3, waiting=0, running=96 + (12 if i % 2 else -12))
    assert rec is not None
    assert "trend" not in rec.message
    assert "burst" not in rec.message


def test_a_burst_is_detected_and_holds_its_peak() -> None:
    drv = Driver()
    drv.steady(300, 2, waiting=0, running=20)
    rec = drv.step(2, 2, waiting=300, running=96)
    assert "burst" in rec.message
    assert rec.replicas is not None
    assert rec.replicas > 2


def test_seasonality_forecasts_the_phase_seen_one_period_ago() -> None:
    period = 3600.0
    cfg = config(forecast={"seasonalityPeriodSeconds": period, "seasonalityBuckets": 60})
    drv = Driver(cfg)

    def running(t: float) -> float:
        # Busy in the second quarter of every period.
        return 400.0 if period / 4 <= (t - T0) % period < period / 2 else 20.0

    recs = []
    for _ in range(int(2 * period / 60)):  # two periods, one evaluation a minute
        spec = 10
        recs.append((drv.now, drv.step(spec, spec, waiting=0, running=running(drv.now))))
        drv.now += 60 - STEP
    # In the second period, a cold start before the busy phase, the forecast already holds it.
    before = [r for t, r in recs if period + period / 4 - 120 <= t - T0 < period + period / 4]
    assert before
    assert all("seasonal" in r.message for r in before)
    assert all(r.replicas is not None and r.replicas >= 10 for r in before)
    # In the first period nothing was seen yet.
    first = [r for t, r in recs if period / 4 - 120 <= t - T0 < period / 4]
    assert first
    assert not any("seasonal" in r.message for r in first)


def test_scale_down_waits_for_the_hold_window_and_keeps_the_largest_rise() -> None:
    drv = Driver()
    drv.steady(600, 4, waiting=0, running=40)
    # A swing seen before: within a cold start the load rose by 2 replica-equivalents.
    for _ in range(24):
        drv.step(4, 4, waiting=0, running=140)
    rec = drv.steady(200, 4, waiting=0, running=40)
    # 0.83 + the 2.08 rise at ≤ 0.64 utilization ⇒ 5 > 4: not released.
    assert rec.replicas == 4, rec.message
    assert rec.reason is Reason.STEADY
    assert "largest rise" in rec.message
    assert "hysteresis 0.2" in rec.message


#: ``scaleDown.releaseShortCounts`` / ``releaseRise``: the memories go after ``MIN_RECURRENCE_FALLS`` cold starts
#: of evidence (6 × 120 s).
EVIDENCE_S = slo.MIN_RECURRENCE_FALLS * 120


def _after_a_rise(release: bool) -> Driver:
    """4 replicas at 0.96 replica-equivalents, then a rise of 2.4 within a cold start (as in
    ``test_scale_down_waits_for_the_hold_window_and_keeps_the_largest_rise``), back at 0.96 since."""
    drv = Driver(config(scaleDown={"releaseRise": release}))
    drv.steady(600, 4, waiting=0, running=40)
    for _ in range(24):
        drv.step(4, 4, waiting=0, running=140)
    return drv


@pytest.mark.parametrize("release", [True, False], ids=["release-on-evidence", "kept-15-cold-starts"])
def test_the_largest_rise_is_released_after_six_cold_starts_of_evidence(release: bool) -> None:
    """``scaleDown.releaseRise``: a rise that has not come back in 6 cold starts with the SLO held on known
    signals is released (rule of three: the 95 % upper bound of its chance per cold start is 3/6); without it the
    rise is kept its 1800 s lookback whatever follows."""
    drv = _after_a_rise(release)
    rec = drv.steady(EVIDENCE_S - 60, 4, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    rec = drv.steady(120, 4, waiting=0, running=40)
    if release:
        # 0.96 at ≤ 0.64 (the band) ⇒ 2.
        assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message
        assert "less what 6 cold starts of evidence with the SLO held released" in rec.message
    else:
        assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message


def test_a_rise_released_stepwise_goes_one_replica_per_six_cold_starts_of_evidence_at_the_count() -> None:
    """``scaleDown.releaseRiseStepwise``: the evidence that released the rise was gathered at 4 ready; it takes the
    count to 3, not at once to the 2 the band alone keeps, and 3 to 2 only once 3 replicas have themselves held the
    SLO for 6 cold starts of evidence."""
    drv = Driver(config(scaleDown={"releaseRise": True, "releaseRiseStepwise": True}))
    drv.steady(600, 4, waiting=0, running=40)
    for _ in range(24):
        drv.step(4, 4, waiting=0, running=140)
    rec = drv.steady(EVIDENCE_S - 60, 4, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    rec = drv.steady(120, 4, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
    assert "not below 3: one below the 4 ready the evidence that released the rise was gathered at" in rec.message
    rec = drv.steady(EVIDENCE_S - 60, 3, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (3, Reason.STEADY), rec.message
    rec = drv.steady(120, 3, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message


def test_evidence_is_credited_to_the_count_that_held_it_and_only_since_the_last_recurrence() -> None:
    """``_evidenced_count``: 6 cold starts (of 120 s) of evidence at a count or fewer; the evidence a sample's
    evaluation added (the next sample's clock less its own) is its count's; before the last recurrence, none."""
    def history(*spans: tuple[int, float]) -> tuple[slo.LoadSample, ...]:
        out, clock, t = [], 0.0, 0.0
        for ready, seconds in spans:
            for _ in range(int(seconds / 5)):
                out.append(slo.LoadSample(t, None, 1.0, None, evidence=clock, ready=ready))
                clock += 5.0
                t += 5.0
        out.append(slo.LoadSample(t, None, 1.0, None, evidence=clock, ready=0))
        return tuple(out)

    count = slo.SloAlgorithm._evidenced_count
    assert count(history((4, 720)), 720, 0.0, 120) == 4
    assert count(history((4, 715)), 715, 0.0, 120) is None
    # Evidence at 3 is evidence at 4 too (fewer held it), not the other way round.
    assert count(history((4, 360), (3, 360)), 720, 0.0, 120) == 4
    assert count(history((4, 360), (3, 720)), 1080, 0.0, 120) == 3
    # A recurrence at 360 s (400 s) of evidence: what came before it is no evidence.
    assert count(history((3, 360), (4, 720)), 1080, 360.0, 120) == 4
    assert count(history((3, 720), (4, 360)), 1080, 400.0, 120) is None


def _a_rise_at_one_replica(
    absorbed: bool, *, ttft: float = 0.3, waiting: float = 0, blip: float = 0, qtime: float | None = None
) -> Driver:
    """One replica at a quiet load (15 running: 0.36 of a replica-equivalent, 42 sequences a replica at 0.8), a
    rise to 40 running (0.96: the model asks for a second), carried by the one ready replica while the second
    starts (its cold start, 120 s), with the TTFT at ``ttft`` and ``waiting`` requests waiting during the rise
    (``blip`` of them for one evaluation only); then two ready at the quiet load (15 running in all) for the hold
    window and the quantile's window. ``qtime``: the queue-time p99 read as ``signals.queueTimeEvidence``."""
    roles = {**GAUGES_WINDOW["signals"], **({} if qtime is None else {"queueTimeEvidence": "qtimeh"})}
    drv = Driver(config(signals=roles, scaleDown={"riseAbsorbed": absorbed}))
    more = {} if qtime is None else {"qtimeh": qtime}
    drv.steady(600, 1, waiting=0, running=15, ttfth=0.3, **more)
    rec = drv.step(1, 1, waiting=waiting, running=40, ttfth=ttft, **more)
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_UP), rec.message
    for i in range(24):
        drv.step(2, 1, 1, waiting=waiting + (blip if i == 12 else 0), running=40, ttfth=ttft, **more)
    for _ in range(60 // 5):
        drv.step(2, 1, 1, waiting=0, running=15, ttfth=0.3, **more)
    return drv


@pytest.mark.parametrize("absorbed", [True, False], ids=["absorbed-keeps-at-most-its-count", "rise-kept"])
def test_a_rise_the_ready_count_carried_with_the_slo_held_keeps_no_more_than_that_count(absorbed: bool) -> None:
    """``scaleDown.riseAbsorbed``: the rise 0.36 → 0.96 was carried by one ready replica with the TTFT at 0.3 s of
    2 s and nothing waiting: once the hold window's peak has passed, one replica is kept, not the two that
    ``(load + rise) / c`` = (0.36 + 0.60) / 0.8 keeps for the rise's 1800 s lookback without the option."""
    drv = _a_rise_at_one_replica(absorbed)
    rec = drv.steady(50, 2, waiting=0, running=15, ttfth=0.3)
    assert rec.replicas == 2, rec.message  # the hold window's peak (0.96) still in it
    rec = drv.steady(100, 2, waiting=0, running=15, ttfth=0.3)
    if absorbed:
        assert (rec.replicas, rec.reason) == (1, Reason.SCALE_DOWN), rec.message
        assert "a rise of 0.60 absorbed by 1 ready with the SLO held keeps at most 1" in rec.message
    else:
        assert (rec.replicas, rec.reason) == (2, Reason.STEADY), rec.message
        assert "(0.36 + 0.60) at ≤" in rec.message


@pytest.mark.parametrize(
    ("ttft", "waiting"), [(2.6, 0), (1.8, 0), (0.3, 2)],
    ids=["slo-missed-during-the-rise", "slo-at-risk-during-the-rise", "a-queue-held-during-the-rise"],
)
def test_a_rise_carried_with_the_slo_missed_or_a_queue_held_is_kept(ttft: float, waiting: float) -> None:
    """A rise during which the SLO was missed or at risk (the quantile at 0.9 of the objective: the lower bound its
    window supports), or a queue held on every replica, was not absorbed: it keeps its count as without the option
    (the waits measured short by the queue-time quantile, 0.3 s, in each)."""
    drv = _a_rise_at_one_replica(True, ttft=ttft, waiting=waiting, qtime=0.3)
    rec = drv.steady(150, 2, waiting=0, running=15, ttfth=0.3, qtimeh=0.3)
    assert rec.replicas == 2, rec.message
    assert "absorbed by 1" not in rec.message


@pytest.mark.parametrize(
    ("qtime", "kept"), [(None, True), (0.3, False), (1.8, True)],
    ids=["a-wait-unmeasured-is-no-evidence", "a-wait-measured-short", "a-wait-measured-at-risk"],
)
def test_a_request_waiting_during_the_rise_is_evidence_only_once_its_wait_is_measured(
    qtime: float | None, kept: bool
) -> None:
    """A request waiting (one evaluation, no queue held) is in no latency window yet, and JetStream's TTFT holds no
    wait in its prefill backlog: the rise is absorbed only where a queue-time quantile shows the wait within the
    objective's risk line (0.8 × 2 s), read as ``signals.queueTimeEvidence`` (not in the latency loop)."""
    drv = _a_rise_at_one_replica(True, blip=1, qtime=qtime)
    rec = drv.steady(150, 2, waiting=0, running=15, ttfth=0.3, **({} if qtime is None else {"qtimeh": qtime}))
    assert rec.replicas == (2 if kept else 1), rec.message


def test_queue_time_as_evidence_is_read_by_the_absorbed_rise_only() -> None:
    with pytest.raises(ValidationError, match=r"queueTimeEvidence is read by scaleDown\.riseAbsorbed only"):
        policy(config(signals={**GAUGES_WINDOW["signals"], "queueTimeEvidence": "qtimeh"}))


def test_absorbing_a_rise_needs_a_latency_signal() -> None:
    with pytest.raises(ValidationError, match="riseAbsorbed"):
        policy(config(scaleDown={"riseAbsorbed": True}))


def test_a_stepwise_release_needs_the_rise_released() -> None:
    with pytest.raises(ValidationError, match="releaseRiseStepwise bounds releaseRise"):
        policy(config(scaleDown={"releaseRiseStepwise": True}))


def test_missing_data_releases_nothing() -> None:
    """An evaluation with a signal unknown is no evidence: the clock stops (and nothing is released on it); the
    evidence before and after the gap adds up."""
    drv = _after_a_rise(True)
    drv.steady(EVIDENCE_S / 2, 4, waiting=0, running=40)
    held = drv.learned.evidence
    drv.steady(EVIDENCE_S, 4, waiting=0, running=None)
    assert drv.learned.evidence == held
    rec = drv.steady(EVIDENCE_S / 2 - 60, 4, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    rec = drv.steady(120, 4, waiting=0, running=40)
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message


def test_an_slo_miss_restarts_the_evidence() -> None:
    """An SLO miss is a recurrence: the evidence restarts, and the rise before it is kept 6 cold starts more."""
    drv = Driver(config(scaleDown={"releaseRise": True}, signals={**BASE["signals"], "ttft": "ttft"}))
    drv.steady(600, 4, waiting=0, running=40, ttft=0.5)
    for _ in range(24):
        drv.step(4, 4, waiting=0, running=140, ttft=0.5)
    drv.steady(EVIDENCE_S / 2, 4, waiting=0, running=40, ttft=0.5)
    drv.step(4, 4, waiting=0, running=40, ttft=2.5)
    rec = drv.steady(EVIDENCE_S - 60, 4, waiting=0, running=40, ttft=0.5)
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    assert "(0.96 + 2.40)" in rec.message
    rec = drv.steady(120, 4, waiting=0, running=40, ttft=0.5)
    assert rec.reason is Reason.SCALE_DOWN, rec.message
    assert "(0.96 + 0.00)" in rec.message


@pytest.mark.parametrize("release", [True, False], ids=["release-on-evidence", "kept"])
def test_a_short_count_found_at_a_near_zero_load_is_released_on_evidence(release: bool) -> None:
    """A count found short at a served load near 0 (a burst the gauges average away) applies at every load, and
    at a higher ready count it is never seen enough at that count: without ``releaseShortCounts`` it holds for
    good. With it, 6 cold starts of evidence release it."""
    drv = Driver(config(scaleDown={"releaseShortCounts": release}))
    drv.steady(600, 4, waiting=0, running=40)
    found = drv.learned.evidence
    drv.state = replace(drv.learned, short=(slo.ShortCount(drv.now - STEP, 2, 0.0, 3, found),))
    rec = drv.steady(EVIDENCE_S - 60, 3, waiting=0, running=40)
    assert rec.replicas == 3, rec.message
    assert "not below 3" in rec.message
    rec = drv.steady(120, 3, waiting=0, running=40)
    if release:
        assert (rec.replicas, rec.reason) == (2, Reason.SCALE_DOWN), rec.message
        assert drv.learned.short == ()
    else:
        assert (rec.replicas, rec.reason) == (3, Reason.STEADY), rec.message
        assert [x.enough for x in drv.learned.short] == [3]


@pytest.mark.parametrize(
    ("from_level", "from_below"), [(True, False), (False, False), (True, True)],
    ids=["from-the-level-now", "from-any-level", "from-below-counts-above-the-level"],
)
def test_a_climb_out_of_a_lower_trough_is_not_a_rise_from_the_load_now(from_level: bool, from_below: bool) -> None:
    """``scaleDown.riseFromLevel`` (default on): the largest rise counts only climbs that start at a load at least
    the load now. Here the load climbed from 0.24 (10 sequences) to 1.44 (60; a replica-equivalent is 41.7) within
    a cold start and stays there: that climb has happened, it is not a rise still to come from 1.44. From the level
    now the rise is 0, and the band (peak 1.44 at ≤ 0.64 utilization) keeps 3 of 4; counting the climb from the
    trough, 1.44 + 1.20 at ≤ 0.8 keeps all 4. With ``riseFromBelow`` the climb counts for its part above the load
    now, which is none (it ended at the load now): 3, as from the level. (A rise that starts at the load now still
    counts: ``test_scale_down_waits_for_the_hold_window_and_keeps_the_largest_rise``.)"""
    cfg = config(scaleDown={"riseFromLevel": from_level, "riseFromBelow": from_below})
    drv = Driver(cfg)
    drv.steady(600, 4, waiting=0, running=10)
    rec = drv.steady(300, 4, waiting=0, running=60)
    if from_level:
        assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
        assert "largest rise within a cold start from a load at least this one" in rec.message
        assert "(1.44 + 0.00)" in rec.message
    else:
        assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
        assert "(1.44 + 1.20)" in rec.message


@pytest.mark.parametrize("from_below", [True, False], ids=["from-below-counts-above-the-level", "from-level-only"])
def test_the_first_samples_of_a_burst_out_of_a_lull_do_not_forget_the_last_burst(from_below: bool) -> None:
    """``scaleDown.riseFromBelow`` (opt-in): bursts of prompt work separated by silence climb from 0 each time. The
    first burst (0 → 2.2 replica-equivalents of prefill: 11,000 prompt tokens/s at 5,000 per replica) held 4; after
    it, the lull, and at the first samples of the next burst the load is 0.5. From the level now alone no climb
    counts (every one started at 0), and the hold window (120 s) has passed: 4 → 1. Counted for its part above
    the load now, 0.5 + 1.7 at ≤ 0.8 keeps 3."""
    cfg = config(**TOKENS, scaleDown={"riseFromBelow": from_below})
    drv = Driver(cfg)
    lull = {"waiting": 0, "running": 0, "prompt": 0, "gen": 0, "ttft": 0.5}
    drv.steady(120, 4, **lull)
    drv.steady(30, 4, **{**lull, "running": 5, "prompt": 11000, "gen": 100})
    drv.steady(200, 4, **lull)
    rec = drv.steady(10, 4, **{**lull, "running": 2, "prompt": 2500, "gen": 20})
    if from_below:
        assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
        assert "(from below it, its part above) seen in" in rec.message
        assert "(0.50 + 1.70)" in rec.message
    else:
        assert (rec.replicas, rec.reason) == (1, Reason.SCALE_DOWN), rec.message
        assert "(0.50 + 0.00)" in rec.message


@pytest.mark.parametrize("within", [True, False], ids=["within-window-and-objective", "within-window"])
def test_a_short_windows_work_is_served_within_the_window_and_the_objective(within: bool) -> None:
    """``workWithinObjective`` (opt-in): the prompt counter rated over 10 s reads 4,500 tokens/s, 0.90 of the prior's
    5,000 per replica. Served within the window alone that is 0.90 replica-equivalents, over the 0.8 utilization at
    the SLO: 2 replicas. The window's work only has to start within the window plus the 2 s objective: 0.90 × 10/12
    = 0.75, which 1 carries."""
    signals = {"waiting": "waiting", "running": "running", "promptTokens": "burst", "generationTokens": "gen"}
    drv = Driver(config(signals=signals, workWithinObjective=within))
    rec = drv.steady(60, 1, waiting=0, running=4, burst=4500, gen=50)
    if within:
        assert rec.replicas == 1, rec.message
        assert "tokens 0.75 (" in rec.message
        assert "the 10s window's work within 10s + the 2s objective: ×0.83" in rec.message
    else:
        assert (rec.replicas, rec.reason) == (2, Reason.SCALE_UP), rec.message
        assert "tokens 0.90 (" in rec.message


def test_work_within_the_objective_learns_capacity_from_what_was_served() -> None:
    """The scaling is of the work to come, not of what the replicas served: saturated (a queue on every replica),
    the served 6,000 tokens/s teach the same capacity (1.2× the prior) with ``workWithinObjective`` as without."""
    signals = {"waiting": "waiting", "running": "running", "promptTokens": "burst", "generationTokens": "gen"}
    learned = []
    for within in (True, False):
        drv = Driver(config(signals=signals, workWithinObjective=within))
        drv.steady(300, 1, waiting=6, running=48, burst=6000, gen=50)
        learned.append(drv.learned.capacity_scale)
    assert learned[0] == pytest.approx(learned[1])
    assert learned[0] > 1.1


def test_work_within_the_objective_needs_the_prompt_counter() -> None:
    with pytest.raises(ValidationError, match="workWithinObjective"):
        policy(config(workWithinObjective=True))


def test_rise_from_below_needs_the_rise_from_the_level() -> None:
    with pytest.raises(ValidationError, match="riseFromBelow"):
        policy(config(scaleDown={"riseFromLevel": False, "riseFromBelow": True}))


def test_requests_waiting_on_every_replica_block_a_scale_down() -> None:
    # Added where a mutation run (docs/testing.md) showed the rule untested. 0.38 replica-equivalents of load
    # need 1 of 8, but a request waits on every replica: one such sample teaches no capacity yet, and nothing
    # is released while it lasts.
    drv = Driver()
    drv.steady(600, 8, waiting=0, running=10)
    rec = drv.step(8, 8, waiting=8, running=10)
    assert (rec.replicas, rec.reason) == (8, Reason.STEADY), rec.message
    assert "requests are waiting on every replica" in rec.message


def test_an_slo_at_risk_blocks_a_scale_down() -> None:
    # Added where a mutation run (docs/testing.md) showed the rule untested. The model needs 1 of 8, but the
    # measured TTFT p99 (1.7 s of 2 s: past the 0.8 risk line) says the replicas are not idle enough to release.
    drv = Driver(config(**TOKENS))
    rec = drv.steady(600, 8, waiting=0, running=10, prompt=2000, gen=200, ttft=1.7)
    assert (rec.replicas, rec.reason) == (8, Reason.STEADY), rec.message
    assert "the SLO is at risk" in rec.message
    # Control: the same load with the SLO comfortably met is released.
    drv = Driver(config(**TOKENS))
    assert drv.steady(600, 8, waiting=0, running=10, prompt=2000, gen=200, ttft=0.5).reason is Reason.SCALE_DOWN


def test_the_rise_and_the_band_are_not_stacked() -> None:
    """The measured rise is its own margin: ``load + rise`` is kept at ``c``, the band at ``c·(1 − h)`` keeps
    the steady need only. Stacked, 0.96 + 1.92 at ≤ 0.64 would hold 5; not stacked, 4 carry it at 0.8 (a
    replica-equivalent of the slots is 41.7 sequences: ``slot_unit``)."""
    drv = Driver()
    drv.steady(600, 5, waiting=0, running=40)
    for _ in range(24):
        drv.step(5, 5, waiting=0, running=120)
    rec = drv.steady(200, 5, waiting=0, running=40)
    assert rec.reason is Reason.SCALE_DOWN, rec.message
    assert rec.replicas == 4, rec.message
    assert "(0.96 + 1.92) at ≤ 0.80" in rec.message


def test_a_moments_queue_is_not_a_short_count() -> None:
    """Behind random routing a few prompts land together on one replica: a queue on every replica for one or
    two evaluations is not a count found short (remembered, it would bar scale-down at that load); a queue
    that holds as long as saturation needs (``SATURATED_EVALUATIONS``) is."""
    drv = Driver()
    drv.steady(300, 4, waiting=0, running=40)
    for _ in range(slo.SATURATED_EVALUATIONS - 1):
        drv.step(4, 4, waiting=8, running=40)
        assert drv.learned.short == ()
    drv.steady(30, 4, waiting=0, running=40)
    for _ in range(slo.SATURATED_EVALUATIONS):
        drv.step(4, 4, waiting=8, running=40)
    assert [x.ready for x in drv.learned.short] == [4]


@pytest.mark.parametrize(
    ("per_waiting", "saturated"),
    [pytest.param({"g0": 12.0, "g1": 0.0, "g2": 0.0, "g3": 0.0}, False, id="stacked-on-one-replica"),
     pytest.param({"g0": 3.0, "g1": 3.0, "g2": 3.0, "g3": 3.0}, True, id="on-every-replica"),
     pytest.param(None, True, id="totals-only")],
)
def test_saturation_is_a_queue_on_every_replica_not_a_total(
    per_waiting: dict[str, float] | None, saturated: bool
) -> None:
    """Behind random routing a total of ``ready`` waiting is often a few prompts stacked on one replica while
    the others have room: what those serve is their demand, not their capacity. With each replica's own count
    (a pods source gives it), saturation is a queue on every replica; it teaches capacity and is remembered as
    a short count only then. Without per-replica counts the total stands for them."""
    drv = Driver(config(**TOKENS))
    drv.steady(120, 4, waiting=0, running=100, prompt=4 * 2000, gen=4 * 300, ttft=0.5)
    drv.per_replica = {"waiting": per_waiting} if per_waiting is not None else {}
    for _ in range(int(60 / STEP)):
        drv.step(4, 4, waiting=12, running=100, prompt=4 * 2000, gen=4 * 300, ttft=1.0)
    learned = drv.learned
    if saturated:
        assert learned.capacity_samples > 0
        assert learned.capacity_scale == pytest.approx(0.4, rel=0.05)
        assert [x.ready for x in learned.short] == [4]
    else:
        assert learned.capacity_samples == 0
        assert learned.capacity_scale == 1.0
        assert learned.short == ()


def _poisson_at_least(n: int, mean: float) -> float:
    """P(Poisson(mean) ≥ n), summed directly (an independent check of ``occupancy_at_objective``)."""
    term, below = math.exp(-mean), 0.0
    for k in range(n):
        below += term
        term *= mean / (k + 1)
    return 1.0 - below


@pytest.mark.parametrize("slots", [8, 48, 64, 256])
@pytest.mark.parametrize("percentile", [0.9, 0.99])
def test_a_replicas_slot_share_behind_random_routing_is_the_poisson_tail(slots: int, percentile: float) -> None:
    """Behind random routing a replica's occupancy is Poisson around its mean (M/G/∞): the mean it may hold is
    the one at which its slots are all taken for ``1 − percentile`` of arrivals; smaller replicas run emptier."""
    mean = slo.occupancy_at_objective(slots, percentile)
    assert _poisson_at_least(slots, mean) == pytest.approx(1.0 - percentile, rel=1e-3)
    assert _poisson_at_least(slots, mean * 1.02) > 1.0 - percentile
    if slots > 8:
        assert mean / slots > slo.occupancy_at_objective(8, percentile) / 8
    # One replica-equivalent of the slot part: that mean over targetUtilization, never more than the slots.
    algo = slo.SloAlgorithm(slo.SloPolicyConfig.model_validate(
        config(replica={**BASE["replica"], "slots": slots}, objective={"ttftSeconds": 2.0, "percentile": percentile})
    ))
    assert algo.slot_unit(1.0) == pytest.approx(min(slots, mean / 0.8))


def test_a_relearned_capacity_is_not_a_rise() -> None:
    """History keeps demand in the stated units (``LoadSample``) and recomputes it with the capacity learned
    now: fewer usable slots learned later scale every past load alike, so the largest rise stays what the
    demand did (nothing), not the step of the model."""
    drv = Driver()
    drv.steady(600, 4, waiting=0, running=40)
    drv.state = replace(drv.learned, slot_scale=0.5)
    rec = drv.step(4, 4, waiting=0, running=40)
    assert "(2.27 + 0.00)" in rec.message, rec.message
    assert slo.LoadSample(0.0, 2.0, 1.5, 0.2).load(2.0, 0.5) == 3.0


@pytest.mark.parametrize(
    ("kv", "learns"),
    [pytest.param(0.15, False, id="cache-emptier-than-slots-prefill-backlog"),
     pytest.param(0.9, True, id="cache-fuller-than-slots-kv-binds")],
)
def test_usable_slots_are_learned_only_where_the_cache_binds(kv: float, learns: bool) -> None:
    """JetStream's prefill backlog holds slots already: a backlog on every replica with a third of the slots
    and little of the KV cache in use waits for prefill, not for a slot, and teaches no smaller slot count.
    With the cache fuller than the slots, the cache is what admits no more: the usable share is learned."""
    drv = Driver(config(signals={"waiting": "waiting", "slotsUsed": "used", "kvCacheUsage": "kv"}))
    for _ in range(int(120 / STEP)):
        drv.step(2, 2, waiting=4, used=0.35, kv=kv)
    if learns:
        assert drv.learned.slot_scale == pytest.approx(0.35, abs=0.05)
    else:
        assert drv.learned.slot_scale == 1.0


def test_the_learned_state_is_all_in_the_returned_state() -> None:
    """Replay and simulation reproduce a run from the state alone: two drivers, same inputs, same state."""
    a, b = Driver(config(**TOKENS)), Driver(config(**TOKENS))
    for i in range(100):
        obs = {"waiting": float(i % 7), "running": 30.0 + i, "prompt": 3000.0 + 50 * i, "gen": 400.0, "ttft": 1.0}
        ra, rb = a.step(3, 3, **obs), b.step(3, 3, **obs)
        assert ra == rb
    assert a.state == b.state


# --- through the engine ---------------------------------------------------------------------------------


def test_engine_bounds_and_decision_message() -> None:
    pol = policy(config(), maxReplicas=3)
    compiled = compile_policy(pol)
    obs = Observation(
        TARGET, ReplicaStatus(2, 2, 0),
        {"waiting": SignalReading(200, T0 - 1), "running": SignalReading(96, T0 - 1)},
    )
    decisions, state = decide(compiled, obs, PolicyState(), T0)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert scale.desired == 3
    assert scale.reason is Reason.LIMITED_BY_MAX
    assert "load 7.10" in scale.message
    assert isinstance(state.algorithm, slo.SloState)


def test_the_engine_feeds_the_policys_state_back() -> None:
    # Added where a mutation run (docs/testing.md) showed it untested through ``decide``: the hold window is
    # counted in the policy's own state, so a scale-down after it proves the engine hands the state back each
    # evaluation (were it dropped, every evaluation would be the first, and nothing would ever be released).
    compiled = compile_policy(policy(config()))
    state, decision = PolicyState(), None
    for i in range(60):  # 300 s at 8 replicas, 0.21 replica-equivalents of load
        now = T0 + STEP * i
        obs = Observation(TARGET, ReplicaStatus(8, 8, 0),
                          {"waiting": SignalReading(0, now - 1), "running": SignalReading(10, now - 1)})
        decisions, state = decide(compiled, obs, state, now)
        decision = decisions[0]
        assert isinstance(decision, ScaleDecision)
        if decision.reason is Reason.SCALE_DOWN:
            break
    assert decision is not None
    assert decision.reason is Reason.SCALE_DOWN, decision.message


def test_engine_holds_on_unknown() -> None:
    compiled = compile_policy(policy())
    obs = Observation(TARGET, ReplicaStatus(5, 5, 0), {"running": SignalReading(10, T0 - 1)})
    decisions, state = decide(compiled, obs, PolicyState(algorithm=slo.SloState(since=0.0)), T0)
    scale = decisions[0]
    assert isinstance(scale, ScaleDecision)
    assert scale.desired == 5
    assert scale.reason is Reason.METRICS_UNKNOWN
    assert state.consecutive_failures == 1


# --- config ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "error"),
    [
        pytest.param({"signals": {"promptTokens": "prompt"}}, "come together", id="prompt-without-generation"),
        pytest.param({"signals": {"promptTokens": "prompt", "generationTokens": "gen"},
                      "replica": {"slots": 8, "coldStartSeconds": 60}}, "need replica.prior",
                     id="tokens-without-prior"),
        pytest.param({"signals": {"ttft": "ttft"}}, "at least one demand signal", id="no-demand-signal"),
        pytest.param({"signals": {"running": "running", "timePerOutputToken": "ttft"}},
                     "needs objective.timePerOutputTokenSeconds", id="tpot-without-objective"),
        pytest.param({"signals": {"running": "running", "waiting": "running"}}, "two roles", id="one-signal-two-roles"),
        pytest.param({"signals": {"running": "nope"}}, "undefined signal", id="undefined-signal"),
        pytest.param({"objective": {"ttftSeconds": 0}}, "greater than 0", id="zero-ttft"),
        pytest.param({"objective": {"ttftSeconds": 2, "percentile": 1}}, "less than 1", id="percentile-one"),
        pytest.param({"targetUtilization": 1.2}, "less than or equal to 1", id="utilization-above-one"),
        pytest.param({"scaleDown": {"hysteresis": 0}}, "greater than 0", id="no-hysteresis"),
        pytest.param({"capacityPerReplica": 38}, "Extra inputs", id="unknown-field"),
    ],
)
def test_invalid_config(cfg: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        policy(config(**cfg))


# --- properties -----------------------------------------------------------------------------------------

amount = st.floats(0, 500, allow_nan=False)
OBS_KEYS = ("waiting", "running", "prompt", "gen", "ttft")


@st.composite
def observation(draw: st.DrawFn) -> dict[str, float]:
    return {
        "waiting": draw(amount), "running": draw(amount), "prompt": draw(st.floats(0, 50_000)),
        "gen": draw(st.floats(0, 5_000)), "ttft": draw(st.floats(0, 10)),
    }


def _run(drv: Driver, steps: Iterable[tuple[int, int, int, dict[str, float]]]) -> None:
    for spec, ready, starting, obs in steps:
        drv.step(spec, ready, starting, **obs)


@st.composite
def history(draw: st.DrawFn) -> list[tuple[int, int, int, dict[str, float]]]:
    out = []
    for _ in range(draw(st.integers(0, 40))):
        spec = draw(st.integers(1, 30))
        ready = draw(st.integers(0, spec))
        out.append((spec, ready, spec - ready, draw(observation())))
    return out


@settings(max_examples=60, deadline=None)
@given(
    past=history(),
    now=observation(),
    spec=st.integers(1, 30),
    # One signal missing is the common case (and the subtle one when it is the latency); any set may be.
    missing=st.one_of(st.sampled_from(OBS_KEYS).map(lambda k: {k}), st.sets(st.sampled_from(OBS_KEYS), min_size=1)),
)
def test_unknown_data_never_scales_down(
    past: list[tuple[int, int, int, dict[str, float]]], now: dict[str, float], spec: int, missing: set[str]
) -> None:
    drv = Driver(config(**TOKENS))
    _run(drv, past)
    drv.now += 1000  # whatever the hold window: only the unknown may stop a scale-down
    values: dict[str, float | None] = {k: (None if k in missing else v) for k, v in now.items()}
    # The one exception, by design: an idle target (every demand signal known and zero) has an empty latency
    # histogram, so no quantile; that unknown is expected and does not hold it.
    assume(not (missing == {"ttft"} and all(now[k] == 0 for k in ("waiting", "running", "prompt", "gen"))))
    rec = drv.step(spec, spec, 0, **values)
    assert rec.replicas is None or rec.replicas >= spec, rec.message


@settings(max_examples=60, deadline=None)
@given(steps=history())
def test_the_forecast_never_removes_capacity_the_load_needs(
    steps: list[tuple[int, int, int, dict[str, float]]],
) -> None:
    """With and without the forecast, on the same inputs: the forecast may only add."""
    with_fc = Driver(config(**TOKENS, forecast={"seasonalityPeriodSeconds": 600}))
    without = Driver(config(**TOKENS, forecast={"enabled": False}))
    for spec, ready, starting, obs in steps:
        a = with_fc.step(spec, ready, starting, **obs)
        b = without.step(spec, ready, starting, **obs)
        assert a.replicas is not None
        assert b.replicas is not None
        assert a.replicas >= b.replicas, (a.message, b.message)
        # and never below what the current load needs at the current utilization
        state = with_fc.learned
        assert state.utilization is not None
        load = float(a.message.split("load ")[1].split()[0])
        assert a.replicas >= min(spec, math.ceil(load / state.utilization - 1e-6)) or starting > 0


def world(
    count: int, *, busy: float, share: float, capacity: float, usable: float, fill: float, decode_blocks: bool = False
) -> dict[str, float]:
    """What the servers report at ``count`` replicas under a steady demand (a fluid model of a server).

    ``busy``: the demand in replicas of the prior; ``share``: its prompt share; ``capacity``: the replicas' true
    capacity over the prior; ``usable``: the share of the slots they can fill; ``fill``: the share of a
    replica's slots one replica-equivalent of work keeps in flight. ``decode_blocks``: the replica's time is
    shared by prefill and decode, so both delay the first token (the additive model); otherwise (TGI,
    JetStream: a new prompt's prefill goes ahead of the decode steps) only the prefill and full slots do.
    Saturated, they serve their capacity and requests queue.
    """
    conc = busy * fill * 48 / capacity
    cap = count * capacity
    room = count * 48 * usable
    running = min(conc, room)
    if decode_blocks:
        blocked = busy >= cap
        served = min(busy, cap)
        prompt, gen = served * share, served * (1 - share)
        risky = busy >= 0.9 * cap
    else:
        prefill = busy * share
        blocked = prefill >= cap
        prompt = min(prefill, cap)
        gen = busy * (1 - share) * (min(1.0, room / conc) if conc > 0 else 1.0)
        risky = prefill >= 0.9 * cap
    waiting = max(0.0, conc - room) + (10.0 * count if blocked else 0.0)
    return {
        "waiting": waiting,
        "running": running,
        "prompt": prompt * 5000,
        "gen": gen * 600,
        "ttft": 3.0 if risky or waiting >= count else 0.4,
    }


def _moves(drv: Driver, start: int, seconds: int, **world_args: Any) -> list[bool]:
    """Follow the policy in ``world``; the direction of each change of the count (True = up)."""
    count = start
    moves = []
    for _ in range(int(seconds / STEP)):
        rec = drv.step(count, count, 0, **world(count, **world_args))
        assert rec.replicas is not None
        target = min(200, max(1, rec.replicas))  # the engine's bounds
        if target != count:
            moves.append(target > count)
            count = target
    return moves


def _reversals(moves: list[bool]) -> int:
    return sum(1 for a, b in itertools.pairwise(moves) if a != b)


#: (config, the world's server model): prefill-first servers with gauges, and the additive model.
MODELS = [
    pytest.param(TOKENS, False, id="prefill-first"),
    pytest.param(ADDITIVE, True, id="additive"),
    pytest.param({**TOKENS, "scaleDown": {"recurrence": True}}, False, id="prefill-first-recurrence"),
]


@pytest.mark.parametrize(("cfg", "decode_blocks"), MODELS)
@settings(max_examples=60, deadline=None)
@given(busy=st.floats(0, 20), share=st.floats(0, 1), fill=st.floats(0.1, 1), start=st.integers(1, 40),
       seconds=st.integers(60, 1800))
def test_a_steady_load_never_flaps(
    cfg: dict[str, Any], decode_blocks: bool, busy: float, share: float, fill: float, start: int, seconds: int
) -> None:
    """A steady demand on servers as the prior says, the count following the policy and the servers reporting
    what that count serves: every change goes one way (no scale-up after a scale-down, or the reverse)."""
    moves = _moves(Driver(config(**cfg)), start, seconds, busy=busy, share=share, capacity=1.0, usable=1.0,
                   fill=fill, decode_blocks=decode_blocks)
    assert _reversals(moves) == 0, moves


@pytest.mark.parametrize(("cfg", "decode_blocks"), MODELS)
@settings(max_examples=60, deadline=None)
@given(
    busy=st.floats(0, 20), share=st.floats(0, 1), capacity=st.floats(0.3, 3), fill=st.floats(0.1, 1),
    start=st.integers(1, 40), seconds=st.integers(60, 1800),
)
# Drawn in the full suite on a fresh clone (Hypothesis mixes in constants of the loaded modules): the
# slower-server double reversal, before the short-count memory remembered the count its load needed.
@example(busy=11.75, share=0.0, capacity=0.5, fill=0.375, start=13, seconds=295)
def test_a_wrong_token_prior_is_corrected_once_then_held(
    cfg: dict[str, Any], decode_blocks: bool, busy: float, share: float, capacity: float, fill: float, start: int,
    seconds: int,
) -> None:
    """Servers faster or slower than the prior: a scale-down the prior allowed may have to be undone once (that
    is how the capacity is learned); then the count never reverses again: no oscillation."""
    moves = _moves(Driver(config(**cfg)), start, seconds, busy=busy, share=share, capacity=capacity,
                   usable=1.0, fill=fill, decode_blocks=decode_blocks)
    assert _reversals(moves) <= 1, moves


def test_a_much_slower_server_is_learned_not_flapped() -> None:
    """Found by the property above with a random seed (it was a strict xfail): servers 3.2x slower than the
    prior under a steady 15-replica demand went up, down, then up again. The loop lowered ``c`` to find the
    count, then ``c`` recovered and walked the count back into the shortfall. Now the count found needed when
    a count was short is remembered: up once, then held, over half an hour."""
    drv = Driver(config(**ADDITIVE))
    moves = _moves(drv, 1, 1800, busy=15.0, share=0.0, capacity=0.3125, usable=1.0, fill=0.25, decode_blocks=True)
    assert _reversals(moves) == 0, moves
    assert all(moves), moves
    # It holds on what it found (54: the world's TTFT is met below 90 % of capacity), not on the prior's 19.
    assert any(x.enough >= 54 for x in drv.learned.short)


@settings(max_examples=60, deadline=None)
@given(
    busy=st.floats(0, 20), usable=st.floats(0.2, 1), fill=st.floats(0.1, 1), start=st.integers(1, 40),
    seconds=st.integers(60, 1800),
)
def test_fewer_usable_slots_than_stated_are_learned_without_oscillation(
    busy: float, usable: float, fill: float, start: int, seconds: int
) -> None:
    """Gauges only (waiting and running): servers that fill only part of their slots (the KV cache binds
    first). The usable share is learned from saturation; the count reverses at most once."""
    moves = _moves(Driver(), start, seconds, busy=busy, share=0.5, capacity=1.0, usable=usable, fill=fill)
    assert _reversals(moves) <= 1, moves


@settings(max_examples=40, deadline=None)
@given(obs=observation(), start=st.integers(1, 40), seconds=st.integers(60, 1800))
def test_a_constant_observation_with_no_queue_never_flaps(obs: dict[str, float], start: int, seconds: int) -> None:
    """Whatever the numbers, without requests waiting nothing is learned downward: the count moves one way."""
    drv = Driver(config(**TOKENS))
    count = start
    moves = []
    obs = {**obs, "waiting": 0.0}
    for _ in range(int(seconds / STEP)):
        rec = drv.step(count, count, 0, **obs)
        assert rec.replicas is not None
        target = max(1, rec.replicas)
        if target != count:
            moves.append(target > count)
            count = target
    assert len(set(moves)) <= 1, moves


@settings(max_examples=40, deadline=None)
@given(steps=history())
def test_deterministic(steps: list[tuple[int, int, int, dict[str, float]]]) -> None:
    a, b = Driver(config(**TOKENS)), Driver(config(**TOKENS))
    for spec, ready, starting, obs in steps:
        assert a.step(spec, ready, starting, **obs) == b.step(spec, ready, starting, **obs)
    assert a.state == b.state


def test_replace_keeps_state_frozen() -> None:
    state = slo.SloState()
    with pytest.raises(AttributeError):
        state.capacity_scale = 2.0  # type: ignore[misc]
    assert replace(state, capacity_scale=2.0).capacity_scale == 2.0


# --- the prefill queue per replica (M/G/1 from the prompt-length histogram) ----------------------------------

PROMPT_LENGTH = {"signals": {**TOKENS["signals"], "promptLength": "plen"}}
#: Cumulative buckets (tokens; per second over the window): every prompt ≤ 500 tokens, or a tenth of 6,000-7,000.
SHORT_PROMPTS = {200.0: 2.0, 500.0: 10.0, 7000.0: 10.0, math.inf: 10.0}
LONG_TAIL = {200.0: 2.0, 500.0: 9.0, 6000.0: 9.0, 7000.0: 10.0, math.inf: 10.0}


def test_a_long_prompt_tail_sizes_the_prefill_by_its_queue_not_its_mean() -> None:
    """The same prompt tokens/s: with short prompts the prefill queue allows more than targetUtilization (the
    token part as before); with a tenth of the prompts 6-7k tokens long, one of them ahead delays every short
    one behind it on its replica, so the same mean needs more replicas."""
    values = {"waiting": 0.0, "running": 10.0, "prompt": 8000.0, "gen": 600.0, "ttft": 0.5}
    plain = Driver(config(**TOKENS)).step(2, 2, **values)
    with_short, with_long = Driver(config(**PROMPT_LENGTH)), Driver(config(**PROMPT_LENGTH))
    with_short.histograms, with_long.histograms = {"plen": SHORT_PROMPTS}, {"plen": LONG_TAIL}
    short = with_short.step(2, 2, **values)
    long = with_long.step(2, 2, **values)
    assert plain.replicas == short.replicas == 2, short.message
    assert "prefill queue (M/G/1 per replica" in short.message
    assert long.replicas is not None
    assert plain.replicas is not None
    assert long.replicas > plain.replicas, long.message
    assert "replica-equivalent =" in long.message


def test_an_unknown_distribution_keeps_the_last_one() -> None:
    """An empty window (or a failed scrape) is not a lighter distribution: the last prefill unit holds."""
    drv = Driver(config(**PROMPT_LENGTH))
    values = {"waiting": 0.0, "running": 10.0, "prompt": 8000.0, "gen": 600.0, "ttft": 0.5}
    drv.histograms = {"plen": LONG_TAIL}
    first = drv.step(2, 2, **values)
    unit = drv.learned.prefill_unit
    assert unit < 1.0
    again = drv.step(2, 2, **{**values, "plen": None})
    assert drv.learned.prefill_unit == unit
    assert again.replicas == first.replicas, again.message
    assert "prompt lengths unknown, keeping" in again.message
    whole = drv.step(2, 2, **{**values, "plen": 900.0})  # a quantile without buckets (PromQL)
    assert "no prompt-length buckets from this source" in whole.message
    assert drv.learned.prefill_unit == unit


# --- kvFromTokens: the KV cache the replica states bounds the slots at the tokens a sequence reserves ---------

KV_FROM_TOKENS = {**PROMPT_LENGTH, "kvFromTokens": True}


@pytest.mark.parametrize(
    ("gen", "bounded"),
    [
        pytest.param(1_500.0, False, id="short-outputs-the-slots-bind"),
        pytest.param(15_000.0, True, id="long-outputs-the-cache-binds"),
    ],
)
def test_the_kv_cache_bounds_the_slots_at_the_tokens_a_sequence_reserves(gen: float, bounded: bool) -> None:
    """60 sequences on 2 replicas of 48 slots and a 64,000-token cache. Prompts of ~300 tokens at 10/s (3,000
    prompt tok/s): with 150 generated tokens each (1,500 tok/s) a sequence reserves ~450 tokens and the cache holds
    more than the slots, so the slots size as before; with 1,500 each (15,000 tok/s) a sequence reserves ~1,800
    and the cache holds ~36 of the 48: more replicas, and the message says why. Without the option, as before."""
    values = {"waiting": 0.0, "running": 60.0, "prompt": 3000.0, "gen": gen, "ttft": 0.5}
    plain, kv = Driver(config(**PROMPT_LENGTH)), Driver(config(**KV_FROM_TOKENS))
    plain.histograms = kv.histograms = {"plen": SHORT_PROMPTS}
    before, after = plain.step(2, 2, **values), kv.step(2, 2, **values)
    assert before.replicas is not None
    assert after.replicas is not None
    assert "sequences of" in after.message, after.message
    if bounded:
        assert after.replicas > before.replicas, after.message
    else:
        assert after.replicas == before.replicas, after.message


def test_unknown_tokens_per_sequence_bound_nothing() -> None:
    """No requests in the windows (no prompt tokens, or no prompt-length buckets): the slots are not bounded."""
    values = {"waiting": 0.0, "running": 60.0, "prompt": 0.0, "gen": 0.0, "ttft": 0.5}
    drv = Driver(config(**KV_FROM_TOKENS))
    drv.histograms = {"plen": SHORT_PROMPTS}
    rec = drv.step(2, 2, **values)
    assert "KV per sequence unknown" in rec.message, rec.message
    assert rec.replicas == Driver(config(**PROMPT_LENGTH)).step(2, 2, **values).replicas


@pytest.mark.parametrize(
    "replica",
    [pytest.param({**BASE["replica"], "kvCacheTokens": None}, id="no-kv-cache-stated")],
)
def test_kv_from_tokens_needs_the_cache_and_the_prompt_lengths(replica: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="kvFromTokens"):
        policy(config(**{**KV_FROM_TOKENS, "replica": {k: v for k, v in replica.items() if v is not None}}))
    with pytest.raises(ValidationError, match="kvFromTokens"):
        policy(config(**{**TOKENS, "kvFromTokens": True}))


def test_prompt_length_needs_the_prompt_tokens() -> None:
    with pytest.raises(ValidationError, match="promptLength"):
        policy(config(signals={"waiting": "waiting", "promptLength": "plen"}))


@pytest.mark.parametrize(
    ("eviction_s", "lead"),
    [
        pytest.param(20.0, 140.0, id="a-saver-frees-its-chips-once-saved"),
        pytest.param(60.0, 180.0, id="a-grace-period"),
        pytest.param(None, 240.0, id="unknown-one-more-cold-start"),
    ],
)
def test_the_hand_off_lead_is_the_victims_eviction_plus_the_cold_start(eviction_s: float | None, lead: float) -> None:
    """``Recommendation.ahead`` forecasts over the eviction the arbitration knows (``Context.eviction_s``) plus
    the 120 s cold start; without one, over two cold starts (the estimate)."""
    drv = Driver()
    drv.eviction_s = eviction_s
    rec = drv.step(2, 2, waiting=0, running=40)
    assert rec.ahead is not None
    assert rec.ahead.within_s == lead


# --- the prefill rate measured from the servers (signals.prefillSeconds) --------------------------------------

MEASURED = {"signals": {**PROMPT_LENGTH["signals"], "prefillSeconds": "prefill"}}


def _served(rate: float | None, prompt: float = 8000.0) -> dict[str, float | None]:
    """One evaluation's values: ``prompt`` tokens/s served by 2 replicas whose prefill runs at ``rate`` tok/s
    (the prefill seconds per second they report; None: unknown)."""
    return {"waiting": 0.0, "running": 10.0, "prompt": prompt, "gen": 600.0, "ttft": 0.5,
            "prefill": None if rate is None else prompt / rate}


def _serve_for(drv: Driver, seconds: float, rate: float | None) -> list[float]:
    """Evaluations for ``seconds`` at a served prefill ``rate``; the learned rate after each."""
    seen = []
    for _ in range(int(seconds / STEP)):
        drv.histograms = {"plen": LONG_TAIL}
        drv.step(2, 2, **_served(rate))
        assert drv.learned.prefill_rate is not None
        seen.append(drv.learned.prefill_rate)
    return seen


def test_the_prefill_rate_converges_from_the_prior_to_the_measured_one_within_minutes() -> None:
    """The servers prefill at 7,000 tok/s against the prior's 5,000: the rate the queue model uses starts at the
    prior, rises to within 5 % of the measurement within three minutes, and is never above it."""
    drv = Driver(config(**MEASURED))
    seen = _serve_for(drv, 180, 7000.0)
    assert seen[0] < 5100.0  # from the prior, not at once
    assert max(seen) <= 7000.0
    assert seen[-1] >= 0.95 * 7000.0
    assert seen == sorted(seen)


def test_a_measured_faster_prefill_needs_fewer_replicas_than_the_prior() -> None:
    """The same traffic with a long prompt tail: at the prior's rate the prefill queue asks for more replicas
    than at the measured (faster) rate, once it is learned."""
    measured, prior = Driver(config(**MEASURED)), Driver(config(**PROMPT_LENGTH))
    _serve_for(measured, 240, 9000.0)
    for _ in range(int(240 / STEP)):
        prior.histograms = {"plen": LONG_TAIL}
        prior.step(2, 2, **_served(9000.0))
    measured.histograms = prior.histograms = {"plen": LONG_TAIL}
    fast, slow = measured.step(2, 2, **_served(9000.0)), prior.step(2, 2, **_served(9000.0))
    assert fast.replicas is not None
    assert slow.replicas is not None
    assert fast.replicas < slow.replicas, (fast.message, slow.message)
    learned = measured.learned.prefill_rate
    assert learned is not None
    assert 8500.0 <= learned <= 9000.0
    # The prefill queue (M/G/1) is sized at the learned rate, not at the prior's.
    assert f"at {learned:.0f} tok/s): ≤" in fast.message, fast.message
    assert f"prefill {learned:.0f} tok/s measured 9000, prior 5000" in fast.message, fast.message


def test_a_slower_measurement_is_taken_at_once_and_an_unknown_one_keeps_the_last() -> None:
    drv = Driver(config(**MEASURED))
    _serve_for(drv, 120, 7000.0)
    assert _serve_for(drv, STEP, 3000.0) == [3000.0]  # never above what was measured
    kept = _serve_for(drv, 30, None)
    assert kept == [3000.0] * len(kept)
    drv.histograms = {"plen": LONG_TAIL}
    assert "measured unknown, keeping the last" in drv.step(2, 2, **_served(None)).message
    # A prefill too little busy to measure is unknown too (``sizing.MIN_PREFILL_BUSY``).
    drv.histograms = {"plen": LONG_TAIL}
    drv.step(2, 2, **{**_served(7000.0, prompt=100.0)})
    assert drv.learned.prefill_rate == 3000.0


def test_without_a_measurement_the_prior_stands() -> None:
    """Never measured (no prefill time reported yet): the same decisions as a policy without the role."""
    with_role, without = Driver(config(**MEASURED)), Driver(config(**PROMPT_LENGTH))
    for _ in range(12):
        with_role.histograms = without.histograms = {"plen": LONG_TAIL}
        a, b = with_role.step(2, 2, **_served(None)), without.step(2, 2, **_served(None))
        assert a.replicas == b.replicas
    assert with_role.learned.prefill_rate is None


def test_prefill_seconds_needs_the_prompt_tokens() -> None:
    with pytest.raises(ValidationError, match="prefillSeconds"):
        policy(config(signals={"waiting": "waiting", "prefillSeconds": "prefill"}))


# --- bursty prompt work (signals.promptTokensBurst): G/G/1 by Kingman, Hayward's slots ----------------------------

BURSTY = {"signals": {**PROMPT_LENGTH["signals"], "promptTokensBurst": "burst"}}


def _burst_steps(drv: Driver, seconds: float, pattern: list[float | None], replicas: int = 2) -> Recommendation:
    """Evaluations for ``seconds`` at 8,000 prompt tok/s on average (the 60 s rate) of prompts up to 500 tokens,
    the 10 s window's rate following ``pattern`` (one value per evaluation, repeated); the last recommendation."""
    rec = None
    for i in range(int(seconds / STEP)):
        drv.histograms = {"plen": SHORT_PROMPTS}
        rec = drv.step(replicas, replicas, waiting=0, running=10, prompt=8000.0, gen=600.0, ttft=0.5,
                       burst=pattern[i % len(pattern)])
    assert rec is not None
    return rec


def test_the_burstiness_starts_at_the_conservative_prior_and_learns_poisson_work_down() -> None:
    drv = Driver(config(**BURSTY))
    rec = _burst_steps(drv, STEP, [8000.0])
    assert drv.learned.burstiness == slo.BURSTINESS_PRIOR
    assert "the prior's" in rec.message, rec.message
    # An even stream (no spread between windows) learns down toward 1, never below.
    _burst_steps(drv, 900, [8000.0])
    b = drv.learned.burstiness
    assert b is not None
    assert 1.0 <= b < 1.1


def test_bursty_prompt_work_needs_more_replicas_than_even_work_of_the_same_mean() -> None:
    """8,000 prompt tok/s either way (the 60 s rate the load reads); in bursts, 16,000 tok/s for 10 s then nothing
    for 10 s: the prefill queue waits Kingman's longer and the count rises, with the model named in the message."""
    even, bursty = Driver(config(**BURSTY)), Driver(config(**BURSTY))
    calm = _burst_steps(even, 600, [8000.0])
    burst = _burst_steps(bursty, 600, [16000.0, 16000.0, 0.0, 0.0])
    b = bursty.learned.burstiness
    assert b is not None
    assert b > 3.0
    assert "G/G/1, Kingman" in burst.message, burst.message
    assert "M/G/1" in calm.message, calm.message
    assert burst.replicas is not None
    assert calm.replicas is not None
    assert burst.replicas > calm.replicas, (burst.message, calm.message)


def test_an_unknown_short_window_keeps_the_burstiness_and_blocks_nothing() -> None:
    """Once the measured windows have aged out of the span, an unknown short window keeps the last burstiness
    (it does not fall back to Poisson), and the policy still decides on what it knows."""
    drv = Driver(config(**BURSTY))
    _burst_steps(drv, 600, [16000.0, 16000.0, 0.0, 0.0])
    _burst_steps(drv, slo.BURSTINESS_SPAN_S + 10, [None])
    b = drv.learned.burstiness
    assert b is not None
    assert b > 3.0
    rec = _burst_steps(drv, 300, [None])
    assert drv.learned.burstiness == b
    assert rec.reason is not Reason.METRICS_UNKNOWN, rec.message
    assert "not measured now" in rec.message, rec.message


def test_one_replicas_share_of_a_burst_fills_its_slots_sooner() -> None:
    """The slot unit under Hayward's approximation: with the whole stream's burstiness on one replica, fewer
    sequences on average keep a free slot for 99 % of arrivals; a random split over more replicas dilutes it."""
    algo = slo.SloAlgorithm(slo.SloPolicyConfig.model_validate(config(**BURSTY)))
    plain = algo.slot_unit(1.0)
    assert algo.slot_unit(1.0, 1.0) == plain
    assert algo.slot_unit(1.0, 3.0) < algo.slot_unit(1.0, 2.0) < plain


def test_prompt_tokens_burst_needs_the_prompt_lengths() -> None:
    with pytest.raises(ValidationError, match="promptTokensBurst"):
        policy(config(signals={**TOKENS["signals"], "promptTokensBurst": "burst"}))


# --- scale-down by demand's recurrence against the lead (scaleDown.recurrence) ---------------------------------

RECURRENCE = {"scaleDown": {"recurrence": True}}


def _cycles(drv: Driver, *, cycles: int, high: float, high_s: float, low: float, low_s: float,
            count: int) -> Recommendation:
    """``cycles`` times: the load ``high`` for ``high_s``, then ``low`` for ``low_s`` (replica-equivalents of the
    slots, ``Driver``'s ``slot_unit``), at ``count`` replicas; the last recommendation."""
    assert isinstance(drv.algo, slo.SloAlgorithm)
    unit = drv.algo.slot_unit(1.0)
    rec = None
    for _ in range(cycles):
        drv.steady(high_s, count, waiting=0, running=high * unit)
        rec = drv.steady(low_s, count, waiting=0, running=low * unit)
    assert rec is not None
    return rec


def _spikes(cfg: Mapping[str, Any], cycles: int) -> Recommendation:
    """A 5 s spike to 2.6 replica-equivalents every 200 s over 0.96, and the decision 25 s into the fall after the
    last one."""
    drv = Driver(cfg)
    _cycles(drv, cycles=cycles - 1, high=2.6, high_s=5, low=0.96, low_s=195, count=4)
    return _cycles(drv, cycles=1, high=2.6, high_s=5, low=0.96, low_s=30, count=4)


def test_a_rare_cheap_return_releases_what_the_largest_rise_would_hold() -> None:
    """Spikes every 200 s against a 120 s lead: a replica released 25 s after one would have been idle for
    another 170 s, longer than a replacement's cold start. The largest rise (1.64) holds the 4th replica all
    along; by the recurrence, releasing the 4th would have missed 0.2 over 2.4 for 5 s a spike (about 0.5 % of
    the requests, within the p99's 1 %): it goes. Releasing the 3rd would have missed a whole replica's share
    (1.78 %): kept."""
    old = _spikes(config(), cycles=10)
    assert (old.replicas, old.reason) == (4, Reason.STEADY), old.message
    assert "largest rise" in old.message
    rec = _spikes(config(**RECURRENCE), cycles=10)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_DOWN), rec.message
    assert "replica 3: below its need (load ≤ 1.60) for 25s; of 8 past falls that lasted longer" in rec.message
    assert "⇒ kept (over the budget)" in rec.message


def test_the_recurrence_releases_nothing_the_margins_keep_on_too_few_falls() -> None:
    """One fall (the history starts in the first) is not the evidence to release against the margins
    (``MIN_RECURRENCE_FALLS``)."""
    rec = _spikes(config(**RECURRENCE), cycles=3)
    assert (rec.replicas, rec.reason) == (4, Reason.STEADY), rec.message
    assert f"1 falls < {slo.MIN_RECURRENCE_FALLS} to judge by" in rec.message


def test_demand_back_within_the_lead_keeps_its_replica() -> None:
    """Demand needing a 5th replica comes back every 60 s, each time barely over (0.01 over 3.2: within the
    budget): a release would be a flap, re-needed within the 120 s cold start (the ski-rental break-even)."""
    drv = Driver(config(**RECURRENCE))
    rec = _cycles(drv, cycles=20, high=3.21, high_s=30, low=0.96, low_s=60, count=5)
    assert (rec.replicas, rec.reason) == (5, Reason.STEADY), rec.message
    assert "replica 5:" in rec.message
    assert "⇒ kept (back within the lead on average)" in rec.message


def test_the_recurrence_lead_adds_a_victims_eviction() -> None:
    drv = Driver(config(**RECURRENCE))
    drv.eviction_s = 45.0
    rec = _cycles(drv, cycles=4, high=2.6, high_s=5, low=0.96, low_s=195, count=4)
    assert "within the 165s lead" in rec.message, rec.message


@given(st.fixed_dictionaries({}, optional={
    name: st.sampled_from(["a", "b", "c"]) for name in slo.SloSignalsSpec.model_fields
}))
def test_signal_names_are_the_dump_s_strings_in_field_order(given_names: dict[str, str]) -> None:
    """``names`` reads the fields directly (it runs in validation, per policy): what the dump lists, in order."""
    signals = slo.SloSignalsSpec(**given_names)
    assert signals.names() == [v for v in signals.model_dump().values() if isinstance(v, str)]


# --- slotWait: a wait for a slot priced against the TTFT slack -------------------------------------------------

#: Gauges and the prompt-length histogram only (as the JetStream policy reads them): the arrivals are the
#: histogram's rate.
SLOT_WAIT = {"slotWait": True, "signals": {"waiting": "waiting", "running": "running", "promptLength": "plen"}}
#: 110 sequences on 3 replicas of 48 slots, 10 arrivals/s of prompts ≤ 500 tokens (``SHORT_PROMPTS``): each holds
#: its slot 11 s (Little), and a wait of up to ~1.9 s still meets the 2 s objective.
BUSY = {"waiting": 0.0, "running": 110.0}


def test_a_wait_within_the_slack_needs_fewer_replicas_than_a_wait_counted() -> None:
    """Counted (every wait a miss, the Poisson rule): 110 / 41.7 sequences per replica-equivalent / 0.8 → 4.
    Priced (M/M/n per replica, a slot freed every 11 s per sequence, ~1.9 s of slack): ~37 sequences per replica
    keep the tail within 1 % → 3. The message carries the measured numbers."""
    counted = Driver(config(signals={"waiting": "waiting", "running": "running"})).step(3, 3, **BUSY)
    drv = Driver(config(**SLOT_WAIT))
    drv.histograms = {"plen": SHORT_PROMPTS}
    priced = drv.step(3, 3, **BUSY)
    assert counted.replicas == 4, counted.message
    assert priced.replicas == 3, priced.message
    assert "slot wait priced (M/M/n per replica): a slot frees every 11.0s per sequence" in priced.message
    assert "TTFT slack 1.94-1.98s" in priced.message
    assert drv.learned.release_rate == pytest.approx(10.0 / 110.0)


def test_a_slot_wait_not_measured_yet_counts_every_wait() -> None:
    """Never less capacity on missing data: without the arrivals (no prompt-length buckets) the release rate is
    not known, and the slot model is the Poisson rule's, to the replica."""
    counted = Driver(config(signals={"waiting": "waiting", "running": "running"})).step(3, 3, **BUSY)
    drv = Driver(config(**SLOT_WAIT))
    rec = drv.step(3, 3, **BUSY)
    assert rec.replicas == counted.replicas == 4, rec.message
    assert "release rate or prompt lengths not measured yet, every wait a miss" in rec.message
    assert drv.learned.release_rate is None


def test_unknown_prompt_lengths_keep_the_last_release_rate_and_slacks() -> None:
    drv = Driver(config(**SLOT_WAIT))
    drv.histograms = {"plen": SHORT_PROMPTS}
    first = drv.step(3, 3, **BUSY)
    learned = drv.learned
    again = drv.step(3, 3, **BUSY)  # no buckets this evaluation
    assert drv.learned.slacks == learned.slacks
    assert drv.learned.release_rate == learned.release_rate
    assert again.replicas == first.replicas == 3, again.message
    assert "(not measured now, the last)" in again.message


@pytest.mark.parametrize(
    ("cfg", "error"),
    [
        pytest.param({"slotWait": True}, "slotWait", id="needs-the-prompt-lengths"),
        pytest.param(
            {"slotWait": True, "signals": {"waiting": "waiting", "kvCacheUsage": "kv", "promptLength": "plen"}},
            "signals.running or signals.slotsUsed", id="needs-the-sequences-running",
        ),
        pytest.param({"signals": {"waiting": "waiting", "promptLength": "plen"}}, "promptLength",
                     id="prompt-lengths-alone-need-slot-wait"),
    ],
)
def test_slot_wait_config(cfg: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        policy(config(**cfg))
    # The prompt lengths without the token counters are enough for it.
    policy(config(**SLOT_WAIT))


def test_a_priced_wait_is_bounded_by_the_usable_slots_as_a_counted_one() -> None:
    """However fast the slots free up, one replica-equivalent of the slot part is at most the usable slots: at
    ``targetUtilization`` it plans at most that share of them (the rule the prefill queue's unit follows). The
    version without this bound lost the TPU slow ramp on the grid (docs/slo.md, "Session 10")."""
    algo = slo.SloAlgorithm(slo.SloPolicyConfig.model_validate(config(**SLOT_WAIT)))
    wait = slo._Wait(1.0, ((1.9, 1.0),))
    allowed = wait.occupancy(48, 0.99)
    assert 0.8 * 48 < allowed < 48
    assert algo.slot_unit(1.0, 1.0, wait) == pytest.approx(48)
    slow = slo._Wait(0.01, ((1.9, 1.0),))
    assert algo.slot_unit(1.0, 1.0, slow) == pytest.approx(slow.occupancy(48, 0.99) / 0.8)
    assert algo.slot_unit(1.0) == pytest.approx(slo.occupancy_at_objective(48, 0.99) / 0.8)


# --- forecast.arrivals: the trend and the burst measured on the arrivals, not on an occupancy gauge -------------

#: Gauges and the prompt-length histogram only (as the JetStream policy reads them): the arrivals are the
#: histogram's observation rate.
ARRIVALS = {"forecast": {"arrivals": True}, "signals": {"waiting": "waiting", "running": "running",
                                                        "promptLength": "plen"}}
#: The gauge path, for the controls: the same gauges, no arrival signal.
GAUGES = {"signals": {"waiting": "waiting", "running": "running"}}


def _arrive(drv: Driver, per_s: float | None) -> None:
    """The prompt-length histogram for the next step, ``per_s`` observations a second (None: not read)."""
    if per_s is not None:
        drv.histograms = {"plen": {200.0: 0.2 * per_s, 500.0: per_s, math.inf: per_s}}


def _fill(
    drv: Driver, seconds: float, arrivals: float | None, top: float = 30.0, fill_s: float = 60.0
) -> Recommendation:
    """One replica's servers filling from empty: the sequences running climb 0 → ``top`` over ``fill_s`` while the
    arrivals hold steady (by Little's law the occupancy rises to arrival rate × time in system, then stays)."""
    rec = None
    for i in range(int(seconds / STEP)):
        _arrive(drv, arrivals)
        rec = drv.step(1, 1, waiting=0, running=min(top, top * (i * STEP + STEP) / fill_s))
    assert rec is not None
    return rec


def test_servers_filling_from_empty_are_not_a_trend_on_the_arrivals() -> None:
    """30 sequences of one replica (0.72 replica-equivalents at 41.7 per) need 1 at 0.8. On the gauge the minute's
    climb from 0 is a trend (forecast ≈ 1.38 over the 55 s observed: a second replica); on the arrivals, steady at
    5/s, it is none."""
    gauge = _fill(Driver(config(**GAUGES)), 60, None)
    assert (gauge.replicas, gauge.reason) == (2, Reason.SCALE_UP), gauge.message
    assert "trend ≥ +" in gauge.message
    drv = Driver(config(**ARRIVALS))
    rec = _fill(drv, 60, 5.0)
    assert (rec.replicas, rec.reason) == (1, Reason.STEADY), rec.message
    assert "forecast 0.72 over the 120s cold start (on arrivals 5/s: ×1.00)" in rec.message
    assert all(x.arrivals == pytest.approx(5.0) for x in drv.learned.history)


def test_arrivals_unknown_fall_back_to_the_gauges_trend() -> None:
    """Never less capacity on missing data: with the arrival signal configured but not read (no histogram this
    evaluation), the forecast is the load's own trend, as without the signal."""
    drv = Driver(config(**ARRIVALS))
    _fill(drv, 55, 5.0)
    rec = drv.step(1, 1, waiting=0, running=30)  # the fill's last step, its histogram not read
    assert (rec.replicas, rec.reason) == (2, Reason.SCALE_UP), rec.message
    assert "on arrivals" not in rec.message
    assert "trend ≥ +" in rec.message


def test_a_ramp_in_the_arrivals_is_forecast_over_the_cold_start() -> None:
    """Arrivals climbing +50 %/min with the occupancy in proportion (6 s in the system): the forecast is the load
    now times the arrivals' forecast over the arrivals now; it sizes ahead of the load."""
    drv = Driver(config(**ARRIVALS))
    rec = None
    for i in range(48):
        per_s = 8.0 * (1.0 + 0.5 * i * STEP / 60)
        _arrive(drv, per_s)
        rec = drv.step(8, 8, waiting=0, running=6.0 * per_s)
    assert rec is not None
    assert "on arrivals" in rec.message, rec.message
    assert "trend ≥ +" in rec.message, rec.message
    load = float(rec.message.split("load ")[1].split()[0])
    forecast = float(rec.message.split("forecast ")[1].split()[0])
    ratio = float(rec.message.split(": ×")[1].split()[0])
    assert load < forecast <= 2 * load
    assert forecast == pytest.approx(load * ratio, abs=0.01)
    assert rec.replicas is not None
    assert rec.replicas >= math.ceil(forecast / 0.8) > math.ceil(load / 0.8)


def test_falling_arrivals_never_remove_what_the_load_needs() -> None:
    """Arrivals halving while 100 sequences still run on 3 replicas (2.40 replica-equivalents): the forecast is
    the load now, not the lower load the arrivals will bring; the count the load needs stays."""
    drv = Driver(config(**ARRIVALS))
    rec = None
    for i in range(48):
        _arrive(drv, 10.0 - 5.0 * i / 47)
        rec = drv.step(3, 3, waiting=0, running=100)
    assert rec is not None
    assert "forecast 2.40" in rec.message, rec.message
    assert (rec.replicas, rec.reason) == (3, Reason.STEADY), rec.message


def test_a_burst_in_the_arrivals_holds_its_peak_over_the_arrivals_now() -> None:
    """Steady 2/s for 5 min, then 8/s for a few seconds, then 5/s: a burst on the arrivals; the forecast is the
    load now times the short window's highest arrivals over the arrivals now (8 / 5)."""
    drv = Driver(config(**ARRIVALS))
    for _ in range(60):
        _arrive(drv, 2.0)
        drv.step(2, 2, waiting=0, running=20)
    for _ in range(2):
        _arrive(drv, 8.0)
        drv.step(2, 2, waiting=0, running=20)
    _arrive(drv, 5.0)
    rec = drv.step(2, 2, waiting=0, running=20)
    assert "burst" in rec.message, rec.message
    assert "×1.60" in rec.message, rec.message


def test_prompt_lengths_alone_are_the_arrivals_for_the_forecast() -> None:
    policy(config(**ARRIVALS))
    with pytest.raises(ValidationError, match=r"forecast\.arrivals"):
        policy(config(signals={"waiting": "waiting", "promptLength": "plen"}))


def test_the_arrivals_first_window_is_not_history() -> None:
    """A fresh controller's histogram rate fills its window from nothing (a ramp of the arrivals that did not
    happen): the arrivals are history only once that window has filled; before it the forecast has no arrival
    trend (nor a gauge one: the signal is read)."""
    signals = [
        {"name": "plen", "preset": "jetstream.prompt_length", "quantile": {"q": 0.99, "windowSeconds": 60}}
        if s["name"] == "plen" else s
        for s in SIGNALS
    ]
    drv = Driver(config(**ARRIVALS))
    drv.pol = policy(config(**ARRIVALS), signals=signals)
    drv.judge = SignalJudge(drv.pol.spec)
    rec = None
    for i in range(24):  # 120 s; the rate reaches its level after 60 s
        _arrive(drv, 5.0 * min(1.0, (i * STEP + STEP) / 60))
        rec = drv.step(1, 1, waiting=0, running=30)
    assert rec is not None
    assert "trend" not in rec.message, rec.message
    assert all((x.arrivals is None) == (x.t < T0 + 60) for x in drv.learned.history)
    assert any(x.arrivals is None for x in drv.learned.history)


def test_an_arrival_counter_is_read_for_the_forecast_only() -> None:
    """``signals.arrivals`` (a counter's rate, e.g. JetStream's prompt tokens): the trend is measured on it, and
    it counts in no load (the load is the gauges'). Without ``forecast.arrivals`` the role is refused."""
    cfg = config(forecast={"arrivals": True}, signals={"waiting": "waiting", "running": "running",
                                                       "arrivals": "prompt"})
    drv = Driver(cfg)
    rec = None
    for i in range(int(60 / STEP)):
        rec = drv.step(1, 1, waiting=0, running=min(30.0, 30.0 * (i * STEP + STEP) / 60), prompt=90_000.0)
    assert rec is not None
    assert (rec.replicas, rec.reason) == (1, Reason.STEADY), rec.message
    assert "load 0.72 replica-equivalents (slots 0.72" in rec.message
    assert "on arrivals 9e+04/s: ×1.00" in rec.message
    with pytest.raises(ValidationError, match=r"forecast\.arrivals only"):
        policy(config(signals={"waiting": "waiting", "arrivals": "prompt"}))


def test_a_dip_in_the_arrivals_is_no_growth_to_come() -> None:
    """Arrivals climbing slowly (10 → 12.35/s over 4 min), the last sample a dip to 9/s: measured from the dip,
    the fitted line's value would read as growth still to come (×1.42); over their level (the fitted line's value
    now, never below the arrivals now) the dip forecasts no more growth than the same climb without it."""

    def last(dip: bool) -> float:
        drv = Driver(config(**ARRIVALS))
        for i in range(47):
            _arrive(drv, 10.0 + 0.05 * i)
            drv.step(3, 3, waiting=0, running=80)
        _arrive(drv, 9.0 if dip else 10.0 + 0.05 * 47)
        rec = drv.step(3, 3, waiting=0, running=80)
        assert "trend ≥ +" in rec.message, rec.message
        return float(rec.message.split(": ×")[1].split()[0])

    assert 1.0 < last(dip=True) <= last(dip=False)


# --- latencyEvidence: what a latency window is evidence of ---------------------------------------------------

#: The TTFT histogram (60 s window, p99) as the loop's signal, with the waiting gauge.
EVIDENCE = {"signals": {"waiting": "waiting", "running": "running", "ttft": "ttfth"}, "latencyEvidence": True}
NO_EVIDENCE = {"signals": EVIDENCE["signals"]}
#: 20 requests in the window (rates per second over 60 s): one took 1-4 s, the rest ≤ 1 s; or two did.
ONE_SLOW = {1.0: 19 / 60, 4.0: 20 / 60, math.inf: 20 / 60}
TWO_SLOW = {1.0: 18 / 60, 4.0: 20 / 60, math.inf: 20 / 60}


def _with_ttft(cfg: Mapping[str, Any], buckets: Mapping[float, float], **values: float) -> Recommendation:
    """One evaluation with the TTFT window's buckets; the source's value is their point p99, as a pods source
    (``signals.combine_pods``) gives it."""
    drv = Driver(config(**cfg))
    drv.histograms = {"ttfth": buckets}
    point = counters.histogram_quantile(0.99, buckets)
    return drv.step(2, 2, **{"waiting": 0.0, "running": 30.0, "ttfth": point, **values})


def test_one_slow_request_in_twenty_is_no_missed_slo_with_latency_evidence() -> None:
    """Its point p99 (3.4 s) misses the objective; what twenty requests support (the second largest, ≤ 1 s) does
    not: no replica added for it. Without latencyEvidence the point estimate adds one."""
    plain = _with_ttft(NO_EVIDENCE, ONE_SLOW)
    assert (plain.replicas, plain.reason) == (3, Reason.SCALE_UP), plain.message
    assert "TTFT p99 3.4s vs 2s" in plain.message
    assert "SLO missed with 2 ready" in plain.message
    weighed = _with_ttft(EVIDENCE, ONE_SLOW)
    assert weighed.replicas == 2, weighed.message
    assert "SLO missed" not in weighed.message
    assert "TTFT p99 1s vs 2s (supported by its 20 requests at 95%; point estimate 3.4s)" in weighed.message


def test_two_slow_requests_in_twenty_are_a_missed_slo_either_way() -> None:
    for cfg in (EVIDENCE, NO_EVIDENCE):
        rec = _with_ttft(cfg, TWO_SLOW)
        assert (rec.replicas, rec.reason) == (3, Reason.SCALE_UP), rec.message
        assert "SLO missed with 2 ready: at least 3" in rec.message


def _idle_window(cfg: Mapping[str, Any], waiting: float) -> Recommendation:
    """A long-observed target at 4 replicas serving 10 sequences, no request observed in the TTFT window."""
    drv = Driver(config(**cfg))
    drv.now -= 1000
    drv.state = slo.SloState(since=drv.now - 1000)
    drv.errors = {"ttfth": f"{NO_OBSERVATIONS}no request observed in the window by the 4 reporting pods"}
    return drv.step(4, 4, waiting=waiting, running=10.0)


def test_a_window_with_no_request_and_none_waiting_is_quiet_not_unknown() -> None:
    """Nothing is late: with latencyEvidence the model decides (scale-down); without it, no scale-down while the
    quantile is unknown."""
    quiet = _idle_window(EVIDENCE, 0.0)
    assert quiet.reason is Reason.SCALE_DOWN, quiet.message
    assert "TTFT: no request observed in its window and none waiting (quiet)" in quiet.message
    assert not quiet.unknown_signals
    plain = _idle_window(NO_EVIDENCE, 0.0)
    assert (plain.replicas, plain.reason) == (4, Reason.METRICS_UNKNOWN), plain.message
    assert "no scale-down while ttfth is unknown" in plain.message


def test_a_window_with_no_request_while_requests_wait_stays_unknown() -> None:
    """Requests waiting and no first token in the window: a stall, not quiet; nothing is released."""
    rec = _idle_window(EVIDENCE, 3.0)
    assert (rec.replicas, rec.reason) == (4, Reason.METRICS_UNKNOWN), rec.message
    assert "no scale-down while ttfth is unknown" in rec.message


# --- ttftAfterQueue: JetStream's TTFT starts after its queue time; users feel their sum ----------------------

AFTER_QUEUE_SIGNALS = {"waiting": "waiting", "running": "running", "ttft": "ttfth", "queueTime": "qtimeh"}
AFTER_QUEUE = {"signals": AFTER_QUEUE_SIGNALS, "latencyEvidence": True, "ttftAfterQueue": True}
#: Each judged against the objective alone, as without the option.
EACH_ALONE = {"signals": AFTER_QUEUE_SIGNALS, "latencyEvidence": True}
#: 600 requests in the 60 s windows (rates per second). 10 % wait 1-1.9 s, every prefill takes 0.25-0.75 s: queue
#: time p99 1.81 s and TTFT p99 0.745 s, each within 2 s; their sum's p99 2.35 s.
LONG_WAITS = ({0.001: 9.0, 1.0: 9.0, 1.9: 10.0, math.inf: 10.0}, {0.25: 0.0, 0.75: 10.0, math.inf: 10.0})
#: 1.5 % wait 1-2 s and, independently, 1.5 % of the prefills take 0.25-1.75 s: p99s 1.33 s and 0.75 s, whose sum
#: (2.08 s) is over 2 s; the sum's own p99 is 1.61 s (a slow prefill rarely follows a long wait).
RARE_TAILS = ({0.001: 9.85, 1.0: 9.85, 2.0: 10.0, math.inf: 10.0}, {0.1: 0.0, 0.25: 9.85, 1.75: 10.0, math.inf: 10.0})


def _after_queue(
    cfg: Mapping[str, Any], buckets: tuple[Mapping[float, float], Mapping[float, float]]
) -> Recommendation:
    """One evaluation at 2 replicas serving 30 sequences with the queue-time and TTFT windows' buckets (the sources'
    values their point p99s, as a pods source gives them)."""
    drv = Driver(config(**cfg))
    queue, ttft = buckets
    drv.histograms = {"qtimeh": queue, "ttfth": ttft}
    return drv.step(2, 2, waiting=0.0, running=30.0, qtimeh=counters.histogram_quantile(0.99, queue),
                    ttfth=counters.histogram_quantile(0.99, ttft))


def test_a_queue_time_and_a_ttft_each_within_the_objective_miss_it_together() -> None:
    """What users feel is the wait plus the prefill: with ttftAfterQueue the loop sees the SLO missed and adds a
    replica; judged each against the objective alone, it does not."""
    summed = _after_queue(AFTER_QUEUE, LONG_WAITS)
    assert (summed.replicas, summed.reason) == (3, Reason.SCALE_UP), summed.message
    assert "queue time + TTFT p99 2.26s vs 2s" in summed.message
    assert "independent sum of the two windows, supported by their 600 requests at 95%; point estimate 2.35s" in (
        summed.message
    )
    assert "SLO missed with 2 ready: at least 3" in summed.message
    alone = _after_queue(EACH_ALONE, LONG_WAITS)
    assert "SLO missed" not in alone.message, alone.message
    assert "queue time p99 1.75s vs 2s" in alone.message


def test_the_sum_is_of_independent_latencies_not_of_their_quantiles() -> None:
    """A long wait and a slow prefill are rare together: the sum of the two p99s (2.08 s) would add a replica the
    sum's own p99 (1.61 s) does not call for."""
    q, t = (counters.histogram_quantile(0.99, b) for b in RARE_TAILS)
    assert q + t > 2.0
    rec = _after_queue(AFTER_QUEUE, RARE_TAILS)
    assert "SLO missed" not in rec.message, rec.message
    assert rec.replicas == 2, rec.message
    assert "queue time + TTFT p99 1.34s vs 2s" in rec.message
    assert "point estimate 1.61s" in rec.message


def test_without_buckets_the_sum_is_of_the_two_quantiles() -> None:
    """A source that returns each quantile whole (PromQL) gives no buckets: 1.5 s + 0.8 s is over 2 s."""
    drv = Driver(config(**{**AFTER_QUEUE, "latencyEvidence": False}))
    rec = drv.step(2, 2, waiting=0.0, running=30.0, qtimeh=1.5, ttfth=0.8)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_UP), rec.message
    assert "queue time + TTFT p99 2.3s vs 2s (the sum of the two quantiles: 1.5s + 0.8s)" in rec.message


def test_an_unknown_queue_time_makes_what_users_feel_unknown() -> None:
    """A long-observed target at 4 replicas serving 10 sequences: with the TTFT window fine and the queue time's
    unknown, nothing is released."""
    drv = Driver(config(**AFTER_QUEUE))
    drv.now -= 1000
    drv.state = slo.SloState(since=drv.now - 1000)
    drv.histograms = {"ttfth": LONG_WAITS[1]}
    drv.errors = {"qtimeh": "scrape failed"}
    rec = drv.step(4, 4, waiting=0.0, running=10.0, ttfth=0.745)
    assert (rec.replicas, rec.reason) == (4, Reason.METRICS_UNKNOWN), rec.message
    assert "no scale-down while qtimeh is unknown" in rec.message


def test_after_queue_needs_both_latencies() -> None:
    with pytest.raises(ValidationError, match="ttftAfterQueue judges queue time \\+ TTFT"):
        policy(config(signals={"waiting": "waiting", "ttft": "ttfth"}, ttftAfterQueue=True))


#: A window of the simulated code trace ×0.5, 30-45 min at 218 s (docs/slo.md Session 24; rates per second of a 60 s
#: window, 133 requests): 29 waits in (1, 2] s, really 1.34-1.61 s, none above; the true p99 of queue time + TTFT
#: is 1.69 s, within the 2 s objective.
FALLING_IN_A_WIDE_BUCKET = (
    {k: v / 60 for k, v in {0.01: 33, 0.02: 34, 0.05: 43, 0.1: 51, 0.2: 60, 0.5: 77, 1.0: 104, 2.0: 133, 5.0: 133,
                            math.inf: 133}.items()},
    {k: v / 60 for k, v in {0.001: 3, 0.005: 13, 0.01: 21, 0.02: 34, 0.04: 49, 0.06: 67, 0.08: 74, 0.1: 79,
                            0.25: 111, 0.5: 133, 0.75: 133, math.inf: 133}.items()},
)


def test_a_wide_bucket_read_exponential_raises_no_false_alarm() -> None:
    """Read uniform within its buckets (as histogram_quantile reads one), the wide (1, 2] bucket puts the supported
    p99 of the sum over 2 s and the loop adds a replica no request needed; read exponential, fitted from the
    neighbouring buckets' counts, it is within the objective (at risk: over 0.8 of it) and nothing is added."""
    uniform = _after_queue(AFTER_QUEUE, FALLING_IN_A_WIDE_BUCKET)
    assert (uniform.replicas, uniform.reason) == (3, Reason.SCALE_UP), uniform.message
    assert "queue time + TTFT p99 2.02s vs 2s (independent sum of the two windows, supported" in uniform.message
    fitted = _after_queue({**AFTER_QUEUE, "bucketReading": "exponential"}, FALLING_IN_A_WIDE_BUCKET)
    assert fitted.replicas == 2, fitted.message
    assert "SLO missed" not in fitted.message, fitted.message
    assert ("queue time + TTFT p99 1.9s vs 2s (independent sum of the two windows, exponential within buckets, "
            "supported by their 133 requests at 95%; point estimate 2.02s)") in fitted.message


def test_an_exponential_reading_still_sees_a_miss() -> None:
    """10 % of the requests wait in (1, 1.9] s with nothing in (0.001, 1]: the counts say nothing of a falling density
    there, and the sum's p99 is still over the objective read exponential: a replica is added."""
    rec = _after_queue({**AFTER_QUEUE, "bucketReading": "exponential"}, LONG_WAITS)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_UP), rec.message
    assert "exponential within buckets" in rec.message


def test_a_bucket_reading_needs_ttft_after_queue() -> None:
    with pytest.raises(ValidationError, match="bucketReading is how ttftAfterQueue reads"):
        policy(config(signals=AFTER_QUEUE_SIGNALS, bucketReading="exponential"))


#: A 60 s latency quantile comfortably met whose histogram observes 2 requests ending per second (cumulative rates).
ENDING = {0.5: 2.0, math.inf: 2.0}


def _ending_steps(drv: Driver, seconds: float, waiting: float) -> list[float]:
    """Evaluations for ``seconds`` at 0.75 replica-equivalents per replica on 4, 40 running, the latency comfortably
    met with 2 requests observed per second; the utilization at the SLO after each."""
    seen = []
    for _ in range(int(seconds / STEP)):
        drv.histograms = {"ttfth": ENDING}
        drv.step(4, 4, waiting=waiting, running=40, prompt=4 * 0.75 * 5000, gen=300, ttfth=0.3)
        assert drv.learned.utilization is not None
        seen.append(drv.learned.utilization)
    return seen


@pytest.mark.parametrize("at_end", [True, False], ids=["observed-at-end", "as-before"])
def test_a_window_is_no_evidence_of_capacity_to_spare_until_the_requests_that_waited_have_ended(at_end: bool) -> None:
    """``observedAtEnd``: a server that observes a request's latency as it ends (TGI's queue time) has not observed
    the requests that waited while they decode. While any waits, a window comfortably met neither recovers nor
    probes the utilization at the SLO; after the last wait, not until the mean time in system has passed (Little's
    law: 40 in the system / 2 observed per second = 20 s); then it does. Without the option it probes throughout."""
    drv = Driver(config(**TOKENS_WINDOW, observedAtEnd=at_end))
    drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP, utilization=0.8)
    waiting = _ending_steps(drv, 300, waiting=3.0)
    after = _ending_steps(drv, 15, waiting=0.0)  # 5, 10, 15 s after the last wait
    later = _ending_steps(drv, 30, waiting=0.0)
    if at_end:
        assert waiting == [0.8] * len(waiting)
        assert after == [0.8] * len(after)
        assert later[-1] > 0.8
        message = drv.step(4, 4, waiting=1, running=40, prompt=15000, gen=300, ttfth=0.3).message
        assert "1 waiting, observed only as each ends: no evidence of capacity to spare" in message
    else:
        assert waiting[-1] > 0.8
        assert after[-1] > waiting[-1]


def test_a_risk_still_lowers_the_utilization_while_waits_are_unobserved() -> None:
    drv = Driver(config(**TOKENS_WINDOW, observedAtEnd=True))
    drv.state = slo.SloState(ready=4, ready_since=T0 - 600, since=T0 - 600, last_t=T0 - STEP, utilization=0.8)
    for _ in range(12):
        drv.histograms = {"ttfth": {1.0: 1.0, 2.5: 2.0, math.inf: 2.0}}
        drv.step(4, 4, waiting=3, running=40, prompt=4 * 0.5 * 5000, gen=300, ttfth=1.9)  # at risk
    assert drv.learned.utilization is not None
    assert drv.learned.utilization < 0.8


# --- kvAtOnset: the KV gauge judged at the fill where requests start to wait, not at the utilization at the SLO --

KV_AT_ONSET = {"kvAtOnset": True, "signals": {"waiting": "waiting", "slotsUsed": "used", "kvCacheUsage": "kv"}}


@pytest.mark.parametrize(
    ("onset", "expected", "words"),
    [pytest.param(False, 2, ["KV 0.87 (87% of 1)", "needs 2"], id="sized-like-throughput-at-the-utilization"),
     pytest.param(True, 1, ["KV 0.70 (87% of 1; 1 replica-equivalent = 125% of a cache)", "needs 1"],
                  id="judged-at-the-cache-full")],
)
def test_a_cache_short_of_its_onset_needs_no_more_replicas(onset: bool, expected: int, words: list[str]) -> None:
    """Mooncake-like long prompts (the held-out TPU row, docs/slo.md Session 25, collapse 3): one replica's cache
    87 % full with no request waiting. Sized like throughput at the utilization at the SLO (0.8) that is 1.09
    replicas, so 2; as an occupancy it is short of the fill at which a request would wait (the cache full, until
    a queue shows where the onset is): 1."""
    cfg = KV_AT_ONSET if onset else {"signals": KV_AT_ONSET["signals"]}
    rec = Driver(config(**cfg)).step(1, 1, waiting=0, used=0.45, kv=0.87)
    assert rec.replicas == expected, rec.message
    for word in words:
        assert word in rec.message, rec.message


def test_the_onset_is_learned_where_the_cache_binds_and_the_slots_learn_nothing_from_it() -> None:
    """A queue on every replica with the cache fuller than the slots: the cache is what admits no more. With
    kvAtOnset the fill it holds then is the onset (the slots keep their stated share: the same limit is not priced
    twice); a fill seen while nothing waits is below the onset, which rises to it at once."""
    drv = Driver(config(**KV_AT_ONSET))
    for _ in range(int(120 / STEP)):
        drv.step(2, 2, waiting=4, used=0.35, kv=0.7)
    assert drv.learned.slot_scale == 1.0
    assert drv.learned.kv_onset == pytest.approx(0.7, abs=0.02)
    rec = drv.step(2, 2, waiting=4, used=0.35, kv=0.7)
    assert "needs 2" in rec.message, rec.message
    assert "1 replica-equivalent = 87% of a cache" in rec.message, rec.message
    drv.step(2, 2, waiting=0, used=0.35, kv=0.8)
    assert drv.learned.kv_onset == pytest.approx(0.8)


def test_the_onset_tightens_with_the_utilization_the_latency_loop_lowered() -> None:
    """Below the target the loop has found a risk: the KV part plans target/c of its fill (here 0.8/0.4), as every
    part of the load does; at or above the target, the onset itself."""
    drv = Driver(config(**KV_AT_ONSET))
    drv.state = slo.SloState(utilization=0.4)
    rec = drv.step(2, 2, waiting=0, used=0.3, kv=0.6)
    assert "needs 3" in rec.message, rec.message  # 1.2 replicas of cache × 0.8/0.4 = 2.4
    drv.state = slo.SloState(utilization=1.0)
    rec = drv.step(2, 2, waiting=0, used=0.3, kv=0.6)
    assert "needs 2" in rec.message, rec.message  # 1.2: the cache up to its onset, not beyond


def test_kv_at_onset_needs_the_kv_gauge() -> None:
    with pytest.raises(ValidationError, match="kvAtOnset"):
        policy(config(kvAtOnset=True))


# --- breachOnEvidence: a miss counts where the window's requests show it; the point estimate still warns ---------

BREACH_ON_EVIDENCE = {"signals": EVIDENCE["signals"], "breachOnEvidence": True}


def test_one_slow_request_in_twenty_adds_no_replica_but_still_lowers_the_utilization() -> None:
    """Its point p99 (3.4 s) is over the objective on one request of twenty: a 1 % tail puts one there with
    probability 1 − 0.99²⁰ ≈ 18 %, so the window does not show a miss. No floor of one more replica, no count
    remembered as short; the model sizes with the utilization the point estimate lowered (the risk is read as
    before). Two slow requests of twenty (P ≈ 1.7 % under a 1 % tail) are a miss either way."""
    drv = Driver(config(**BREACH_ON_EVIDENCE))
    drv.histograms = {"ttfth": ONE_SLOW}
    drv.state = slo.SloState(utilization=0.8, last_t=drv.now - STEP, since=drv.now - 1000)
    rec = drv.step(2, 2, waiting=0.0, running=30.0, ttfth=counters.histogram_quantile(0.99, ONE_SLOW))
    assert (rec.replicas, rec.reason) == (2, Reason.STEADY), rec.message
    assert "SLO missed" not in rec.message
    assert "TTFT p99 3.4s vs 2s" in rec.message
    assert "over the objective on too few of its window's requests to show a miss at 95%: no floor" in rec.message
    assert drv.learned.short == ()
    assert drv.learned.utilization is not None
    assert drv.learned.utilization < 0.8  # the risk is still read
    shown = _with_ttft(BREACH_ON_EVIDENCE, TWO_SLOW)
    assert (shown.replicas, shown.reason) == (3, Reason.SCALE_UP), shown.message
    assert "SLO missed with 2 ready: at least 3" in shown.message


def test_without_buckets_a_miss_is_the_point_estimate() -> None:
    """A source that returns the quantile whole (PromQL) gives no buckets: nothing to count, the point estimate."""
    rec = Driver(config(**BREACH_ON_EVIDENCE)).step(2, 2, waiting=0.0, running=30.0, ttfth=3.4)
    assert "SLO missed with 2 ready: at least 3" in rec.message, rec.message


@pytest.mark.parametrize(
    ("n", "slow_shown"),
    [pytest.param(5, 1, id="five-one-shows"), pytest.param(6, 2, id="six-two"), pytest.param(35, 2, id="35-two"),
     pytest.param(36, 3, id="36-three"), pytest.param(82, 3, id="82-three"), pytest.param(83, 4, id="83-four")],
)
def test_the_slow_requests_a_p99_miss_needs_is_what_the_docs_say(n: int, slow_shown: int) -> None:
    """The field's description: one slow request shows a p99 miss in at most 5, two from 6 to 35, three from 36
    to 82 (the supported rank of ``sizing.supported_rank``: the largest k with P(Binomial(n, 0.99) ≥ k) ≥ 95 %;
    a miss shows when X_(k) is over the objective, that is n − k + 1 requests are)."""
    assert n - sizing.supported_rank(n, 0.99) + 1 == slow_shown


# --- countDecode: the busy share of a prefill-first server, not the slots' occupancy below the knee -------------

COUNT_DECODE = {**TOKENS, "countDecode": True}


@pytest.mark.parametrize(
    ("option", "expected", "words"),
    [pytest.param(True, 3, ["tokens 1.80 (4000 prompt + 600 generated tok/s)", "needs 3"], id="busy-share"),
     pytest.param(False, 2, ["tokens 0.80 (4000 prompt + 600 generated tok/s, prefill only", "slots 0.96",
                             "needs 2"], id="prefill-only-as-before")],
)
def test_the_decode_counts_where_the_slots_read_below_the_busy_share(
    option: bool, expected: int, words: list[str]
) -> None:
    """Two replicas of the prior (5,000 prompt tok/s, 600 generated tok/s at a full batch) serve 4,000 prompt and
    600 generated tok/s: 0.8 + 1.0 = 1.8 replicas of busy time, while 40 sequences hold the slots (0.96 of the
    42-sequence unit), as on a server whose decode step has a fixed part: a small batch steps nearly as slowly as
    a full one, so its sequences are fewer than the busy time. With countDecode the load is the busy share, 1.8
    at the utilization 0.8: 3 replicas; without, the slots' 0.96: 2, until the slots fill at the knee."""
    cfg = COUNT_DECODE if option else TOKENS
    rec = Driver(config(**cfg)).step(2, 2, waiting=0, running=40, prompt=4000, gen=600, ttft=0.5)
    assert rec.replicas == expected, rec.message
    for word in words:
        assert word in rec.message, rec.message


def test_count_decode_needs_the_token_counters() -> None:
    with pytest.raises(ValidationError, match="countDecode"):
        policy(config(countDecode=True))
    policy(config(**COUNT_DECODE))  # with both counters it validates
