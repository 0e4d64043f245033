"""The pieces ``slo`` and ``disaggregated`` share (``core.sizing``), checked on their own numbers.

The ``slo`` type's behaviour through them is covered by ``test_slo.py``; these pin each rule's edges so a
type that calls them (``disaggregated``) gets the same rule.
"""

from __future__ import annotations

import math

import pytest

from autoscaler.core import sizing


def _learn(c: float = 0.8, proven: float = 0.0, **kw: object) -> sizing.Headroom:
    args: dict[str, object] = {
        "target": 0.8, "ratio": None, "latency_unknown": False, "demand_zero": False, "load": 2.0,
        "served_load": 2.0, "ready": 3, "starting": 0, "settled": True, "near_short": False, "hysteresis": 0.2,
        "dt": 30.0,
    }
    args.update(kw)
    return sizing.learn_utilization(c, proven, **args)  # type: ignore[arg-type]


def test_at_risk_c_drops_in_proportion_to_the_excess_and_the_time() -> None:
    got = _learn(ratio=1.3, dt=30.0)
    assert got.utilization == pytest.approx(0.8 * math.exp(-(30.0 / sizing.DROP_TAU_S) * 0.5))
    # Twice the time, twice the step (per second, not per evaluation).
    assert _learn(ratio=1.3, dt=60.0).utilization == pytest.approx(0.8 * math.exp(-2 * 0.5))


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"starting": 1}, id="something-starting"),
        pytest.param({"load": 2.5, "ready": 3, "c": 0.8}, id="the-model-already-asks-for-more"),
    ],
)
def test_a_risk_the_model_explains_or_capacity_on_its_way_does_not_lower_c(kw: dict[str, object]) -> None:
    c = kw.pop("c", 0.8)
    assert _learn(c=c, ratio=1.3, **kw).utilization == c  # type: ignore[arg-type]


def test_comfortably_met_c_recovers_and_probes_up_to_what_was_proven() -> None:
    low = _learn(c=0.4, ratio=0.3, load=1.2, ready=3, dt=300.0)
    assert low.utilization == pytest.approx(0.8 - 0.4 * math.exp(-1.0))
    assert low.proven == pytest.approx(0.4)
    # Running at 0.76 per replica, comfortably met: c may rise toward 0.76 / 0.8 = 0.95, never above 1.
    up = _learn(c=0.8, ratio=0.3, load=2.28, ready=3, dt=300.0)
    assert up.proven == pytest.approx(0.76)
    assert 0.8 < up.utilization < 0.95
    assert _learn(c=0.99, proven=0.95, ratio=0.3, load=2.85, ready=3, dt=1e6).utilization == 1.0


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"near_short": True}, id="near-a-short-count"),
        pytest.param({"settled": False}, id="count-not-settled"),
        pytest.param({"ratio": None, "demand_zero": True}, id="no-latency-measured"),
    ],
)
def test_no_upward_probe_without_evidence(kw: dict[str, object]) -> None:
    args: dict[str, object] = {"ratio": 0.3, "load": 2.28, "ready": 3, "dt": 300.0}
    args.update(kw)
    got = _learn(c=0.8, **args)  # type: ignore[arg-type]
    assert got.utilization == 0.8
    assert got.proven == 0.0


def test_an_unknown_quantile_neither_recovers_nor_probes() -> None:
    assert _learn(c=0.4, ratio=0.3, latency_unknown=True, dt=300.0).utilization == 0.4


def test_a_risk_withdraws_what_was_proven_and_c_stays_within_its_bounds() -> None:
    got = _learn(c=0.8, proven=0.9, ratio=1.3, load=2.4, ready=3)
    assert got.proven == pytest.approx(0.8 * 0.8)
    assert _learn(c=0.21, ratio=5.0, load=0.5, served_load=0.5, dt=1e6).utilization == sizing.MIN_UTILIZATION


def test_the_trend_adds_ahead_of_a_steady_ramp_and_nothing_on_a_flat_load() -> None:
    ramp = [(float(t), 1.0 + t / 60.0) for t in range(0, 121, 5)]
    got = sizing.trend_and_burst(ramp, 120.0, 3.0, 60.0, 2.0, None, reach=120.0)
    assert 3.0 < got.value <= 6.0
    assert got.further > got.value
    assert "trend" in got.text
    flat = [(float(t), 2.0) for t in range(0, 121, 5)]
    still = sizing.trend_and_burst(flat, 120.0, 2.0, 60.0, 2.0, None)
    assert (still.value, still.text, still.burst_at, still.further) == (2.0, "", None, 2.0)


def test_a_burst_is_flagged_and_its_highest_point_is_the_floor() -> None:
    hist = [(float(t), 1.0) for t in range(0, 100, 5)] + [(100.0, 3.0), (105.0, 4.0), (110.0, 3.5)]
    got = sizing.trend_and_burst(hist, 110.0, 3.5, 60.0, 2.0, None)
    assert got.burst_at == 110.0
    assert got.value >= 4.0


def test_the_largest_rise_is_within_one_cold_start() -> None:
    hist = [(0.0, 1.0), (30.0, 3.0), (100.0, 0.5), (300.0, 4.0)]
    assert sizing.largest_rise(hist, 60.0) == 2.0
    assert sizing.largest_rise(hist, 250.0) == 3.5
    assert sizing.largest_rise([], 60.0) == 0.0
