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

Memory matters with 5,000-1,000,000 objects, so each object is kept compactly, in the
extension (`fastctl._core.CompactMap`): its JSON bytes as the watcher decoded them (after
its transform and without managedFields), with its name, namespace, uid, resourceVersion
and controller owner uid beside them in the same allocation. A dict of dicts and strings
costs several times the JSON; the bytes cost about the JSON. The price is a parse per
read, which is also the copy a reader needs: **every read returns a new object**, so a
caller may change what it got and the cache stays as the API server sent it.

- by controller owner UID (`owned_by`): kept in the extension for every object, beside the
  objects (a table slot each);
- by label (`with_label`): built lazily for a label key on its first query, then kept up to
  date, so only the keys a controller actually asks about cost memory.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import orjson

from fastctl._core import CompactMap, Item
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.kube._wire import item_of
from fastctl.types import ObjectRef

__all__ = ["Store", "controller_uid", "reflector"]

Obj = dict[str, Any]
_T = TypeVar("_T")
_NOTHING: Sequence[Obj] = ()
_loads = orjson.loads


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The UID in the object's controller ``ownerReference`` (``controller: true``), if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller") and owner.get("uid"):
            return str(owner["uid"])
    return None


def _item(event: ObjectEvent) -> Item:
    """The decoded form of `event`'s object: the watcher's, or the dict encoded once (an
    event made by hand), remembered on the event for the next store that applies it."""
    item = event._decoded
    if item is None:
        item = item_of(event.obj)
        object.__setattr__(event, "_item", item)
    return item


class Store(Mapping[ObjectRef, Obj]):
    """A cache of objects keyed by `ObjectRef`, fed by `apply` (or `reflector`); every read
    returns a new object."""

    __slots__ = ("_buffers", "_label_index", "_map", "_ready")

    def __init__(self) -> None:
        self._map = CompactMap()
        self._buffers: dict[str | None, CompactMap] = {}
        """The (re)lists in progress: the whole state's (None), or one namespace's each."""
        self._label_index: dict[str, dict[str, set[ObjectRef]]] = {}
        self._ready = asyncio.Event()

    # -- Mapping ------------------------------------------------------------------------

    def __getitem__(self, ref: ObjectRef) -> Obj:
        data = self._map.get(ref.name, ref.namespace)
        if data is None:
            raise KeyError(ref)
        return _loads(data)  # type: ignore[no-any-return]

    @overload
    def get(self, ref: ObjectRef, /) -> Obj | None: ...
    @overload
    def get(self, ref: ObjectRef, /, default: Obj | _T) -> Obj | _T: ...
    def get(self, ref: ObjectRef, /, default: Any = None) -> Any:
        """`Mapping.get` without its ``try: self[ref]``: one lookup and one parse."""
        data = self._map.get(ref.name, ref.namespace)
        return default if data is None else _loads(data)

    def __iter__(self) -> Iterator[ObjectRef]:
        trusted = ObjectRef._trusted
        return iter([trusted(name, ns) for name, ns in self._map.keys()])  # noqa: SIM118

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, ObjectRef) and self._map.contains(ref.name, ref.namespace)

    def __repr__(self) -> str:
        state = "ready" if self.is_ready else "not ready"
        return f"<Store {len(self._map)} objects, {state}>"

    # -- queries --------------------------------------------------------------------------

    def list(self, namespace: str | None = None) -> list[Obj]:
        """Every cached object (new objects, the caller's own), or those in one
        `namespace`."""
        return [_loads(data) for data in self._map.values(namespace)]

    def owned_by(self, uid: str) -> builtins.list[Obj]:
        """Objects whose controller ``ownerReference`` has this UID."""
        return [_loads(data) for data in self._map.owned_by(uid)]

    def with_label(self, key: str, value: str) -> builtins.list[Obj]:
        """Objects labelled ``key=value``. The first query for a `key` indexes it (one pass
        over the store); from then on the index is kept up to date incrementally."""
        index = self._label_index.get(key)
        if index is None:
            index = self._label_index[key] = self._indexed(self._map, key)
        refs = index.get(value)
        if not refs:
            return []
        get = self._map.get
        return [_loads(data) for ref in refs if (data := get(ref.name, ref.namespace))]

    def _keys(self, namespace: str | None = None) -> builtins.list[tuple[str, str | None]]:
        """``(name, namespace)`` of every cached object (of `namespace` when given), in the
        order of iteration: the refs without an `ObjectRef` made for each."""
        if namespace == "":  # the extension's key of a cluster-scoped object: none has it
            return []
        return self._map.keys(namespace)

    def _version(self, ref: ObjectRef) -> tuple[str | None, str | None] | None:
        """The object's ``(uid, resourceVersion)``, or None if it is not cached: without
        parsing it (the read-your-writes bookkeeping asks on every write)."""
        return self._map.version(ref.name, ref.namespace)

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
        if event.kind is EventKind.APPLY:  # the watch path: no call it can do without
            item = event._item
            if item is None:
                item = _item(event)
            if self._label_index:
                self._put(item)
            else:
                self._map.put(item)
        elif event.kind is EventKind.DELETE:
            self._remove(event._ref())
        elif event.kind is EventKind.INIT_APPLY:
            item = _item(event)
            buffers = self._buffers
            buffer = buffers.get(None)
            if buffer is None:
                namespace = item.namespace
                buffer = buffers.get(namespace) if buffers else None
                if buffer is None:  # tolerate a missing INIT
                    buffer = buffers[None if not buffers else namespace] = CompactMap()
            # An object the relist brings back unchanged (same uid and resourceVersion) is
            # kept as the copy already held: the list's copy is dropped now, so a relist
            # holds the changed objects twice, not the whole store (a relist used to double
            # the heap once, and the process's RSS kept that high-water mark).
            buffer.put_listed(item, self._map)
        elif event.kind is EventKind.INIT:
            if event.namespace is None:
                self._buffers = {None: CompactMap()}
            else:
                self._buffers[event.namespace] = CompactMap()
        else:  # INIT_DONE
            if event.namespace is None:
                return self._swap()
            return self._swap_namespace(event.namespace)
        return _NOTHING

    def _swap(self) -> Sequence[Obj]:
        new = self._buffers.pop(None, None)
        if new is None:
            new = CompactMap()
        old = self._map
        vanished = [_loads(data) for _, _, data in old.missing_from(new)] if len(old) else []
        self._map = new
        for key in self._label_index:
            self._label_index[key] = self._indexed(new, key)
        if not self._buffers:
            self._ready.set()
        return vanished

    def _swap_namespace(self, namespace: str) -> Sequence[Obj]:
        """Swap in the list of one `namespace` of a set: its objects that the list lacks
        go (and are returned), the listed ones are put; other namespaces are untouched.
        One pass over the store, as a whole relist makes."""
        new = self._buffers.pop(namespace, None)
        if new is None:
            new = CompactMap()
        gone = self._map.missing_from(new, namespace)
        for name, ns, _ in gone:
            self._map.remove(name, ns)
        self._map.merge(new)
        for key, index in self._label_index.items():
            for refs in index.values():
                refs.difference_update([ref for ref in refs if ref.namespace == namespace])
            for name, ns, value in self._map.label_values(key):
                if ns == namespace:
                    index.setdefault(value, set()).add(ObjectRef._trusted(name, ns))
            for value in [v for v, refs in index.items() if not refs]:
                del index[value]
        if not self._buffers:
            self._ready.set()
        return [_loads(data) for _, _, data in gone]

    @staticmethod
    def _indexed(objects: CompactMap, key: str) -> dict[str, set[ObjectRef]]:
        index: dict[str, set[ObjectRef]] = {}
        trusted = ObjectRef._trusted
        for name, ns, value in objects.label_values(key):
            index.setdefault(value, set()).add(trusted(name, ns))
        return index

    def _put(self, item: Item) -> None:
        if self._label_index:
            name, namespace = item.name, item.namespace
            ref = ObjectRef._trusted(name, namespace)
            old_labels = self._map.labels(name, namespace)
            labels = item.labels()
            for key, index in self._label_index.items():
                before, after = old_labels.get(key), labels.get(key)
                if before != after:
                    if before is not None:
                        _discard(index, before, ref)
                    if after is not None:
                        index.setdefault(after, set()).add(ref)
        self._map.put(item)

    def _remove(self, ref: ObjectRef) -> None:
        if self._label_index:
            labels = self._map.labels(ref.name, ref.namespace)
            for key, index in self._label_index.items():
                value = labels.get(key)
                if value is not None:
                    _discard(index, value, ref)
        self._map.remove(ref.name, ref.namespace)


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
