"""The ``disaggregated`` type's rule 1d (a latency quantile is evidence of the ready count only once its window
holds no time before the count rose) and rule 3's need history sized at the utilization and capacity learned
now (``NeedSample``)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.engine import compile_policy, quantile_window
from autoscaler.core.model import PolicyState, SignalState, SignalValue
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.spec import ScalingPolicy
from tests.core.test_disaggregated import QUIET, T0, learned, policy_doc, run_evaluations, scales


def windowed_doc(window: float = 60.0) -> dict[str, Any]:
    """The test policy with its TTFT read as a p99 over ``window`` seconds (the example's form)."""
    doc = policy_doc(budget=None)
    doc["spec"]["signals"][2] = {"name": "ttft", "preset": "vllm.ttft", "pool": "prefill",
                                 "quantile": {"q": 0.99, "windowSeconds": window}}
    return doc


def windowed(window: float = 60.0) -> Any:
    return compile_policy(ScalingPolicy.model_validate(windowed_doc(window)))


#: Three prefill groups, the third of which has just become ready (two were ready, one starting, for an hour).
ROSE = PolicyState(algorithm=dg.DisaggState(
    since=T0 - 3600, prefill_learned=dg.Learned(ready=2, ready_since=T0 - 3600, utilization=0.7)))
#: TTFT at risk (1.8 s of 2 s) on a light token load (4,000 tokens/s: one group of 8,000 at 0.7 carries it).
AT_RISK = {**QUIET, "ttft": 1.8}


def test_a_quantile_whose_window_began_before_the_ready_groups_rose_adds_no_group_and_lowers_no_utilization() -> None:
    # conv ×10 min 15-45 of the codelab simulation: the third prefill group became ready at 690 s and the 60 s
    # TTFT p99, still holding the minute on two groups, asked for a fourth at 705 s and cut c from 0.64 to 0.53.
    counts = {"prefill": (3, 3), "decode": (1, 1)}
    decisions, state = run_evaluations(AT_RISK, counts, 4, ROSE, T0, windowed())  # T0 .. T0 + 45
    got = scales(decisions)["prefill"]
    assert got.desired == 3, got.message
    assert "evidence of fewer groups, no group added on it" in got.message
    assert learned(state, "prefill").utilization == pytest.approx(0.7)  # c not lowered on it
    assert learned(state, "prefill").rose_at == T0
    # Once the window holds only the three groups (60 s after the rise) the same quantile adds a group.
    decisions, state = run_evaluations(AT_RISK, counts, 1, state, T0 + 60, windowed())
    got = scales(decisions)["prefill"]
    assert got.desired == 4, got.message
    assert "TTFT at risk (0.8 of its objective): at least one more group" in got.message


def test_a_stale_quantile_still_forbids_a_shrink() -> None:
    counts = {"prefill": (3, 3), "decode": (1, 1)}
    decisions, _ = run_evaluations(AT_RISK, counts, 1, ROSE, T0, windowed())
    got = scales(decisions)["prefill"]
    assert got.desired == 3
    assert "no shrink while latency is at risk" in got.message


def test_a_fall_of_the_ready_count_leaves_the_quantile_evidence() -> None:
    # Measured on more groups than serve now: at risk then is at risk now, a group is added at once.
    fell = PolicyState(algorithm=dg.DisaggState(
        since=T0 - 3600, prefill_learned=dg.Learned(ready=3, ready_since=T0 - 3600, utilization=0.7)))
    decisions, state = run_evaluations(AT_RISK, {"prefill": (2, 2), "decode": (1, 1)}, 1, fell, T0, windowed())
    assert scales(decisions)["prefill"].desired == 3
    assert learned(state, "prefill").rose_at is None


def test_without_a_known_quantile_window_every_quantile_counts_at_once() -> None:
    # The TTFT read by a query (no quantile window the policy can see): the rule has nothing to go by.
    decisions, _ = run_evaluations(AT_RISK, {"prefill": (3, 3), "decode": (1, 1)}, 1, ROSE, T0)
    assert scales(decisions)["prefill"].desired == 4


def test_the_quantile_window_of_an_expression_is_the_longest_it_names() -> None:
    doc = windowed_doc(60.0)
    doc["spec"]["signals"] += [
        {"name": "ttft_long", "preset": "vllm.ttft", "pool": "prefill", "quantile": {"q": 0.99, "windowSeconds": 120}},
        {"name": "ttft_max", "expr": "max(ttft, ttft_long)"},
    ]
    spec = ScalingPolicy.model_validate(doc).spec
    assert quantile_window(spec, "ttft") == 60.0
    assert quantile_window(spec, "ttft_max") == 120.0
    assert quantile_window(spec, "prompt") is None


# ----------------------------------------------------------------------- rule 3: the need history, sized now


def config() -> dg.DisaggregatedPolicyConfig:
    c = ScalingPolicy.model_validate(policy_doc(budget=None)).spec.policy
    assert isinstance(c, dg.DisaggregatedPolicyConfig)
    return c


def signals(**values: float) -> dict[str, SignalValue]:
    return {k: SignalValue(k, SignalState.OK, v) for k, v in {**QUIET, **values}.items()}


def test_a_past_need_is_sized_at_the_utilization_learned_now() -> None:
    # Three settled prefill groups (8,000 declared each). 300 s ago they served 10,000 prompt tokens/s while c
    # was 0.7 (a need of 14,286; with the 20 % headroom 17,857: three groups). c has since been learned up to
    # 0.875 (a load of 0.7 per group proven comfortable), and 9,000/s arrive now. Sized at the c learned now the
    # past load needs 11,429, with the headroom 14,286: two groups carry it. Sized at the c it was read with,
    # the need history would keep three for a utilization the policy no longer plans at.
    status = {"prefill": dg.VariantStatus(3, 3), "decode": dg.VariantStatus(1, 1)}
    past = dg.NeedSample(T0 - 30, load=10000.0, fixed=0.0)
    state = dg.DisaggState(
        prefill=(past,), since=T0 - 3600,
        prefill_learned=dg.Learned(ready=3, ready_since=T0 - 3600, utilization=0.875, proven=0.7),
    )
    joint, nxt = dg.plan(config(), signals(prompt=9000.0), status, state, T0)
    got = {c.name: c for c in joint.counts}["prefill"]
    assert got.desired == 2, got.message
    assert "peak 11429 tokens/s over 60s" in got.message
    assert nxt.prefill[-1] == dg.NeedSample(T0, load=9000.0, fixed=0.0)


def test_a_past_latency_bump_is_remembered_as_capacity() -> None:
    # The latency bump is capacity already (the ready groups plus one): no utilization learned since resizes it.
    sample = dg.NeedSample(T0, load=4000.0, fixed=24000.0)
    assert sample.need(0.9, 1.0) == sample.need(0.5, 1.0) == 24000.0
    assert dg.NeedSample(T0, load=12000.0, fixed=0.0).need(0.8, 1.5) == pytest.approx(10000.0)
    counts = {"prefill": (2, 2), "decode": (1, 1)}
    _, state = run_evaluations(AT_RISK, counts, 1)
    assert isinstance(state.algorithm, dg.DisaggState)
    bumped = state.algorithm.prefill[-1]
    assert bumped.fixed == 24000.0  # 2 ready × 8,000 + one more group
    assert bumped.load == 4000.0
