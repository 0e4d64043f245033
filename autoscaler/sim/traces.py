"""Request traces: loading, validating and reshaping them for the simulator.

A CSV with a header row (comma-separated; a header holding no comma but tabs or semicolons sets that separator);
three of its columns are read, by name, in any order (other columns are ignored; a column read that appears
twice in the header is refused):

* the Azure LLM inference trace's ``TIMESTAMP,ContextTokens,GeneratedTokens`` (timestamps
  ``YYYY-MM-DD HH:MM:SS.fffffff``, read as UTC), found by those names;
* BurstGPT's ``Timestamp,Request tokens,Response tokens`` (seconds from 0:00 of the trace's first day; its
  other columns ``Model,Total tokens,Log Type`` ignored; HPMLL/BurstGPT README.md, "Schema"), found by those
  names. Its ``BurstGPT_1.csv``/``_2.csv`` keep failed requests with ``Response tokens`` 0: each is read as a
  request with one output token (it arrived and took a prefill);
* ``arrival_s,input_tokens,output_tokens`` (seconds from any origin), found by those names;
* any other layout with its three columns named (``Columns``; ``autoscaler simulate --requests-columns
  ARRIVAL,INPUT,OUTPUT``).

Or JSON Lines (the file's first character other than a blank is ``{``): one object per line, three of its
keys read, other keys ignored:

* Mooncake's ``timestamp``, ``input_length``, ``output_length`` (and ``hash_ids``, ignored): the arrival in
  milliseconds since the first request. Keys: kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl`` and its
  README; the unit: NVIDIA dynamo ``benchmarks/data_generator/README.md`` ("the arrival time (in milliseconds)
  of the request since the first request"), which the traces' 3,000-step timestamps agree with;
* any other keys, named the same way as CSV columns (``--requests-columns``, ``--requests-time-unit``).

A line that is not one JSON object, a key written twice in one object, or a value of the wrong JSON type
(``true``, ``null``, a list) is a bad row.

An arrival is a number (seconds, or ``time_unit`` ``ms``/``us``) or an ISO 8601 date-time (``T`` or a blank
between date and time, any number of fractional digits, an optional ``Z`` or UTC offset; without one, UTC).
Token counts are whole numbers (``374.0`` is 374, as a spreadsheet export writes it). Arrivals are re-based
so the first request arrives at 0. A bad row is an error naming the file and line
(``TraceError``), or, with ``skip_bad_rows``, is dropped and counted. Reshaping (``--time-scale``,
``--rate-scale``, ``--duration``) is a pure function of the trace and a seed, so runs are reproducible.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.policyfile import files

#: Most requests one simulation takes (after --rate-scale and the window): about 50 times the bundled hour of the
#: conversation trace, a few minutes of simulated serving per policy on one core; more says a typo.
MAX_REQUESTS = 1_000_000

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: HPMLL/BurstGPT README.md, "Schema": Timestamp (seconds), Request tokens, Response tokens.
BURSTGPT_HEADER = ("Timestamp", "Request tokens", "Response tokens")
GENERIC_HEADER = ("arrival_s", "input_tokens", "output_tokens")
#: The layouts found by their names, in this order.
KNOWN_HEADERS = {"Azure": AZURE_HEADER, "BurstGPT": BURSTGPT_HEADER, "generic": GENERIC_HEADER}
#: Most tokens one request's prompt or output may count (estimate: ten times the longest context windows models
#: advertise, about 10 million tokens). A count above it is a typo or another unit: a trace with a fifth of its
#: rows at 10^15 tokens made ``simulate`` run for ever (its lower bound walked the replica levels such prefills
#: ask for).
MAX_TOKENS = 100_000_000
#: Seconds per unit of a numeric arrival.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class Columns:
    """The header names of a trace's arrival, prompt-token and output-token columns, and the unit of a numeric
    arrival."""

    arrival: str
    input: str
    output: str
    time_unit: str = "s"

    @classmethod
    def parse(cls, text: str, time_unit: str = "s") -> Columns:
        """``ARRIVAL,INPUT,OUTPUT`` (CSV quoting for a name with a comma); ValueError on anything else."""
        names = next(csv.reader([text]), [])
        if len(names) != 3 or not all(n.strip() for n in names):
            raise ValueError(f"expected three column names ARRIVAL,INPUT,OUTPUT, got {text!r}")
        if time_unit not in TIME_UNITS:
            raise ValueError(f"time unit {time_unit!r}; expected one of {', '.join(TIME_UNITS)}")
        arrival, prompt, output = (n.strip() for n in names)
        if len({arrival, prompt, output}) < 3:
            twice = next(n for n in (arrival, prompt, output) if [arrival, prompt, output].count(n) > 1)
            raise ValueError(f"names the column {twice!r} twice; ARRIVAL, INPUT and OUTPUT are three columns")
        return cls(arrival, prompt, output, time_unit)

    def names(self) -> tuple[str, str, str]:
        return (self.arrival, self.input, self.output)


#: Mooncake's JSON Lines keys and the unit of its ``timestamp`` (module docstring for the sources).
MOONCAKE_KEYS = Columns("timestamp", "input_length", "output_length", "ms")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival: parallel lists (arrival seconds, input tokens, output tokens)."""

    name: str
    arrivals: list[float]
    inputs: list[int]
    outputs: list[int]
    source: str = ""
    skipped_rows: int = 0
    #: How the trace was reshaped from the file, reported in ``summary.json``.
    transforms: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.arrivals)

    @property
    def duration_s(self) -> float:
        """The simulated span: the last arrival (the simulation also drains what is in flight)."""
        return self.arrivals[-1] if self.arrivals else 0.0

    def describe(self) -> dict[str, object]:
        n = len(self)
        span = max(self.duration_s, 1e-9)
        return {
            "name": self.name,
            "source": self.source,
            "requests": n,
            "duration_s": round(self.duration_s, 3),
            "mean_rate_rps": round(n / span, 4) if n > 1 else 0.0,
            "mean_input_tokens": round(sum(self.inputs) / n, 1) if n else 0.0,
            "mean_output_tokens": round(sum(self.outputs) / n, 1) if n else 0.0,
            "skipped_rows": self.skipped_rows,
            **self.transforms,
        }


_DATETIME = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?")


def _parse_datetime(text: str) -> float:
    """An ISO 8601 date-time as unix seconds; the fraction kept to its last digit (the Azure trace has 7, 100 ns,
    beyond ``datetime``'s microseconds); no zone is UTC."""
    found = _DATETIME.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is neither a number of seconds nor a date-time such as 2023-11-16 18:15:46.68")
    whole, frac, zone = found.groups()
    when = datetime.fromisoformat(whole + ("+00:00" if zone in (None, "Z") else zone))
    return when.astimezone(UTC).timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _arrival_parser(unit: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        text = text.strip()
        try:
            return float(text) * unit
        except ValueError:
            return _parse_datetime(text)

    return parse


def _parse_tokens(text: str, column: str) -> int:
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)  # "374.0", as a spreadsheet or a dataframe with gaps writes a count
        except ValueError:
            raise ValueError(f"{column} {text!r} is not a number of tokens") from None
        if not number.is_integer():
            raise ValueError(f"{column} {text!r} is not a whole number of tokens") from None
        value = int(number)
    if value < 0:
        raise ValueError(f"{column} is negative ({value})")
    if value > MAX_TOKENS:
        # 1e300 written out is 400 characters (and a 400-digit integer is beyond a float)
        shown = f"{value:,}" if value <= 10**18 else f"a {len(str(value))}-digit number"
        raise ValueError(f"{column} {shown} is more tokens than any model takes (at most {MAX_TOKENS:,})")
    return value


def _columns_of(header: tuple[str, ...], columns: Columns | None, where: str) -> tuple[Columns, list[int]]:
    """The columns read and their positions in the header; TraceError naming what is missing."""
    if columns is None:
        for known in KNOWN_HEADERS.values():
            if all(name in header for name in known):
                columns = Columns(*known)
                break
        else:
            layouts = "; ".join(f"{','.join(names)} ({name})" for name, names in KNOWN_HEADERS.items())
            raise TraceError(
                f"{where}:1: unknown header {','.join(header) or '(empty file)'}; expected the columns "
                f"{layouts}, or JSON Lines with Mooncake's keys {','.join(MOONCAKE_KEYS.names())}; "
                "or name yours with --requests-columns ARRIVAL,INPUT,OUTPUT"
            )
    repeated = [name for name in columns.names() if header.count(name) > 1]
    if repeated:  # which of the two is meant cannot be told; the first was read silently
        raise TraceError(f"{where}:1: column {', '.join(repr(r) for r in repeated)} appears more than once in the "
                         "header; rename or drop the other")
    missing = [name for name in columns.names() if name not in header]
    if missing:
        raise TraceError(
            f"{where}:1: no column {', '.join(repr(m) for m in missing)} in the header "
            f"({','.join(header) or 'empty file'}); --requests-columns names the arrival, prompt-token and "
            "output-token columns as they are written"
        )
    return columns, [header.index(name) for name in columns.names()]


def load(path: str | Path, *, skip_bad_rows: bool = False, columns: Columns | None = None) -> Trace:
    """Read a trace file; raise ``TraceError`` (with FILE:LINE) on bad input. ``columns``: which columns hold the
    arrival and the token counts (default: the Azure or the generic layout, found by their header names)."""
    p = Path(path)
    try:
        text = files.read_text(p, limit=files.MAX_TRACE_BYTES, what="trace (CSV or JSON Lines)")
    except files.InputError as exc:
        raise TraceError(str(exc)) from None
    first = text.lstrip()[:1]
    if first == "[":
        raise TraceError(f"{p}:1: a JSON array; write the requests as JSON Lines (one object per line) or as CSV")
    if first == "{":
        return _trace(p, *_jsonl(text, p, columns or MOONCAKE_KEYS, skip_bad_rows))
    return _trace(p, *_csv(text, p, columns, skip_bad_rows))


def _csv(
    text: str, p: Path, columns: Columns | None, skip_bad_rows: bool
) -> tuple[list[tuple[float, int, int]], int]:
    """CSV with a header row; ``columns`` names the columns read (default: a layout found by its names)."""
    lines = text.splitlines()
    rows = csv.reader(lines, delimiter=_delimiter(lines[0] if lines else ""))
    header = tuple(h.strip() for h in next(rows, []))
    used, (at, prompt_at, output_at) = _columns_of(header, columns, str(p))
    parse_time = _arrival_parser(TIME_UNITS[used.time_unit])
    width = len(header)
    records: list[tuple[float, int, int]] = []
    skipped = 0
    for lineno, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            if len(row) != width:
                raise ValueError(f"expected {width} columns as in the header, got {len(row)}")
            t = parse_time(row[at])
            if not math.isfinite(t):
                raise ValueError(f"arrival {row[at]!r} is not a finite number")
            records.append((t, _parse_tokens(row[prompt_at], used.input), _parse_tokens(row[output_at], used.output)))
        except ValueError as exc:
            if skip_bad_rows:
                skipped += 1
                continue
            raise TraceError(
                f"{p}:{lineno}: bad row {','.join(row)!r}: {exc}; fix the row or pass --skip-bad-rows"
            ) from None
    return records, skipped


def _delimiter(header: str) -> str:
    """A comma, or the tab or semicolon of a header line holding no comma (a TSV file; a spreadsheet saved with
    a decimal-comma locale writes semicolons). A header's names hold no separator, so this is unambiguous."""
    if "," in header:
        return ","
    return next((d for d in ("\t", ";") if d in header), ",")


def _jsonl(text: str, p: Path, used: Columns, skip_bad_rows: bool) -> tuple[list[tuple[float, int, int]], int]:
    """JSON Lines: each non-blank line one object; ``used`` names the keys read (default Mooncake's)."""
    parse_time = _arrival_parser(TIME_UNITS[used.time_unit])
    records: list[tuple[float, int, int]] = []
    skipped = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = _json_object(line, used.names())
            missing = [k for k in used.names() if k not in row]
            if missing:
                raise ValueError(
                    f"no key {', '.join(repr(k) for k in missing)} (keys: {', '.join(row) or 'none'}); "
                    "--requests-columns names the arrival, prompt-token and output-token keys"
                )
            t = _json_arrival(row[used.arrival], parse_time, TIME_UNITS[used.time_unit])
            if not math.isfinite(t):
                raise ValueError(f"arrival {row[used.arrival]!r} is not a finite number")
            records.append((t, _json_tokens(row[used.input], used.input), _json_tokens(row[used.output], used.output)))
        except ValueError as exc:
            if skip_bad_rows:
                skipped += 1
                continue
            shown = line if len(line) <= 200 else line[:200] + "..."
            raise TraceError(f"{p}:{lineno}: bad row {shown!r}: {exc}; fix the row or pass --skip-bad-rows") from None
    return records, skipped


def _json_object(line: str, read: tuple[str, ...]) -> dict[str, object]:
    """One line's object; ValueError for anything else, or for a key it reads written twice (``json`` would keep
    the last silently)."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in items:
            if key in out and key in read:
                twice.append(key)
            out[key] = value
        return out

    try:
        row = json.loads(line, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:  # 100,000 nested brackets: Python's decoder recurses per level
        raise ValueError("nested too deeply (a request is one flat object)") from None
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, expected one object per line")
    if twice:
        raise ValueError(f"key {twice[0]!r} written twice in one object")
    return row


def _json_arrival(value: object, parse_time: Callable[[str], float], unit: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"arrival {json.dumps(value)} is neither a number nor a date-time string")
    if isinstance(value, str):
        return parse_time(value)
    return float(value) * unit


def _json_tokens(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key} {json.dumps(value)} is not a number of tokens")
    return _parse_tokens(value if isinstance(value, str) else repr(value), key)


def _trace(p: Path, records: list[tuple[float, int, int]], skipped: int) -> Trace:
    if not records:
        raise TraceError(f"{p}: no usable requests (skipped {skipped} bad rows)")
    # Files are normally sorted; a stable sort makes an unsorted one usable without reordering ties.
    records.sort(key=lambda r: r[0])
    t0 = records[0][0]
    return Trace(
        name=p.stem,
        arrivals=[r[0] - t0 for r in records],
        inputs=[r[1] for r in records],
        outputs=[max(1, r[2]) for r in records],
        source=str(p),
        skipped_rows=skipped,
    )


def reshape(
    trace: Trace,
    *,
    time_scale: float = 1.0,
    rate_scale: float = 1.0,
    duration_s: float | None = None,
    start_s: float = 0.0,
    seed: int = 0,
) -> Trace:
    """Compress time, scale the arrival rate and cut a window, in that order.

    ``time_scale`` X divides every arrival time by X (the same requests, X× faster). ``rate_scale`` X keeps
    the time axis and the shape of the traffic but multiplies the number of requests: each request is kept
    ``floor(X)`` times plus once more with probability ``X - floor(X)``; every extra copy arrives at a
    uniformly random point of the gap to the next original arrival (token counts are those of the
    original), so bursts stay bursts. ``start_s``/``duration_s`` then keep only that window.
    """
    if not (0 < time_scale < math.inf and 0 < rate_scale < math.inf):
        raise TraceError("--time-scale and --rate-scale must be positive and finite")
    rng = random.Random(seed)
    arrivals = [a / time_scale for a in trace.arrivals]
    end = math.inf if duration_s is None else start_s + duration_s
    # Bounded before anything is built: copies arrive before the next original, so the originals in the window
    # (and the one just before it) times the rate is what the window will hold. --rate-scale 1e9 used to run
    # out of memory after 28 s.
    originals = sum(1 for a in arrivals if start_s <= a < end) + 1
    expected = originals * rate_scale
    if expected > MAX_REQUESTS:
        raise TraceError(
            f"--rate-scale {rate_scale:g} would make about {expected:,.0f} requests in the window; the simulator "
            f"takes at most {MAX_REQUESTS:,} (lower --rate-scale, or shorten --duration)"
        )
    out: list[tuple[float, int, int]] = []
    whole, frac = int(rate_scale), rate_scale - int(rate_scale)
    n = len(arrivals)
    for i, t in enumerate(arrivals):
        gap = (arrivals[i + 1] - t) if i + 1 < n else 0.0
        copies = whole + (1 if rng.random() < frac else 0)
        for c in range(copies):
            # The first copy keeps its arrival so rate_scale 1 is the identity.
            out.append((t if c == 0 else t + rng.random() * gap, trace.inputs[i], trace.outputs[i]))
    out.sort(key=lambda r: r[0])
    out = [r for r in out if start_s <= r[0] < end]
    if not out:
        raise TraceError(
            f"no requests left in the window start {start_s:g}s, duration {duration_s}s "
            f"(the trace spans {arrivals[-1]:.0f}s after --time-scale)"
        )
    transforms = {"time_scale": time_scale, "rate_scale": rate_scale, "start_s": start_s}
    if duration_s is not None:
        transforms["duration_limit_s"] = duration_s
    return Trace(
        name=trace.name,
        arrivals=[r[0] - start_s for r in out],
        inputs=[r[1] for r in out],
        outputs=[r[2] for r in out],
        source=trace.source,
        skipped_rows=trace.skipped_rows,
        transforms=transforms,
    )


def rate_series(trace: Trace, bin_s: float, end_s: float) -> list[float]:
    """Arrivals per second in consecutive bins of ``bin_s`` from 0 to ``end_s``."""
    nbins = max(1, math.ceil(end_s / bin_s))
    counts = [0] * nbins
    for a in trace.arrivals:
        counts[min(nbins - 1, int(a / bin_s))] += 1
    return [c / bin_s for c in counts]
