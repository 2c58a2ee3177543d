"""A watch stream's body read as it arrives, many lines at a time, each decoded once.

A streaming list of 100,000 objects is 100,000 lines. Read with ``readline`` and decoded
with a call per line, the reads and calls cost more than the decoding itself (a fifth of
the list's time, measured). `FrameReader` takes whatever the connection has buffered
(``readany``), hands every complete line of it to the extension in one call
(`fastctl._core.decode_lines`, which decodes without holding the GIL), and keeps the bytes
after the last newline for the next read.

What the line reader did stays: a line longer than the limit, a stream that ends inside a
line, and a malformed line are each a `WatchStreamError` (the frames of the lines before a
malformed one are delivered first, none after it is read); blank lines are skipped.

A protobuf stream (``protobuf=True``: ConfigMaps and Secrets, `fastctl.kube._watcher`) is
read the same way, its length-prefixed frames in place of lines
(`fastctl._core.decode_proto_frames`, which gives each object as the JSON the API server
would have sent), so what the reader returns is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fastctl._core import Item, decode_lines, decode_proto_frames
from fastctl.errors import WatchStreamError
from fastctl.kube._wire import Identity

__all__ = ["Batch", "FrameReader", "StreamContent"]


class StreamContent(Protocol):
    """What a watch response's ``content`` offers (aiohttp's ``StreamReader``, the fake
    cluster's stream): the bytes buffered now, waiting for some; ``b""`` at the end."""

    async def readany(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Batch:
    """The lines read by one `FrameReader.read`: their frames, in order (``(type, Item)``,
    or ``("ERROR", status_json)``), and the first malformed line with what is wrong with it
    (`error` and `line`; none after it was read)."""

    frames: list[tuple[str, Item | bytes]]
    error: str | None = None
    line: bytes = b""


class FrameReader:
    """The decoded frames of one watch response's body (see the module docstring)."""

    __slots__ = (
        "_api_version",
        "_content",
        "_kind",
        "_max_line",
        "_pending",
        "_protobuf",
        "_replace",
        "_size",
        "_strip",
    )

    def __init__(
        self,
        content: StreamContent,
        *,
        strip: bool,
        identity: Identity,
        replace: bool,
        max_line: int,
        protobuf: bool = False,
    ) -> None:
        self._content = content
        self._strip = strip
        self._api_version: str | None = identity[0] if identity is not None else None
        self._kind: str | None = identity[1] if identity is not None else None
        self._replace = replace
        self._max_line = max_line
        self._protobuf = protobuf
        self._pending: list[bytes] = []
        """The start of a line not complete yet: the chunks since the last newline."""
        self._size = 0

    async def read(self) -> Batch | None:
        """The frames of the complete lines received since the last read (waiting for a
        first newline if there is none yet), or None at the end of the stream."""
        while True:
            chunk = await self._content.readany()
            if not chunk:
                if self._size:
                    raise WatchStreamError(f"watch stream truncated mid-line ({self._size} bytes)")
                return None
            if not self._protobuf and b"\n" not in chunk:
                self._hold(chunk)
                continue
            buffer = b"".join([*self._pending, chunk]) if self._pending else chunk
            del chunk
            self._pending, self._size = [], 0
            if self._protobuf and not _has_frame(buffer):
                self._hold(buffer)
                continue
            decode = decode_proto_frames if self._protobuf else decode_lines
            frames, used, error, line = decode(
                buffer, self._strip, self._api_version, self._kind, self._replace, self._max_line
            )
            if error is None and used < len(buffer):
                self._hold(buffer[used:])
            return Batch(frames, error, line or b"")

    def _hold(self, part: bytes) -> None:
        """Keep `part` of a line not complete yet (too long a line: an error)."""
        self._pending.append(part)
        self._size += len(part)
        if self._size > self._max_line + (4 if self._protobuf else 0):
            unit = "protobuf watch frame" if self._protobuf else "watch line"
            raise WatchStreamError(f"{unit} longer than {self._max_line} bytes")


def _has_frame(buffer: bytes) -> bool:
    """`buffer` starts with a whole length-prefixed frame (4-byte big-endian length)."""
    return len(buffer) >= 4 and len(buffer) - 4 >= int.from_bytes(buffer[:4], "big")
