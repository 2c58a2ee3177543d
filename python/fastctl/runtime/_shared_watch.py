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

__all__ = ["SharedWatch", "Subscription"]

log = logging.getLogger("fastctl.shared_watch")

_EARLY_ERRORS = 1000
"""At most this many errors are kept for a subscriber that has not started yet."""


class Subscription:
    """One subscriber's share of a `SharedWatch` (a `WatchSource` of a controller run)."""

    __slots__ = ("_early", "channel", "on_error", "store")

    def __init__(self, store: Store, channel: Channel[WatchEvent]) -> None:
        self.store: Store | None = store
        """The shared cache, which the shared watch fills."""
        self.channel = channel
        self.on_error: Callable[[BaseException], None] | None = None
        self._early: list[BaseException] = []
        """Errors retried before the subscriber asked for its events (the shared watch may
        start first): told to `on_error` when it does, so none goes uncounted."""

    def events(self, on_error: Callable[[BaseException], None]) -> AsyncIterator[WatchEvent]:
        self.on_error = on_error
        early, self._early = self._early, []
        for exc in early:
            on_error(exc)
        return aiter(self.channel)

    def report(self, exc: BaseException) -> None:
        if self.on_error is None:
            if len(self._early) < _EARLY_ERRORS:
                self._early.append(exc)
            return
        self.on_error(exc)


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
        self._subscribers: list[Subscription] = []
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> Subscription:
        """A subscription for one watch use of one controller: its ``events(on_error)``
        gives that use's events once; `on_error` hears every error the watch retries (pass
        `report_error` to the watcher's ``on_error`` for this to happen)."""
        if self._task is not None:
            raise RuntimeError(f"shared watch {self.name} already started")
        subscription = Subscription(self.store, Channel(self._buffer))
        self._subscribers.append(subscription)
        return subscription

    def report_error(self, exc: BaseException) -> None:
        """Tell every subscriber's `on_error` of one retried watch error; a listener that
        fails is logged and does not keep the error from the others."""
        for subscription in self._subscribers:
            try:
                subscription.report(exc)
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
        for subscription in self._subscribers:
            subscription.channel.close()

    async def _run(self) -> None:
        try:
            async for event in reflector(self.store, self._events()):
                for subscription in self._subscribers:
                    channel = subscription.channel
                    if channel.closed:
                        continue
                    with contextlib.suppress(ChannelClosed):
                        await channel.put(event)
        finally:
            for subscription in self._subscribers:
                subscription.channel.close()
