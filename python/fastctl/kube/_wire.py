"""What the API server sends, checked before anything reads it: list pages, watch frames,
and the metadata of the objects in them.

A real API server sends well-formed JSON; a proxy, a broken aggregated API or a
truncated connection may not. Everything downstream (the Store's indexes, ObjectRef,
owner triggers, finalizers) reads ``metadata`` without checking types, so the watcher
rejects a page or frame here, as `WatchStreamError` (retried with backoff, resuming from
the last good resourceVersion), rather than let a ``TypeError`` end the controller.
Only the fields fastctl itself reads are checked; the rest of an object is the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from fastctl._core import Item, decode_frame, decode_list, decode_object
from fastctl.errors import WatchStreamError

__all__ = [
    "decode_list_page",
    "decode_watch_line",
    "item_of",
    "list_page",
    "metadata_problem",
    "typed_list_page",
    "watch_frame",
]

Identity = tuple[str, str] | None
"""An ``(apiVersion, kind)`` to give each object (filled in where missing, or written over
what it has when `replace`), or None."""


def decode_watch_line(
    line: bytes, *, strip_managed_fields: bool, identity: Identity = None, replace: bool = False
) -> tuple[str, Item | bytes]:
    """One watch line decoded in the extension: its ``type`` and its object as an `Item`
    (JSON bytes and the metadata fastctl reads, checked as `watch_frame` checks them), or
    for an ``ERROR`` frame the Status's JSON; `WatchStreamError` naming what is wrong."""
    api_version, kind = identity if identity is not None else (None, None)
    try:
        return decode_frame(line, strip_managed_fields, api_version, kind, replace)
    except ValueError as exc:
        raise WatchStreamError(str(exc)) from None


def decode_list_page(
    data: bytes, *, strip_managed_fields: bool, identity: Identity = None, replace: bool = False
) -> tuple[list[Item], str | None, str | None, str | None, bool]:
    """A list response decoded in the extension: ``(items, kind, continue,
    resourceVersion, shard_info)``, or `WatchStreamError` naming what is wrong."""
    api_version, kind = identity if identity is not None else (None, None)
    try:
        return decode_list(data, strip_managed_fields, api_version, kind, replace)
    except ValueError as exc:
        raise WatchStreamError(str(exc)) from None


def item_of(obj: Mapping[str, Any]) -> Item:
    """A parsed object as an `Item` (a transform's result, an object put in a `Store` by
    hand): `ValueError` if it has no ``metadata.name`` (what else of its metadata is of
    the wrong type reads as absent, as the Python indexes read it), `TypeError` if it is
    not JSON."""
    try:
        data = orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"not a JSON object: {exc}") from None
    return decode_object(data, lenient=True)


Obj = dict[str, Any]

_STRINGS = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
_OWNER_STRINGS = ("apiVersion", "kind", "name", "uid")


def list_page(data: bytes) -> tuple[list[Obj], Obj]:
    """A list response's items and metadata, or `WatchStreamError` when it is not JSON or
    not shaped like a list (a proxy's page, a broken server)."""
    items, meta, _ = typed_list_page(data)
    return items, meta


def typed_list_page(data: bytes) -> tuple[list[Obj], Obj, Any]:
    """`list_page` and the list's ``kind`` (a metadata-only list checks it)."""
    doc = _json_object(data, "list response")
    items = doc.get("items") or []
    meta = doc.get("metadata") or {}
    if not isinstance(items, list) or not isinstance(meta, dict):
        raise WatchStreamError("malformed list response: items or metadata of the wrong type")
    for key in ("continue", "resourceVersion"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise WatchStreamError(f"malformed list response: metadata.{key} is not a string")
    for obj in items:
        problem = metadata_problem(obj)
        if problem is not None:
            raise WatchStreamError(f"malformed list response: an item's {problem}")
    return items, meta, doc.get("kind")


def watch_frame(line: bytes) -> tuple[str, Obj]:
    """The ``type`` and ``object`` of one watch line, or `WatchStreamError` saying what is
    wrong with it. ``ERROR`` frames carry a Status, not an object: only its shape is
    checked; a ``BOOKMARK`` needs no name."""
    frame = _json_object(line, "watch line")
    etype, obj = frame.get("type"), frame.get("object")
    if not isinstance(etype, str) or not isinstance(obj, dict):
        raise WatchStreamError("malformed watch line: type or object missing or of the wrong type")
    if etype != "ERROR":
        problem = metadata_problem(obj, named=etype != "BOOKMARK")
        if problem is not None:
            raise WatchStreamError(f"malformed watch line: the object's {problem}")
    return etype, obj


def _json_object(data: bytes, what: str) -> Obj:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise WatchStreamError(f"malformed {what}: {exc}") from None
    if not isinstance(doc, dict):
        raise WatchStreamError(f"malformed {what}: not a JSON object")
    return doc


def metadata_problem(obj: Any, *, named: bool = True) -> str | None:
    """What is wrong with `obj`'s metadata, as fastctl reads it (``None``: nothing).

    Every watch frame and list item passes here, so well-formed metadata (nearly all of
    it) is recognised by `_plainly_well_formed`, a few exact type tests in plain loops;
    only what that does not recognise is examined by `_metadata_problem`, which names
    the problem (and accepts what is merely unusual, such as a subclass of `str`)."""
    if type(obj) is dict:
        meta = obj.get("metadata")
        if type(meta) is dict and _plainly_well_formed(meta, named):
            return None
    return _metadata_problem(obj, named)


def _plainly_well_formed(meta: dict[str, Any], named: bool) -> bool:
    get = meta.get
    if named and (type(get("name")) is not str or not meta["name"]):
        return False
    for key in _STRINGS:
        value = get(key)
        if value is not None and type(value) is not str:
            return False
    for key in ("labels", "annotations"):
        mapping = get(key)
        if mapping is not None:
            if type(mapping) is not dict:
                return False
            for k, v in mapping.items():
                if type(k) is not str or type(v) is not str:
                    return False
    finalizers = get("finalizers")
    if finalizers is not None:
        if type(finalizers) is not list:
            return False
        for f in finalizers:
            if type(f) is not str:
                return False
    owners = get("ownerReferences")
    if owners is not None:
        if type(owners) is not list:
            return False
        for owner in owners:
            if type(owner) is not dict:
                return False
            for k in _OWNER_STRINGS:
                if type(owner.get(k)) is not str:
                    return False
    return True


def _metadata_problem(obj: Any, named: bool) -> str | None:
    if not isinstance(obj, dict):
        return "value is not an object"
    meta = obj.get("metadata")
    if meta is None and not named:
        return None
    if not isinstance(meta, dict):
        return "metadata is not an object"
    if named and (not isinstance(meta.get("name"), str) or not meta["name"]):
        return "metadata.name is missing or not a string"
    for key in _STRINGS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"metadata.{key} is not a string"
    for key in ("labels", "annotations"):
        if not _string_map(meta.get(key)):
            return f"metadata.{key} is not a map of strings"
    finalizers = meta.get("finalizers")
    if finalizers is not None and not (
        isinstance(finalizers, list) and all(isinstance(f, str) for f in finalizers)
    ):
        return "metadata.finalizers is not a list of strings"
    owners = meta.get("ownerReferences")
    if owners is not None and not (
        isinstance(owners, list)
        and all(
            isinstance(o, dict) and all(isinstance(o.get(k), str) for k in _OWNER_STRINGS)
            for o in owners
        )
    ):
        return "metadata.ownerReferences is not a list of owner references"
    return None


def _string_map(value: Any) -> bool:
    return value is None or (
        isinstance(value, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    )
