"""The lean watch stream's flow control (`fastctl.kube._watch_stream.HIGH_WATER`), with a
fake connection whose transport counts ``pause_reading``/``resume_reading``: no socket,
no timing, every step driven by the test. Past a megabyte received and not decoded, the
stream pauses the socket once; it resumes when the watcher, having decoded all of it,
waits for more; and every frame arrives once, in order, across the pause, however the
reads were cut."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from fastctl._core import Item
from fastctl.kube._lines import Batch
from fastctl.kube._watch_stream import HIGH_WATER, LeanStream


class FakeTransport:
    def __init__(self) -> None:
        self.pauses = 0
        self.resumes = 0
        self.paused = False
        self.closing = False

    def pause_reading(self) -> None:
        assert not self.paused, "paused twice"
        self.pauses += 1
        self.paused = True

    def resume_reading(self) -> None:
        assert self.paused, "resumed while reading"
        self.resumes += 1
        self.paused = False

    def is_closing(self) -> bool:
        return self.closing


class FakePool:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.finished_with: list[bool] = []

    def finished(self, conn: Any, clean: bool) -> None:
        self.finished_with.append(clean)


class FakeConnection:
    """What a `LeanStream` reads of its connection (`fastctl.kube._http1.Connection`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = FakePool(loop)
        self.status, self.reason = 200, "OK"
        self.lines: list[bytes] = []
        self.transport = FakeTransport()
        self.lost = False

    def abort(self) -> None:
        self.lost = True


def line(rv: int) -> bytes:
    meta = {"name": f"o{rv}", "namespace": "ns", "resourceVersion": str(rv)}
    obj = {"metadata": {**meta, "annotations": {"pad": "x" * 20_000}}}
    return orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"


def versions(batch: Batch | None) -> list[int]:
    assert batch is not None, "the stream ended"
    assert batch.error is None, batch.error
    return [int(item.resource_version or 0) for _, item in batch.frames if isinstance(item, Item)]


def until_close(conn: FakeConnection) -> LeanStream:
    """A body that lasts until the connection closes (no framing to undo)."""
    stream = LeanStream(conn, False, None, b"", 30.0)  # type: ignore[arg-type]
    return stream.decode(
        strip=False, identity=None, replace=False, max_line=1 << 20, protobuf=False
    )


def cuts(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def test_past_high_water_the_socket_pauses_once_and_resumes_when_drained() -> None:
    """Broken once: no pause past HIGH_WATER (red: pauses 0); once: no resume when the
    watcher waits again (red: resumes 0, the stream stalled); once: the reads kept before
    the last dropped when decoded (red: frames lost)."""
    conn = FakeConnection(asyncio.get_running_loop())
    transport = conn.transport
    stream = until_close(conn)
    body = b"".join(line(rv) for rv in range(1, 81))  # about 1.6 MB
    reads = cuts(body, 37_001)  # reads cut mid-frame, as a socket cuts them
    fed = 0
    while fed * 37_001 <= HIGH_WATER:
        stream.received(reads[fed])
        fed += 1
        assert transport.pauses == (1 if fed * 37_001 > HIGH_WATER else 0)
    stream.received(reads[fed])  # a read already under way when the pause came
    fed += 1
    assert transport.pauses == 1, "paused once, not per read"
    got = versions(await stream.read())  # decodes all it holds: no wait, no resume
    assert transport.resumes == 0
    assert transport.paused

    waiting = asyncio.ensure_future(stream.read())
    await asyncio.sleep(0)  # the watcher drained it all and waits: the socket resumes
    assert transport.resumes == 1
    assert not transport.paused
    for data in reads[fed:]:
        stream.received(data)
    got += versions(await waiting)
    conn.lost = True  # the end of a body that lasts until close, as the connection says it
    stream.lost(None)
    while (batch := await stream.read()) is not None:
        got += versions(batch)
    assert got == list(range(1, 81)), "every frame once, in order"
    assert transport.pauses == 1
    assert transport.resumes == 1


async def test_a_stream_released_while_paused_closes_its_connection() -> None:
    """A body read to its end while the socket is paused (it resumes only at the next
    wait): the connection is not given back to the pool, where nothing would read it. A
    closing transport is never paused.
    Broken once: the paused state left out of `release` (red: a clean release)."""
    conn = FakeConnection(asyncio.get_running_loop())
    body = line(1) * 60
    stream = LeanStream(conn, False, len(body), b"", 30.0)  # type: ignore[arg-type]
    stream.decode(strip=False, identity=None, replace=False, max_line=1 << 20, protobuf=False)
    for data in cuts(body, 65_536):
        stream.received(data)
    assert conn.transport.pauses == 1
    assert versions(await stream.read()) == [1] * 60
    assert await stream.read() is None  # the body's end: no wait, still paused
    stream.release()
    assert conn.pool.finished_with == [False]

    closing = FakeConnection(asyncio.get_running_loop())
    closing.transport.closing = True
    other = until_close(closing)
    for data in cuts(line(1) * 60, 65_536):
        other.received(data)
    assert closing.transport.pauses == 0
