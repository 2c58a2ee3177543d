"""The echo of a controller's own writes: events it need not reconcile again.

A reconcile that writes an object it watches (the status of its primary, a child it owns,
a finalizer) gets that write back as a watch event, and the event would start another
reconcile that finds nothing to do. With ``Controller(..., ignore_own_writes=True)`` the
controller holds back an event only when it is exactly the change one of its reconciles
made: the event carries the version a write of ours is *proven* to have made (see
`fastctl.kube._writes`: it created the object, or it was applied to a version the server
checked and the answer has another), and the event before it in the same watch is the
version that write was applied to (none, for a create). Such an event shows nothing but
our own change to a state the watch has delivered already, so holding it back loses
nothing. Everything else passes:

- a write that changed nothing: the server answers with the object as it is, whose version
  may be another writer's; no proof, so that writer's event is never taken for ours;
- a write whose precondition was refused (the object changed meanwhile) and was sent again
  unconditionally, or one to an object no watch of this controller has delivered yet
  (a create excepted): unproven, its echo passes (one reconcile more, nothing lost);
- an echo whose previous event is not the version our write was applied to (a relist that
  skipped versions, another writer's change between): it would hide that change;
- any other version, a delete, and everything when ``ignore_own_writes`` is off.

To make writes provable the controller keeps the latest version each of its watches has
delivered per object (`saw`, from `fastctl.runtime._settled_events`), and each write of
ours to such an object is sent with that version as its precondition.

The echo may come over the watch before the answer comes over the write's own
connection. So the controller also knows which objects have a write of ours in flight,
and an event for one of those waits (at most `SETTLE_TIMEOUT`; that object's later events
wait behind it, keeping their order, the other objects' pass: see
`fastctl.runtime._settled_events`) until the answer says which version was ours.

What is kept, and for how long: one version per watched object (of the kinds the
controller watches; forgotten with the object: its delete, or a relist that no longer
shows it), and a few notes per written object, each gone when its echo arrives, when a
later echo of the same object does (events come in order: an earlier echo will not
follow), when the object is deleted, or `NOTE_TTL` seconds after its last note: a note of
an object outside every watch's scope (a create in another namespace, say) would never
see its echo, and must not stay for the life of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastctl._clock import monotonic
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._writes import observed, version_of
from fastctl.types import Reconcile

__all__ = ["NOTE_TTL", "OwnWrites", "uid_of"]

_KEEP = 8
"""Notes remembered per object: a reconcile rarely writes one object more often."""

SETTLE_TIMEOUT = 2.0
"""Seconds an event waits for the answer of a write of ours to the same object."""

NOTE_TTL = 300.0
"""Seconds a note waits for its echo. An echo normally comes within a second; one that
comes later than this (a watch down for minutes) passes, and costs one reconcile."""

_Key = tuple[str, str, str, str]  # group, kind, namespace ("" if none), name


def uid_of(obj: Mapping[str, Any]) -> str:
    """The object's UID; its namespace/name for an object without one (a test's fake)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class _Pending:
    """Writes of one object in flight, and the event set when the last one ends."""

    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.count = 0
        self.ended = asyncio.Event()


class _Notes:
    """The versions our writes made of one object, each with the version it was applied to
    (``None``: it created the object), oldest first; and when the last was noted."""

    __slots__ = ("at", "made")

    def __init__(self, at: float) -> None:
        self.at = at
        self.made: list[tuple[str, str | None]] = []


class OwnWrites:
    """The versions this controller's reconciles made, per object UID; the writes in
    flight, per object name; the latest version the watches delivered, per object name
    (a `fastctl.kube._writes.WriteObserver`)."""

    __slots__ = ("_clock", "_keys", "_kinds", "_known", "_notes", "_pending")

    def __init__(
        self, resources: Iterable[Resource], *, clock: Callable[[], float] = monotonic
    ) -> None:
        self._kinds = {(r.group, r.kind) for r in resources}
        self._clock = clock
        self._notes: OrderedDict[str, _Notes] = OrderedDict()  # oldest note first
        self._pending: dict[_Key, _Pending] = {}
        self._known: dict[_Key, tuple[str, str]] = {}  # (uid, version) last delivered
        self._keys: dict[str, _Key] = {}  # uid -> its key in `_known`

    def __len__(self) -> int:
        """How many objects have a write whose echo has not come yet, or one in flight."""
        return len(self._notes) + len(self._pending)

    @property
    def known(self) -> int:
        """How many objects' latest versions are kept (for tests: bounded by the watched)."""
        return len(self._known)

    def _key(self, resource: Resource | ResolvedResource, namespace: str | None, name: str) -> _Key:
        return (resource.group, resource.kind, namespace or "", name)

    # -- what the watches deliver -----------------------------------------------------------

    def saw(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """A watch delivered `obj` (not a delete): its version is the latest known."""
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or (resource.group, resource.kind) not in self._kinds:
            return
        version = meta.get("resourceVersion")
        if not version:
            return
        uid = uid_of(obj)
        key = self._key(resource, meta.get("namespace"), str(meta.get("name") or ""))
        known = self._known.get(key)
        if known is not None and known[0] != uid:  # a new object of that name
            self._keys.pop(known[0], None)
        self._known[key] = (uid, str(version))
        self._keys[uid] = key

    def forget(self, uid: str) -> None:
        """The object is gone (deleted, or no longer listed)."""
        self._notes.pop(uid, None)
        key = self._keys.pop(uid, None)
        if key is not None:
            known = self._known.get(key)
            if known is not None and known[0] == uid:
                del self._known[key]

    # -- the writes (`fastctl.kube._writes.WriteObserver`) ----------------------------------

    def started(self, resource: ResolvedResource, namespace: str | None, name: str) -> str | None:
        """A write of ours to `name` is under way; the version to make it conditional on.
        A create by ``generateName`` (no name yet) holds back no event: nothing is known."""
        if not name or (resource.group, resource.kind) not in self._kinds:
            return None
        key = self._key(resource, namespace, name)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending()
        pending.count += 1
        known = self._known.get(key)
        return None if known is None else known[1]

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
        """The write ended: `answer` is the object (``None``: it failed); `made`: proven to be
        this write's change, applied to version `based_on` (``None``: a create). A delete
        (`deleted`) is never made: its echo passes, as every delete does."""
        if (resource.group, resource.kind) not in self._kinds:
            return
        key = self._key(resource, namespace, name)
        if answer is not None:
            self._answered(key, answer, made, based_on)
        pending = self._pending.get(key)
        if pending is not None:
            pending.count -= 1
            if pending.count <= 0:
                del self._pending[key]
                pending.ended.set()

    def _answered(
        self, key: _Key, answer: Mapping[str, Any], made: bool, based_on: str | None
    ) -> None:
        version = version_of(answer)
        if version is None:
            return
        uid = uid_of(answer)
        known = self._known.get(key)
        if known is not None and known[0] == uid:  # watched: the next write's precondition
            self._known[key] = (uid, version)
        if made:
            self._note(uid, version, based_on)

    def _note(self, uid: str, version: str, based_on: str | None) -> None:
        now = self._clock()
        notes = self._notes.get(uid)
        if notes is None:
            notes = self._notes[uid] = _Notes(now)
        else:
            notes.at = now
            self._notes.move_to_end(uid)  # the newest last
        notes.made.append((version, based_on))
        del notes.made[:-_KEEP]
        self._expire(now)

    def _expire(self, now: float) -> None:
        """Drop the notes older than `NOTE_TTL` (the oldest are first)."""
        notes = self._notes
        while notes and now - next(iter(notes.values())).at >= NOTE_TTL:
            notes.popitem(last=False)

    # -- the events -------------------------------------------------------------------------

    def _writing(self, resource: Resource, obj: Mapping[str, Any]) -> _Pending | None:
        if not self._pending:
            return None
        meta = obj.get("metadata") or {}
        key = self._key(resource, meta.get("namespace"), str(meta.get("name") or ""))
        return self._pending.get(key)

    def in_flight(self, resource: Resource, obj: Mapping[str, Any]) -> bool:
        """A write of ours to `obj` is under way: its events must `settle` first."""
        return self._writing(resource, obj) is not None

    async def settle(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """Wait until no write of ours to `obj` is in flight (so `is_echo` can tell)."""
        pending = self._writing(resource, obj)
        if pending is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pending.ended.wait(), SETTLE_TIMEOUT)

    def is_echo(self, uid: str, obj: Mapping[str, Any], previous: str | None) -> bool:
        """`obj` is the state one of our writes made, from `previous` (the version this
        watch delivered before it; ``None``: none). Its note is used up either way."""
        notes = self._notes.get(uid)
        if notes is None:
            return False
        version = version_of(obj)
        made = notes.made
        for i, (ours, based_on) in enumerate(made):
            if ours == version:
                del made[: i + 1]  # the earlier ones will not come: events are in order
                if not made:
                    del self._notes[uid]
                return based_on == previous
        return False

    # -- the reconcile ----------------------------------------------------------------------

    def observing(self, reconcile: Reconcile) -> Reconcile:
        """`reconcile`, reporting the writes it makes to this registry."""
        return observed(reconcile, lambda obj: self)
