"""Reading recorded metric traces: Prometheus ``query_range`` JSON dumps and CSV files.

Every reader returns plain series of ``(timestamp, value)`` samples in unix seconds; nothing here judges a
value (NaN, +Inf and negative values are kept as they are, so the core marks them unknown exactly as it
would in production). Bad input raises ``TraceError`` with one line naming the file and the row (CSV) or
the JSON path, never a traceback.

Several series in one query_range result (one per pod, say) are combined per timestamp, by the signal's
``aggregate`` when the policy sets one, else by its ``scope``: ``total`` signals are summed, ``perReplica``
signals averaged. The recorded replica count must be a single series: several are ambiguous (which target?)
and are an error.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autoscaler.policyfile import files

#: The file (query_range dump) or column (CSV) holding the recorded replica count.
REPLICAS = "replicas"
#: The CSV column holding the sample time.
TIMESTAMP = "timestamp"

#: Unix seconds this large are in the year 5138: such a "timestamp" is in milliseconds.
MILLISECONDS_FROM = 1e11

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TraceError(Exception):
    """Bad trace input; the message is one line with the file and the row or JSON path."""


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one time series, sorted by strictly increasing time."""

    times: list[float]
    values: list[float]
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RawSignal:
    """One signal as read: one series from a CSV column, one or more from a query_range result."""

    name: str
    origin: str  # the file (and column) it came from, for messages and the ``source`` of readings
    series: tuple[Series, ...]


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything read from ``--metrics``: raw signals by name and the recorded replica count, if any."""

    signals: dict[str, RawSignal]
    replicas: Series | None
    replicas_origin: str
    files: tuple[str, ...]


# ---------------------------------------------------------------- combining several series into one


def total(values: Iterable[float]) -> float:
    """The exact sum (``math.fsum``); NaN when +Inf meets -Inf (fsum raises there: no sum exists, and the core
    judges NaN unknown), ±Inf when finite values overflow."""
    values = list(values)
    try:
        return math.fsum(values)
    except ValueError:
        return math.nan
    except OverflowError:
        return sum(values)


def _sum(values: Sequence[float]) -> float:
    return total(values)


def _avg(values: Sequence[float]) -> float:
    return total(values) / len(values)


AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {"sum": _sum, "avg": _avg, "max": max, "min": min}


def combine(raw: RawSignal, how: str) -> Series:
    """One series from several: at each timestamp, ``how`` over the series that have a sample then.

    A series absent at a timestamp (a pod not yet started or gone) does not count; a NaN in any series
    makes the combined value NaN, which the core judges unknown (never read as zero).
    """
    if len(raw.series) == 1:
        return raw.series[0]
    func = AGGREGATES[how]
    by_time: dict[float, list[float]] = {}
    for s in raw.series:
        for t, v in zip(s.times, s.values, strict=True):
            by_time.setdefault(t, []).append(v)
    times = sorted(by_time)
    return Series(times, [func(by_time[t]) for t in times])


# ---------------------------------------------------------------- CSV


def parse_timestamp(text: str) -> float:
    """Unix seconds (``1700158546.68``) or RFC 3339 (``2023-11-16T18:15:46Z``) to unix seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"timestamp {text!r} is not a finite number")
        if abs(value) >= MILLISECONDS_FROM:
            raise ValueError(f"timestamp {text!r} looks like milliseconds; give unix seconds (divide by 1000)")
        return value
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"timestamp {text!r} is neither unix seconds nor RFC 3339 (e.g. 2023-11-16T18:15:46Z)"
        ) from None
    if when.tzinfo is None:
        # Guessing the zone would shift every sample by hours without a word: refuse instead.
        raise ValueError(f"timestamp {text!r} has no time zone; add Z or an offset such as +00:00")
    return when.timestamp()


def _number(text: str) -> float:
    # float() also takes "NaN", "+Inf", "-Inf" (Prometheus spellings); those are kept for the core to judge.
    return float(text)


def _replica_count(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(f"{text!r} is not a replica count (a whole number ≥ 0)")
    return value


def read_csv(path: Path) -> Trace:
    """A CSV with a ``timestamp`` column, one column per signal and optionally ``replicas``.

    An empty cell means no sample for that signal at that time (a gap), not zero.
    """
    where = str(path)
    try:
        # Regular files only, bounded; a BOM (spreadsheet exports) is not a column name.
        handle = files.open_text(path, limit=files.MAX_TRACE_BYTES, what="CSV trace")
    except files.InputError as exc:
        raise TraceError(str(exc)) from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise TraceError(f"{where}: empty file; expected a header row with a '{TIMESTAMP}' column")
            names = [h.strip() for h in header]
            lowered = [n.lower() for n in names]
            if TIMESTAMP not in lowered:
                raise TraceError(f"{where}:1: no '{TIMESTAMP}' column in the header (columns: {', '.join(names)})")
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise TraceError(f"{where}:1: repeated column(s) {', '.join(dupes)}")
            ts_col = lowered.index(TIMESTAMP)
            for i, n in enumerate(names):
                if i != ts_col and not _NAME.match(n):
                    raise TraceError(
                        f"{where}:1: column {n!r} is not a signal name (letters, digits, '_'; not starting "
                        "with a digit)"
                    )
            columns = [(i, n) for i, n in enumerate(names) if i != ts_col]
            if not columns:
                raise TraceError(f"{where}:1: no signal columns besides '{TIMESTAMP}'")
            samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for _, n in columns}
            last_t = -math.inf
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(names):
                    raise TraceError(f"{where}:{line}: {len(row)} fields, the header has {len(names)}")
                try:
                    t = parse_timestamp(row[ts_col])
                except ValueError as exc:
                    raise TraceError(f"{where}:{line}: {exc}") from None
                if t <= last_t:
                    raise TraceError(
                        f"{where}:{line}: timestamp {row[ts_col].strip()!r} is not after the previous row's; "
                        "rows must be sorted by time without repeats"
                    )
                last_t = t
                for i, name in columns:
                    cell = row[i].strip()
                    if not cell:
                        continue
                    try:
                        value = _replica_count(cell) if name == REPLICAS else _number(cell)
                    except ValueError as exc:
                        msg = str(exc) if name == REPLICAS else f"{cell!r} is not a number"
                        raise TraceError(f"{where}:{line}: column '{name}': {msg}") from None
                    times, values = samples[name]
                    times.append(t)
                    values.append(value)
        except csv.Error as exc:
            raise TraceError(f"{where}:{reader.line_num}: not valid CSV: {exc}") from None
        except UnicodeDecodeError:
            raise TraceError(f"{where}: not UTF-8 text; expected a CSV file") from None
    if last_t == -math.inf:
        raise TraceError(f"{where}: no data rows after the header")
    replicas = None
    signals: dict[str, RawSignal] = {}
    for _, name in columns:
        times, values = samples[name]
        if name == REPLICAS:
            replicas = Series(times, values) if times else None
        else:
            signals[name] = RawSignal(name, f"{where}:{name}", (Series(times, values),))
    return Trace(signals, replicas, f"{where}:{REPLICAS}", (where,))


# ---------------------------------------------------------------- Prometheus query_range JSON


def _expect(value: Any, kind: type | tuple[type, ...], where: str, path: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise TraceError(f"{where}: {path}: expected {what}, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def read_query_range(path: Path) -> list[Series]:
    """The series of one ``/api/v1/query_range`` response (``resultType: matrix``)."""
    where = str(path)
    try:
        text = files.read_text(path, limit=files.MAX_TRACE_BYTES, what="Prometheus query_range JSON")
    except files.InputError as exc:
        raise TraceError(str(exc)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    _expect(doc, dict, where, "$", "the query_range response object")
    status = doc.get("status")
    if status != "success":
        detail = f": {doc.get('errorType', '')} {doc.get('error', '')}".rstrip() if "error" in doc else ""
        raise TraceError(f"{where}: $.status: is {status!r}, not 'success'{detail}")
    data = _expect(doc.get("data"), dict, where, "$.data", "an object")
    kind = data.get("resultType")
    if kind != "matrix":
        hint = " (an instant query; dump /api/v1/query_range instead)" if kind == "vector" else ""
        raise TraceError(f"{where}: $.data.resultType: is {kind!r}, expected 'matrix'{hint}")
    result = _expect(data.get("result"), list, where, "$.data.result", "a list of series")
    if not result:
        raise TraceError(f"{where}: $.data.result: no series (the query matched nothing in that range)")
    out: list[Series] = []
    for i, item in enumerate(result):
        base = f"$.data.result[{i}]"
        _expect(item, dict, where, base, "a series object")
        metric = _expect(item.get("metric", {}), dict, where, f"{base}.metric", "an object of labels")
        values = _expect(item.get("values"), list, where, f"{base}.values", 'a list of [time, "value"]')
        times: list[float] = []
        nums: list[float] = []
        last = -math.inf
        for j, pair in enumerate(values):
            here = f"{base}.values[{j}]"
            if not isinstance(pair, list) or len(pair) != 2:
                raise TraceError(f'{where}: {here}: expected [time, "value"], got {json.dumps(pair)[:60]}')
            t, v = pair
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
                raise TraceError(f"{where}: {here}[0]: expected unix seconds, got {json.dumps(t)[:40]}")
            if abs(t) >= MILLISECONDS_FROM:
                raise TraceError(f"{where}: {here}[0]: time {t} looks like milliseconds; give unix seconds")
            if not isinstance(v, str):
                raise TraceError(f"{where}: {here}[1]: expected the value as a string, got {_kind(v)}")
            try:
                num = _number(v)
            except ValueError:
                raise TraceError(f"{where}: {here}[1]: {v[:40]!r} is not a number") from None
            if t <= last:
                raise TraceError(f"{where}: {here}[0]: time {t} is not after the previous sample's")
            last = float(t)
            times.append(float(t))
            nums.append(num)
        labels = tuple(sorted((str(k), str(val)) for k, val in metric.items()))
        out.append(Series(times, nums, labels))
    return out


def _json_signal(path: Path) -> tuple[str, list[Series]]:
    name = path.stem
    if not _NAME.match(name):
        raise TraceError(f"{path}: the file name must be the signal name (letters, digits, '_'), e.g. backlog.json")
    return name, read_query_range(path)


# ---------------------------------------------------------------- --metrics: files and directories


def load(paths: Iterable[str | Path]) -> Trace:
    """Read every ``--metrics`` path: a CSV, a query_range JSON file (named after its signal) or a directory
    of such JSON files (``replicas.json`` holding the recorded replica count). Signals must not repeat."""
    signals: dict[str, RawSignal] = {}
    replicas: Series | None = None
    replicas_origin = ""
    files: list[str] = []

    def add(trace: Trace) -> None:
        nonlocal replicas, replicas_origin
        for name, sig in trace.signals.items():
            if name in signals:
                raise TraceError(f"{sig.origin}: signal {name!r} is already read from {signals[name].origin}")
            signals[name] = sig
        if trace.replicas is not None:
            if replicas is not None:
                raise TraceError(f"{trace.replicas_origin}: recorded replicas are already read from {replicas_origin}")
            replicas, replicas_origin = trace.replicas, trace.replicas_origin
        files.extend(trace.files)

    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
            if not found:
                raise TraceError(f"{path}: no .json files (one query_range dump per signal, named after it)")
            for p in found:
                add(_json_file(p))
        elif not path.exists():
            raise TraceError(f"{path}: no such file or directory")
        elif path.suffix.lower() == ".json":
            add(_json_file(path))
        else:
            add(read_csv(path))
    return Trace(signals, replicas, replicas_origin, tuple(files))


def _json_file(path: Path) -> Trace:
    name, series = _json_signal(path)
    if name == REPLICAS:
        if len(series) > 1:
            shown = ", ".join("{" + ",".join(f"{k}={v}" for k, v in s.labels) + "}" for s in series[:3])
            raise TraceError(
                f"{path}: $.data.result: {len(series)} series ({shown}...) for the replica count; "
                "which target is it? Filter the query to one Deployment/LeaderWorkerSet"
            )
        for j, v in enumerate(series[0].values):
            if not math.isfinite(v) or v < 0 or v != int(v):
                raise TraceError(f"{path}: $.data.result[0].values[{j}][1]: {v!r} is not a replica count")
        return Trace({}, series[0], str(path), (str(path),))
    return Trace({name: RawSignal(name, str(path), tuple(series))}, None, "", (str(path),))
