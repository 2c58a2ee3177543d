"""A watch's events, each delivered once no write of ours to its object is in flight, without
one object's slow write holding up the others.

With ``ignore_own_writes`` an event may be the echo of a write whose answer has not come
back yet (the watch can be faster than the write's own connection), and only the answer
says which version was ours (`fastctl.runtime._own_writes`). Such an event has to wait for
the answer. Waiting in the watch loop itself made every later event of the stream wait
behind it, for up to `SETTLE_TIMEOUT`, whatever object it was for: one write stuck in a
slow API server or webhook held up the controller's whole view of that resource, and, with
a watch shared by a Manager, the other controllers' too.

`settled` holds back only the events of objects with a write of ours in flight, each
object's events in their order; every other event passes at once. The markers that frame
a (re)list (``INIT``, ``INIT_DONE``, no object) wait for every held event before them, so
a listed object stays inside its list (a filter or store that reads the list as a whole
sees all of it before ``INIT_DONE``). Each event but a delete also tells the registry the
object's latest version, which our next write to it carries as its precondition.

Events are read ahead of the consumer (up to `_BUFFER`, plus the held ones), so a store
that a reflector feeds before this point may be that far ahead of the triggers: a reconcile
reads the latest cached state anyway, and a trigger is only ever later, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime._own_writes import OwnWrites

__all__ = ["settled"]

_BUFFER: Final = 64
"""Events read ahead of the consumer: enough to keep the stream moving past a held object,
few enough that a slow consumer still slows the watch down."""


class _End:
    """The source ended (`error` is None) or raised `error`."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Holding:
    """The per-object queues of held events, and the tasks that let them go."""

    def __init__(self, own: OwnWrites, resource: Resource, out: asyncio.Queue[object]) -> None:
        self._own = own
        self._resource = resource
        self._out = out
        self._held: dict[tuple[str, str], deque[ObjectEvent]] = {}
        self._releasing: set[asyncio.Task[None]] = set()

    async def feed(self, event: WatchEvent) -> None:
        if isinstance(event, ListFrame):  # after everything held before it
            await self.drain()
            await self._out.put(event)
            return
        obj = event.obj
        if event.kind is not EventKind.DELETE:
            self._own.saw(self._resource, obj)  # the version our next write builds on
        meta = obj.get("metadata") or {}
        name = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        queue = self._held.get(name)
        if queue is not None:  # behind this object's earlier events
            queue.append(event)
        elif self._own.in_flight(self._resource, obj):
            self._held[name] = deque((event,))
            task = asyncio.create_task(self._release(name))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)
        else:
            await self._out.put(event)

    async def _release(self, name: tuple[str, str]) -> None:
        """Deliver `name`'s held events in order, each once no write of ours to it is in
        flight (or `SETTLE_TIMEOUT` has passed)."""
        queue = self._held[name]
        while queue:
            await self._own.settle(self._resource, queue[0].obj)
            await self._out.put(queue.popleft())
        del self._held[name]  # no await since the check: nothing was added meanwhile

    async def drain(self) -> None:
        """Wait until every held event is delivered."""
        while self._releasing:
            await asyncio.gather(*self._releasing)

    def cancel(self) -> None:
        for task in self._releasing:
            task.cancel()


async def settled(
    own: OwnWrites, resource: Resource, events: AsyncIterator[WatchEvent]
) -> AsyncIterator[WatchEvent]:
    """`events`, each once no write of ours to its object is in flight (see the module
    docstring); an error of `events` is raised here, after the events before it."""
    out: asyncio.Queue[object] = asyncio.Queue(_BUFFER)
    holding = _Holding(own, resource, out)

    async def pump() -> None:
        error: BaseException | None = None
        try:
            async for event in events:
                await holding.feed(event)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed to the consumer, raised there
            error = e
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        await holding.drain()  # the events before the end (or the error) first
        await out.put(_End(error))

    reader = asyncio.create_task(pump())
    try:
        while True:
            item = await out.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            assert isinstance(item, ObjectEvent | ListFrame)
            yield item
    finally:
        holding.cancel()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
