"""Finalizers: run cleanup before Kubernetes lets an object go.

A finalizer is a name in ``metadata.finalizers``; while any is there, a delete only sets
``metadata.deletionTimestamp`` and the object stays. A controller that must clean up
outside the object (external resources, objects in other namespaces) adds its finalizer
before doing anything else, and removes it only after the cleanup succeeded. `finalizer`
is that whole protocol in one call, meant to be the body of a reconcile::

    async def reconcile(widget: dict, ctx: Ctx) -> Action | None:
        return await finalizer(
            ctx.client, WIDGETS, widget, "example.com/cleanup",
            apply=lambda w: ensure_children(w, ctx),
            cleanup=lambda w: delete_external_things(w, ctx),
        )

- Not being deleted and the finalizer missing: add it (a JSON patch guarded by a ``test``
  of the current list, so two writers cannot clobber each other's finalizers), then call
  `apply` with the patched object at once: no extra reconcile round-trip.
- Not being deleted, finalizer present: ``return await apply(obj)``.
- Being deleted, finalizer present: ``await cleanup(obj)``. If it returns an action with a
  requeue delay, the cleanup is *not finished* (it is waiting for something): the finalizer
  stays and the action is returned, so cleanup runs again later. Otherwise (``None`` or
  `Action.await_change`) the finalizer is removed and the object can go. If cleanup raises,
  the finalizer stays and the error goes to the controller's error policy.
- Being deleted, finalizer absent: nothing to do (another controller's finalizer holds it).

`obj` may be a `CustomResource` instance (a typed reconcile's): `apply` and `cleanup` then
get an instance of the same model, re-validated after the finalizer was added.

The patches go to the object itself; a concurrent change to the finalizer list makes the
guard fail (422), which is retried here against a fresh read a few times before it is
raised as `ApiError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError
from fastctl.kube._objects import as_json, get, patch, resolved
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.types import Action

__all__ = ["add_finalizer", "finalizer", "remove_finalizer"]

Obj = dict[str, Any]
Handler = Callable[[Any], Awaitable[Action | None]]
_ATTEMPTS = 3


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return list((obj.get("metadata") or {}).get("finalizers") or [])


def _ref(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    return str(meta["name"]), meta.get("namespace")


async def finalizer(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    obj: Obj | Any,
    name: str,
    *,
    apply: Handler,
    cleanup: Handler,
) -> Action | None:
    """Run `apply` or `cleanup` for `obj` under finalizer `name` (see the module doc)."""
    res = await resolved(client, resource)
    raw = dict(as_json(obj))
    present = name in _finalizers(raw)
    if (raw.get("metadata") or {}).get("deletionTimestamp"):
        if not present:
            return None
        action = await cleanup(obj)
        if action is not None and action.requeue_after is not None:
            return action  # cleanup still in progress: keep the finalizer
        await remove_finalizer(client, res, raw, name)
        return action
    if not present:
        raw = await add_finalizer(client, res, raw, name)
        obj = raw if isinstance(obj, Mapping) else type(obj).model_validate(raw)
    return await apply(obj)


async def add_finalizer(
    client: ApiClient, resource: Resource | ResolvedResource, obj: Obj, name: str
) -> Obj:
    """Add finalizer `name` (if absent) and return the updated object."""
    res = await resolved(client, resource)
    obj_name, namespace = _ref(obj)
    for attempt in range(_ATTEMPTS):
        current = _finalizers(obj)
        if name in current:
            return obj
        ops: list[Obj] = (
            [
                # A missing list tests equal to null; adding the list then cannot race
                # with another writer adding theirs.
                {"op": "test", "path": "/metadata/finalizers", "value": None},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]
            if not current
            else [
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]
        )
        try:
            return await patch(client, res, obj_name, ops, namespace=namespace, patch_type="json")
        except ApiError as exc:
            if exc.status != 422 or attempt == _ATTEMPTS - 1:
                raise
        obj = await get(client, res, obj_name, namespace=namespace)
    raise AssertionError("unreachable")  # pragma: no cover


async def remove_finalizer(
    client: ApiClient, resource: Resource | ResolvedResource, obj: Obj, name: str
) -> Obj | None:
    """Remove finalizer `name` (if present in `obj`); returns the server's answer (for a
    deleted object whose last finalizer this was, its final state), or ``None`` if the
    object was already gone."""
    res = await resolved(client, resource)
    obj_name, namespace = _ref(obj)
    for attempt in range(_ATTEMPTS):
        current = _finalizers(obj)
        if name not in current:
            return obj
        index = current.index(name)
        ops = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": name},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        try:
            updated = await patch(
                client, res, obj_name, ops, namespace=namespace, patch_type="json"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status != 422 or attempt == _ATTEMPTS - 1:
                raise
        else:
            # With the last finalizer gone a deleted object is removed at once; the answer
            # is then its final state (the server may still return it).
            return updated
        try:
            obj = await get(client, res, obj_name, namespace=namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
    raise AssertionError("unreachable")  # pragma: no cover
