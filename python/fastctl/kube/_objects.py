"""Writing objects: server-side apply (objects and status), patch, get, delete.

Server-side apply is how a controller should write what it owns: it sends its *intent*
(only the fields it cares about) under a field manager name, and the API server merges it
with everyone else's, tracks ownership per field and reports conflicts. A controller
normally owns its fields outright, so `force` defaults to True (the Kubernetes docs
recommend exactly that for controllers); pass ``force=False`` to get a 409 instead of
taking a field over from another manager.

Bodies are serialised with orjson and answers parsed with orjson; every failure is an
`ApiError` whose message is one line naming the request::

    PATCH /api/v1/namespaces/a/configmaps/b: 409 Conflict: Apply failed with 1 conflict: ...

Bodies may be typed: a `CustomResource` instance or, for ``apply_status(status=...)``, a
status model is sent as its JSON (camelCase aliases, only the fields that were set: what a
manager sends is what it owns, so defaults it never set are not taken over).

A `Resource` argument is resolved through the client's shared discovery cache (one
request per group/version per client); pass a `ResolvedResource` to skip even that lookup.

Inside a reconcile of a controller with ``ignore_own_writes``, a write to an object the
controller watches is sent with the version its watch last delivered as a
``resourceVersion`` precondition, so that the answer proves whether the write changed the
object; if the server refuses it (the object changed meanwhile) the write is sent again as
written (`fastctl.kube._writes`). Elsewhere every write is sent as written.

Every call is sent again after a 429, a 503 or a reset where that is safe for it, after
a capped, jittered backoff or the server's ``Retry-After`` (`fastctl.kube._call_retry`
says which: reads, server-side apply, delete and merge patches after any of them; a create,
and JSON or strategic merge patches without a precondition of their own, only when the
server did not handle the first attempt).

Every write scrubs the Secret values fastctl has read from the status it sends
(`fastctl._redact.scrub_status`): the status of an object is read by everyone who may read
the object, and a condition's message is where a reconcile puts the error that quoted one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._redact import is_sensitive, remember, scrub_status
from fastctl.kube._call_retry import Safety
from fastctl.kube._http import ApiError, request_json, request_json_status
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._writes import observed_write

__all__ = ["ApiError", "PatchType", "apply", "apply_status", "create", "delete", "get", "patch"]

PatchType = Literal["merge", "json", "strategic", "apply"]
_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    # JSON is YAML: orjson output is a valid apply body.
    "apply": "application/apply-patch+yaml",
}

Obj = dict[str, Any]


async def resolved(client: ApiClient, resource: Resource | ResolvedResource) -> ResolvedResource:
    """`resource` resolved through the client's shared discovery cache."""
    if isinstance(resource, ResolvedResource):
        return resource
    return await resource.resolve(client)


def _name_and_namespace(
    res: ResolvedResource, obj: Mapping[str, Any], namespace: str | None
) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError(f"{res.kind}: the object has no metadata.name")
    ns = meta.get("namespace") or namespace
    if res.namespaced and not ns:
        raise ValueError(f"{res.kind} {name!r} is namespaced: give metadata.namespace")
    return str(name), (str(ns) if res.namespaced and ns else None)


def as_json(value: Any) -> Mapping[str, Any]:
    """A body as JSON: a mapping as it is, a pydantic model (`CustomResource`, `KubeModel`)
    dumped by alias with only its set fields (duck-typed: pydantic is not imported here)."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if dump is None:
        raise TypeError(f"expected a mapping or a pydantic model, got {type(value).__name__}")
    dumped: Mapping[str, Any] = dump(mode="json", by_alias=True, exclude_unset=True)
    return dumped


def _with_type(res: ResolvedResource, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Apply bodies must say what they are; fill ``apiVersion``/``kind`` in if left out."""
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {"apiVersion": res.api_version, "kind": res.kind, **obj}


async def get(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    name: str,
    *,
    namespace: str | None = None,
) -> Obj:
    """GET one object (`ApiError` 404 if it does not exist). A Secret's values (and marked
    fields) are remembered, so that what prints them later redacts them."""
    res = await resolved(client, resource)
    path = res.object_path(name, namespace)
    obj: Obj = await request_json(client, "GET", path, retry=Safety.IDEMPOTENT)
    if is_sensitive(res.kind):
        obj.setdefault("kind", res.kind)
        remember(obj)
    return obj


def _remember_written(res: ResolvedResource, body: Mapping[str, Any]) -> None:
    """Remember the sensitive values of a Secret (or a marked kind) this process writes, as
    those it reads: an operator that generates a password and caches Secrets metadata-only
    never reads it back, yet must not quote it into a status, an Event or a log."""
    if is_sensitive(res.kind):
        remember({**body, "kind": res.kind})


async def create(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    obj: Mapping[str, Any] | Any,
    *,
    namespace: str | None = None,
    field_manager: str | None = None,
) -> Obj:
    """POST a new object (a mapping or a `CustomResource` instance; `ApiError` 409
    AlreadyExists if the name is taken). A ``metadata.generateName`` without a name is
    fine."""
    res = await resolved(client, resource)
    obj = scrub_status(as_json(obj))
    _remember_written(res, obj)
    ns = (obj.get("metadata") or {}).get("namespace") or namespace
    if res.namespaced and not ns:
        raise ValueError(f"{res.kind} is namespaced: give metadata.namespace or namespace=")
    path = res.collection_path(ns if res.namespaced else None)
    body = orjson.dumps(_with_type(res, obj))
    name = (obj.get("metadata") or {}).get("name")

    async def post(version: str | None) -> tuple[int, Any]:
        query = {"fieldManager": field_manager}
        return await request_json_status(
            client, "POST", path, query=query, body=body, retry=Safety.REJECTED_ONLY
        )

    with observed_write(res, ns if res.namespaced else None, name) as write:
        created: Obj = await write.send(post)
    return created


async def apply(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    obj: Mapping[str, Any] | Any,
    *,
    field_manager: str,
    force: bool = True,
    namespace: str | None = None,
    dry_run: bool = False,
) -> Obj:
    """Server-side apply `obj` (the fields this manager wants; a mapping or a
    `CustomResource` instance) and return the result.

    Creates the object if it does not exist. `namespace` is used when the object does not
    name one. Send intent, not an object read back from the server: a stale
    ``metadata.resourceVersion`` in the body makes the apply conditional, and
    ``managedFields`` is rejected.
    """
    res = await resolved(client, resource)
    body = scrub_status(as_json(obj))
    name, ns = _name_and_namespace(res, body, namespace)
    path = res.object_path(name, ns)
    return await _apply(client, path, res, ns, name, body, field_manager, force, dry_run)


async def apply_status(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    obj: Any,
    *,
    field_manager: str,
    force: bool = True,
    namespace: str | None = None,
    dry_run: bool = False,
    status: Any = None,
) -> Obj:
    """Server-side apply to the ``status`` subresource: `obj` is ``apiVersion``, ``kind``,
    ``metadata.name`` (and namespace) and the ``status`` fields this manager owns. Use a
    field manager distinct from the one that applies the spec if both are applied.

    With `status` (a mapping or a status model), `obj` only names the object (a cached
    object or a `CustomResource` instance will do) and `status` is what is applied: for a
    model, the fields that were set, by alias (``exclude_unset``).

    Secret values fastctl has read (watched, or got with `get`/`list`) are replaced by
    ``<redacted>`` in the status sent: an error quoted into a condition stores none of them.
    """
    res = await resolved(client, resource)
    body = as_json(obj)
    if status is not None:
        meta = body.get("metadata") or {}
        identity = {k: meta[k] for k in ("name", "namespace") if meta.get(k)}
        body = {
            "apiVersion": body.get("apiVersion") or res.api_version,
            "kind": body.get("kind") or res.kind,
            "metadata": identity,
            "status": as_json(status),
        }
    body = scrub_status(body)
    name, ns = _name_and_namespace(res, body, namespace)
    path = res.status_path(name, ns)
    return await _apply(client, path, res, ns, name, body, field_manager, force, dry_run)


async def _apply(
    client: ApiClient,
    path: str,
    res: ResolvedResource,
    namespace: str | None,
    name: str,
    obj: Mapping[str, Any],
    field_manager: str,
    force: bool,
    dry_run: bool,
) -> Obj:
    if not field_manager:
        raise ValueError("server-side apply needs a field_manager name")
    query: dict[str, str | int | bool | None] = {
        "fieldManager": field_manager,
        "force": True if force else None,
        "dryRun": "All" if dry_run else None,
    }
    body = _with_type(res, obj)
    _remember_written(res, body)

    async def send(version: str | None) -> tuple[int, Any]:
        return await request_json_status(
            client,
            "PATCH",
            path,
            query=query,
            body=orjson.dumps(_conditioned(body, version)),
            content_type=_CONTENT_TYPES["apply"],
            retry=Safety.IDEMPOTENT,
        )

    given, conditional = _precondition(body)
    with observed_write(
        res, namespace, name, dry_run=dry_run, given=given, conditional=conditional
    ) as write:
        result: Obj = await write.send(send)
    return result


async def patch(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    name: str,
    body: Mapping[str, Any] | list[Any],
    *,
    namespace: str | None = None,
    patch_type: PatchType = "merge",
    subresource: str | None = None,
    field_manager: str | None = None,
) -> Obj:
    """PATCH one object: a JSON merge patch (default), a JSON patch (a list of operations,
    ``patch_type="json"``), a strategic merge patch (built-in types only) or an apply.
    Remembered Secret values are scrubbed from the status it writes, as `apply_status`'s."""
    res = await resolved(client, resource)
    path = res.object_path(name, namespace, subresource=subresource)
    if subresource in (None, "status"):
        body = scrub_status(body)
    if subresource is None and isinstance(body, Mapping):
        _remember_written(res, {**body, "metadata": {"name": name, "namespace": namespace}})
    safety = patch_safety(body, patch_type)

    async def send(version: str | None) -> tuple[int, Any]:
        conditioned = body if version is None else _patch_conditioned(body, version)
        return await request_json_status(
            client,
            "PATCH",
            path,
            query={"fieldManager": field_manager},
            body=orjson.dumps(conditioned),
            content_type=_CONTENT_TYPES[patch_type],
            retry=safety,
        )

    # Another subresource (``scale``) has a body of its own kind: no precondition added.
    given, conditional = _precondition(body) if subresource in (None, "status") else (None, False)
    ns = namespace if res.namespaced else None
    with observed_write(res, ns, name, given=given, conditional=conditional) as write:
        result: Obj = await write.send(send)
    return result


def patch_safety(body: Mapping[str, Any] | list[Any], patch_type: PatchType) -> Safety:
    """Whether a patch `body` applied twice is applied once (`fastctl.kube._call_retry`):
    a merge patch or an apply sets values; a JSON patch that names the version (a ``test``
    or ``replace`` of ``/metadata/resourceVersion``), or a strategic merge patch that
    carries one, is refused the second time. A ``test`` of another field is not enough
    (the first application may leave it as it was). Only the caller's own precondition
    counts (see `_call_retry`)."""
    if patch_type in ("merge", "apply"):
        return Safety.IDEMPOTENT
    if isinstance(body, list):
        for op in body:
            if isinstance(op, Mapping) and str(op.get("path", "")) == _VERSION_POINTER:
                return Safety.IDEMPOTENT
        return Safety.REJECTED_ONLY
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and meta.get("resourceVersion"):
        return Safety.IDEMPOTENT
    return Safety.REJECTED_ONLY


def _precondition(body: Mapping[str, Any] | list[Any]) -> tuple[str | None, bool]:
    """The ``resourceVersion`` precondition `body` carries itself, and whether one may be
    added (see `fastctl.kube._writes`): not to a body that has one, or that names the
    version in any other way (a JSON patch operation on it, a ``metadata`` that is not an
    object), which is the caller's to say."""
    if isinstance(body, list):  # a JSON patch: room for one more operation
        named = any(
            not isinstance(op, Mapping) or str(op.get("path", "")).startswith(_VERSION_POINTER)
            for op in body
        )
        return None, not named
    meta = body.get("metadata")
    if meta is None:
        return None, True
    if not isinstance(meta, Mapping):
        return None, False
    if "resourceVersion" in meta:
        version = meta["resourceVersion"]
        return (str(version) if version else None), False
    return None, True


_VERSION_POINTER = "/metadata/resourceVersion"


def _conditioned(body: Mapping[str, Any], version: str | None) -> Mapping[str, Any]:
    """`body` with ``metadata.resourceVersion`` `version` (a new mapping; ``None``: as is)."""
    if version is None:
        return body
    meta = body.get("metadata") or {}
    return {**body, "metadata": {**meta, "resourceVersion": version}}


def _patch_conditioned(body: Mapping[str, Any] | list[Any], version: str) -> Any:
    """A patch body made conditional on `version`: a JSON patch sets the version (a
    mismatch is a 409 Conflict, as for the other patch types), the others carry it."""
    if isinstance(body, list):
        return [{"op": "replace", "path": _VERSION_POINTER, "value": version}, *body]
    return _conditioned(body, version)


async def delete(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    name: str,
    *,
    namespace: str | None = None,
    propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
    resource_version: str | None = None,
    missing_ok: bool = True,
) -> Obj | None:
    """DELETE one object; returns what the server answers (the object, still present while
    finalizers run, or a Status), or ``None`` if it was already gone and `missing_ok`.
    `uid`/`resource_version` are preconditions: delete only that incarnation/version."""
    res = await resolved(client, resource)
    options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if propagation_policy is not None:
        options["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    preconditions = {
        k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None
    }
    if preconditions:
        options["preconditions"] = preconditions
    path = res.object_path(name, namespace)

    async def send(version: str | None) -> tuple[int, Any]:
        return await request_json_status(
            client, "DELETE", path, body=orjson.dumps(options), retry=Safety.IDEMPOTENT
        )

    try:
        with observed_write(res, namespace if res.namespaced else None, name, deleting=True) as w:
            result: Obj = await w.send(send)
    except ApiError as exc:
        if exc.status == 404 and missing_ok:
            return None
        raise
    return result
