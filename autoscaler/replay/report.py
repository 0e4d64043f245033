"""What a replay produced: ``decisions.jsonl``, ``summary.json`` and the compact table on stdout.

Definitions (also in ``docs/replay.md``):
  - a *scale event* is an evaluation whose desired count differs from the previous evaluation's desired
    count (the first one is compared with the current count then). In ``whatif`` mode that is exactly a
    change the policy applied; in ``recorded`` mode it is a change of mind, not a repeat of the same wish
    against a recorded count that did not follow;
  - a *flap* is a scale event in the opposite direction of the previous one, within ``flap_window_s``
    (default 300 s, HPA's default scale-down stabilization window) of it;
  - *replica-seconds* integrate the desired count over time (each evaluation's count held for one period).
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from autoscaler.replay.engine import Replay, Step

DEFAULT_FLAP_WINDOW_S = 300.0
#: The table shows at most this many scale events; decisions.jsonl has all of them.
TABLE_EVENTS = 40


def rfc3339(t: float) -> str:
    """Unix seconds as RFC 3339 in UTC, with milliseconds only when the time has a fraction."""
    day, secs = divmod(t, 86400.0)
    date = _date(int(day))
    whole = int(secs)
    hh, rest = divmod(whole, 3600)
    mm, ss = divmod(rest, 60)
    frac = secs - whole
    if frac == 0:
        return f"{date}T{hh:02d}:{mm:02d}:{ss:02d}Z"
    return f"{date}T{hh:02d}:{mm:02d}:{ss:02d}.{min(int(frac * 1000 + 0.5), 999):03d}Z"


@functools.lru_cache(maxsize=64)
def _date(day: int) -> str:
    # One datetime per day instead of per line: a week of 15 s evaluations formats 40,320 times.
    return datetime.fromtimestamp(day * 86400.0, UTC).strftime("%Y-%m-%d")


def duration(seconds: float) -> str:
    """``1d2h``, ``3h05m``, ``4m30s``, ``15s``: short and unambiguous."""
    s = round(seconds)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    time: float
    before: int
    after: int
    reason: str
    message: str
    flap: bool

    @property
    def up(self) -> bool:
        return self.after > self.before


def scale_events(steps: list[Step], flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> list[ScaleEvent]:
    events: list[ScaleEvent] = []
    if not steps:
        return events
    previous = steps[0].decision.current
    for step in steps:
        d = step.decision
        if d.desired == previous:
            continue
        up = d.desired > previous
        last = events[-1] if events else None
        flap = last is not None and last.up != up and step.time - last.time <= flap_window_s
        events.append(ScaleEvent(step.time, previous, d.desired, d.reason.value, d.message, flap))
        previous = d.desired
    return events


def summarize(
    replay: Replay, *, flap_window_s: float = DEFAULT_FLAP_WINDOW_S, inputs: Iterable[str] = ()
) -> dict[str, Any]:
    """The numbers of ``summary.json``."""
    steps = replay.steps
    period = replay.period_s
    events = scale_events(steps, flap_window_s)
    at_count: Counter[int] = Counter()
    reasons: Counter[str] = Counter()
    unknown = 0
    recorded_seconds = 0.0
    recorded_known = True
    for step in steps:
        d = step.decision
        at_count[d.desired] += 1
        reasons[d.reason.value] += 1
        if any(not v.ok for v in d.signals.values()):
            unknown += 1
        if step.recorded is None:
            recorded_known = False
        else:
            recorded_seconds += step.recorded * period
    desired = [s.decision.desired for s in steps]
    return {
        "policy": replay.policy,
        "target": replay.target,
        "mode": replay.mode,
        "inputs": list(inputs),
        "start": rfc3339(steps[0].time) if steps else None,
        "end": rfc3339(steps[-1].time) if steps else None,
        "evaluation_period_s": period,
        "evaluations": len(steps),
        "scale_ups": sum(1 for e in events if e.up),
        "scale_downs": sum(1 for e in events if not e.up),
        "flaps": sum(1 for e in events if e.flap),
        "flap_window_s": flap_window_s,
        "replica_seconds": sum(desired) * period,
        "recorded_replica_seconds": recorded_seconds if recorded_known and steps else None,
        "min_replicas": min(desired, default=None),
        "max_replicas": max(desired, default=None),
        "time_at_count_s": {str(n): c * period for n, c in sorted(at_count.items())},
        "evaluations_with_unknown_signals": unknown,
        "decisions_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "notes": list(replay.notes),
    }


#: JSON string escaping (non-ASCII kept as is: messages use → and ≤); the same function
#: ``json.JSONEncoder(ensure_ascii=False).encode`` calls for a string.
_escape = json.encoder.encode_basestring


def _json_number(value: float | None) -> str:
    if value is None:
        return "null"
    if math.isfinite(value):
        return repr(float(value))
    # JSON has no NaN/Infinity; spell them as Prometheus does so the file stays strict JSON.
    return '"NaN"' if math.isnan(value) else ('"+Inf"' if value > 0 else '"-Inf"')


def _age(age: float) -> str:
    """``repr(round(age, 3))``; a whole number of seconds (the usual age) is its own rounding."""
    if age.__class__ is float and age.is_integer():
        return repr(age)
    return repr(round(age, 3))


def decision_line(step: Step, target: str) -> str:
    """One evaluation as a JSON object on one line.

    Assembled by hand rather than with ``json.dumps`` of a dict: a week at 15 s is 40,320 lines and this is
    several times faster. Strings go through the json module's escaping; signal names need none (the
    spec restricts them to ``[A-Za-z_][A-Za-z0-9_]*``).
    """
    d = step.decision
    r = step.replicas
    readings = step.readings
    parts = []
    for name, v in d.signals.items():
        value = v.value
        # A finite float (the usual value) is its repr; anything else as _json_number spells it.
        number = repr(value) if value.__class__ is float and value - value == 0.0 else _json_number(value)
        entry = f'"{name}":{{"value":{number},"state":"{v.state}"'
        if v.reason:
            entry += f',"reason":{_escape(v.reason)}'
        if v.age_s is not None:
            entry += f',"age_s":{_age(v.age_s)}'
        reading = readings.get(name)
        if reading is not None and reading.value is not None and value != reading.value:
            # What was read, when the core did not take it as is (stale, NaN, negative...).
            entry += f',"input":{_json_number(reading.value)}'
        parts.append(entry + "}")
    recorded = "null" if step.recorded is None else str(step.recorded)
    return (
        f'{{"time":"{rfc3339(step.time)}","unix_time":{step.time!r},"target":{target},'
        f'"current":{d.current},"desired":{d.desired},"reason":"{d.reason}","message":{_escape(d.message)},'
        f'"replicas":{{"spec":{r.spec},"ready":{r.ready},"starting":{r.starting}}},"recorded":{recorded},'
        f'"signals":{{{",".join(parts)}}}}}'
    )


def write_decisions(replay: Replay, path: Path) -> None:
    """One JSON object per evaluation, in time order."""
    target = _escape(replay.target)
    with path.open("w", encoding="utf-8") as out:
        lines: list[str] = []
        for step in replay.steps:
            lines.append(decision_line(step, target))
            if len(lines) >= 4096:
                out.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            out.write("\n".join(lines) + "\n")


def write_summary(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(
    replay: Replay, summary: dict[str, Any], out: TextIO, *, flap_window_s: float = DEFAULT_FLAP_WINDOW_S
) -> None:
    """The summary and the scale events (not every evaluation: that is decisions.jsonl)."""
    steps = replay.steps
    w = out.write
    span = steps[-1].time - steps[0].time if steps else 0.0
    w(
        f"replay of policy {summary['policy']} ({summary['target']}), mode {summary['mode']}: "
        f"{summary['evaluations']} evaluations every {duration(replay.period_s)} over {duration(span)}\n"
    )
    if steps:
        w(f"  from {summary['start']} to {summary['end']}\n")
    w(
        f"  scale-ups {summary['scale_ups']}, scale-downs {summary['scale_downs']}, "
        f"flaps {summary['flaps']} (reversals within {duration(flap_window_s)})\n"
    )
    rs = summary["replica_seconds"] / 3600
    rec = summary["recorded_replica_seconds"]
    w(f"  replica-hours {rs:.2f}" + (f" (recorded {rec / 3600:.2f})" if rec is not None else "") + "\n")
    counts = ", ".join(f"{n}: {duration(s)}" for n, s in summary["time_at_count_s"].items())
    w(f"  time at each count: {counts}\n")
    w(f"  evaluations with unknown signals: {summary['evaluations_with_unknown_signals']}\n")
    reasons = ", ".join(f"{r} {n}" for r, n in summary["decisions_by_reason"].items())
    w(f"  decisions by reason: {reasons}\n")
    for note in summary["notes"]:
        w(f"  note: {note}\n")
    events = scale_events(steps, flap_window_s)
    if not events:
        w("no scale events\n")
        return
    if replay.mode == "recorded":
        w("\nscale events (recorded mode: the count did not follow, so these are changes of the desired count):\n")
    else:
        w("\nscale events:\n")
    w(f"  {'time':<20}  {'from':>4} → {'to':<4}  {'reason':<18}  message\n")
    for e in events[:TABLE_EVENTS]:
        mark = "  (flap)" if e.flap else ""
        w(f"  {rfc3339(e.time):<20}  {e.before:>4} → {e.after:<4}  {e.reason:<18}  {_clip(e.message, 90)}{mark}\n")
    if len(events) > TABLE_EVENTS:
        w(f"  … {len(events) - TABLE_EVENTS} more scale events in decisions.jsonl\n")
