"""The RBAC rules an operator needs, derived from the controllers it declares.

Kubernetes authorizes every request by (API group, resource, verb), so the rules follow from
the requests fastctl makes for a controller, one source each:

=================================  ===========================================  =========
what the controller declares       the request fastctl sends                    verbs
=================================  ===========================================  =========
the primary resource               list, then watch (the reflector)             list watch
``owns(resource)``/``watches``     list, then watch                             list watch
the owned children (`Needs.owned`)  `apply` (a PATCH that may create), `delete`  create patch delete
a kind in `Needs.verbs`             what the reconcile says it sends for that kind  as given
status (`Needs.status`)             `apply_status`: PATCH of ``<plural>/status``  patch
a finalizer (`Needs.finalizer`)     JSON patch of ``metadata.finalizers``; a GET  get patch
                                   of the object when another writer changed them
Events (`Needs.events`)             `Recorder`: POST, then PATCH of a series     create patch
leader election                     GET, POST, PUT of one ``coordination`` Lease  get create update
a `StorageMigration` runnable       GET of its CRD, PATCH of its status; a list  (see
                                   of the resource in every namespace, a PATCH  `migration_rules`)
                                   of each object
=================================  ===========================================  =========

A watch never GETs one object, so the primary and the watched resources get no ``get``: a
reconcile that calls `fastctl.kube.get` declares it (``verbs={KIND: ("get",)}``). The verbs
are per kind because the kinds are not alike: an operator applies a Secret it generates but
never deletes it (garbage collection does, through the owner reference), so the Secret's
rule should not carry the ``delete`` its ConfigMaps need; ``verbs=`` states each kind's
verbs where the one `owned` default would grant every owned kind the same.
What a controller's reconcile does beyond these is declared with `needs` (or a module-level
``RBAC`` list, read by ``fastctl manifests``); the defaults of `Needs` are what the example
operator and the patterns in docs/kubernetes.md use, and each can be turned off.

Resources are named by plural, which `Resource` may not carry: `resolve_offline` takes it
from the resource itself, from the CRDs the operator ships, or from a table of built-in
kinds, and otherwise fails naming the resource (``fastctl manifests --kubeconfig`` asks
discovery instead).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastctl.deploy._rules import Grants, Permissions, PolicyRule
from fastctl.kube._namespaces import Namespaces, NamespaceScope
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.runtime._typed import is_model
from fastctl.runtime.controller import Controller

if TYPE_CHECKING:
    from fastctl.kube._model import CustomResource

__all__ = [
    "BUILTIN_RESOURCES",
    "EVENTS_RULE",
    "LEASE_RULE",
    "NAMESPACES_RULE",
    "Needs",
    "derive",
    "migration_rules",
    "needs",
    "needs_of",
    "resolve_offline",
]


EVENTS_RULE = PolicyRule("events.k8s.io", ("events",), ("create", "patch"))
"""What `fastctl.kube.Recorder` sends: a POST per new Event, a PATCH per repeat."""
LEASE_RULE = PolicyRule("coordination.k8s.io", ("leases",), ("create", "get", "update"))
"""What the leader elector sends: GET, POST (the first time), PUT (acquire and renew)."""


@dataclass(frozen=True, slots=True)
class Needs:
    """What a controller's reconcile does beyond watching (the defaults: what the example
    operator does; turn off what a reconcile does not do, so the Role stays minimal).

    - `status`: writes the primary's status (`apply_status`): patch ``<plural>/status``.
    - `finalizer`: uses `fastctl.kube.finalizer`: patch the primary, and get it (read again
      when the patch meets a concurrent change of the finalizers).
    - `events`: publishes Events with a `Recorder`: create/patch ``events.k8s.io`` events.
      Granted anyway while the controller records failure Events (`ApplierConfig`'s
      `failure_events`, on by default): turn both off to leave Events out of the Role.
    - `owned`: the verbs on every owned resource beyond list/watch: ``patch`` and
      ``create`` for `apply` (a server-side apply that creates the object is authorized as
      both), ``delete`` for `delete`; add ``get`` if the reconcile calls `get`.
    - `verbs`: the verbs beyond list/watch per resource the controller watches, for the
      kinds that differ: an owned resource's replace `owned`; the primary's and a watched
      resource's are added (a ``get`` of the primary, of a referenced Secret).
    - `rules`: anything else the reconcile touches (e.g. reading a Secret).
    """

    status: bool = True
    finalizer: bool = True
    events: bool = True
    owned: tuple[str, ...] = ("create", "patch", "delete")
    rules: tuple[PolicyRule, ...] = ()
    verbs: Mapping[Resource, tuple[str, ...]] = field(default_factory=dict)

    def verbs_of(self, controller: Controller, resource: Resource) -> tuple[str, ...]:
        """What `resource`, one of `controller`'s, is granted beyond list/watch (the
        primary's status and finalizer verbs aside)."""
        if resource in self.verbs:
            return self.verbs[resource]
        return self.owned if resource in controller.owned else ()


_DECLARED: weakref.WeakKeyDictionary[Controller, Needs] = weakref.WeakKeyDictionary()


def needs(
    controller: Controller,
    *,
    status: bool = True,
    finalizer: bool = True,
    events: bool = True,
    owned: Sequence[str] = ("create", "patch", "delete"),
    rules: Iterable[PolicyRule | Mapping[str, Any]] = (),
    verbs: Mapping[Resource | type[CustomResource], Sequence[str]] | None = None,
) -> Controller:
    """Declare what `controller`'s reconcile does (see `Needs`); returns the controller, so a
    factory can end with ``return needs(Controller(...).owns(CM), events=False)``. It has no
    effect on running: ``fastctl manifests`` reads it to write the Role.

    `verbs` maps a resource the controller watches (a `Resource`, or the `CustomResource`
    model of a typed primary) to its verbs, e.g. ``{SECRET: ("create", "patch")}`` for a
    Secret the reconcile applies and never deletes. Call it after ``owns``/``watches``: a
    resource the controller does not watch is refused, since its verbs would be granted
    nowhere (a rule for it goes in `rules`)."""
    if not isinstance(controller, Controller):
        raise TypeError(f"expected a fastctl.Controller, got {type(controller).__name__}")
    extra = tuple(r for value in rules for r in PolicyRule.of(value))
    per_kind = _per_kind(controller, verbs or {})
    _DECLARED[controller] = Needs(status, finalizer, events, _verb_tuple(owned), extra, per_kind)
    return controller


def _verb_tuple(verbs: Sequence[str], what: str = "owned") -> tuple[str, ...]:
    """`verbs` as a tuple; a bare string is refused (it would be read letter by letter)."""
    if isinstance(verbs, str) or not all(isinstance(v, str) and v for v in verbs):
        raise TypeError(f"{what}: verbs are a sequence of verb names, got {verbs!r}")
    return tuple(verbs)


def _per_kind(
    controller: Controller, verbs: Mapping[Resource | type[CustomResource], Sequence[str]]
) -> dict[Resource, tuple[str, ...]]:
    """`verbs` keyed by `Resource`, each one a resource `controller` watches."""
    watched = controller.resources
    per_kind: dict[Resource, tuple[str, ...]] = {}
    for key, value in verbs.items():
        if isinstance(key, Resource):
            resource = key
        elif is_model(key):
            resource = key.resource()
        else:
            raise TypeError(f"needs(verbs=...): a key is a Resource or a model, got {key!r}")
        if resource not in watched:
            names = ", ".join(str(r) for r in watched)
            raise ValueError(
                f"needs(verbs=...): controller {controller.name!r} does not watch {key}; "
                f"it watches {names} (call needs() after owns()/watches(), or give a rule "
                "for other resources in rules=)"
            )
        per_kind[resource] = _verb_tuple(value, f"verbs of {resource}")
    return per_kind


def needs_of(controller: Controller) -> Needs:
    """What `needs` declared for `controller`, or the defaults."""
    return _DECLARED.get(controller, Needs())


# (group, kind) -> (plural, namespaced), for the kinds every cluster serves.
BUILTIN_RESOURCES: Mapping[tuple[str, str], tuple[str, bool]] = {
    ("", "ConfigMap"): ("configmaps", True),
    ("", "Secret"): ("secrets", True),
    ("", "Service"): ("services", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("", "Pod"): ("pods", True),
    ("", "Endpoints"): ("endpoints", True),
    ("", "Event"): ("events", True),
    ("", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("", "ResourceQuota"): ("resourcequotas", True),
    ("", "LimitRange"): ("limitranges", True),
    ("", "Namespace"): ("namespaces", False),
    ("", "Node"): ("nodes", False),
    ("", "PersistentVolume"): ("persistentvolumes", False),
    ("apps", "Deployment"): ("deployments", True),
    ("apps", "StatefulSet"): ("statefulsets", True),
    ("apps", "DaemonSet"): ("daemonsets", True),
    ("apps", "ReplicaSet"): ("replicasets", True),
    ("batch", "Job"): ("jobs", True),
    ("batch", "CronJob"): ("cronjobs", True),
    ("autoscaling", "HorizontalPodAutoscaler"): ("horizontalpodautoscalers", True),
    ("policy", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("networking.k8s.io", "Ingress"): ("ingresses", True),
    ("networking.k8s.io", "NetworkPolicy"): ("networkpolicies", True),
    ("coordination.k8s.io", "Lease"): ("leases", True),
    ("events.k8s.io", "Event"): ("events", True),
    ("discovery.k8s.io", "EndpointSlice"): ("endpointslices", True),
    ("rbac.authorization.k8s.io", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("storage.k8s.io", "StorageClass"): ("storageclasses", False),
}


def crd_names(crds: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, bool]]:
    """(group, kind) -> (plural, namespaced), from CustomResourceDefinition dicts."""
    names: dict[tuple[str, str], tuple[str, bool]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        kind = (spec.get("names") or {}).get("kind")
        plural = (spec.get("names") or {}).get("plural")
        if spec.get("group") and kind and plural:
            names[(spec["group"], kind)] = (plural, spec.get("scope", "Namespaced") != "Cluster")
    return names


def resolve_offline(resource: Resource, crds: Iterable[Mapping[str, Any]] = ()) -> ResolvedResource:
    """`resource` with plural and scope from itself, from `crds`, or from the built-in
    table; `LookupError` naming it when none knows (give ``plural=`` and ``namespaced=``,
    ship its CRD, or ask discovery)."""
    key = (resource.group, resource.kind)
    plural, namespaced = resource.plural, resource.namespaced
    known = crd_names(crds).get(key) or BUILTIN_RESOURCES.get(key)
    if known is not None:
        plural = plural or known[0]
        namespaced = known[1] if namespaced is None else namespaced
    if plural is None or namespaced is None:
        raise LookupError(
            f"{resource}: plural and scope unknown offline; give Resource(..., plural=..., "
            "namespaced=...), export its CRD (CRDS), or pass --kubeconfig to use discovery"
        )
    return ResolvedResource(resource.group, resource.version, resource.kind, plural, namespaced)


NAMESPACES_RULE = PolicyRule("", ("namespaces",), ("list", "watch"))
"""What a watch of a set of namespaces given by patterns or a selector needs: it watches
the Namespaces (metadata only) to follow the set."""


def migration_rules(crd: str) -> list[PolicyRule]:
    """What a storage-version migration of the CRD named `crd` (``<plural>.<group>``)
    sends (`fastctl.kube._storage_migration`): a GET of the CRD and a PATCH of its
    ``status`` (``storedVersions``), limited to that CRD by name; a list of the resource in
    every namespace and a PATCH of each object (the no-op write that re-encodes it). All
    cluster-wide: a CRD is cluster-scoped, and the migration rewrites every object of the
    resource wherever it is, whatever namespace the controllers watch."""
    plural, _, group = crd.partition(".")
    if not plural or not group:
        raise ValueError(f"a CRD's name is <plural>.<group>, got {crd!r}")
    crds = "apiextensions.k8s.io"
    return [
        PolicyRule(crds, ("customresourcedefinitions",), ("get",), (crd,)),
        PolicyRule(crds, ("customresourcedefinitions/status",), ("patch",), (crd,)),
        PolicyRule(group, (plural,), ("list", "patch")),
    ]


def _grant_scopes(namespace: NamespaceScope, grants: Grants) -> list[str | None]:
    """Where a watch of `namespace` is granted: one namespace's Role, a Role in each
    namespace of a fixed set, or the ClusterRole (all namespaces, and a set given by
    patterns or a selector: its namespaces are not known when the manifests are written,
    and a namespace created later must be watchable at once; such a set also needs to
    list and watch the Namespaces, granted here)."""
    if isinstance(namespace, Namespaces):
        if namespace.is_fixed:
            return list(namespace.names)
        grants.add_rules(None, [NAMESPACES_RULE])
        return [None]
    return [namespace]


def derive(
    controllers: Iterable[Controller],
    resolved: Mapping[Resource, ResolvedResource],
    *,
    lease_namespace: str | None = None,
    extra: Iterable[PolicyRule] = (),
    extra_namespace: str | None = None,
    cluster_extra: Iterable[PolicyRule] = (),
) -> Permissions:
    """The rules `controllers` need (see the module docstring), with every `Resource` they
    name resolved in `resolved`; the Lease's in `lease_namespace` (``None``: no leader
    election); `extra` rules in `extra_namespace` (``None``: cluster-wide), and
    `cluster_extra` cluster-wide whatever the namespace (a runnable's, `migration_rules`)."""
    grants = Grants()
    for ctl in controllers:
        declared = needs_of(ctl)
        spec = ctl.spec
        scopes = _grant_scopes(spec.namespace, grants)
        primary = resolved[ctl.resource]
        for scope in scopes:
            grants.add_resource(
                scope, primary, ("list", "watch", *declared.verbs_of(ctl, ctl.resource))
            )
            if declared.status:
                grants.add_resource(scope, primary, ("patch",), sub="status")
            if declared.finalizer:
                grants.add_resource(scope, primary, ("get", "patch"))
            # A controller records a Warning Event on a failed reconcile unless told not
            # to (`ApplierConfig.failure_events`), whatever its reconcile publishes.
            if declared.events or ctl.config.failure_events:
                grants.add_rules(scope, [EVENTS_RULE])
            grants.add_rules(scope, declared.rules)
        for rel in spec.relations:
            res = resolved[rel.resource]
            # Watched where the relation watches; written (its extra verbs) where the
            # reconciles run, the controller's namespaces, and where it watches.
            writes = declared.verbs_of(ctl, rel.resource)
            watched = _grant_scopes(rel.namespace_in(spec), grants)
            for scope in watched:
                grants.add_resource(scope, res, ("list", "watch", *writes))
            if writes:
                for scope in scopes:
                    grants.add_resource(scope, res, writes)
    if lease_namespace is not None:
        grants.add_rules(lease_namespace, [LEASE_RULE])
    grants.add_rules(extra_namespace, extra)
    grants.add_rules(None, cluster_extra)
    return grants.permissions()
