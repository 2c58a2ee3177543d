"""Owner references: `owner_reference`, kube-rs' ``controller_owner_ref`` and
controller-runtime's ``SetControllerReference`` in one call.

A child an operator makes (a ConfigMap of a Widget) names its owner in
``metadata.ownerReferences``: the garbage collector deletes it with the owner, and a
controller that ``owns(...)`` the child's kind maps its changes back to the owner. The
reference must carry the owner's ``apiVersion``, ``kind``, ``name`` and ``uid`` exactly; a
reference with a wrong or missing uid is silently useless (the collector deletes the
child at once, or never). So the helper refuses an owner that lacks any of them instead of
writing a half reference: an object built locally has no uid until the API server created
it.

Only one reference per child may say ``controller: true``; ``blockOwnerDeletion`` makes a
foreground deletion of the owner wait for the child. The owner must be cluster-scoped or in
the child's namespace: the collector ignores references across namespaces.

Read back, the same reference maps a child to its owner: `owner_of` (what `owns(R)`
follows: the one ``controller: true`` reference of the primary's kind and group, the API
server allows one at most; R may be the primary's own kind, a Widget that owns Widgets)
and `controller_uid` (a sharded controller places an owned object by its owner's UID).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.kube._resource import Resource
from fastctl.types import ObjectRef

__all__ = ["controller_uid", "owner_of", "owner_reference"]


def owner_reference(
    owner: Any, *, controller: bool = True, block_owner_deletion: bool = True
) -> dict[str, Any]:
    """The ``ownerReferences`` entry that makes `owner` (a dict as the API server or the
    cache gives it, or a `CustomResource` instance) the controller of a child::

        "metadata": {"name": ..., "ownerReferences": [owner_reference(widget)]}

    `ValueError` naming what is missing when `owner` has no ``apiVersion``, ``kind``,
    ``metadata.name`` or ``metadata.uid``."""
    if isinstance(owner, Mapping):
        meta = owner.get("metadata") or {}
        fields = {
            "apiVersion": owner.get("apiVersion"),
            "kind": owner.get("kind"),
            "name": meta.get("name") if isinstance(meta, Mapping) else None,
            "uid": meta.get("uid") if isinstance(meta, Mapping) else None,
        }
    elif hasattr(owner, "metadata"):
        meta = owner.metadata
        fields = {
            "apiVersion": getattr(owner, "api_version", None),
            "kind": getattr(owner, "kind", None),
            "name": getattr(meta, "name", None),
            "uid": getattr(meta, "uid", None),
        }
    else:
        raise TypeError(f"an owner is an object (a mapping or a model), not {type(owner).__name__}")
    missing = [
        key if key in ("apiVersion", "kind") else f"metadata.{key}"
        for key, value in fields.items()
        if not isinstance(value, str) or not value
    ]
    if missing:
        name = fields["name"] or "(unnamed)"
        raise ValueError(
            f"cannot make an owner reference to {fields['kind'] or 'an object'} {name}: it has "
            f"no {', '.join(missing)} (give the object as the API server returned it; one "
            "built locally has no uid until it is created)"
        )
    return {**fields, "controller": controller, "blockOwnerDeletion": block_owner_deletion}


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
