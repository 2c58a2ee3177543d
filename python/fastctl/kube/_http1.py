"""One keep-alive HTTP/1.1 connection to an API server, as an `asyncio.Protocol`.

The lean transport (`fastctl.kube._transport`) sends one request at a time on a connection
and waits for the whole answer, with no stream reader, no per-header objects and no timers
of its own. The extension frames it (`fastctl._core.Http1Reader`, one call per read): the
head read (only ``Content-Length``, ``Transfer-Encoding``, ``Connection`` and
``Content-Encoding`` looked at; the header lines kept as one bytes for
`LeanResponse.headers`, split only when a caller reads a header), the body read by
``Content-Length``, in chunks, or until the server closes (an HTTP/1.0 answer without a
length), informational answers (1xx) skipped; Python sees the whole answer once. A
compressed body is decompressed here (gzip or deflate: the transport asks for gzip, as
aiohttp does).

A watch (``send(..., stream=...)``) is answered the same way unless its answer is a 200: then
the request is done once the head is in, and every read of the body after it goes to a
`LeanStream` (`fastctl.kube._watch_stream`) as it arrives, which decodes it in the extension.

A connection that ends before its answer is complete fails the request with the error
aiohttp raises in the same case, so retries (`fastctl.kube._call_retry`) and messages do
not depend on the transport: ``ServerDisconnectedError`` (closed before the answer, e.g. a
kept-alive connection the server had just closed), ``ClientPayloadError`` (closed within
the body), ``ClientOSError`` (reset).

The same connection over TLS done in the extension is `fastctl.kube._tls_connection`.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING

import aiohttp
from multidict import CIMultiDictProxy

from fastctl._core import Http1Reader
from fastctl.kube._watch_stream import LeanStream, headers_of

if TYPE_CHECKING:
    from fastctl.kube._transport import Pool

__all__ = ["Connection", "LeanResponse"]

_HEAD, _LENGTH, _CHUNKED, _UNTIL_CLOSE, _DONE, _STREAM = range(6)
"""Where a connection is: `_HEAD` while an answer is awaited (the extension's reader says
where it is in it, with the same values up to `_DONE`), `_STREAM` while a watch reads its
body, `_DONE` idle."""


Answer = tuple[int, str, bytes, bytes, bool, bytes, bool, int | None]
"""What `Http1Reader` gives: status, reason, header lines, body, keep-alive,
``Content-Encoding``, and the body's framing (chunked, length) for a watch."""


def lines_of(head: bytes) -> list[bytes]:
    """The header lines of a head as the extension gives them (CRLF between them)."""
    return head.split(b"\r\n") if head else []


class LeanResponse:
    """A complete answer, offering what fastctl's callers read of an
    ``aiohttp.ClientResponse``: ``status``, ``reason``, ``headers`` (case-insensitive),
    ``read()``, ``release()`` and ``async with``."""

    __slots__ = ("_body", "_head", "_headers", "reason", "status")

    def __init__(self, status: int, reason: str, head: bytes, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self._head = head  # the header lines, CRLF between them
        self._body = body
        self._headers: CIMultiDictProxy[str] | None = None

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The answer's headers, made on first use (most answers are never asked)."""
        if self._headers is None:
            self._headers = headers_of(lines_of(self._head))
        return self._headers

    @property
    def content_type(self) -> str:
        """The media type of the body, without parameters, as aiohttp gives it."""
        return self.headers.get("Content-Type", "application/octet-stream").partition(";")[0]

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        """Nothing to give back: the connection was returned once the body was read."""

    async def __aenter__(self) -> LeanResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class Connection(asyncio.Protocol):
    """One connection of a `Pool`: idle, or waiting for the answer to one request."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.reader = Http1Reader()
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.counted = True  # holds one of the pool's places until forgotten
        self.idle_since = 0.0
        self.head_at = 0.0
        self.phase = _DONE
        self.status = 0
        self.reason = ""
        self.head = b""  # the answer's header lines, CRLF between them
        self.keep_alive = True
        self.body = b""
        self._no_body = False
        self._stream: float | None = None  # a watch: its read timeout
        self.stream: LeanStream | None = None
        self.deadline: float | None = None  # the request under way must be answered by then
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # -- the pool's side ----------------------------------------------------------------

    @property
    def lines(self) -> list[bytes]:
        """The answer's header lines."""
        return lines_of(self.head)

    @property
    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def send(
        self, data: bytes, waiter: asyncio.Future[None], no_body: bool, stream: float | None = None
    ) -> None:
        """Write one request; `waiter` is done when its whole answer is in (or failed), or,
        for a watch (`stream`: the read timeout of its body), when the head of a 200 is:
        `stream` then reads the body."""
        assert self.transport is not None
        self.waiter = waiter
        self.phase = _HEAD
        self._no_body = no_body
        self._stream = stream
        self.head_at = 0.0
        self.reader.expect(no_body, stream is not None)
        self.transport.write(data)

    def abort(self) -> None:
        """Drop the connection at once: an answer cut short must never be read by the next
        request."""
        self.waiter = None
        self.disarm()
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.disarm()
        if self.transport is not None:
            self.transport.close()

    def arm(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Fail the request about to be sent with `TimeoutError` unless it is answered by
        `deadline` (the loop's time; ``None``: no limit). One timer serves every request of
        the connection: it is moved only to an earlier time; when it fires for an earlier
        request's deadline, it is armed again for the current one (object calls have the
        same total, so a connection sending one after another makes a timer a minute, not
        one per request)."""
        self.deadline = deadline
        if deadline is not None and (self._timer is None or deadline < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        deadline = self.deadline
        waiter = self.waiter
        if deadline is None or waiter is None or waiter.done():
            return  # idle, or answered: the next request arms it again
        if deadline > self._timer_at:  # armed for an earlier request: this one has time
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._due, loop)
            return
        waiter.set_exception(TimeoutError())  # its total time is spent: the sender drops it

    def disarm(self) -> None:
        """Stop the timer: the connection is dropped."""
        self.deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.phase == _STREAM:
            self.stream.received(data)  # type: ignore[union-attr]  # set with the phase
            return
        if self.waiter is None or self.phase == _DONE:
            self.keep_alive = False  # bytes nobody asked for: this connection is out of step
            self.abort()
            return
        try:
            answer = self.reader.feed(data)
        except ValueError as exc:
            self._malformed(exc)
            return
        if answer is not None:
            self._answer(answer)
        elif not self.head_at and self.reader.phase != _HEAD:
            self.head_at = self.pool.clock()  # the head is in, the body is not yet

    def eof_received(self) -> bool:
        if self.phase == _HEAD:
            answer = self.reader.close()  # the end of a body without a length
            if answer is not None:
                self._answer(answer)
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.phase == _STREAM:
            self.stream.lost(exc)  # type: ignore[union-attr]
            return
        waiter = self.waiter
        if waiter is None or waiter.done():
            self.pool.lost(self)
            return
        phase = self.reader.phase
        answer = self.reader.close() if exc is None else None
        if answer is not None:
            self._answer(answer)
        elif isinstance(exc, OSError):
            self._fail(aiohttp.ClientOSError(*exc.args))
        elif phase in (_LENGTH, _CHUNKED, _UNTIL_CLOSE):
            self._fail(aiohttp.ClientPayloadError("Response payload is not completed"))
        else:
            self._fail(aiohttp.ServerDisconnectedError())

    # -- the answer ----------------------------------------------------------------------

    def _answer(self, answer: Answer) -> None:
        """The whole answer from the reader, or the head of a watch's 200 with the bytes of
        its body read so far."""
        status, self.reason, self.head, body, self.keep_alive, encoding, chunked, length = answer
        self.status = status
        if not self.head_at:
            self.head_at = self.pool.clock()
        if self._stream is not None and status == 200 and not self._no_body:
            self.phase = _STREAM
            self.stream = stream = LeanStream(self, chunked, length, encoding, self._stream)
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if body:
                stream.received(body)
            return
        if encoding and body and encoding in (b"gzip", b"deflate"):
            try:
                body = _decompress(body, encoding)
            except aiohttp.ClientPayloadError as exc:
                self._fail(exc)
                return
        self.body = body
        self.phase = _DONE
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _malformed(self, exc: ValueError) -> None:
        self._fail(aiohttp.ClientPayloadError(f"malformed answer from the server: {exc}"))
        self.abort()

    def reuse(self) -> None:
        """A watch's body was read to its end: the connection is idle again."""
        self.phase, self.stream, self.waiter, self._stream = _DONE, None, None, None

    def _fail(self, exc: BaseException) -> None:
        self.keep_alive = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


def _decompress(body: bytes, encoding: bytes) -> bytes:
    """A compressed body's bytes (the transport asks for gzip, as aiohttp does)."""
    try:
        if encoding == b"gzip":
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate
    except zlib.error as exc:
        raise aiohttp.ClientPayloadError(f"cannot decompress the answer: {exc}") from None
