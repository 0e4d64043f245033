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
  here; the pods source sends every other URL through aiohttp.

Deadlines are the caller's (``asyncio.timeout``); a cancelled request closes its connection (a half-read
response must never be reused). Errors are ``ScrapeFailed`` with the reason in words.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import zlib
from collections import OrderedDict
from dataclasses import dataclass
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


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


def supports(url: str) -> bool:
    """Plain ``http://host:port/path`` without credentials: what this client serves."""
    return _split(url) is not None


@functools.lru_cache(maxsize=16384)
def _split(url: str) -> tuple[str, int, str] | None:
    """``(host, port, request target)`` of a URL this client serves, else None. Cached: the same pod URLs
    are scraped every second, and splitting one cost as much as parsing its answer."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or "@" in parts.netloc:
        return None
    return parts.hostname, parts.port or 80, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


@functools.lru_cache(maxsize=16384)
def _request(url: str, accept: str) -> bytes:
    """The request bytes for a URL (cached, as ``_split``)."""
    netloc = urlsplit(url).netloc
    target = _split(url)
    assert target is not None
    return (
        f"GET {target[2]} HTTP/1.1\r\nHost: {netloc}\r\nAccept: {accept}\r\n"
        "User-Agent: accel-autoscaler\r\nConnection: keep-alive\r\n\r\n"
    ).encode("latin-1")


class ScrapeClient:
    """Keep-alive ``GET`` over asyncio streams (see the module docstring)."""

    def __init__(self, *, max_idle: int = 1024, max_active: int = MAX_ACTIVE, max_body: int = MAX_BODY) -> None:
        self.max_idle = max_idle
        self.max_body = max_body
        self.max_active = max_active
        self._active = asyncio.Semaphore(max_active)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Idle connections, oldest first: (host, port, serial) -> connection.
        self._idle: OrderedDict[tuple[str, int, int], _Conn] = OrderedDict()
        self._by_host: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        self._serial = 0
        #: New connections opened (tests check that connections are reused).
        self.connects = 0

    async def get(self, url: str, *, accept: str) -> Response:
        split = _split(url)
        if split is None:
            raise ScrapeFailed(f"not a plain http URL: {url}")
        host, port, _ = split
        request = _request(url, accept)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Connections and the semaphore belong to the loop that made them (a command run twice in one
            # process runs two loops): start afresh on this one.
            self._loop, self._active = loop, asyncio.Semaphore(self.max_active)
            self._idle.clear()
            self._by_host.clear()
        if URGENT.get():
            # A crossing's evaluation: past the round's queue (at most ``Controller.urgent`` of them at once).
            return await self._get(host, port, request)
        async with self._active:
            return await self._get(host, port, request)

    async def _get(self, host: str, port: int, request: bytes) -> Response:
        conn = self._take(host, port)
        if conn is not None:
            try:
                return await self._exchange(conn, host, port, request)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass  # the server closed the kept connection meanwhile: once more on a new one
        conn = await self._connect(host, port)
        try:
            return await self._exchange(conn, host, port, request)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            raise ScrapeFailed(f"connection to {host}:{port} lost: {_words(exc)}") from None

    async def _connect(self, host: str, port: int) -> _Conn:
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=MAX_HEAD)
        except OSError as exc:
            raise ScrapeFailed(f"cannot connect to {host}:{port}: {_words(exc)}") from None
        self.connects += 1
        return _Conn(reader, writer)

    async def _exchange(self, conn: _Conn, host: str, port: int, request: bytes) -> Response:
        keep = False
        try:
            conn.writer.write(request)
            status, headers = await self._head(conn.reader)
            body, keep = await self._body(conn.reader, status, headers)
            encoding = headers.get("content-encoding", "identity").strip().lower()
            if encoding in ("gzip", "x-gzip"):
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding not in ("identity", ""):
                raise ScrapeFailed(f"{host}:{port} answered in an unsupported encoding {encoding!r}")
            content_type = headers.get("content-type", "")
            return Response(status, content_type, body.decode(_charset(content_type), errors="replace"))
        except (ConnectionError, asyncio.IncompleteReadError):
            raise  # the caller retries once on a kept connection, else says the connection was lost
        except (OSError, zlib.error, EOFError, asyncio.LimitOverrunError) as exc:
            raise ScrapeFailed(f"{host}:{port}: {_words(exc)}") from None
        finally:
            if keep:
                self._put(host, port, conn)
            else:
                conn.close()

    async def _head(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ScrapeFailed("response headers too large") from None
        lines = head.decode("latin-1").split("\r\n")
        fields = lines[0].split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
            raise ScrapeFailed(f"not an HTTP response: {lines[0][:80]!r}")
        headers = {"__version": fields[0]}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return int(fields[1]), headers

    async def _body(
        self, reader: asyncio.StreamReader, status: int, headers: dict[str, str]
    ) -> tuple[bytes, bool]:
        """The body, and whether the connection may be reused."""
        connection = headers.get("connection", "").lower()
        keep = (headers["__version"] == "HTTP/1.1" and "close" not in connection) or "keep-alive" in connection
        if status in (204, 304) or 100 <= status < 200:
            return b"", keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            size = 0
            while True:
                line = await reader.readuntil(b"\r\n")
                try:
                    n = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ScrapeFailed("malformed chunked body") from None
                if n == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    return b"".join(parts), keep
                size += n
                if size > self.max_body:
                    raise ScrapeFailed(f"body over {self.max_body} bytes")
                parts.append(await reader.readexactly(n))
                await reader.readexactly(2)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ScrapeFailed(f"bad Content-Length {length!r}")
            if int(length) > self.max_body:
                raise ScrapeFailed(f"body over {self.max_body} bytes")
            return await reader.readexactly(int(length)), keep
        body = await reader.read(self.max_body + 1)  # no length: the body ends when the server closes
        while body and len(body) <= self.max_body and not reader.at_eof():
            more = await reader.read(self.max_body + 1 - len(body))
            if not more:
                break
            body += more
        if len(body) > self.max_body:
            raise ScrapeFailed(f"body over {self.max_body} bytes")
        return body, False

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
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()


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
