"""From a pydantic JSON Schema to a structural ``openAPIV3Schema`` a CRD can carry.

pydantic writes JSON Schema 2020-12 with ``$defs`` and ``$ref``; the API server wants a
*structural* OpenAPI v3.0 schema: every node has one ``type`` (or says it preserves unknown
fields, or is int-or-string), no references, no unions of object types, and its own
spellings for nullability (``nullable``), exclusive bounds (booleans beside ``minimum``)
and sets (``x-kubernetes-list-type: set``, since ``uniqueItems`` is forbidden); lists of a
model declared with ``list_map_keys`` become list-maps. This module is that translation,
and nothing else (the defaults of ``default_factory`` fields are computed on the model
side, `fastctl.kube._model`, and arrive here as plain defaults): it walks the JSON and
never imports pydantic, so the rules can be read (and unit-tested) one mapping at a time.

What a structural schema cannot say raises `SchemaError` naming the field path and the rule
broken, instead of a CRD the server would refuse with a less helpful message or, worse,
accept and then prune fields silently.

`ValidationRule` (a CEL rule, ``x-kubernetes-validations``) and `PrinterColumn` live here
too: plain values that models carry into the schema and the CRD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastctl.errors import SchemaError

__all__ = [
    "LIST_MAP_KEYS",
    "REFUSED_DEFAULT",
    "PrinterColumn",
    "ValidationRule",
    "structural_schema",
]

Json = dict[str, Any]

_KEPT = (
    "description",
    "minimum",
    "maximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
)
"""Keywords that mean the same in both dialects and are copied as they are."""

_DROPPED = ("title", "examples", "$schema", "readOnly", "writeOnly", "deprecated")
"""Annotations the API server does not need (``title`` is pydantic's field name again)."""

_FORMATS = frozenset(
    {"byte", "date", "date-time", "email", "hostname", "ipv4", "ipv6", "uri", "uuid", "int32",
     "int64", "float", "double", "password", "binary"}
)  # fmt: skip
"""Formats the API server checks as pydantic means them. ``duration`` is left out on
purpose: pydantic writes ISO 8601 (``P1D``), the API server parses Go durations (``1h``)."""

_SCALARS = frozenset({"string", "integer", "number", "boolean"})

LIST_MAP_KEYS = "x-fastctl-list-map-keys"
"""Set by a model declared with ``list_map_keys`` on its own schema: a list of it becomes a
list-map keyed by those fields. Read here and never copied into a CRD."""

REFUSED_DEFAULT = "x-fastctl-refused-default"
"""The ``default`` a field gets when its ``default_factory`` cannot give the CRD one: a
mapping from this key to the reason, turned here into a `SchemaError` naming the field (the
model side knows why, only this walk knows where)."""


@dataclass(frozen=True, slots=True)
class ValidationRule:
    """A CEL validation rule (``x-kubernetes-validations``), checked by the API server.

    On a field, ``Annotated[int, ValidationRule("self >= 0", message="must not be
    negative")]``; on a model, ``class Spec(KubeModel, rules=[ValidationRule("self.min <=
    self.max")])``. `self` is the value the rule is attached to; `old_self` (in `rule`)
    makes it a transition rule.
    """

    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
                    "FieldValueDuplicate"] | None = None  # fmt: skip
    field_path: str | None = None

    def to_json(self) -> Json:
        """The entry of ``x-kubernetes-validations``."""
        out: Json = {"rule": self.rule}
        for key, value in (
            ("message", self.message),
            ("messageExpression", self.message_expression),
            ("reason", self.reason),
            ("fieldPath", self.field_path),
        ):
            if value is not None:
                out[key] = value
        return out

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Json:
        """pydantic's hook for ``Annotated`` metadata: add the rule to the field's schema."""
        schema: Json = handler(core_schema)
        add_rules(schema, [self])
        return schema


def add_rules(schema: Json, rules: list[ValidationRule] | tuple[ValidationRule, ...]) -> None:
    """Append `rules` to the ``x-kubernetes-validations`` of one JSON Schema node."""
    if rules:
        schema.setdefault("x-kubernetes-validations", []).extend(r.to_json() for r in rules)


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A column of ``kubectl get`` (``additionalPrinterColumns``): `json_path` is relative
    to the object (``.status.phase``); `type` one of string, integer, number, boolean,
    date; `priority` 0 shows by default, higher only with ``-o wide``."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str | None = None
    format: str | None = None
    priority: int = 0

    def to_json(self) -> Json:
        out: Json = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description is not None:
            out["description"] = self.description
        if self.format is not None:
            out["format"] = self.format
        if self.priority:
            out["priority"] = self.priority
        return out


def structural_schema(schema: Mapping[str, Any], *, model: str) -> Json:
    """The structural form of `schema` (pydantic's ``model_json_schema()``, with its
    ``$defs``); `model` names the model in errors."""
    return _Walker(schema.get("$defs") or {}, model).node(schema, "", ())


class _Walker:
    def __init__(self, defs: Mapping[str, Any], model: str) -> None:
        self.defs = defs
        self.model = model

    def fail(self, path: str, rule: str) -> SchemaError:
        return SchemaError(self.model, path, rule)

    def node(self, node: Mapping[str, Any], path: str, seen: tuple[str, ...]) -> Json:
        """One schema node at `path`; `seen` holds the definitions being expanded above it
        (a reference back to one of them is a recursive model)."""
        node, seen = self.deref(node, path, seen)
        if "anyOf" in node or "oneOf" in node:
            return self.union(node, path, seen)
        if "const" in node:
            node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
        if "not" in node or "if" in node:
            raise self.fail(path, "negations and conditionals have no structural form")
        if "patternProperties" in node or "propertyNames" in node:
            raise self.fail(path, "constraints on map keys have no structural form")
        out: Json = {}
        kind = node.get("type")
        if isinstance(kind, list):
            raise self.fail(path, f"one type per field, got {kind}")
        if kind is None:
            if "enum" in node:
                raise self.fail(
                    path, f"an enum of mixed types {node['enum']!r}: all values need one type"
                )
            out["x-kubernetes-preserve-unknown-fields"] = True  # Any: free-form
        elif kind == "null":
            raise self.fail(path, "a field that can only be null has no type")
        else:
            out["type"] = kind
        self.copy_common(node, out, path)
        if kind == "object":
            self.object(node, out, path, seen)
        elif kind == "array":
            self.array(node, out, path, seen)
        return out

    def deref(
        self, node: Mapping[str, Any], path: str, seen: tuple[str, ...]
    ) -> tuple[Mapping[str, Any], tuple[str, ...]]:
        """Inline ``$ref`` (and pydantic's one-element ``allOf`` wrapper); siblings such as
        ``description`` and ``default`` win over the definition's own."""
        while True:
            if "allOf" in node:
                parts = node["allOf"]
                if len(parts) != 1:
                    raise self.fail(path, "an intersection (allOf) has no structural form")
                node = {**parts[0], **{k: v for k, v in node.items() if k != "allOf"}}
                continue
            ref = node.get("$ref")
            if ref is None:
                return node, seen
            name = str(ref).rpartition("/")[2]
            if name in seen:
                raise self.fail(path, f"{name} contains itself: a CRD schema cannot be recursive")
            if name not in self.defs:
                raise self.fail(path, f"unresolved reference {ref}")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            rules = [*self.defs[name].get("x-kubernetes-validations", ()),
                     *rest.pop("x-kubernetes-validations", ())]  # fmt: skip
            node = {**self.defs[name], **rest}
            if rules:
                node["x-kubernetes-validations"] = rules
            seen = (*seen, name)

    def union(self, node: Mapping[str, Any], path: str, seen: tuple[str, ...]) -> Json:
        """``X | None`` is a nullable X; ``int | str`` is int-or-string; unions of scalars
        of one type (literals) merge their enums; anything else has no structural form."""
        branches = list(node.get("anyOf") or node.get("oneOf") or ())
        rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf", "discriminator")}
        nullable = any(b.get("type") == "null" and len(b) == 1 for b in branches)
        branches = [b for b in branches if not (b.get("type") == "null" and len(b) == 1)]
        resolved = [self.deref(b, path, seen)[0] for b in branches]
        types = [b.get("type") for b in resolved]
        if len(branches) == 1:
            out = self.node({**branches[0], **rest}, path, seen)
        elif sorted(map(str, types)) == ["integer", "string"]:
            out = {"x-kubernetes-int-or-string": True}
            self.copy_common(rest, out, path)
        elif (
            len(set(map(str, types))) == 1
            and types[0] in _SCALARS
            and all("enum" in b or "const" in b for b in resolved)
        ):
            values = [v for b in resolved for v in (b["enum"] if "enum" in b else [b["const"]])]
            out = self.node({**rest, "type": types[0], "enum": values}, path, seen)
        else:
            described = " | ".join(str(b.get("title") or b.get("type") or "any") for b in resolved)
            raise self.fail(
                path,
                f"a union of {described}: a structural schema gives every field one type "
                "(only X | None and int | str are expressible)",
            )
        if nullable:
            out["nullable"] = True
        return out

    def copy_common(self, node: Mapping[str, Any], out: Json, path: str) -> None:
        for key in _KEPT:
            if key in node:
                out[key] = node[key]
        if "enum" in node:
            out["enum"] = list(node["enum"])
        default = node.get("default")
        if isinstance(default, Mapping) and REFUSED_DEFAULT in default:
            raise self.fail(path, str(default[REFUSED_DEFAULT]))
        if default is not None:
            out["default"] = default
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node:  # 2020-12: a number; OpenAPI 3.0: a flag beside the bound
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound] = node[key]
                out[key] = True
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            out["format"] = fmt
        for key, value in node.items():
            if key.startswith("x-kubernetes-"):
                out[key] = value

    def object(self, node: Mapping[str, Any], out: Json, path: str, seen: tuple[str, ...]) -> None:
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {
                name: self.node(sub, f"{path}.{name}" if path else name, seen)
                for name, sub in properties.items()
            }
            if extra not in (None, False):
                # extra="allow": structural schemas cannot have both, so keep the declared
                # fields typed and let the server keep the others as they are
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, Mapping):
            out["additionalProperties"] = self.node(extra, f"{path}[*]", seen)
        elif extra is not False:
            out["x-kubernetes-preserve-unknown-fields"] = True  # dict[str, Any], a bare dict

    def array(self, node: Mapping[str, Any], out: Json, path: str, seen: tuple[str, ...]) -> None:
        if "prefixItems" in node:
            raise self.fail(
                path, "a tuple (prefixItems): every item of a list needs the same schema"
            )
        items = node.get("items")
        if items is None:
            raise self.fail(path, "a list needs an item type")
        out["items"] = self.node(items, f"{path}[]", seen)
        keys = self.deref(items, path, seen)[0].get(LIST_MAP_KEYS)
        if keys:
            self.list_map(out, list(keys), path)
        elif node.get("uniqueItems"):
            if out["items"].get("type") not in _SCALARS:
                raise self.fail(path, "a set of non-scalar items: only sets of scalars exist")
            out["x-kubernetes-list-type"] = "set"  # uniqueItems itself is forbidden

    def list_map(self, out: Json, keys: list[str], path: str) -> None:
        """A list of a model declared with ``list_map_keys``: a list-map, whose items the
        API server (and server-side apply) tells apart by those fields, so each writer owns
        its own items. Every key must be required or defaulted, as the server demands."""
        item = out["items"]
        props = item.get("properties") or {}
        for key in keys:
            if key not in props:
                raise self.fail(path, f"the list-map key {key!r} is not a field of its items")
            if key not in item.get("required", ()) and "default" not in props[key]:
                raise self.fail(path, f"the list-map key {key!r} must be required or defaulted")
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = keys
