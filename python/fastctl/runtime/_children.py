"""`RelatedCache`: a reconcile reads its children from the watch cache, not the API server.

A controller watches the resources it `owns` and `watches` anyway, to be triggered by
their changes; with ``cache=True`` it also keeps their objects, in a `Store`, and the
reconcile reads them from there (``ctx.configmaps.owned_by(obj)``) with no request. This is
controller-runtime's cached client and kube-rs's reflector store, one per related resource.

Two indexes answer the questions a reconcile asks:

- **by owner**: the `Store`'s index by *controller* owner UID (the ``ownerReference`` with
  ``controller: true``), the same reference that makes `owns` trigger the owner. A UID
  rather than a name, so a child of a deleted owner is never found under a new owner of
  the same name; other (non-controller) owner references are not indexed: they trigger
  nothing either.
- **by mapped target**: for `watches`, the objects the mapper last mapped to a primary
  object (the reverse of `RelatedTriggers`' memory), so the reconcile of a target finds
  the objects that point at it.

The cache lags the reconcile's own writes, as controller-runtime's does: an object the
reconcile just created or changed shows up once its watch event arrives (milliseconds,
usually), and that event triggers the owner again, so the next reconcile sees it. A
reconcile that must act on its own write uses the object the write returned, and a
reconcile that finds a child missing from the cache creates it with server-side apply,
which is idempotent (no "already exists" error when the cache was merely late).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.kube._resource import Resource
from fastctl.kube._store import Store
from fastctl.runtime._triggers import RelatedTriggers
from fastctl.types import ObjectRef

__all__ = ["RelatedCache"]

Obj = dict[str, Any]


class RelatedCache:
    """The cached objects of one related resource (``owns``/``watches`` with
    ``cache=True``); read-only, from inside a reconcile or anywhere on the event loop.

    Each read returns new objects (the `Store` parses each object it is asked for from
    the bytes it keeps): a reconcile may change what it read without changing the cache.
    With ``metadata_only=True`` the objects carry ``apiVersion``, ``kind`` and
    ``metadata`` alone; with a transform, what it kept.
    """

    __slots__ = ("_index", "metadata_only", "resource", "store")

    def __init__(self, resource: Resource, *, metadata_only: bool = False) -> None:
        self.resource = resource
        self.metadata_only = metadata_only
        self.store = Store()
        """The objects; replaced by the shared store when a Manager shares the watch."""
        self._index: RelatedTriggers | None = None

    def _bind(self, triggers: RelatedTriggers) -> None:
        """Take the mapped-target index from the relation's triggers (`mapped_to`)."""
        self._index = triggers

    @property
    def is_ready(self) -> bool:
        """True once the first complete list is in (the controller reconciles only then)."""
        return self.store.is_ready

    def __len__(self) -> int:
        return len(self.store)

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        """The cached object `name` (in `namespace` for a namespaced resource), or None."""
        return self.store.get(ObjectRef(name, namespace))

    def owned_by(self, owner: Any) -> list[Obj]:
        """The cached objects whose controller owner reference names `owner`: a parsed
        object, a `CustomResource`, or its UID as a string."""
        return self.store.owned_by(_uid_of(owner))

    def mapped_to(self, target: ObjectRef | Mapping[str, Any]) -> list[Obj]:
        """The cached objects the `watches` mapper last mapped to `target` (a primary
        object or its `ObjectRef`); for `owns`, the controlled children of that name.

        Which objects: the triggers' memory; their state: the cache, which may be ahead of
        the triggers (up to 65 events with ``ignore_own_writes``, more behind a shared
        watch's buffer): an object moved away may show in its new state, one moved here
        may be missing, and the event on its way triggers `target` (docs/authoring.md,
        "Cached children")."""
        if self._index is None:
            raise RuntimeError(f"the cache of {self.resource} is not running yet")
        ref = target if isinstance(target, ObjectRef) else ObjectRef.from_object(target)
        get = self.store.get
        return [obj for r in self._index.sources_of(ref) if (obj := get(r)) is not None]

    def __repr__(self) -> str:
        return f"<RelatedCache {self.resource}: {len(self.store)} objects>"


def _uid_of(owner: Any) -> str:
    if isinstance(owner, str):
        if not owner:
            raise ValueError("owned_by: the owner UID is empty")
        return owner
    if isinstance(owner, Mapping):
        uid = (owner.get("metadata") or {}).get("uid")
    else:
        uid = getattr(getattr(owner, "metadata", None), "uid", None)
    if not isinstance(uid, str) or not uid:
        raise ValueError(
            f"owned_by: {type(owner).__name__} has no metadata.uid (pass an object read "
            "from the API server, or its UID)"
        )
    return uid
