"""The ``managedFields`` of a fake API server's objects: which fields each manager owns,
given by a write to the manager that made it and taken from every other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.testing.fake._patches import (
    Path,
    fields_of,
    fields_v1,
    from_fields_v1,
    overlaps,
    value_at,
)
from fastctl.testing.fake._state import wall_stamp

__all__ = ["changed_fields", "own", "owned_part", "owners_of"]


def own(
    obj: dict[str, Any],
    manager: str,
    operation: str,
    fields: set[Path],
    subresource: str | None,
    *,
    replace: bool = False,
) -> None:
    """Give `manager` the `fields` (taken from every other manager)."""
    entries = list(obj["metadata"].get("managedFields") or ())
    out: list[dict[str, Any]] = []
    mine: set[Path] = set()
    for entry in entries:
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        same_sub = entry.get("subresource") == subresource
        if (entry.get("manager"), entry.get("operation")) == (manager, operation) and same_sub:
            mine = set() if replace else owned
            continue
        if same_sub or subresource is None or entry.get("subresource") is None:
            owned = {f for f in owned if not any(overlaps(f, g) for g in fields)}
        if owned:
            out.append({**entry, "fieldsV1": fields_v1(owned)})
    mine |= fields
    if mine:
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": obj.get("apiVersion", ""),
            "time": wall_stamp(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(mine),
        }
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    obj["metadata"]["managedFields"] = out


def owned_part(obj: Mapping[str, Any], subresource: str | None) -> dict[str, Any]:
    """The part of an object a write to `subresource` can own: its status, or the rest."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    return {k: v for k, v in obj.items() if k not in ("status", "apiVersion", "kind")}


def owners_of(obj: Mapping[str, Any], subresource: str | None) -> dict[tuple[str, str], set[Path]]:
    out: dict[tuple[str, str], set[Path]] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if entry.get("subresource") != (subresource or None):
            continue
        key = (str(entry.get("manager")), str(entry.get("operation")))
        out.setdefault(key, set()).update(from_fields_v1(entry.get("fieldsV1") or {}))
    return out


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], sub: str | None) -> set[Path]:
    """The leaf fields an update sets to a new value (the ones it takes ownership of)."""
    return {p for p in fields_of(owned_part(new, sub)) if value_at(old, p) != value_at(new, p)}
