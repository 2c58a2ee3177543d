"""The primary watch of a sharded controller: the objects of the slots this replica serves,
listed and watched again each time those slots change.

Each version of the member's `serving` set gets one watcher with that set's
``shardSelector`` (and, for a server that does not shard, the same set as a client-side
filter). When the set changes, the watcher is dropped and a new one lists: the new list
replaces the cache (`fastctl.kube.reflector` reports the objects of the lost slots as
deleted), and its end triggers every cached object, so the objects of gained slots get
reconciled. Serving nothing, the stream is an empty list: the cache is empty and ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from fastctl.kube._watcher import EventKind, ListFrame, WatchEvent
from fastctl.runtime.sharding._slots import ShardKey, shard_selector

__all__ = ["MakeWatch", "ServingSet", "sharded_events"]

MakeWatch = Callable[[str, Callable[[dict[str, Any]], bool]], AsyncIterator[WatchEvent]]
"""``make(selector, keep)``: a watcher with ``shardSelector=selector`` and the fallback
filter `keep`."""


class ServingSet(Protocol):
    """What the watch needs of a member (`ShardMember`)."""

    @property
    def serving(self) -> frozenset[int]: ...
    @property
    def version(self) -> int: ...
    async def wait_change(self, seen: int) -> int: ...


async def sharded_events(
    member: ServingSet,
    slots: int,
    key: ShardKey,
    make: MakeWatch,
    keep: Callable[[frozenset[int]], Callable[[dict[str, Any]], bool]],
    *,
    on_restart: Callable[[frozenset[int]], None] | None = None,
) -> AsyncIterator[WatchEvent]:
    """The events of the served slots' objects, restarted (a new list) at every change."""
    while True:
        version = member.version
        owned = member.serving
        if on_restart is not None:
            on_restart(owned)
        if not owned:
            yield ListFrame(EventKind.INIT)
            yield ListFrame(EventKind.INIT_DONE)
            await member.wait_change(version)
            continue
        stream = make(shard_selector(owned, slots, key), keep(owned))
        change = asyncio.ensure_future(member.wait_change(version))
        step: asyncio.Future[WatchEvent] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(stream))
                await asyncio.wait({step, change}, return_when=asyncio.FIRST_COMPLETED)
                if step.done():
                    try:
                        event = step.result()
                    except StopAsyncIteration:
                        return
                    yield event
                else:
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                if change.done():
                    break  # the slots changed: list again with the new selector
        finally:
            for pending in (step, change):
                if pending is not None and not pending.done():
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await pending
            await stream.aclose()  # type: ignore[attr-defined]
