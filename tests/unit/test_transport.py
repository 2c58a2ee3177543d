"""The lean transport (`fastctl.kube._transport`) against local servers: the answers it
reads (Content-Length, chunked, HTTP/1.0, 1xx, ``Connection: close``), the connections it
keeps (reused only after a whole answer, dropped after a timeout or a cancellation, at most
the connector's limit, closed when idle or when the client closes), the errors it raises
(aiohttp's), TLS with a client certificate, and when it stands aside for aiohttp."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import aiohttp
import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl._pki import CertificateAuthority
from fastctl.kube import _http, _transport
from fastctl.kube._http import ApiError, request, request_json, request_json_status
from fastctl.kube._http1 import Connection
from fastctl.kube._in_memory import SESSIONS
from fastctl.kube._request_metrics import ERROR_CODE, RequestTotals
from fastctl.kube._transport import Pool, pool_for

Request = tuple[str, dict[str, str], bytes]


class Peer:
    """One connection of a `RawServer`, as its script sees it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def next_request(self) -> Request | None:
        """The next request line, headers (lower-case names) and body; None at EOF."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        first, *lines = head.decode().split("\r\n")
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", 0)))
        return first, headers, body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


Script = Callable[[Peer], Awaitable[None]]


class RawServer:
    """A TCP server whose every connection runs `script`; it counts the connections."""

    def __init__(self, script: Script, context: ssl.SSLContext | None = None) -> None:
        self.script, self.context = script, context
        self.connections = 0
        self.changed = asyncio.Condition()  # notified whenever a connection opens
        self.ended = asyncio.Event()  # set whenever a connection ends

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.context else 'http'}://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        async with self.changed:
            self.changed.notify_all()
        try:
            await self.script(Peer(reader, writer))
        finally:
            writer.close()
            self.ended.set()

    async def opened(self, count: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.connections >= count)

    async def stop(self) -> None:
        self.server.close()


def answer(status: int = 200, body: bytes = b"{}", head: str = "", version: str = "1.1") -> bytes:
    return (
        f"HTTP/{version} {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{head}\r\n"
    ).encode() + body


def echo_path(extra: str = "", version: str = "1.1") -> Script:
    """Answer each request with its own path, with `extra` head lines."""

    async def script(peer: Peer) -> None:
        while (req := await peer.next_request()) is not None:
            path = req[0].split()[1]
            await peer.send(answer(body=orjson.dumps({"path": path}), head=extra, version=version))

    return script


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[tuple[RawServer, ApiClient]]]]:
    made: list[tuple[RawServer, ApiClient]] = []

    async def start(script: Script, **config: object) -> tuple[RawServer, ApiClient]:
        server = RawServer(script)
        cfg = Configuration(host=await server.start())
        for name, value in config.items():
            setattr(cfg, name, value)
        made.append((server, ApiClient(cfg)))
        return made[-1]

    yield start
    for server, client in made:
        await client.close()
        await server.stop()


def pool_of(client: ApiClient) -> Pool:
    pool = pool_for(client)
    assert pool is not None, "the lean transport stood aside"
    return pool


async def test_answers_by_length_and_in_chunks_are_read_whole_on_one_kept_connection(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the chunk parser keeping only the last chunk (red: a short body)."""
    doc = orjson.dumps({"items": [{"n": i} for i in range(50)]})
    pieces = [doc[i : i + 97] for i in range(0, len(doc), 97)]

    async def script(peer: Peer) -> None:
        while (req := await peer.next_request()) is not None:
            if req[0].startswith("GET /length"):
                await peer.send(answer(body=doc))
                continue
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in pieces:  # sent apart: the parser sees partial chunks
                await peer.send(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
            await peer.send(b"0\r\nX-Trailer: t\r\n\r\n")

    server, client = await serve(script)
    for path in ("/length", "/chunked", "/length", "/chunked"):
        assert await request_json(client, "GET", path) == orjson.loads(doc)
    assert server.connections == 1
    assert len(pool_of(client).idle) == 1


async def test_connection_close_and_http_1_0_answers_are_not_reused(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """The servers keep their side open: only the client's reading of the head can tell.
    Broken once: ``Connection: close`` not read (red: one connection); once: HTTP/1.0 taken
    as kept alive (red: one connection)."""
    server, client = await serve(echo_path("Connection: close\r\n"))
    for name in ("a", "b"):
        assert await request_json(client, "GET", f"/{name}") == {"path": f"/{name}"}
    assert server.connections == 2
    server, client = await serve(echo_path(version="1.0"))
    for name in ("a", "b"):
        assert await request_json(client, "GET", f"/{name}") == {"path": f"/{name}"}
    assert server.connections == 2
    server, client = await serve(echo_path("Connection: keep-alive\r\n", version="1.0"))
    for name in ("a", "b"):
        assert await request_json(client, "GET", f"/{name}") == {"path": f"/{name}"}
    assert server.connections == 1


async def test_an_answer_without_length_ends_with_the_connection_and_1xx_is_skipped(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: 1xx taken as the answer (red: status 100)."""

    async def script(peer: Peer) -> None:
        await peer.next_request()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n")
        await peer.send(b'HTTP/1.0 201 Created\r\nContent-Type: application/json\r\n\r\n{"a"')
        await peer.send(b": 1}")
        peer.writer.close()

    _, client = await serve(script)
    assert await request_json_status(client, "POST", "/x", body=b"{}") == (201, {"a": 1})
    assert pool_of(client).count == 0


async def test_retry_after_is_read_whatever_its_case(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the headers made a plain dict (red: no Retry-After)."""
    status = orjson.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests"})
    _, client = await serve(
        lambda peer: _answer_once(peer, answer(429, status, "retry-AFTER: 3\r\n"))
    )
    with pytest.raises(ApiError) as caught:
        await request_json(client, "GET", "/busy")
    assert caught.value.status == 429
    assert caught.value.retry_after_header == 3.0
    async with await request(client, "GET", "/busy") as resp:
        assert resp.headers.get("Retry-After") == "3"
        assert resp.headers.get("content-type") == "application/json"


async def _answer_once(peer: Peer, data: bytes) -> None:
    while await peer.next_request() is not None:
        await peer.send(data)


async def test_an_idle_connection_the_server_closed_is_not_used_again(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken once: the pool keeping and handing out connections the server closed (red:
    the second request fails)."""

    async def script(peer: Peer) -> None:
        await peer.next_request()
        await peer.send(answer())  # kept alive, as far as the client knows; then closed

    server, client = await serve(script)
    await request_json(client, "GET", "/a")
    (kept,) = pool_of(client).idle
    noticed = asyncio.Event()
    lose = kept.connection_lost

    def connection_lost(exc: Exception | None) -> None:
        lose(exc)
        noticed.set()

    monkeypatch.setattr(kept, "connection_lost", connection_lost)
    await server.ended.wait()
    if not kept.lost:  # the client reads the close on its next turns of the loop
        await noticed.wait()
    assert await request_json(client, "GET", "/b", request_timeout=10) == {}
    assert server.connections == 2


async def test_a_kept_connection_closed_under_a_request_is_a_server_disconnect(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """The error aiohttp raises, so `Safety` decides the retry as before. Broken once: the
    close mapped to a ConnectionError (red)."""

    async def script(peer: Peer) -> None:
        await peer.next_request()
        await peer.send(answer())
        await peer.next_request()  # read, never answered

    _, client = await serve(script)
    await request_json(client, "GET", "/a")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await request_json(client, "GET", "/b")
    assert pool_of(client).count == 0


async def _slow_then_fast(peer: Peer, late: asyncio.Event, answered: asyncio.Event) -> None:
    """The first request's answer waits for `late`, half sent; the next are prompt."""
    while (req := await peer.next_request()) is not None:
        path = req[0].split()[1]
        data = answer(body=orjson.dumps({"path": path}))
        if path == "/slow":
            await peer.send(data[:-5])
            answered.set()
            await late.wait()
            await peer.send(data[-5:])
        else:
            await peer.send(data)


async def test_a_timed_out_request_drops_its_connection(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the connection given back after the failure (red: the next request
    reads the late answer, or the server counts one connection)."""
    late, answered = asyncio.Event(), asyncio.Event()
    server, client = await serve(lambda peer: _slow_then_fast(peer, late, answered))
    with pytest.raises(TimeoutError):
        await request_json(client, "GET", "/slow", request_timeout=0.3)
    late.set()
    assert await request_json(client, "GET", "/next") == {"path": "/next"}
    assert server.connections == 2


def _held(gate: asyncio.Event) -> Script:
    """Answer each request with its path; a request for ``/held`` once `gate` is set."""

    async def script(peer: Peer) -> None:
        while (req := await peer.next_request()) is not None:
            path = req[0].split()[1]
            if path == "/held":
                await gate.wait()
            await peer.send(answer(body=orjson.dumps({"path": path})))

    return script


async def test_one_timer_serves_the_requests_of_a_connection(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """A connection's timer, armed for a request with a short total time, does not cut the
    longer request sent after it; a shorter request after a longer one still times out at
    its own deadline. Broken once each: the timer failing whatever request is under way
    when it fires (red: the second call times out), and never moved to an earlier time
    (red: the third call is still waiting)."""
    gate = asyncio.Event()
    server, client = await serve(_held(gate))
    assert await request_json(client, "GET", "/quick", request_timeout=0.2) == {"path": "/quick"}
    held = asyncio.ensure_future(request_json(client, "GET", "/held", request_timeout=3600))
    await asyncio.sleep(0.4)  # past the first request's deadline: its timer has fired
    assert not held.done()
    gate.set()
    assert await held == {"path": "/held"}
    gate.clear()
    short = asyncio.ensure_future(request_json(client, "GET", "/held", request_timeout=0.2))
    done, _ = await asyncio.wait({short}, timeout=60)  # a guard only: it fails after 0.2 s
    assert done
    assert isinstance(short.exception(), TimeoutError)
    gate.set()
    assert await request_json(client, "GET", "/next") == {"path": "/next"}
    assert server.connections == 2  # the timed-out request's connection was dropped


async def test_framing_headers_in_any_case_and_only_as_names(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """The headers that frame the body are found whatever their case, and only at the
    start of a line: a value that spells one is not it. Broken once: the search not tied
    to a line's start (red: the body is read as 1 byte long)."""
    body = orjson.dumps({"a": 1})

    async def script(peer: Peer) -> None:
        while await peer.next_request() is not None:
            await peer.send(
                f"HTTP/1.1 200 OK\r\nCONTENT-length: {len(body)}\r\n".encode()
                + b"X-Note: see content-length: 1\r\n\r\n"
                + body
            )

    server, client = await serve(script)
    assert await request_json(client, "GET", "/a") == {"a": 1}
    assert await request_json(client, "GET", "/b") == {"a": 1}
    assert server.connections == 1


class _Wire:
    """A transport that takes what is written and is never closing."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def test_an_answer_without_a_body_leaves_its_connection_reusable() -> None:
    """A 204 read in one piece or a byte at a time: what follows its head is nothing, so
    the connection can carry the next request. Broken once: the head still in the buffer
    when the answer ends (red: read a byte at a time, the connection is dropped)."""
    head = b"HTTP/1.1 204 No Content\r\nDate: Sat, 05 Dec 2026 18:00:00 GMT\r\n\r\n"
    for size in (len(head), 1):
        conn = Connection(cast(Pool, SimpleNamespace(clock=lambda: 0.0)))
        conn.connection_made(cast(asyncio.Transport, _Wire()))
        waiter = asyncio.get_running_loop().create_future()
        conn.send(b"DELETE /x HTTP/1.1\r\n\r\n", waiter, False)
        for at in range(0, len(head), size):
            conn.data_received(head[at : at + size])
        assert waiter.done()
        assert waiter.exception() is None
        assert (conn.status, conn.body, conn.keep_alive) == (204, b"", True), size


async def test_a_request_cancelled_mid_answer_drops_its_connection(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the connection given back after the cancellation (red)."""
    late, answered = asyncio.Event(), asyncio.Event()
    server, client = await serve(lambda peer: _slow_then_fast(peer, late, answered))
    call = asyncio.ensure_future(request_json(client, "GET", "/slow"))
    await answered.wait()  # the head and part of the body are on their way
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    late.set()
    assert await request_json(client, "GET", "/next") == {"path": "/next"}
    assert server.connections == 2
    assert pool_of(client).count == 1


async def test_at_most_the_connector_limit_of_connections_with_waiters_beyond(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the limit ignored (red: five connections)."""
    release = asyncio.Event()

    async def script(peer: Peer) -> None:
        while await peer.next_request() is not None:
            await release.wait()
            await peer.send(answer())

    server, client = await serve(script, connection_pool_maxsize=2)
    calls = [asyncio.ensure_future(request_json(client, "GET", f"/{i}")) for i in range(5)]
    await server.opened(2)
    release.set()
    assert await asyncio.gather(*calls) == [{}] * 5
    assert server.connections == 2
    assert pool_of(client).count == 2


async def test_a_connection_handed_to_a_waiter_cancelled_before_it_ran_is_passed_on(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At a bound of one: the first call's connection is handed to the waiting second call,
    which is cancelled before it runs. The connection goes back to the pool and serves the
    third call; nothing leaks. Broken once: the handed connection not passed on when its
    waiter is cancelled (red: the third call waits for ever, cut by its timeout)."""
    release = asyncio.Event()

    async def script(peer: Peer) -> None:
        while await peer.next_request() is not None:
            await release.wait()
            await peer.send(answer())

    server, client = await serve(script, connection_pool_maxsize=1)
    pool = pool_of(client)
    first = asyncio.ensure_future(request_json(client, "GET", "/first"))
    await server.opened(1)
    waiting = asyncio.Event()

    class Waiters(deque[asyncio.Future[Connection | None]]):
        def append(self, waiter: asyncio.Future[Connection | None]) -> None:
            super().append(waiter)
            waiting.set()

    pool.waiters = Waiters()
    second = asyncio.ensure_future(request_json(client, "GET", "/second"))
    await waiting.wait()
    turn = pool.waiters[0]
    hand_over = pool._release

    def release_then_cancel(conn: Connection) -> None:
        hand_over(conn)
        if turn.done() and not second.done():
            second.cancel()  # after the hand-over, before the second call runs again

    monkeypatch.setattr(pool, "_release", release_then_cancel)
    release.set()
    assert await first == {}
    with pytest.raises(asyncio.CancelledError):
        await second
    assert turn.result() is not None, "the connection was handed over"
    assert await request_json(client, "GET", "/third", request_timeout=5) == {}
    assert server.connections == 1
    assert pool.count == len(pool.idle) == 1
    assert not pool.waiters


async def test_idle_connections_are_closed_after_a_while_and_with_the_client(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken once: no sweep (red: the wait for the close times out); once: closing the
    client leaving the pool open (red)."""
    monkeypatch.setattr(_transport, "IDLE_SECONDS", 0.05)
    server, client = await serve(echo_path())
    await request_json(client, "GET", "/a")
    async with asyncio.timeout(30):  # a guard only: the close comes after 0.05 s
        await server.ended.wait()  # the client closed its idle connection
    assert pool_of(client).count == 0
    server.ended.clear()
    monkeypatch.setattr(_transport, "IDLE_SECONDS", 15.0)
    await request_json(client, "GET", "/b")
    pool = pool_of(client)
    await client.close()
    await server.ended.wait()
    assert pool.closed
    assert pool.count == 0


async def test_tls_with_a_client_certificate_and_a_server_name(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]], tmp_path: Path
) -> None:
    """The session's own SSLContext (CA, client certificate) and ``tls_server_name``.
    Broken once: the server name not passed (red: certificate error); once: the client
    certificate left out of the context (red: the server refuses)."""
    ca = CertificateAuthority(tmp_path, name="test-ca")
    served = ca.issue("server", "api.internal", server_names=["api.internal"])
    user = ca.issue("user", "alice")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert_file))
    context.load_cert_chain(served.cert, served.key)
    context.verify_mode = ssl.CERT_REQUIRED
    seen: list[str] = []

    async def script(peer: Peer) -> None:
        cert = peer.writer.get_extra_info("peercert")
        seen.append(dict(x[0] for x in cert["subject"])["commonName"])
        await _answer_once(peer, answer())

    server = RawServer(script, context)
    cfg = Configuration(host=await server.start())
    cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file = str(ca.cert_file), str(user.cert), str(user.key)
    cfg.tls_server_name = "api.internal"
    client = ApiClient(cfg)
    try:
        assert await request_json(client, "GET", "/a") == {}
        assert pool_of(client).ssl is not None
        assert seen == ["alice"]
        cfg.tls_server_name = None
        other = ApiClient(cfg)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await request_json(other, "GET", "/a")
        await other.close()
    finally:
        await client.close()
        await server.stop()


async def test_the_request_carries_the_clients_headers_token_query_and_body(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the query left unquoted (red); once: the token left out (red)."""
    got: list[Request] = []

    async def script(peer: Peer) -> None:
        while (req := await peer.next_request()) is not None:
            got.append(req)
            await peer.send(answer())

    _, client = await serve(script, api_key={"BearerToken": "Bearer t0k"})
    client.set_default_header("User-Agent", "op/1")
    await request_json(
        client, "PATCH", "/api/v1/namespaces/a/x", query={"fieldManager": "m=1&", "force": True},
        body=b'{"a":1}', content_type="application/merge-patch+json",
    )  # fmt: skip
    await request_json(client, "GET", "/api/v1/namespaces/a b/x", query={"q": "1 2"})
    assert [req[0] for req in got] == [
        "PATCH /api/v1/namespaces/a/x?fieldManager=m%3D1%26&force=true HTTP/1.1",
        "GET /api/v1/namespaces/a%20b/x?q=1+2 HTTP/1.1",  # quoted as aiohttp quotes it
    ]
    _, headers, body = got[0]
    assert headers["authorization"] == "Bearer t0k"
    assert headers["user-agent"] == "op/1"
    assert headers["content-type"] == "application/merge-patch+json"
    assert headers["host"] == str(client.configuration.host).split("//")[1]
    assert body == b'{"a":1}'


async def test_the_transport_stands_aside_for_proxies_fakes_and_foreign_sessions(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Broken once: the proxy not looked at (red); once: the trace configs not looked at
    (red)."""
    _, client = await serve(echo_path(), proxy="http://proxy.invalid:3128")
    assert pool_for(client) is None
    _, client = await serve(echo_path())
    tracing = aiohttp.TraceConfig()
    real = client.rest_client.pool_manager
    client.rest_client.pool_manager = aiohttp.ClientSession(trace_configs=[tracing])
    assert pool_for(client) is None
    await client.rest_client.pool_manager.close()
    client.rest_client.pool_manager = real
    assert pool_for(client) is not None
    host = str(client.configuration.host)
    calls: list[str] = []

    class Fake:
        async def request(self, method: str, url: str, **kwargs: object) -> object:
            calls.append(url)
            raise aiohttp.ClientConnectionError("fake")

    SESSIONS[host] = Fake()
    try:
        with pytest.raises(aiohttp.ClientConnectionError):
            await request_json(client, "GET", "/a")
    finally:
        del SESSIONS[host]
    assert calls == [host + "/a"]


async def test_an_aiohttp_web_server_is_answered_as_with_aiohttp() -> None:
    """The server kube-apiserver is not, but the one aiohttp users know: chunked streaming
    answers and a compressed one. Broken once: the body not decompressed (red)."""

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(3):
            await resp.write(orjson.dumps({"i": i})[:-1] if i == 0 else b"")
        await resp.write(b"}")
        await resp.write_eof()
        return resp

    async def compressed(request: web.Request) -> web.Response:
        resp = web.json_response({"big": "x" * 5000})
        resp.enable_compression()
        return resp

    app = web.Application()
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/compressed", compressed)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = ApiClient(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        assert await request_json(client, "GET", "/chunked") == {"i": 0}
        assert await request_json(client, "GET", "/compressed") == {"big": "x" * 5000}
        assert pool_of(client).count == 1
    finally:
        await client.close()
        await runner.cleanup()


async def test_lean_requests_are_counted_with_their_code_or_as_failed(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ``rest_client_*`` counts as on aiohttp. Broken once: the answer's status not
    recorded (red)."""
    fresh = RequestTotals()
    monkeypatch.setattr(_http, "REQUESTS", fresh)

    async def script(peer: Peer) -> None:
        await peer.next_request()
        await peer.send(answer(404, b"{}"))
        await peer.next_request()  # then closed unanswered

    _, client = await serve(script)
    with pytest.raises(ApiError):
        await request_json(client, "GET", "/a")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await request_json(client, "GET", "/b")
    host = str(client.configuration.host).split("//")[1]
    assert fresh.counts() == {("404", "GET", host): 1, (ERROR_CODE, "GET", host): 1}
    assert sum(fresh.latencies()[("GET", host)].counts) == 2


async def test_the_pool_counts_right_through_closes_cancellations_and_waits(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
) -> None:
    """Forty calls at a bound of three, answers that close their connection or close it
    unanswered, calls cancelled at any point: afterwards every place is accounted for (the
    idle connections are all that is counted) and nothing waits. Broken once: a place not
    freed when a connection is dropped (red: the later calls wait for ever, cut by their
    timeout)."""
    rng = random.Random(7)

    async def script(peer: Peer) -> None:
        while (req := await peer.next_request()) is not None:
            n = int(req[0].split()[1].strip("/"))
            for _ in range(n % 4):
                await asyncio.sleep(0)
            if n % 5 == 0:
                return  # closed unanswered
            await peer.send(answer(head="Connection: close\r\n" if n % 7 == 0 else ""))

    _, client = await serve(script, connection_pool_maxsize=3)
    calls = [
        asyncio.ensure_future(request_json(client, "GET", f"/{i}", request_timeout=20))
        for i in range(40)
    ]
    for _ in range(12):
        for _ in range(rng.randrange(5)):
            await asyncio.sleep(0)
        rng.choice(calls).cancel()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert not [r for r in results if isinstance(r, TimeoutError)]
    assert {type(r).__name__ for r in results} <= {
        "dict", "CancelledError", "ServerDisconnectedError"
    }  # fmt: skip
    pool = pool_of(client)
    assert not pool.waiters
    assert pool.count == len(pool.idle) <= 3


async def test_the_switch_sends_every_request_on_aiohttp_and_names_a_wrong_value(
    serve: Callable[..., Awaitable[tuple[RawServer, ApiClient]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, client = await serve(echo_path())
    monkeypatch.setenv("FASTCTL_HTTP", "aiohttp")
    assert pool_for(client) is None
    assert await request_json(client, "GET", "/on-aiohttp") == {"path": "/on-aiohttp"}
    _, client = await serve(echo_path())
    monkeypatch.setenv("FASTCTL_HTTP", "lean")
    assert pool_for(client) is not None
    _, client = await serve(echo_path())
    monkeypatch.setenv("FASTCTL_HTTP", "fast")
    with pytest.raises(ValueError, match="FASTCTL_HTTP must be 'lean' or 'aiohttp', not 'fast'"):
        await request_json(client, "GET", "/a")
