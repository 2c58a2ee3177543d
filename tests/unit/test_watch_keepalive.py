"""What resets the watcher's backoff (docs/kubernetes.md, "Errors and backoff"): a watch's
stream that delivers a frame, or whose keep-alive blank lines come after it was held open
a while (`_watcher._HELD_OPEN`); not one that sends blank lines and ends or breaks at once.
Against the scripted API server of `test_watcher_fallbacks`, on a virtual clock."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from .test_watcher_fallbacks import Response, frame, obj, status, watch_gaps

Step = tuple[float, bytes | BaseException]


class _Timed:
    """A stream's body: each step's bytes after its delay (or its error raised); then the
    end."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = list(steps)

    async def readany(self) -> bytes:
        if not self._steps:
            return b""
        delay, what = self._steps.pop(0)
        await asyncio.sleep(delay)
        if isinstance(what, BaseException):
            raise what
        return what


def timed(*steps: Step) -> Response:
    answer = Response(200)
    answer.content = _Timed(list(steps))  # type: ignore[assignment]
    return answer


def cut() -> BaseException:
    return aiohttp.ClientPayloadError("Response payload is not completed")


def test_keep_alives_on_a_stream_held_open_reset_the_backoff_blank_lines_at_once_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three failures wait 0.5, 1 and 2 s. A stream whose only bytes are a blank line 30 s
    in, then cut, was a live connection: the backoff resets (0.5 s after it, then 1 s).
    A stream that sends a blank line and breaks at once, or ends at once, proves nothing:
    the waits go on growing (2, 4, 8 s), never a busy loop. An event proves a stream at
    once (0.5 s after it).
    Broken once: only a frame resets (red: 4 s after the 30 s stream, not 0.5 s); once:
    any batch resets, as before (red: 0.5 s after the blank line that broke at once)."""
    answers = [
        status(500),
        status(500),
        status(500),
        timed((30.0, b"\n"), (0.0, cut())),
        status(500),
        timed((0.0, b"\n"), (0.0, cut())),
        timed((0.0, b"\n\n")),
        timed(),
        timed((0.0, frame("ADDED", obj("b", 11))), (0.0, cut())),
        status(500),
    ]

    assert watch_gaps(answers, monkeypatch) == [0.5, 1.0, 2.0, 30.5, 1.0, 2.0, 4.0, 8.0, 0.5, 1.0]
