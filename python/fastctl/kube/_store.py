"""The reflector cache: the latest state of every watched object, keyed by `ObjectRef`.

A `Store` is fed `WatchEvent`s (by `reflector`) and is a read-only
``Mapping[ObjectRef, dict]`` for everything else. A (re)list is buffered and swapped in
atomically on `INIT_DONE`, so readers never see half a list; the store is *ready* once the
first list is in, and stays ready (serving the previous state) during later relists.

A watch of a set of namespaces lists each namespace on its own (`ListFrame.namespace`):
such a list is buffered and swapped in for its namespace alone, the others untouched, and
the store is ready once no list is open after the first swap (the set frames its first
lists so that this is when every namespace of it has been listed once).

Deletions that happened while the watch was down (the watcher relisted after a 410) are
found here, by comparing the store with the new list: `Store.apply` returns the objects the
swap removed and `reflector` emits a `DELETE` event for each, after `INIT_DONE`. Doing it
here rather than in the watcher costs no memory: the store already holds those objects.

Memory matters with 5,000-100,000 objects, so each object is kept as the parsed dict the
watcher produced and nothing more. The indexes hold `ObjectRef`s, not copies:

- by controller owner UID (`owned_by`): maintained for every object, cheap because most
  objects have at most one controller reference;
- by label (`with_label`): built lazily for a label key on its first query, then kept up to
  date, so only the keys a controller actually asks about cost memory.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.types import ObjectRef

__all__ = ["Store", "controller_uid", "reflector"]

Obj = dict[str, Any]
_T = TypeVar("_T")
_NOTHING: Sequence[Obj] = ()


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The UID in the object's controller ``ownerReference`` (``controller: true``), if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller") and owner.get("uid"):
            return str(owner["uid"])
    return None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


class Store(Mapping[ObjectRef, Obj]):
    """A cache of parsed objects keyed by `ObjectRef`, fed by `apply` (or `reflector`)."""

    __slots__ = ("_buffers", "_label_index", "_objects", "_owner_index", "_ready")

    def __init__(self) -> None:
        self._objects: dict[ObjectRef, Obj] = {}
        self._buffers: dict[str | None, dict[ObjectRef, Obj]] = {}
        """The (re)lists in progress: the whole state's (None), or one namespace's each."""
        self._owner_index: dict[str, set[ObjectRef]] = {}
        self._label_index: dict[str, dict[str, set[ObjectRef]]] = {}
        self._ready = asyncio.Event()

    # -- Mapping ------------------------------------------------------------------------

    def __getitem__(self, ref: ObjectRef) -> Obj:
        return self._objects[ref]

    @overload
    def get(self, ref: ObjectRef, /) -> Obj | None: ...
    @overload
    def get(self, ref: ObjectRef, /, default: Obj | _T) -> Obj | _T: ...
    def get(self, ref: ObjectRef, /, default: Any = None) -> Any:
        """`Mapping.get` without its ``try: self[ref]``: one dict lookup (every write a
        reconcile makes looks its object up here, for the read-your-writes guard)."""
        return self._objects.get(ref, default)

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, ref: object) -> bool:
        return ref in self._objects

    def __repr__(self) -> str:
        state = "ready" if self.is_ready else "not ready"
        return f"<Store {len(self._objects)} objects, {state}>"

    # -- queries --------------------------------------------------------------------------

    def list(self, namespace: str | None = None) -> list[Obj]:
        """Every cached object (a new list; the objects themselves are shared, do not mutate
        them), or those in one `namespace`."""
        if namespace is None:
            return list(self._objects.values())
        return [obj for ref, obj in self._objects.items() if ref.namespace == namespace]

    def owned_by(self, uid: str) -> builtins.list[Obj]:
        """Objects whose controller ``ownerReference`` has this UID."""
        refs = self._owner_index.get(uid)
        return [self._objects[ref] for ref in refs] if refs else []

    def with_label(self, key: str, value: str) -> builtins.list[Obj]:
        """Objects labelled ``key=value``. The first query for a `key` indexes it (one pass
        over the store); from then on the index is kept up to date incrementally."""
        index = self._label_index.get(key)
        if index is None:
            index = self._label_index[key] = {}
            for ref, obj in self._objects.items():
                value_of = _labels(obj).get(key)
                if value_of is not None:
                    index.setdefault(value_of, set()).add(ref)
        refs = index.get(value)
        return [self._objects[ref] for ref in refs] if refs else []

    @property
    def is_ready(self) -> bool:
        """True once the first list has been applied."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Wait for the first complete list (wrap in `asyncio.timeout` to bound it)."""
        await self._ready.wait()

    # -- updates --------------------------------------------------------------------------

    def apply(self, event: WatchEvent) -> Sequence[Obj]:
        """Apply one watcher event.

        Returns the objects that disappeared without a DELETE event of their own: after an
        `INIT_DONE` that ends a relist, those in the old state but not in the new list (the
        caller should report them as deleted); empty for every other event.
        """
        if event.kind is EventKind.APPLY:
            self._put(ObjectRef.from_object(event.obj), event.obj)
        elif event.kind is EventKind.DELETE:
            self._remove(ObjectRef.from_object(event.obj))
        elif event.kind is EventKind.INIT_APPLY:
            obj = event.obj
            ref = ObjectRef.from_object(obj)
            buffers = self._buffers
            buffer = buffers.get(None)
            if buffer is None:
                buffer = buffers.get(ref.namespace) if buffers else None
                if buffer is None:  # tolerate a missing INIT
                    buffer = buffers[None if not buffers else ref.namespace] = {}
            held = self._objects.get(ref)
            # An object the relist brings back unchanged (same uid and resourceVersion) is
            # kept as the copy already held: the list's copy is dropped now, so a relist
            # holds the changed objects twice, not the whole store (a relist used to double
            # the heap once, and the process's RSS kept that high-water mark).
            buffer[ref] = held if held is not None and _same_version(held, obj) else obj
        elif event.kind is EventKind.INIT:
            if event.namespace is None:
                self._buffers = {None: {}}
            else:
                self._buffers[event.namespace] = {}
        else:  # INIT_DONE
            if event.namespace is None:
                return self._swap()
            return self._swap_namespace(event.namespace)
        return _NOTHING

    def _swap(self) -> Sequence[Obj]:
        new = self._buffers.pop(None, None)
        if new is None:
            new = {}
        old = self._objects
        vanished = [obj for ref, obj in old.items() if ref not in new] if old else []
        self._objects = new
        self._owner_index = {}
        for ref, obj in new.items():
            uid = controller_uid(obj)
            if uid is not None:
                self._owner_index.setdefault(uid, set()).add(ref)
        for key in self._label_index:
            index: dict[str, set[ObjectRef]] = {}
            for ref, obj in new.items():
                value = _labels(obj).get(key)
                if value is not None:
                    index.setdefault(value, set()).add(ref)
            self._label_index[key] = index
        if not self._buffers:
            self._ready.set()
        return vanished

    def _swap_namespace(self, namespace: str) -> Sequence[Obj]:
        """Swap in the list of one `namespace` of a set: its objects that the list lacks
        go (and are returned), the listed ones are put; other namespaces are untouched.
        One pass over the store, as a whole relist makes."""
        new = self._buffers.pop(namespace, None)
        if new is None:
            new = {}
        vanished = [
            obj
            for ref, obj in self._objects.items()
            if ref.namespace == namespace and ref not in new
        ]
        for obj in vanished:
            self._remove(ObjectRef.from_object(obj))
        for ref, obj in new.items():
            if self._objects.get(ref) is not obj:
                self._put(ref, obj)
        if not self._buffers:
            self._ready.set()
        return vanished

    def _put(self, ref: ObjectRef, obj: Obj) -> None:
        old = self._objects.get(ref)
        self._objects[ref] = obj
        old_uid = controller_uid(old) if old is not None else None
        uid = controller_uid(obj)
        if old_uid != uid:
            if old_uid is not None:
                _discard(self._owner_index, old_uid, ref)
            if uid is not None:
                self._owner_index.setdefault(uid, set()).add(ref)
        if self._label_index:
            old_labels = _labels(old) if old is not None else {}
            labels = _labels(obj)
            for key, index in self._label_index.items():
                before, after = old_labels.get(key), labels.get(key)
                if before != after:
                    if before is not None:
                        _discard(index, before, ref)
                    if after is not None:
                        index.setdefault(after, set()).add(ref)

    def _remove(self, ref: ObjectRef) -> None:
        old = self._objects.pop(ref, None)
        if old is None:
            return
        uid = controller_uid(old)
        if uid is not None:
            _discard(self._owner_index, uid, ref)
        if self._label_index:
            labels = _labels(old)
            for key, index in self._label_index.items():
                value = labels.get(key)
                if value is not None:
                    _discard(index, value, ref)


def _same_version(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two copies of an object are the same version of it: the API server changes
    ``resourceVersion`` on every write, so equal uid and resourceVersion mean equal content."""
    meta_a, meta_b = a.get("metadata") or {}, b.get("metadata") or {}
    rv = meta_a.get("resourceVersion")
    return (
        bool(rv) and rv == meta_b.get("resourceVersion") and meta_a.get("uid") == meta_b.get("uid")
    )


def _discard(index: dict[str, set[ObjectRef]], key: str, ref: ObjectRef) -> None:
    refs = index.get(key)
    if refs is not None:
        refs.discard(ref)
        if not refs:
            del index[key]


async def reflector(store: Store, events: AsyncIterable[WatchEvent]) -> AsyncIterator[WatchEvent]:
    """Apply each event to `store`, then pass it on; after a relist's `INIT_DONE`, also a
    `DELETE` for every object that vanished between the lists.

    The store is updated before the event is yielded, so a consumer that reads the store
    on an event sees the state the event describes (the DELETEs find the object gone). A
    list's `INIT_APPLY` objects are only buffered until `INIT_DONE`: act on a list at its
    `INIT_DONE` (as the controller does), not per object.
    """
    async for event in events:
        vanished = store.apply(event)
        yield event
        for obj in vanished:
            yield ObjectEvent(EventKind.DELETE, obj)
