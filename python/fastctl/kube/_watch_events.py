"""The events a watcher yields: `EventKind`, `ObjectEvent` (one object), `ListFrame` (the
frames of a list), and their union `WatchEvent`. `fastctl.kube._watcher` makes them (and
exports them, as before); they live here to keep that module short.

An `ObjectEvent` is made per watch event, so its construction is on the watch path's
budget: `ObjectEvent._of_item` fills a `_Building` (the same slots, writable) and turns it
into the frozen event, rather than five ``object.__setattr__`` calls.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Literal, TypeAlias

import orjson

from fastctl._core import Item
from fastctl.types import ObjectRef

__all__ = ["EventKind", "FrameKind", "ListFrame", "ObjectEvent", "ObjectKind", "WatchEvent"]


class EventKind(enum.Enum):
    """What a `WatchEvent` says. A (re)list is framed ``INIT, INIT_APPLY*, INIT_DONE``: the
    frames are `ListFrame`s, the rest `ObjectEvent`s."""

    INIT = "init"
    """A (re)list starts: objects follow as `INIT_APPLY`; drop any half-received list."""
    INIT_APPLY = "init_apply"
    """One object of the list in progress."""
    INIT_DONE = "init_done"
    """The list is complete: its objects are the whole state (a store may swap now)."""
    APPLY = "apply"
    """An object was added or modified."""
    DELETE = "delete"
    """An object was deleted; `obj` is its last known state."""


ObjectKind: TypeAlias = Literal[EventKind.INIT_APPLY, EventKind.APPLY, EventKind.DELETE]
"""The kinds of event that carry an object."""
FrameKind: TypeAlias = Literal[EventKind.INIT, EventKind.INIT_DONE]
"""The kinds of event that frame a list and carry none."""

_OBJECT_KINDS = frozenset({EventKind.INIT_APPLY, EventKind.APPLY, EventKind.DELETE})
_FRAME_KINDS = frozenset({EventKind.INIT, EventKind.INIT_DONE})


class _EventSlots:
    """The fields of an `ObjectEvent`, in a base of its own: `_Building` shares them and
    lets the watcher fill an event by plain attribute stores (see `ObjectEvent._of_item`)."""

    __slots__ = ("_head", "_item", "_obj", "_oref", "kind")

    kind: ObjectKind
    _obj: dict[str, Any] | None
    _item: Item | None
    _head: dict[str, Any] | None
    _oref: ObjectRef | None


class ObjectEvent(_EventSlots):
    """An event about one object (`INIT_APPLY`, `APPLY`, `DELETE`): it always carries the
    parsed object, so no consumer checks for a missing one.

    Frozen, compared by `kind` and `obj`. An event the watcher made from a watch frame
    holds the frame's decoded form (the object's JSON and the metadata fastctl reads,
    decoded once in the extension) and parses `obj` from it on first access only: a
    `Store`, the triggers and the read-your-writes bookkeeping read what they need without
    building the object."""

    __slots__ = ()
    __match_args__ = ("kind", "obj")

    def __init__(self, kind: ObjectKind, obj: dict[str, Any]) -> None:
        if kind not in _OBJECT_KINDS:
            raise ValueError(f"an ObjectEvent is INIT_APPLY, APPLY or DELETE, not {kind}")
        if not isinstance(obj, dict):
            raise TypeError(f"an ObjectEvent carries a dict, not {type(obj).__name__}")
        _set(self, "kind", kind)
        _set(self, "_obj", obj)
        _set(self, "_item", None)
        _set(self, "_head", None)
        _set(self, "_oref", None)

    @classmethod
    def _of_item(cls, kind: ObjectKind, item: Item) -> ObjectEvent:
        """The event of a decoded frame (trusted: the watcher's own), made once per watch
        event: filled as a `_Building` (plain slot stores) and then made an `ObjectEvent`,
        a fifth of the time of five ``object.__setattr__`` calls past the frozen guard."""
        event = _Building()
        event.kind = kind
        event._obj = None
        event._item = item
        event._head = None
        event._oref = None
        event.__class__ = cls  # type: ignore[assignment]
        return event  # type: ignore[return-value]

    @property
    def obj(self) -> dict[str, Any]:
        """The object, parsed (once per event, shared by everything that reads the event:
        do not mutate it)."""
        obj = self._obj
        if obj is None:
            item = self._item
            assert item is not None
            obj = orjson.loads(item.json)
            _set(self, "_obj", obj)
        return obj

    @property
    def _decoded(self) -> Item | None:
        """The decoded frame this event came from, if the watcher made it."""
        return self._item

    def _meta(self) -> Mapping[str, Any]:
        """The object's ``metadata`` as fastctl's own consumers read it: the parsed one,
        or, for a frame not parsed yet, a dict of what the extension read (name,
        namespace, uid, resourceVersion, generation, deletionTimestamp, labels,
        ownerReferences; no annotations or finalizers)."""
        if self._obj is not None:
            meta = self._obj.get("metadata")
            return meta if isinstance(meta, dict) else {}
        return self._slim()["metadata"]  # type: ignore[no-any-return]

    def _slim(self) -> Mapping[str, Any]:
        """The object as a reader of its ``metadata`` alone sees it (the owner mapper of
        ``owns``): the parsed object once it is parsed, else ``{"metadata": ...}`` with
        what the extension read (`_meta`), made once per event."""
        if self._obj is not None:
            return self._obj
        slim = self._head
        if slim is None:
            item = self._item
            assert item is not None
            head: dict[str, Any] = {"name": item.name}
            for key, value in (
                ("namespace", item.namespace),
                ("uid", item.uid),
                ("resourceVersion", item.resource_version),
                ("generation", item.generation),
                ("deletionTimestamp", item.deletion_timestamp),
            ):
                if value is not None:
                    head[key] = value
            labels = item.labels()
            if labels:
                head["labels"] = labels
            owners = item.owners()
            if owners:
                head["ownerReferences"] = [
                    {"apiVersion": a, "kind": k, "name": n, "uid": u, "controller": c}
                    for a, k, n, u, c in owners
                ]
            slim = {"metadata": head}
            _set(self, "_head", slim)
        return slim

    def _names(self) -> tuple[str, str, str, str]:
        """``(namespace, name, uid, resourceVersion)``, each ``""`` when absent, without
        parsing the object (read on every event while a write is followed)."""
        item = self._item
        if item is not None:
            return (
                item.namespace or "",
                item.name,
                item.uid or "",
                item.resource_version or "",
            )
        meta = self._meta()
        return (
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
            str(meta.get("resourceVersion") or ""),
        )

    def _ref(self) -> ObjectRef:
        """The object's `ObjectRef`, without parsing it: made once per event (the store,
        the triggers of each controller a shared watch feeds, tracing each ask for it)."""
        ref = self._oref
        if ref is None:
            item = self._item
            if item is not None:
                ref = ObjectRef._trusted(item.name, item.namespace or None)
            else:
                ref = ObjectRef.from_object(self.obj)
            _set(self, "_oref", ref)
        return ref

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectEvent):
            return NotImplemented
        return self.kind is other.kind and self.obj == other.obj

    def __hash__(self) -> int:
        return hash((self.kind, self.obj))  # a dict: unhashable, as the dataclass was

    def __repr__(self) -> str:
        return f"ObjectEvent(kind={self.kind!r}, obj={self.obj!r})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


class _Building(_EventSlots):
    """An `ObjectEvent` being filled in (`ObjectEvent._of_item`): same fields, writable."""

    __slots__ = ()


_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class ListFrame:
    """The start (`INIT`) or the end (`INIT_DONE`) of a (re)list: no object.

    `namespace` None: the list is the whole state of the watch. A watch of a set of
    namespaces (`fastctl.kube.Namespaces`) lists each namespace on its own and names it
    here: the list is the whole state of that namespace only, and the objects of the
    others stay as they are (``""`` frames the set's own first list, which holds no
    object: its ``INIT_DONE`` comes once every namespace of the set has started listing,
    so a store is ready only when they all have)."""

    kind: FrameKind
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _FRAME_KINDS:
            raise ValueError(f"a ListFrame is INIT or INIT_DONE, not {self.kind}")


WatchEvent: TypeAlias = ObjectEvent | ListFrame
"""One event of a watcher. The two classes split on `kind`, so a type checker narrows
``event.kind is EventKind.APPLY`` to an `ObjectEvent` and its ``obj`` needs no check (as
does ``isinstance(event, ObjectEvent)`` or a ``match``)."""
