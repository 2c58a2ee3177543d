"""A watch stream read as it arrives (`fastctl.kube._lines.FrameReader`): however the bytes
are cut into chunks, every line is decoded once, in order, none lost, none twice; what the
line reader refused (a line over the limit, a stream that stops inside a line, a malformed
line) is refused still, after the lines before it."""

from __future__ import annotations

import asyncio
import itertools

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastctl._core import Item
from fastctl.errors import WatchStreamError
from fastctl.kube._lines import Batch, FrameReader

from .fuzzing import fuzz_settings


def line(etype: str, name: str, rv: int) -> bytes:
    obj = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}
    return orjson.dumps({"type": etype, "object": obj}) + b"\n"


STREAM = [line("ADDED", f"cm-{i}", i) for i in range(1, 40)] + [b" \r\n", line("DELETED", "x", 99)]


class Chunks:
    """A response's ``content`` that hands out the given chunks, then the end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        return self.chunks.pop(0) if self.chunks else b""


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """`data` cut at `points` (sorted, deduplicated offsets)."""
    edges = [0, *sorted({p for p in points if 0 < p < len(data)}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


async def read_all(reader: FrameReader) -> list[tuple[str, str, str | None]]:
    """(type, name, resourceVersion) of every frame, to the end of the stream."""
    out = []
    while (batch := await reader.read()) is not None:
        assert batch.error is None, batch.error
        for etype, payload in batch.frames:
            assert isinstance(payload, Item)
            out.append((etype, payload.name, payload.resource_version))
    return out


def names(batch: Batch | None) -> list[str]:
    assert batch is not None
    return [payload.name for _, payload in batch.frames if isinstance(payload, Item)]


def reader(chunks: list[bytes], max_line: int = 1 << 20) -> FrameReader:
    return FrameReader(Chunks(chunks), strip=True, identity=None, replace=False, max_line=max_line)


EXPECTED = [("ADDED", f"cm-{i}", str(i)) for i in range(1, 40)] + [("DELETED", "x", "99")]


@fuzz_settings(200)
@given(points=st.lists(st.integers(0, len(b"".join(STREAM))), max_size=60))
def test_however_the_stream_is_cut_each_line_is_decoded_once_in_order(points: list[int]) -> None:
    chunks = cut(b"".join(STREAM), points)
    assert asyncio.run(read_all(reader(chunks))) == EXPECTED


def test_one_byte_at_a_time_and_all_at_once_give_the_same_frames() -> None:
    data = b"".join(STREAM)
    assert asyncio.run(read_all(reader([data[i : i + 1] for i in range(len(data))]))) == EXPECTED
    assert asyncio.run(read_all(reader([data]))) == EXPECTED


def test_a_stream_that_stops_inside_a_line_is_an_error_after_the_lines_before_it() -> None:
    data = b"".join(STREAM[:3]) + STREAM[3][:10]

    async def run() -> Batch | None:
        r = reader([data])
        first = await r.read()
        with pytest.raises(WatchStreamError, match=r"truncated mid-line \(10 bytes\)"):
            await r.read()
        return first

    assert names(asyncio.run(run())) == ["cm-1", "cm-2", "cm-3"]


def test_a_line_over_the_limit_is_an_error_whether_it_is_complete_or_not() -> None:
    long = line("ADDED", "n" * 300, 1)

    async def run(chunks: list[bytes]) -> Batch | None:
        return await reader(chunks, max_line=200).read()

    with pytest.raises(WatchStreamError, match="longer than 200 bytes"):
        asyncio.run(run([long[:150], long[150:250]]))  # still incomplete, already too long
    batch = asyncio.run(run([STREAM[0] + long]))  # complete, in one chunk
    assert names(batch) == ["cm-1"]
    assert batch is not None
    assert batch.error == "watch line longer than 200 bytes"


def test_a_malformed_line_comes_after_the_frames_before_it_and_nothing_after_it() -> None:
    bad = b'{"type":"ADDED","object":{"metadata":{"name":7}}}\n'
    batch = asyncio.run(reader([STREAM[0] + bad + STREAM[1]]).read())
    assert names(batch) == ["cm-1"]
    assert batch is not None
    assert batch.error is not None
    assert "metadata.name" in batch.error
    assert batch.line == bad


# -- protobuf streams (v1 ConfigMaps: `fastctl._core.decode_proto_frames`) -----------------


def _field(number: int, value: bytes) -> bytes:
    """One length-delimited protobuf field (every length here is under 128)."""
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def proto_frame(etype: str, name: str, rv: int) -> bytes:
    """A length-prefixed WatchEvent of a ConfigMap named `name` (as the API server frames
    them: no wrapper around the event, the object the magic and a runtime.Unknown)."""
    meta = _field(1, name.encode()) + _field(3, b"ns") + _field(6, str(rv).encode())
    unknown = _field(1, _field(1, b"v1") + _field(2, b"ConfigMap")) + _field(2, _field(1, meta))
    event = _field(1, etype.encode()) + _field(2, _field(1, b"k8s\x00" + unknown))
    return len(event).to_bytes(4, "big") + event


PROTO_STREAM = [proto_frame("ADDED", f"cm-{i}", i) for i in range(1, 40)]
PROTO_STREAM.append(proto_frame("DELETED", "x", 99))


def proto_reader(chunks: list[bytes], max_line: int = 1 << 20) -> FrameReader:
    return FrameReader(
        Chunks(chunks), strip=True, identity=None, replace=False, max_line=max_line, protobuf=True
    )


@fuzz_settings(200)
@given(points=st.lists(st.integers(0, len(b"".join(PROTO_STREAM))), max_size=60))
def test_however_a_protobuf_stream_is_cut_each_frame_is_decoded_once_in_order(
    points: list[int],
) -> None:
    chunks = cut(b"".join(PROTO_STREAM), points)
    assert asyncio.run(read_all(proto_reader(chunks))) == EXPECTED


def test_a_protobuf_frame_gives_the_json_the_server_sends() -> None:
    batch = asyncio.run(proto_reader([PROTO_STREAM[0]]).read())
    assert batch is not None
    [(etype, item)] = batch.frames
    assert etype == "ADDED"
    assert isinstance(item, Item)
    assert item.json == (
        b'{"kind":"ConfigMap","apiVersion":"v1",'
        b'"metadata":{"name":"cm-1","namespace":"ns","resourceVersion":"1"}}'
    )


def test_a_protobuf_frame_over_the_limit_or_malformed_is_an_error_after_the_frames_before() -> None:
    long = proto_frame("ADDED", "n" * 60, 1)  # 109 bytes
    with pytest.raises(WatchStreamError, match="protobuf watch frame longer than 80 bytes"):
        asyncio.run(proto_reader([long[:50], long[50:100]], max_line=80).read())
    bad = (3).to_bytes(4, "big") + b"\x0b\x00\x00"
    batch = asyncio.run(proto_reader([PROTO_STREAM[0] + bad + PROTO_STREAM[1]]).read())
    assert names(batch) == ["cm-1"]
    assert batch is not None
    assert batch.error is not None
    assert "malformed protobuf watch frame: wire type 3" in batch.error
    assert batch.line == b"\x0b\x00\x00"
