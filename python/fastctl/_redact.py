"""Keeping Secrets out of what fastctl prints: logs, Events, error texts, reprs.

Two mechanisms, because a secret leaks in two shapes:

- **as an object**: `redact(obj)` is a copy of `obj` with every sensitive field replaced by
  ``"<redacted>"``: ``data`` and ``stringData`` of a ``Secret``, and the fields an operator
  marks with `mark_sensitive` (``mark_sensitive("Widget", "spec.password")``). fastctl
  prints objects only through it (`fastctl.ReconcileResult`'s repr, for one).
- **as text**: a reconcile that fails with ``f"cannot use {secret}"``, or an API server that
  echoes a value in its error (``Invalid value: "..."``), puts the value itself in a
  message. So fastctl remembers the values of the sensitive objects it reads (`remember`:
  the watcher does it for every object of a sensitive kind, `fastctl.kube.get` for what it
  returns), and `scrub(text)` replaces each remembered value, as it is and base64-decoded,
  raw, JSON-escaped or repr-escaped, with ``"<redacted>"``. `ApiError` texts, Event notes,
  log records (`fastctl.log.RedactingFilter`) and the status fastctl writes
  (`scrub_status`) pass through it; `redact(text)`, public as ``fastctl.log.redact``, is
  the same for an operator's own texts.

Values shorter than `MIN_SCRUBBED` characters are redacted in objects but not scrubbed from
free text: ``"1"`` or ``"on"`` would blank every line that contains them, and say little.
The memory is bounded (`MAX_OBJECTS` objects, the least recently read forgotten first).
Only kinds marked before their watch starts are remembered.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = [
    "MAX_OBJECTS",
    "MIN_SCRUBBED",
    "REDACTED",
    "active",
    "is_sensitive",
    "mark_sensitive",
    "redact",
    "remember",
    "scrub",
    "scrub_status",
    "scrub_tree",
]

REDACTED = "<redacted>"
MIN_SCRUBBED = 4
MAX_OBJECTS = 10_000

_FIELDS: dict[str, set[tuple[str, ...]]] = {"Secret": {("data",), ("stringData",)}}
_lock = threading.Lock()
_values: OrderedDict[str, frozenset[str]] = OrderedDict()
_pattern: re.Pattern[str] | None = None


def mark_sensitive(kind: str, *fields: str) -> None:
    """Treat `fields` (dotted paths: ``"spec.password"``, ``"spec.credentials"``) of objects
    of `kind` like a Secret's data: redacted in printed objects, their values scrubbed from
    texts. Call it before the controllers start (the watcher decides when it starts)."""
    if not fields:
        raise ValueError("mark_sensitive needs at least one field path")
    paths = {tuple(field.split(".")) for field in fields}
    if any(not all(path) for path in paths):
        raise ValueError(f"empty part in a field path: {fields!r}")
    with _lock:
        _FIELDS.setdefault(kind, set()).update(paths)


def is_sensitive(kind: str | None) -> bool:
    """Whether objects of `kind` have sensitive fields."""
    return kind in _FIELDS


def _kind_and_dict(obj: Any) -> tuple[str | None, Any]:
    if isinstance(obj, Mapping):
        kind = obj.get("kind")
        return (kind if isinstance(kind, str) else None), obj
    kind = getattr(obj, "kind", None)
    dump = getattr(obj, "model_dump", None)
    if isinstance(kind, str) and kind in _FIELDS and callable(dump):
        return kind, dump(mode="json", by_alias=True)
    return None, obj


def redact(obj: Any) -> Any:
    """A text (`str`) with every remembered sensitive value replaced by ``"<redacted>"``
    (`scrub`): for what an operator writes where fastctl does not look, a file, a
    ``print``, a field of another object.

    Any other `obj` with its sensitive fields replaced by ``"<redacted>"`` (a copy; `obj`
    itself is returned when it has none). A typed object of a sensitive kind comes back as
    a dict."""
    if isinstance(obj, str):
        return scrub(obj)
    kind, data = _kind_and_dict(obj)
    if kind not in _FIELDS:
        return obj
    out = _copy(data)
    for path in _FIELDS[kind]:
        parent = out
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent:
            value = parent[path[-1]]
            parent[path[-1]] = (
                dict.fromkeys(value, REDACTED) if isinstance(value, Mapping) else REDACTED
            )
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value)


def _spellings(value: str, *, base64_data: bool) -> set[str]:
    """`value` as it may appear in a text: itself, JSON- and repr-escaped, and for a
    Secret's ``data`` its base64-decoded bytes in the same spellings."""
    texts = {value}
    if base64_data:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if raw:
            texts.add(repr(raw)[2:-1])
            with contextlib.suppress(UnicodeDecodeError):
                texts.add(raw.decode("utf-8"))
    out: set[str] = set()
    for text in texts:
        out.update((text, orjson.dumps(text).decode()[1:-1], repr(text)[1:-1]))
    return {text for text in out if len(text) >= MIN_SCRUBBED}


def remember(obj: Any) -> None:
    """Note the values of `obj`'s sensitive fields, so that `scrub` removes them from texts
    (a no-op for objects without any). The latest read of an object replaces the last."""
    global _pattern
    kind, data = _kind_and_dict(obj)
    if kind not in _FIELDS or not isinstance(data, Mapping):
        return
    found: set[str] = set()
    for path in _FIELDS[kind]:
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        for leaf in _leaves(node):
            found |= _spellings(leaf, base64_data=kind == "Secret" and path == ("data",))
            if kind == "Secret" and path == ("stringData",):
                # Stored, and read back by anyone, as base64 in ``data``.
                found |= _spellings(base64.b64encode(leaf.encode()).decode(), base64_data=False)
    meta = data.get("metadata") or {}
    key = f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}/{meta.get('uid', '')}"
    values = frozenset(found)
    with _lock:
        if _values.get(key) == values:
            _values.move_to_end(key)
            return
        _values[key] = values
        _values.move_to_end(key)
        while len(_values) > MAX_OBJECTS:
            _values.popitem(last=False)
        _pattern = None


def active() -> bool:
    """Whether any sensitive value is remembered (nothing to scrub otherwise)."""
    return bool(_values)


def _compiled() -> re.Pattern[str] | None:
    global _pattern
    with _lock:
        if _pattern is None and _values:
            every = {v for values in _values.values() for v in values}
            if every:  # longest first, so a value inside another never leaves a tail
                _pattern = re.compile("|".join(map(re.escape, sorted(every, key=len)[::-1])))
        return _pattern


def scrub(text: str) -> str:
    """`text` with every remembered sensitive value replaced by ``"<redacted>"``."""
    pattern = _compiled() if _values else None
    return pattern.sub(REDACTED, text) if pattern is not None else text


def scrub_tree(value: Any) -> Any:
    """`scrub` applied to every string in a JSON-like `value` (a parsed error body)."""
    if not _values:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {k: scrub_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_tree(v) for v in value]
    return value


def scrub_status(body: Any) -> Any:
    """A write's `body` with the remembered values scrubbed from its status: the ``status``
    of an object or a merge/apply patch, the values a JSON patch adds or replaces under
    ``/status``. A reconcile that records ``str(exc)`` in a condition would otherwise store
    a Secret's value the driver quoted in the object, readable by all who may read it.
    Nothing else of the body is touched: spec and data are what the operator means to
    write, and may hold a value on purpose."""
    if not _values:
        return body
    if isinstance(body, list):
        return [
            {**op, "value": scrub_tree(op["value"])}
            if isinstance(op, Mapping)
            and op.get("op") in ("add", "replace")
            and "value" in op
            and (str(op.get("path", "")) + "/").startswith("/status/")
            else op
            for op in body
        ]
    if isinstance(body, Mapping) and "status" in body:
        return {**body, "status": scrub_tree(body["status"])}
    return body


def _forget_all() -> None:
    """Forget every remembered value (tests)."""
    global _pattern
    with _lock:
        _values.clear()
        _pattern = None
