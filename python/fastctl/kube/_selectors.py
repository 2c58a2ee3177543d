"""Label selectors evaluated on the client, as the API server evaluates them.

The server filters a watch by its ``labelSelector``; the client needs the same answer in
the few places where it must know whether an object is inside a watch's scope without
asking: whether a write will ever show in a cache that watches with a selector (reading
your own writes), and tests. The grammar is the API's string form: requirements separated
by commas, each ``key``, ``!key``, ``key=value`` (or ``==``), ``key!=value``,
``key in (a,b)`` or ``key notin (a,b)``; all must hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["LabelSelector"]

_SET = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")

Check = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector (`parse`); `matches(labels)` says whether labels satisfy it."""

    text: str
    _checks: tuple[Check, ...] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse `text`; a malformed selector raises `ValueError`."""
        return cls(text, tuple(_requirement(part) for part in _split(text)))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(check(labels) for check in self._checks)


def _split(text: str) -> list[str]:
    """The requirements of `text`: split at the commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _requirement(part: str) -> Check:
    found = _SET.match(part)
    if found is not None and not found.group(1):
        key, op = found.group(2), found.group(3)
        values = frozenset(v.strip() for v in found.group(4).split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    found = _CMP.match(part)
    if found is not None:
        key, op, value = found.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    found = _EXISTS.match(part)
    if found is not None:
        negated, key = found.groups()
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ValueError(f"label selector: cannot parse {part.strip()!r}")
