"""The RFC 6902 JSON Patch that turns one JSON document into another.

A mutating webhook returns the object it wants; the API server wants the operations that
get there. `diff` walks both documents at once and emits the fewest simple operations it
can see without searching: ``remove`` and ``add`` for keys, ``replace`` for changed values,
and for lists a walk of the common prefix followed by appends or removals from the end (no
move detection: a patch only has to be correct, and webhook patches are small).

Paths are JSON Pointers (RFC 6901): ``~`` is written ``~0`` and ``/`` is written ``~1``, so
a label key such as ``app.kubernetes.io/name`` becomes ``/metadata/labels/app.kubernetes.io~1name``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Operation", "diff", "pointer"]

Operation = dict[str, Any]
"""One JSON Patch operation: ``{"op": ..., "path": ..., ["value": ...]}``."""


def pointer(token: str | int) -> str:
    """One reference token of a JSON Pointer, escaped (``~`` first, then ``/``)."""
    return "/" + str(token).replace("~", "~0").replace("/", "~1")


def _same_type(a: Any, b: Any) -> bool:
    # JSON tells true from 1 and 1.0 from 1; Python's == does not, so compare types first.
    return type(a) is type(b)


def diff(old: Any, new: Any, path: str = "") -> list[Operation]:
    """The operations that turn `old` into `new` (both plain JSON values)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_objects(old, new, path)
    if isinstance(old, list) and isinstance(new, list):
        return _diff_arrays(old, new, path)
    if _same_type(old, new) and old == new:
        return []
    return [{"op": "replace", "path": path, "value": new}]


def _diff_objects(old: dict[str, Any], new: dict[str, Any], path: str) -> list[Operation]:
    ops: list[Operation] = []
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": path + pointer(key)})
    for key, value in new.items():
        if key not in old:
            ops.append({"op": "add", "path": path + pointer(key), "value": value})
        else:
            ops.extend(diff(old[key], value, path + pointer(key)))
    return ops


def _diff_arrays(old: list[Any], new: list[Any], path: str) -> list[Operation]:
    common = min(len(old), len(new))
    ops: list[Operation] = []
    for i in range(common):
        ops.extend(diff(old[i], new[i], path + pointer(i)))
    # Removals from the end, highest index first, so earlier indices stay valid.
    ops.extend(
        {"op": "remove", "path": path + pointer(i)} for i in range(len(old) - 1, common - 1, -1)
    )
    ops.extend(
        {"op": "add", "path": path + pointer(i), "value": new[i]} for i in range(common, len(new))
    )
    return ops
