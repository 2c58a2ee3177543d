"""The echo of a controller's own writes: events it need not reconcile again.

A reconcile that writes an object it watches (the status of its primary, a child it owns,
a finalizer) gets that write back as a watch event, and the event would start another
reconcile that finds nothing to do. With ``Controller(..., ignore_own_writes=True)`` the
controller notes the ``resourceVersion`` of each object its reconciles write (the API
server's answer, through `fastctl.kube._writes`) and holds back the one event that
carries exactly that version. A write by anyone else makes another version, and passes.

The echo may come over the watch before the answer comes over the write's own
connection. So the controller also knows which objects have a write of ours in flight,
and an event for one of those waits (at most `SETTLE_TIMEOUT`; that object's later events
wait behind it, keeping their order, the other objects' pass: see
`fastctl.runtime._settled_events`) until the answer says which version was ours.

The note is small (a few versions per written object, of the watched kinds only: an
Event the reconcile publishes is not remembered) and goes when its echo arrives, when a
later echo of the same object does (events come in order: an earlier echo will not
follow), or when the object is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._writes import WRITE_OBSERVER
from fastctl.types import Reconcile

__all__ = ["OwnWrites"]

_KEEP = 8
"""Versions remembered per object: a reconcile rarely writes one object more often."""

SETTLE_TIMEOUT = 2.0
"""Seconds an event waits for the answer of a write of ours to the same object."""

_Key = tuple[str, str, str, str]  # group, kind, namespace ("" if none), name


class _Pending:
    """Writes of one object in flight, and the event set when the last one ends."""

    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.count = 0
        self.ended = asyncio.Event()


class OwnWrites:
    """The versions this controller's reconciles wrote, per object UID; the writes in
    flight, per object name (a `fastctl.kube._writes.WriteObserver`)."""

    __slots__ = ("_kinds", "_pending", "_versions")

    def __init__(self, resources: Iterable[Resource]) -> None:
        self._kinds = {(r.group, r.kind) for r in resources}
        self._versions: dict[str, list[str]] = {}
        self._pending: dict[_Key, _Pending] = {}

    def __len__(self) -> int:
        """How many objects have a write whose echo has not come yet, or one in flight."""
        return len(self._versions) + len(self._pending)

    def started(self, resource: ResolvedResource, namespace: str | None, name: str) -> None:
        """A write of ours to `name` is under way."""
        if (resource.group, resource.kind) not in self._kinds:
            return
        key = (resource.group, resource.kind, namespace or "", name)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending()
        pending.count += 1

    def finished(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
    ) -> None:
        """The write ended: `answer` is the object it made (``None``: it failed)."""
        if (resource.group, resource.kind) not in self._kinds:
            return
        if answer is not None:
            self._note(answer)
        key = (resource.group, resource.kind, namespace or "", name)
        pending = self._pending.get(key)
        if pending is not None:
            pending.count -= 1
            if pending.count <= 0:
                del self._pending[key]
                pending.ended.set()

    def _writing(self, resource: Resource, obj: Mapping[str, Any]) -> _Pending | None:
        if not self._pending:
            return None
        meta = obj.get("metadata") or {}
        key = (resource.group, resource.kind, meta.get("namespace") or "", meta.get("name"))
        return self._pending.get(key)  # type: ignore[arg-type]

    def in_flight(self, resource: Resource, obj: Mapping[str, Any]) -> bool:
        """A write of ours to `obj` is under way: its events must `settle` first."""
        return self._writing(resource, obj) is not None

    async def settle(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """Wait until no write of ours to `obj` is in flight (so `is_echo` can tell)."""
        pending = self._writing(resource, obj)
        if pending is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pending.ended.wait(), SETTLE_TIMEOUT)

    def _note(self, answer: Mapping[str, Any]) -> None:
        meta = answer.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return
        versions = self._versions.setdefault(str(uid), [])
        versions.append(str(version))
        del versions[:-_KEEP]

    def is_echo(self, uid: str, obj: Mapping[str, Any]) -> bool:
        """`obj` is the state one of our writes made (its note is used up)."""
        versions = self._versions.get(uid)
        if not versions:
            return False
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version not in versions:
            return False
        del versions[: versions.index(version) + 1]
        if not versions:
            del self._versions[uid]
        return True

    def forget(self, uid: str) -> None:
        """The object is gone."""
        self._versions.pop(uid, None)

    def observing(self, reconcile: Reconcile) -> Reconcile:
        """`reconcile`, reporting the writes it makes to this registry."""
        observer = self
        if inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
            getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
        ):

            @functools.wraps(reconcile)
            async def run_async(obj: Any, ctx: Any) -> Any:
                token = WRITE_OBSERVER.set(observer)
                try:
                    return await reconcile(obj, ctx)  # type: ignore[misc]
                finally:
                    WRITE_OBSERVER.reset(token)

            return run_async

        @functools.wraps(reconcile)
        def run(obj: Any, ctx: Any) -> Any:
            token = WRITE_OBSERVER.set(observer)
            try:
                return reconcile(obj, ctx)
            finally:
                WRITE_OBSERVER.reset(token)

        return run
