"""The patch types of the API server: JSON merge patch, JSON patch, and server-side apply
with field managers.

Server-side apply keeps, per field manager, the set of fields it owns (``managedFields``,
in the server's ``fieldsV1`` form). An apply sets the fields it names, conflicts (409) on a
field another manager owns and holds at a different value unless forced (the field changes
hands), and removes the fields this manager applied before and applies no more, unless
another manager owns them too. Any other write (create, update, merge or JSON patch) takes
the fields it changes from whoever owned them, as an ``Update`` manager.

Lists are atomic here: a list is one field, owned and replaced whole (a real server merges
lists marked ``x-kubernetes-list-type: map`` or ``set`` item by item).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fastctl.testing.fake._clone import clone

__all__ = [
    "ApplyConflict",
    "JsonPatchError",
    "Path",
    "fields_of",
    "fields_v1",
    "from_fields_v1",
    "json_patch",
    "merge_patch",
    "merged",
    "value_at",
    "without",
]

Path = tuple[str, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, ``null`` removes a key, any
    other value replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(ValueError):
    """A JSON patch that cannot be applied (a failed ``test``, a missing path)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise JsonPatchError(f"path /{'/'.join(parts)} does not exist")
    return node


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise JsonPatchError(f"path /{'/'.join(parts)} does not exist")


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise JsonPatchError(f"path /{'/'.join(parts)} does not exist")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise JsonPatchError(f"index {last} out of range")
    else:
        raise JsonPatchError(f"path /{'/'.join(parts)} has no container")
    return doc


def json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test) on a copy of `doc`."""
    result = clone(doc)
    for op in ops:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise JsonPatchError(f"invalid operation {op!r}")
        kind, parts = op["op"], _pointer(str(op["path"]))
        if kind == "add":
            result = _add(result, parts, clone(op.get("value")))
        elif kind == "remove":
            _remove(result, parts)
        elif kind == "replace":
            _get(result, parts)
            if parts:
                _remove(result, parts)
            result = _add(result, parts, clone(op.get("value")))
        elif kind in ("move", "copy"):
            source = _pointer(str(op.get("from", "")))
            value = _remove(result, source) if kind == "move" else clone(_get(result, source))
            result = _add(result, parts, value)
        elif kind == "test":
            try:
                actual = _get(result, parts)
            except JsonPatchError:
                actual = None  # a missing value tests equal to null, as on the server
            if actual != op.get("value"):
                raise JsonPatchError(f"test failed at {op['path']}")
        else:
            raise JsonPatchError(f"unknown operation {kind!r}")
    return result


# -- fields and their owners -------------------------------------------------------------

_IDENTITY: frozenset[Path] = frozenset(
    {
        ("apiVersion",),
        ("kind",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "resourceVersion"),
        ("metadata", "uid"),
        ("metadata", "generation"),
        ("metadata", "creationTimestamp"),
        ("metadata", "managedFields"),
        ("metadata", "deletionTimestamp"),
        ("metadata", "deletionGracePeriodSeconds"),
        ("metadata", "generateName"),
    }
)


def fields_of(obj: Any, prefix: Path = ()) -> set[Path]:
    """The leaf fields `obj` sets (a map is opened, anything else is one field), without
    the identity and server-set fields."""
    out: set[Path] = set()
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            path = (*prefix, str(key))
            if path in _IDENTITY:
                continue
            out |= fields_of(value, path)
    else:
        out.add(prefix)
    return out


def value_at(obj: Any, path: Path) -> tuple[bool, Any]:
    """``(True, value)`` at `path` in `obj`, or ``(False, None)`` where there is none."""
    node = obj
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def merged(base: Any, applied: Any) -> Any:
    """`applied` laid over `base`: maps merge key by key, anything else replaces."""
    if not isinstance(applied, dict) or not isinstance(base, dict):
        return clone(applied)
    out = dict(base)
    for key, value in applied.items():
        out[key] = merged(base.get(key), value)
    return out


def without(obj: dict[str, Any], path: Path) -> None:
    """Remove the field at `path` from `obj` in place, and the maps it leaves empty."""
    nodes: list[dict[str, Any]] = [obj]
    for part in path[:-1]:
        child = nodes[-1].get(part)
        if not isinstance(child, dict):
            return
        nodes.append(child)
    nodes[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if nodes[depth]:
            break
        nodes[depth - 1].pop(path[depth - 1], None)


def overlaps(a: Path, b: Path) -> bool:
    """One field is the other, or holds it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def fields_v1(fields: set[Path]) -> dict[str, Any]:
    """A field set in the server's ``fieldsV1`` form (``{"f:spec": {"f:size": {}}}``)."""
    root: dict[str, Any] = {}
    for path in sorted(fields):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def from_fields_v1(doc: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """The leaf fields of a ``fieldsV1`` document."""
    out: set[Path] = set()
    for key, value in doc.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        inner = from_fields_v1(value, path) if isinstance(value, dict) and value else set()
        out |= inner or {path}
    return out


def iter_conflicts(
    current: Any, applied: Any, fields: set[Path], owners: Mapping[str, set[Path]]
) -> Iterator[tuple[str, Path]]:
    """``(manager, field)`` for each applied field another manager owns at another value."""
    for path in sorted(fields):
        has, value = value_at(current, path)
        _, wanted = value_at(applied, path)
        if not has or value == wanted:
            continue
        for manager, owned in sorted(owners.items()):
            if any(overlaps(path, other) for other in owned):
                yield manager, path


class ApplyConflict(Exception):
    """An apply would change fields other managers own (``(manager, field)`` each)."""

    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        shown = "; ".join(
            f'conflict with "{manager}": .{".".join(path)}' for manager, path in conflicts
        )
        count = len(conflicts)
        super().__init__(f"Apply failed with {count} conflict{'s' if count != 1 else ''}: {shown}")
