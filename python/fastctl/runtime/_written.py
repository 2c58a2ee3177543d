"""The objects a controller's reconciles wrote, followed through its caches' events until
the caches show those writes (for `fastctl.runtime._read_your_writes`).

resourceVersions are compared for equality only: the API conventions made them opaque, and
only servers since Kubernetes 1.35 promise an order (KEP-5504), which a controller may not
rely on against an older or an aggregated API server. Instead the events of an object are
followed from the moment a write to it starts (its echo may come before its answer), and a
write is shown, caught up, once its cache has applied

- an event with exactly the version the write was answered with (one object's events come
  in order: anything after it is later), or
- the object's deletion (by its UID: nothing a cache shows after that is older than the
  write), which is also what a DELETE waits for; a DELETE that finalizers hold up is shown
  at the version it was answered with (the object marked for deletion), or
- for a create, any event of the new UID (none can be older than the create).

A write that changes nothing is answered with the object as it is, a version the cache may
have shown before the write started: so following an object starts from the version its
cache holds then.

A create by ``generateName`` has no name until its answer: the UIDs its kind's events show
while it is in flight are kept instead, so an echo that beat the answer still counts.

The items of a (re)list are applied by the store only when the list is complete, so they
count only at its ``INIT_DONE``. A write whose exact version a relist skipped (the object
changed again meanwhile, and the watch's history was compacted) is never shown: the hold
that waits for it runs to its bound.

Memory: an object is followed while a write to it is in flight or a fence names it, and
forgotten with the last of those; a few versions per object.

What is followed, the fences and every event's check are kept in the extension
(`fastctl._core.Written`): each change passes there three times (its write, its echo, the
next start), which in Python cost some eighty calls a change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastctl._core import Written, Wrote
from fastctl.kube._namespaces import NamespaceScope, covers
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._watcher import EventKind, ListFrame, WatchEvent
from fastctl.types import ObjectRef

__all__ = ["CacheScope", "WrittenObjects", "Wrote"]

Caches = Mapping[tuple[str, str], Mapping[ObjectRef, Mapping[str, Any]]]
"""The caches a reconcile reads, by the (group, kind) of their objects."""


@dataclass(frozen=True, slots=True)
class CacheScope:
    """What one cache watches, as far as a write's outcome can tell: its namespace (or
    set), and its label selector. A write outside it never shows in the cache: it is not
    waited for."""

    namespace: NamespaceScope = None
    labels: LabelSelector | None = None


class WrittenObjects:
    """The followed objects of one controller run, and its fences (`state`, the extension's
    `Written`, which `CacheFence` drives): of the kinds in `caches`, in `namespace`
    (``None``: all), or in each kind's own `scopes` entry. `on_caught_up(keys)` hears, after
    an event, the held keys whose fences it caught up (to be woken). `max_wait`: the bound
    of a fence, in seconds after the reconcile that wrote it ended.

    What is decided here, in Python: whether a write is in a followed cache's scope, and
    what its answer says (the object's name, UID and version; a DELETE's Status; a finalizer
    keeping a deleted object). What is kept, and every event's check, is the extension's."""

    def __init__(
        self,
        caches: Caches,
        namespace: NamespaceScope,
        on_caught_up: Callable[[list[str]], None],
        scopes: Mapping[tuple[str, str], CacheScope] | None = None,
        *,
        max_wait: float = 5.0,
    ) -> None:
        scopes = scopes or {}
        self.kinds = frozenset(caches)
        """The (group, kind) of the objects followed."""
        self.state = Written(max_wait)
        # Per kind, worked out once rather than on every write: its index in `state`, its
        # namespace scope, its label selector (only where there is one), and how its cache
        # is asked for the version it shows.
        kinds = list(caches)
        self._index: dict[tuple[str, str], int] = {kind: i for i, kind in enumerate(kinds)}
        self._spaces: list[NamespaceScope] = [
            namespace if kind not in scopes else scopes[kind].namespace for kind in kinds
        ]
        self._selectors: dict[int, LabelSelector] = {
            i: scopes[kind].labels  # type: ignore[misc]
            for i, kind in enumerate(kinds)
            if kind in scopes and scopes[kind].labels is not None
        }
        self._shown_in: list[_VersionOf] = [_version_reader(caches[kind]) for kind in kinds]
        self._on_caught_up = on_caught_up

    def __len__(self) -> int:
        """How many objects are followed (for tests: bounded by the recent writes)."""
        return self.state.followed

    # -- the writes -------------------------------------------------------------------------

    def follow(self, resource: ResolvedResource, namespace: str | None, name: str) -> None:
        """A write begins: follow its object's events from now."""
        kind = self._index.get((resource.group, resource.kind))
        if kind is None or not covers(self._spaces[kind], namespace):
            return  # out of scope
        if self.state.follow(kind, namespace or "", name):
            shown = self._shown_in[kind](name, namespace or None)
            if shown is not None:  # what the cache shows already (a no-op's answer)
                self.state.seed(kind, namespace or "", name, shown[0] or "", shown[1] or "")

    def answered(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        *,
        created: bool,
        deleted: bool,
    ) -> Wrote | None:
        """A write ended: what a cache must show of it (``None``: nothing, it failed or is
        out of scope). A record keeps its object followed until its fence is over."""
        kind = self._index.get((resource.group, resource.kind))
        if kind is None or not covers(self._spaces[kind], namespace):
            return None  # out of scope
        meta = answer.get("metadata") if answer is not None else None
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = None
        target = name or (str(meta.get("name") or "") if meta is not None else "")
        uid = str((meta.get("uid") if meta is not None else None) or "")
        if not uid and answer is not None:
            uid = _uid_of(answer)  # a delete's Status names it in its details
        # Not recorded: failed (nothing changed), not an object, or never cached.
        recorded = answer is not None and bool(target) and bool(uid or deleted)
        if recorded:
            selector = self._selectors.get(kind)
            if selector is not None and not _labels_match(selector, answer):
                recorded = False
        version = None
        if recorded and not (deleted and not _still_there(answer)):  # type: ignore[arg-type]
            given = meta.get("resourceVersion") if meta is not None else None
            version = str(given) if given else None  # as `version_of`
        return self.state.answered(
            kind, namespace or "", name, target, uid, version, recorded, created, deleted
        )

    def shown(self, w: Wrote) -> bool:
        """Whether the cache has applied `w` (see the module docstring)."""
        return self.state.shown(w)

    # -- the caches' events -----------------------------------------------------------------

    def saw(self, kind: tuple[str, str]) -> Callable[[WatchEvent], None]:
        """What a cache of `kind` ((group, kind)) calls with each event it applied: one call
        into the extension, which reads a decoded frame's fields itself. A closure per kind,
        as every event of a read cache passes here."""
        index = self._index[kind]
        state = self.state
        saw_item, saw_names, list_frame = state.saw_item, state.saw, state.list_frame
        delete, init_apply, init_done = EventKind.DELETE, EventKind.INIT_APPLY, EventKind.INIT_DONE
        on_caught_up = self._on_caught_up

        def saw(event: WatchEvent) -> None:
            if isinstance(event, ListFrame):
                keys = list_frame(index, event.kind is init_done, event.namespace)
            else:
                # How it counts: deleted (1), a list's item (2, counted at the list's end),
                # applied (0).
                k = event.kind
                seen = 1 if k is delete else 2 if k is init_apply else 0
                item = event._item
                if item is not None:  # a decoded frame: its fields read by the extension
                    keys = saw_item(index, item, seen)
                else:
                    namespace, name, uid, version = event._names()
                    keys = saw_names(index, namespace, name, uid, version, seen)
            if keys is not None:
                on_caught_up(keys)

        return saw


_VersionOf = Callable[[str, str | None], tuple[str | None, str | None] | None]
"""Asks a cache for the ``(uid, resourceVersion)`` of the object it holds by name and
namespace (None: none)."""


def _version_reader(cache: Mapping[ObjectRef, Any]) -> _VersionOf:
    """How to ask `cache` what it shows of an object: a `Store` answers without building
    a reference or parsing the object; any other mapping is read."""
    version = getattr(cache, "_version_of", None)
    if version is not None:
        return version  # type: ignore[no-any-return]

    def read(name: str, namespace: str | None) -> tuple[str | None, str | None] | None:
        cached = cache.get(ObjectRef._trusted(name, namespace))
        if cached is None:
            return None
        meta = cached.get("metadata") or {}
        return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")

    return read


def _labels_match(selector: LabelSelector, answer: Mapping[str, Any] | None) -> bool:
    """Whether the object a write answered with is inside its cache's label selector
    (an answer without labels, such as a delete's Status, is given the benefit)."""
    if answer is None:
        return True
    meta = answer.get("metadata")
    if not isinstance(meta, Mapping) or answer.get("kind") == "Status":
        return True
    return selector.matches(meta.get("labels"))


def _uid_of(answer: Mapping[str, Any]) -> str:
    """The UID of a write's answer: the object's, or a delete's Status details'."""
    meta = answer.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    if not uid:
        details = answer.get("details")
        uid = details.get("uid") if isinstance(details, Mapping) else None
    return str(uid or "")


def _still_there(answer: Mapping[str, Any]) -> bool:
    """A DELETE's answer is the object, still present: finalizers keep it (marked for
    deletion) until their controllers let it go."""
    meta = answer.get("metadata")
    if not isinstance(meta, Mapping):
        return False
    return bool(meta.get("deletionTimestamp")) and bool(meta.get("finalizers"))
