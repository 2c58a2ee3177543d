"""The lean transport's connection reading answers through the extension's framing
(`fastctl._core.Http1Reader`): split anywhere, compressed, until the close, malformed or
cut short, as `fastctl.kube._http1.Connection` hands them to the pool."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import aiohttp
import pytest

from fastctl._core import Http1Reader
from fastctl.kube import _http1
from fastctl.kube._http1 import Connection, LeanResponse
from fastctl.kube._transport import Pool


class _Wire:
    """A transport that takes what is written, and notes an abort."""

    def __init__(self) -> None:
        self.aborted = False

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def _connection() -> tuple[Connection, _Wire, asyncio.Future[None], list[float]]:
    """A connection that sent a GET; its clock reads what the list's one item says."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    conn = Connection(cast(Pool, SimpleNamespace(clock=clock, lost=lambda conn: None)))
    wire = _Wire()
    conn.connection_made(cast(asyncio.Transport, wire))
    waiter = asyncio.get_running_loop().create_future()
    conn.send(b"GET /x HTTP/1.1\r\n\r\n", waiter, False)
    return conn, wire, waiter, now


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Trace: a\r\n"


async def test_an_answer_split_anywhere_is_read_whole_and_timed_at_its_head() -> None:
    """Every split of a chunked answer gives the same answer, its headers, and the time its
    head arrived (not the body's end). Broken once: the head's time taken when the answer
    is whole (red: the time of the last read)."""
    framing = b"Transfer-Encoding: chunked\r\n\r\n"
    answer = HEAD + framing + b'4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
    head_end = len(HEAD + framing)
    for size in (len(answer), 1, 7, 40):
        conn, wire, waiter, now = _connection()
        for at in range(0, len(answer), size):
            assert not waiter.done()
            now[0] = at
            conn.data_received(answer[at : at + size])
        assert waiter.done(), size
        assert waiter.exception() is None, size
        response = LeanResponse(conn.status, conn.reason, conn.head, conn.body)
        assert (response.status, response.reason, await response.read()) == (200, "OK", b'{"a":1}')
        assert response.headers["x-trace"] == "a"
        assert response.content_type == "application/json"
        assert conn.keep_alive
        assert not wire.aborted
        assert conn.head_at == (head_end - 1) // size * size, size


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate
    ],
)
async def test_a_compressed_body_is_given_decompressed(
    encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    """Broken once: the encoding not passed on from the head (red: the compressed bytes)."""
    body = b'{"items": []}' * 50
    packed = compress(body)
    conn, _, waiter, _ = _connection()
    framing = f"Content-Encoding: {encoding.upper()}\r\nContent-Length: {len(packed)}\r\n\r\n"
    conn.data_received(HEAD + framing.encode())
    conn.data_received(packed)
    assert waiter.exception() is None
    assert conn.body == body


async def test_a_malformed_answer_fails_its_request_and_drops_the_connection() -> None:
    """Broken once: the framing error not caught (red: a ValueError out of the protocol)."""
    conn, wire, waiter, _ = _connection()
    conn.data_received(HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n")
    exc = waiter.exception()
    assert isinstance(exc, aiohttp.ClientPayloadError)
    assert str(exc) == 'malformed answer from the server: bad chunk size line "zz"'
    assert wire.aborted
    assert not conn.keep_alive


async def test_a_body_until_the_close_ends_with_it_and_a_cut_one_is_a_payload_error() -> None:
    """Broken once: the close not asked for the answer (red: a payload error)."""
    conn, _, waiter, _ = _connection()
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    assert not waiter.done()
    conn.eof_received()
    assert waiter.exception() is None
    assert (conn.body, conn.keep_alive) == (b"all of it", False)

    conn, _, waiter, _ = _connection()
    conn.data_received(HEAD + b"Content-Length: 10\r\n\r\nabc")
    conn.connection_lost(None)
    exc = waiter.exception()
    assert isinstance(exc, aiohttp.ClientPayloadError), exc

    conn, _, waiter, _ = _connection()
    conn.data_received(HEAD)
    conn.connection_lost(None)
    assert isinstance(waiter.exception(), aiohttp.ServerDisconnectedError)


def test_the_readers_phases_are_the_connections() -> None:
    """The connection compares the reader's phase with its own constants."""
    reader = Http1Reader()
    assert reader.phase == _http1._DONE
    reader.expect(False, False)
    assert reader.phase == _http1._HEAD
    for framing, phase in [
        (b"Content-Length: 5", _http1._LENGTH),
        (b"Transfer-Encoding: chunked", _http1._CHUNKED),
        (b"X: y", _http1._UNTIL_CLOSE),
    ]:
        reader.expect(False, False)
        assert reader.feed(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\nab") is None
        assert reader.phase == phase
    answer = reader.close()
    assert answer == (200, "OK", b"X: y", b"ab", False, b"", False, None)
    assert reader.phase == _http1._DONE
