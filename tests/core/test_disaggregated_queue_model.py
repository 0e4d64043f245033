"""The ``disaggregated`` type's rule 3b: a prefill shrink may land beyond the load proven comfortable, up to
the load at which a G/G/1 queue per group, calibrated on the TTFT measured, predicts the objective still
comfortably met; never above ``c``, and not at all once a reading of the window was at risk or queued."""

from __future__ import annotations

import math

import pytest

from autoscaler.core.policies import disaggregated as dg
from tests.core.test_disaggregated import T0
from tests.core.test_disaggregated_evidence import config, signals


def test_the_comfortable_load_is_where_the_calibrated_wait_reaches_the_relax_fraction() -> None:
    # TTFT at 0.25 of its objective at load 0.6 per group: ρ/(1 − ρ) = 1.5, so the wait per unit of it is 1/6 of
    # the objective; it reaches 0.5 of it at ρ/(1 − ρ) = 3, i.e. ρ = 0.75.
    model = dg.comfortable_load([dg.QueueSample(T0, 0.6, 0.25)], relax=0.5, hysteresis=0.2)
    assert model is not None
    assert model.load == pytest.approx(0.75)
    assert model.calibrated.load == 0.6


def test_the_model_is_calibrated_by_the_worst_of_the_most_loaded_readings() -> None:
    # 0.3 is more than 20 % below the highest load read (0.6): not calibrated on (its prompts' own prefill
    # dominates there); among 0.5 and 0.6 the worse (0.3 at 0.5: ρ/(1 − ρ) = 1, 0.3 per unit) is taken.
    samples = [dg.QueueSample(T0, 0.3, 0.4), dg.QueueSample(T0, 0.5, 0.3), dg.QueueSample(T0, 0.6, 0.25)]
    model = dg.comfortable_load(samples, relax=0.5, hysteresis=0.2)
    assert model is not None
    assert model.calibrated.load == 0.5
    x = 0.5 / 0.3
    assert model.load == pytest.approx(x / (1 + x))


def test_a_reading_at_risk_or_queued_in_the_window_leaves_no_model() -> None:
    ok = dg.QueueSample(T0, 0.6, 0.25)
    assert dg.comfortable_load([ok, dg.QueueSample(T0 - 10, 0.4, 0.85)], relax=0.5, hysteresis=0.2) is None
    assert dg.comfortable_load([ok, dg.QueueSample(T0 - 10, 0.0, math.inf)], relax=0.5, hysteresis=0.2) is None
    assert dg.comfortable_load([], relax=0.5, hysteresis=0.2) is None


def test_the_headroom_lands_a_shrink_at_the_comfortable_load_never_above_c() -> None:
    # Without a model: the 20 % of HYSTERESIS (lands at c·0.8).
    assert dg.shrink_headroom(0.8, None) == dg.HYSTERESIS
    below = dg.QueueModel(0.5, dg.QueueSample(T0, 0.5, 0.5))
    assert dg.shrink_headroom(0.8, below.load) == pytest.approx(dg.HYSTERESIS)  # the model never adds headroom
    between = dg.QueueModel(0.72, dg.QueueSample(T0, 0.6, 0.3))
    assert dg.shrink_headroom(0.8, between.load) == pytest.approx(1 - 0.72 / 0.8)
    above = dg.QueueModel(0.95, dg.QueueSample(T0, 0.6, 0.1))
    assert dg.shrink_headroom(0.8, above.load) == pytest.approx(0.0)  # at most c: no shrink the need undoes at once


def _three_groups(samples: tuple[dg.QueueSample, ...]) -> dg.DisaggState:
    # Three settled prefill groups of 8,000 declared tokens/s, c learned up to 0.8 (load 0.64 proven); the
    # load of the last minutes 12,000 prompt tokens/s (0.5 per group) with its need history.
    past = tuple(dg.NeedSample(T0 - 60 + 15 * i, load=12000.0, fixed=0.0) for i in range(4))
    return dg.DisaggState(
        prefill=past, since=T0 - 3600,
        prefill_learned=dg.Learned(ready=3, ready_since=T0 - 3600, utilization=0.8, proven=0.64,
                                   queue_samples=samples),
    )


def test_a_shrink_lands_beyond_the_proven_load_where_the_calibrated_queue_allows() -> None:
    # 12,000 tokens/s at c 0.8 needs 15,000; with 20 % headroom 18,750: three groups (24,000) stay. The TTFT was
    # 0.1 of its objective at load 0.5 per group: comfortable up to ρ = 0.83 > c, so the shrink lands at c and
    # two groups (16,000 ≥ 15,000) carry it.
    status = {"prefill": dg.VariantStatus(3, 3), "decode": dg.VariantStatus(1, 1)}
    calibrated = (dg.QueueSample(T0 - 30, 0.5, 0.1),)
    joint, nxt = dg.plan(config(), signals(prompt=12000.0, ttft=0.2), status, _three_groups(calibrated), T0)
    got = {c.name: c for c in joint.counts}["prefill"]
    assert got.desired == 2, got.message
    assert "with 0% headroom (the prefill queue model, calibrated at load 0.50" in got.message
    assert nxt.prefill_learned.queue_samples[-1].t == T0  # this reading calibrates too
    # Without the calibration (the rule as before): three groups stay.
    joint, _ = dg.plan(config(), signals(prompt=12000.0, ttft=0.2), status, _three_groups(()), T0)
    got = {c.name: c for c in joint.counts}["prefill"]
    assert got.desired == 3, got.message
    assert "with 20% headroom" in got.message


def test_no_shrink_beyond_the_proven_load_after_a_reading_at_risk_within_the_window() -> None:
    status = {"prefill": dg.VariantStatus(3, 3), "decode": dg.VariantStatus(1, 1)}
    risky = (dg.QueueSample(T0 - 45, 0.4, 0.9), dg.QueueSample(T0 - 30, 0.5, 0.1))
    joint, _ = dg.plan(config(), signals(prompt=12000.0, ttft=0.2), status, _three_groups(risky), T0)
    assert {c.name: c for c in joint.counts}["prefill"].desired == 3
    # Once it has left the window (scaleDownDelaySeconds 60 here), the model counts again.
    joint, _ = dg.plan(config(), signals(prompt=12000.0, ttft=0.2), status,
                       _three_groups((dg.QueueSample(T0 - 61, 0.4, 0.9), dg.QueueSample(T0 - 30, 0.5, 0.1))), T0)
    assert {c.name: c for c in joint.counts}["prefill"].desired == 2


def test_a_reading_at_risk_or_queued_is_remembered_even_when_the_count_is_not_settled() -> None:
    # A group starting (the count not settled): no calibration from it, but its TTFT at risk is remembered.
    status = {"prefill": dg.VariantStatus(4, 3, 1), "decode": dg.VariantStatus(1, 1)}
    _, nxt = dg.plan(config(), signals(prompt=12000.0, ttft=1.8), status, _three_groups(()), T0)
    assert [q.ratio for q in nxt.prefill_learned.queue_samples] == [math.inf]
    assert dg.comfortable_load(nxt.prefill_learned.queue_samples, relax=0.5, hysteresis=0.2) is None
    # So is a moment's queue on every ready group (a burst), with the TTFT comfortable.
    _, nxt = dg.plan(config(), signals(prompt=12000.0, ttft=0.2, pwait=5.0), status, _three_groups(()), T0)
    assert [q.ratio for q in nxt.prefill_learned.queue_samples] == [math.inf]


def test_decode_keeps_its_headroom() -> None:
    # Time per output token is a batch's step time, not a queue's wait: the model is prefill's only.
    status = {"prefill": dg.VariantStatus(1, 1), "decode": dg.VariantStatus(3, 3)}
    _, nxt = dg.plan(config(), signals(gen=2000.0, tpot=0.005), status, dg.DisaggState(since=T0 - 3600), T0)
    assert nxt.decode_learned.queue_samples == ()
