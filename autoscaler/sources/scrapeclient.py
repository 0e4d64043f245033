"""A keep-alive HTTP/1.1 ``GET`` client for scraping plain-``http`` pod endpoints: the pods source's hot path.

Why not aiohttp here: at thousands of scrapes a second (a controller holding 5,000 policies, each probed every
second) aiohttp's per-request machinery (session, tracing, cookie jar, timeout objects, response objects) cost
more CPU than everything else a probe does (bench/controller_reaction.py's profile: ~0.2 ms of ~0.45 ms per
probed policy). A scrape needs none of it: one ``GET`` of a small text body from a pod that keeps the
connection open, as Prometheus scrapes. So this client does exactly that and nothing else:

- connections are kept per ``host:port`` and reused (HTTP/1.1 keep-alive); at most ``max_idle`` idle
  connections are kept in all (the oldest are closed first), at most ``max_active`` requests run at once;
- a kept connection the server closed meanwhile (its idle timeout) is detected at reuse and the request is
  sent once more on a new connection (the request is idempotent);
- the response body is read by ``Content-Length``, ``Transfer-Encoding: chunked`` (Go's promhttp streams
  large expositions that way) or until the server closes; ``gzip``/``deflate`` bodies are decoded, though no
  encoding is asked for; bodies over ``max_body`` bytes are refused;
- no TLS, no proxies, no credentials in the URL, no redirects: ``supports(url)`` says whether a URL is served
  here; the pods source sends every other URL through aiohttp;
- at the protocol level (``_Conn``, an ``asyncio.Protocol``), not on asyncio streams: the answer is framed as
  its bytes arrive and one future per exchange is resolved with it (streams cost a coroutine and a wake-up per
  ``readuntil``/``readexactly``; measured on a round of 2,000 scrapes against the bench's exporter, alternating
  A/B at load 10: 108-130 against 119-158 us of process CPU per scrape, medians 121 and 142); the limit on
  requests in flight is a plain first-come first-served counter (``_Slots``), not ``asyncio.Semaphore``, whose
  ``acquire`` in Python 3.11 walks every waiter.

Each response carries ``sent_at``: the client's clock when its request was written to the connection (the
retry's, for a kept connection the server had closed). The server's values are as of a moment just after it,
so that is the samples' time, as Prometheus stamps a scrape's samples at the scrape's start
(prometheus/prometheus ``scrape/scrape.go``: ``scrapeLoop.run`` takes ``scrapeTime := time.Now()`` before
``scrapeAndReport(last, scrapeTime, errc)``, whose ``sl.append(app, b, contentType, appendTime)`` gives every
sample without its own timestamp that time), not when the answer was read: on a busy event loop the answer
can wait long after the server wrote it, and a counter's rate divided by the time between two such late
readings is too high when the first waited longer than the second.

Deadlines are the caller's (``asyncio.timeout``); a cancelled request closes its connection (a half-read
response must never be reused). Errors are ``ScrapeFailed`` with the reason in words.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

from autoscaler.sources.base import URGENT

#: Largest exposition accepted (a vLLM server's is ~100 KiB; this is far above any real one).
MAX_BODY = 32 * 1024 * 1024
#: Largest status line + headers.
MAX_HEAD = 64 * 1024
#: Requests in flight at once.
MAX_ACTIVE = 128


class ScrapeFailed(Exception):
    """The endpoint could not be reached or did not answer with a readable HTTP response."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    text: str
    #: The client's clock when the request was written (see the module docstring): the samples' time.
    sent_at: float


class _Answer(NamedTuple):
    """One complete answer, as ``_Conn`` framed it."""

    status: int
    headers: dict[str, str]
    body: bytes
    #: Whether the connection may be reused for the next request.
    keep: bool


class _Head(NamedTuple):
    status: int
    #: Names lower-cased; ``__version`` is the HTTP version.
    headers: dict[str, str]


class _Lost(ConnectionError):
    """The connection closed before the answer was complete (a kept one the server closed meanwhile: retried)."""


class _Conn(asyncio.Protocol):
    """One connection at the protocol level: the answer to the one request in flight is framed as its bytes
    arrive (``data_received``), and one future per exchange is resolved with it. No stream reader or writer:
    their buffering, wake-ups and coroutine per read cost more than a small scrape does."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[_Answer] | None = None
        #: ``send``'s receiver of the answer (or of why there is none), in place of ``_waiter``'s future.
        self._callback: Callable[[_Answer | Exception], None] | None = None
        self._status = 0
        self._headers: dict[str, str] | None = None
        self._pos = 0  # where the body (or the next chunk's size line) starts in ``_buf``
        self._mode = ""  # "length", "chunked" or "close", once the head is read
        self._length = 0
        self._parts: list[bytes] = []
        self._size = 0
        self._keep = False

    # asyncio.Protocol ------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is not None or self._callback is not None:
            self._advance(eof=False)

    def eof_received(self) -> bool:
        self.closed = True
        self._advance(eof=True)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._advance(eof=True)

    # the client's side -----------------------------------------------------------------------------------
    def usable(self) -> bool:
        """Open, idle, and nothing unasked for arrived on it."""
        t = self.transport
        return not self.closed and t is not None and not t.is_closing() and not self._buf

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def request(self, data: bytes) -> asyncio.Future[_Answer]:
        """Send one request; the future gets (status, headers, body, whether the connection may be reused)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._headers, self._mode, self._parts, self._size = None, "", [], 0
        if self.closed:
            waiter.set_exception(_Lost("the connection was closed"))
            return waiter
        self.transport.write(data)
        return waiter

    def send(self, data: bytes, callback: Callable[[_Answer | Exception], None]) -> None:
        """``request`` without a future: ``callback`` is called once, from ``data_received`` (or when the
        connection is lost), with the answer or the exception ``request``'s future would have held."""
        assert self.transport is not None
        self._headers, self._mode, self._parts, self._size = None, "", [], 0
        if self.closed:
            asyncio.get_running_loop().call_soon(callback, _Lost("the connection was closed"))
            return
        self._callback = callback
        self.transport.write(data)

    # framing ---------------------------------------------------------------------------------------------
    def _advance(self, *, eof: bool) -> None:
        callback = self._callback
        if callback is not None:
            try:
                got = self._frame(eof)
            except (ScrapeFailed, ConnectionError) as exc:
                self._callback = None
                callback(exc)
                return
            if got is not None:
                self._callback = None
                callback(got)  # last: it may send the next request on this very connection
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            got = self._frame(eof)
        except (ScrapeFailed, ConnectionError) as exc:
            self._waiter = None
            waiter.set_exception(exc)
            return
        if got is not None:
            self._waiter = None
            waiter.set_result(got)

    def _frame(self, eof: bool) -> _Answer | None:
        """The complete answer, or None while more bytes are needed; raises when it cannot be one."""
        buf = self._buf
        if self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ScrapeFailed("response headers too large")
                if eof:
                    raise _Lost(f"closed after {len(buf)} bytes of the response head")
                return None
            self._status, self._headers = _head(bytes(buf[:end]))
            self._pos = end + 4
            status, headers = self._status, self._headers
            connection = headers.get("connection", "").lower()
            self._keep = (headers["__version"] == "HTTP/1.1" and "close" not in connection) or (
                "keep-alive" in connection
            )
            if status in (204, 304) or 100 <= status < 200:
                return self._done(b"", self._pos)
            length = headers.get("content-length")
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._mode = "chunked"
            elif length is not None:
                if not length.isdigit():
                    raise ScrapeFailed(f"bad Content-Length {length!r}")
                self._length = int(length)
                if self._length > self.max_body:
                    raise ScrapeFailed(f"body over {self.max_body} bytes")
                self._mode = "length"
            else:
                self._mode = "close"
                self._keep = False
        if self._mode == "length":
            if len(buf) - self._pos >= self._length:
                return self._done(bytes(buf[self._pos:self._pos + self._length]), self._pos + self._length)
            if eof:
                raise _Lost(f"closed after {len(buf) - self._pos} of {self._length} body bytes")
            return None
        if self._mode == "close":
            if len(buf) - self._pos > self.max_body:
                raise ScrapeFailed(f"body over {self.max_body} bytes")
            return self._done(bytes(buf[self._pos:]), len(buf)) if eof else None
        return self._chunks(eof)

    def _chunks(self, eof: bool) -> _Answer | None:
        buf = self._buf
        while True:
            line_end = buf.find(b"\r\n", self._pos)
            if line_end < 0:
                break
            try:
                n = int(bytes(buf[self._pos:line_end]).split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ScrapeFailed("malformed chunked body") from None
            if n == 0:
                # Trailers, then an empty line.
                at = line_end + 2
                while True:
                    nxt = buf.find(b"\r\n", at)
                    if nxt < 0:
                        break
                    if nxt == at:
                        return self._done(b"".join(self._parts), nxt + 2)
                    at = nxt + 2
                break
            if self._size + n > self.max_body:
                raise ScrapeFailed(f"body over {self.max_body} bytes")
            if len(buf) < line_end + 2 + n + 2:
                break
            self._parts.append(bytes(buf[line_end + 2:line_end + 2 + n]))
            self._size += n
            self._pos = line_end + 2 + n + 2
        if eof:
            raise _Lost("closed inside a chunked body")
        return None

    def _done(self, body: bytes, used: int) -> _Answer:
        assert self._headers is not None
        del self._buf[:used]
        # Bytes beyond the answer were never asked for (no pipelining): the connection is not reused.
        keep = self._keep and not self._buf
        return _Answer(self._status, self._headers, body, keep)


class _Slots:
    """A first-come first-served limit on requests in flight: ``asyncio.Semaphore`` without its cost here
    (Python 3.11's ``acquire`` asks ``locked()``, which walks every waiter: with a read's 128 workers and a
    second read's waiting on 128 slots, that walk cost more than the request it admitted)."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled before taking it: pass it on
            raise

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to the first waiter
                return
        self.free += 1


def _head(head: bytes) -> _Head:
    """Status and headers (names lower-cased; ``__version`` the HTTP version) of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
        raise ScrapeFailed(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {"__version": fields[0]}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return _Head(int(fields[1]), headers)


def supports(url: str) -> bool:
    """Plain ``http://host:port/path`` without credentials: what this client serves."""
    return _split(url) is not None


class _Where(NamedTuple):
    """Where a URL's request goes."""

    host: str
    port: int
    #: The request target: path and query.
    target: str


@functools.lru_cache(maxsize=16384)
def _split(url: str) -> _Where | None:
    """Host, port and request target of a URL this client serves, else None. Cached: the same pod URLs
    are scraped every second, and splitting one cost as much as parsing its answer."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or "@" in parts.netloc:
        return None
    return _Where(parts.hostname, parts.port or 80, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))


@functools.lru_cache(maxsize=16384)
def _request(url: str, accept: str) -> bytes:
    """The request bytes for a URL (cached, as ``_split``)."""
    netloc = urlsplit(url).netloc
    target = _split(url)
    assert target is not None
    return (
        f"GET {target.target} HTTP/1.1\r\nHost: {netloc}\r\nAccept: {accept}\r\n"
        "User-Agent: accel-autoscaler\r\nConnection: keep-alive\r\n\r\n"
    ).encode("latin-1")


class ScrapeClient:
    """Keep-alive ``GET`` over asyncio streams (see the module docstring)."""

    def __init__(
        self,
        *,
        max_idle: int = 1024,
        max_active: int = MAX_ACTIVE,
        max_body: int = MAX_BODY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: Read when each request is written: ``Response.sent_at``.
        self.clock = clock
        self.max_idle = max_idle
        self.max_body = max_body
        self.max_active = max_active
        self._active = _Slots(max_active)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Idle connections, oldest first: (host, port, serial) -> connection.
        self._idle: OrderedDict[tuple[str, int, int], _Conn] = OrderedDict()
        self._by_host: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        self._serial = 0
        #: New connections opened (tests check that connections are reused).
        self.connects = 0

    def _on_this_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Connections and the semaphore belong to the loop that made them (a command run twice in one
            # process runs two loops): start afresh on this one.
            self._loop, self._active = loop, _Slots(self.max_active)
            self._idle.clear()
            self._by_host.clear()

    async def get(self, url: str, *, accept: str) -> Response:
        split = _split(url)
        if split is None:
            raise ScrapeFailed(f"not a plain http URL: {url}")
        host, port = split.host, split.port
        request = _request(url, accept)
        self._on_this_loop()
        if URGENT.get():
            # A crossing's evaluation: past the round's queue (at most ``Controller.urgent`` of them at once).
            return await self._get(host, port, request)
        await self._active.acquire()
        try:
            return await self._get(host, port, request)
        finally:
            self._active.release()

    async def _get(self, host: str, port: int, request: bytes) -> Response:
        conn = self._take(host, port)
        if conn is not None:
            try:
                return await self._exchange(conn, host, port, request)
            except ConnectionError:
                pass  # the server closed the kept connection meanwhile: once more on a new one
        conn = await self._connect(host, port)
        try:
            return await self._exchange(conn, host, port, request)
        except ConnectionError as exc:
            raise ScrapeFailed(f"connection to {host}:{port} lost: {_words(exc)}") from None

    async def _connect(self, host: str, port: int) -> _Conn:
        loop = asyncio.get_running_loop()
        max_body = self.max_body
        try:
            _, conn = await loop.create_connection(lambda: _Conn(max_body), host, port)
        except OSError as exc:
            raise ScrapeFailed(f"cannot connect to {host}:{port}: {_words(exc)}") from None
        self.connects += 1
        return conn

    async def _exchange(self, conn: _Conn, host: str, port: int, request: bytes) -> Response:
        keep = False
        try:
            sent_at = self.clock()
            answer = await conn.request(request)
            keep = answer.keep
            return _response(answer, host, port, sent_at)
        except ConnectionError:
            keep = False
            raise  # the caller retries once on a kept connection, else says the connection was lost
        except (OSError, zlib.error, EOFError) as exc:
            keep = False
            raise ScrapeFailed(f"{host}:{port}: {_words(exc)}") from None
        except BaseException:
            keep = False  # cut by its deadline (or failed): a half-read answer must never be reused
            raise
        finally:
            if keep:
                self._put(host, port, conn)
            else:
                conn.close()

    async def fetch_all(self, urls: Iterable[str], *, accept: str, on_answer: OnAnswer) -> None:
        """``get`` every URL (each once, in order), handing each answer to ``on_answer`` as it lands: the
        response, or ``ScrapeFailed`` (refused, lost, unreadable; ``get`` would have raised it). A read's
        many scrapes in one call, with no task, future or coroutine per request (``_Batch``). At most
        ``max_active`` requests in flight, shared with ``get`` and every other call; past that limit when
        ``sources.base.URGENT`` is set, as ``get``. Cancelled (the caller's deadline): the requests in flight
        are cut (their connections closed, never reused) and their URLs get no answer."""
        todo = list(urls)
        if not todo:
            return
        self._on_this_loop()
        batch = _Batch(self, todo, accept, on_answer, urgent=URGENT.get())
        try:
            await batch.run()
        finally:
            batch.stop()

    def _take(self, host: str, port: int) -> _Conn | None:
        keys = self._by_host.get((host, port))
        while keys:
            conn = self._idle.pop(keys.pop())
            if conn.usable():
                return conn
            conn.close()
        return None

    def _put(self, host: str, port: int, conn: _Conn) -> None:
        self._serial += 1
        key = (host, port, self._serial)
        self._idle[key] = conn
        self._by_host.setdefault((host, port), []).append(key)
        while len(self._idle) > self.max_idle:
            (h, p, _), old = self._idle.popitem(last=False)
            self._by_host[(h, p)].remove((h, p, _))
            old.close()

    async def aclose(self) -> None:
        if self._loop is not asyncio.get_running_loop():
            self._idle.clear()  # made on another loop, gone with it
            self._by_host.clear()
        conns = list(self._idle.values())
        self._idle.clear()
        self._by_host.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.sleep(0)  # let the transports close


#: ``fetch_all``'s receiver of one URL's answer: the response, or why there is none.
OnAnswer = Callable[[str, Response | ScrapeFailed], None]


class _Batch:
    """``ScrapeClient.fetch_all``: a read's URLs over at most ``max_active`` lanes. A lane holds one of the
    client's slots and has one request in flight; the callback that receives its answer (``_Conn.send``, from
    ``data_received``) hands it on and sends the lane's next request at once, on the kept connection of that
    URL's host. A request thus costs no task, future or coroutine of its own (``get``'s path: a worker task's
    step, five coroutines, a future and its wake-up): about a fifth less CPU per scrape, measured alone
    (docs/controller.md); only a URL whose host has no kept connection (or whose kept one the server closed
    meanwhile) starts a task, to connect."""

    def __init__(self, client: ScrapeClient, urls: list[str], accept: str, on_answer: OnAnswer, *,
                 urgent: bool) -> None:
        self.client = client
        self.accept = accept
        self.on_answer = on_answer
        self.urgent = urgent
        self._todo = iter(urls)
        self._width = min(len(urls), client.max_active)
        self._lanes = 0  # lanes running (each holds a slot unless urgent)
        self._exhausted = False
        self._busy: set[_Conn] = set()  # connections with a request of this batch in flight
        self._connecting: set[asyncio.Task[None]] = set()
        self._slots = client._active
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admit: asyncio.Task[None] | None = None
        self._stopped = False

    async def run(self) -> None:
        if self.urgent:
            for _ in range(self._width):
                self._lanes += 1
                self._next()
        else:
            # Lanes are added as slots come free (other reads hold some); every URL may be answered before
            # the last lane got its slot, so the admission runs beside the lanes and stops when they are done.
            self._admit = asyncio.ensure_future(self._admit_lanes())
        await self._done

    async def _admit_lanes(self) -> None:
        for _ in range(self._width):
            await self._slots.acquire()
            if self._exhausted or self._stopped:
                self._slots.release()
                return
            self._lanes += 1
            self._next()

    def _next(self) -> None:
        """The lane's next request, or the lane ends (its slot released) when every URL was taken."""
        if self._stopped:
            return
        url = next(self._todo, None)
        if url is None:
            self._exhausted = True
            self._end_lane()
            return
        where = _split(url)
        if where is None:
            self._answer(url, ScrapeFailed(f"not a plain http URL: {url}"))
            self._next()
            return
        conn = self.client._take(where.host, where.port)
        if conn is None:
            self._connect(url, where)
        else:
            self._send(conn, url, where, fresh=False)

    def _end_lane(self) -> None:
        self._lanes -= 1
        if not self.urgent:
            self._slots.release()
        if self._lanes == 0 and self._exhausted and not self._done.done():
            self._done.set_result(None)

    def _send(self, conn: _Conn, url: str, where: _Where, *, fresh: bool) -> None:
        self._busy.add(conn)
        answered = functools.partial(self._answered, conn, url, where, fresh, self.client.clock())
        conn.send(_request(url, self.accept), answered)

    def _connect(self, url: str, where: _Where) -> None:
        task = asyncio.ensure_future(self._connect_then_send(url, where))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect_then_send(self, url: str, where: _Where) -> None:
        try:
            conn = await self.client._connect(where.host, where.port)
        except ScrapeFailed as exc:
            self._answer(url, exc)
            self._next()
            return
        if self._stopped:
            conn.close()
            return
        self._send(conn, url, where, fresh=True)

    def _answered(
        self, conn: _Conn, url: str, where: _Where, fresh: bool, sent_at: float, got: _Answer | Exception
    ) -> None:
        self._busy.discard(conn)
        if self._stopped:
            conn.close()
            return
        host, port = where.host, where.port
        if isinstance(got, _Answer):
            try:
                answer: Response | ScrapeFailed = _response(got, host, port, sent_at)
            except ScrapeFailed as exc:
                answer = exc
            except (OSError, zlib.error, EOFError) as exc:
                answer = ScrapeFailed(f"{host}:{port}: {_words(exc)}")
            if got.keep and not isinstance(answer, ScrapeFailed):
                self.client._put(host, port, conn)
            else:
                conn.close()
        else:
            conn.close()
            if isinstance(got, ConnectionError):
                if not fresh:
                    self._connect(url, where)  # the server closed the kept connection meanwhile: once more
                    return
                answer = ScrapeFailed(f"connection to {host}:{port} lost: {_words(got)}")
            elif isinstance(got, ScrapeFailed):
                answer = got
            else:
                answer = ScrapeFailed(f"{host}:{port}: {_words(got)}")
        self._answer(url, answer)
        self._next()

    def _answer(self, url: str, answer: Response | ScrapeFailed) -> None:
        try:
            self.on_answer(url, answer)
        except BaseException as exc:  # the caller's bug: the batch ends with it, nothing left behind
            if not self._done.done():
                self._done.set_exception(exc)
            self.stop()

    def stop(self) -> None:
        """Cut what is in flight (connections closed, never reused), release the lanes' slots; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._admit is not None:
            self._admit.cancel()
        for conn in self._busy:
            conn.close()
        self._busy.clear()
        for task in list(self._connecting):
            task.cancel()
        if not self.urgent:
            for _ in range(self._lanes):
                self._slots.release()
        self._lanes = 0


def _response(answer: _Answer, host: str, port: int, sent_at: float) -> Response:
    """The answer's body decoded (``Content-Encoding``, then its charset), stamped with when it was asked for."""
    body = answer.body
    headers = answer.headers
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    elif encoding not in ("identity", ""):
        raise ScrapeFailed(f"{host}:{port} answered in an unsupported encoding {encoding!r}")
    content_type = headers.get("content-type", "")
    return Response(answer.status, content_type, body.decode(_charset(content_type), errors="replace"), sent_at)


@functools.lru_cache(maxsize=256)
def _charset(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
            try:
                "".encode(charset)
            except LookupError:
                return "utf-8"
            return charset
    return "utf-8"


def _words(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
