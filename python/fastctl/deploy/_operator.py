"""What an operator declares, read without running it.

``fastctl manifests`` builds the operator as ``fastctl run`` would (the factory gets an
`ApiClient` that is never connected) and reads from what comes back and from its module:

- the controllers (a `Controller`, several, or a `Manager`'s) and, for a `Manager`, its
  own `LeaderElection`;
- CRDs: the module's ``CRDS`` (a list of CRD dicts or of models with a ``crd()``
  classmethod) and ``CRD`` (one dict), a typed controller's model (``Controller(client,
  Model)``), and every watched resource that has a ``crd()``;
- extra rules: the module's ``RBAC`` (a list of `PolicyRule` or Kubernetes ``PolicyRule``
  dicts), for what the reconciles touch that no controller declares (granted where the
  controllers are);
- webhooks: the module's ``WEBHOOKS`` (a `fastctl.webhook.Webhooks`), which the operator's
  webhook server serves.
- a Manager's runnables that need rules of their own: a `StorageMigration` needs its
  CRD and every object of its resource, cluster-wide (`migration_rules`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fastctl.deploy._rbac import migration_rules, resolve_offline
from fastctl.deploy._rules import PolicyRule
from fastctl.kube._resource import Discovery, ResolvedResource, Resource
from fastctl.runtime._storage_migration import StorageMigration
from fastctl.runtime.controller import Controller
from fastctl.runtime.leader._rules import LeaderElection
from fastctl.runtime.manager import Manager

if TYPE_CHECKING:
    from fastctl.webhook._registry import Webhooks

__all__ = ["Operator", "collect_crds", "describe", "resolve_resources"]


@dataclass(frozen=True, slots=True)
class Operator:
    """The controllers, CRDs and extra rules of one operator (see the module docstring).
    `election` is the Manager's own `LeaderElection`; `manager` says a Manager was built,
    and `sharded` that it shards its controllers itself (``fastctl run``'s flags apply to
    it as to the Manager it makes for Controllers, except where the two would conflict).
    `rules` are granted where the controllers are, `cluster_rules` cluster-wide."""

    controllers: tuple[Controller, ...]
    crds: tuple[dict[str, Any], ...] = ()
    rules: tuple[PolicyRule, ...] = ()
    cluster_rules: tuple[PolicyRule, ...] = ()
    manager: bool = False
    election: LeaderElection | None = None
    sharded: bool = False
    webhooks: Webhooks | None = None
    resources: tuple[Resource, ...] = field(init=False)

    def __post_init__(self) -> None:
        seen: dict[Resource, None] = {}
        for ctl in self.controllers:
            seen.update(dict.fromkeys(ctl.resources))
        object.__setattr__(self, "resources", tuple(seen))


def describe(built: Any, module: ModuleType | None = None) -> Operator:
    """The `Operator` behind what a ``fastctl run`` target built (`built`) and its module."""
    manager = isinstance(built, Manager)
    if manager:
        controllers = list(built.controllers)
    elif isinstance(built, Controller):
        controllers = [built]
    elif isinstance(built, Iterable):
        controllers = list(built)
    else:
        controllers = []
    if not controllers or not all(isinstance(c, Controller) for c in controllers):
        raise TypeError(f"expected Controllers or a Manager, got {type(built).__name__}")
    declared: list[Any] = []
    rules: list[PolicyRule] = []
    webhooks = getattr(module, "WEBHOOKS", None) if module is not None else None
    if webhooks is not None:
        # Imported here: the webhook package (its server, certificates) is only needed by
        # an operator that has webhooks, and `fastctl run` starts sooner without it.
        from fastctl.webhook._registry import Webhooks

        if not isinstance(webhooks, Webhooks):
            raise TypeError(f"WEBHOOKS must be a fastctl.webhook.Webhooks, not {type(webhooks)}")
    if module is not None:
        declared.extend(getattr(module, "CRDS", None) or ())
        if isinstance(getattr(module, "CRD", None), Mapping):
            declared.append(module.CRD)
        for value in getattr(module, "RBAC", None) or ():
            rules.extend(PolicyRule.of(value))
    # A typed controller's model carries its CRD: `Controller(client, Model)` needs no CRDS.
    declared.extend(ctl.model for ctl in controllers if ctl.model is not None)
    declared.extend(r for ctl in controllers for r in ctl.resources)
    cluster_rules = [
        rule
        for runnable in (built.runnables if manager else ())
        if isinstance(runnable, StorageMigration)
        for rule in migration_rules(runnable.crd)
    ]
    return Operator(
        tuple(controllers),
        tuple(collect_crds(declared)),
        tuple(rules),
        cluster_rules=tuple(cluster_rules),
        manager=manager,
        election=built.leader_election if manager else None,
        sharded=manager and built.sharding is not None,
        webhooks=webhooks,
    )


def collect_crds(declared: Iterable[Any]) -> list[dict[str, Any]]:
    """CRD dicts from `declared`: dicts as they are, and anything with a callable ``crd()``
    (a typed resource model) by calling it; the first of each name wins."""
    out: dict[str, dict[str, Any]] = {}
    for item in declared:
        make = getattr(item, "crd", None)
        crd = make() if callable(make) else item
        if not isinstance(crd, Mapping) or crd.get("kind") != "CustomResourceDefinition":
            continue
        out.setdefault(str(crd["metadata"]["name"]), dict(crd))
    return list(out.values())


async def resolve_resources(
    operator: Operator, discovery: Discovery | None = None
) -> dict[Resource, ResolvedResource]:
    """Plural and scope of every resource the operator watches: offline (`resolve_offline`)
    where possible, else from `discovery`; `LookupError` naming the first that neither
    knows."""
    out: dict[Resource, ResolvedResource] = {}
    for resource in operator.resources:
        try:
            out[resource] = resolve_offline(resource, operator.crds)
        except LookupError:
            if discovery is None:
                raise
            out[resource] = await discovery.resolve(resource)
    return out
