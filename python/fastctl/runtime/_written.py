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
next start), which in Python cost some eighty calls a change. A write's record stays there
too: a reconcile's writes are kept under a number it gets at its first write (its *token*),
which its fence names, so no object is made per write (one per write, a thousand alive in a
burst, made the collector run more often).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastctl._core import Written
from fastctl.kube._namespaces import NamespaceScope
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, WatchEvent
from fastctl.types import ObjectRef

__all__ = ["CacheScope", "WrittenObjects"]

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
        # Per kind, worked out once rather than on every write (the extension keeps it,
        # and reads each write's resource, scope and answer itself): its index in
        # `state`, its namespace scope, its cache's reader, its label selector (if any).
        self._index: dict[tuple[str, str], int] = {}
        for kind, cache in caches.items():
            scope = scopes.get(kind, CacheScope(namespace))
            labels = scope.labels
            store = isinstance(cache, Store)  # its table is read in the extension
            self._index[kind] = self.state.add_kind(
                kind[0],
                kind[1],
                scope.namespace,
                cache if store else _version_reader(cache),
                None if labels is None else functools.partial(_labels_match, labels),
                store=store,
            )
        self._on_caught_up = on_caught_up

    def __len__(self) -> int:
        """How many objects are followed (for tests: bounded by the recent writes)."""
        return self.state.followed

    # -- the writes -------------------------------------------------------------------------

    def follow(self, resource: ResolvedResource, namespace: str | None, name: str) -> None:
        """A write begins: follow its object's events from now (seeded, if it was not
        followed, with what its cache shows already: a no-op's answer is that version).
        Nothing if no followed cache holds it (another kind, namespace)."""
        self.state.follow(resource, namespace, name)

    def answered(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        *,
        created: bool,
        deleted: bool,
        token: int = 0,
    ) -> int | None:
        """A write ended: what a cache must show of it is kept under the writing
        reconcile's `token` (0: none yet), which its fence names. Returns the token (a new
        one at the reconcile's first recorded write; ``None`` while nothing is: the write
        failed, or is out of scope). A record keeps its object followed until its fence
        is over. The answer's name, UID and version are read by the extension."""
        token = self.state.answered(token, resource, namespace, name, answer, created, deleted)
        return token or None

    def shown(self, token: int) -> bool:
        """Whether the cache has applied every write kept under `token` (see the module
        docstring)."""
        return self.state.shown(token)

    # -- the caches' events -----------------------------------------------------------------

    def saw(self, kind: tuple[str, str]) -> Callable[[WatchEvent], None]:
        """What a cache of `kind` ((group, kind)) calls with each event it applied: the
        extension's hook, one call per event (every event of a read cache passes here),
        which reads a decoded frame's fields itself and returns at once while nothing is
        followed. An event that catches held keys up calls `on_caught_up` with them."""
        return self.state.hook(
            self._index[kind],
            ListFrame,
            EventKind.DELETE,
            EventKind.INIT_APPLY,
            EventKind.INIT_DONE,
            self._on_caught_up,
        )


_VersionOf = Callable[[str, str | None], tuple[str | None, str | None] | None]
"""Asks a cache for the ``(uid, resourceVersion)`` of the object it holds by name and
namespace (None: none)."""


def _version_reader(cache: Mapping[ObjectRef, Any]) -> _VersionOf:
    """How to ask `cache`, a mapping other than a `Store` (whose table the extension reads
    itself), what it shows of an object."""

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
