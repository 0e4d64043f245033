"""Replay outputs: scale events and flaps, the summary numbers, decisions.jsonl lines."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from autoscaler.core.model import (
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SignalState,
    SignalValue,
    TargetKind,
    TargetRef,
)
from autoscaler.replay import report
from autoscaler.replay.engine import Replay, Step

TARGET = TargetRef(TargetKind.DEPLOYMENT, "llm")


def replay_of(counts: list[int], *, start: int = 2, period: float = 15.0, unknown_at: tuple[int, ...] = ()) -> Replay:
    """A whatif-like replay whose decisions go ``start`` → counts[0] → counts[1] ..."""
    steps = []
    current = start
    for i, n in enumerate(counts):
        ok = i not in unknown_at
        sig = SignalValue(
            "q", SignalState.OK if ok else SignalState.UNKNOWN, 1.0 if ok else None, "" if ok else "stale"
        )
        reason = Reason.SCALE_UP if n > current else Reason.SCALE_DOWN if n < current else Reason.STEADY
        decision = ScaleDecision(TARGET, current, n, reason, f"{current} → {n}", {"q": sig})
        steps.append(
            Step(i * period, ReplicaStatus(current, current), 3, decision, {"q": SignalReading(1.0, i * period)})
        )
        current = n
    return Replay("p", TARGET.key, "whatif", period, steps)


@pytest.mark.parametrize(
    ("counts", "window", "ups", "downs", "flaps"),
    [
        pytest.param([2, 2, 2], 300.0, 0, 0, 0, id="steady"),
        pytest.param([3, 4, 5], 300.0, 3, 0, 0, id="same-direction-is-no-flap"),
        pytest.param([3, 2, 3, 2], 300.0, 2, 2, 3, id="every-reversal-within-window"),
        # 15 s apart: a window of 10 s sees none of the reversals.
        pytest.param([3, 2, 3, 2], 10.0, 2, 2, 0, id="reversals-outside-window"),
        pytest.param([3, 3, 3, 2], 300.0, 1, 1, 1, id="reversal-after-steady-evaluations"),
        pytest.param([3, 3, 3, 2], 30.0, 1, 1, 0, id="reversal-45s-later-window-30s"),
    ],
)
def test_scale_events_and_flaps(counts: list[int], window: float, ups: int, downs: int, flaps: int) -> None:
    summary = report.summarize(replay_of(counts), flap_window_s=window)
    assert (summary["scale_ups"], summary["scale_downs"], summary["flaps"]) == (ups, downs, flaps)


def test_recorded_mode_counts_changes_of_the_wish_not_repeats() -> None:
    # The recorded count stays 2 while the policy keeps asking for 4: one scale-up, not three.
    steps = []
    for i, n in enumerate([2, 4, 4, 4, 2]):
        reason = Reason.SCALE_UP if n > 2 else Reason.STEADY
        decision = ScaleDecision(TARGET, 2, n, reason, "m", {})
        steps.append(Step(i * 15.0, ReplicaStatus(2, 2), 2, decision, {}))
    summary = report.summarize(Replay("p", TARGET.key, "recorded", 15.0, steps))
    assert (summary["scale_ups"], summary["scale_downs"], summary["flaps"]) == (1, 1, 1)


def test_summary_numbers() -> None:
    summary = report.summarize(replay_of([2, 4, 4, 3], unknown_at=(1, 2)), inputs=["t.csv"])
    assert summary["evaluations"] == 4
    assert summary["replica_seconds"] == (2 + 4 + 4 + 3) * 15.0
    assert summary["recorded_replica_seconds"] == 4 * 3 * 15.0
    assert summary["time_at_count_s"] == {"2": 15.0, "3": 15.0, "4": 30.0}
    assert summary["evaluations_with_unknown_signals"] == 2
    assert summary["decisions_by_reason"] == {"Steady": 2, "ScaleDown": 1, "ScaleUp": 1}
    assert summary["start"] == "1970-01-01T00:00:00Z"
    assert summary["end"] == "1970-01-01T00:00:45Z"
    assert summary["inputs"] == ["t.csv"]
    assert (summary["min_replicas"], summary["max_replicas"]) == (2, 4)


def test_decision_lines_are_strict_json(tmp_path: Path) -> None:
    replay = replay_of([2, 5])
    # A NaN that the core refused, and a message that needs escaping.
    sig = SignalValue("q", SignalState.UNKNOWN, None, 'invalid: NaN "quoted"', 0.0)
    bad = ScaleDecision(TARGET, 5, 5, Reason.METRICS_UNKNOWN, "holding 5 → 5\nnext", {"q": sig})
    replay.steps.append(Step(30.5, ReplicaStatus(5, 4, 1), None, bad, {"q": SignalReading(math.nan, 30.0)}))
    path = tmp_path / "decisions.jsonl"
    report.write_decisions(replay, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) for line in lines]
    assert rows[1]["desired"] == 5
    assert rows[1]["time"] == "1970-01-01T00:00:15Z"
    last = rows[2]
    assert last["time"] == "1970-01-01T00:00:30.500Z"
    assert last["unix_time"] == 30.5
    assert last["message"] == "holding 5 → 5\nnext"
    assert last["replicas"] == {"spec": 5, "ready": 4, "starting": 1}
    assert last["recorded"] is None
    assert last["signals"]["q"] == {
        "value": None,
        "state": "unknown",
        "reason": 'invalid: NaN "quoted"',
        "age_s": 0.0,
        "input": "NaN",
    }
    assert last["target"] == "Deployment/default/llm"


def test_table_lists_scale_events_and_flaps() -> None:
    counts = report.tally(replay_of([3, 2, 2]))
    out = io.StringIO()
    report.print_table(counts, counts.summary(), out)
    text = out.getvalue()
    assert "scale-ups 1, scale-downs 1, flaps 1" in text
    assert "1970-01-01T00:00:00Z     2 → 3" in text
    assert "(flap)" in text
    assert len(text.splitlines()) < 20


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(15, "15s", id="seconds"),
        pytest.param(270, "4m30s", id="minutes"),
        pytest.param(3660, "1h01m", id="hours"),
        pytest.param(7 * 86400, "7d0h", id="days"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert report.duration(seconds) == text


def _long_replay() -> Replay:
    replay = replay_of([3])
    step = replay.steps[0]
    words = " ".join(f"signal{i} {i}.5 per replica vs target {i}" for i in range(12))  # ~380 characters
    decision = ScaleDecision(TARGET, 2, 3, Reason.SCALE_UP, words + " END", step.decision.signals)
    return Replay("p", TARGET.key, "whatif", 15.0, [Step(0.0, step.replicas, 3, decision, step.readings)])


@pytest.mark.parametrize("width", [pytest.param(200, id="wide"), pytest.param(100, id="medium"),
                                   pytest.param(60, id="narrow-message-below")])
def test_messages_wrap_to_the_terminal_width_and_are_never_cut(width: int) -> None:
    replay = _long_replay()
    out = io.StringIO()
    counts = report.tally(replay)
    report.print_table(counts, counts.summary(), out, width=width)
    lines = out.getvalue().splitlines()
    start = next(i for i, ln in enumerate(lines) if "ScaleUp" in ln and "→ 3" in ln)
    event = lines[start:start + 1 + next((j for j, ln in enumerate(lines[start + 1:]) if not ln.startswith(" " * 6)),
                                         len(lines))]
    assert all(len(ln) <= width for ln in event), [len(ln) for ln in event]
    joined = " ".join(ln.strip() for ln in event)
    assert replay.steps[0].decision.message in joined  # every word, in order: nothing cut
    assert "…" not in joined


def test_terminal_width_comes_from_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "90")
    counts = report.tally(_long_replay())
    out = io.StringIO()
    report.print_table(counts, counts.summary(), out)
    assert max(len(ln) for ln in out.getvalue().splitlines() if "signal" in ln) <= 90
