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
import operator
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain, islice
from pathlib import Path
from typing import Any, NamedTuple

from autoscaler.core.specbase import MAX_REPLICAS
from autoscaler.policyfile import files

#: The file (query_range dump) or column (CSV) holding the recorded replica count (the count set on the target).
REPLICAS = "replicas"
#: The file or column holding the recorded ready replicas (``autoscaler record`` saves both from kube-state-metrics).
READY = "replicas_ready"
#: The CSV column holding the sample time.
TIMESTAMP = "timestamp"

#: Unix seconds this large are in the year 5138: such a "timestamp" is in milliseconds.
MILLISECONDS_FROM = 1e11

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TraceError(Exception):
    """Bad trace input; the message is one line with the file and the row or JSON path."""


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one time series, sorted by strictly increasing time.

    The readers hold them as ``array('d')`` (8 bytes a sample, where a list of floats takes 32): a 13-week trace
    at 15 s is 728,000 samples a signal. CSV columns without gaps share one ``times`` array. Read-only."""

    times: Sequence[float]
    values: Sequence[float]
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
    #: The recorded ready replicas, if any (without them, every recorded replica is taken as ready).
    ready: Series | None = None


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
    return Series(array("d", times), array("d", [func(by_time[t]) for t in times]))


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
    if value > MAX_REPLICAS:
        raise ValueError(f"{text!r} is more replicas than a policy may have ({MAX_REPLICAS:,})")
    return value


#: Rows of a CSV trace are read about this many bytes at a time (a chunk's text and numbers are held at once).
CSV_CHUNK_BYTES = 1 << 20


def _plain_rows(
    lines: list[str], width: int, ts_col: int, columns: list[tuple[int, str]], last_t: float
) -> list[list[float]] | None:
    """The columns of ``lines`` when every one is a plain row: ``width`` fields, none empty, no quote, every field
    a number ``float`` reads (as the row-by-row path reads it), the timestamps unix seconds (finite, not
    milliseconds) increasing from ``last_t``, the replica counts whole and not negative. None for anything else,
    and the row-by-row path then reads these lines, with its messages."""
    text = "".join(lines)
    if '"' in text or "\r" in text or not text.endswith("\n"):
        return None
    separators = width - 1
    if any(line.count(",") != separators for line in lines):
        return None
    try:
        numbers = list(map(float, text.replace("\n", ",").split(",")[:-1]))
    except ValueError:
        return None  # a gap, a time in RFC 3339, or not a number: the row-by-row path says which
    table = [numbers[i::width] for i in range(width)]
    times = table[ts_col]
    if not all(-MILLISECONDS_FROM < t < MILLISECONDS_FROM for t in times):
        return None
    if not times[0] > last_t or not all(map(operator.lt, times, islice(times, 1, None))):
        return None
    for i, name in columns:
        if name in (REPLICAS, READY) and not all(0 <= v <= MAX_REPLICAS and v.is_integer() for v in table[i]):
            return None
    return table


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
        base = 0  # the lines before the reader's first (read a chunk at a time)
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise TraceError(f"{where}: empty file; expected a header row with a '{TIMESTAMP}' column")
            names = [h.strip() for h in header]
            lowered = [n.lower() for n in names]
            if TIMESTAMP not in lowered:
                other = next((name for sep, name in (("\t", "tabs"), (";", "semicolons")) if len(names) == 1
                              and sep in names[0] and TIMESTAMP in names[0].lower().split(sep)), None)
                if other is not None:  # a TSV file, or a spreadsheet saved with a decimal-comma locale
                    raise TraceError(f"{where}:1: the columns are separated by {other}; replay reads comma-separated "
                                     "values (with a decimal point): save the file as CSV")
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
            # Every column's values; its own times only once it has a gap (until then they are ``stamps``).
            stamps = array("d")
            samples: dict[str, tuple[array[float] | None, array[float]]] = {n: (None, array("d")) for _, n in columns}
            last_t = -math.inf
            # Plain chunks of rows (numbers only, no gap, no quote) are read a chunk at a time (``_plain_rows``);
            # from the first chunk that is not, every row is read by the csv module, one at a time, as before.
            base = reader.line_num
            rows: Iterable[list[str]] = ()
            while True:
                lines = handle.readlines(CSV_CHUNK_BYTES)
                if not lines:
                    break
                plain = _plain_rows(lines, len(names), ts_col, columns, last_t)
                if plain is None:
                    reader = csv.reader(chain(lines, handle))
                    rows = reader
                    break
                base += len(lines)
                last_t = plain[ts_col][-1]
                stamps.extend(plain[ts_col])
                for i, name in columns:
                    samples[name][1].extend(plain[i])
            for row in rows:
                line = base + reader.line_num
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
                stamps.append(t)
                for i, name in columns:
                    cell = row[i].strip()
                    if not cell:
                        own, values = samples[name]
                        if own is None:  # the first gap: from here on this column keeps its own times
                            samples[name] = (array("d", stamps[: len(values)]), values)
                        continue
                    try:
                        value = _replica_count(cell) if name in (REPLICAS, READY) else _number(cell)
                    except ValueError as exc:
                        msg = str(exc) if name in (REPLICAS, READY) else f"{cell!r} is not a number"
                        raise TraceError(f"{where}:{line}: column '{name}': {msg}") from None
                    own, values = samples[name]
                    if own is not None:
                        own.append(t)
                    values.append(value)
        except csv.Error as exc:
            raise TraceError(f"{where}:{base + reader.line_num}: not valid CSV: {exc}") from None
        except UnicodeDecodeError:
            raise TraceError(f"{where}: not UTF-8 text; expected a CSV file") from None
    if last_t == -math.inf:
        raise TraceError(f"{where}: no data rows after the header")
    replicas = ready = None
    signals: dict[str, RawSignal] = {}
    for _, name in columns:
        own, values = samples[name]
        times = stamps if own is None else own
        if name == REPLICAS:
            replicas = Series(times, values) if times else None
        elif name == READY:
            ready = Series(times, values) if times else None
        else:
            signals[name] = RawSignal(name, f"{where}:{name}", (Series(times, values),))
    return Trace(signals, replicas, f"{where}:{REPLICAS}", (where,), ready)


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
    """The series of one ``/api/v1/query_range`` response (``resultType: matrix``).

    A dump is one JSON document, which ``json.loads`` turns into a list and three objects per sample (about 150
    bytes each: 110 MiB for 13 weeks of one signal at 15 s). ``_columnar`` reads a well-formed dump straight into
    arrays instead (8 bytes a value); anything it does not recognise as plainly valid goes through the full parse
    below, which gives every error its JSON path.
    """
    where = str(path)
    try:
        text = files.read_text(path, limit=files.MAX_TRACE_BYTES, what="Prometheus query_range JSON")
    except files.InputError as exc:
        raise TraceError(str(exc)) from None
    fast = _columnar(text)
    series = fast if fast is not None else _parsed(text, where)
    seen: set[tuple[tuple[str, str], ...]] = set()
    for i, one in enumerate(series):
        if one.labels in seen:  # Prometheus returns each series once: two dumps pasted together, say
            shown = ", ".join(f"{k}={v}" for k, v in one.labels)
            raise TraceError(f"{where}: $.data.result[{i}]: the series {{{shown}}} appears twice; each is read once, "
                             "so which one holds its samples cannot be told (its values would be added)")
        seen.add(one.labels)
    return series


def _parsed(text: str, where: str) -> list[Series]:
    """The series of a query_range dump parsed whole, every problem named by its JSON path."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:  # Python's decoder recurses once per nesting level
        raise TraceError(f"{where}: nested too deeply for a query_range dump") from None
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
        times: array[float] = array("d")
        nums: array[float] = array("d")
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


# A ``values`` list as Prometheus writes it: ``[[1700000000,"0.5"],[1700000015.5,"NaN"],...]``. The time is a JSON
# number; the value a string holding no quote, backslash, control character, comma or bracket (any number
# Prometheus writes; the comma and bracket kept out so a chunk boundary, ``],``, cannot fall inside one). No sign
# on the time: a negative one (before 1970) goes the full way.
_NUMBER = r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_TEXT = r'[^"\\\x00-\x1f,\[\]]*'
_PAIR = rf'\[\s*{_NUMBER}\s*,\s*"{_TEXT}"\s*\]'
_VALUES = re.compile(rf'("values")\s*:\s*(\[\s*(?:{_PAIR}\s*,\s*)*+{_PAIR}\s*\]|\[\s*\])')
_PAIR_PARTS = re.compile(rf'\[\s*({_NUMBER})\s*,\s*"({_TEXT})"\s*\]')
#: Characters of text parsed at a time (a chunk's matches are transient: about 100 bytes a sample).
_CHUNK = 1 << 20


def _columnar(text: str) -> list[Series] | None:
    """The series of a well-formed query_range dump, each ``values`` list read straight into two arrays; None
    when anything is not plainly valid (the caller then parses the whole document, which names the problem).

    1. every ``"values": [...]`` list of pairs is found with one regular expression (no backtracking: possessive)
       and replaced by a numbered placeholder string;
    2. what is left (status, labels: small) is parsed with ``json.loads``; it must be a matrix whose every series'
       ``values`` is the next placeholder, in order, each used once (so a match inside a string cannot pass);
    3. each list's pairs become floats chunk by chunk; the times must be finite unix seconds, strictly increasing,
       and the values numbers (``float`` accepts what the full parse accepts: ``NaN``, ``+Inf``...).
    """
    spans: list[tuple[int, int]] = []
    parts: list[str] = []
    pos = 0
    for k, m in enumerate(_VALUES.finditer(text)):
        parts.append(text[pos:m.start(2)])
        parts.append(f'"\\u0000values {k}"')  # a control character: no dump holds it unescaped in a label
        spans.append(m.span(2))
        pos = m.end(2)
    if not spans:
        return None
    parts.append(text[pos:])
    try:
        doc = json.loads("".join(parts))
    except (ValueError, RecursionError):
        return None
    del parts
    try:
        if doc["status"] != "success" or doc["data"]["resultType"] != "matrix":
            return None
        result = doc["data"]["result"]
        if not isinstance(result, list) or len(result) != len(spans):
            return None
        for k, item in enumerate(result):
            if item["values"] != f"\x00values {k}" or not isinstance(item.get("metric", {}), dict):
                return None
    except (TypeError, KeyError):
        return None
    if not result:
        return None
    out: list[Series] = []
    for item, (start, end) in zip(result, spans, strict=True):
        times: array[float] = array("d")
        values: array[float] = array("d")
        try:
            for chunk in _chunks(text, start, end):
                pairs = _PAIR_PARTS.findall(chunk)
                times.extend(map(float, (t for t, _ in pairs)))
                values.extend(map(float, (v for _, v in pairs)))
        except ValueError:  # a value that is not a number
            return None
        if times and (min(times) <= -MILLISECONDS_FROM or max(times) >= MILLISECONDS_FROM):
            return None  # milliseconds, or an infinite time: the full parse says which sample
        if not all(map(operator.lt, times, islice(times, 1, None))):
            return None  # not increasing
        metric = item.get("metric", {})
        out.append(Series(times, values, tuple(sorted((str(k), str(v)) for k, v in metric.items()))))
    return out


def _chunks(text: str, start: int, end: int) -> Iterator[str]:
    """``text[start:end]`` in pieces of about ``_CHUNK`` characters, each cut just after a pair's ``]``."""
    pos = start
    while pos < end:
        cut = text.find("],", min(pos + _CHUNK, end), end)
        stop = end if cut < 0 else cut + 1
        yield text[pos:stop]
        pos = stop


class _Named(NamedTuple):
    """A JSON file's signal: the name its file gives it, and its series."""

    name: str
    series: list[Series]


def _json_signal(path: Path) -> _Named:
    name = path.stem
    if not _NAME.match(name):
        raise TraceError(f"{path}: the file name must be the signal name (letters, digits, '_'), e.g. backlog.json")
    return _Named(name, read_query_range(path))


# ---------------------------------------------------------------- --metrics: files and directories


def load(paths: Iterable[str | Path]) -> Trace:
    """Read every ``--metrics`` path: a CSV, a query_range JSON file (named after its signal) or a directory
    of such JSON files (``replicas.json`` holding the recorded replica count). Signals must not repeat."""
    signals: dict[str, RawSignal] = {}
    replicas: Series | None = None
    replicas_origin = ""
    ready: Series | None = None
    files: list[str] = []

    def add(trace: Trace) -> None:
        nonlocal replicas, replicas_origin, ready
        for name, sig in trace.signals.items():
            if name in signals:
                raise TraceError(f"{sig.origin}: signal {name!r} is already read from {signals[name].origin}")
            signals[name] = sig
        if trace.replicas is not None:
            if replicas is not None:
                raise TraceError(f"{trace.replicas_origin}: recorded replicas are already read from {replicas_origin}")
            replicas, replicas_origin = trace.replicas, trace.replicas_origin
        if trace.ready is not None:
            if ready is not None:
                raise TraceError(f"{', '.join(trace.files)}: recorded ready replicas are read twice")
            ready = trace.ready
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
    return Trace(signals, replicas, replicas_origin, tuple(files), ready)


def _json_file(path: Path) -> Trace:
    named = _json_signal(path)
    name, series = named.name, named.series
    if name in (REPLICAS, READY):
        if len(series) > 1:
            shown = ", ".join("{" + ",".join(f"{k}={v}" for k, v in s.labels) + "}" for s in series[:3])
            raise TraceError(
                f"{path}: $.data.result: {len(series)} series ({shown}...) for the replica count; "
                "which target is it? Filter the query to one Deployment/LeaderWorkerSet"
            )
        for j, v in enumerate(series[0].values):
            if not math.isfinite(v) or v < 0 or v != int(v) or v > MAX_REPLICAS:
                raise TraceError(
                    f"{path}: $.data.result[0].values[{j}][1]: {v!r} is not a replica count (a whole number from 0 "
                    f"to {MAX_REPLICAS:,})"
                )
        if name == READY:
            return Trace({}, None, "", (str(path),), series[0])
        return Trace({}, series[0], str(path), (str(path),))
    return Trace({name: RawSignal(name, str(path), tuple(series))}, None, "", (str(path),))
