"""What a sharded controller asks before, during and after a reconcile: is this object's
slot served now, which reconciles of a slot still run, and when have they all ended.

The check that counts is made when a reconcile *starts*, in the same synchronous step that
registers it as running: `track` wraps the reconcile, and its first act is to ask the
member whether the object's slot is served at that moment, and to count the reconcile in
its slot if so. A drain (`drain`) that the member starts after it stopped serving a slot
therefore sees every reconcile of that slot that could ever start: none starts after the
slot left `serving`, and every one that started before is counted. A reconcile refused at
the start returns ``None`` without running: the object belongs to another replica now, and
that replica's relist reconciles it.

The cache is filtered too (`ShardedStore`: the applier skips objects whose slot is not
served), so queued keys of a lost slot are dropped before a task is even made; that is an
economy, the check in `track` is the rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from fastctl._clock import monotonic
from fastctl.kube._store import Store
from fastctl.runtime.sharding._slots import ShardKey, fnv1a_64, slot_of
from fastctl.types import ObjectRef, Reconcile

__all__ = ["Serving", "ShardGate", "ShardedStore"]

log = logging.getLogger("fastctl.sharding")


class Serving(Protocol):
    """What the gate needs of a member (`ShardMember`)."""

    def serves(self, slot: int, now: float | None = None) -> bool: ...


def key_value(obj: Mapping[str, Any], key: ShardKey) -> str:
    """The field the slot is computed from: ``metadata.uid`` or ``metadata.namespace``
    (``""`` for a cluster-scoped object, hashed like the server hashes an empty field)."""
    meta = obj.get("metadata") or {}
    return str(meta.get(key) or "")


class ShardGate:
    """One controller's view of the shard: the slot of an object, whether it may start,
    and the reconciles that run per slot (for the member's drains)."""

    def __init__(self, member: Serving, key: ShardKey, slots: int) -> None:
        self.member = member
        self.key: ShardKey = key
        self.slots = slots
        self._lock = threading.Lock()  # plain-function reconciles count from threads
        self._running: dict[int, dict[int, asyncio.Task[Any] | None]] = {}
        self._ended = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_token = 0
        self.received = 0
        """Watch events (changes, deletions) the sharded primary watch delivered."""
        self.listed = 0
        """Objects the sharded primary watch's lists delivered."""
        self.relists = 0
        """How many times the primary watch started over with a new set of slots."""
        self.filtered = 0
        """Objects and events the client-side filter dropped (none while the server shards):
        with `received`, what the server sent."""
        self.watching: frozenset[int] = frozenset()
        """The slots the primary watch lists now."""

    def slot_of(self, value: str) -> int:
        return slot_of(fnv1a_64(value), self.slots)

    def object_slot(self, obj: Mapping[str, Any]) -> int:
        return self.slot_of(key_value(obj, self.key))

    def admits(self, obj: Mapping[str, Any]) -> bool:
        """The object's slot is served now."""
        return self.member.serves(self.object_slot(obj))

    def in_slots(self, owned: frozenset[int]) -> Callable[[dict[str, Any]], bool]:
        """The client-side filter for a watch of `owned` (when the server does not shard)."""

        def keep(obj: dict[str, Any]) -> bool:
            if self.object_slot(obj) in owned:
                return True
            self.filtered += 1
            return False

        return keep

    def admits_ref(self, ref: ObjectRef, store: Mapping[ObjectRef, Any]) -> bool:
        """A trigger of a related object for `ref`: keep it only if `ref`'s slot is served.
        With key ``namespace`` the ref says it; with ``uid``, the cached object does (the
        cache holds only this replica's objects, so a ref it lacks is not ours)."""
        if self.key == "namespace":
            return self.member.serves(self.slot_of(ref.namespace or ""))
        obj = store.get(ref)
        return obj is not None and self.admits(obj)

    def restarted(self, owned: frozenset[int]) -> None:
        """The primary watch starts (over) with the slots `owned`."""
        self.relists += 1
        self.watching = owned

    def running(self, slots: frozenset[int] | None = None) -> int:
        """How many reconciles run (of `slots`, or in all)."""
        with self._lock:
            return sum(
                len(tasks)
                for slot, tasks in self._running.items()
                if slots is None or slot in slots
            )

    # -- tracking -----------------------------------------------------------------------

    def track(self, reconcile: Reconcile) -> Reconcile:
        """`reconcile`, started only while its object's slot is served, and counted in its
        slot while it runs. A coroutine function stays one, a plain function stays one (the
        applier runs it in a thread)."""
        is_async = inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
            getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
        )
        if is_async:

            @functools.wraps(reconcile)
            async def run_async(obj: Mapping[str, Any], ctx: Any) -> Any:
                with self._started(obj, asyncio.current_task()) as started:
                    if started:
                        return await reconcile(obj, ctx)  # type: ignore[misc]
                    return None

            return run_async

        @functools.wraps(reconcile)
        def run(obj: Mapping[str, Any], ctx: Any) -> Any:
            with self._started(obj, None) as started:
                if started:
                    return reconcile(obj, ctx)
                return None

        return run

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop whose clock `serves` reads and whose drains wait (set when the
        controller starts: threads ask the member with this loop's time)."""
        self._loop = loop
        self._ended = asyncio.Event()

    @contextlib.contextmanager
    def _started(self, obj: Mapping[str, Any], task: asyncio.Task[Any] | None) -> Iterator[bool]:
        slot = self.object_slot(obj)
        now = monotonic(self._loop)  # a thread has no running loop: the bound one's
        with self._lock:
            if not self.member.serves(slot, now):
                started = False
            else:
                started = True
                self._next_token += 1
                token = self._next_token
                self._running.setdefault(slot, {})[token] = task
        if not started:
            log.debug("slot %d is not served here now: reconcile skipped", slot)
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                tasks = self._running.get(slot)
                if tasks is not None:
                    tasks.pop(token, None)
                    if not tasks:
                        del self._running[slot]
            self._wake()

    def _wake(self) -> None:
        loop = self._loop
        if loop is None:
            self._ended.set()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._ended.set()
        else:
            loop.call_soon_threadsafe(self._ended.set)

    # -- draining -----------------------------------------------------------------------

    async def drain(self, slots: frozenset[int], urgent: bool) -> None:
        """Return once no reconcile of `slots` runs; `urgent`: cancel them first (a thread
        cannot be cancelled: it is waited for, and logged)."""
        if urgent:
            with self._lock:
                tasks = [
                    task
                    for slot in slots
                    for task in self._running.get(slot, {}).values()
                    if task is not None
                ]
                threads = sum(
                    1
                    for slot in slots
                    for task in self._running.get(slot, {}).values()
                    if task is None
                )
            for task in tasks:
                task.cancel()
            if threads:
                log.error(
                    "%d plain-function reconcile(s) of slots this replica no longer serves "
                    "still run in threads (they cannot be cancelled)",
                    threads,
                )
        while self.running(slots):
            self._ended.clear()
            if not self.running(slots):
                return
            await self._ended.wait()


class ShardedStore(Mapping[ObjectRef, Any]):
    """The controller's cache as the applier sees it: an object whose slot is not served
    now reads as missing, so a queued key of a lost slot is dropped, not started."""

    def __init__(self, store: Store, gate: ShardGate) -> None:
        self._store = store
        self._gate = gate

    @property
    def is_ready(self) -> bool:
        return self._store.is_ready

    async def wait_ready(self) -> None:
        await self._store.wait_ready()

    def __getitem__(self, ref: ObjectRef) -> Any:
        obj = self.get(ref)
        if obj is None:
            raise KeyError(ref)
        return obj

    def get(self, ref: ObjectRef, default: Any = None) -> Any:
        obj = self._store.get(ref)
        if obj is None or not self._gate.admits(obj):
            return default
        return obj

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)
