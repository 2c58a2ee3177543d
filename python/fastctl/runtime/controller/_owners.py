"""Which primary object owns a related object: its controller owner reference.

`owns(R)` follows the one ``controller: true`` owner reference of the primary's kind and
group (the API server allows one at most); a sharded controller places an owned object by
that owner's UID. R may be the primary's own kind (a Widget that owns Widgets): a child is
then a primary object itself, and its owner is found the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.kube._resource import Resource
from fastctl.types import ObjectRef

__all__ = ["controller_uid", "owner_of"]


def owner_of(obj: Mapping[str, Any], primary: Resource, *, namespaced: bool) -> list[ObjectRef]:
    """The primary object that controls `obj` (its ``controller: true`` owner reference
    of the `primary` kind), in `obj`'s namespace when the primary is `namespaced`."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or ():
        if not owner.get("controller"):
            continue
        if owner.get("kind") != primary.kind:
            continue
        group = str(owner.get("apiVersion", "")).rpartition("/")[0]
        if group != primary.group:
            continue
        return [ObjectRef(owner["name"], meta.get("namespace") if namespaced else None)]
    return []


def controller_uid(obj: Mapping[str, Any], name: str) -> str | None:
    """The UID of `obj`'s controller owner named `name`."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller") and owner.get("name") == name and owner.get("uid"):
            return str(owner["uid"])
    return None
