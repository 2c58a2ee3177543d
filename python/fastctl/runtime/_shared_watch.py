"""One watch and one cache per resource, shared by every controller of a Manager.

Two controllers that watch ConfigMaps should not open two watches and keep two copies of
every ConfigMap. A `SharedWatch` runs one watcher into one `Store` and hands each event,
after the store has applied it, to every subscriber. Subscribers read through a bounded
`Channel` each: a slow subscriber slows the shared watch (backpressure) rather than making
memory grow; the controllers' subscribers only turn events into scheduler adds, which is fast.

Every subscriber hears the errors the shared watcher retries (`subscribe`'s `on_error`), so
each controller counts them in its ``fastctl_watch_errors_total`` as if the watch were its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from fastctl._channel import Channel, ChannelClosed
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import WatchEvent

__all__ = ["SharedWatch"]

log = logging.getLogger("fastctl.shared_watch")


class SharedWatch:
    """Fan one event stream (applied to `store`) out to many subscribers.

    `events` makes the underlying stream (a `fastctl.kube.watcher(...)` call); it starts
    when `start()` is called, after every subscriber has subscribed, so none misses the
    initial list.
    """

    def __init__(
        self,
        name: str,
        events: Callable[[], AsyncIterator[WatchEvent]],
        *,
        store: Store | None = None,
        buffer: int = 1024,
    ) -> None:
        self.name = name
        self.store = store if store is not None else Store()
        self._events = events
        self._buffer = buffer
        self._subscribers: list[Channel[WatchEvent]] = []
        self._error_listeners: list[Callable[[BaseException], None]] = []
        self._task: asyncio.Task[None] | None = None

    def subscribe(
        self, *, on_error: Callable[[BaseException], None] | None = None
    ) -> Callable[[], AsyncIterator[WatchEvent]]:
        """A source for one subscriber: call it once to get that subscriber's events.
        `on_error` hears every error the watch retries (pass `report_error` to the
        watcher's ``on_error`` for this to happen)."""
        if self._task is not None:
            raise RuntimeError(f"shared watch {self.name} already started")
        channel: Channel[WatchEvent] = Channel(self._buffer)
        self._subscribers.append(channel)
        if on_error is not None:
            self._error_listeners.append(on_error)
        return lambda: aiter(channel)

    def report_error(self, exc: BaseException) -> None:
        """Tell every subscriber's `on_error` of one retried watch error; a listener that
        fails is logged and does not keep the error from the others."""
        for listener in self._error_listeners:
            try:
                listener(exc)
            except Exception:
                log.exception("shared watch %s: on_error listener failed", self.name)

    def start(self) -> asyncio.Task[None]:
        """Start the shared watch; the task ends (with the error) if the watch fails."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"fastctl-shared-watch:{self.name}"
            )
        return self._task

    async def stop(self) -> None:
        """Stop the watch and end every subscriber's stream."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for channel in self._subscribers:
            channel.close()

    async def _run(self) -> None:
        try:
            async for event in reflector(self.store, self._events()):
                for channel in self._subscribers:
                    if channel.closed:
                        continue
                    with contextlib.suppress(ChannelClosed):
                        await channel.put(event)
        finally:
            for channel in self._subscribers:
                channel.close()
