"""The ``disaggregated`` type's rule 1c: prefill sized on the prompt tokens *arriving* at the router."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.engine import compile_policy, decide, signal_window
from autoscaler.core.model import PolicyState, Reason
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.spec import ScalingPolicy
from tests.core.test_disaggregated import QUIET, SETTLED, T0, observation, policy_doc, scales


def arrivals_doc(window: float = 15.0, *, expr: bool = False) -> dict[str, Any]:
    doc = policy_doc(budget=None)
    spec = doc["spec"]
    spec["policy"]["prefill"]["signals"]["arrivingPromptTokens"] = "arriving"
    if expr:
        # As the example reads it: bytes received over a short window × tokens per byte over a long one.
        spec["signals"] += [
            {"name": "bytes", "preset": "router.request_bytes", "rate": {"windowSeconds": window}},
            {"name": "bytes_long", "preset": "router.request_bytes", "rate": {"windowSeconds": 600}},
            {"name": "answered", "preset": "router.input_tokens", "rate": {"windowSeconds": 600}},
            {"name": "arriving", "expr": "bytes * answered / bytes_long"},
        ]
    else:
        spec["signals"].append(
            {"name": "arriving", "preset": "router.request_bytes", "rate": {"windowSeconds": window}})
    return doc


def compiled(**kw: Any) -> Any:
    return compile_policy(ScalingPolicy.model_validate(arrivals_doc(**kw)))


def test_the_need_of_what_arrives_within_a_window_served_within_it_plus_the_objective() -> None:
    # 30,000 tokens/s over 15 s = 450,000 tokens, served within 15 + 2 s, at 0.5 utilization of the declared.
    assert dg.arrival_need(30000.0, window_s=15.0, objective_s=2.0, utilization=0.5, kappa=1.0) == pytest.approx(
        30000.0 * 15 / 17 / 0.5)
    # A learned capacity twice the declared needs half the declared tokens/s.
    assert dg.arrival_need(30000.0, window_s=15.0, objective_s=2.0, utilization=0.5, kappa=2.0) == pytest.approx(
        30000.0 * 15 / 17 / 0.5 / 2)


def test_a_burst_the_served_counter_cannot_show_grows_prefill() -> None:
    """One prefill group (8,000 tokens/s declared) serves 4,000 tokens/s while 20,000/s arrive: the served rate
    alone keeps one group; the arrivals need 20,000 × 15/17 / 0.7 = 25,210 tokens/s: four groups."""
    values = {**QUIET, "prompt": 4000.0, "arriving": 20000.0}
    counts = {"prefill": (1, 1), "decode": (1, 1)}
    decisions, _ = decide(compiled(), observation(values, counts), SETTLED, T0)
    got = scales(decisions)["prefill"]
    assert (got.desired, got.reason) == (4, Reason.SCALE_UP), got.message
    assert "20000 prompt tokens/s arriving over 15s, served within 15s + the 2s TTFT objective" in got.message
    # Without the rule (the same signals, no arrivingPromptTokens): one group carries the served rate.
    plain = compile_policy(ScalingPolicy.model_validate(policy_doc(budget=None)))
    decisions, _ = decide(plain, observation(values, counts), SETTLED, T0)
    assert scales(decisions)["prefill"].desired == 1


def test_a_burst_that_arrived_within_the_delay_window_holds_the_groups_it_needed() -> None:
    pol = compiled()
    counts = {"prefill": (4, 4), "decode": (1, 1)}
    _, state = decide(pol, observation({**QUIET, "arriving": 20000.0}, counts), SETTLED, T0)
    calm = {**QUIET, "arriving": 4000.0}
    decisions, state = decide(pol, observation(calm, counts), state, T0 + 30)
    assert scales(decisions)["prefill"].desired == 4  # the burst is 30 s old: inside the 60 s window
    decisions, _ = decide(pol, observation(calm, counts), state, T0 + 61)
    assert scales(decisions)["prefill"].desired < 4


def test_arrivals_unknown_never_shrink_prefill() -> None:
    counts = {"prefill": (3, 3), "decode": (1, 1)}
    decisions, _ = decide(compiled(), observation({**QUIET, "arriving": None}, counts), SETTLED, T0)
    got = scales(decisions)["prefill"]
    assert got.desired == 3
    assert "unknown: arriving" in got.message


@pytest.mark.parametrize(("expr", "window", "want"), [
    pytest.param(False, 15.0, 15.0, id="a-rate"),
    pytest.param(True, 10.0, 10.0, id="an-expr-takes-its-shortest-window"),
])
def test_the_window_the_arrivals_are_read_over(expr: bool, window: float, want: float) -> None:
    spec = ScalingPolicy.model_validate(arrivals_doc(window, expr=expr)).spec
    assert signal_window(spec, "arriving") == want
    assert signal_window(spec, "kv") is None  # a gauge averages over nothing


def test_the_example_reads_the_arrivals_from_the_router() -> None:
    from autoscaler.policyfile.loader import load_file  # noqa: PLC0415

    (pol,) = load_file(__import__("pathlib").Path(__file__).parents[2] / "policies" / "tpu7x-disaggregated.yaml")
    config = pol.spec.policy
    assert isinstance(config, dg.DisaggregatedPolicyConfig)
    name = config.prefill.signals.arriving_prompt_tokens
    assert name is not None
    assert signal_window(pol.spec, name) == pol.spec.evaluation_period_seconds


def test_no_arrivals_no_change_from_the_plain_policy() -> None:
    # Arrivals lower than the served rate's need add nothing: the decision is the plain policy's.
    values = {**QUIET, "prompt": 20000.0, "arriving": 1000.0}
    counts = {"prefill": (1, 1), "decode": (1, 1)}
    with_rule, _ = decide(compiled(), observation(values, counts), PolicyState(), T0)
    plain = compile_policy(ScalingPolicy.model_validate(policy_doc(budget=None)))
    without, _ = decide(plain, observation(values, counts), PolicyState(), T0)
    assert scales(with_rule)["prefill"].desired == scales(without)["prefill"].desired == 4
