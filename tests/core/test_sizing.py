"""The pieces ``slo`` and ``disaggregated`` share (``core.sizing``), checked on their own numbers.

The ``slo`` type's behaviour through them is covered by ``test_slo.py``; these pin each rule's edges so a
type that calls them (``disaggregated``) gets the same rule.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random

import pytest

from autoscaler.core import counters, sizing
from autoscaler.core.policies import slo


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
        pytest.param({"admitting": 1}, id="something-waiting-for-admission"),
        pytest.param({"load": 2.5, "ready": 3, "c": 0.8}, id="the-model-already-asks-for-more"),
    ],
)
def test_a_risk_the_model_explains_or_capacity_on_its_way_does_not_lower_c(kw: dict[str, object]) -> None:
    c = kw.pop("c", 0.8)
    assert _learn(c=c, ratio=1.3, **kw).utilization == c  # type: ignore[arg-type]


def test_only_a_drop_the_wait_for_admission_held_is_said_to_be_held_by_it() -> None:
    # The message's "not lowered: … wait for Kueue's admission" comes from here: only where c would have fallen.
    assert _learn(ratio=1.3, admitting=1).held_for_admission
    assert not _learn(ratio=1.3).held_for_admission  # nothing waits: c fell
    assert not _learn(ratio=1.3, admitting=1, starting=1).held_for_admission  # a replica starting holds it anyway
    assert not _learn(c=0.8, ratio=1.3, admitting=1, load=2.5).held_for_admission  # the model asks for more anyway
    assert not _learn(ratio=0.3, admitting=1).held_for_admission  # not at risk


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


def test_a_rise_is_measured_from_the_level_it_starts_at() -> None:
    """With ``from_level`` only climbs that start at a load at least that count: a climb out of a lower trough has
    partly happened already (up to the load now), and an occupancy gauge filling from empty starts from nothing."""
    # Servers filling from empty (0 → 0.9), a dip to 0.3 and a climb to 0.5, then 0.6 rising to 1.0.
    hist = [(0.0, 0.0), (30.0, 0.9), (100.0, 0.3), (130.0, 0.5), (200.0, 0.6), (240.0, 1.0)]
    assert sizing.largest_rise(hist, 60.0) == pytest.approx(0.9)
    assert sizing.largest_rise(hist, 60.0, from_level=0.6) == pytest.approx(0.4)  # 0.6 → 1.0 only
    assert sizing.largest_rise(hist, 60.0, from_level=0.3) == pytest.approx(0.4)  # 0.3 → 0.5 is smaller
    assert sizing.largest_rise(hist, 60.0, from_level=0.61) == 0.0  # nothing climbed from 0.61 or more
    assert sizing.largest_rise(hist, 60.0, from_level=None) == sizing.largest_rise(hist, 60.0)


def test_a_rise_counts_only_where_it_may_end() -> None:
    """``ends``: only rises ending at a marked sample count (the ``slo`` type splits them by the count that absorbed
    them); a start may be any sample."""
    hist = [(0.0, 0.2), (30.0, 0.9), (100.0, 0.3), (130.0, 0.5)]
    assert sizing.largest_rise(hist, 60.0) == pytest.approx(0.7)
    assert sizing.largest_rise(hist, 60.0, ends=[True, False, True, True]) == pytest.approx(0.2)  # 0.3 → 0.5
    assert sizing.largest_rise(hist, 60.0, ends=[False, True, False, False]) == pytest.approx(0.7)
    assert sizing.largest_rise(hist, 60.0, ends=[False] * 4) == 0.0
    assert sizing.largest_rise(hist, 60.0, ends=[True] * 4) == sizing.largest_rise(hist, 60.0)


@pytest.mark.parametrize(
    ("held", "ready", "expected"),
    [
        pytest.param([True] * 9, [1] * 9, [1, 1, 1, 1, 1, 1, 1, 1, None], id="held-throughout"),
        # A replica ready from 30 s took part in absorbing what came after it, not what came before.
        pytest.param([True] * 9, [1, 1, 1, 2, 2, 2, 2, 2, 2], [1, 1, 1, 2, 2, 2, 2, 2, None],
                     id="the-highest-ready-up-to-the-peak"),
        pytest.param([True] * 9, [2, 2, 2, 1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 1, 1, 1, None],
                     id="a-replica-released-after-it-took-part"),
        # A miss at 40 s: no rise ending from the window (10 s) before it to the cold start (20 s) after it was
        # absorbed; those that end earlier or later were.
        pytest.param([True, True, True, True, False, True, True, True, True], [1] * 9,
                     [1, 1, 1, None, None, None, None, 1, None], id="a-miss-absorbs-nothing-around-it"),
    ],
)
def test_a_rise_is_absorbed_by_the_count_that_held_the_slo_through_it(
    held: list[bool], ready: list[int], expected: list[int | None]
) -> None:
    """``absorbing_counts``: a rise ending at a sample (within ``before`` = 20 s) was absorbed by the highest ready
    count up to it when every evaluation from 20 s before it to the quantile's window (``after`` = 10 s) after it
    held the SLO (the history's first samples: from where it starts); the last sample is not yet observed for its
    window. Samples every 10 s."""
    times = [10.0 * i for i in range(9)]
    assert sizing.absorbing_counts(times, held, ready, before=20.0, after=10.0) == expected


def test_a_gap_longer_than_the_quantile_window_is_no_evidence() -> None:
    """Unknown evaluations leave no sample; a gap within the quantile's window is covered by the window after it
    (the requests of the gap are observed there), a longer one is not."""
    times = [0.0, 10.0, 20.0, 45.0, 55.0, 65.0, 75.0, 85.0]
    got = sizing.absorbing_counts(times, [True] * 8, [1] * 8, before=20.0, after=10.0)
    assert got == [1, 1, None, None, None, None, 1, None]
    covered = sizing.absorbing_counts(times, [True] * 8, [1] * 8, before=20.0, after=30.0)
    assert covered == [1, 1, 1, 1, 1, None, None, None]


def test_a_rise_from_below_the_level_counts_for_its_part_above_it() -> None:
    """``from_below``: of a climb out of a trough below the load now, the part above the load now has not happened;
    it counts for its peak less the load now, not for nothing. A climb that ended at the load now adds nothing."""
    # A burst out of silence (0 → 3.0 within 30 s), a lull, and the first sample of the next burst (0.8).
    burst = [(0.0, 0.0), (30.0, 3.0), (60.0, 0.0), (300.0, 0.0), (305.0, 0.8)]
    assert sizing.largest_rise(burst, 245.0, from_level=0.8) == 0.0  # nothing climbed from 0.8 or more
    assert sizing.largest_rise(burst, 245.0, from_level=0.8, from_below=True) == pytest.approx(2.2)  # 3.0 − 0.8
    assert sizing.largest_rise(burst, 245.0, from_level=0.0, from_below=True) == pytest.approx(3.0)
    # Without a level it is the plain rise.
    assert sizing.largest_rise(burst, 245.0, from_below=True) == sizing.largest_rise(burst, 245.0)
    # Servers filling from empty to the load now, and staying there: the peak is the load now, nothing to come.
    fill = [(0.0, 0.0), (60.0, 0.5), (120.0, 0.9), (300.0, 0.9)]
    assert sizing.largest_rise(fill, 245.0, from_level=0.9, from_below=True) == 0.0
    # A rise that starts at or above the level counts whole, as with from_level alone.
    hist = [(0.0, 0.0), (30.0, 0.9), (100.0, 0.3), (130.0, 0.5), (200.0, 0.6), (240.0, 1.0)]
    assert sizing.largest_rise(hist, 60.0, from_level=0.6, from_below=True) == pytest.approx(0.4)
    assert sizing.largest_rise(hist, 60.0, from_level=0.2, from_below=True) == pytest.approx(0.7)  # 0.2 → 0.9


def test_a_trend_is_not_extrapolated_beyond_the_span_of_the_history() -> None:
    # A minute of a steady climb (1.0 → 1.1), a 240 s cold start: the line's lower bound is extrapolated 60 s, not
    # 240 s (1.2, not 1.5), and so is ``further``; over a history longer than the horizon it reaches the horizon.
    short = [(float(t), 1.0 + t / 600.0) for t in range(0, 61, 5)]
    got = sizing.trend_and_burst(short, 60.0, 1.1, 240.0, 2.0, None, reach=480.0)
    assert got.value == pytest.approx(1.2)
    assert got.further == pytest.approx(1.2)
    assert "over the 60s observed" in got.text
    long = [(float(t), 1.0 + t / 600.0) for t in range(0, 481, 5)]
    got = sizing.trend_and_burst(long, 480.0, 1.8, 240.0, 2.0, None, reach=300.0)
    assert got.value == pytest.approx(1.8 + 240.0 / 600.0)
    assert got.further == pytest.approx(1.8 + 300.0 / 600.0)
    assert "observed" not in got.text
    # The history's span counts, not the fitted samples': a ramp whose last six minutes had a queue on every
    # replica (left out of the fit) was observed throughout, and is extrapolated over the whole horizon.
    calm = [(t, v) for t, v in long if t <= 120.0]
    got = sizing.trend_and_burst(long, 480.0, 1.8, 240.0, 2.0, None, trend_samples=calm)
    assert "observed" not in got.text
    assert got.value == pytest.approx(1.8 + 240.0 / 600.0)


# --- the prefill queue per replica (M/G/1) -------------------------------------------------------------------

def _cumulative(per_bucket: dict[float, float]) -> dict[float, float]:
    out, total = {}, 0.0
    for bound in sorted(per_bucket):
        total += per_bucket[bound]
        out[bound] = total
    return out


def test_the_lengths_moments_come_from_the_buckets() -> None:
    got = sizing.lengths_from_histogram(_cumulative({500.0: 0.0, 1000.0: 3.0, 2000.0: 1.0, math.inf: 0.0}))
    assert got is not None
    # Log-uniform within (lo, hi]: mean (hi − lo)/ln(hi/lo), second moment (hi² − lo²)/(2·ln(hi/lo)).
    ln2 = math.log(2.0)
    assert [x for point in got.points for x in point] == pytest.approx([500 / ln2, 0.75, 1000 / ln2, 0.25])
    assert got.mean == pytest.approx(0.75 * 500 / ln2 + 0.25 * 1000 / ln2)
    assert got.second == pytest.approx(0.75 * 750_000 / (2 * ln2) + 0.25 * 3_000_000 / (2 * ln2))
    assert got.rate == 4.0
    first = sizing.lengths_from_histogram(_cumulative({100.0: 2.0, math.inf: 0.0}))  # (0, 100]: uniform
    assert first is not None
    assert (first.mean, first.second) == pytest.approx((50.0, 10_000 / 3))
    # Above the largest bound: counted at it (servers bound prompts by their context).
    over = sizing.lengths_from_histogram(_cumulative({1000.0: 0.0, math.inf: 2.0}))
    assert over is not None
    assert over.points == ((1000.0, 1.0),)
    assert sizing.lengths_from_histogram({1000.0: 0.0, math.inf: 0.0}) is None
    assert sizing.lengths_from_histogram({}) is None


def test_the_m_m_1_wait_is_exact_for_exponential_service() -> None:
    """A single length (deterministic service) has E[S²] = E[S]²; P(W > 0) = ρ whatever the service (M/G/1), and
    the tail decays with the Pollaczek–Khinchine conditional mean E[S²] / (2·E[S]·(1 − ρ))."""
    one = sizing.Lengths(((1000.0, 1.0),), 1000.0, 1e6, 1.0)
    # 1,000 tokens at 5,000 tok/s: S = 0.2 s, slack 1.8 s of a 2 s objective; residual 0.1 s.
    rho = 0.5
    assert sizing.prefill_miss(rho, one, 5000.0, 2.0) == pytest.approx(rho * math.exp(-1.8 * (1 - rho) / 0.1))
    assert sizing.prefill_miss(0.0, one, 5000.0, 2.0) == 0.0
    assert sizing.prefill_miss(0.7, one, 5000.0, 0.2) == pytest.approx(0.7)  # no slack: every wait misses


def test_the_utilization_at_the_objective_is_the_largest_that_keeps_the_budget() -> None:
    conv = sizing.Lengths(((750.0, 0.6), (1500.0, 0.3), (3500.0, 0.1)), 1000.0, 1.6e6, 1.0)
    rho = sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.99)
    assert sizing.MIN_UTILIZATION < rho < 1.0
    assert sizing.prefill_miss(rho, conv, 5000.0, 2.0) <= 0.01 + 1e-9
    assert sizing.prefill_miss(rho + 0.02, conv, 5000.0, 2.0) > 0.01
    # A heavier tail at the same mean, a slower prefill, a tighter objective or percentile: all allow less.
    heavy = sizing.Lengths(((500.0, 0.9), (5500.0, 0.1)), 1000.0, 3.3e6, 1.0)
    assert sizing.prefill_utilization_at_objective(heavy, 5000.0, 2.0, 0.99) < rho
    assert sizing.prefill_utilization_at_objective(conv, 3000.0, 2.0, 0.99) < rho
    assert sizing.prefill_utilization_at_objective(conv, 5000.0, 1.0, 0.99) < rho
    assert sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.999) < rho
    assert sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.9) > rho


def test_prompts_longer_than_the_objective_widen_the_budget() -> None:
    """Prompts whose own prefill exceeds the objective (11,000 tokens at 5,000 tok/s: 2.2 s) miss at any count:
    the budget is the percentile's share plus theirs, so they do not drive the utilization to its floor."""
    mixed = sizing.Lengths(((750.0, 0.995), (11000.0, 0.005)), 801.25, 0.995 * 750.0**2 + 0.005 * 11000.0**2, 1.0)
    assert sizing.prefill_miss(0.0, mixed, 5000.0, 2.0) == pytest.approx(0.005)
    rho = sizing.prefill_utilization_at_objective(mixed, 5000.0, 2.0, 0.99)
    assert rho > sizing.MIN_UTILIZATION
    assert 0.01 < sizing.prefill_miss(rho, mixed, 5000.0, 2.0) <= 0.015 + 1e-9
    short = sizing.Lengths(((750.0, 1.0),), 750.0, 750.0**2, 1.0)
    assert sizing.prefill_utilization_at_objective(short, 5000.0, 2.0, 0.99) > 0.8


# --- the prefill rate measured from the servers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "busy", "expected"),
    [
        pytest.param(8000.0, 1.6, 5000.0, id="tokens-over-seconds"),
        pytest.param(None, 1.6, None, id="tokens-unknown"),
        pytest.param(8000.0, None, None, id="seconds-unknown"),
        pytest.param(8000.0, float("nan"), None, id="seconds-nan"),
        pytest.param(100.0, 0.02, None, id="too-little-prefill-to-measure"),
        pytest.param(0.0, 1.0, None, id="no-tokens"),
    ],
)
def test_the_measured_prefill_rate(prompt: float | None, busy: float | None, expected: float | None) -> None:
    assert sizing.measured_prefill_rate(prompt, busy) == expected


@pytest.mark.parametrize(
    ("last", "measured", "dt", "expected"),
    [
        pytest.param(4000.0, None, 5.0, 4000.0, id="unknown-keeps-the-last"),
        pytest.param(4000.0, 3000.0, 5.0, 3000.0, id="lower-at-once"),
        pytest.param(4000.0, 5000.0, 60.0, 4000.0 + (1 - math.exp(-1)) * 1000.0, id="higher-one-time-constant"),
        pytest.param(4000.0, 5000.0, 0.0, 4000.0, id="no-time-no-step"),
        pytest.param(4000.0, 1e9, 1e6, 20000.0, id="a-broken-metric-is-bounded"),
    ],
)
def test_learning_the_prefill_rate(last: float, measured: float | None, dt: float, expected: float) -> None:
    got = sizing.learn_prefill_rate(last, measured, prior=4000.0, dt=dt)
    assert got == pytest.approx(expected)
    if measured is not None:
        assert got <= measured  # never above what was measured


# --- bursty arrivals: the prompt work's index of dispersion (G/G/1, Hayward) ------------------------------------

#: Prompts of 200 or 5,000 tokens, half each: E[L] = 2,600, E[L²] = 12.52e6, so E[L²]/E[L] ≈ 4,815 tokens (far
#: from E[L]: a measure that forgot the prompts' spread would be off by 1.85×).
TWO = sizing.Lengths(((200.0, 0.5), (5000.0, 0.5)), 2600.0, 12.52e6, 1.0)


def _windows(arrivals: list[tuple[float, float]], window: float, step: float, end: float) -> list[sizing.WorkSample]:
    """What a policy sees every ``step`` seconds: the prompt tokens of the last ``window`` seconds."""
    out = []
    t = window
    while t <= end:
        out.append(sizing.WorkSample(t, sum(tok for a, tok in arrivals if t - window < a <= t)))
        t += step
    return out


def _poisson(
    rng: random.Random, rate: float, end: float, clump: int = 1, ramp: bool = False
) -> list[tuple[float, float]]:
    """Poisson instants at ``rate`` (per second; rising from half to 1.5× over ``end`` with ``ramp``), each
    bringing ``clump`` prompts of ``TWO``'s lengths at once."""
    out: list[tuple[float, float]] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate * 1.5 if ramp else rate)
        if t >= end:
            return out
        if ramp and rng.random() * 1.5 > 0.5 + t / end:
            continue
        out.extend((t, rng.choice((200.0, 5000.0))) for _ in range(clump))


def test_poisson_prompt_work_measures_about_one_whatever_its_level_does() -> None:
    """Compound Poisson arrivals (any prompt lengths) are the M/G/1 model's own: their burstiness is 1 within the
    noise of a 300 s span, and a level rising threefold within it does not count (the differences cancel it)."""
    rng = random.Random(7)
    for ramp in (False, True):
        samples = _windows(_poisson(rng, 4.0, 300.0, ramp=ramp), 10.0, 5.0, 300.0)
        got = sizing.work_burstiness(samples, 10.0, TWO)
        assert got is not None
        assert 0.6 < got < 1.5, (ramp, got)


def test_prompts_arriving_in_clumps_measure_as_bursty() -> None:
    """The same prompts arriving eight at a time: the work's index of dispersion is about eight times Poisson's."""
    rng = random.Random(7)
    samples = _windows(_poisson(rng, 0.5, 300.0, clump=8), 10.0, 5.0, 300.0)
    got = sizing.work_burstiness(samples, 10.0, TWO)
    assert got is not None
    assert 5.0 < got < 12.0, got


def test_the_burstiness_needs_enough_window_pairs() -> None:
    few = [sizing.WorkSample(float(t), 100.0) for t in range(0, 60, 5)]  # 12 samples, 10 pairs at 10 s apart
    assert sizing.work_burstiness(few, 10.0, TWO) is None
    enough = [sizing.WorkSample(float(t), 100.0) for t in range(0, 80, 5)]
    assert sizing.work_burstiness(enough, 10.0, TWO) == 0.0  # a perfectly even stream: no spread
    assert sizing.work_burstiness([sizing.WorkSample(float(t), 0.0) for t in range(0, 80, 5)], 10.0, TWO) is None


def test_burstiness_averages_measurements_keeps_the_last_when_unknown_and_never_drops_below_poisson() -> None:
    tau = sizing.BURSTINESS_TAU_S
    assert sizing.learn_burstiness(2.0, 4.0, dt=tau) == pytest.approx(2.0 + (1 - math.exp(-1)) * 2.0)
    assert sizing.learn_burstiness(3.0, None, dt=tau) == 3.0
    assert sizing.learn_burstiness(3.0, math.nan, dt=tau) == 3.0
    assert sizing.learn_burstiness(1.2, 0.1, dt=10 * tau) == 1.0


def test_a_random_split_dilutes_the_burstiness() -> None:
    """Whitt's splitting: a share 1/n of a stream of dispersion b has 1 + (b − 1)/n."""
    assert sizing.split_burstiness(5.0, 1) == 5.0
    assert sizing.split_burstiness(5.0, 4) == 2.0
    assert sizing.split_burstiness(5.0, 0) == 5.0
    assert sizing.split_burstiness(0.5, 4) == 1.0


def test_kingman_scales_the_pollaczek_khinchine_wait_by_the_burstiness() -> None:
    """G/G/1 by Kingman: the residual r = E[S²]/(2·E[S]) times (c_a² + c_s²)/(1 + c_s²), the burstiness; at 1
    the M/G/1 model exactly; more burstiness allows less utilization at the objective."""
    one = sizing.Lengths(((1000.0, 1.0),), 1000.0, 1e6, 1.0)
    rho = 0.5
    assert sizing.prefill_miss(rho, one, 5000.0, 2.0, 3.0) == pytest.approx(rho * math.exp(-1.8 * (1 - rho) / 0.3))
    assert sizing.prefill_miss(rho, one, 5000.0, 2.0, 1.0) == sizing.prefill_miss(rho, one, 5000.0, 2.0)
    assert sizing.prefill_miss(rho, one, 5000.0, 2.0, 0.5) == sizing.prefill_miss(rho, one, 5000.0, 2.0)
    conv = sizing.Lengths(((750.0, 0.6), (1500.0, 0.3), (3500.0, 0.1)), 1000.0, 1.6e6, 1.0)
    plain = sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.99)
    assert sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.99, 1.0) == plain
    bursty = sizing.prefill_utilization_at_objective(conv, 5000.0, 2.0, 0.99, 1.5)
    assert sizing.MIN_UTILIZATION < bursty < plain
    assert sizing.prefill_miss(bursty, conv, 5000.0, 2.0, 1.5) <= 0.01 + 1e-9


def test_hayward_occupancy_is_poisson_at_one_and_lower_when_peaked() -> None:
    """z·A(s/z): at z = 1 the Poisson occupancy of the slots; at z = 2 half the slots' worth at twice the step."""

    def poisson(servers: int, percentile: float) -> float:
        return servers * 0.7  # a stand-in: only how it is called matters here

    assert sizing.peaked_occupancy(48.0, 1.0, 0.99, poisson) == pytest.approx(48 * 0.7)
    assert sizing.peaked_occupancy(48.0, 2.0, 0.99, poisson) == pytest.approx(2 * 24 * 0.7)
    assert sizing.peaked_occupancy(48.0, 5.0, 0.99, poisson) == pytest.approx(5 * 9 * 0.7)
    assert sizing.peaked_occupancy(3.0, 5.0, 0.99, poisson) == 0.0


# --- demand's recurrence against the lead --------------------------------------------------------------------

#: Every 10 s: above 1.0 at 0 s, a fall of 20 s (back at 30 s, 0.5 over), a fall of 100 s (back at 140 s, 0.3
#: over), and the fall now, 10 s old at 160 s.
RECUR = [(0.0, 2.0), (10.0, 0.5), (20.0, 0.5), (30.0, 1.5), *((40.0 + 10 * i, 0.5) for i in range(10)),
         (140.0, 1.3), (150.0, 0.5), (160.0, 0.5)]


def test_recurrence_counts_the_falls_a_release_now_would_have_been_made_in() -> None:
    got = sizing.recurrence(RECUR, threshold=1.0, step=0.8, lead=60.0, now=160.0)
    assert got.age == 10.0
    # Both past falls outlasted 10 s; the 20 s one came back within 10 + 60 s, the 100 s one did not.
    assert (got.falls, got.within_lead) == (2, 1)
    # Released 10 s into each, the replacement is ready 60 s after each return: 0.5 over for 10 s, then 0.3
    # over for 10 s, of the 118 replica-seconds of demand in the history.
    assert got.missed == pytest.approx((0.5 * 10 + 0.3 * 10) / 118.0)
    assert got.idle == pytest.approx(((20 - 10) + (100 - 10)) / 2)


def test_recurrence_is_conditioned_on_how_long_demand_has_been_below() -> None:
    """Later into a fall, only the longer falls count: the hold follows from the history."""
    got = sizing.recurrence([*RECUR, (170.0, 0.5), (180.0, 0.5)], threshold=1.0, step=0.8, lead=60.0, now=180.0)
    assert got.age == 30.0
    assert (got.falls, got.within_lead) == (1, 0)
    assert got.idle == pytest.approx(70.0)
    late = [*RECUR, *((170.0 + 10 * i, 0.5) for i in range(10))]
    got = sizing.recurrence(late, threshold=1.0, step=0.8, lead=60.0, now=260.0)
    assert (got.age, got.falls, got.missed, got.idle) == (110.0, 0, 0.0, None)


def test_recurrence_counts_one_replicas_share_of_a_return_and_skips_a_fall_of_unknown_start() -> None:
    # A return far over the threshold misses at most the released replica's share (``step``).
    big = [(t, 4.0 if t == 30.0 else v) for t, v in RECUR]
    got = sizing.recurrence(big, threshold=1.0, step=0.8, lead=60.0, now=160.0)
    assert got.missed == pytest.approx((0.8 * 10 + 0.3 * 10) / (118.0 + 2.5 * 10))
    # The history starts in a fall: its start is unknown, it is not counted.
    got = sizing.recurrence(RECUR[1:], threshold=1.0, step=0.8, lead=60.0, now=160.0)
    assert (got.falls, got.within_lead) == (1, 0)
    # Above the threshold now: no fall, age 0.
    assert sizing.recurrence(RECUR[:4], threshold=1.0, step=0.8, lead=60.0, now=30.0).age == 0.0
    # Below it for the whole history: at least that long.
    assert sizing.recurrence([(0.0, 0.2), (50.0, 0.2)], threshold=1.0, step=0.8, lead=60.0, now=50.0).age == 50.0
    assert sizing.recurrence([], threshold=1.0, step=0.8, lead=60.0, now=0.0).falls == 0


def test_recurrence_counts_a_stretch_without_samples_as_at_most_one_lead() -> None:
    """An unknown stretch in the history (no samples) is not demand: a sample stands for at most the lead."""
    hist = [(0.0, 2.0), (10.0, 0.5), (1000.0, 0.5), (1010.0, 2.0), (1020.0, 0.5), (1030.0, 0.5)]
    got = sizing.recurrence(hist, threshold=1.0, step=0.8, lead=60.0, now=1030.0)
    assert got.missed == pytest.approx((0.8 * 10) / (2.0 * 10 + 0.5 * 60 + 0.5 * 10 + 2.0 * 10 + 0.5 * 20))


def test_recurrence_counts_a_return_until_the_replacement_is_ready() -> None:
    """A return that lasts: what is over the threshold misses until the lead has passed since the return, not
    after it (the replacement serves from then on)."""
    hist = [(0.0, 2.0), (10.0, 0.5), (20.0, 0.5), (30.0, 1.5), (40.0, 1.5), (50.0, 1.5), (60.0, 0.5), (70.0, 0.5)]
    got = sizing.recurrence(hist, threshold=1.0, step=0.8, lead=20.0, now=70.0)
    assert got.falls == 1
    # Back at 30 s, ready at 50 s: the samples at 30 and 40 s miss 0.5 each for 10 s; the one at 50 s does not.
    assert got.missed == pytest.approx((0.5 * 10 * 2) / (2.0 * 10 + 0.5 * 20 + 1.5 * 30 + 0.5 * 20))


# --- a wait for a slot, priced against the TTFT slack (M/M/n, Erlang C) -----------------------------------------


def _erlang_c_by_its_sum(n: int, a: float) -> float:
    """Erlang's C from its textbook sum, ``(aⁿ/n!)·n/(n − a) / (Σ_{k<n} aᵏ/k! + (aⁿ/n!)·n/(n − a))``: an
    independent check of the recursion in ``sizing.erlang_c``."""
    top = a**n / math.factorial(n) * n / (n - a)
    return top / (math.fsum(a**k / math.factorial(k) for k in range(n)) + top)


@pytest.mark.parametrize(
    ("n", "a"), [(1, 0.5), (2, 1.5), (8, 6.0), (48, 33.0), (64, 55.0), (64, 63.9)]
)
def test_erlang_c_is_the_textbook_sum(n: int, a: float) -> None:
    assert sizing.erlang_c(n, a) == pytest.approx(_erlang_c_by_its_sum(n, a), rel=1e-9)


def test_erlang_c_edges() -> None:
    assert sizing.erlang_c(8, 0.0) == 0.0
    assert sizing.erlang_c(8, 8.0) == 1.0  # saturated: every arrival waits
    assert sizing.erlang_c(8, 9.0) == 1.0
    assert sizing.erlang_c(1, 0.3) == pytest.approx(0.3)  # M/M/1: P(wait) = ρ


def test_a_wait_within_the_slack_is_not_a_miss() -> None:
    """At no slack every wait is a miss (``C(n, a)``); each second of slack multiplies the tail by
    ``exp(−(n − a)·μ)``; a request whose own prefill exceeds the objective misses whatever the wait."""
    n, a, mu = 48, 36.0, 0.05
    c = sizing.erlang_c(n, a)
    assert sizing.slot_wait_miss(a, n, mu, ((0.0, 1.0),)) == pytest.approx(c)
    assert sizing.slot_wait_miss(a, n, mu, ((1.5, 1.0),)) == pytest.approx(c * math.exp(-(n - a) * mu * 1.5))
    assert sizing.slot_wait_miss(a, n, mu, ((-0.1, 0.25), (1.5, 0.75))) == pytest.approx(
        0.25 + 0.75 * c * math.exp(-(n - a) * mu * 1.5)
    )


@pytest.mark.parametrize(("n", "mu", "slack"), [(48, 0.05, 1.8), (64, 0.2, 1.9), (36, 0.1, 1.0), (8, 0.5, 2.0)])
def test_the_occupancy_at_the_wait_objective_holds_it_and_no_more(n: int, mu: float, slack: float) -> None:
    """The bisection's answer keeps the priced miss within the budget, and a sequence more breaks it; it lies
    between every-wait-a-miss (no slack) and the slots themselves; more slack or a faster release allows more."""
    slacks = ((slack, 1.0),)
    got = sizing.occupancy_at_wait_objective(n, 0.99, mu, slacks)
    assert sizing.slot_wait_miss(got, n, mu, slacks) <= 0.01 + 1e-9
    assert sizing.slot_wait_miss(min(n - 1e-6, got + 1.0), n, mu, slacks) > 0.01
    counted = sizing.occupancy_at_wait_objective(n, 0.99, mu, ((0.0, 1.0),))
    assert counted < got < n
    assert sizing.occupancy_at_wait_objective(n, 0.99, mu, ((2 * slack, 1.0),)) > got
    assert sizing.occupancy_at_wait_objective(n, 0.99, 2 * mu, slacks) > got


@pytest.mark.parametrize("n", [8, 36, 48, 64])
def test_with_no_slack_the_priced_wait_is_no_looser_than_the_poisson_rule(n: int) -> None:
    """Every wait a miss (slack 0): Erlang's C counts the waiting requests a Poisson occupancy leaves out, so it
    allows no more than the rule it replaces (``slo.occupancy_at_objective``), and within a sequence of it."""
    poisson = slo.occupancy_at_objective(n, 0.99)
    priced = sizing.occupancy_at_wait_objective(n, 0.99, 1.0, ((0.0, 1.0),))
    assert poisson - 1.0 < priced <= poisson


def test_prompts_longer_than_the_objective_do_not_spend_the_budget() -> None:
    """A share of requests whose prefill alone exceeds the objective misses at any count: like the prefill queue's,
    the budget is ``1 − percentile`` beyond them (else no occupancy would do)."""
    slacks = ((1.5, 0.98), (-0.5, 0.02))
    got = sizing.occupancy_at_wait_objective(48, 0.99, 0.05, slacks)
    assert sizing.slot_wait_miss(got, 48, 0.05, slacks) <= 0.02 + 0.01 + 1e-9
    assert sizing.slot_wait_miss(got + 1.0, 48, 0.05, slacks) > 0.03
    assert got > 30


def test_ttft_slacks_are_the_objective_less_each_prompts_prefill() -> None:
    lengths = sizing.Lengths(((400.0, 0.75), (6000.0, 0.25)), 1800.0, 0.0, 1.0)
    assert sizing.ttft_slacks(lengths, 4000.0, 2.0) == ((1.9, 0.75), (0.5, 0.25))


def test_the_release_rate_is_arrivals_over_the_sequences_running() -> None:
    """Little's law: 10 arrivals/s and 50 sequences running hold each slot 5 s on average, 0.2 per second each."""
    assert sizing.slot_release_rate(10.0, 50.0) == pytest.approx(0.2)
    for arrivals, running in ((None, 50.0), (10.0, None), (0.0, 50.0), (10.0, 0.0), (math.nan, 5.0)):
        assert sizing.slot_release_rate(arrivals, running) is None


def test_the_release_rate_is_averaged_and_unknown_keeps_the_last() -> None:
    assert sizing.learn_release_rate(None, None, dt=5.0) is None
    assert sizing.learn_release_rate(None, 0.2, dt=5.0) == 0.2
    assert sizing.learn_release_rate(0.2, None, dt=5.0) == 0.2
    step = sizing.learn_release_rate(0.2, 0.4, dt=sizing.RELEASE_TAU_S)
    assert step == pytest.approx(0.2 + (1 - math.exp(-1)) * 0.2)


# --- what a latency window is evidence of (latencyEvidence) --------------------------------------------------


def _binomial_at_least(n: int, p: float, k: int) -> float:
    return math.fsum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


@pytest.mark.parametrize(("n", "q"), [(1, 0.99), (5, 0.99), (20, 0.99), (100, 0.99), (600, 0.99), (50, 0.9), (7, 0.5)])
def test_the_supported_rank_is_the_order_statistics_confidence_bound(n: int, q: float) -> None:
    """``X_(k) ≤ ξ_q`` with probability ``P(Binomial(n, q) ≥ k)``: the rank is the largest with at least 95 %."""
    k = sizing.supported_rank(n, q)
    assert 0 <= k <= n
    if k > 0:
        assert _binomial_at_least(n, q, k) >= sizing.QUANTILE_CONFIDENCE
    if k < n:
        assert _binomial_at_least(n, q, k + 1) < sizing.QUANTILE_CONFIDENCE


def test_a_p99_of_twenty_requests_is_their_second_largest_and_of_five_their_largest() -> None:
    """One slow request among twenty is what a 1 % tail gives by chance (1 − 0.99²⁰ ≈ 18 %); among five it is not
    (1 − 0.99⁵ ≈ 4.9 % < 5 %)."""
    assert sizing.supported_rank(20, 0.99) == 19
    assert sizing.supported_rank(5, 0.99) == 5
    assert sizing.supported_rank(0, 0.99) == 0


def test_the_supported_quantile_needs_more_than_one_slow_request_in_twenty() -> None:
    """20 requests in a 60 s window (rates per second): one in (1 s, 4 s] reads a p99 of 3.4 s as a point estimate,
    1 s as supported; two there, 2.5 s either way above the objective."""
    one = {1.0: 19 / 60, 4.0: 20 / 60, math.inf: 20 / 60}
    two = {1.0: 18 / 60, 4.0: 20 / 60, math.inf: 20 / 60}
    assert counters.histogram_quantile(0.99, one) == pytest.approx(3.4)
    assert sizing.supported_quantile(one, 0.99, 60.0) == pytest.approx(1.0)
    assert sizing.supported_quantile(two, 0.99, 60.0) == pytest.approx(2.5)
    assert sizing.supported_quantile({1.0: 0.0, math.inf: 0.0}, 0.99, 60.0) is None


def test_many_observations_support_nearly_the_point_estimate() -> None:
    """6,000 requests, 1 % of them in (2 s, 4 s]: the point estimate is 2 s, the supported value a little below."""
    buckets = {1.0: 80.0, 2.0: 99.0, 4.0: 100.0, math.inf: 100.0}
    point = counters.histogram_quantile(0.99, buckets)
    supported = sizing.supported_quantile(buckets, 0.99, 60.0)
    assert supported is not None
    assert point - 0.05 < supported <= point


# --- the quantile of queue time + a TTFT that starts after it (ttftAfterQueue) --------------------------------


def test_the_quantile_of_two_uniforms_sum_is_the_triangular_distributions() -> None:
    """U(0, 1) + U(0, 1) is triangular on [0, 2]: P(S ≤ 0.5) = 1/8, its median 1, P(S ≤ 1.5) = 7/8."""
    u = {1.0: 3.0, math.inf: 3.0}
    assert sizing.quantile_of_sum(u, u, 0.125) == pytest.approx(0.5)
    assert sizing.quantile_of_sum(u, u, 0.5) == pytest.approx(1.0)
    assert sizing.quantile_of_sum(u, u, 0.875) == pytest.approx(1.5)


def _draw(buckets: dict[float, float], rng: random.Random) -> float:
    """One value of cumulative ``buckets``, uniform within its bucket (the first from 0)."""
    bounds = sorted(b for b in buckets if not math.isinf(b))
    u = rng.random() * buckets[math.inf]
    lo = below = 0.0
    for hi in bounds:
        if u <= buckets[hi]:
            return lo + (hi - lo) * rng.random() if buckets[hi] > below else hi
        lo, below = hi, buckets[hi]
    return math.inf


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_quantile_of_a_sum_is_that_of_independent_draws(seed: int) -> None:
    """Against 40,000 independent draws from the two histograms (each uniform within its buckets), at p50, p90, p99:
    the convolution, not the sum of the quantiles nor the larger one."""
    rng = random.Random(seed)
    bounds = (0.001, 0.01, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

    def histogram() -> dict[float, float]:
        counts = [rng.randint(0, 5) for _ in bounds]
        counts[rng.randrange(len(bounds))] += 1
        out, total = {}, 0.0
        for b, c in zip(bounds, counts, strict=True):
            total += c
            out[b] = total
        out[math.inf] = total
        return out

    first, second = histogram(), histogram()
    draws = sorted(_draw(first, rng) + _draw(second, rng) for _ in range(40_000))
    for q in (0.5, 0.9, 0.99):
        assert sizing.quantile_of_sum(first, second, q) == pytest.approx(draws[int(q * len(draws))], rel=0.03, abs=0.01)


def test_a_queue_time_near_zero_leaves_the_ttfts_quantile() -> None:
    """Nothing queued (every queue time in (0, 1 ms]): the sum's p99 is the TTFT's, within the 1 ms."""
    queue = {0.001: 50.0, 1.0: 50.0, math.inf: 50.0}
    ttft = {0.1: 20.0, 0.25: 45.0, 0.75: 50.0, math.inf: 50.0}
    alone = counters.histogram_quantile(0.99, ttft)
    assert sizing.quantile_of_sum(queue, ttft, 0.99) == pytest.approx(alone, abs=0.001)


def test_each_within_the_objective_their_sum_is_not() -> None:
    """10 % of the requests wait 1-1.9 s, every prefill takes 0.25-0.75 s: queue time p99 1.81 s, TTFT p99 0.745 s,
    each within 2 s; what users feel, their sum, has a p99 of 2.35 s."""
    queue = {0.001: 9.0, 1.0: 9.0, 1.9: 10.0, math.inf: 10.0}
    ttft = {0.25: 0.0, 0.75: 10.0, math.inf: 10.0}
    assert counters.histogram_quantile(0.99, queue) < 2.0
    assert counters.histogram_quantile(0.99, ttft) < 2.0
    assert sizing.quantile_of_sum(queue, ttft, 0.99) == pytest.approx(2.35, abs=0.01)
    supported = sizing.supported_quantile_of_sum(queue, ttft, 0.99, 60.0)
    assert supported is not None
    assert supported[1] == 600
    assert 2.0 < supported[0] < 2.35


def test_the_supported_quantile_of_a_sum_counts_the_fewer_requests() -> None:
    """20 requests in the TTFT window, 5 in the queue time's (observed later): 5 support only their largest."""
    queue = {0.001: 4 / 60, 1.0: 5 / 60, math.inf: 5 / 60}
    ttft = {0.25: 20 / 60, math.inf: 20 / 60}
    supported = sizing.supported_quantile_of_sum(queue, ttft, 0.99, 60.0)
    assert supported is not None
    assert supported[1] == 5
    assert supported[0] == pytest.approx(sizing.quantile_of_sum(queue, ttft, 1.0))
    assert sizing.supported_quantile_of_sum({1.0: 0.0, math.inf: 0.0}, ttft, 0.99, 60.0) is None


# --- the reading within a bucket: an exponential fitted from the neighbouring buckets' counts ------------------

#: JetStream's queue-time buckets (jetstream_queue_duration) and its TTFT's (jetstream_time_to_first_token), as the
#: simulator exports them (sim/model.py, with their source).
JETSTREAM_QUEUE_BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
JETSTREAM_TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def _histogram_of(values: list[float], bounds: tuple[float, ...]) -> dict[float, float]:
    ordered = sorted(values)
    out: dict[float, float] = {b: float(bisect.bisect_right(ordered, b)) for b in bounds}
    out[math.inf] = float(len(ordered))
    return out


@pytest.mark.parametrize(("seed", "wait_rate", "prefill_rate"), [(1, 2.0, 8.0), (2, 1.0, 5.0), (3, 0.7, 10.0)])
def test_exponential_waits_read_exponential_find_the_sums_quantile(seed: int, wait_rate: float,
                                                                   prefill_rate: float) -> None:
    """Waits with an exponential tail (a queue's, Kingman) in JetStream's queue-time buckets plus prefills of 0.1 s
    + an exponential in its TTFT buckets, 100,000 independent pairs: read exponential within the buckets, the
    sum's p90 and p99 are within 2 % of the draws'; read uniform (as histogram_quantile) the wide buckets where the
    density falls put them 5 % or more too high."""
    rng = random.Random(seed)
    waits = [rng.expovariate(wait_rate) for _ in range(100_000)]
    prefills = [0.1 + rng.expovariate(prefill_rate) for _ in range(100_000)]
    queue, ttft = _histogram_of(waits, JETSTREAM_QUEUE_BOUNDS), _histogram_of(prefills, JETSTREAM_TTFT_BOUNDS)
    sums = sorted(a + b for a, b in zip(waits, prefills, strict=True))
    for q in (0.9, 0.99):
        truth = sums[int(q * len(sums))]
        assert sizing.quantile_of_sum(queue, ttft, q, within="exponential") == pytest.approx(truth, rel=0.02)
        assert sizing.quantile_of_sum(queue, ttft, q) > 1.05 * truth


def _random_histogram(rng: random.Random, bounds: tuple[float, ...]) -> dict[float, float]:
    counts = [rng.choice((0, 0, 1, 3, 20, 100)) for _ in bounds] + [rng.choice((0, 0, 2))]
    counts[rng.randrange(len(bounds))] += 1
    out, total = {}, 0.0
    for b, c in zip((*bounds, math.inf), counts, strict=True):
        total += c
        out[b] = total
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_pieces_convolution_read_uniform_is_quantile_of_sums(seed: int) -> None:
    """The convolution the exponential reading uses (each histogram as stretches read uniform, integrated) with one
    stretch per bucket is the uniform reading's pairwise one: the same quantiles, empty buckets, a first bucket from
    0 and observations above the last bound included."""
    rng = random.Random(seed)
    first, second = _random_histogram(rng, JETSTREAM_QUEUE_BOUNDS), _random_histogram(rng, JETSTREAM_TTFT_BOUNDS)
    for q in (0.05, 0.5, 0.9, 0.99, 0.999):
        assert sizing._quantile_of_sum_pieces(first, second, q, "uniform") == pytest.approx(
            sizing.quantile_of_sum(first, second, q), abs=1e-6)


def test_the_fitted_rate_follows_the_counts() -> None:
    """Falling counts fit a falling density, rising a rising one, equal cells of equal width a flat one; one cell, or
    none observed, is read uniform (0)."""
    assert sizing.fitted_rate([(0.5, 1.0, 40.0), (1.0, 1.5, 20.0), (1.5, 2.0, 10.0)]) == pytest.approx(
        2 * math.log(2), rel=1e-3)
    assert sizing.fitted_rate([(0.5, 1.0, 10.0), (1.0, 1.5, 20.0), (1.5, 2.0, 40.0)]) == pytest.approx(
        -2 * math.log(2), rel=1e-3)
    assert sizing.fitted_rate([(1.0, 2.0, 5.0), (2.0, 3.0, 5.0)]) == pytest.approx(0.0, abs=1e-3)
    assert sizing.fitted_rate([(1.0, 2.0, 5.0)]) == 0.0
    assert sizing.fitted_rate([(1.0, 2.0, 0.0), (2.0, 5.0, 0.0)]) == 0.0


@pytest.mark.parametrize("seed", range(20))
def test_the_fitted_rate_is_the_likeliest(seed: int) -> None:
    """Three neighbouring buckets of JetStream's, random counts (zeros included): no rate on a fine grid within the
    search's bounds is more likely than the one fitted."""
    rng = random.Random(seed)
    i = rng.randrange(len(JETSTREAM_QUEUE_BOUNDS) - 3)
    bounds = JETSTREAM_QUEUE_BOUNDS[i:i + 4]
    cells = [(lo, hi, float(rng.choice((0, 1, 2, 7, 30)))) for lo, hi in itertools.pairwise(bounds)]
    if not any(n for _, _, n in cells):
        cells[1] = (cells[1][0], cells[1][1], 1.0)
    span = bounds[-1] - bounds[0]
    fitted = sizing._log_likelihood(sizing.fitted_rate(cells), [sizing._Cell(*c) for c in cells])
    grid = (sizing._log_likelihood(u / span, [sizing._Cell(*c) for c in cells]) for u in range(-39, 40))
    assert fitted >= max(grid) - 1e-9


@pytest.mark.parametrize("theta", [-3.0, 0.5, 2.0, 6.0])
def test_a_bucket_read_exponential_keeps_its_count_and_its_shape(theta: float) -> None:
    """One bucket (1, 2] whose neighbours' counts fit the rate θ exactly: read alone (the other latency 0), each
    quantile within the bucket is the truncated exponential's (within 1 % of the bucket's width: the reading's
    stretches), and the share at the bucket's edges is the histogram's."""
    def mass(lo: float, hi: float) -> float:
        return (math.exp(-theta * lo) - math.exp(-theta * hi)) / theta

    counts = [mass(0.5, 1.0), mass(1.0, 2.0), mass(2.0, 5.0)]
    scale = 100 / sum(counts)
    hist = {0.5: 0.0, 1.0: counts[0] * scale, 2.0: (counts[0] + counts[1]) * scale, 5.0: 100.0, math.inf: 100.0}
    zero = {0.0: 1.0, math.inf: 1.0}
    at_one, at_two = hist[1.0] / 100, hist[2.0] / 100
    for u in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0):
        exact = 1.0 - math.log1p(u * math.expm1(-theta)) / theta
        read = sizing.quantile_of_sum(hist, zero, at_one + u * (at_two - at_one), within="exponential")
        assert read == pytest.approx(exact, abs=0.01)


def test_a_wide_bucket_where_the_density_falls_is_read_where_its_counts_say() -> None:
    """A window of the simulated code trace ×0.5, 30-45 min (at 195-218 s; 133 requests, docs/slo.md Session 24): 29
    waits in (1, 2] s (really 1.34-1.61 s), none above; the true p99 of queue time + TTFT is 1.69 s. Read uniform,
    its supported p99 is over the 2 s objective (a false alarm); read exponential, within it."""
    queue = {0.01: 33, 0.02: 34, 0.05: 43, 0.1: 51, 0.2: 60, 0.5: 77, 1.0: 104, 2.0: 133, 5.0: 133, math.inf: 133}
    ttft = {0.001: 3, 0.005: 13, 0.01: 21, 0.02: 34, 0.04: 49, 0.06: 67, 0.08: 74, 0.1: 79, 0.25: 111, 0.5: 133,
            0.75: 133, math.inf: 133}
    q, t = ({k: v / 60 for k, v in h.items()} for h in (queue, ttft))
    uniform = sizing.supported_quantile_of_sum(q, t, 0.99, 60.0)
    exponential = sizing.supported_quantile_of_sum(q, t, 0.99, 60.0, within="exponential")
    assert uniform is not None
    assert exponential is not None
    assert uniform[0] > 2.0 > exponential[0] > 1.69


def _ar1(rng: random.Random, n: int, phi: float, sd: float) -> list[float]:
    """``n`` samples of a stationary AR(1) series with lag-1 correlation ``phi`` and standard deviation ``sd``: an
    occupancy gauge read every few seconds, whose sequences stay in many consecutive samples."""
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, sd * math.sqrt(1.0 - phi * phi))
        out.append(x)
    return out


def _ramp(seed: str, per_minute: float, phi: float = 0.75, n: int = 200) -> list[tuple[float, float]]:
    """A load read every 5 s: 2 replica-equivalents rising by ``per_minute``, with AR(1) noise of 0.3 sd."""
    noise = _ar1(random.Random(seed), n, phi, 0.3)
    return [(5.0 * i, 2.0 + per_minute / 60.0 * 5.0 * i + e) for i, e in enumerate(noise)]


def test_a_slow_ramp_the_short_trend_misses_is_forecast_at_its_slope_over_the_cold_start() -> None:
    """``ramp_trend`` (``forecast.ramp``): a ramp of +0.15 replica-equivalents a minute under a 60 s cold start,
    0.15 per cold start against noise of 0.3 sd: over two cold starts the trend's lower bound is mostly not
    positive, over 4-16 it mostly is. The rise is the fitted slope times the cold start (about 0.15), not the
    lower bound's (about half that: a ramp too slow for the short trend would get no margin)."""
    horizon, found, short, rises = 60.0, 0, 0, []
    for k in range(100):
        samples = _ramp(f"ramp/{k}", 0.15)
        now = samples[-1][0]
        got = sizing.ramp_trend(samples, now, horizon, now - samples[0][0])
        if got is not None:
            found += 1
            rises.append(got.rise)
            assert got.rise == pytest.approx(got.slope * horizon)
            assert got.low > 0
            assert got.window >= 4 * horizon
        short += "trend" in sizing.trend_and_burst(samples, now, samples[-1][1], horizon, 2.0, None).text
    assert found >= 80
    assert short <= 50
    assert 0.8 * 0.15 <= sum(rises) / len(rises) <= 1.4 * 0.15


def test_autocorrelated_noise_on_a_flat_load_is_seldom_a_ramp() -> None:
    """The slope's standard error counts the samples' lag-1 autocorrelation (effective samples n(1 - r1)/(1 + r1)):
    on a flat load with AR(1) noise of correlation 0.9 few windows show a ramp. Counting every sample as
    independent, the error is about four times too small (√((1 + 0.9)/(1 - 0.9))) and two in five would."""
    horizon, found = 60.0, 0
    for k in range(300):
        samples = _ramp(f"flat/{k}", 0.0, phi=0.9)
        now = samples[-1][0]
        found += sizing.ramp_trend(samples, now, horizon, now - samples[0][0]) is not None
    assert found <= 0.2 * 300


def test_a_ramp_that_has_turned_or_was_not_observed_is_not_forecast() -> None:
    """A ramp over 8 cold starts that has been flat for the last two: their own trend rejects the long one's
    slope, and nothing is forecast. A history shorter than 4 cold starts has no long window."""
    horizon = 60.0
    rise = [(5.0 * i, 1.0 + 0.5 * (5.0 * i) / 60.0) for i in range(96)]  # +0.5 a minute for 480 s
    top = rise[-1][1]
    turned = rise + [(480.0 + 5.0 * i, top) for i in range(1, 25)]  # then flat for 120 s
    now = turned[-1][0]
    assert sizing.ramp_trend(rise, rise[-1][0], horizon, rise[-1][0]) is not None
    assert sizing.ramp_trend(turned, now, horizon, now) is None
    young = rise[-40:]  # 195 s observed
    assert sizing.ramp_trend(young, young[-1][0], horizon, young[-1][0] - young[0][0]) is None
