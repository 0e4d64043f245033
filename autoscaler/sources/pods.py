"""Direct pod scraping: ``GET /metrics`` on the target's pods (or static endpoints), parse, combine per target.

Sub-second freshness: the value is what the server holds at the moment of the request, so a sample's time is
when the request was sent (or the sample's own timestamp when the exposition carries one), as Prometheus
stamps a scrape's samples at the scrape's start (``scrapeclient``'s docstring cites its scrape loop): its
age counts from then, and a counter's rate divides by the time between two requests, not between two readings
of their answers (a busy event loop reads an answer late, by a lag that differs from scrape to scrape).

- Each URL is fetched once per tick however many signals need it, all concurrently within the deadline.
- The exposition is parsed with prometheus-client's parser (classic text; OpenMetrics when the server
  insists on it), which copes with ``_created`` series, histograms, info metrics, escaped label values and
  missing HELP lines. Garbage, an HTML error page or a non-200 status makes that pod's signals unknown.
- For a LeaderWorkerSet, presets read the leader of each group; per-host presets (``workers``) read every pod.
- Strict on missing parts: when any pod of a target fails or lacks the metric, the target's signal is
  unknown (a queue summed over fewer pods than exist would read as less load than there is).
- A URL that keeps failing opens its own circuit and is left alone for the cooldown.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import aiohttp
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from autoscaler.core import counters
from autoscaler.core.model import SignalReading
from autoscaler.core.signals import aggregate_of, combine
from autoscaler.core.sourcespec import PodsSourceSpec
from autoscaler.sources import presets, scrapeclient
from autoscaler.sources.base import PodRef, Readings, SignalRequest, describe
from autoscaler.sources.circuit import Circuit, PermanentError, TransientError

ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"

#: Circuits of endpoints not scraped for this long are forgotten (pods come and go with new IPs).
FORGET_S = 600.0
#: How often that is looked for: a look walks every endpoint known, and a probe round reads in chunks (at
#: 5,000 endpoints and chunks of 250, looking at every read walked 100,000 entries a round).
FORGET_EVERY_S = 60.0
#: Requests of one read in flight at once (the scrape client's own limit on connections in use).
WORKERS = scrapeclient.MAX_ACTIVE

class Sample(NamedTuple):
    """One sample of an exposition."""

    labels: dict[str, str]
    value: float
    #: The exposition's own timestamp (seconds), if it gave one; else the scrape's time stands for it.
    timestamp: float | None


#: sample name -> its samples, in the exposition's order
Exposition = dict[str, list[Sample]]


class PodValue(NamedTuple):
    """One pod's value of a gauge signal (its series combined) and the oldest explicit sample time, if any."""

    value: float
    timestamp: float | None


class PodRate(NamedTuple):
    """One pod's rate over the window: a counter's, or a histogram's observations with its bucket rates."""

    rate: float
    buckets: dict[float, float] | None


class _Fetched(NamedTuple):
    status: int
    content_type: str
    text: str
    #: The source's clock when the request was sent (``Scrape.sent_at``).
    sent_at: float


class _Planned(NamedTuple):
    """A request to answer from this read's scrapes, and its endpoints as (pod name, URL)."""

    request: SignalRequest
    endpoints: list[tuple[str, str]]


@dataclass(frozen=True)
class Scrape:
    """One endpoint's answer: the parsed samples and when they were asked for, or why there are none."""

    samples: Exposition | None
    #: When the request that got ``samples`` was sent: their time, unless a sample carries its own (the
    #: server's values are as of a moment after it; the answer may be read much later). For a failure, when
    #: it was judged.
    sent_at: float
    error: str | None = None
    #: When the answer was read (None for a failure): the server took its values between ``sent_at`` and this.
    read_at: float | None = None


def parse(text: str, content_type: str = "", wanted: frozenset[str] | None = None) -> Exposition:
    """Parse exposition text into ``{name: [(labels, value, timestamp)]}``; ValueError on garbage.

    Sample names are kept as the server wrote them, which is what Prometheus stores and what a signal's
    ``metric:`` names: a counter family typed without ``_total`` (TGI's Rust exporter writes
    ``# TYPE tgi_request_success counter`` / ``tgi_request_success 5``) keeps its name, where prometheus-client's
    classic-text parser renames its samples ``tgi_request_success_total`` (undone here: ``_bare_counters``).

    ``wanted``: only these sample names are kept (what the signals read; a vLLM server exports hundreds of
    series and a signal reads one or two). Classic text in its plain form (what every serving server writes)
    goes through ``_picked`` (the wanted names' own lines only, found by string search), else ``_plain``, a
    line scanner that gives exactly what prometheus-client's parser gives and
    hands anything else (escapes, exemplars, tabs, garbage) to that parser, which then decides.

    A body that starts with a byte-order mark is refused whole, as Prometheus refuses the scrape (2.42:
    ``"INVALID" is not a valid start token``, ``up`` 0, nothing stored; tests/sources/test_real_formats.py):
    read leniently, the pods source would act on a server that a ``prometheus`` or ``gmp`` source never sees,
    and before this check the mark hid the first sample alone (missing, with the rest read)."""
    if text[:1] == "\ufeff":
        raise ValueError(
            "unparseable exposition: the body starts with a byte-order mark (U+FEFF), which Prometheus refuses too; "
            "the server must write UTF-8 without one"
        )
    if "openmetrics" not in content_type:
        plain = _picked(text, wanted) if wanted is not None else None
        if plain is None:
            plain = _plain(text, wanted)
        if plain is not None:
            return plain
    openmetrics = "openmetrics" in content_type
    parser = parse_openmetrics if openmetrics else parse_text
    # Counter families typed without ``_total`` in classic text: their samples were renamed by the parser.
    typed_bare = set() if openmetrics or "counter" not in text else _bare_counters(text)
    out: Exposition = {}
    try:
        try:
            families = list(parser(text))
        except ValueError as exc:
            if not (openmetrics and str(exc).startswith(_METADATA_AGAIN)):
                raise
            families = list(parser(_metadata_once(text)))
        for family in families:
            bare = family.type == "counter" and family.name in typed_bare
            for s in family.samples:
                name = family.name if bare and s.name == family.name + "_total" else s.name
                if wanted is not None and name not in wanted:
                    continue
                stamp = s.timestamp
                if stamp is not None and not isinstance(stamp, int | float):
                    stamp = float(stamp.sec) + float(stamp.nsec) / 1e9  # OpenMetrics Timestamp
                out.setdefault(name, []).append(Sample(dict(s.labels), float(s.value), stamp))
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError, ... on bad input
        hint = _UNIT_HINT if openmetrics and "Unit does not match" in str(exc) else ""
        raise ValueError(f"unparseable exposition: {exc}{hint}") from None
    return out


#: OpenMetrics 1.0 requires a family's ``# UNIT`` to be a suffix of its name (``x_seconds`` for ``seconds``);
#: prometheus-client's parser and Prometheus (2.42: ``unit not a suffix of metric``, ``up`` 0) both refuse the
#: whole exposition otherwise. What to do, said once in the reading's reason:
_UNIT_HINT = (
    " (OpenMetrics requires a family's # UNIT to end its name, and Prometheus refuses this scrape too: drop the "
    "# UNIT line, rename the metric, or serve the classic text format)"
)


#: prometheus-client's OpenMetrics parser refuses a family's metadata written again (a second ``# HELP``,
#: ``# TYPE`` or ``# UNIT`` line, or one after the family's samples); Prometheus (2.42, tested in
#: tests/sources/test_real_formats.py) stores such a scrape, its samples as written.
_METADATA_AGAIN = ("More than one HELP", "More than one TYPE", "More than one UNIT", "Received metadata after samples")


def _metadata_once(text: str) -> str:
    """``text`` without the metadata lines prometheus-client's OpenMetrics parser refuses and Prometheus passes
    over: a ``# HELP``/``# TYPE``/``# UNIT`` of a family already given one of that kind, or one of the family whose
    samples it follows. The first of each stays."""
    seen: set[tuple[str, str]] = set()
    family, sampled = "", False
    kept: list[str] = []
    for line in text.split("\n"):
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE", "UNIT"):
            key = (parts[1], parts[2])
            if key in seen or (parts[2] == family and sampled):
                continue
            seen.add(key)
            if parts[2] != family:
                family, sampled = parts[2], False
        elif line and not line.startswith("#"):
            sampled = True
        kept.append(line)
    return "\n".join(kept)


def _bare_counters(text: str) -> set[str]:
    """The families a ``# TYPE x counter`` line names without ``_total``, read as prometheus-client's classic-text
    parser reads its comment lines: it renames their samples named ``x`` to ``x_total`` (its OpenMetrics
    munging); Prometheus keeps ``x``."""
    out: set[str] = set()
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("#") and "counter" in line:
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[1] == "TYPE" and parts[3] == "counter" and not parts[2].endswith("_total"):
                out.add(parts[2])
    return out


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
#: A label set without escapes: ``a="x",b="y"`` (blanks after commas and around the set, a trailing comma).
_LABELS = re.compile(r'[ ]*(?:[a-zA-Z][a-zA-Z0-9_]*="[^"\\]*",[ ]*)*(?:[a-zA-Z][a-zA-Z0-9_]*="[^"\\]*")?[ ]*')
_PAIR = re.compile(r'([a-zA-Z][a-zA-Z0-9_]*)="([^"]*)"')


def _plain(text: str, wanted: frozenset[str] | None) -> Exposition | None:
    """The classic text format in its plain form, or None (then prometheus-client's parser reads it).

    Plain: no backslash, tab or ``#`` beyond comment lines; every sample line ``name[{labels}] value
    [timestamp_ms]`` with a valid name and unquoted-free values. As the reference parser does, a value is read
    as an int when it is one (then as a float), a timestamp is in milliseconds; a sample keeps the name it is
    written with (``parse``)."""
    if "\\" in text or "\t" in text:
        return None
    out: Exposition = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) > 2 and parts[1] in ("TYPE", "HELP"):
                if _NAME.fullmatch(parts[2]) is None:
                    return None
                if parts[1] == "TYPE" and len(parts) < 4:
                    return None
            continue
        if "#" in line:
            return None  # an exemplar (or garbage): the reference parser decides
        brace = line.find("{")
        if brace < 0:
            name, _, rest = line.partition(" ")
            labels_text = ""
        else:
            name = line[:brace].rstrip(" ")
            close = line.find("}", brace)
            if close < 0:
                return None
            labels_text, rest = line[brace + 1:close], line[close + 1:]
            if _LABELS.fullmatch(labels_text) is None:
                return None
        if _NAME.fullmatch(name) is None:
            return None
        fields = rest.split()
        if not fields or len(fields) > 2 or "_" in rest:
            return None
        try:  # every line is checked, wanted or not: garbage anywhere makes the whole exposition unreadable
            value = float(_number(fields[0]))
            stamp = _number(fields[1]) / 1000 if len(fields) == 2 else None
        except ValueError:
            return None
        pairs = _PAIR.findall(labels_text) if labels_text else []
        labels = dict(pairs)
        if len(labels) != len(pairs):
            return None  # a label named twice: the reference parser refuses the line
        if wanted is None or name in wanted:
            out.setdefault(name, []).append(Sample(labels, value, stamp))
    return out


# ``_picked``'s grammar for a sample line it reads: a strict subset of what ``_plain`` reads, the form
# prometheus-client, Go's promhttp and the Rust exporters write (no blank before the line or inside the label
# set, one space or more between fields, no escape, tab or ``#``). A line outside it goes to ``_plain``.
_P_VALUE = r'[^"\\{}#\n\r\t]*'
_P_PAIR = rf'[a-zA-Z][a-zA-Z0-9_]*="{_P_VALUE}"'
_P_LINE = re.compile(
    rf"(?:\{{((?:{_P_PAIR}(?:,{_P_PAIR})*,?)?)\}})? +"
    r"([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN)(?: +(-?[0-9]+))? *"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")


def _picked(text: str, wanted: frozenset[str]) -> Exposition | None:
    """``_plain``'s answer for the wanted sample names, read from their own lines only: each name is found
    by a string search (C speed) and only its sample lines are parsed, where ``_plain`` parses every line of
    a vLLM server's ~400-600 (a signal reads one or two). None when a line it would read is outside its
    grammar, when a wanted name could be written in a way it does not find (after blanks), or when no wanted
    name has a sample at all (an error
    page, a server without the metric): then ``_plain`` reads the whole body and says why.

    Unlike ``_plain``, a line the signals do not read is not checked: garbage there no longer makes the read
    values unknown (``tests/sources/test_exposition.py`` states this contract against the reference parser)."""
    out: Exposition = {}
    for name in wanted:
        size = len(name)
        at = text.find(name)
        while at >= 0:
            end = at + size
            start = text.rfind("\n", 0, at) + 1
            after = text[end:end + 1]
            if after in _NAME_CHARS and after:
                pass  # a longer name (``x_bucket`` when ``x`` is wanted)
            elif start < at:
                if text[start:at].isspace():
                    return None  # a line written after blanks: ``_plain`` strips them
            else:
                stop = text.find("\n", end)
                line = text[end:] if stop < 0 else text[end:stop]
                parsed = _P_LINE.fullmatch(line)
                if parsed is None:
                    return None
                labels_text, value, stamp = parsed.groups()
                pairs = _PAIR.findall(labels_text) if labels_text else []
                labels = dict(pairs)
                if len(labels) != len(pairs):
                    return None  # a label named twice
                out.setdefault(name, []).append(
                    Sample(labels, float(_number(value)), _number(stamp) / 1000 if stamp else None)
                )
            at = text.find(name, end)
    return out or None


def _number(token: str) -> float:
    try:
        return int(token)
    except ValueError:
        return float(token)


def _url(spec: PodsSourceSpec, pod: PodRef) -> str | None:
    """The block's scheme/port/path on the pod IP when the block names a port, else the caller's URL."""
    if spec.port is not None and pod.ip:
        host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
        return f"{spec.scheme}://{host}:{spec.port}{spec.path}"
    return pod.url


class PodsSource:
    """Scrapes pods (``pods`` source specs); one instance serves every pods spec."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        circuit_threshold: int = 3,
        cooldown_s: float = 30.0,
        circuit_clock: Callable[[], float] | None = None,
    ) -> None:
        self._clock = clock
        self._threshold = circuit_threshold
        self._cooldown_s = cooldown_s
        self._circuit_clock = circuit_clock
        self._circuits: dict[str, Circuit] = {}
        #: When each URL was last scraped: circuits of URLs gone for ``FORGET_S`` are dropped (pod churn).
        self._last_used: dict[str, float] = {}
        self._session: aiohttp.ClientSession | None = None  # https endpoints (and URLs with credentials)
        self._fast = scrapeclient.ScrapeClient(clock=clock)
        #: aiohttp's requests are stamped when their headers are sent (``_on_headers_sent``).
        self._trace = aiohttp.TraceConfig()
        self._trace.on_request_headers_sent.append(self._on_headers_sent)
        #: HTTP requests sent, for tests that check each URL is fetched once per tick.
        self.fetches = 0
        #: Each counter and histogram bucket read so far, per endpoint: rates are deltas between scrapes.
        self.history = History()
        #: When the circuits and histories of endpoints gone for ``FORGET_S`` are next looked for.
        self._next_forget = -math.inf
        #: The read plan of the last request object read for each (target, signal) (``_plan``): used while the
        #: same object comes back, replaced when a new one does (never kept for a request no longer read).
        self._planned: dict[tuple[str, str], _Plan] = {}

    @property
    def connections(self) -> int:
        """Connections the keep-alive scrape client opened so far (reuse shows as few)."""
        return self._fast.connects

    async def aclose(self) -> None:
        await self._fast.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def circuit(self, url: str) -> Circuit:
        self._last_used[url] = self._clock()
        c = self._circuits.get(url)
        if c is None:
            c = Circuit(threshold=self._threshold, cooldown_s=self._cooldown_s)
            if self._circuit_clock is not None:
                c.clock = self._circuit_clock
            self._circuits[url] = c
        return c

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64), trace_configs=[self._trace]
            )
        return self._session

    async def _on_headers_sent(
        self, _: aiohttp.ClientSession, context: object, __: aiohttp.TraceRequestHeadersSentParams
    ) -> None:
        sent = getattr(context, "trace_request_ctx", None)
        if isinstance(sent, list):
            sent.append(self._clock())

    async def _fetch_aiohttp(self, url: str, timeout_s: float) -> _Fetched:
        # When the request's headers went out (after any wait for one of the connector's connections, and after
        # a redirect: the last one's); the time before asking stands for it if the signal never came.
        sent = [self._clock()]
        try:
            async with self._client().get(
                url, headers={"Accept": ACCEPT}, timeout=aiohttp.ClientTimeout(total=timeout_s),
                trace_request_ctx=sent,  # handed to ``_on_headers_sent``
            ) as resp:
                text = await resp.text(errors="replace")
                return _Fetched(resp.status, resp.headers.get("Content-Type", ""), text, sent[-1])
        except aiohttp.ClientConnectionError as exc:
            raise TransientError(f"cannot reach {url}: {exc}") from None
        except aiohttp.ClientError as exc:
            raise TransientError(f"scraping {url} failed: {exc}") from None

    def _forget_old(self) -> None:
        cutoff = self._clock() - FORGET_S
        for url in [u for u, t in self._last_used.items() if t < cutoff]:
            del self._last_used[url]
            self._circuits.pop(url, None)

    async def _fetch_once(self, url: str, timeout_s: float, wanted: frozenset[str] | None = None) -> Scrape:
        """One request, bounded by the caller (``_scrape_all``'s one deadline) for plain http, by ``timeout_s``
        for aiohttp's."""
        self.fetches += 1
        if scrapeclient.supports(url):
            # Plain http (every pod in a cluster): the keep-alive scrape client, a fraction of aiohttp's CPU.
            try:
                got = await self._fast.get(url, accept=ACCEPT)
            except scrapeclient.ScrapeFailed as exc:
                raise TransientError(f"cannot reach {url}: {exc}") from None
            status, content_type, text, sent_at = got.status, got.content_type, got.text, got.sent_at
        else:
            fetched = await self._fetch_aiohttp(url, timeout_s)
            status, content_type, text, sent_at = fetched
        return self._scraped(url, status, content_type, text, wanted, sent_at)

    def _scraped(
        self, url: str, status: int, content_type: str, text: str, wanted: frozenset[str] | None, sent_at: float
    ) -> Scrape:
        """An answer judged and parsed, stamped with when its request was sent: TransientError for a 5xx,
        PermanentError for another non-200 status or a body that is no exposition."""
        read_at = self._clock()
        if status >= 500:
            raise TransientError(f"{url} answered HTTP {status}")
        if status != 200:
            raise PermanentError(f"{url} answered HTTP {status}")
        try:
            return Scrape(parse(text, content_type, wanted), sent_at, read_at=read_at)
        except ValueError as exc:
            raise PermanentError(f"{url}: {exc}") from None

    async def _attempts(self, url: str, timeout_s: float, wanted: frozenset[str] | None) -> Scrape:
        """A transient failure (connection refused or lost, HTTP 5xx) is tried once more, after a jittered
        pause of at most 50 ms, within the same deadline; the circuit counts the outcome."""
        circuit = self.circuit(url)
        try:
            try:
                got = await self._fetch_once(url, timeout_s, wanted)
            except TransientError:
                await asyncio.sleep(random.uniform(0.0, 0.05))
                got = await self._fetch_once(url, timeout_s, wanted)
        except (TransientError, PermanentError) as exc:
            circuit.failure(str(exc))
            return Scrape(None, self._clock(), str(exc))
        circuit.success()
        return got

    async def _scrape_all(
        self, limits: dict[str, float], wanted: dict[str, frozenset[str] | None]
    ) -> dict[str, Scrape]:
        """Every URL once, concurrently, each within its limit (``min(timeoutSeconds, deadline)``): **one**
        timer per distinct limit (normally one per read), not one or two per request. The URLs of a limit are
        taken by at most ``WORKERS`` tasks in turn (not one task each queueing for a connection slot: at
        thousands of URLs a read, the queue's wake-ups cost more than the requests); what has not answered
        when the timer fires is cancelled (its connection closed, never reused) and reads as unknown."""
        out: dict[str, Scrape] = {}
        groups: dict[float, list[str]] = {}
        for url, limit in limits.items():
            blocked = self.circuit(url).allow()
            if blocked is not None:
                out[url] = Scrape(None, self._clock(), f"{url}: {blocked}")
            else:
                groups.setdefault(limit, []).append(url)

        parts: list[Coroutine[None, None, None]] = []
        for limit, urls in groups.items():
            plain = [u for u in urls if scrapeclient.supports(u)]
            if plain:
                parts.append(self._batched(limit, plain, wanted, out))
            if len(plain) < len(urls):
                served = set(plain)
                parts.append(self._workers(limit, [u for u in urls if u not in served], wanted, out))
        await asyncio.gather(*parts)
        return out

    async def _workers(
        self, limit: float, urls: list[str], wanted: dict[str, frozenset[str] | None], out: dict[str, Scrape]
    ) -> None:
        """``_scrape_all`` for URLs aiohttp serves (https, credentials): at most ``WORKERS`` tasks take them in
        turn, each with ``_attempts``. (No closure here refers to itself: a read's scrapes would then live in a
        reference cycle until the collector ran, thousands of objects a round.)"""
        todo = iter(urls)

        async def worker() -> None:
            for url in todo:
                out[url] = await self._attempts(url, limit, wanted.get(url))

        workers = [asyncio.ensure_future(worker()) for _ in range(min(WORKERS, len(urls)))]
        try:
            _, pending = await asyncio.wait(workers, timeout=limit)
        except BaseException:  # cancelled from outside: nothing is left running behind
            for w in workers:
                w.cancel()
            raise
        for w in pending:
            w.cancel()
        if pending:
            await asyncio.wait(pending)  # let each close its connection
        for url in urls:
            if url not in out:
                err = f"{url}: no answer within the {limit:g}s deadline"
                self.circuit(url).failure(err)
                out[url] = Scrape(None, self._clock(), err)

    async def _batched(
        self, limit: float, urls: list[str], wanted: dict[str, frozenset[str] | None], out: dict[str, Scrape]
    ) -> None:
        """``_scrape_all`` for plain-http URLs: one ``ScrapeClient.fetch_all`` call, each answer judged and
        parsed as it lands (no task per URL). What ``_attempts`` does per URL holds: a transient failure is
        tried once more after a jittered pause of at most 50 ms within the same deadline (in a task of its
        own: failures are few), the circuit counts the outcome, and what has not answered when the limit's
        one timer fires is cut and reads as unknown."""
        again: set[asyncio.Task[None]] = set()
        circuits = self._circuits

        def answered(url: str, got: scrapeclient.Response | scrapeclient.ScrapeFailed) -> None:
            self.fetches += 1
            try:
                if isinstance(got, scrapeclient.ScrapeFailed):
                    raise TransientError(f"cannot reach {url}: {got}")
                scrape = self._scraped(url, got.status, got.content_type, got.text, wanted.get(url), got.sent_at)
            except TransientError:
                task = asyncio.ensure_future(self._second_try(url, limit, wanted.get(url), out))
                again.add(task)
                task.add_done_callback(again.discard)
                return
            except PermanentError as exc:
                circuits[url].failure(str(exc))
                out[url] = Scrape(None, self._clock(), str(exc))
                return
            circuits[url].success()
            out[url] = scrape

        try:
            async with asyncio.timeout(limit):
                await self._fast.fetch_all(urls, accept=ACCEPT, on_answer=answered)
                while again:
                    await asyncio.wait(set(again))
        except TimeoutError:
            pass  # the URLs left read as unknown (below)
        finally:
            for task in again:
                task.cancel()
            if again:
                await asyncio.wait(set(again))  # let each close its connection
        for url in urls:
            if url not in out:
                err = f"{url}: no answer within the {limit:g}s deadline"
                self.circuit(url).failure(err)
                out[url] = Scrape(None, self._clock(), err)

    async def _second_try(self, url: str, limit: float, wanted: frozenset[str] | None, out: dict[str, Scrape]) -> None:
        """``_attempts``' second try for a URL whose first (in ``_batched``) failed transiently."""
        await asyncio.sleep(random.uniform(0.0, 0.05))
        circuit = self.circuit(url)
        try:
            got = await self._fetch_once(url, limit, wanted)
        except (TransientError, PermanentError) as exc:
            circuit.failure(str(exc))
            out[url] = Scrape(None, self._clock(), str(exc))
            return
        circuit.success()
        out[url] = got

    async def scrape(self, url: str, *, timeout_s: float, deadline_s: float) -> Scrape:
        """One endpoint, within ``min(timeout_s, deadline_s)``, with one retry and its circuit; never raises."""
        return (await self._scrape_all({url: min(timeout_s, deadline_s)}, {url: None}))[url]

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        plans: list[_Plan] = []
        out: Readings = {}
        timeouts: dict[str, float] = {}
        wanted: dict[str, frozenset[str]] = {}
        planned = self._planned
        for req in requests:
            hit = planned.get(req.key)
            if hit is None or hit.request is not req:
                if hit is None and len(planned) >= PLANS_KEPT:
                    planned.clear()  # targets or signals gone since: start afresh rather than keep them
                hit = planned[req.key] = _plan(req)
            if hit.known is not None:
                out[req.key] = hit.known
                continue
            for _, url in hit.endpoints:
                if url in timeouts:
                    timeouts[url] = min(timeouts[url], hit.timeout)
                    wanted[url] = wanted[url] | hit.names
                else:
                    timeouts[url] = hit.timeout
                    wanted[url] = hit.names
            plans.append(hit)
        by_url = await self._scrape_all(
            {u: min(t, deadline_s) for u, t in sorted(timeouts.items())}, dict(wanted)
        )
        for hit in plans:
            out[hit.request.key] = _reading(hit, by_url, self.history)
        now = self._clock()
        if now >= self._next_forget:
            self._next_forget = now + FORGET_EVERY_S
            self._forget_old()
            self.history.forget(now - FORGET_S)
        return out


#: Read plans kept (``PodsSource._planned``, one per target and signal) before they are dropped all at once: a
#: probe round reads the same request objects every round (``PolicyObserver.requests`` keeps them per policy and
#: target view); a view read again brings a new request, whose plan replaces its predecessor's.
PLANS_KEPT = 50_000


class _Plan(NamedTuple):
    """What a read does with one request, worked out once per request object (``_plan``): its endpoints as
    (pod name, URL), the sample names to parse, its timeout, the reading's label and combine rule; or the
    reading known before any scrape (``known``: no preset or metric, a pod without a URL, no pods)."""

    request: SignalRequest
    known: SignalReading | None
    endpoints: list[tuple[str, str]]
    names: frozenset[str]
    timeout: float
    label: str
    how: presets.Aggregate
    #: The preset's sample names and its denominator's (``_pod_value``), or the metric's name.
    metrics: tuple[str, ...]
    denominator: tuple[str, ...]
    #: A counter's rate or a histogram's quantile (``_pod_rate``), not a gauge (``_pod_value``).
    cumulative: bool = False
    #: Static endpoints (``endpoints:``): the reading is combined here, not counted against the target's pods.
    static: bool = False


def _plan(req: SignalRequest) -> _Plan:
    spec = req.source
    assert isinstance(spec, PodsSourceSpec)
    label = describe(spec)
    sig = req.signal

    def known(reading: SignalReading) -> _Plan:
        return _Plan(req, reading, [], frozenset(), 0.0, label, "sum", (), ())

    if sig.preset is None and sig.metric is None:
        return known(SignalReading(None, None, label, "the pods source reads 'preset' or 'metric' signals, not PromQL"))
    preset = presets.get(sig.preset) if sig.preset is not None else None
    if spec.endpoints:
        endpoints = [(url, url) for url in spec.endpoints]
    else:
        built = [(p.name, _url(spec, p)) for p in req.endpoints(workers=preset is not None and preset.workers)]
        endpoints = [(name, url) for name, url in built if url is not None]
        no_url = [name for name, url in built if url is None]
        if no_url:  # summing over the pods we can reach would understate the load
            return known(SignalReading(
                None,
                None,
                label,
                f"{len(no_url)}/{len(built)} pods have no metrics URL ({', '.join(no_url[:3])}): "
                "set 'port' in the pods source",
            ))
    if not endpoints:
        return known(SignalReading(None, None, label, "no pods to scrape (none ready, or no endpoints given)"))
    if preset is not None:
        metrics, denominator = preset.metrics, preset.denominator
    else:
        metrics, denominator = (sig.metric or "",), ()
    return _Plan(
        req, None, endpoints, frozenset(_names(req)), spec.timeout_seconds,
        f"{label} {len(endpoints)} endpoint{'s' if len(endpoints) != 1 else ''}", aggregate_of(sig), metrics,
        denominator, cumulative=sig.rate is not None or sig.quantile is not None, static=bool(spec.endpoints),
    )


def _names(req: SignalRequest) -> tuple[str, ...]:
    """The sample names a request reads (``_pod_value``, ``_pod_rate``): only these are parsed."""
    sig = req.signal
    if sig.preset is not None:
        preset = presets.get(sig.preset)
        names = (*preset.metrics, *preset.denominator)
    else:
        names = (sig.metric or "",)
    return tuple(f"{n}_bucket" for n in names) if sig.quantile is not None else names


def _pod_value(plan: _Plan, samples: Exposition) -> PodValue | None:
    """One pod's value of the signal (combined over its series) and the oldest explicit sample time."""
    want = plan.request.signal.labels
    num = _one_per_process(_first_samples(plan.metrics, samples, want))
    if not num:
        return None
    if len(num) == 1 and not plan.denominator:  # the usual case: one series (the same figures as below)
        only = num[0]
        return PodValue(combine([only.value], plan.how), only.timestamp)
    stamps = [s.timestamp for s in num if s.timestamp is not None]
    if plan.denominator:
        den = _one_per_process(_first_samples(plan.denominator, samples, want))
        if not den:
            return None
        total = math.fsum(s.value for s in den)
        value = math.fsum(s.value for s in num) / total if total else math.nan
        stamps += [s.timestamp for s in den if s.timestamp is not None]
    else:
        value = combine([s.value for s in num], plan.how)
    return PodValue(value, min(stamps) if stamps else None)


def _one_per_process(samples: list[Sample]) -> list[Sample]:
    """The copies of one gauge that differ only by ``pid`` (prometheus-client's multiprocess mode, one per
    process: ``presets.PROCESS_LABEL``) read as one sample, their largest, as PromQL's ``max without (pid)``
    does (a NaN copy loses to any number); samples without the label pass unchanged."""
    if len(samples) < 2 or not any(presets.PROCESS_LABEL in s.labels for s in samples):
        return samples  # one sample is its own largest copy
    kept: dict[tuple[tuple[str, str], ...], Sample] = {}
    for s in samples:
        key = presets.process_copy_key(s.labels)
        best = kept.get(key)
        if best is None or presets.copy_wins(s.value, best.value):
            kept[key] = s
    return list(kept.values())


def _first_samples(names: Sequence[str], samples: Exposition, want: dict[str, str]) -> list[Sample]:
    """``_first_spelling``'s samples without their names (``_pod_value``)."""
    present = [name for name in names if name in samples]
    if len(present) == 1 and len(samples[present[0]]) == 1:  # the usual case: one spelling, one series
        (only,) = samples[present[0]]
        return [only] if not want or all(only.labels.get(k) == v for k, v in want.items()) else []
    return [sample for _, sample in _first_spelling(names, samples, want)]


def _first_spelling(names: Sequence[str], samples: Exposition, want: dict[str, str]) -> list[tuple[str, Sample]]:
    """The samples of every spelling of a preset, as PromQL's ``a or b`` keeps them (the Prometheus and GMP
    sources join the spellings with ``or``): a later spelling's sample only where no earlier spelling has one
    with the same labels. A server exporting an old and a new name side by side (vLLM 0.9 exports both
    ``vllm:gpu_cache_usage_perc`` and ``vllm:kv_cache_usage_perc``, 0.11 both ``vllm:time_per_output_token_seconds``
    and ``vllm:inter_token_latency_seconds``, later releases with ``show_hidden_metrics``:
    vllm/v1/metrics/loggers.py, "Deprecated in 0.9/0.11") is read
    once, not twice (a summed queue or a histogram's observations would double).

    A series written twice in one exposition (the same name and labels) is read once, its first sample, as
    Prometheus stores it: the scrape's second sample at the same time is refused ("duplicate sample for
    timestamp", counted in ``prometheus_target_scrapes_sample_duplicate_timestamp_total``). Summed, the pods
    source read a queue of 3 written twice (3, then 5) as 8 where Prometheus had 3."""
    present = [name for name in names if name in samples]
    if len(present) == 1 and len(samples[present[0]]) == 1:  # the usual case: one spelling, one series
        name = present[0]
        return [(name, s) for s in samples[name] if all(s.labels.get(k) == v for k, v in want.items())]
    out: list[tuple[str, Sample]] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for name in present:
        mine: set[tuple[tuple[str, str], ...]] = set()
        for s in samples[name]:
            if not all(s.labels.get(k) == v for k, v in want.items()):
                continue
            key = tuple(sorted(s.labels.items()))
            if key not in seen and key not in mine:
                out.append((name, s))
                mine.add(key)
        seen |= mine
    return out


class History:
    """Successive scrapes of cumulative series (counters, histogram buckets), per endpoint and series.

    A rate needs two scrapes within the window: a new pod has none yet, so it does not report until its
    second scrape (partial data, unknown). A counter that went down was reset (a restarted server):
    ``core.counters.increase`` counts the new value as the increase.

    A point is kept only in the order its values were taken. Stamped by us (the request's send time), a
    scrape's values were taken somewhere between its request and the reading of its answer, so two scrapes of
    one endpoint in flight at once (a probe round's read beside a pass's) have no known order: the server may
    take the later request's values first, and kept in send order the counter would seem to go down (a reset:
    its whole value counted as the increase, a rate many times the true one). So a point whose request was sent
    before the last kept point's answer was read, and whose value is below that point's, is not kept (its
    reading is the rate of the points kept): its values were taken first. Prometheus, which scrapes a target one
    scrape at a time, never has two. At or above, the order is the send order's (a counter never goes down but
    by a reset, and a reset between two overlapping requests of one pod is not told from this), and the point
    is kept: under load, when answers are read late, most scrapes of a pod overlap another read's. A sample
    carrying its own timestamp is ordered by it.
    """

    def __init__(self) -> None:
        self._points: dict[tuple[str, str, tuple[tuple[str, str], ...]], deque[tuple[float, float]]] = {}
        #: When the answer of each series' last kept point was read (absent: the point carried its own time).
        self._read: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}

    def rate(
        self, url: str, name: str, labels: dict[str, str], at: float, value: float, window_s: float,
        read_at: float | None = None,
    ) -> float | None:
        """The series' rate over the window once the point (``at``, ``value``) is kept; ``read_at``: when the
        answer was read, for a point stamped with its request's send time (None: the sample's own time)."""
        key = (url, name, tuple(sorted(labels.items())))
        points = self._points.setdefault(key, deque())
        last_read = self._read.get(key)  # an overlapping request's value below the last: taken before it
        if not points or (at > points[-1][0] and not (
            read_at is not None and last_read is not None and at < last_read and value < points[-1][1]
        )):
            points.append((at, value))
            if read_at is None:
                self._read.pop(key, None)
            else:
                self._read[key] = read_at
        while len(points) > 2 and points[1][0] < at - window_s:
            points.popleft()  # one point older than the window is dropped once the next is too
        return counters.rate(list(points), window_s)

    def forget(self, before: float) -> None:
        """Drop series not scraped since ``before`` (pods come and go)."""
        for key in [k for k, p in self._points.items() if p[-1][0] < before]:
            del self._points[key]
            self._read.pop(key, None)


def _pod_rate(req: SignalRequest, url: str, scrape: Scrape, history: History) -> PodRate | str | None:
    """A pod's rate (counter) or observation rate and bucket rates (histogram) over the window; None when the
    pod serves no such series; a reason when it does but has no rate yet."""
    sig = req.signal
    assert scrape.samples is not None
    window = sig.rate.window_seconds if sig.rate else sig.quantile.window_seconds if sig.quantile else 0.0
    names = presets.get(sig.preset).metrics if sig.preset is not None else (sig.metric or "",)
    histogram = sig.quantile is not None
    total = 0.0
    buckets: dict[float, float] = {}
    found = pending = False
    spellings = [f"{base}_bucket" if histogram else base for base in names]
    # Each label set once over the spellings (``_first_spelling``: what PromQL's ``or`` keeps).
    for name, s in _first_spelling(spellings, scrape.samples, sig.labels):
        found = True
        if s.timestamp is not None:
            r = history.rate(url, name, s.labels, s.timestamp, s.value, window)
        else:
            r = history.rate(url, name, s.labels, scrape.sent_at, s.value, window, scrape.read_at)
        if r is None:
            pending = True
            continue
        if histogram:
            bound = float(s.labels.get("le", "nan"))
            buckets[bound] = buckets.get(bound, 0.0) + r
        else:
            total += r
    if not found:
        return None
    if pending:
        return f"no rate yet (a rate needs two scrapes within {window:g}s)"
    if histogram:
        return PodRate(buckets.get(math.inf, math.nan), buckets)
    return PodRate(total, None)


def _reading(plan: _Plan, by_url: dict[str, Scrape], history: History) -> SignalReading:
    req, endpoints, label, how = plan.request, plan.endpoints, plan.label, plan.how
    errors: list[str] = []
    lacking: list[str] = []
    per_pod: dict[str, float] = {}
    stamps: dict[str, float] = {}
    cumulative = plan.cumulative
    bucket_rates: dict[str, dict[float, float]] = {}
    for pod, url in endpoints:
        scrape = by_url[url]
        if scrape.samples is None:
            errors.append(scrape.error or f"{url}: failed")
            continue
        if cumulative:
            rated = _pod_rate(req, url, scrape, history)
            if isinstance(rated, str):
                errors.append(f"{pod}: {rated}")
                continue
            if rated is None:
                lacking.append(pod)
                continue
            per_pod[pod] = rated.rate
            stamps[pod] = scrape.sent_at
            if rated.buckets is not None:
                bucket_rates[pod] = rated.buckets
            continue
        got = _pod_value(plan, scrape.samples)
        if got is None:
            lacking.append(pod)
            continue
        per_pod[pod] = got.value
        stamps[pod] = got.timestamp if got.timestamp is not None else scrape.sent_at
    # A signal accepting partial data (minReportingFraction) passes on the pods that answered; the core then
    # counts them against the ready pods. Otherwise the first failure is the most useful reason to show.
    partial_ok = req.signal.min_reporting_fraction is not None
    if errors and not partial_ok:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return SignalReading(None, None, label, f"{len(errors)}/{len(endpoints)} pods failed: {errors[0]}{more}")
    wanted = req.signal.preset or req.signal.metric
    if not per_pod:
        return SignalReading(None, None, label)  # no pod serves it: missing, never zero
    if lacking and not partial_ok:
        return SignalReading(
            None, None, label, f"{len(lacking)}/{len(endpoints)} pods serve no {wanted}: {', '.join(lacking[:3])}"
        )
    static = plan.static
    if static and req.signal.quantile is None:
        # Static endpoints are what the user says the target is: combined here, not counted against its pods.
        return SignalReading(combine(list(per_pod.values()), how), min(stamps.values()), label)
    quantile = req.signal.quantile
    if static and quantile is not None:
        summed: dict[float, float] = {}
        for one in bucket_rates.values():
            counters.add_buckets(summed, one)
        return SignalReading(counters.histogram_quantile(quantile.q, summed), min(stamps.values()), label)
    if quantile is not None:
        # The core takes the quantile over the reporting pods' summed buckets (``combine_pods``).
        return SignalReading(None, min(stamps.values()), label, None, per_pod, stamps, bucket_rates)
    return SignalReading(
        value=combine(list(per_pod.values()), how),
        timestamp=min(stamps.values()),
        source=label,
        per_replica=per_pod,
        pod_times=stamps,
    )
