"""``proveAtMix``: the upward probe's proof holds at the prompt lengths it was made at.

A load comfortably met proves what a replica carries at the prompts it served then; prompts grown beyond them by
more than the hysteresis band withdraw the proof (the utilization at the SLO back to at most the target), prompts
that shrink or a window without requests keep it. Driven step by step with the state the policy returns, as in
``test_slo.py`` (its ``Driver``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.core import sizing
from autoscaler.core.policies.base import Recommendation
from tests.core.test_slo import TOKENS, Driver, config, policy

MIX = {"signals": {**TOKENS["signals"], "promptLength": "plen"}}
#: Cumulative buckets (per second over the window): every prompt within 100-300 tokens (mean 182 as
#: ``sizing.lengths_from_histogram`` reads them), within 130-330 (mean 215: 1.18x, within the 0.2 band's 1/0.8),
#: within 300-500 (mean 392: 2.15x, beyond it).
SHORT = {100.0: 0.0, 300.0: 10.0, math.inf: 10.0}
A_LITTLE_LONGER = {130.0: 0.0, 330.0: 10.0, math.inf: 10.0}
LONGER = {300.0: 0.0, 500.0: 10.0, math.inf: 10.0}
#: 4 replicas at 0.75 replica-equivalents of prefill each, the TTFT comfortably met: the probe proves 0.75.
LOADED: dict[str, float] = {"waiting": 0.0, "running": 40.0, "prompt": 4 * 0.75 * 5000, "gen": 300.0, "ttft": 0.3}


def _steady(drv: Driver, seconds: float, buckets: dict[float, float] | None, **values: float) -> Recommendation:
    """``Driver.steady`` with the prompt-length buckets given at every step (None: a window without them)."""
    rec = None
    for _ in range(int(seconds / 5.0)):
        if buckets is not None:
            drv.histograms = {"plen": buckets}
        rec = drv.step(4, 4, **values)
    assert rec is not None
    return rec


def _probed(**over: Any) -> Driver:
    """A policy whose probe has raised the utilization at the SLO well above the target at short prompts."""
    drv = Driver(config(**MIX, **over))
    _steady(drv, 1200, SHORT, **LOADED)
    c = drv.learned.utilization
    assert c is not None
    assert c > 0.9, c
    return drv


def test_the_buckets_have_the_means_the_tests_rely_on() -> None:
    means = [sizing.lengths_from_histogram(b) for b in (SHORT, A_LITTLE_LONGER, LONGER)]
    assert [round(m.mean) if m else None for m in means] == [182, 215, 392]


@pytest.mark.parametrize("option", [True, False], ids=["proveAtMix", "as-before"])
def test_prompts_grown_beyond_the_band_withdraw_the_probes_proof(option: bool) -> None:
    drv = _probed(proveAtMix=option)
    assert drv.learned.proven == pytest.approx(0.75)
    rec = _steady(drv, 5, LONGER, **LOADED)
    c = drv.learned.utilization
    assert c is not None
    if option:
        assert c <= 0.8 + 1e-9, rec.message
        assert drv.learned.proven == 0.0
        assert "the probe's proof withdrawn: prompts 392 tok mean now, proven at 182" in rec.message
    else:
        assert c > 0.9
        assert drv.learned.proven == pytest.approx(0.75)
        assert "withdrawn" not in rec.message


def test_the_proof_is_made_again_at_the_prompts_now() -> None:
    """Withdrawn, the probe proves the load again at the longer prompts, and climbs from the target again."""
    drv = _probed(proveAtMix=True)
    _steady(drv, 5, LONGER, **LOADED)
    assert drv.learned.proven == 0.0
    _steady(drv, 600, LONGER, **LOADED)
    assert drv.learned.proven == pytest.approx(0.75)
    assert drv.learned.proven_mix == pytest.approx(391.52, abs=0.01)
    c = drv.learned.utilization
    assert c is not None
    assert c > 0.8


@pytest.mark.parametrize(
    "buckets",
    [
        pytest.param(A_LITTLE_LONGER, id="longer-within-the-band"),
        pytest.param({50.0: 0.0, 150.0: 10.0, math.inf: 10.0}, id="shorter"),
        pytest.param(None, id="no-buckets-this-window"),
    ],
)
def test_prompts_within_the_band_shorter_or_unknown_keep_the_proof(buckets: dict[float, float] | None) -> None:
    drv = _probed(proveAtMix=True)
    c = drv.learned.utilization
    _steady(drv, 60, buckets, **LOADED)
    assert drv.learned.proven == pytest.approx(0.75)
    after = drv.learned.utilization
    assert after is not None
    assert c is not None
    assert after >= c - 1e-9
    assert drv.learned.proven_mix == pytest.approx(182.05, abs=0.01)


def test_below_the_target_the_mix_changes_nothing() -> None:
    """A utilization the loop lowered on a risk is not the probe's: longer prompts leave it where it is."""
    drv = Driver(config(**MIX, proveAtMix=True))
    _steady(drv, 60, SHORT, **{**LOADED, "ttft": 1.9})
    c = drv.learned.utilization
    assert c is not None
    assert c < 0.8
    _steady(drv, 5, LONGER, **{**LOADED, "ttft": 1.9})
    after = drv.learned.utilization
    assert after is not None
    assert after <= c
    assert after > 0.5 * c  # lowered by the risk's own rule only, not reset


def test_prove_at_mix_needs_the_prompt_length_histogram() -> None:
    with pytest.raises(ValidationError, match="proveAtMix keeps the probe's proof"):
        policy(config(**TOKENS, proveAtMix=True))


def test_a_proof_raised_at_longer_prompts_is_held_at_those() -> None:
    """The proof is made where it is raised: a higher load proven at prompts 1.18x longer (within the band) is
    held there, so prompts 1.44x the first ones (1.22x the second: within the band of those) keep it."""
    drv = _probed(proveAtMix=True)
    higher = {**LOADED, "prompt": 4 * 0.78 * 5000}
    _steady(drv, 30, A_LITTLE_LONGER, **higher)
    assert drv.learned.proven == pytest.approx(0.78)
    assert drv.learned.proven_mix == pytest.approx(214.69, abs=0.01)
    further = {160.0: 0.0, 400.0: 10.0, math.inf: 10.0}  # mean 262 (sizing.lengths_from_histogram)
    rec = _steady(drv, 5, further, **higher)
    assert drv.learned.proven == pytest.approx(0.78), rec.message
    assert "withdrawn" not in rec.message
