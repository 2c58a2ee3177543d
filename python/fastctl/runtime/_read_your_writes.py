"""Read your writes: a reconcile does not start on a cache older than its object's last
reconcile wrote.

A reconcile reads the controller's caches, which a watch fills some time after the API
server applied a change. Its own writes are no exception: a reconcile that created a child
and is followed at once by another reconcile of the same object (a trigger that came
meanwhile, a requeue, a retry after an error) may find the cache without that child and
create it a second time (two children with ``generateName``, or a 409), undo a status it
just wrote, or send the same Event again. Kubernetes turned a guard against this on in its
busiest controllers (KEP-5647, client-go's ``ConsistencyStore``); java-operator-sdk reads
its cache after its writes. This is fastctl's.

What is recorded: every write a reconcile makes through `fastctl.kube` (the write observer
of `fastctl.kube._writes`, set around each reconcile as for own-write echoes) to an object
the controller reads from a cache of its own (the primary resource, and related resources
added with ``cache=True``) in the namespace it watches: the answer's UID and
``resourceVersion``, or, for a DELETE, that the object is to go. A write that failed
records nothing (the server changed nothing the watch must show). When the reconcile ends,
what it wrote becomes its object's *fence*. When a cache has caught up with a write, without
comparing resourceVersions as numbers: `fastctl.runtime._written`.

The hold: when a reconcile of an object is about to start and its fence is not caught up,
it does not start: the applier puts the key back in its scheduler until the fence's
deadline (`ReadYourWrites.max_wait` after the writing reconcile ended) and the key's slot is
free meanwhile. The event that catches the cache up wakes the key at once (a merged add,
which changes nothing of its priority); at the deadline it starts anyway, on whatever the
cache holds, and that is logged and counted (``fastctl_cache_wait_expired_total``). The
scheduler's rules hold as they are: the key is never in flight twice, and a trigger that
arrives during a hold merges into the one queued run.

What is not promised: a cache that never shows the write within the bound (a relist that
skipped the version, a write to an object outside the watch's selector or shard, a watch
stalled for longer) is waited for that long, then read as it is; writes made outside
`fastctl.kube` (another client) are not known; other objects' reconciles are not held by
this object's writes; and the cache may move on while a reconcile runs (the guard is at its
start). A hold ends at once when the controller stops: nothing waits for it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastctl._clock import loop_clock, monotonic
from fastctl._core import Writes
from fastctl.kube._namespaces import NamespaceScope
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._watcher import WatchEvent
from fastctl.kube._writes import WRITE_OBSERVER, WriteObserver, observed
from fastctl.log import RedactingFilter
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime._written import Caches, CacheScope, WrittenObjects
from fastctl.types import ObjectRef, Reconcile

__all__ = ["DEFAULT_MAX_WAIT", "CacheFence", "ReadYourWrites"]

log = logging.getLogger("fastctl.controller")
log.addFilter(RedactingFilter())  # its records name objects

DEFAULT_MAX_WAIT = 5.0
"""Seconds a reconcile waits at most for its caches to show its object's last writes. A
watch shows a write within milliseconds on a healthy API server and within a second or two
on a loaded one; five seconds covers that, while a write the cache will never show (see the
module docstring) costs its object no more than a short delay."""


@dataclass(frozen=True, slots=True)
class ReadYourWrites:
    """Whether a reconcile waits for the controller's caches to show what its object's
    previous reconcile wrote, and for how long (docs/authoring.md, "Reading your own
    writes"). On by default.

    ``Controller(..., read_your_writes=ReadYourWrites(enabled=False))`` turns it off."""

    enabled: bool = True
    """Hold a reconcile back while its caches are older than its object's last writes."""
    max_wait: float = DEFAULT_MAX_WAIT
    """Seconds after the writing reconcile ended that a hold lasts at most; then the
    reconcile starts on the cache as it is (logged, counted)."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"enabled must be a bool, got {self.enabled!r}")
        wait = self.max_wait
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or math.isnan(wait)
            or wait <= 0
            or math.isinf(wait)
        ):
            raise ValueError(f"max_wait must be a finite number of seconds > 0, got {wait!r}")
        object.__setattr__(self, "max_wait", float(wait))


class _Writes:
    """The observer of one reconcile's writes (of object `key`): the own-writes registry's
    notes, if the controller keeps them, and the writes this reconcile's fence waits for.

    `direct`: the reconcile runs on the loop's thread (an async one), so what it hears is
    applied at once; a plain reconcile's thread hands it over (`CacheFence.call`). Decided
    once per reconcile, in the thread it runs in, rather than on every call."""

    __slots__ = ("direct", "fence", "obj", "own", "token")

    def __init__(self, fence: CacheFence, obj: Any, own: OwnWrites | None) -> None:
        self.fence = fence
        self.obj = obj  # whose key is needed only if the reconcile wrote (`key`)
        self.own = own
        # What it wrote is kept in the extension under this number, given at its first
        # recorded write (0: none; no list or record made in Python, a no-op's included).
        self.token = 0
        self.direct = fence._loop is None or threading.get_ident() == fence._thread

    @property
    def key(self) -> str:
        """The reconciled object's scheduler key."""
        return _key_of(self.obj)

    def started(self, resource: ResolvedResource, namespace: str | None, name: str) -> str | None:
        own = self.own
        known = own.started(resource, namespace, name) if own is not None else None
        if self.direct:
            self.fence.written.follow(resource, namespace, name)
        else:
            self.fence.call(self.fence.written.follow, resource, namespace, name)
        return known

    def finished(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        *,
        made: bool,
        based_on: str | None,
        deleted: bool = False,
    ) -> None:
        if self.own is not None:
            self.own.finished(
                resource, namespace, name, answer, made=made, based_on=based_on, deleted=deleted
            )
        created = made and based_on is None and not deleted
        if self.direct:
            self._answered(resource, namespace, name, answer, created, deleted)
        else:
            self.fence.call(self._answered, resource, namespace, name, answer, created, deleted)

    def _answered(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        created: bool,
        deleted: bool,
    ) -> None:
        self.token = (
            self.fence.written.answered(
                resource,
                namespace,
                name,
                answer,
                created=created,
                deleted=deleted,
                token=self.token,
            )
            or 0
        )


class CacheFence:
    """The fences of one controller run (see the module docstring): which writes each
    object's last reconcile made, and the holds until the caches show them.

    `caches` are the caches the reconcile reads, by (group, kind); `namespace` the watched
    one (``None``: all). All state is changed on the event loop's thread: an observer called
    in a plain reconcile's thread hands its calls over (in order, before the reconcile's
    end reaches the applier)."""

    def __init__(
        self,
        caches: Caches,
        namespace: NamespaceScope,
        options: ReadYourWrites,
        counters: ReconcileCounters,
        *,
        clock: Callable[[], float] = monotonic,
        scopes: Mapping[tuple[str, str], CacheScope] | None = None,
    ) -> None:
        self.written = WrittenObjects(
            caches, namespace, self._caught_up, scopes, max_wait=options.max_wait
        )
        self._state = self.written.state  # the fences and holds (the extension's)
        self._state.set_on_started(self._started)
        self._state.set_key_of(_key_of)
        self._state.set_observer_var(WRITE_OBSERVER)
        self._state.set_clock(clock)
        self.hold: Callable[[str, float], float | None] = self._state.hold
        """The reconcile of `key` is about to start (``hold(key, now)``): ``None`` to let
        it, or how many seconds at most it waits (until its fence is caught up, then it is
        woken). A start after a hold or at the bound is counted and logged (`_started`).
        Fences of objects not reconciled again long after their deadline are forgotten
        meanwhile (five minutes after it). The extension's own method: the applier calls
        it at every start, with or without a fence."""
        self.begin: Callable[[Any], Writes] | None = None
        """Set by `observing` when the applier is to observe the reconcile's writes itself:
        ``begin(obj)`` before each call (the extension's observer, set as the write
        observer of the call's context), ``.end()`` on what it returned once the call is
        over, however it ended (the reconcile's fence)."""
        self._max_wait = options.max_wait
        self._counters = counters
        self._clock = clock
        self._now = clock  # the loop's own clock while bound, if `clock` is the default
        self._wake: Callable[[str], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.get_ident()

    def bind(self, wake: Callable[[str], None] | None) -> None:
        """`wake(key)` queues a held key once its fence is caught up (the applier's; None:
        no more). Called on the loop's thread, which all state belongs to."""
        self._wake = wake
        self._state.set_waking(wake is not None)
        if wake is not None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()
            if self._clock is monotonic:  # the same readings, without finding the loop
                self._now = loop_clock(self._loop)
        else:
            self._now = self._clock
        self._state.set_clock(self._now)  # what a writing reconcile's end reads

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """`fn(*args)` on the loop's thread: now if this is it, else next on the loop."""
        if self._loop is None or threading.get_ident() == self._thread:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def __len__(self) -> int:
        """How many objects have a fence."""
        return len(self._state)

    def saw(self, resource: Resource) -> Callable[[WatchEvent], None]:
        """What a watch loop of `resource` calls with each event its cache applied, before
        its triggers: nearly free while nothing is followed (a cache of a kind the reconcile
        does not read: nothing)."""
        kind = (resource.group, resource.kind)
        if kind not in self.written.kinds:
            return _ignore
        return self.written.saw(kind)

    # -- the reconcile --------------------------------------------------------------------

    def observing(
        self, reconcile: Reconcile, own: OwnWrites | None, *, by_applier: bool = False
    ) -> Reconcile:
        """`reconcile`, with each call's writes recorded as its object's next fence (and
        told to `own`, the own-writes registry, when the controller keeps one).
        `by_applier`: an async reconcile without a registry is returned as it is, and the
        applier that runs it calls `begin` around each call instead (no wrapper's
        coroutine between the applier and the reconcile)."""
        if inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
            getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
        ):
            if by_applier and own is None:
                self.begin = self._state.begin
                return reconcile
            return self._observing_async(reconcile, own)

        def begin(obj: Any) -> WriteObserver:
            return _Writes(self, obj, own)

        def end(observer: WriteObserver) -> None:
            assert isinstance(observer, _Writes)
            if observer.direct:
                if observer.token:
                    self.fenced(observer)
            else:
                self.call(self.fenced, observer)

        return observed(reconcile, begin, end)

    def _observing_async(self, reconcile: Reconcile, own: OwnWrites | None) -> Reconcile:
        """`observing` of an async reconcile: `observed`'s wrapper with its begin and end
        inline (two calls fewer on every reconcile, a no-op's too). It runs on the loop's
        thread, so without an own-writes registry its observer is the extension's
        (`Written.begin`, which also sets it as the write observer): each write is one
        call into it as it starts and one as it ends, and so is the reconcile's end (which
        resets the write observer; the clock read only if it wrote)."""
        fenced, call = self.fenced, self.call
        if own is None:
            begin = self._state.begin

            @functools.wraps(reconcile)
            async def run_own_less(obj: Any, ctx: Any) -> Any:
                writes = begin(obj)
                try:
                    return await reconcile(obj, ctx)  # type: ignore[misc]
                finally:
                    writes.end()

            return run_own_less

        @functools.wraps(reconcile)
        async def run_async(obj: Any, ctx: Any) -> Any:
            writes = _Writes(self, obj, own)
            token = WRITE_OBSERVER.set(writes)
            try:
                return await reconcile(obj, ctx)  # type: ignore[misc]
            finally:
                WRITE_OBSERVER.reset(token)
                if not writes.direct:
                    call(fenced, writes)
                elif writes.token:
                    fenced(writes)

        return run_async

    def fenced(self, writes: _Writes) -> None:
        """The reconcile ended: its writes are its object's fence (nothing to wait for if
        it wrote nothing, or the cache has caught up already)."""
        token = writes.token
        if not token:  # the common case of a no-op (the sweep is left to the next start)
            return
        writes.token = 0
        self._state.fence(_key_of(writes.obj), token, self._now())

    def _caught_up(self, keys: list[str]) -> None:
        """An event caught these held keys' fences up: wake them now."""
        wake = self._wake
        if wake is not None:
            for key in keys:
                wake(key)

    # -- the hold (`fastctl._applier.StartGate`) ------------------------------------------

    def release(self, key: str) -> None:
        """`key` will not start (its object is gone): forget its fence and hold."""
        self._state.release(key)

    def _started(
        self, key: str, waited: float, was_held: bool, expired: bool, missing: int
    ) -> None:
        counters = self._counters
        if was_held:
            counters.cache_waits += 1
            counters.cache_wait_seconds += waited
        if expired:
            counters.cache_wait_expired += 1
            log.warning(
                "reconcile of %s starts on a cache that does not show %d write(s) of its "
                "last reconcile yet (waited %.3fs, the bound is %.3gs)",
                key,
                missing,
                waited,
                self._max_wait,
            )
        elif was_held:
            log.debug("reconcile of %s waited %.3fs for its cache", key, waited)


def _key_of(obj: Any) -> str:
    """The scheduler key of a reconciled object (`ObjectRef.key`), without building the
    ref: the object comes from the controller's cache, so its name is there."""
    try:
        meta = obj["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
    except (KeyError, TypeError, AttributeError):
        name = namespace = None
    if type(name) is not str or not name or (namespace and type(namespace) is not str):
        return ObjectRef.from_object(obj).key  # not a plain object: its checks, its error
    return f"{namespace}/{name}" if namespace else name


def _ignore(event: WatchEvent) -> None:
    """The events of a cache the reconcile does not read."""
