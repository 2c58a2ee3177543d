"""Transforms: what a watch keeps of each object before anything caches it.

A cache holds every object of its scope for as long as the process runs, and most of each
object is never read: ``metadata.managedFields`` (often half an object), the
``kubectl.kubernetes.io/last-applied-configuration`` annotation (a second copy of the whole
object as kubectl last applied it), and the fields a controller does not look at.
`WatchConfig.transform` (and the `transform` of `owns`/`watches`) is a function
``(obj) -> obj`` the watcher applies to every object (list items, watch events, deletions)
before it is yielded, so the store, the event
filters, the indexes and the own-write checks all see the object as kept, and the memory
is never held at all.

The watcher restores the object's identity after the transform (``apiVersion``, ``kind``,
and ``metadata.name``, ``namespace``, ``uid``, ``resourceVersion``): the store keys
objects by name and namespace, and own-write echoes and read-your-writes compare UIDs and
resourceVersions, so a transform cannot break those by dropping them. What else the
controller reads (labels for `Store.with_label`, ``ownerReferences`` for `owns` and
`RelatedCache.owned_by`, whatever an event filter or mapper compares) the transform has to
keep; `keep_paths` always keeps the whole ``metadata`` for that reason.

The built-ins are values (frozen and comparable), so two controllers that watch a resource
with equal transforms still share one watch in a Manager; a function of your own shares
only with uses that pass the same function object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "LAST_APPLIED",
    "Chain",
    "DropAnnotations",
    "DropManagedFields",
    "KeepPaths",
    "Transform",
    "apply_transform",
    "chain_transforms",
    "drop_annotations",
    "drop_last_applied",
    "drop_managed_fields",
    "keep_paths",
]

Obj = dict[str, Any]
Transform: TypeAlias = Callable[[Obj], Obj]
"""``(obj) -> obj``: what to keep of one object (it may change `obj` in place and return
it, or return a new dict)."""

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation ``kubectl apply`` writes: the whole object as last applied, again."""

_IDENTITY_META = ("name", "namespace", "uid", "resourceVersion")


@dataclass(frozen=True, slots=True)
class DropManagedFields:
    """Drops ``metadata.managedFields`` (server-side apply's field ownership: reconcilers
    rarely read it, and applying does not need it)."""

    def __call__(self, obj: Obj) -> Obj:
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        return obj


@dataclass(frozen=True, slots=True)
class DropAnnotations:
    """Drops the annotations named in `keys` (all of them when `keys` is empty); an object
    left with none loses its ``annotations`` map too."""

    keys: tuple[str, ...] = ()

    def __call__(self, obj: Obj) -> Obj:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return obj
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict):
            return obj
        if not self.keys:
            del meta["annotations"]
            return obj
        for key in self.keys:
            annotations.pop(key, None)
        if not annotations:
            del meta["annotations"]
        return obj


@dataclass(frozen=True, slots=True)
class KeepPaths:
    """Keeps ``apiVersion``, ``kind``, the whole ``metadata`` and the dotted `paths`
    (``spec.replicas``, ``status.conditions``, ``data``); drops the rest. A path that the
    object does not have is skipped; a path through a list keeps the whole list."""

    paths: tuple[str, ...]

    def __post_init__(self) -> None:
        for path in self.paths:
            if not isinstance(path, str) or not path or "" in path.split("."):
                raise ValueError(f"keep_paths: {path!r} is not a dotted path like 'spec.replicas'")

    def __call__(self, obj: Obj) -> Obj:
        kept: Obj = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
        for path in self.paths:
            _copy_path(obj, kept, path.split("."))
        return kept


@dataclass(frozen=True, slots=True)
class Chain:
    """Applies `transforms` in order."""

    transforms: tuple[Transform, ...]

    def __call__(self, obj: Obj) -> Obj:
        for transform in self.transforms:
            obj = transform(obj)
        return obj


def _copy_path(source: Mapping[str, Any], target: Obj, parts: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    if head not in source:
        return
    value = source[head]
    if not rest or not isinstance(value, Mapping):
        target[head] = value
        return
    inner = target.get(head)
    if not isinstance(inner, dict):
        inner = target[head] = {}
    _copy_path(value, inner, rest)


drop_managed_fields = DropManagedFields()
"""Drops ``metadata.managedFields``."""

drop_last_applied = DropAnnotations((LAST_APPLIED,))
"""Drops kubectl's last-applied-configuration annotation."""


def drop_annotations(*keys: str) -> DropAnnotations:
    """Drops the annotations `keys` (every annotation when none is named)."""
    return DropAnnotations(tuple(keys))


def keep_paths(*paths: str) -> KeepPaths:
    """Keeps ``apiVersion``, ``kind``, ``metadata`` and `paths` (see `KeepPaths`)."""
    return KeepPaths(tuple(paths))


def chain_transforms(*transforms: Transform) -> Chain:
    """`transforms` applied in order (a value: equal chains of equal transforms compare
    equal)."""
    for transform in transforms:
        if not callable(transform):
            raise TypeError(f"chain_transforms: {transform!r} is not callable")
    return Chain(tuple(transforms))


def apply_transform(transform: Transform, obj: Obj) -> Obj:
    """``transform(obj)`` with the identity of `obj` put back (see the module docstring):
    ``apiVersion``, ``kind``, and the metadata's name, namespace, uid and resourceVersion,
    taken before the call (a transform may change `obj` in place). A transform that
    returns no dict is a bug, raised as `TypeError`."""
    meta = obj.get("metadata")
    top = [(k, obj[k]) for k in ("apiVersion", "kind") if k in obj]
    ident = [(k, meta[k]) for k in _IDENTITY_META if k in meta] if isinstance(meta, Mapping) else []
    after = transform(obj)
    if not isinstance(after, dict):
        raise TypeError(f"a transform must return a dict, got {type(after).__name__}")
    for top_key, value in top:
        after.setdefault(top_key, value)
    if ident:
        kept = after.get("metadata")
        if not isinstance(kept, dict):
            kept = after["metadata"] = {}
        for key, value in ident:
            kept.setdefault(key, value)
    return after
