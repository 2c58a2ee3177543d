"""Watch events into triggers, so that a reconcile sees the state its trigger describes.

A (re)list is framed ``INIT, INIT_APPLY*, INIT_DONE`` and the `Store` swaps the new list in
only at ``INIT_DONE``, keeping the old state until then. A trigger sent for an
``INIT_APPLY`` would start a reconcile that reads the *old* cache: an object created while
the watch was down would be missing (its trigger dropped, never reconciled) and a changed
one reconciled with its old state, with nothing to re-trigger it after the swap. So a list
triggers nothing until it is complete:

- `primary_triggers`: ``APPLY`` triggers its object at once; ``INIT_DONE`` (the store has
  swapped) triggers every object of the store (of the namespace listed, for a namespace
  of a set) at `INITIAL_LIST_PRIORITY`. It needs no
  memory of its own: after the swap the store *is* the list. Objects that vanished get no
  trigger (there is nothing left to reconcile; finalizers keep an object, as an ``APPLY``
  with a ``deletionTimestamp``, until its controller lets it go).
- `RelatedTriggers`: a related resource (``owns``/``watches``) has no cache of its own, so
  it keeps a slim map, related object → the primary refs it mapped to (refs only, no
  objects). A list is collected in a second map and diffed at ``INIT_DONE`` as the store
  does: a related object that vanished meanwhile (a child deleted while the watch was down,
  whose ``DELETED`` event was compacted away) re-triggers the primaries it mapped to, so an
  owner recreates its child. A change that moves an object from one primary to another
  triggers both, live or across a relist: the primaries a known object was moved to or
  taken from while the watch was down are triggered as changes (live priority), the
  others that a listed object maps to (an object new to the memory included) as a list
  (`INITIAL_LIST_PRIORITY`). The map costs a ref per target: a mapper that fans one
  object out to many primaries costs as many. With a shared watch the reflector also
  sends a ``DELETE`` for each vanished object; its triggers repeat the diff's, and the
  scheduler merges them.
  This memory is also what makes a removed reference count: an update that drops a target
  triggers the old target as well as the new ones, and a delete triggers the last targets,
  even when the deleted object's final state no longer names them.
- With ``index=True`` (a cached relation, `fastctl.runtime.RelatedCache`) it also keeps
  the reverse map, primary ref → the related objects mapped to it (`sources_of`), so a
  reconcile finds the objects that point at its object without a scan.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.runtime._filters import EventFilter
from fastctl.types import Mapper, ObjectRef, Trigger

__all__ = ["INITIAL_LIST_PRIORITY", "RelatedTriggers", "primary_triggers"]

log = logging.getLogger("fastctl.controller")

INITIAL_LIST_PRIORITY = -100
"""Priority of triggers from a (re)list: below every live change."""

_NONE: tuple[ObjectRef, ...] = ()


def primary_triggers(
    event: WatchEvent, store: Mapping[ObjectRef, Any], event_filter: EventFilter | None = None
) -> Iterable[ObjectRef | Trigger]:
    """The triggers for one event of the primary resource, once `store` has applied it;
    with `event_filter`, only for the events (and listed objects) it admits."""
    if event_filter is not None and not event_filter.admits(event):
        return ()
    if event.kind is EventKind.APPLY:
        return (event._ref(),)
    if event.kind is EventKind.INIT_DONE:
        # A snapshot of the keys: the caller awaits between triggers, the store moves on.
        # The list of one namespace of a set triggers that namespace's objects.
        ns = event.namespace
        keys = _keys(store, ns)
        passing = event_filter.take_listed(ns) if event_filter is not None else None
        return _listed(keys, passing)
    return ()


def _keys(store: Mapping[ObjectRef, Any], namespace: str | None) -> list[tuple[str, str | None]]:
    """``(name, namespace)`` of every object of `store` (of `namespace` when given), now.

    Taken from a `Store` without an `ObjectRef` each: a list's triggers make their refs as
    they are sent, so the first of them are queued, and the first reconciles start, without
    waiting for a ref per object of a large list (a third of a second at 100,000)."""
    if isinstance(store, Store):
        return store._keys(namespace)
    return [(ref.name, ref.namespace) for ref in store if namespace in (None, ref.namespace)]


def _listed(
    keys: list[tuple[str, str | None]], passing: set[ObjectRef] | None
) -> Iterator[Trigger]:
    """The list's trigger of each key (of those in `passing`, when given)."""
    trusted = ObjectRef._trusted
    for name, namespace in keys:
        ref = trusted(name, namespace)
        if passing is None or ref in passing:
            yield Trigger(ref, priority=INITIAL_LIST_PRIORITY, reason="list")


class RelatedTriggers:
    """The triggers a related resource's events produce, and the slim state that lets a
    relist report the related objects that vanished (see the module docstring)."""

    __slots__ = (
        "_controller",
        "_filter",
        "_held",
        "_kind",
        "_listings",
        "_mapper",
        "_metadata_mapper",
        "_reason",
        "_sources",
        "_targets",
    )

    def __init__(
        self,
        mapper: Mapper,
        reason: str,
        *,
        controller: str,
        kind: str,
        index: bool = False,
        event_filter: EventFilter | None = None,
        metadata_mapper: bool = False,
    ) -> None:
        self._filter = event_filter
        self._metadata_mapper = metadata_mapper
        """The mapper reads nothing but ``metadata`` (the owner mapper of ``owns``): it is
        given ``{"metadata": ...}`` with what the watcher decoded, and the object is not
        parsed for it."""
        self._held: set[ObjectRef] = set()  # listed objects the filter held back
        self._mapper = mapper
        self._reason = reason
        self._controller = controller
        self._kind = kind
        self._targets: dict[ObjectRef, tuple[ObjectRef, ...]] = {}
        self._listings: dict[str | None, dict[ObjectRef, tuple[ObjectRef, ...]]] = {}
        """The (re)lists in progress: the whole watch's (None), or one namespace's each."""
        self._sources: dict[ObjectRef, set[ObjectRef]] | None = {} if index else None

    def sources_of(self, target: ObjectRef) -> tuple[ObjectRef, ...]:
        """The related objects last mapped to `target` (needs ``index=True``)."""
        if self._sources is None:
            raise RuntimeError("RelatedTriggers keeps no reverse index (index=False)")
        return tuple(self._sources.get(target, ()))

    def _retarget(
        self, ref: ObjectRef, before: tuple[ObjectRef, ...], after: tuple[ObjectRef, ...]
    ) -> None:
        """Remember `after` as `ref`'s targets (forget it when empty), and keep the reverse
        index in step."""
        if after:
            self._targets[ref] = after
        sources = self._sources
        if sources is None or before == after:
            return
        for target in before:
            if target not in after:
                refs = sources.get(target)
                if refs is not None:
                    refs.discard(ref)
                    if not refs:
                        del sources[target]
        for target in after:
            sources.setdefault(target, set()).add(ref)

    def __len__(self) -> int:
        """How many related objects map to at least one primary object."""
        return len(self._targets)

    def on_event(self, event: WatchEvent) -> list[Trigger]:
        admitted = self._filter is None or self._filter.admits(event)
        if event.kind is EventKind.INIT:
            if event.namespace is None:
                self._listings = {None: {}}
                self._held = set()
            else:
                self._listings[event.namespace] = {}
                self._held = {ref for ref in self._held if ref.namespace != event.namespace}
        elif event.kind is EventKind.INIT_DONE:
            return self._swap(event.namespace)
        elif event.kind is EventKind.INIT_APPLY:
            ref = event._ref()
            listing = self._listing_of(ref)
            targets = self._map(self._mapped(event))
            if targets:
                listing[ref] = targets
                if not admitted:
                    self._held.add(ref)
        elif event.kind is EventKind.APPLY:
            ref = event._ref()
            targets = self._map(self._mapped(event))
            before = self._targets.pop(ref, _NONE)
            self._retarget(ref, before, targets)
            if not admitted:  # the filter says this change needs no reconcile
                return []
            return self._triggers(_union(before, targets), 0, ref)
        else:  # DELETE
            ref = event._ref()
            before = self._targets.pop(ref, _NONE)
            self._retarget(ref, before, _NONE)
            return self._triggers(_union(before, self._map(self._mapped(event))), 0, ref)
        return []

    def _mapped(self, event: ObjectEvent) -> Mapping[str, Any]:
        """What the mapper is given: the object, or only its metadata (`_metadata_mapper`:
        the event's own view, made once per event rather than per mapper call)."""
        if self._metadata_mapper:
            return event._slim()
        return event.obj

    def _listing_of(self, ref: ObjectRef) -> dict[ObjectRef, tuple[ObjectRef, ...]]:
        """The list in progress `ref` belongs to: the whole watch's, or its namespace's (a
        missing INIT tolerated, as the store does)."""
        listings = self._listings
        listing = listings.get(None)
        if listing is None:
            listing = listings.get(ref.namespace) if listings else None
            if listing is None:
                listing = listings[None if not listings else ref.namespace] = {}
        return listing

    def _swap(self, namespace: str | None) -> list[Trigger]:
        new = self._listings.pop(namespace, None)
        if new is None:
            new = {}
        if namespace is None:
            old, self._targets = self._targets, new
            if self._sources is not None:
                self._sources = {}
                for ref, targets in new.items():
                    for target in targets:
                        self._sources.setdefault(target, set()).add(ref)
        else:
            # One namespace of a set: only its objects are replaced (and re-indexed).
            old = {ref: t for ref, t in self._targets.items() if ref.namespace == namespace}
            for ref, targets in old.items():
                del self._targets[ref]
                self._retarget(ref, targets, _NONE)
            for ref, targets in new.items():
                self._retarget(ref, _NONE, targets)
        # Changes, at live priority: a vanished related object (a child to recreate), and
        # the primaries a listed one was added to or taken from while the watch was down
        # (a move: both sides, as a live update triggers both, unless the filter holds the
        # change back, as it would have held back the live update).
        changed: dict[ObjectRef, None] = {}
        if namespace is None:
            held, self._held = self._held, set()
        else:
            held = {ref for ref in self._held if ref.namespace == namespace}
            self._held -= held
        for ref, targets in old.items():
            now = new.get(ref)
            if now is None:
                changed.update(dict.fromkeys(targets))
            elif now != targets and ref not in held:
                changed.update(dict.fromkeys(t for t in targets if t not in now))
        listed: dict[ObjectRef, None] = {}
        for ref, targets in new.items():
            if ref in held:
                continue
            before = old.get(ref)
            for target in targets:
                if before is None or target in before:
                    listed[target] = None  # unchanged, or an object new to this memory
                else:
                    changed[target] = None
        return [
            *self._triggers(changed, 0),
            *self._triggers((r for r in listed if r not in changed), INITIAL_LIST_PRIORITY),
        ]

    def _triggers(
        self, refs: Iterable[ObjectRef], priority: int, source: ObjectRef | None = None
    ) -> list[Trigger]:
        """Triggers for `refs`; the reason names the related object `source` when one
        event caused them (``owned ConfigMap changed: default/web``)."""
        reason = self._reason if source is None else f"{self._reason}: {source.key}"
        return [Trigger(ref, priority=priority, reason=reason) for ref in refs]

    def _map(self, obj: Mapping[str, Any]) -> tuple[ObjectRef, ...]:
        """The mapper's refs for `obj` (a failing mapper or a wrong value is logged)."""
        try:
            refs = tuple(self._mapper(obj))  # type: ignore[arg-type]
        except Exception:
            log.exception(
                "controller %s: mapper for %s failed; event skipped", self._controller, self._kind
            )
            return _NONE
        if all(isinstance(ref, ObjectRef) for ref in refs):
            return refs
        for ref in refs:
            if not isinstance(ref, ObjectRef):
                log.error(
                    "controller %s: mapper for %s returned %r, not an ObjectRef",
                    self._controller,
                    self._kind,
                    ref,
                )
        return tuple(ref for ref in refs if isinstance(ref, ObjectRef))


def _union(first: tuple[ObjectRef, ...], second: tuple[ObjectRef, ...]) -> Iterator[ObjectRef]:
    """The refs of both, each once, in order."""
    if not first:
        return iter(second)
    if not second or first == second:
        return iter(first)
    return iter(dict.fromkeys((*first, *second)))
