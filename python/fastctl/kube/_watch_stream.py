"""A watch stream on the lean transport: each read off the socket decoded in one call.

On aiohttp, a watch event went through its HTTP parser, a stream reader, a read timer
rescheduled per read, and `fastctl.kube._lines.FrameReader` splitting lines in Python. Here,
the lean transport's connection (`fastctl.kube._http1`), once the head of a 200 is in,
hands every read of the body as it is to a `LeanStream`, which keeps it until the watcher
asks for frames; then the extension's `WatchBody` undoes the chunked coding and decodes
every frame completed, in one call (`fastctl._core`, the one decoder of watch lines and
protobuf frames). The watcher reads a `LeanStream` as it reads a `FrameReader`: `read`
gives a `Batch` per call, ``None`` at the end of the stream.

What aiohttp did stays: no byte for the read timeout while the watcher waits is a
`TimeoutError`; a connection closed before the body's end is aiohttp's
``ClientPayloadError`` (reset: ``ClientOSError``), after the frames received before it; a
body that ends inside a frame is a `WatchStreamError`; a read of blank lines alone (a
keep-alive) is an empty `Batch`, proof of a live stream to the watcher. Reads wait at most a
megabyte (`HIGH_WATER`) ahead of the watcher: beyond it, the connection stops reading until
the watcher catches up. The stream is asked uncompressed (an answer compressed anyway is an
error). Released after its end, the connection goes back to the pool; before, it is closed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from fastctl._core import WatchBody
from fastctl.errors import WatchStreamError
from fastctl.kube._lines import Batch
from fastctl.kube._wire import Identity

if TYPE_CHECKING:
    from fastctl.kube._http1 import Connection

__all__ = ["HIGH_WATER", "LeanStream", "headers_of"]

HIGH_WATER = 1 << 20
"""The bytes received and not yet decoded above which the connection stops reading."""


def headers_of(lines: list[bytes]) -> CIMultiDictProxy[str]:
    """An answer's header lines as aiohttp's case-insensitive headers."""
    pairs = CIMultiDict[str]()
    for line in lines:
        name, _, value = line.partition(b":")
        pairs.add(name.strip().decode("latin-1"), value.strip().decode("latin-1"))
    return CIMultiDictProxy(pairs)


class LeanStream:
    """The 200 answer of a watch, its body read as it arrives (see the module docstring).

    Offers what the watcher reads of a response (``status``, ``reason``, ``headers``,
    ``content_type``, ``release()``, ``async with``) and of a `FrameReader` (`read`), once
    `decode` said how to decode it."""

    __slots__ = (
        "_body",
        "_chunked",
        "_conn",
        "_error",
        "_headers",
        "_last",
        "_length",
        "_loop",
        "_paused",
        "_raw",
        "_raw_size",
        "_read_timeout",
        "_released",
        "_timer",
        "_until_close",
        "_waiter",
        "reason",
        "status",
    )

    def __init__(
        self,
        conn: Connection,
        chunked: bool,
        length: int | None,
        encoding: bytes,
        read_timeout: float,
    ) -> None:
        self._conn = conn
        self._loop = conn.pool.loop
        self.status = conn.status
        self.reason = conn.reason
        self._headers: CIMultiDictProxy[str] | None = None
        self._chunked, self._length = chunked, length
        self._until_close = not chunked and length is None
        self._body: WatchBody | None = None
        self._raw: list[bytes] = []
        self._raw_size = 0
        self._error: BaseException | None = None
        if encoding not in (b"", b"identity"):
            self._error = aiohttp.ClientPayloadError(
                f"a watch stream sent with Content-Encoding {encoding.decode('latin-1')!r}"
            )
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._read_timeout = read_timeout
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._released = False

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        if self._headers is None:
            self._headers = headers_of(self._conn.lines)
        return self._headers

    @property
    def content_type(self) -> str:
        """The media type of the body, without parameters, as aiohttp gives it."""
        return self.headers.get("Content-Type", "application/octet-stream").partition(";")[0]

    def decode(
        self, *, strip: bool, identity: Identity, replace: bool, max_line: int, protobuf: bool
    ) -> LeanStream:
        """Say how to decode the body (as `FrameReader` is told); the stream, to `read`."""
        api_version, kind = identity if identity is not None else (None, None)
        self._body = WatchBody(
            self._chunked, self._length, protobuf, strip, api_version, kind, replace, max_line
        )
        return self

    # -- the watcher's side -------------------------------------------------------------

    async def read(self) -> Batch | None:
        """The frames of the bytes received since the last read (waiting for some), or
        ``None`` at the end of the stream."""
        body = self._body
        assert body is not None, "decode() first"
        while True:
            if self._raw:
                batch = self._decode(body)
                if batch is not None:
                    return batch
                continue
            if body.done or (self._until_close and self._conn.lost and self._error is None):
                if body.pending:
                    cut = body.pending
                    raise WatchStreamError(f"watch stream truncated mid-line ({cut} bytes)")
                return None
            if self._error is not None:
                raise self._error
            await self._wait()

    def release(self) -> None:
        """Give the connection back: to the pool after the stream's end, else closed."""
        if self._released:
            return
        self._released = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        body = self._body
        clean = (
            body is not None
            and body.done
            and not body.overrun
            and not self._raw
            and not self._paused
            and self._error is None
        )
        self._conn.pool.finished(self._conn, clean)

    async def __aenter__(self) -> LeanStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def _decode(self, body: WatchBody) -> Batch | None:
        raw = self._raw
        data = raw[0] if len(raw) == 1 else b"".join(raw)
        raw.clear()
        self._raw_size = 0
        try:
            frames, error, line = body.feed(data)
        except ValueError as exc:
            self._conn.abort()
            self._error = aiohttp.ClientPayloadError(f"malformed answer from the server: {exc}")
            raise self._error from None
        if frames or error is not None or not (body.pending or body.done):
            # A read of blank lines alone (a server's or proxy's keep-alive) is an empty
            # batch, as `FrameReader` gives it: proof of a live stream, which resets the
            # watcher's backoff. A read that ends inside a frame waits for the rest.
            return Batch(frames, error, line or b"")
        return None

    async def _wait(self) -> None:
        """Wait for a read (or the connection's end); a `TimeoutError` after the read
        timeout without one. One timer serves many waits: it is moved on only when due."""
        loop = self._loop
        self._waiter = waiter = loop.create_future()
        self._last = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._last + self._read_timeout, self._due)
        if self._paused:
            self._paused = False
            transport = self._conn.transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()
        try:
            await waiter
        finally:
            self._waiter = None

    def _due(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # no wait under way: the next one sets the timer again
        due = self._last + self._read_timeout
        if self._loop.time() >= due - 0.001:  # a timer may run a hair early
            waiter.set_exception(TimeoutError())
        else:
            self._timer = self._loop.call_at(due, self._due)

    # -- the connection's side ----------------------------------------------------------

    def received(self, data: bytes) -> None:
        """One read of the body, kept as it is until the watcher asks (dropped after an
        error: nothing after it is read)."""
        if self._error is not None:
            return
        self._raw.append(data)
        self._raw_size += len(data)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._raw_size > HIGH_WATER and not self._paused:
            transport = self._conn.transport
            if transport is not None and not transport.is_closing():
                self._paused = True
                transport.pause_reading()

    def lost(self, exc: Exception | None) -> None:
        """The connection closed: the body's end (one that lasts until then, or one read
        whole), or an error once the reads before it are decoded."""
        if self._error is None:
            if isinstance(exc, OSError):
                self._error = aiohttp.ClientOSError(*exc.args)
            elif exc is not None or not self._until_close:
                self._error = aiohttp.ClientPayloadError("Response payload is not completed")
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
