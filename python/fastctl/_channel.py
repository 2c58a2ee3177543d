"""A bounded, closable asyncio channel: how several watch loops feed one applier.

asyncio.Queue (before 3.13) cannot be closed, and a sentinel cannot be put into a full queue
without blocking the closer. This channel can be closed at any time from sync code: the
consumer then drains what is buffered and its iteration ends, and blocked producers are
released with `ChannelClosed`. The bound gives backpressure to the watch loops, so a stalled
consumer makes them stop reading rather than buffer without limit.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
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
        while self._putters:
            fut = self._putters.popleft()
            if not fut.done():
                fut.set_exception(ChannelClosed())

    async def put(self, item: T) -> None:
        """Add `item`, waiting while the channel is full."""
        while len(self._items) >= self._maxsize and not self._closed:
            fut = asyncio.get_running_loop().create_future()
            self._putters.append(fut)
            try:
                await fut
            finally:
                if fut in self._putters:
                    self._putters.remove(fut)
        if self._closed:
            raise ChannelClosed()
        self._items.append(item)
        self._wake_getter()

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
