"""Resize through variants with role-wide signals: each variant's part read from its own LeaderWorkerSet and
combined by an ``expr`` (a sum of rates, a max of latencies). A variant the policy holds at zero groups has no
pod to read; while another variant of its role serves, the engine reads its parts as 0 (it serves nothing), so
the role stays known and can shift to it (``engine._zero_group_variant``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    TargetKind,
    TargetRef,
)
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.spec import ScalingPolicy

NS = "llm"
T0 = 10_000.0
REFS = {name: TargetRef(TargetKind.LEADER_WORKER_SET, name, NS) for name in ("prefill", "decode", "decode-big")}
SETTLED = PolicyState(algorithm=dg.DisaggState(since=T0 - 3600))


def _lws(name: str) -> dict[str, str]:
    return {"kind": "LeaderWorkerSet", "name": name, "namespace": NS}


def _policy() -> Any:
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "pd"},
        "spec": {
            "target": _lws("decode"),
            "maxReplicas": 16,
            "signals": [
                {"name": "prompt", "query": "p", "pool": "prefill"},
                {"name": "gen_s", "query": "gs", "pool": "decode"},
                {"name": "gen_b", "query": "gb", "pool": "decode-big"},
                {"name": "gen", "expr": "gen_s + gen_b"},
                {"name": "tpot_s", "query": "ts", "pool": "decode"},
                {"name": "tpot_b", "query": "tb", "pool": "decode-big"},
                {"name": "tpot", "expr": "max(tpot_s, tpot_b)"},
            ],
            "policy": {
                "type": "disaggregated",
                "scaleDownDelaySeconds": 60,
                "prefill": {
                    "ttftSeconds": 2.0,
                    "signals": {"promptTokens": "prompt"},
                    "variants": [{"name": "prefill", "target": _lws("prefill"), "sliceTopology": "2x2x2",
                                  "tokensPerSecond": 60000, "minReplicas": 1, "maxReplicas": 8}],
                },
                "decode": {
                    "timePerOutputTokenSeconds": 0.05,
                    "signals": {"generationTokens": "gen", "timePerOutputToken": "tpot"},
                    "variants": [
                        {"name": "decode", "target": _lws("decode"), "sliceTopology": "2x2x2",
                         "tokensPerSecond": 12000, "minReplicas": 0, "maxReplicas": 8},
                        # 4x the chips, a bigger batch per chip: cheaper per token (an estimate for the test).
                        {"name": "decode-big", "target": _lws("decode-big"), "sliceTopology": "2x4x4",
                         "tokensPerSecond": 53000, "minReplicas": 0, "maxReplicas": 2},
                    ],
                },
            },
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))


def _missing() -> SignalReading:
    """A target with no pod: nothing to read, and no error (an empty query result)."""
    return SignalReading(None, None)


def _observation(values: Mapping[str, SignalReading | float], counts: Mapping[str, tuple[int, int]]) -> Observation:
    readings = {n: v if isinstance(v, SignalReading) else SignalReading(v, T0 - 5) for n, v in values.items()}
    members = {REFS[n].key: ReplicaStatus(s, r, starting=s - r) for n, (s, r) in counts.items()}
    return Observation(REFS["decode"], members[REFS["decode"].key], readings, members=members)


def _desired(
    values: Mapping[str, SignalReading | float], counts: Mapping[str, tuple[int, int]]
) -> dict[str, ScaleDecision]:
    decisions, _ = decide(_policy(), _observation(values, counts), SETTLED, T0)
    return {d.target.name: d for d in decisions if isinstance(d, ScaleDecision)}


def test_a_variant_at_zero_groups_serves_nothing_so_the_role_can_shift_to_it() -> None:
    """Three 2x2x2 groups serve 35,000 tokens/s (need 50,000 at utilization 0.7); the 2x4x4 LWS has no group,
    so its rate and latency have no pod to come from. The role stays known, and one 2x4x4 group (32 chips)
    carries the need cheaper than five 2x2x2 (40): it is added, the small groups stay until it serves."""
    got = _desired({"prompt": 50000.0, "gen_s": 35000.0, "gen_b": _missing(), "tpot_s": 0.02, "tpot_b": _missing()},
                   {"prefill": (2, 2), "decode": (3, 3), "decode-big": (0, 0)})
    assert got["decode-big"].desired == 1, got["decode-big"].message
    assert got["decode"].desired == 3, got["decode"].message
    assert "needs 50000" in got["decode"].message


@pytest.mark.parametrize(
    ("gen_b", "counts"),
    [
        pytest.param(_missing(), {"decode": (0, 0), "decode-big": (0, 0)}, id="no-group-in-any-variant"),
        pytest.param(SignalReading(None, None, error="scrape failed"), {"decode": (3, 3), "decode-big": (0, 0)},
                     id="a-source-error-is-no-zero"),
        pytest.param(_missing(), {"decode": (3, 3), "decode-big": (1, 0)}, id="a-group-asked-for-is-no-zero"),
    ],
)
def test_unknown_stays_unknown_where_the_role_has_no_serving_variant_or_the_read_failed(
    gen_b: SignalReading, counts: dict[str, tuple[int, int]]
) -> None:
    got = _desired({"prompt": 50000.0, "gen_s": 35000.0, "gen_b": gen_b, "tpot_s": 0.02, "tpot_b": _missing()},
                   {"prefill": (2, 2), **counts})
    assert "no demand signal known" in got["decode"].message, got["decode"].message
    for name in ("decode", "decode-big"):
        assert got[name].desired == counts[name][0]
