"""`Namespaces`: a set of namespaces to watch, fixed or re-evaluated as namespaces come and go.

A controller (or one of its relations) watches one namespace, all of them, or a set:

- **names**: ``Namespaces("team-a", "team-b")``, a fixed list;
- **patterns**: a name with ``*``, ``?`` or ``[`` is a shell-style glob
  (``Namespaces("team-*")``), matched against the namespaces that exist now and those
  created later;
- **a label selector on Namespaces**: ``Namespaces(selector="env=prod")``, every namespace
  so labelled, now and later (a namespace relabelled out of it leaves the set). With
  patterns too, a namespace must match a pattern *and* the selector.

Named namespaces are always in the set; patterns and a selector make it dynamic: a watch of
the set then also watches the Namespaces themselves, metadata only (`namespace_set_watcher`
in ``fastctl.kube._namespace_watch``).

A value (frozen, comparable, hashable): equal sets share one watch in a Manager.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from fastctl.kube._selectors import LabelSelector

__all__ = ["NamespaceScope", "Namespaces", "covers", "namespace_scope"]

_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True, init=False)
class Namespaces:
    """A set of namespaces (see the module docstring)."""

    names: tuple[str, ...]
    """The namespaces always in the set (sorted)."""
    patterns: tuple[str, ...]
    """Shell-style globs a namespace's name may match (sorted)."""
    selector: str | None
    """A label selector the Namespace objects must match (with `patterns`: both)."""

    def __init__(self, *names: str, selector: str | None = None) -> None:
        plain: set[str] = set()
        globs: set[str] = set()
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"Namespaces: {name!r} is not a namespace name or pattern")
            (globs if _GLOB & set(name) else plain).add(name)
        if selector is not None:
            if not isinstance(selector, str) or not selector.strip():
                raise ValueError("Namespaces: the selector must be a non-empty label selector")
            LabelSelector.parse(selector)  # malformed: an error now, not on the first event
        if not plain and not globs and selector is None:
            raise ValueError("Namespaces: name at least one namespace, pattern or selector")
        object.__setattr__(self, "names", tuple(sorted(plain)))
        object.__setattr__(self, "patterns", tuple(sorted(globs)))
        object.__setattr__(self, "selector", selector)

    @property
    def is_fixed(self) -> bool:
        """No pattern and no selector: the set is its names, and never changes."""
        return not self.patterns and self.selector is None

    def matches(self, name: str) -> bool:
        """Whether a namespace called `name` is in the set by its name alone: named, or
        matching a pattern (its labels are the selector's business: the Namespace watch
        asks the server for only those that match)."""
        if name in self.names:
            return True
        if not self.patterns:
            return self.selector is not None
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def covers(self, name: str | None) -> bool:
        """Whether an object in namespace `name` may be in the set's watch, as far as the
        name tells (a namespace matching only the selector cannot be excluded here)."""
        return name is not None and self.matches(name)

    def __str__(self) -> str:
        parts = [*self.names, *self.patterns]
        if self.selector is not None:
            parts.append(f"selector={self.selector}")
        return f"Namespaces({', '.join(parts)})"


NamespaceScope = str | Namespaces | None
"""Where a watch looks: one namespace, a set, or every namespace (None)."""


def namespace_scope(value: object, where: str = "namespace") -> NamespaceScope:
    """`value` as a `NamespaceScope`: None, one name (a name with glob characters is a
    pattern, a one-pattern set), a `Namespaces`, or an iterable of names and patterns (a
    set; one plain name stays one namespace)."""
    if value is None or isinstance(value, Namespaces):
        return value
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{where}: an empty namespace name (None watches every namespace)")
        return Namespaces(value) if _GLOB & set(value) else value
    if isinstance(value, Iterable):
        names = list(value)
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"{where}: namespaces are given by name (strings), got {names!r}")
        if len(names) == 1 and not _GLOB & set(names[0]):
            return namespace_scope(names[0], where)
        return Namespaces(*names)
    raise TypeError(
        f"{where}: a namespace name, a list of names, a fastctl.Namespaces or None, "
        f"got {type(value).__name__}"
    )


def covers(scope: NamespaceScope, namespace: str | None) -> bool:
    """Whether an object in `namespace` may be inside `scope` (see `Namespaces.covers`);
    a cluster-scoped object (``None``) is inside every scope."""
    if scope is None or namespace is None:
        return True
    if isinstance(scope, str):
        return namespace == scope
    return scope.covers(namespace)
