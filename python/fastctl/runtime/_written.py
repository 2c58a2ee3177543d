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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from fastctl.kube._namespaces import NamespaceScope, covers
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._watcher import EventKind, ListFrame, WatchEvent
from fastctl.types import ObjectRef

__all__ = ["CacheScope", "WrittenObjects", "Wrote"]

_SEEN = 16
"""Versions remembered per followed object: the writes of a few reconciles and the other
writers' changes between them."""

Key = tuple[str, str, str, str]  # group, kind, namespace ("" if none), name


Wrote = tuple[str, str, str, str, str, str | None, bool, bool]
"""One write a reconcile made: ``(group, kind, namespace, name, uid, version, created,
deleted)``: to the object its first four name (its `Key`), answered with `uid` and
`version`; `created`: it made the object; `deleted`: a DELETE (shown once gone or, still
there, at `version`).

A flat tuple, not a class: one is made per write without a Python call, and as it holds
only strings and flags the garbage collector stops tracking it at its first collection
(about a thousand are alive at once in a burst of writes)."""


class _Target:
    """A followed object: what its cache's events showed since it is followed.

    About one is alive per write in flight or fenced, so it is kept small: its UID one
    string (another UID, of the object deleted and created again, goes to `uids`), its
    versions a tuple (which the garbage collector stops tracking)."""

    __slots__ = ("deleted", "refs", "uid", "uids", "versions", "waiters")

    def __init__(self) -> None:
        self.refs = 0  # writes in flight, and recorded writes not yet released
        self.versions: tuple[str, ...] = ()  # versions applied, the newest last
        self.uid: str | None = None  # the first UID an event showed present
        # The three below are rarely needed: the shared empty set until they are.
        self.uids: AbstractSet[str] = _EMPTY  # other UIDs an event showed present
        self.deleted: AbstractSet[str] = _EMPTY  # UIDs an event showed deleted ("": some)
        self.waiters: AbstractSet[str] = _EMPTY  # keys whose fences name this object

    def present(self, uid: str, version: str) -> None:
        """An event showed the object present, with `uid`, at `version`."""
        if uid != self.uid:
            self.add_uid(uid)
        versions = self.versions
        self.versions = (versions[1:] if len(versions) >= _SEEN else versions) + (version,)

    def add_uid(self, uid: str) -> None:
        """`uid` was shown present."""
        if self.uid is None:
            self.uid = uid
        elif uid != self.uid and uid not in self.uids:
            self.uids = {*self.uids, uid}

    def has_uid(self, uid: str) -> bool:
        """Whether `uid` was shown present."""
        return uid == self.uid or uid in self.uids


_EMPTY: AbstractSet[str] = frozenset()


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
    """The followed objects of one controller run: of the kinds in `caches`, in `namespace`
    (``None``: all), or in each kind's own `scopes` entry. `on_shown(keys)` hears, after an
    event of a followed object, the keys whose fences name it."""

    def __init__(
        self,
        caches: Caches,
        namespace: NamespaceScope,
        on_shown: Callable[[AbstractSet[str]], None],
        scopes: Mapping[tuple[str, str], CacheScope] | None = None,
    ) -> None:
        scopes = scopes or {}
        self.kinds = frozenset(caches)
        """The (group, kind) of the objects followed."""
        # Per kind, worked out once rather than on every write: its namespace scope, its
        # label selector (only where there is one), and how its cache is asked for the
        # version it shows.
        self._spaces: dict[tuple[str, str], NamespaceScope] = {
            kind: namespace if kind not in scopes else scopes[kind].namespace for kind in caches
        }
        self._selectors: dict[tuple[str, str], LabelSelector] = {
            kind: scope.labels
            for kind, scope in scopes.items()
            if kind in caches and scope.labels is not None
        }
        self._shown_in: dict[tuple[str, str], _VersionOf] = {
            kind: _version_reader(cache) for kind, cache in caches.items()
        }
        self._on_shown = on_shown
        self._targets: dict[Key, _Target] = {}
        self._creating: dict[tuple[str, str], int] = {}  # unnamed creates in flight per kind
        self._created: dict[tuple[str, str], set[str]] = {}  # UIDs shown meanwhile
        self._listing: dict[tuple[str, str], list[tuple[_Target, bool, str, str, str]]] = {}

    def __len__(self) -> int:
        """How many objects are followed (for tests: bounded by the recent writes)."""
        return len(self._targets)

    def _in_scope(self, kind: tuple[str, str], namespace: str | None) -> bool:
        space = self._spaces.get(kind, _OUT)
        return space is not _OUT and covers(space, namespace)

    # -- the writes -------------------------------------------------------------------------

    def follow(self, resource: ResolvedResource, namespace: str | None, name: str) -> None:
        """A write begins: follow its object's events from now."""
        kind = (resource.group, resource.kind)
        if not self._in_scope(kind, namespace):
            return  # out of scope
        if not name:
            self._creating[kind] = self._creating.get(kind, 0) + 1
            return
        key = (resource.group, resource.kind, namespace or "", name)
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = _Target()
            shown = self._shown_in[kind](name, namespace or None)
            if shown is not None:  # what the cache shows already (a no-op's answer)
                target.uid = shown[0] or ""
                target.versions = (shown[1] or "",)
        target.refs += 1

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
        out of scope). A record keeps its object followed until `release`."""
        kind = (resource.group, resource.kind)
        if not self._in_scope(kind, namespace):
            return None  # out of scope
        shown: AbstractSet[str] = _EMPTY
        if not name:
            left = self._creating.get(kind, 1) - 1
            shown = self._created.get(kind, _EMPTY)
            if left > 0:
                self._creating[kind] = left
            else:
                self._creating.pop(kind, None)
                self._created.pop(kind, None)
        meta = answer.get("metadata") if answer is not None else None
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = None
        target_name = name or (str(meta.get("name") or "") if meta is not None else "")
        key = (resource.group, resource.kind, namespace or "", target_name)
        target = self._targets.get(key)
        if name and target is not None:
            target.refs -= 1  # the write's own reference; a record takes one again
        uid = str((meta.get("uid") if meta is not None else None) or "")
        if not uid and answer is not None:
            uid = _uid_of(answer)  # a delete's Status names it in its details
        if answer is None or not target_name or not (uid or deleted):
            self._drop_if_unused(key, target)
            return None  # failed (nothing changed), or not an object
        selector = self._selectors.get(kind)
        if selector is not None and not _labels_match(selector, answer):
            self._drop_if_unused(key, target)
            return None  # never cached
        if target is None:
            target = self._targets[key] = _Target()
        if uid and uid in shown:
            target.add_uid(uid)  # its create was shown before the answer came
        if deleted and not _still_there(answer):
            version = None
        else:
            given = meta.get("resourceVersion") if meta is not None else None
            version = str(given) if given else None  # as `version_of`
        target.refs += 1
        return (*key, uid, version, created, deleted)

    def attach(self, key: str, wrote: Iterable[Wrote]) -> None:
        """`key`'s fence names these writes, and `key` is held: tell `on_shown` about their
        events (a fence whose key is not held needs no waking)."""
        targets = self._targets
        for w in wrote:
            target = targets[w[:4]]
            if target.waiters:
                assert isinstance(target.waiters, set)
                target.waiters.add(key)
            else:
                target.waiters = {key}

    def release(self, key: str, wrote: Iterable[Wrote]) -> None:
        """`key`'s fence is over: its writes no longer keep their objects followed."""
        targets = self._targets
        for w in wrote:
            target = targets.get(w[:4])
            if target is None:
                continue
            target.refs -= 1
            if target.waiters and key in target.waiters:
                assert isinstance(target.waiters, set)
                target.waiters.discard(key)
            if target.refs <= 0:
                del targets[w[:4]]

    def _drop_if_unused(self, key: Key, target: _Target | None) -> None:
        if target is not None and target.refs <= 0 and self._targets.get(key) is target:
            del self._targets[key]

    def shown(self, w: Wrote) -> bool:
        """Whether the cache has applied `w` (see the module docstring)."""
        group, kind, namespace, name, uid, version, created, deleted = w
        target = self._targets[group, kind, namespace, name]
        if uid and target.deleted and uid in target.deleted:
            return True
        if deleted:
            return (not uid and "" in target.deleted) or (
                version is not None and version in target.versions
            )
        if created and target.has_uid(uid):
            return True
        return version is not None and version in target.versions

    # -- the caches' events -----------------------------------------------------------------

    def saw(self, kind: tuple[str, str]) -> Callable[[WatchEvent], None]:
        """What a cache of `kind` ((group, kind)) calls with each event it applied: a few
        lookups per event while some object is followed, one while none is. A closure per
        kind, as every event of a read cache passes here."""
        targets, creating, created, listing = (
            self._targets,
            self._creating,
            self._created,
            self._listing,
        )
        group, name_of_kind = kind
        apply, listing_done = self._apply, self._listing_done
        delete, init_apply, init_done = EventKind.DELETE, EventKind.INIT_APPLY, EventKind.INIT_DONE
        on_shown = self._on_shown

        def saw(event: WatchEvent) -> None:
            if not targets and not creating:
                return
            if isinstance(event, ListFrame):
                if event.namespace is not None:  # one namespace of a set: its items only
                    listing_done(kind, event)
                    return
                listed = listing.pop(kind, None)
                if event.kind is init_done and listed:  # the store swapped it in now
                    for target, gone, uid, version, _ in listed:
                        apply(target, gone, uid, version)
                return
            item = event._item
            if item is not None:  # a decoded frame: only what is needed, from it
                namespace = item.namespace or ""
                found = targets.get((group, name_of_kind, namespace, item.name))
                if found is None and not creating:
                    return
                uid, version = item.uid or "", item.resource_version or ""
            else:
                namespace, name, uid, version = event._names()
                found = targets.get((group, name_of_kind, namespace, name))
            gone = event.kind is delete
            if creating and not gone and kind in creating and uid:
                created.setdefault(kind, set()).add(uid)
            if found is None:
                return
            if event.kind is init_apply:  # applied when the list is complete
                listing.setdefault(kind, []).append((found, False, uid, version, str(namespace)))
                return
            if gone:
                apply(found, gone, uid, version)
                return
            # `_apply` inline: an update of a followed object is every echo of a write.
            if uid != found.uid:
                found.add_uid(uid)
            versions = found.versions
            found.versions = (versions[1:] if len(versions) >= _SEEN else versions) + (version,)
            if found.waiters:
                on_shown(found.waiters)

        return saw

    def _listing_done(self, kind: tuple[str, str], frame: ListFrame) -> None:
        """A frame of one namespace's list: at its ``INIT`` its earlier items are dropped,
        at its ``INIT_DONE`` the store swapped them in, so they count now."""
        listed = self._listing.get(kind)
        if not listed:
            return
        ns = frame.namespace
        mine = [item for item in listed if item[4] == ns]
        self._listing[kind] = [item for item in listed if item[4] != ns]
        if frame.kind is EventKind.INIT_DONE:
            for target, gone, uid, version, _ in mine:
                self._apply(target, gone, uid, version)

    def _apply(self, target: _Target, gone: bool, uid: str, version: str) -> None:
        if gone:
            target.deleted = {*target.deleted, uid, ""}
        else:
            target.present(uid, version)
        if target.waiters:
            self._on_shown(target.waiters)


_OUT: Any = object()
"""A kind no cache of the run holds (`WrittenObjects._spaces`)."""

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
