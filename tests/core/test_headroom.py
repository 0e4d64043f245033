"""Issue 11 item 1b: serving's latency headroom (``core.headroom``) and the arbitration waiting within it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import arbitration, headroom
from autoscaler.core.model import Ahead
from autoscaler.core.sizing import RISK_FRACTION
from tests.core.test_arbitration import actions, ckpt, observe, spec_with

ROOM = spec_with(waitWithinHeadroom=True, checkpointRequestSeconds=60)
NOW = 10_000.0


def room(seconds: float | None) -> Ahead:
    return Ahead(replicas=2, within_s=180, headroom_s=seconds, headroom_text=f"latency headroom {seconds}s")


def neither(name: str, since: float, **kw: Any) -> Any:
    """A trainer that neither saves on SIGTERM nor honours requests: 600 s interval, 60 s grace period."""
    kw.setdefault("checkpoint_interval_s", 600.0)
    kw.setdefault("grace_s", 60.0)
    return ckpt(name, since, honours_requests=False, **kw)


# --- the headroom itself --------------------------------------------------------------------------------------


def test_no_headroom_when_the_quantile_is_unknown_or_at_risk() -> None:
    def h(ratio: float | None, unknown: bool) -> float:
        return headroom.latency_headroom(ratio=ratio, latency_unknown=unknown, ttft_s=2.0, load=1.0, forecast=1.0,
                                         horizon_s=120.0, ready=2).seconds

    assert h(None, True) == 0
    assert h(None, False) == 0  # no quantile configured: no slack is known
    assert h(0.1, True) == 0
    assert h(RISK_FRACTION, False) == 0
    assert h(0.2, False) > 0


def test_a_queue_already_growing_leaves_the_slack_over_its_growth() -> None:
    # 2 ready replicas, a load of 3 (the measured queue included): the backlog grows by 1 replica-second per
    # second, the delay by 0.5 s per second; 1.2 s of slack (0.8 × 2 s − 0.4 s measured) lasts 2.4 s.
    risk = headroom.time_to_risk(slack_s=1.2, load=3.0, forecast=3.0, horizon_s=120.0, ready=2)
    assert risk == pytest.approx(2.4)
    got = headroom.latency_headroom(ratio=0.2, latency_unknown=False, ttft_s=2.0, load=3.0, forecast=3.0,
                                    horizon_s=120.0, ready=2)
    assert got.seconds == 0  # at risk long before a replica asked now would be up


def test_a_rising_load_is_at_risk_once_it_passes_the_ready_replicas_and_the_slack_is_used() -> None:
    # Load 1 → 3 over a 100 s cold start on 2 ready replicas: it reaches 2 after 50 s, then the delay grows as
    # rise·t²/(2·ready): 1 s of slack is used after √(2·1·2/0.02) ≈ 14.1 s more.
    risk = headroom.time_to_risk(slack_s=1.0, load=1.0, forecast=3.0, horizon_s=100.0, ready=2)
    assert risk == pytest.approx(50.0 + math.sqrt(200.0))
    # Less a cold start: nothing left to wait.
    assert headroom.latency_headroom(ratio=0.3, latency_unknown=False, ttft_s=2.0, load=1.0, forecast=3.0,
                                     horizon_s=100.0, ready=2).seconds == 0
    # A slower rise leaves headroom: 1 → 1.5 over 100 s reaches 2 after 200 s.
    slow = headroom.latency_headroom(ratio=0.3, latency_unknown=False, ttft_s=2.0, load=1.0, forecast=1.5,
                                     horizon_s=100.0, ready=2)
    assert 0 < slow.seconds <= 100.0


def test_a_steady_load_within_the_ready_replicas_is_capped_at_one_cold_start() -> None:
    assert math.isinf(headroom.time_to_risk(slack_s=1.0, load=1.5, forecast=1.5, horizon_s=120.0, ready=2))
    got = headroom.latency_headroom(ratio=0.1, latency_unknown=False, ttft_s=2.0, load=1.5, forecast=1.5,
                                    horizon_s=120.0, ready=2)
    assert got.seconds == headroom.REACH_COLD_STARTS * 120.0
    assert "latency headroom 120s" in got.text


@given(
    ratio=st.floats(0, 2), load=st.floats(0, 20), rise=st.floats(0, 20), ready=st.integers(0, 10),
    ttft=st.floats(0.1, 10), horizon=st.floats(1, 600),
)
def test_more_load_or_a_worse_quantile_never_gives_more_headroom(
    ratio: float, load: float, rise: float, ready: int, ttft: float, horizon: float
) -> None:
    def h(r: float, x: float) -> float:
        return headroom.latency_headroom(ratio=r, latency_unknown=False, ttft_s=ttft, load=x, forecast=x + rise,
                                         horizon_s=horizon, ready=ready).seconds

    base = h(ratio, load)
    assert 0 <= base <= headroom.REACH_COLD_STARTS * horizon
    assert h(ratio + 0.1, load) <= base + 1e-9
    assert h(ratio, load + 0.5) <= base + 1e-9


# --- the arbitration waits within it ----------------------------------------------------------------------------


def test_a_victims_own_checkpoint_is_waited_for_only_within_the_headroom_less_its_grace_period() -> None:
    # "due" checkpoints in 50 s, "mid" in 400 s. Serving may wait 120 s, the victim holds its chips 60 s after
    # SIGTERM: 50 s fits in the 60 s left, so "due" is waited for, nothing is stopped, serving waits.
    training = (neither("due", 550), neither("mid", 200))
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, training), desired=2, now=NOW, ahead=room(120))
    assert (result.desired, result.training, result.waiting_for_checkpoint) == (1, (), True)
    assert "waiting for llm/due to checkpoint (its next one due in 50s) within the policy's latency headroom" \
        in result.message
    # Its save done: stopped now (it loses 3 s of work), serving scales.
    saved = (neither("due", 3), neither("mid", 203))
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, saved), desired=2, now=NOW + 53,
                              ahead=room(120))
    assert (result.desired, actions(result)) == (2, [("deactivate", "due")])


@pytest.mark.parametrize("seconds", [100.0, 0.0, None])
def test_without_enough_headroom_the_least_loss_is_stopped_at_once(seconds: float | None) -> None:
    # 100 s of headroom less a 60 s grace period leaves 40 s: "due" (50 s) does not fit; none, or an unknown
    # headroom (the policy did not say), waits for nothing.
    training = (neither("due", 550), neither("mid", 200))
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, training), desired=2, now=NOW,
                              ahead=room(seconds))
    assert (result.desired, actions(result), result.waiting_for_checkpoint) == (2, [("deactivate", "mid")], False)
    no_ahead = arbitration.plan(spec=ROOM, observation=observe(1, 6, training), desired=2, now=NOW)
    assert (no_ahead.desired, actions(no_ahead)) == (2, [("deactivate", "mid")])


def test_the_headroom_is_read_anew_each_evaluation_and_ends_the_wait() -> None:
    # Waited for at 120 s of headroom; 20 s later the load rose and the policy has 30 s left: stopped now.
    later = (neither("due", 570), neither("mid", 220))
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, later), desired=2, now=NOW + 20, ahead=room(30))
    assert result.desired == 2
    assert not result.waiting_for_checkpoint
    assert len(result.training) == 1
    assert result.training[0].action.value == "deactivate"


def test_among_victims_that_lose_nothing_the_one_saving_soonest_is_waited_for() -> None:
    training = (neither("a-later", 560), neither("b-sooner", 590))
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, training), desired=2, now=NOW, ahead=room(120))
    assert result.waiting_for_checkpoint
    assert "llm/b-sooner" in result.message
    assert "llm/a-later" not in result.message


def test_without_the_option_the_headroom_changes_nothing() -> None:
    off = spec_with(checkpointRequestSeconds=60)
    training = (neither("due", 550), neither("mid", 200))
    result = arbitration.plan(spec=off, observation=observe(1, 6, training), desired=2, now=NOW, ahead=room(120))
    assert (result.desired, actions(result)) == (2, [("deactivate", "mid")])


def test_a_requested_save_is_waited_for_only_while_it_fits_the_headroom() -> None:
    # Honours requests, its 90 s save does not fit its 60 s grace period (so it is not asked as it stops).
    # 200 s of headroom less the 60 s grace: 140 s ≥ 90 s: asked, serving waits.
    long = ckpt("long", 500, save_s=90.0, grace_s=60.0, checkpoint_interval_s=6000.0)
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, (long,)), desired=2, now=NOW, ahead=room(200))
    assert (result.desired, actions(result), result.waiting_for_checkpoint) == (1, [("request-checkpoint", "long")],
                                                                                 True)
    assert "only within its 200s latency headroom" in result.training[0].message
    # 120 s of headroom: 60 s left < the 90 s save: not asked, stopped now (the constant rule would wait 60 s).
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, (long,)), desired=2, now=NOW, ahead=room(120))
    assert (result.desired, actions(result)) == (2, [("deactivate", "long")])
    # Asked 40 s ago: 50 s of its save left; the headroom fell to 100 s (40 s left): stopped now.
    asked = ckpt("long", 540, save_s=90.0, grace_s=60.0, checkpoint_interval_s=6000.0,
                 checkpoint_requested_at=NOW - 40)
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, (asked,)), desired=2, now=NOW, ahead=room(100))
    assert (result.desired, actions(result)) == (2, [("deactivate", "long")])
    # With 150 s (90 s left) it is still waited for, and not asked again.
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, (asked,)), desired=2, now=NOW, ahead=room(150))
    assert (result.desired, result.training, result.waiting_for_checkpoint) == (1, (), True)


def test_a_saver_is_never_waited_for() -> None:
    saver = ckpt("saver", 550, save_s=20.0, grace_s=60.0, saves_on_termination=True, checkpoint_interval_s=600.0)
    result = arbitration.plan(spec=ROOM, observation=observe(1, 6, (saver,)), desired=2, now=NOW, ahead=room(600))
    assert (result.desired, actions(result)) == (2, [("deactivate", "saver")])
