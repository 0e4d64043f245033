"""The yardstick's accounting on hand-built runs: what counts as a met request, what an unserved one is, and
the row's figures against the oracle. Every number here is worked by hand.

Added where a mutation run (docs/testing.md, "Mutation testing") showed the accounting reachable only through
whole simulations, whose requests never land on the boundaries these cases pin.
"""

from __future__ import annotations

import math

import pytest

from autoscaler.sim import oracle, report
from autoscaler.sim.model import Requests
from autoscaler.sim.simulation import RunResult

SLO = 2.0


def _run(arrival: list[float], first_token: list[float], *, chip_s: float = 7200.0) -> RunResult:
    req = Requests(arrival, [100] * len(arrival), [10] * len(arrival))
    req.first_token = first_token
    req.done = [f + 1.0 for f in first_token]
    return RunResult(name="r", kind="policy", requests=req, horizon_s=3600.0, serving_chip_s=chip_s,
                     free_chip_s=0.0, training_useful_chip_s=0.0, training_lost_chip_s=0.0, scale_actions=0,
                     preemptions=0, timeline=[])


#: Four requests: one exactly at the SLO (met: TTFT ≤ SLO), one well within, one never served, one late.
BOUNDARY = _run([0.0, 1.0, 2.0, 3.0], [2.0, 1.5, math.nan, 7.0])


def test_a_request_at_exactly_the_slo_is_met_and_an_unserved_one_is_missed() -> None:
    row = report.score(BOUNDARY, slo_ttft_s=SLO, oracle=None)
    assert row["slo_attainment"] == 0.5
    assert row["unserved_requests"] == 1
    assert row["requests"] == 4
    # The oracle's search scores its schedules with its own copy of the rule: the same answer.
    assert oracle.attainment(BOUNDARY, SLO) == 0.5


def test_a_run_without_requests_misses_nothing() -> None:
    empty = _run([], [])
    assert report.score(empty, slo_ttft_s=SLO, oracle=None)["slo_attainment"] == 1.0
    assert oracle.attainment(empty, SLO) == 1.0


@pytest.mark.parametrize(
    ("n", "target", "misses"),
    [
        pytest.param(100, 0.99, 1, id="99-of-100-may-miss-1"),
        pytest.param(100, 0.995, 0, id="99.5-of-100-rounds-up-to-100-met"),
        pytest.param(100, 0.56, 44, id="float-noise-in-target-times-n-is-no-extra-met-request"),
        pytest.param(3, 1.0, 0, id="full-attainment-misses-none"),
    ],
)
def test_misses_allowed_is_the_requests_beyond_ceil_target_times_n(n: int, target: float, misses: int) -> None:
    # 0.56 x 100 is 56.00000000000001 in floats: without the guard, ceil makes it 57 met and allows 43 misses.
    assert oracle.misses_allowed(n, target) == misses
