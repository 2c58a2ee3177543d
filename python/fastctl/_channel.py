"""A bounded, closable asyncio channel: how several watch loops feed one applier.

asyncio.Queue (before 3.13) cannot be closed, and a sentinel cannot be put into a full queue
without blocking the closer. This channel can be closed at any time from sync code: the
consumer then drains what is buffered and its iteration ends, and blocked producers are
released with `ChannelClosed`. The bound gives backpressure to the watch loops, so a stalled
consumer makes them stop reading rather than buffer without limit.

A consumer that can take items synchronously (the applier: it only adds them to its
scheduler, which de-duplicates them) attaches a sink instead of iterating (`_attach`): a
`put` then hands its item to the sink at once, in the producer's task, with no task of the
consumer's to wake. The bound then holds no items; it becomes how often a producer that
puts without pause lets the loop run its other tasks (once every `maxsize` puts).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

__all__ = ["Channel", "ChannelClosed"]

T = TypeVar("T")


class ChannelClosed(Exception):
    """`Channel.put` on a closed channel."""


class Channel(Generic[T]):
    """Many producers, one consumer (`async for item in channel`)."""

    def __init__(self, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self._items: deque[T] = deque()
        self._maxsize = maxsize
        self._closed = False
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()
        self._sink: Callable[[T], None] | None = None
        self._on_close: Callable[[], None] | None = None
        self._pushed = 0  # items handed to the sink since a producer last let the loop run

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        """End the consumer's iteration once the buffer is drained; fail blocked producers."""
        if self._closed:
            return
        self._closed = True
        self._wake_getter()
        on_close = self._on_close
        if on_close is not None:
            on_close()
        while self._putters:
            fut = self._putters.popleft()
            if not fut.done():
                fut.set_exception(ChannelClosed())

    async def put(self, item: T) -> None:
        """Add `item`, waiting while the channel is full (with a sink attached: hand it to
        the sink now, and let the loop run once every `maxsize` items)."""
        while self._sink is None and len(self._items) >= self._maxsize and not self._closed:
            fut = asyncio.get_running_loop().create_future()
            self._putters.append(fut)
            try:
                await fut
            finally:
                if fut in self._putters:
                    self._putters.remove(fut)
        if self._closed:
            raise ChannelClosed()
        sink = self._sink
        if sink is None:
            self._items.append(item)
            self._wake_getter()
            return
        sink(item)
        self._pushed += 1
        if self._pushed >= self._maxsize:
            self._pushed = 0
            await asyncio.sleep(0)  # a producer of a long run does not hold the loop

    def _wake_getter(self) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _wake_putter(self) -> None:
        while self._putters:
            fut = self._putters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _attach(self, sink: Callable[[T], None], on_close: Callable[[], None]) -> None:
        """Hand every item to `sink` as it is put, the buffered ones first, instead of
        being iterated; `on_close()` when the channel closes (now, if it is closed).
        `sink` must not raise (an error is the consumer's to keep) nor await."""
        if self._sink is not None or self._getter is not None:
            raise RuntimeError("the channel has a consumer already")
        self._sink, self._on_close = sink, on_close
        items = self._items
        while items and self._sink is sink:
            sink(items.popleft())
        if self._sink is sink:
            while self._putters:  # blocked producers go on, straight into the sink
                self._wake_putter()
            if self._closed:
                on_close()

    def _detach(self) -> None:
        """Stop handing items to the sink; later ones are buffered (up to the bound)."""
        self._sink = self._on_close = None

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        items = self._items
        while True:
            while items:
                item = items.popleft()
                self._wake_putter()
                yield item
            if self._closed:
                return
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
