"""Label and field selectors, as the API server parses and applies them to lists and
watches.

Label selectors: ``key``, ``!key``, ``key=value`` (or ``==``), ``key!=value``,
``key in (a,b)``, ``key notin (a,b)``, joined by commas (every requirement must hold).
Field selectors: ``path=value`` (or ``==``) and ``path!=value`` on dotted paths
(``metadata.name``, ``status.phase``), joined by commas. A malformed selector is a
`SelectorError` (the server answers 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SelectorError", "field_selector", "label_selector"]

Match = Callable[[Mapping[str, Any]], bool]


class SelectorError(ValueError):
    """A selector that does not parse."""


def _split(text: str) -> list[str]:
    """Split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^()]*)\)$")
_EQ = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


def _requirement(text: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SET.match(text):
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = {v.strip() for v in raw.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ.match(text):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS.match(text):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise SelectorError(f"unable to parse requirement: {text!r}")


def label_selector(text: str | None) -> Match | None:
    """The objects a label selector selects (``None``: no selector)."""
    if not text:
        return None
    requirements = [_requirement(part) for part in _split(text)]

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return match


_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_.]*)\s*(==|=|!=)\s*(.*)$")


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def field_selector(text: str | None) -> Match | None:
    """The objects a field selector selects (``None``: no selector)."""
    if not text:
        return None
    terms: list[tuple[str, bool, str]] = []
    for part in _split(text):
        m = _FIELD.match(part)
        if m is None:
            raise SelectorError(f"invalid field selector: {part!r}")
        terms.append((m.group(1), m.group(2) != "!=", m.group(3).strip()))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in terms)

    return match
