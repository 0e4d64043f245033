"""``signals.kvTokens``: TGI's KV use as the server reports it, the tokens its running batch reserves
(``tgi_batch_current_max_tokens``, preset ``tgi.batch_max_tokens``) over the token budget the replica states
(``replica.kvCacheTokens``, TGI's ``--max-batch-total-tokens``), read as the ``kvCacheUsage`` fraction is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core.model import Reason
from autoscaler.core.policies import slo
from autoscaler.core.policies.base import Recommendation
from autoscaler.core.signals import SignalJudge
from tests.core.test_slo import BASE, SIGNALS, Driver, config, policy

#: The token gauge summed over the target's pods, as the preset combines it.
KVTOK_SIGNALS: list[dict[str, Any]] = [*SIGNALS, {"name": "kvtok", "query": "kt"}]
BUDGET = BASE["replica"]["kvCacheTokens"]
KV_TOKENS = {"signals": {"kvTokens": "kvtok"}}
KV_USAGE = {"signals": {"kvCacheUsage": "kv"}}
#: What the TGI policy reads (queue and batch gauges, queue-time p99), with and without the token gauge.
TGI = {"signals": {"waiting": "waiting", "running": "running", "queueTime": "qtime"}}
TGI_KV = {"signals": {**TGI["signals"], "kvTokens": "kvtok"}}


class KvDriver(Driver):
    """``Driver`` over the signals with the token gauge."""

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()  # the base policy (its signals know no kvtok); replaced below
        self.pol = policy(cfg, signals=KVTOK_SIGNALS)
        assert isinstance(self.pol.spec.policy, slo.SloPolicyConfig)
        self.algo = slo.build(self.pol.spec.policy)
        self.judge = SignalJudge(self.pol.spec)


def test_the_reserved_tokens_over_the_budget_are_the_kv_load() -> None:
    """121,600 tokens reserved on 2 replicas of a 64,000-token budget: 95 % of each, the KV part 1.90 replicas at
    utilization 0.8, 3 replicas; the message says the tokens and the budget."""
    rec = KvDriver(config(**KV_TOKENS)).step(2, 2, kvtok=121_600.0)
    assert (rec.replicas, rec.reason) == (3, Reason.SCALE_UP), rec.message
    assert "KV 1.90 (95% of 2: 121600 tok reserved of 2 × 64000)" in rec.message, rec.message


@settings(max_examples=60, deadline=None)
@given(
    fill=st.floats(min_value=0.0, max_value=1.2, allow_nan=False),
    ready=st.integers(min_value=1, max_value=12),
    spec=st.integers(min_value=1, max_value=12),
)
def test_the_token_gauge_decides_as_the_same_fill_as_a_fraction(fill: float, ready: int, spec: int) -> None:
    """Whatever the fill and the count, the tokens reserved decide what the same fill read as ``kvCacheUsage``
    decides (a fill above the budget is a full cache, as a fraction is read at most 1)."""
    spec = max(spec, ready)
    tokens = KvDriver(config(**KV_TOKENS)).step(spec, ready, kvtok=fill * ready * BUDGET)
    usage = KvDriver(config(**KV_USAGE)).step(spec, ready, kv=fill)
    assert (tokens.replicas, tokens.reason) == (usage.replicas, usage.reason), (tokens.message, usage.message)


def _decode_heavy(cfg: dict[str, Any]) -> Recommendation:
    """3 replicas hold 100 sequences with none waiting (33 of 48 slots each: the slots look light), but each
    reserves ~1,800 tokens (a long output), so their batches reserve 180,000 of 3 × 64,000 tokens: 94 % full,
    the next long request waits on most replicas. Settled and comfortably met for a while."""
    drv = KvDriver(config(**cfg))
    values = {"waiting": 0.0, "running": 100.0, "qtime": 0.1, "kvtok": 180_000.0}
    return drv.steady(300, 3, **values)


def test_a_cache_the_slots_do_not_show_full_keeps_and_adds_replicas() -> None:
    """What the gauge is for (docs/slo.md, Session 25, collapse 1): on the slots alone 3 replicas are enough and
    the policy would keep releasing toward them; with the reservation read, the KV part needs 4."""
    slots_only, with_kv = _decode_heavy(TGI), _decode_heavy(TGI_KV)
    assert slots_only.replicas is not None
    assert slots_only.replicas <= 3, slots_only.message
    assert with_kv.replicas is not None
    assert with_kv.replicas >= 4, with_kv.message
    assert "tok reserved of 3 × 64000" in with_kv.message, with_kv.message


def test_the_token_gauge_counts_as_a_gauge_of_the_decode() -> None:
    """Like the other concurrency gauges, it holds the decode: generated tokens then count in no token load."""
    cfg = config(signals={"kvTokens": "kvtok", "promptTokens": "prompt", "generationTokens": "gen"})
    rec = KvDriver(cfg).step(2, 2, kvtok=0.0, prompt=1000.0, gen=6000.0)
    assert "prefill only: the gauges hold decode" in rec.message, rec.message


@pytest.mark.parametrize(
    ("spec", "ready", "starting", "values", "expected", "reason"),
    [
        pytest.param(6, 6, 0, {"kvtok": None}, None, Reason.METRICS_UNKNOWN, id="gauge-missing-holds"),
        pytest.param(3, 0, 3, {"kvtok": 0.0}, None, Reason.METRICS_UNKNOWN, id="no-replica-ready-is-unknown"),
    ],
)
def test_an_unknown_reservation_never_shrinks(
    spec: int, ready: int, starting: int, values: dict[str, float | None], expected: int | None, reason: Reason
) -> None:
    drv = KvDriver(config(**KV_TOKENS))
    drv.now -= 1000  # a long-observed target: only the unknown may hold it
    drv.state = slo.SloState(since=drv.now - 1000)
    rec = drv.step(spec, ready, starting, **values)
    assert (rec.replicas, rec.reason) == (expected, reason), rec.message
    assert "unknown: kvtok" in rec.message, rec.message


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(
            {**KV_TOKENS, "replica": {k: v for k, v in BASE["replica"].items() if k != "kvCacheTokens"}},
            id="no-budget-stated",
        ),
        pytest.param({"signals": {"kvTokens": "kvtok", "kvCacheUsage": "kv"}}, id="two-kv-readings"),
    ],
)
def test_kv_tokens_needs_the_budget_and_is_the_one_kv_reading(cfg: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="kvTokens"):
        policy(config(**cfg), signals=KVTOK_SIGNALS)
