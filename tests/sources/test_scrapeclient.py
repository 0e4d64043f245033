"""The keep-alive scrape client against a raw TCP server that answers exactly the bytes each case needs:
connections reused, the framings real exporters use (Content-Length, chunked, close-delimited), a kept
connection the server closed meanwhile, and answers that are no HTTP at all."""

from __future__ import annotations

import asyncio
import gzip
import random
import socket
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from autoscaler.sources.base import URGENT
from autoscaler.sources.scrapeclient import Response, ScrapeClient, ScrapeFailed, _Slots, supports

BODY = "# TYPE tgi_queue_size gauge\ntgi_queue_size 7\n"
ACCEPT = "text/plain"

Answer = Callable[[int], bytes]  # request number on this connection -> raw response bytes ("" closes)


class RawServer:
    """Answers each request on a connection with ``answer(n)``; counts connections and requests."""

    def __init__(self, answer: Answer, *, close_after: int | None = None) -> None:
        self.answer = answer
        self.close_after = close_after
        self.connections = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/metrics"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                data = self.answer(n)
                n += 1
                if not data:
                    break
                writer.write(data)
                await writer.drain()
                if self.close_after is not None and n >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def length_framed(body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    parts = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:]))
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n\r\n"


@pytest.fixture
async def client() -> AsyncIterator[ScrapeClient]:
    c = ScrapeClient()
    yield c
    await c.aclose()


async def serve(answer: Answer, **kwargs: int) -> tuple[RawServer, str]:
    server = RawServer(answer, **kwargs)
    return server, await server.start()


async def test_a_connection_is_kept_and_reused(client: ScrapeClient) -> None:
    server, url = await serve(lambda n: length_framed(BODY.encode()))
    try:
        for _ in range(5):
            got = await client.get(url, accept=ACCEPT)
            assert (got.status, got.text) == (200, BODY)
        assert (server.connections, server.requests, client.connects) == (1, 5, 1)
    finally:
        await server.stop()


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda n: chunked(BODY.encode()), id="chunked"),
        pytest.param(lambda n: length_framed(gzip.compress(BODY.encode()), "Content-Encoding: gzip\r\n"),
                     id="gzip"),
        pytest.param(lambda n: b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + BODY.encode(),
                     id="close-delimited-http-1.0"),
    ],
)
async def test_the_framings_exporters_use(client: ScrapeClient, answer: Answer) -> None:
    server, url = await serve(answer, close_after=1)
    try:
        assert (await client.get(url, accept=ACCEPT)).text == BODY
        assert (await client.get(url, accept=ACCEPT)).text == BODY
    finally:
        await server.stop()


async def test_a_kept_connection_the_server_closed_is_replaced_once(client: ScrapeClient) -> None:
    # The server answers one request per connection and closes, without saying so (an idle timeout).
    server, url = await serve(lambda n: length_framed(BODY.encode()), close_after=1)
    try:
        for _ in range(3):
            assert (await client.get(url, accept=ACCEPT)).text == BODY
        assert server.connections == 3
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        pytest.param(lambda n: b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response", id="not-http"),
        pytest.param(lambda n: b"", "connection to", id="closed-without-answer"),
        pytest.param(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "connection to",
                     id="body-cut-short"),
        pytest.param(lambda n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunked",
                     id="bad-chunk"),
    ],
)
async def test_broken_answers_are_scrape_failures(client: ScrapeClient, answer: Answer, words: str) -> None:
    server, url = await serve(answer, close_after=1)
    try:
        with pytest.raises(ScrapeFailed, match=words):
            await client.get(url, accept=ACCEPT)
    finally:
        await server.stop()


async def test_a_body_over_the_limit_is_refused() -> None:
    client = ScrapeClient(max_body=10)
    server, url = await serve(lambda n: length_framed(BODY.encode()))
    try:
        with pytest.raises(ScrapeFailed, match="over 10 bytes"):
            await client.get(url, accept=ACCEPT)
    finally:
        await server.stop()
        await client.aclose()


async def test_a_request_cut_by_its_deadline_leaves_no_connection_to_reuse(client: ScrapeClient) -> None:
    answered = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await answered.wait()
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/metrics", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await client.get(url, accept=ACCEPT)
        answered.set()
        # The late answer to the cut request must not be read as the answer to the next one.
        assert (await client.get(url, accept=ACCEPT)).text == BODY
        assert client.connects == 2
    finally:
        await runner.cleanup()


async def test_an_urgent_request_does_not_queue_behind_the_requests_in_flight() -> None:
    """A crossing's evaluation (``sources.base.URGENT`` set in its context) is answered while the limit on
    requests in flight is taken by round traffic that hangs; the others wait for a slot."""
    answered = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await answered.wait()
        return web.Response(text=BODY)

    async def fast(_: web.Request) -> web.Response:
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/metrics", fast)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    client = ScrapeClient(max_active=1)
    hanging = asyncio.create_task(client.get(f"{base}/slow", accept=ACCEPT))

    async def urgent() -> str:
        URGENT.set(True)  # this task's context only
        return (await client.get(f"{base}/metrics", accept=ACCEPT)).text

    try:
        await asyncio.sleep(0.05)  # the slow request holds the only slot
        assert await asyncio.wait_for(asyncio.create_task(urgent()), 5) == BODY
        plain = asyncio.create_task(client.get(f"{base}/metrics", accept=ACCEPT))
        await asyncio.sleep(0.2)
        assert not plain.done()  # round traffic waits for the slot
        answered.set()
        assert (await plain).text == BODY
        assert (await hanging).text == BODY
    finally:
        answered.set()
        await client.aclose()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("url", "served"),
    [
        ("http://10.0.0.7:8000/metrics", True),
        ("http://[fd00::7]:8000/metrics", True),
        ("https://10.0.0.7:8443/metrics", False),
        ("http://user:pw@10.0.0.7:8000/metrics", False),
    ],
)
def test_which_urls_it_serves(url: str, served: bool) -> None:
    assert supports(url) is served


async def test_the_limit_on_requests_in_flight_admits_in_order_and_loses_no_slot() -> None:
    """``_Slots`` (the client's limit, in place of ``asyncio.Semaphore``) on drawn schedules of acquires,
    releases and cancellations: never more holders than slots, slots granted first come first served, a slot
    handed to a waiter cancelled before it ran passed on, and every slot free again at the end."""
    rng = random.Random(5)
    for _ in range(200):
        await _one_schedule(rng)


async def _one_schedule(rng: random.Random) -> None:
    n = rng.randint(1, 3)
    slots = _Slots(n)
    holders: list[int] = []
    granted: list[int] = []
    tasks: dict[int, asyncio.Task[None]] = {}
    release: dict[int, asyncio.Event] = {}

    async def hold(i: int) -> None:
        await slots.acquire()
        granted.append(i)
        holders.append(i)
        try:
            await release[i].wait()
        finally:
            holders.remove(i)
            slots.release()

    for i in range(rng.randint(1, 12)):
        release[i] = asyncio.Event()
        tasks[i] = asyncio.create_task(hold(i))
        for _ in range(rng.randint(0, 2)):
            await asyncio.sleep(0)
        assert len(holders) <= n
        if rng.random() < 0.4 and holders:
            release[rng.choice(holders)].set()
        if rng.random() < 0.2:
            tasks[rng.choice(list(tasks))].cancel()
    for e in release.values():
        e.set()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert granted == sorted(granted)  # first come, first served
    assert slots.free == n
    assert not holders


async def fetch_all(client: ScrapeClient, urls: list[str]) -> dict[str, Response | ScrapeFailed]:
    """``client.fetch_all`` with every answer collected; a URL answered twice fails the test."""
    got: dict[str, Response | ScrapeFailed] = {}

    def answered(url: str, answer: Response | ScrapeFailed) -> None:
        assert url not in got, f"{url} answered twice"
        got[url] = answer

    await client.fetch_all(urls, accept=ACCEPT, on_answer=answered)
    return got


async def test_a_batch_answers_every_url_once_over_kept_connections() -> None:
    """``fetch_all`` (a probe round's read): each URL answered once, its answer handed on as it lands, over at
    most ``max_active`` connections kept and reused (each lane sends its next request on the connection the
    last answer came back on)."""
    server, url = await serve(lambda n: length_framed(BODY.encode()))
    client = ScrapeClient(max_active=4)
    urls = [f"{url}?pod={i}" for i in range(40)]
    try:
        got = await fetch_all(client, urls)
        assert set(got) == set(urls)
        assert all(isinstance(a, Response) and (a.status, a.text) == (200, BODY) for a in got.values())
        assert (server.requests, server.connections, client.connects) == (40, 4, 4)
        got = await fetch_all(client, urls)  # the next round: the same connections
        assert len(got) == 40
        assert (server.requests, server.connections) == (80, 4)
        assert client._active.free == 4  # every lane gave its slot back
    finally:
        await client.aclose()
        await server.stop()


async def test_batches_keep_to_the_limit_on_requests_in_flight_together() -> None:
    """Two batches at once (two probe chunks in flight) and a plain ``get`` share the client's limit: never
    more requests in flight than ``max_active``, and every slot free again at the end."""
    in_flight = 0
    most = 0

    async def slowish(_: web.Request) -> web.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/metrics", slowish)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    client = ScrapeClient(max_active=3)
    try:
        a, b, one = await asyncio.gather(
            fetch_all(client, [f"{base}?a={i}" for i in range(15)]),
            fetch_all(client, [f"{base}?b={i}" for i in range(15)]),
            client.get(f"{base}?c", accept=ACCEPT),
        )
        assert len(a) == len(b) == 15
        assert all(isinstance(x, Response) and x.text == BODY for x in [*a.values(), *b.values(), one])
        assert 1 < most <= 3
        assert client._active.free == 3
    finally:
        await client.aclose()
        await runner.cleanup()


async def test_a_batch_replaces_kept_connections_the_server_closed() -> None:
    # The server answers one request per connection and closes, without saying so (an idle timeout): every
    # later request finds its kept connection closed, and is sent once more on a new one.
    server, url = await serve(lambda n: length_framed(BODY.encode()), close_after=1)
    client = ScrapeClient(max_active=2)
    try:
        got = await fetch_all(client, [f"{url}?pod={i}" for i in range(6)])
        assert all(isinstance(a, Response) and a.text == BODY for a in got.values())
        assert len(got) == 6
        assert server.connections == 6
    finally:
        await client.aclose()
        await server.stop()


async def test_a_batch_hands_on_failures_as_scrape_failures() -> None:
    down = f"http://127.0.0.1:{_free_port()}/metrics"
    server, bad = await serve(lambda n: b"SSH-2.0-OpenSSH\r\n\r\n", close_after=1)
    client = ScrapeClient()
    try:
        got = await fetch_all(client, [down, bad])
        assert isinstance(got[down], ScrapeFailed)
        assert "cannot connect" in str(got[down])
        assert isinstance(got[bad], ScrapeFailed)
        assert "not an HTTP response" in str(got[bad])
        assert client._active.free == client.max_active
    finally:
        await client.aclose()
        await server.stop()


async def test_a_batch_cut_by_its_deadline_leaves_no_connection_to_reuse() -> None:
    answered = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        if request.query.get("slow"):
            await answered.wait()
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/metrics", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    client = ScrapeClient(max_active=1)
    got: dict[str, Response | ScrapeFailed] = {}
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await client.fetch_all([f"{url}?fast=1", f"{url}?slow=1", f"{url}?fast=2"], accept=ACCEPT,
                                       on_answer=got.__setitem__)
        assert list(got) == [f"{url}?fast=1"]  # answered before the cut; the others never
        assert client._active.free == 1
        answered.set()
        # The late answer to the cut request must not be read as the answer to the next one.
        again = (await fetch_all(client, [url]))[url]
        assert isinstance(again, Response)
        assert again.text == BODY
        assert client.connects == 2
    finally:
        answered.set()
        await client.aclose()
        await runner.cleanup()


async def test_an_urgent_batch_does_not_queue_behind_the_requests_in_flight() -> None:
    answered = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await answered.wait()
        return web.Response(text=BODY)

    async def fast(_: web.Request) -> web.Response:
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/metrics", fast)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    client = ScrapeClient(max_active=1)
    hanging = asyncio.create_task(client.get(f"{base}/slow", accept=ACCEPT))

    async def urgent() -> dict[str, Response | ScrapeFailed]:
        URGENT.set(True)  # this task's context only
        return await fetch_all(client, [f"{base}/metrics", f"{base}/metrics?2"])

    try:
        await asyncio.sleep(0.05)  # the slow request holds the only slot
        got = await asyncio.wait_for(asyncio.create_task(urgent()), 5)
        assert len(got) == 2
        plain = asyncio.create_task(fetch_all(client, [f"{base}/metrics"]))
        await asyncio.sleep(0.2)
        assert not plain.done()  # round traffic waits for the slot
        answered.set()
        assert len(await plain) == 1
        await hanging
        assert client._active.free == 1
    finally:
        answered.set()
        await client.aclose()
        await runner.cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
