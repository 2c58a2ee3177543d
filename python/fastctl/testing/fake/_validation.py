"""A custom resource checked against its CRD's structural schema, as the API server does on
every write: unknown fields pruned, defaults filled in, then types, required fields, enums,
bounds, lengths, patterns and item counts checked. Each failure is one ``(field, message)``
pair; the server answers 422 Invalid with all of them.

Not checked here: CEL rules (``x-kubernetes-validations``), formats, and
``x-kubernetes-list-type`` uniqueness; the real server checks those too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fastctl.testing.fake._clone import clone

__all__ = ["Problem", "check"]

Problem = tuple[str, str]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def check(obj: dict[str, Any], schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """`obj` pruned and defaulted by `schema` (its ``openAPIV3Schema``), and the problems
    found in it. ``apiVersion``, ``kind`` and ``metadata`` are the server's to check."""
    out = clone(obj)
    problems: list[Problem] = []
    props = schema.get("properties") or {}
    for key in list(out):
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key in props:
            out[key] = _walk(out[key], props[key], key, problems)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            del out[key]
    for key, sub in props.items():
        if key not in out and "default" in sub:
            out[key] = _walk(clone(sub["default"]), sub, key, problems)
    for key in schema.get("required") or ():
        if key not in out:
            problems.append((key, "Required value"))
    return out, problems


def _walk(value: Any, schema: Mapping[str, Any], path: str, problems: list[Problem]) -> Any:
    if value is None:
        if not schema.get("nullable"):
            problems.append((path, "Invalid value: null: must not be null"))
        return value
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            problems.append((path, f"Invalid value: {value!r}: must be an integer or string"))
        return value
    kind = schema.get("type")
    if kind is not None:
        allowed = _TYPES.get(str(kind), ())
        wrong = not isinstance(value, allowed) or (
            isinstance(value, bool) and kind in ("integer", "number")
        )
        if wrong:
            problems.append((path, f"Invalid value: {_typename(value)!r}: must be {kind}"))
            return value
    if isinstance(value, dict):
        value = _walk_object(value, schema, path, problems)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            value = [_walk(v, items, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        _bounds(len(value), schema.get("minItems"), schema.get("maxItems"), path, "items", problems)
    _scalar(value, schema, path, problems)
    return value


def _walk_object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, problems: list[Problem]
) -> dict[str, Any]:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if props and key in props:
            out[key] = _walk(item, props[key], f"{path}.{key}", problems)
        elif isinstance(extra, dict):
            out[key] = _walk(item, extra, f"{path}.{key}", problems)
        elif extra is True or preserve:
            out[key] = item
        # else: pruned, as the server prunes unknown fields
    for key, sub in (props or {}).items():
        if key not in out and "default" in sub:
            out[key] = _walk(clone(sub["default"]), sub, f"{path}.{key}", problems)
    for key in schema.get("required") or ():
        if key not in out:
            problems.append((f"{path}.{key}", "Required value"))
    _bounds(
        len(out),
        schema.get("minProperties"),
        schema.get("maxProperties"),
        path,
        "properties",
        problems,
    )
    return out


def _scalar(value: Any, schema: Mapping[str, Any], path: str, problems: list[Problem]) -> None:
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        shown = ", ".join(f'"{e}"' if isinstance(e, str) else str(e) for e in enum)
        problems.append((path, f"Unsupported value: {value!r}: supported values: {shown}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
            problems.append(
                (path, f"Invalid value: {value}: should be greater than or equal to {low}")
            )
        if high is not None and (
            value > high or (schema.get("exclusiveMaximum") and value == high)
        ):
            problems.append(
                (path, f"Invalid value: {value}: should be less than or equal to {high}")
            )
    if isinstance(value, str):
        _bounds(
            len(value), schema.get("minLength"), schema.get("maxLength"), path, "bytes", problems
        )
        pattern = schema.get("pattern")
        if pattern is not None and re.search(str(pattern), value) is None:
            problems.append((path, f"Invalid value: {value!r}: should match '{pattern}'"))


def _bounds(size: int, low: Any, high: Any, path: str, unit: str, problems: list[Problem]) -> None:
    if low is not None and size < int(low):
        problems.append((path, f"Invalid value: should have at least {low} {unit}"))
    if high is not None and size > int(high):
        problems.append((path, f"Too long: may not be more than {high} {unit}"))


def _typename(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )
