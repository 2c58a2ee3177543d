"""One keep-alive HTTP/1.1 connection to an API server, as an `asyncio.Protocol`.

The lean transport (`fastctl.kube._transport`) sends one request at a time on a connection
and waits for the whole answer: this module parses it as the bytes arrive, with no stream
reader, no per-header objects and no timers of its own. The head is split by hand (only
``Content-Length``, ``Transfer-Encoding`` and ``Connection`` are looked at; the rest is kept
as lines for `LeanResponse.headers`, built only when a caller reads a header), the body is
read by ``Content-Length``, in chunks, or until the server closes (an HTTP/1.0 answer
without a length). Informational answers (1xx) are skipped.

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
import re
import zlib
from typing import TYPE_CHECKING

import aiohttp
from multidict import CIMultiDictProxy

from fastctl.kube._watch_stream import LeanStream, headers_of

if TYPE_CHECKING:
    from fastctl.kube._transport import Pool

__all__ = ["Connection", "LeanResponse"]

_MAX_HEAD = 1 << 20
"""The longest answer head accepted (aiohttp's limits are of the same order)."""

_HEAD, _LENGTH, _CHUNKED, _UNTIL_CLOSE, _DONE, _STREAM = range(6)

_FRAMING = re.compile(
    rb"\r\n[ \t]*(content-length|transfer-encoding|connection|content-encoding)[ \t]*:([^\r]*)"
).findall
"""The headers of a lowered head that say how its body is framed, as (name, value) pairs in
their order: found in one pass in C, not line by line (an answer carries a dozen others)."""


class LeanResponse:
    """A complete answer, offering what fastctl's callers read of an
    ``aiohttp.ClientResponse``: ``status``, ``reason``, ``headers`` (case-insensitive),
    ``read()``, ``release()`` and ``async with``."""

    __slots__ = ("_body", "_headers", "_lines", "reason", "status")

    def __init__(self, status: int, reason: str, lines: list[bytes], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self._lines = lines
        self._body = body
        self._headers: CIMultiDictProxy[str] | None = None

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The answer's headers, made on first use (most answers are never asked)."""
        if self._headers is None:
            self._headers = headers_of(self._lines)
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
        self.buf = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.counted = True  # holds one of the pool's places until forgotten
        self.idle_since = 0.0
        self.head_at = 0.0
        self.phase = _DONE
        self.status = 0
        self.reason = ""
        self.lines: list[bytes] = []
        self.keep_alive = True
        self.body = b""
        self._no_body = False
        self._left = 0
        self._parts: list[bytes] = []
        self._encoding = b""
        self._stream: float | None = None  # a watch: its read timeout
        self.stream: LeanStream | None = None
        self.deadline: float | None = None  # the request under way must be answered by then
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # -- the pool's side ----------------------------------------------------------------

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
            if self.phase == _HEAD and not self.buf:
                self._whole(data)  # most answers arrive in one read: no copy to the buffer
            else:
                self.buf += data
                self._parse()
        except (ValueError, IndexError) as exc:
            self._fail(aiohttp.ClientPayloadError(f"malformed answer from the server: {exc}"))
            self.abort()

    def eof_received(self) -> bool:
        if self.phase == _UNTIL_CLOSE:
            self._finish(bytes(self.buf))
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
        if self.phase == _UNTIL_CLOSE and exc is None:
            self._finish(bytes(self.buf))
        elif isinstance(exc, OSError):
            self._fail(aiohttp.ClientOSError(*exc.args))
        elif self.phase in (_LENGTH, _CHUNKED, _UNTIL_CLOSE):
            self._fail(aiohttp.ClientPayloadError("Response payload is not completed"))
        else:
            self._fail(aiohttp.ServerDisconnectedError())

    # -- parsing ------------------------------------------------------------------------

    def _whole(self, data: bytes) -> None:
        """The first read of an answer: when it holds the head and exactly the body its
        ``Content-Length`` says, finish from it as it is; anything else goes through the
        buffer (`_parse`)."""
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            self._head(data[:end])
            if self.phase == _LENGTH and len(data) - end - 4 == self._left:
                self._finish(data[end + 4 :])
                return
            data = data[end + 4 :]
            if self.phase == _DONE:  # answered without a body: more is out of step
                if data:
                    self.keep_alive = False
                return
        self.buf += data
        self._parse()

    def _parse(self) -> None:
        buf = self.buf
        while self.phase == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("the answer's head is too long")
                return
            head = bytes(buf[:end])
            del buf[: end + 4]  # first: what the buffer holds after the head is the body's
            self._head(head)
        if self.phase == _STREAM:
            if buf:
                data = bytes(buf)
                buf.clear()
                self.stream.received(data)  # type: ignore[union-attr]
            return
        if self.phase == _LENGTH:
            if len(buf) >= self._left:
                body = bytes(buf[: self._left])
                del buf[: self._left]
                self._finish(body)
        elif self.phase == _CHUNKED and self._chunks():
            self._finish(b"".join(self._parts))

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        first = lines[0]
        if not first.startswith(b"HTTP/1.") or len(first) < 12:
            raise ValueError(f"bad status line {first[:40]!r}")
        status = int(first[9:12])
        if 100 <= status < 200:  # informational: the real answer follows
            return
        self.head_at = self.pool.clock()
        self.status = status
        self.reason = first[13:].decode("latin-1")
        self.lines = lines = lines[1:]
        keep_alive = first[7:8] != b"0"  # HTTP/1.0: closed unless it says keep-alive
        length = -1
        chunked = False
        self._encoding = b""
        for name, value in _FRAMING(head.lower()):  # only the headers that frame the body
            if name == b"content-length":
                length = int(value)
                if length < 0:
                    raise ValueError("negative Content-Length")
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                tokens = value.lower()
                if b"close" in tokens:
                    keep_alive = False
                elif b"keep-alive" in tokens:
                    keep_alive = True
            elif name == b"content-encoding":
                self._encoding = value.strip().lower()
        self.keep_alive = keep_alive
        if self._stream is not None and status == 200 and not self._no_body:
            self.phase = _STREAM
            self.stream = LeanStream(self, chunked, length if length >= 0 else None,
                                     self._encoding, self._stream)  # fmt: skip
            if not chunked and length < 0:
                self.keep_alive = False
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif self._no_body or status in (204, 304):
            self._finish(b"")
        elif chunked:
            self.phase, self._left, self._parts = _CHUNKED, 0, []
        elif length >= 0:
            self.phase, self._left = _LENGTH, length
        else:
            self.phase, self.keep_alive = _UNTIL_CLOSE, False

    def _chunks(self) -> bool:
        """Move whole chunks from the buffer to the parts; True once the last one (and its
        trailers) is in."""
        buf = self.buf
        while True:
            if self._left > 0:  # inside a chunk: wait for it and its CRLF whole
                size = self._left
                if len(buf) < size + 2:
                    return False
                if buf[size : size + 2] != b"\r\n":
                    raise ValueError("a chunk does not end with CRLF")
                self._parts.append(bytes(buf[:size]))
                del buf[: size + 2]
                self._left = 0
            else:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        raise ValueError("a chunk size line is too long")
                    return False
                line = bytes(buf[:end])
                del buf[: end + 2]
                if self._left < 0:  # the trailers, up to an empty line
                    if not line:
                        return True
                    continue
                size = int(line.split(b";", 1)[0].strip(), 16)
                self._left = size if size > 0 else -1

    def reuse(self) -> None:
        """A watch's body was read to its end: the connection is idle again."""
        self.phase, self.stream, self.waiter, self._stream = _DONE, None, None, None

    def _finish(self, body: bytes) -> None:
        if self._encoding in (b"gzip", b"deflate") and body:
            try:
                body = _decompress(body, self._encoding)
            except aiohttp.ClientPayloadError as exc:
                self._fail(exc)
                return
        self.body = body
        self.phase = _DONE
        if self.buf:  # more than the answer: not safe to reuse
            self.keep_alive = False
            self.buf.clear()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

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
