"""Fallback with KEDA's semantics (``pkg/fallback/fallback.go``, ``pkg/scaling/executor``), through ``decide``.

What KEDA does, and the test for each:

1. failures are counted **per trigger** (``status.health[metric].numberOfFailures``), reset by that trigger's
   next success: two signals failing in turn never fall back (a per-policy count would);
2. a trigger falls back once its count **passes** ``failureThreshold``; KEDA then hands HPA a metric value that
   makes HPA compute ``fallback.replicas`` for that trigger, and HPA takes the highest count over all triggers:
   a usable trigger asking for more wins;
3. that count goes through HPA's behavior like any other: stabilization and rate policies (no 30 → 8 in one
   step during an outage);
4. HPA does nothing at 0 replicas, so the fallback never wakes a target from zero (KEDA's executor has a path
   that does, reported as a bug, kedacore/keda#6053 and #7239: not followed);
5. policy types without a behavior stage (kpa, slo) run their fallback count through HPA's default behavior.

Differences from KEDA: the fallback applies to every metric type (KEDA: AverageValue only); the fallback
count is not put through HPA's tolerance band (tested below); ``currentReplicas*`` read the spec count of this
evaluation (KEDA: a separate read of the scale subresource).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.core.model import PolicyState, Reason, ReplicaStatus, SignalReading
from autoscaler.core.signals import PodRule, combine_pods
from tests.core.test_safety import HPA, KPA, NOW, QUEUE, compiled, fresh, observe, run

DOWN_TWO_PER_MINUTE = {"scaleDown": {"stabilizationWindowSeconds": 60,
                                     "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}}


def test_failures_are_counted_per_trigger() -> None:
    # waiting and running fail in turn: each trigger's run is 1, never past failureThreshold 1. Counted per
    # policy, as before, the unknown evaluations were consecutive and the 2nd fell back to 9.
    cp = compiled(QUEUE, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 9}})
    state = PolicyState()
    for i in range(8):
        a, b = (None, fresh(3.0)) if i % 2 == 0 else (fresh(3.0), None)
        decision, state = run(cp, observe(4, waiting=a, running=b), state, NOW + 15 * i)
        assert decision.reason is Reason.METRICS_UNKNOWN, i
        assert decision.desired == 4
    assert dict(state.signal_failures) == {"running": 1}


@pytest.mark.parametrize(
    ("current", "fallback"),
    # One replica too: only 0 is left alone (HPA does nothing at 0); from 1, HPA's default scale-up (4 pods a
    # step) reaches 5 at once.
    [pytest.param(4, 7, id="four-replicas"), pytest.param(1, 5, id="one-replica")],
)
def test_a_trigger_falls_back_once_its_own_count_passes_the_threshold(current: int, fallback: int) -> None:
    cp = compiled(QUEUE, metricSafety={"fallback": {"failureThreshold": 2, "replicas": fallback}})
    state = PolicyState()
    got = []
    for i in range(4):
        decision, state = run(cp, observe(current, waiting=None, running=fresh(1.0)), state, NOW + 15 * i)
        got.append((decision.desired, decision.reason))
    assert got == [(current, Reason.METRICS_UNKNOWN)] * 2 + [(fallback, Reason.FALLBACK)] * 2
    assert dict(state.signal_failures) == {"waiting": 4}


def test_a_usable_trigger_asking_for_more_wins_over_the_fallback() -> None:
    # HPA takes the highest count over triggers: fallback 3 for `waiting`, `running` (Value 10) asks for 8.
    policy: dict[str, Any] = {**HPA, "metrics": [
        *HPA["metrics"], {"signal": "running", "type": "External", "target": {"type": "Value", "value": 10}}]}
    cp = compiled(policy, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 3}})
    state = PolicyState()
    obs = observe(4, waiting=None, running=fresh(20.0))
    for i in range(3):
        decision, state = run(cp, obs, state, NOW + 15 * i)
    assert decision.desired == 8
    assert "higher than the fallback (static) to 3" in decision.message


def test_the_fallback_count_is_rate_limited_and_stabilized_like_any_decision() -> None:
    # The reported outage: 30 replicas, fallback 8. Before: 30 -> 8 at the first fallback. Now the scale-down
    # window (60 s here) holds first, then the rate policy (2 pods per 60 s) paces every step.
    behavior = DOWN_TWO_PER_MINUTE
    cp = compiled({**QUEUE, "behavior": behavior}, max_replicas=40,
                  metricSafety={"fallback": {"failureThreshold": 1, "replicas": 8}})
    state, current, counts = PolicyState(), 30, []
    for i in range(60):
        now = NOW + 15 * i
        decision, state = run(cp, observe(current, waiting=SignalReading(math.nan, now), running=fresh(1.0, now)),
                              state, now)
        assert current - decision.desired <= 2, (i, current, decision.desired, decision.message)
        current = decision.desired
        counts.append(current)
    # Unknown at 0 s (count 1, not past the threshold); the window holds from the first recommendation (0 s).
    assert counts[:4] == [30] * 4, "nothing moves inside the stabilization window"
    assert all(counts[i] - counts[i + 3] <= 2 for i in range(len(counts) - 3)), "at most 2 pods per 60 s"
    assert counts[-1] == 8, "the fallback does act, at the allowed pace"


def test_the_fallback_never_wakes_a_target_from_zero() -> None:
    # Scale-to-zero enabled, at zero, every signal failing for long past the threshold: HPA (and so KEDA's
    # fallback) does nothing at zero; only a known active activation signal wakes the target.
    cp = compiled(QUEUE, min_replicas=0, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 5}},
                  scaleToZero={"enabled": True, "activation": {"signal": "waiting", "threshold": 0}})
    state = PolicyState()
    for i in range(10):
        decision, state = run(cp, observe(0, waiting=None, running=None), state, NOW + 15 * i)
        assert decision.desired == 0, (i, decision.message)
        assert decision.reason is not Reason.FALLBACK


def test_a_falling_back_trigger_keeps_the_target_from_scaling_to_zero() -> None:
    # Activation known and idle for long, a work signal failing: KEDA scales to zero only without errors.
    cp = compiled(QUEUE, min_replicas=0, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 2}},
                  scaleToZero={"enabled": True, "idleSeconds": 30,
                               "activation": {"signal": "running", "threshold": 1}})
    state = PolicyState()
    for i in range(10):
        decision, state = run(cp, observe(2, waiting=None, running=fresh(0.0, NOW + 15 * i)), state, NOW + 15 * i)
        assert decision.desired == 2, (i, decision.message)


def test_a_type_without_a_behavior_stage_falls_back_through_hpas_default_behavior() -> None:
    # kpa smooths inside its own windows, which the fallback count bypasses: HPA's default 300 s scale-down
    # stabilization applies instead, then its 100 % per 15 s.
    cp = compiled(KPA, max_replicas=20, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 2}})
    state, counts = PolicyState(), []
    for i in range(25):
        decision, state = run(cp, observe(10, waiting=None), state, NOW + 15 * i)
        counts.append(decision.desired)
    assert counts[:21] == [10] * 21
    assert counts[-1] == 2


def test_usable_hpa_metrics_scaling_down_still_count_beside_the_fallback() -> None:
    # Upstream HPA holds rather than scale down on the usable metrics while another is unknown; once the unknown
    # one falls back, HPA sees KEDA's fallback metric (3) beside running's own count (ceil(5 / 10 x 8) = 4) and
    # takes the higher: 4, never 3.
    policy: dict[str, Any] = {**HPA, "metrics": [
        *HPA["metrics"], {"signal": "running", "type": "External", "target": {"type": "Value", "value": 10}}]}
    cp = compiled(policy, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 3}})
    state = PolicyState()
    for i in range(30):  # past the 300 s scale-down window, at 100 % per 15 s
        decision, state = run(cp, observe(8, waiting=None, running=fresh(5.0, NOW + 15 * i)), state, NOW + 15 * i)
    assert decision.desired == 4
    assert "fallback (static) to 3" in decision.message
    assert "the usable signals ask for more" in decision.message


def test_difference_the_fallback_count_is_not_put_through_the_tolerance_band() -> None:
    # KEDA's fallback metric makes HPA compute a ratio of 11/10 = 1.1, inside the 0.1 tolerance: HPA would keep
    # 10. Here the fallback count is used as it is: 11. Documented.
    cp = compiled(HPA, max_replicas=20, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 11}})
    state = PolicyState()
    for i in range(3):
        decision, state = run(cp, observe(10, waiting=None), state, NOW + 15 * i)
    assert decision.desired == 11


# --- added where a mutation run (scripts/mutate.sh, docs/testing.md) showed the rule untested ------------------


def test_the_fallback_message_names_every_falling_trigger_and_its_count() -> None:
    # "Why did it scale?" during an outage: each trigger past the threshold, why it is unknown, for how long.
    cp = compiled(QUEUE, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 7}})
    state = PolicyState()
    for i in range(3):
        decision, state = run(cp, observe(4, waiting=None, running=SignalReading(math.nan, NOW)), state,
                              NOW + 15 * i)
    assert (decision.desired, decision.reason) == (7, Reason.FALLBACK)
    assert decision.message.startswith(
        "fallback (static) to 7: unknown for more than failureThreshold 1 evaluations: "
        "waiting (missing: no reading for this signal; 3 evaluations), running (invalid: NaN; 3 evaluations)"
    ), decision.message


def test_usable_triggers_asking_exactly_the_fallback_count_leave_the_fallback_in_charge() -> None:
    # HPA takes the highest count; on a tie the fallback decides, and the decision says so (not the usable
    # trigger's reason), whether the usable triggers would hold (running asks 3 = current) ...
    policy: dict[str, Any] = {**HPA, "metrics": [
        *HPA["metrics"], {"signal": "running", "type": "External", "target": {"type": "Value", "value": 10}}]}
    cp = compiled(policy, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 3}})
    state = PolicyState()
    for i in range(3):
        decision, state = run(cp, observe(3, waiting=None, running=fresh(10.0, NOW + 15 * i)), state, NOW + 15 * i)
    assert (decision.desired, decision.reason) == (3, Reason.FALLBACK)
    assert decision.message.startswith("fallback (static) to 3"), decision.message
    # ... or would scale down to it (running asks ceil(8 x 3.75 / 10) = 3 < 8): never "ask for more".
    state = PolicyState()
    for i in range(30):  # past the 300 s scale-down window, at 100 % per 15 s
        decision, state = run(cp, observe(8, waiting=None, running=fresh(3.75, NOW + 15 * i)), state, NOW + 15 * i)
    assert (decision.desired, decision.reason) == (3, Reason.FALLBACK)
    assert "ask for more" not in decision.message, decision.message


def _no_request_in_the_window(now: float) -> SignalReading:
    """A latency histogram as the one per-pod rule reads it when both ready pods report fresh buckets that hold no
    request in the window: at night, or between bursts."""
    zero = {0.5: 0.0, 2.0: 0.0, math.inf: 0.0}
    raw = SignalReading(
        None, now - 1.0, "test",
        per_replica={"pod-0": 0.0, "pod-1": 0.0}, pod_times={"pod-0": now - 1.0, "pod-1": now - 2.0},
        buckets={"pod-0": zero, "pod-1": zero},
    )
    rule = PodRule(max_age_s=60.0, how="sum", min_fraction=None, workers=False, quantile=0.99)
    return combine_pods(rule, raw, ReplicaStatus(2, 2, 0), now)


def test_a_histogram_with_no_request_in_its_window_is_unknown_but_never_falls_back() -> None:
    # KEDA's fallback is for a trigger in error; here every pod answered, fresh, and saw no request, so there is
    # no latency to take a quantile of. Before, a TTFT or queue-time quantile counted as a failure and a quiet
    # target was raised to the fallback count after failureThreshold evaluations (found on the yardstick's TPU
    # code rows, docs/slo.md "Session 11").
    cp = compiled(HPA, metricSafety={"fallback": {"failureThreshold": 1, "replicas": 9}})
    state = PolicyState()
    for i in range(6):
        now = NOW + 15 * i
        decision, state = run(cp, observe(2, waiting=_no_request_in_the_window(now)), state, now)
        assert decision.reason is Reason.METRICS_UNKNOWN, i  # still unknown: never read as idle
        assert decision.desired == 2, i
        assert "no observations" in decision.message
    assert state.signal_failures == ()
    # The same trigger in error falls back after the threshold, and an empty window resets its count as a usable
    # reading does.
    got = []
    for i, reading in enumerate([None, _no_request_in_the_window(NOW), None, None]):
        now = NOW + 100 + 15 * i
        decision, state = run(cp, observe(2, waiting=reading), state, now)
        got.append(decision.desired)
    # The 4th: waiting failed twice in a row, past failureThreshold 1; 2 -> 9 paced by HPA's behavior to 4.
    assert got == [2, 2, 2, 4]
    assert "fallback" in decision.message
