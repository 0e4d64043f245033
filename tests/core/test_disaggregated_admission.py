"""Rule 0b's ``waitForAdmission`` in the ``disaggregated`` type, pure: a latency at risk lowers a role's utilization
at the SLO only when every group asked for serves, not while one waits for Kueue's admission (the ``slo`` type's
rule, ``sizing.learn_utilization``'s ``admitting``). tests/sim/test_disaggregated_admission_slots.py has it in the
codelab simulation."""

from __future__ import annotations

import pytest

from autoscaler.core.model import SignalState, SignalValue
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.spec import ScalingPolicy
from tests.core.test_disaggregated import QUIET, T0, policy_doc


def _prefill_after(*, gated: int, option: bool | None, n: int = 8) -> tuple[dg.Learned, str]:
    """Prefill after ``n`` plans 15 s apart: two settled groups serve 8,000 prompt tokens/s (the model's 2 groups
    at c 0.7) with TTFT 1.8 s of 2 s; ``gated`` more groups asked for wait for Kueue's admission."""
    doc = policy_doc(budget=None)
    if option is not None:
        doc["spec"]["policy"]["waitForAdmission"] = option
    config = ScalingPolicy.model_validate(doc).spec.policy
    assert isinstance(config, dg.DisaggregatedPolicyConfig)
    status = {"prefill": dg.VariantStatus(2 + gated, 2, 0, gated), "decode": dg.VariantStatus(1, 1)}
    state = dg.DisaggState(since=T0 - 3600, prefill_learned=dg.Learned(ready=2, ready_since=T0 - 3600))
    signals = {k: SignalValue(k, SignalState.OK, v) for k, v in {**QUIET, "prompt": 8000.0, "ttft": 1.8}.items()}
    joint = None
    for i in range(n):
        joint, state = dg.plan(config, signals, status, state, T0 + 15 * i)
    assert joint is not None
    return state.prefill_learned, next(c for c in joint.counts if c.name == "prefill").message


def test_a_risk_lowers_no_utilization_while_the_group_it_asked_for_waits_for_admission() -> None:
    waiting, message = _prefill_after(gated=1, option=None)  # the default
    assert waiting.utilization == pytest.approx(0.7)
    assert waiting.held_for_admission == 1
    assert "utilization not lowered: 1 group(s) asked for wait for Kueue's admission" in message
    # The same risk with nothing waiting for admission lowers it, as before (rule 0b).
    alone, message = _prefill_after(gated=0, option=None)
    assert alone.utilization is not None
    assert alone.utilization < 0.6
    assert "not lowered" not in message
    # waitForAdmission false restores the old rule: the wait for chips lowers it too.
    old, _ = _prefill_after(gated=1, option=False)
    assert old.utilization == pytest.approx(alone.utilization)
    assert old.held_for_admission == 0


def test_a_comfortable_latency_still_raises_it_while_a_group_waits() -> None:
    doc = policy_doc(budget=None)
    config = ScalingPolicy.model_validate(doc).spec.policy
    assert isinstance(config, dg.DisaggregatedPolicyConfig)
    status = {"prefill": dg.VariantStatus(3, 2, 0, 1), "decode": dg.VariantStatus(1, 1)}
    state = dg.DisaggState(since=T0 - 3600, prefill_learned=dg.Learned(
        ready=2, ready_since=T0 - 3600, utilization=0.5))
    signals = {k: SignalValue(k, SignalState.OK, v) for k, v in {**QUIET, "prompt": 8000.0, "ttft": 0.5}.items()}
    for i in range(20):
        _, state = dg.plan(config, signals, status, state, T0 + 15 * i)
    assert state.prefill_learned.utilization is not None
    assert state.prefill_learned.utilization > 0.55
