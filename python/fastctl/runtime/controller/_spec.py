"""What a controller is, frozen: its resources, relations, options and callbacks.

`Controller`'s builder methods collect a `ControllerSpec`; a run reads only the spec and
the `Environment` it is given (`fastctl.runtime.controller._environment`). The spec says
which watches the controller needs (`WatchUse`): the Manager reads those to share one watch
between controllers that would have opened the same one, and never reaches into the
controller to do it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass, replace
from typing import Any

from fastctl._applier import ApplierConfig
from fastctl.kube._events import Recorder
from fastctl.kube._namespaces import NamespaceScope
from fastctl.kube._resource import Resource
from fastctl.kube._transforms import Transform
from fastctl.kube._watcher import WatchConfig
from fastctl.runtime._children import RelatedCache
from fastctl.runtime._filters import Predicate
from fastctl.runtime._read_your_writes import ReadYourWrites
from fastctl.types import ErrorPolicy, Mapper, ObjectRef, Reconcile

__all__ = ["INHERIT", "PRIMARY", "ControllerSpec", "Relation", "WatchUse"]

_READ_YOUR_WRITES = ReadYourWrites()

PRIMARY = None
"""The use of the primary watch (relation i's use is i)."""


class _Inherit:
    """The relation watches the controller's namespace (the default of `owns`/`watches`)."""

    _instance: _Inherit | None = None

    def __new__(cls) -> _Inherit:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "INHERIT"


INHERIT = _Inherit()
"""A relation's namespace when it names none: the controller's."""


@dataclass(frozen=True, slots=True)
class Relation:
    """A related resource, how its objects map to primary objects, and which of them are
    watched: its own namespace (`INHERIT`: the controller's), selectors and transform."""

    resource: Resource
    mapper: Mapper | None  # None: follow controller owner references to the primary
    reason: str
    cache: RelatedCache | None = None  # cache=True: the objects, for the reconcile
    metadata_only: bool = False
    event_filter: Predicate | None = None
    namespace: NamespaceScope | _Inherit = INHERIT
    label_selector: str | None = None
    field_selector: str | None = None
    transform: Transform | None = None

    def namespace_in(self, spec: ControllerSpec) -> NamespaceScope:
        """Where this relation watches, in the controller `spec`."""
        return spec.namespace if isinstance(self.namespace, _Inherit) else self.namespace


@dataclass(frozen=True, slots=True)
class WatchUse:
    """One watch a controller needs: `use` is None for the primary, i for relation i (two
    relations on one resource are two uses, each with its own subscription)."""

    use: int | None
    resource: Resource
    namespace: NamespaceScope
    config: WatchConfig


@dataclass(frozen=True, slots=True)
class ControllerSpec:
    """Everything that defines a controller, and nothing about a run of it."""

    name: str
    resource: Resource
    reconcile: Reconcile
    context: Any
    error_policy: ErrorPolicy | None
    config: ApplierConfig
    watch_config: WatchConfig
    namespace: NamespaceScope
    relations: tuple[Relation, ...]
    resync_sources: tuple[AsyncIterable[Any], ...]
    trigger_sources: tuple[AsyncIterable[ObjectRef], ...]
    event_filter: Predicate | None
    ignore_own_writes: bool
    recorder: Recorder | None
    read_your_writes: ReadYourWrites = _READ_YOUR_WRITES

    @property
    def resources(self) -> list[Resource]:
        """Every resource the controller watches: the primary first."""
        return [self.resource, *(rel.resource for rel in self.relations)]

    @property
    def caches(self) -> list[RelatedCache]:
        return [rel.cache for rel in self.relations if rel.cache is not None]

    def watch_config_for(self, relation: Relation | Resource) -> WatchConfig:
        """The primary resource is watched with `watch_config`; a related one with the
        primary's list and watch options but its own selectors and transform (the
        primary's select and shape primary objects, not the objects related to them).
        Given a `Resource`: the primary's config, or that of its first relation."""
        if isinstance(relation, Resource):
            if relation == self.resource:
                return self.watch_config
            found = next((r for r in self.relations if r.resource == relation), None)
            relation = found if found is not None else Relation(relation, None, "")
        return replace(
            self.watch_config,
            label_selector=relation.label_selector,
            field_selector=relation.field_selector,
            metadata_only=relation.metadata_only,
            transform=relation.transform,
        )

    def shares_primary_watch(self, relation: Relation) -> bool:
        """Whether `relation` watches exactly what the primary watches: its resource is the
        primary's own kind (``owns(R)`` of a Widget that owns Widgets), in the same
        namespace, with the same selectors and transform, and no cache of its own. A run
        on its own then reads the relation's events off the primary's watch rather than
        opening a second one (a Manager shares the two uses as one watch anyway)."""
        return (
            relation.resource == self.resource
            and relation.cache is None
            and relation.namespace_in(self) == self.namespace
            and self.watch_config_for(relation) == self.watch_config
        )

    def watch_uses(self) -> list[WatchUse]:
        """Every watch a run of this controller opens, the primary's first."""
        uses = [WatchUse(PRIMARY, self.resource, self.namespace, self.watch_config)]
        for i, rel in enumerate(self.relations):
            uses.append(
                WatchUse(i, rel.resource, rel.namespace_in(self), self.watch_config_for(rel))
            )
        return uses
