"""Event filters: which changes of a watched object are worth a reconcile.

Every write to an object comes back as a watch event, including the writes that cannot
matter to the reconcile (a status the operator wrote itself, a label someone else added).
An event filter is a predicate ``(old, new) -> bool`` on the object before and after the
change, applied per watch (the primary resource, each ``owns`` and ``watches`` relation):
an event for which it returns ``False`` triggers nothing. Filters are opt-in; without one
every event triggers, as before.

What the predicate never gets to decide, so that a filter cannot lose a trigger:

- The first event of an object (created, or first seen by this watch) passes.
- A relist passes an object the predicate says changed since it was last seen (an object
  the relist shows for the first time passes); an unchanged one is held back, since the
  reconcile of its last passing change has seen that state already.
- A delete passes (and the object's state is dropped).
- A predicate that raises, or returns something other than a ``bool``, passes the event;
  the problem is logged once per object and counted (``fastctl_event_filter_errors_total``).
- Requeues (``Action.requeue``), retries and ``reconcile_all_on`` resyncs are not events.

The state is the last object seen per UID (a reference to the dict the watcher parsed,
shared with the cache when there is one), dropped when the object goes: on its delete, or
when a relist no longer shows it. The built-in predicates, and `any_of`/`all_of` of them,
read only ``metadata``; for them (and for a filter that only holds back own writes) the
state is the object's ``metadata`` dict alone, so a watch without a cache does not keep
every object's body alive through its filter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastctl.kube._watcher import EventKind, WatchEvent
from fastctl.runtime._own_writes import OwnWrites, uid_of
from fastctl.types import ObjectRef

__all__ = [
    "EventFilter",
    "Predicate",
    "all_of",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
]

log = logging.getLogger("fastctl.controller")

Predicate = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
"""``(old, new) -> bool``: does the change from `old` to `new` need a reconcile?"""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


_METADATA_ONLY = "__fastctl_metadata_only__"
"""Set on a predicate that reads nothing but ``metadata`` (the filter then keeps only that)."""


def _reads_metadata_only(predicate: Predicate) -> Predicate:
    setattr(predicate, _METADATA_ONLY, True)
    return predicate


def reads_metadata_only(predicate: Predicate | None) -> bool:
    """Whether `predicate` (``None``: no predicate) needs nothing of an old object but its
    ``metadata``."""
    return predicate is None or getattr(predicate, _METADATA_ONLY, False) is True


@_reads_metadata_only
def generation_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """``metadata.generation`` changed: the spec changed, not the status or the metadata
    (the API server bumps it for spec writes only, and when a deletion starts). An object
    without a generation (a ConfigMap, a resource without a status subresource) always
    passes: nothing says its change is unimportant. A deletion that starts passes too."""
    new_meta = _meta(new)
    generation = new_meta.get("generation")
    if generation is None:
        return True
    old_meta = _meta(old)
    if generation != old_meta.get("generation"):
        return True
    return bool(new_meta.get("deletionTimestamp")) and not old_meta.get("deletionTimestamp")


@_reads_metadata_only
def labels_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """``metadata.labels`` changed (a missing map equals an empty one)."""
    return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})


@_reads_metadata_only
def annotations_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """``metadata.annotations`` changed (a missing map equals an empty one)."""
    return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})


def _name(predicate: object) -> str:
    return str(getattr(predicate, "__qualname__", None) or repr(predicate))


def _checked(predicates: tuple[Predicate, ...], combinator: str) -> tuple[Predicate, ...]:
    if not predicates:
        raise ValueError(f"{combinator}() needs at least one predicate")
    for predicate in predicates:
        if not callable(predicate):
            raise TypeError(
                f"{combinator}(): a predicate must be callable (old, new) -> bool, "
                f"got {type(predicate).__name__}"
            )
    return predicates


def _call(predicate: Predicate, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """`predicate`'s verdict, which must be a bool: a truthy list is more likely a bug (a
    filter returning the changed keys) than an intended "yes"."""
    verdict = predicate(old, new)
    if not isinstance(verdict, bool):
        raise TypeError(
            f"event filter {_name(predicate)} returned {type(verdict).__name__}, not bool"
        )
    return verdict


def _combined(
    predicates: tuple[Predicate, ...], combinator: str, verdict: Callable[[Iterable[bool]], bool]
) -> Predicate:
    checked = _checked(predicates, combinator)

    def combined(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return verdict(_call(p, old, new) for p in checked)

    combined.__qualname__ = f"{combinator}({', '.join(_name(p) for p in checked)})"
    if all(reads_metadata_only(p) for p in checked):
        _reads_metadata_only(combined)
    return combined


def any_of(*predicates: Predicate) -> Predicate:
    """Passes when at least one of `predicates` does (checked in order, lazily)."""
    return _combined(predicates, "any_of", any)


def all_of(*predicates: Predicate) -> Predicate:
    """Passes when every one of `predicates` does (checked in order, lazily)."""
    return _combined(predicates, "all_of", all)


def check_predicate(predicate: object, where: str) -> Predicate | None:
    """`predicate` if it is one (or ``None``); a clear `TypeError` naming `where` if not."""
    if predicate is not None and not callable(predicate):
        raise TypeError(
            f"{where}: event_filter must be callable (old, new) -> bool, "
            f"got {type(predicate).__name__}"
        )
    return predicate


class EventFilter:
    """The per-object state of one watch's filter, and its verdict on each event.

    `admits(event)` is called with every event of the watch, in order (lists included);
    for a (re)list, `take_listed()` after ``INIT_DONE`` says which listed objects passed.
    `own_writes` (optional) also holds back the echo of this controller's own writes.
    """

    __slots__ = (
        "_controller",
        "_kind",
        "_listings",
        "_on_error",
        "_own_writes",
        "_passing",
        "_predicate",
        "_reported",
        "_slim",
        "_state",
    )

    def __init__(
        self,
        predicate: Predicate | None,
        *,
        controller: str,
        kind: str,
        own_writes: OwnWrites | None = None,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self._predicate = predicate
        self._own_writes = own_writes
        self._controller = controller
        self._kind = kind
        self._on_error = on_error
        self._slim = reads_metadata_only(predicate)
        # per UID: the last object seen, or only its metadata when `_slim`
        self._state: dict[str, Mapping[str, Any]] = {}
        # the (re)lists in progress: the whole watch's (None), or one namespace's each
        self._listings: dict[str | None, dict[str, Mapping[str, Any]]] = {}
        self._passing: set[ObjectRef] = set()
        self._reported: set[str] = set()

    def __len__(self) -> int:
        """How many objects the filter remembers (for tests: it must not grow)."""
        return len(self._state) + len(self._reported)

    def take_listed(self, namespace: str | None = None) -> set[ObjectRef]:
        """The objects of the list just completed that passed (once: the set is released);
        of one `namespace`, after the list of a namespace of a set."""
        if namespace is None:
            passing, self._passing = self._passing, set()
            return passing
        passing = {ref for ref in self._passing if ref.namespace == namespace}
        self._passing -= passing
        return passing

    def admits(self, event: WatchEvent) -> bool:
        """Whether `event` may trigger (``INIT``/``INIT_DONE`` frame a list: see above)."""
        if event.kind is EventKind.INIT:
            ns = event.namespace
            if ns is None:
                self._listings = {None: {}}
                self._passing = set()
            else:
                self._listings[ns] = {}
                self._passing = {ref for ref in self._passing if ref.namespace != ns}
            return True
        if event.kind is EventKind.INIT_DONE:
            self._swap(event.namespace)
            return True
        obj = event.obj
        uid = uid_of(obj)
        if event.kind is EventKind.DELETE:
            self._forget(uid)
            return True
        if event.kind is EventKind.INIT_APPLY:
            passes = self._verdict(uid, self._state.get(uid), obj)
            self._listing_of(obj)[uid] = self._kept(obj)
            if passes:
                self._passing.add(ObjectRef.from_object(obj))
            return passes
        passes = self._verdict(uid, self._state.get(uid), obj)
        self._state[uid] = self._kept(obj)
        return passes

    def _kept(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """What the state keeps of `obj`: all of it, or its metadata when that suffices."""
        return _meta(obj) if self._slim else obj

    def _verdict(self, uid: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
        if self._own_writes is not None:
            old_meta = None if old is None else old if self._slim else _meta(old)
            previous = None if old_meta is None else old_meta.get("resourceVersion")
            if self._own_writes.is_echo(uid, new, None if previous is None else str(previous)):
                return False
        if old is None or self._predicate is None:
            return True
        if self._slim:
            old = {"metadata": old}
        try:
            return _call(self._predicate, old, new)
        except Exception as exc:
            self._report(uid, new, exc)
            return True

    def _report(self, uid: str, obj: Mapping[str, Any], exc: Exception) -> None:
        if self._on_error is not None:
            self._on_error()
        if uid in self._reported:
            return
        self._reported.add(uid)
        meta = _meta(obj)
        log.error(
            "controller %s: event filter on %s %s/%s failed: %r; the event passes "
            "(reported once per object)",
            self._controller,
            self._kind,
            meta.get("namespace") or "",
            meta.get("name"),
            exc,
        )

    def _swap(self, namespace: str | None) -> None:
        new = self._listings.pop(namespace, None)
        if new is None:
            new = {}
        if namespace is None:
            for uid in self._state.keys() - new.keys():
                self._forget(uid)
            self._state = dict(new)
            return
        # One namespace of a set: its objects are replaced, the others' kept.
        slim = self._slim
        for uid, kept in list(self._state.items()):
            meta = kept if slim else _meta(kept)
            if meta.get("namespace") == namespace and uid not in new:
                self._forget(uid)
        self._state.update(new)

    def _listing_of(self, obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """The list in progress `obj` belongs to: the whole watch's, or its namespace's (a
        missing INIT tolerated, as the store does)."""
        listings = self._listings
        listing = listings.get(None)
        if listing is None:
            ns = _meta(obj).get("namespace")
            listing = listings.get(ns) if listings else None
            if listing is None:
                listing = listings[None if not listings else ns] = {}
        return listing

    def _forget(self, uid: str) -> None:
        self._state.pop(uid, None)
        self._reported.discard(uid)
        if self._own_writes is not None:
            self._own_writes.forget(uid)
