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
import re
import shutil
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TextIO

import orjson

from autoscaler.core.model import Reason, SignalState
from autoscaler.replay.engine import Block, Replay, Step

DEFAULT_FLAP_WINDOW_S = 300.0
#: The table shows at most this many scale events; decisions.jsonl has all of them.
TABLE_EVENTS = 40


def rfc3339(t: float) -> str:
    """Unix seconds as RFC 3339 in UTC, with milliseconds only when the time has a fraction."""
    day, secs = divmod(t, 86400.0)
    whole = int(secs)
    frac = secs - whole
    if frac == 0:
        return f"{_date(int(day))}T{_clock(whole)}Z"
    return f"{_date(int(day))}T{_clock(whole)}.{min(int(frac * 1000 + 0.5), 999):03d}Z"


@functools.lru_cache(maxsize=64)
def _date(day: int) -> str:
    # One datetime per day instead of per line: a week of 15 s evaluations formats 40,320 times.
    return datetime.fromtimestamp(day * 86400.0, UTC).strftime("%Y-%m-%d")


@functools.cache
def _clock(second_of_day: int) -> str:
    # At most 86,400 of them; a week of evaluations every 15 s repeats each of its 5,760 seven times.
    hh, rest = divmod(second_of_day, 3600)
    mm, ss = divmod(rest, 60)
    return f"{hh:02d}:{mm:02d}:{ss:02d}"


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


class Info(Protocol):
    """What is replayed, known before the first evaluation (``engine.Stream`` and ``engine.Replay`` both say it)."""

    @property
    def policy(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def period_s(self) -> float: ...
    @property
    def notes(self) -> list[str]: ...


class Tally:
    """The summary and the scale events, counted one evaluation at a time (``add``): a few counters, the previous
    scale event and the first ``TABLE_EVENTS`` events for the table; never the evaluations themselves."""

    def __init__(self, info: Info, *, flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> None:
        self.info = info
        self.flap_window_s = flap_window_s
        self.evaluations = 0
        self.first: float | None = None
        self.last: float | None = None
        #: The first TABLE_EVENTS scale events (all are in decisions.jsonl).
        self.events: list[ScaleEvent] = []
        self.ups = 0
        self.downs = 0
        self.flaps = 0
        self._previous: int | None = None  # the previous evaluation's desired count
        self._last_event: ScaleEvent | None = None
        self._at_count: Counter[int] = Counter()
        self._by_reason: Counter[Reason] = Counter()
        self._unknown = 0
        self._desired_sum = 0
        self._recorded_seconds = 0.0
        self._recorded_known = True

    def add(self, step: Step) -> None:
        d = step.decision
        desired = d.desired
        if self._previous is None:
            self.first = step.time
            self._previous = d.current  # the first evaluation is compared with the current count
        self.last = step.time
        self.evaluations += 1
        if desired != self._previous:
            self._event(step, self._previous)
            self._previous = desired
        self._at_count[desired] += 1
        self._by_reason[d.reason] += 1
        self._desired_sum += desired
        ok = SignalState.OK
        for v in d.signals.values():
            if v.state is not ok:
                self._unknown += 1
                break
        if step.recorded is None:
            self._recorded_known = False
        else:
            self._recorded_seconds += step.recorded * self.info.period_s

    def add_block(self, block: Block) -> None:
        """``add`` for every evaluation of ``block`` (the bulk path): the same counts, every signal known."""
        d = block.decided
        desired, times = d.desired, block.times
        if not times:
            return
        if self._previous is None:
            self.first = times[0]
            self._previous = d.current[0]
        self.last = times[-1]
        self.evaluations += len(times)
        previous = self._previous
        reasons, messages = d.reasons, d.messages
        for k, want in enumerate(desired):
            if want != previous:
                self._scale_event(times[k], previous, want, reasons[k], messages[k])
                previous = want
        self._previous = previous
        self._at_count.update(desired)
        self._by_reason.update(reasons)
        self._desired_sum += sum(desired)
        if block.recorded is None:
            self._recorded_known = False
        else:
            period = self.info.period_s
            seconds = self._recorded_seconds
            for recorded in block.recorded:  # one at a time, as add sums them (the same float rounding)
                seconds += recorded * period
            self._recorded_seconds = seconds

    def _event(self, step: Step, before: int) -> None:
        d = step.decision
        self._scale_event(step.time, before, d.desired, d.reason, d.message)

    def _scale_event(self, time: float, before: int, after: int, reason: Reason, message: str) -> None:
        up = after > before
        last = self._last_event
        flap = last is not None and last.up != up and time - last.time <= self.flap_window_s
        event = ScaleEvent(time, before, after, reason.value, message, flap)
        self._last_event = event
        if up:
            self.ups += 1
        else:
            self.downs += 1
        self.flaps += flap
        if len(self.events) < TABLE_EVENTS:
            self.events.append(event)

    def resume(self, previous: int) -> None:
        """Count the evaluations that follow one whose desired count was ``previous`` (for ``join``)."""
        self._previous = previous

    def part(self) -> dict[str, Any]:
        """What ``join`` needs of this tally (everything but ``info``), to send from another process."""
        return {k: v for k, v in vars(self).items() if k != "info"}

    def join(self, later: dict[str, Any]) -> None:
        """Count after this tally's evaluations those of ``later`` (``part`` of a tally of the evaluations that
        follow, started with ``_previous`` the desired count before its first): the same counts as one tally of
        all. Its first scale event is a flap when it reverses this tally's last one within the window (the later
        tally could not know); replica-seconds add exactly only as whole numbers (the caller checks)."""
        if not later["evaluations"]:
            return
        events: list[ScaleEvent] = later["events"]
        last = self._last_event
        if events and last is not None:
            first = events[0]
            if last.up != first.up and first.time - last.time <= self.flap_window_s:
                events[0] = ScaleEvent(first.time, first.before, first.after, first.reason, first.message, True)
                self.flaps += 1
                if later["_last_event"] is not None and later["_last_event"].time == first.time:
                    later["_last_event"] = events[0]
        if self.first is None:
            self.first = later["first"]
        self.last = later["last"]
        self.evaluations += later["evaluations"]
        self.events.extend(events[: TABLE_EVENTS - len(self.events)])
        self.ups += later["ups"]
        self.downs += later["downs"]
        self.flaps += later["flaps"]
        self._previous = later["_previous"]
        self._last_event = later["_last_event"] or self._last_event
        self._at_count.update(later["_at_count"])
        self._by_reason.update(later["_by_reason"])
        self._unknown += later["_unknown"]
        self._desired_sum += later["_desired_sum"]
        self._recorded_seconds += later["_recorded_seconds"]
        self._recorded_known = self._recorded_known and later["_recorded_known"]

    @property
    def scale_events(self) -> int:
        return self.ups + self.downs

    def summary(self, inputs: Iterable[str] = ()) -> dict[str, Any]:
        """The numbers of ``summary.json``."""
        info = self.info
        period = info.period_s
        reasons = {reason.value: n for reason, n in self._by_reason.items()}
        some = self.first is not None
        return {
            "policy": info.policy,
            "target": info.target,
            "mode": info.mode,
            "inputs": list(inputs),
            "start": rfc3339(self.first) if self.first is not None else None,
            "end": rfc3339(self.last) if self.last is not None else None,
            "evaluation_period_s": period,
            "evaluations": self.evaluations,
            "scale_ups": self.ups,
            "scale_downs": self.downs,
            "flaps": self.flaps,
            "flap_window_s": self.flap_window_s,
            "replica_seconds": self._desired_sum * period,
            "recorded_replica_seconds": self._recorded_seconds if self._recorded_known and some else None,
            "min_replicas": min(self._at_count, default=None),
            "max_replicas": max(self._at_count, default=None),
            "time_at_count_s": {str(n): c * period for n, c in sorted(self._at_count.items())},
            "evaluations_with_unknown_signals": self._unknown,
            "decisions_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            "notes": list(info.notes),
        }


def tally(replay: Replay, *, flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> Tally:
    """The tally of a replay kept in memory (``engine.run``)."""
    counts = Tally(replay, flap_window_s=flap_window_s)
    for step in replay.steps:
        counts.add(step)
    return counts


def summarize(
    replay: Replay, *, flap_window_s: float = DEFAULT_FLAP_WINDOW_S, inputs: Iterable[str] = ()
) -> dict[str, Any]:
    """The numbers of ``summary.json`` of a replay kept in memory."""
    return tally(replay, flap_window_s=flap_window_s).summary(inputs)


def _json_value(value: float | None) -> float | str | None:
    """A number as ``decisions.jsonl`` holds it: finite as a float, None as null, and (JSON has no NaN or
    Infinity) non-finite values spelled as Prometheus does, so the file stays strict JSON."""
    if value is None:
        return None
    if math.isfinite(value):
        return float(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _age(age: float) -> float:
    """``round(age, 3)``; a whole number of seconds (the usual age) is its own rounding."""
    if age.__class__ is float and age.is_integer():
        return age
    return round(age, 3)


def decision_record(step: Step, target: str) -> dict[str, Any]:
    """One evaluation as the JSON object of its ``decisions.jsonl`` line (every value JSON-ready)."""
    d = step.decision
    r = step.replicas
    readings = step.readings
    signals: dict[str, dict[str, Any]] = {}
    for name, v in d.signals.items():
        value = v.value
        # A finite float (the usual value) as is; anything else as _json_value spells it.
        entry: dict[str, Any] = {
            "value": value if value.__class__ is float and value - value == 0.0 else _json_value(value),
            "state": v.state._value_,  # the enum's value without the ``value`` property's cost
        }
        if v.reason:
            entry["reason"] = v.reason
        if v.age_s is not None:
            entry["age_s"] = _age(v.age_s)
        reading = readings.get(name)
        if reading is not None and reading.value is not None and value != reading.value:
            # What was read, when the core did not take it as is (stale, NaN, negative...).
            entry["input"] = _json_value(reading.value)
        signals[name] = entry
    return {
        "time": rfc3339(step.time),
        "unix_time": step.time,
        "target": target,
        "current": d.current,
        "desired": d.desired,
        "reason": d.reason._value_,
        "message": d.message,
        "replicas": {"spec": r.spec, "ready": r.ready, "starting": r.starting},
        "recorded": step.recorded,
        "signals": signals,
    }


def _time_texts(times: list[float]) -> tuple[list[bytes], list[bytes]]:
    """``rfc3339`` of each time in two parts, the date and the clock (the text between ``T`` and ``Z``), as UTF-8
    bytes, with each distinct date and whole second formatted once."""
    import numpy as np  # noqa: PLC0415 - the bulk path's, already imported

    days, seconds = np.divmod(np.asarray(times, dtype=np.float64), 86400.0)  # Python's float divmod, elementwise
    whole = seconds.astype(np.int64)
    if bool(np.all(seconds == whole)):
        distinct, where = np.unique(days, return_inverse=True)
        dates = np.array([_date(int(day)).encode() for day in distinct.tolist()], dtype=object)[where].tolist()
        return dates, list(map(_clock_bytes, whole.tolist()))
    dates, clocks = [], []
    for t in times:
        day, secs = divmod(t, 86400.0)
        dates.append(_date(int(day)).encode())
        second = int(secs)
        frac = secs - second
        clock = _clock(second) if frac == 0 else f"{_clock(second)}.{min(int(frac * 1000 + 0.5), 999):03d}"
        clocks.append(clock.encode())
    return dates, clocks


@functools.cache
def _clock_bytes(second_of_day: int) -> bytes:
    return _clock(second_of_day).encode()


def _json_texts(values: list[float]) -> list[bytes]:
    """Each float as orjson writes it (one call for the whole list; a float's text holds no comma)."""
    return orjson.dumps(values)[1:-1].split(b",") if values else []


def _utf8_lines(texts: list[str]) -> list[bytes]:
    """Each text as UTF-8, with one encoding for all of them where none holds a line break."""
    if not texts:
        return []
    encoded = "\n".join(texts).encode().split(b"\n")
    return encoded if len(encoded) == len(texts) else [t.encode() for t in texts]


#: What orjson escapes in a string: the quote, the backslash and the control characters.
_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def _json_string(text: str) -> str:
    """``text`` as a JSON string, as orjson writes it (non-ASCII kept as is)."""
    if _ESCAPED.search(text) is None:
        return f'"{text}"'
    return orjson.dumps(text).decode()


def decision_line(step: Step, target: str) -> str:
    """One evaluation as a JSON object on one line (strict JSON, non-ASCII kept as is)."""
    return orjson.dumps(decision_record(step, target)).decode()


class DecisionWriter:
    """``decisions.jsonl``, written as the evaluations are made: one JSON object per evaluation, in time order.

    Serialized with ``orjson``: a week at 15 s is 40,320 lines, and it is several times faster than the json
    module or assembling the text by hand. Every value is made JSON-ready first (``decision_record``): orjson
    would write NaN and infinities as null, and ``decisions.jsonl`` spells them ``"NaN"``, ``"+Inf"``, ``"-Inf"``.
    Lines go to the file in batches of ``BATCH`` (one write each), so at most that many are held.
    """

    BATCH = 4096

    def __init__(self, path: Path, target: str) -> None:
        self.target = target
        self._out: BinaryIO = path.open("wb")
        self._lines: list[bytes] = []

    def add(self, step: Step) -> None:
        lines = self._lines
        lines.append(orjson.dumps(decision_record(step, self.target), option=orjson.OPT_APPEND_NEWLINE))
        if len(lines) >= self.BATCH:
            self._out.write(b"".join(lines))
            lines.clear()

    def add_block(self, block: Block) -> None:
        """``add`` for every evaluation of ``block`` (the bulk path): the same lines, byte for byte, each written
        from one template of bytes rather than through a dictionary per line. The numbers are orjson's own text
        (one ``orjson.dumps`` of each column), a message is escaped by orjson where it needs escaping. Bytes, not
        str: a message's arrow makes a str of the whole text two bytes a character, formatted and then encoded
        again (``%`` on bytes did the same lines in about half the time, 2026-12-07)."""
        d = block.decided
        n = len(block.times)
        if not n:
            return
        dates, clocks = _time_texts(block.times)
        # Messages are written between quotes as they are where none can need escaping (the scan says so).
        escape = d.escapes
        recorded = block.recorded
        head = (
            b'{"time":"%sT%sZ","unix_time":%s,"target":' + orjson.dumps(self.target).replace(b"%", b"%%")
            + b',"current":%d,"desired":%d,"reason":"%s","message":' + (b"%s" if escape else b'"%s"')
            + b',"replicas":{"spec":%d,"ready":%d,"starting":%d},"recorded":'
            + (b"null" if recorded is None else b"%d") + b',"signals":{'
        )
        entries = b",".join(
            orjson.dumps(name).replace(b"%", b"%%") + b':{"value":%s,"state":"ok","age_s":%s}'
            for name in block.names
        )
        template = head + entries + b"}}\n"
        reason_texts = {r: r._value_.encode() for r in set(d.reasons)}
        columns: list[list[Any]] = [
            dates,
            clocks,
            _json_texts(block.times),
            d.current,
            d.desired,
            [reason_texts[r] for r in d.reasons],
            [_json_string(m).encode() for m in d.messages] if escape else _utf8_lines(d.messages),
            block.spec,
            block.ready,
            block.starting,
        ]
        if recorded is not None:
            columns.append(recorded)
        wholes = d.whole_ages or (False,) * len(d.ages)
        for values, ages, whole in zip(d.values, d.ages, wholes, strict=True):
            columns.append(_json_texts(values))
            columns.append(_json_texts(ages if whole else [a if a.is_integer() else round(a, 3) for a in ages]))
        self._flush()
        self._out.write(b"".join([template % row for row in zip(*columns, strict=True)]))

    def append(self, path: Path) -> None:
        """The lines another writer wrote to ``path`` (the evaluations after this writer's), after this one's."""
        self._flush()
        with path.open("rb") as part:
            shutil.copyfileobj(part, self._out, 1 << 20)

    def _flush(self) -> None:
        if self._lines:
            self._out.write(b"".join(self._lines))
            self._lines.clear()

    def close(self) -> None:
        """Write what is left and close the file (also after an error: what was evaluated is kept)."""
        try:
            self._flush()
        finally:
            self._out.close()

    def __enter__(self) -> DecisionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_decisions(replay: Replay, path: Path) -> None:
    """``decisions.jsonl`` of a replay kept in memory."""
    with DecisionWriter(path, replay.target) as writer:
        for step in replay.steps:
            writer.add(step)


def write_summary(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


#: Narrowest message column beside the row; on a narrower terminal the message goes below the row instead.
MIN_MESSAGE_WIDTH = 40
_BELOW = "      "


def _wrapped(prefix: str, message: str, width: int) -> str:
    """``prefix`` then ``message`` wrapped to ``width`` columns, continuation lines under the message's start
    (or, on a narrow terminal, the whole message indented below the row): nothing is cut."""
    def wrap(room: int) -> list[str]:
        return textwrap.wrap(message, max(room, 20), break_long_words=False, break_on_hyphens=False) or [""]

    if width - len(prefix) >= MIN_MESSAGE_WIDTH:
        return prefix + ("\n" + " " * len(prefix)).join(wrap(width - len(prefix))) + "\n"
    return prefix.rstrip() + "\n" + "".join(f"{_BELOW}{line}\n" for line in wrap(width - len(_BELOW)))


def print_table(
    counts: Tally, summary: dict[str, Any], out: TextIO, *, width: int | None = None
) -> None:
    """The summary and the scale events (not every evaluation: that is decisions.jsonl), messages wrapped to
    ``width`` columns (default: the terminal's, ``$COLUMNS`` or 80 when not a terminal)."""
    width = width if width is not None else shutil.get_terminal_size((80, 24)).columns
    flap_window_s = counts.flap_window_s
    first, last = counts.first, counts.last
    some = first is not None and last is not None
    span = last - first if first is not None and last is not None else 0.0
    w = out.write
    w(
        f"replay of policy {summary['policy']} ({summary['target']}), mode {summary['mode']}: "
        f"{summary['evaluations']} evaluations every {duration(counts.info.period_s)} over {duration(span)}\n"
    )
    if some:
        w(f"  from {summary['start']} to {summary['end']}\n")
    w(
        f"  scale-ups {summary['scale_ups']}, scale-downs {summary['scale_downs']}, "
        f"flaps {summary['flaps']} (reversals within {duration(flap_window_s)})\n"
    )
    rs = summary["replica_seconds"] / 3600
    rec = summary["recorded_replica_seconds"]
    w(f"  replica-hours {rs:.2f}" + (f" (recorded {rec / 3600:.2f})" if rec is not None else "") + "\n")
    at_count = ", ".join(f"{n}: {duration(s)}" for n, s in summary["time_at_count_s"].items())
    w(f"  time at each count: {at_count}\n")
    w(f"  evaluations with unknown signals: {summary['evaluations_with_unknown_signals']}\n")
    reasons = ", ".join(f"{r} {n}" for r, n in summary["decisions_by_reason"].items())
    w(f"  decisions by reason: {reasons}\n")
    for note in summary["notes"]:
        w(f"  note: {note}\n")
    events = counts.events
    if not events:
        w("no scale events\n")
        return
    if counts.info.mode == "recorded":
        w("\nscale events (recorded mode: the count did not follow, so these are changes of the desired count):\n")
    else:
        w("\nscale events:\n")
    w(f"  {'time':<20}  {'from':>4} → {'to':<4}  {'reason':<18}  message\n")
    for e in events:
        mark = " (flap)" if e.flap else ""
        w(_wrapped(f"  {rfc3339(e.time):<20}  {e.before:>4} → {e.after:<4}  {e.reason:<18}  ", e.message + mark, width))
    if counts.scale_events > len(events):
        w(f"  … {counts.scale_events - len(events)} more scale events in decisions.jsonl\n")
