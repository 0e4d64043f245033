"""Rule 0c of the ``disaggregated`` type, pure: decode sized by its slot occupancy (vLLM's running sequences over
the slots each variant declares), with ``o*`` from square-root staffing (Halfin-Whitt) and the load carried at
``o*`` bounded by the concavity of a batch's throughput. tests/sim/test_disaggregated_admission_slots.py has the
rule in the codelab simulation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.model import SignalState, SignalValue
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.spec import ScalingPolicy
from tests.core.test_disaggregated import T0, policy_doc


def test_the_wait_probability_is_halfin_and_whitts() -> None:
    # Halfin & Whitt (1981): staffing s = R + β√R, the probability of waiting tends to [1 + βΦ(β)/φ(β)]⁻¹;
    # β = 1 gives 0.2235 (Φ(1) = 0.8413, φ(1) = 0.2420), β = 0 gives 1 (every request waits).
    assert dg.halfin_whitt_wait(0.0) == pytest.approx(1.0)
    assert dg.halfin_whitt_wait(1.0) == pytest.approx(1.0 / (1.0 + 0.841345 / 0.241971), rel=1e-5)
    beta = dg.halfin_whitt_beta(0.01)
    assert dg.halfin_whitt_wait(beta) == pytest.approx(0.01, rel=1e-6)
    assert 2.3 < beta < 2.45
    # o* = 1 − β/√slots: more slots run fuller at the same share waiting.
    assert dg.slot_target(256, 0.01) == pytest.approx(1 - beta / 16)
    assert dg.slot_target(1024, 0.01) == pytest.approx(1 - beta / 32)
    assert dg.slot_target(256, 0.01) < dg.slot_target(1024, 0.01) < 1
    assert dg.slot_target(1, 0.01) == 0.0  # one slot: no occupancy keeps 1 % from waiting


@given(
    base=st.floats(0.5, 50.0), per_seq=st.floats(0.0, 0.2), slots=st.integers(8, 2048),
    prior=st.floats(0.3, 1.0), occupancy=st.floats(0.01, 0.99), below=st.floats(0.5, 1.0),
    wait=st.floats(0.001, 0.2),
)
def test_the_bound_never_exceeds_what_a_group_carries_at_the_target_occupancy(
    base: float, per_seq: float, slots: int, prior: float, occupancy: float, below: float, wait: float
) -> None:
    # Any step of a fixed time plus a time per sequence, T(B) = B/(base + per_seq·B); the declared capacity
    # at most the full batch's (``prior``); the load measured at or below the curve (``below``: a batch that
    # varies over the rate window serves less than its mean batch would). The bound is at most what the group
    # carries at o*, so sizing decode at it keeps the mean occupancy at most o*.
    def served(o: float) -> float:
        b = o * slots
        return b / (base + per_seq * b)

    declared = prior * served(1.0)
    target = dg.slot_target(slots, wait)
    load = below * served(occupancy) / declared
    assert dg.slot_bound(load, occupancy, target) <= served(target) / declared + 1e-9


def test_the_bound_reads_the_chord_to_the_full_batch() -> None:
    # Load 0.5 of the capacity at occupancy 0.2, o* 0.85: at least 0.5 + 0.5·(0.65/0.8) = 0.906.
    assert dg.slot_bound(0.5, 0.2, 0.85) == pytest.approx(0.5 + 0.5 * 0.65 / 0.8)
    # Nothing measured yet: the chord from the origin, o* itself; at or above o*: not below o*.
    assert dg.slot_bound(0.0, 0.0, 0.85) == pytest.approx(0.85)
    assert dg.slot_bound(0.99, 0.95, 0.85) == pytest.approx(0.99 * 0.85 / 0.95)  # the chord from the origin
    assert dg.slot_bound(0.3, 0.95, 0.85) == pytest.approx(0.85)
    assert dg.slot_bound(1.4, 0.5, 0.85) == 1.0  # never above the learned capacity


def _doc(**decode: Any) -> dict[str, Any]:
    doc = policy_doc(budget=None)
    doc["spec"]["signals"].append({"name": "running", "query": "r"})
    doc["spec"]["policy"]["decode"]["signals"]["running"] = "running"
    doc["spec"]["policy"]["decode"]["slotOccupancy"] = True
    doc["spec"]["policy"]["decode"]["variants"][0]["slots"] = 256
    doc["spec"]["policy"]["decode"]["variants"][0].update(decode)
    return doc


def _config(doc: dict[str, Any]) -> dg.DisaggregatedPolicyConfig:
    config = ScalingPolicy.model_validate(doc).spec.policy
    assert isinstance(config, dg.DisaggregatedPolicyConfig)
    return config


def _plan(config: dg.DisaggregatedPolicyConfig, values: Mapping[str, float], decode: int, n: int, *,
          wait: float | None = 0.01, state: dg.DisaggState | None = None,
          start: float = T0) -> tuple[dg.JointPlan, dg.DisaggState]:
    """``n`` plans 15 s apart on settled groups (1 prefill, ``decode`` decode), the token rates over 60 s."""
    status = {"prefill": dg.VariantStatus(1, 1), "decode": dg.VariantStatus(decode, decode)}
    state = state or dg.DisaggState(
        since=T0 - 3600, prefill_learned=dg.Learned(ready=1, ready_since=T0 - 3600),
        decode_learned=dg.Learned(ready=decode, ready_since=T0 - 3600))
    joint = None
    for i in range(n):
        signals = {k: SignalValue(k, SignalState.OK, v) for k, v in values.items()}
        joint, state = dg.plan(config, signals, status, state, start + 15 * i, rate_window_s=60.0,
                               slot_wait_fraction=wait)
    assert joint is not None
    return joint, state


QUIET = {"prompt": 4000.0, "pwait": 0.0, "ttft": 0.5, "gen": 1000.0, "kv": 0.05, "tpot": 0.02}


def test_decodes_utilization_rises_to_the_slot_bound() -> None:
    # Two decode groups (2,000 tokens/s and 256 slots each) serve 2,000 tokens/s (load 0.5) with 100 of 512
    # slots running (occupancy 0.2); o* = 1 − 2.37/16 = 0.85 at 1 % waiting: the load at o* is at least 0.906,
    # and c, from targetUtilization 0.7, rises toward it at the upward probe's pace (rule 0b's 300 s).
    config = _config(_doc())
    values = {**QUIET, "gen": 2000.0, "running": 100.0}
    _, state = _plan(config, values, 2, 80)
    got = state.decode_learned
    assert got.slots is not None
    assert got.slots.occupancy == pytest.approx(100 / 512)
    assert got.slots.bound == pytest.approx(dg.slot_bound(0.5, 100 / 512, dg.slot_target(256, 0.01)))
    assert got.utilization is not None
    assert 0.85 < got.utilization <= got.slots.bound
    # No share of waiting known (no TTFT quantile), or the rule off (slotOccupancy false): c stays at 0.7.
    _, off = _plan(config, values, 2, 80, wait=None)
    assert off.decode_learned.utilization == pytest.approx(0.7)
    assert off.decode_learned.slots is None
    doc = _doc()
    doc["spec"]["policy"]["decode"]["slotOccupancy"] = False
    _, off = _plan(_config(doc), values, 2, 80)
    assert off.decode_learned.utilization == pytest.approx(0.7)


def test_no_rise_while_the_latency_is_at_risk() -> None:
    # The same groups with the time per output token at 0.9 of its objective: the slot bound says nothing of
    # the step's time, so c does not rise on it (rule 0b's own drop applies).
    config = _config(_doc())
    _, state = _plan(config, {**QUIET, "gen": 2000.0, "running": 100.0, "tpot": 0.045}, 2, 40)
    assert state.decode_learned.utilization is not None
    assert state.decode_learned.utilization <= 0.7 + 1e-9


def test_a_shrink_lands_at_the_slot_bound_not_below_it() -> None:
    # Four decode groups, 8,000 tokens/s declared, carry 3,400 tokens/s (load 0.425) at occupancy 0.1: the
    # slot bound is 0.425 + 0.575·(0.85 − 0.1)/0.9 ≈ 0.90 and c rises to about it. The shrink lands at c, where
    # the need grows again (3,400/0.9 ≈ 3,800: 2 groups), not at c·0.8 (4,700: 3 groups); without the rule, at
    # c 0.7 with 20 % headroom, 6,100: the 4 groups stay.
    config = _config(_doc())
    values = {**QUIET, "gen": 3400.0, "running": 102.4}
    joint, state = _plan(config, values, 4, 120)
    decode = next(c for c in joint.counts if c.name == "decode")
    assert state.decode_learned.utilization is not None
    assert 3400 / state.decode_learned.utilization < 4000 < 3400 / state.decode_learned.utilization / 0.8
    assert decode.desired == 2, decode.message
    assert "with 0% headroom (the slot bound: load 0.91 per group at slot occupancy at most 0.85" in decode.message
    assert "learned from the latency headroom and the slot bound" in decode.message
    joint, _ = _plan(config, values, 4, 120, wait=None)
    decode = next(c for c in joint.counts if c.name == "decode")
    assert decode.desired == 4, decode.message


def test_an_occupancy_above_the_target_grows_decode() -> None:
    # One decode group at 1,300 tokens/s (load 0.65: below c 0.7, no token need to grow) with 240 of its 256
    # slots running: occupancy 0.94 > o* 0.85. Its slots need 0.94/0.85 of its capacity: a second group.
    config = _config(_doc())
    values = {**QUIET, "gen": 1300.0, "running": 240.0}
    joint, _ = _plan(config, values, 1, 5)
    decode = next(c for c in joint.counts if c.name == "decode")
    assert decode.desired == 2, decode.message
    assert "slot occupancy 0.94" in decode.message
    joint, _ = _plan(config, values, 1, 5, wait=None)
    assert next(c for c in joint.counts if c.name == "decode").desired == 1


def test_slot_occupancy_needs_running_every_decode_variants_slots_and_the_generated_tokens() -> None:
    doc = _doc()
    del doc["spec"]["policy"]["decode"]["signals"]["running"]
    with pytest.raises(Exception, match=r"needs signals\.running"):
        ScalingPolicy.model_validate(doc)
    doc = _doc()
    del doc["spec"]["policy"]["decode"]["variants"][0]["slots"]
    with pytest.raises(Exception, match="declares none") as err:
        ScalingPolicy.model_validate(doc)
    assert "slots" in str(err.value)
    doc = _doc()
    del doc["spec"]["policy"]["decode"]["signals"]["generationTokens"]
    with pytest.raises(Exception, match="needs generationTokens"):
        ScalingPolicy.model_validate(doc)
