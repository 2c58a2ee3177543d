"""RBAC rules: one `PolicyRule`, and an operator's `Permissions`, its rules by where they
are granted (the ClusterRole, a Role per namespace), merged from grants one (scope, group,
resource, names) at a time. What the rules are for a set of controllers is `_rbac`'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastctl.kube._resource import ResolvedResource

__all__ = ["Grants", "Permissions", "PolicyRule"]


@dataclass(frozen=True, slots=True, order=True)
class PolicyRule:
    """One RBAC policy rule: `verbs` on `resources` (``plural`` or ``plural/subresource``)
    of `api_group` (``""``: the core group); with `resource_names`, on the objects of those
    names only. RBAC cannot limit ``create`` or ``deletecollection`` by name (a new object's
    name is not known when the request is authorized), so a rule with names refuses them;
    a ``list`` or ``watch`` it allows must select its object with a ``metadata.name`` field
    selector."""

    api_group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.resources or not self.verbs:
            raise ValueError(f"a PolicyRule needs resources and verbs, got {self!r}")
        if isinstance(self.resource_names, str):
            raise TypeError(
                f"a PolicyRule's resource_names is a tuple of names, got the string "
                f"{self.resource_names!r}"
            )
        unnamed = {"create", "deletecollection", "*"} & set(self.verbs)
        if self.resource_names and unnamed:
            raise ValueError(
                "a PolicyRule limited to resource_names cannot grant "
                f"{', '.join(sorted(unnamed))}: "
                f"RBAC authorizes them before a name is known; give them a rule of their own, "
                f"got {self!r}"
            )

    @classmethod
    def of(cls, value: PolicyRule | Mapping[str, Any]) -> list[PolicyRule]:
        """A `PolicyRule`, or rules from a Kubernetes ``PolicyRule`` dict (``apiGroups``,
        ``resources``, ``verbs``, optional ``resourceNames``; one `PolicyRule` per group)."""
        if isinstance(value, PolicyRule):
            return [value]
        groups = value.get("apiGroups")
        resources = value.get("resources")
        verbs = value.get("verbs")
        if not groups or not resources or not verbs:
            raise ValueError(f"an RBAC rule needs apiGroups, resources and verbs: {value!r}")
        names = tuple(value.get("resourceNames") or ())
        return [cls(g, tuple(resources), tuple(verbs), names) for g in groups]

    def as_policy_rule(self) -> dict[str, Any]:
        """The ``PolicyRule`` of a Role or ClusterRole."""
        rule: dict[str, Any] = {
            "apiGroups": [self.api_group],
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule

    def grants(self) -> set[tuple[str, str, str]]:
        """Each (group, resource, verb) the rule allows on every object of the resource:
        none for a rule limited to `resource_names`."""
        if self.resource_names:
            return set()
        return {(self.api_group, r, v) for r in self.resources for v in self.verbs}


@dataclass(frozen=True, slots=True)
class Permissions:
    """The rules of an operator, by where they must be granted: `cluster` in a ClusterRole
    (controllers of all namespaces, cluster-scoped resources), `namespaced` in a Role of
    each namespace (controllers of one namespace, the Lease)."""

    cluster: tuple[PolicyRule, ...] = ()
    namespaced: Mapping[str, tuple[PolicyRule, ...]] = field(default_factory=dict)

    def grants(self, namespace: str | None = None) -> set[tuple[str, str, str]]:
        """Each (group, resource, verb) granted in `namespace` (cluster-wide ones too)."""
        rules = [*self.cluster, *(self.namespaced.get(namespace, ()) if namespace else ())]
        return {g for rule in rules for g in rule.grants()}


class Grants:
    """(scope, group, resource, names) -> verbs, merged; scope ``None`` is cluster-wide,
    names ``()`` every object. Verbs limited to some names stay in a rule of their own:
    merged into the resource's rule they would apply to every object."""

    def __init__(self) -> None:
        self._verbs: dict[tuple[str | None, str, str, tuple[str, ...]], set[str]] = {}

    def add(
        self,
        scope: str | None,
        group: str,
        resource: str,
        verbs: Iterable[str],
        names: tuple[str, ...] = (),
    ) -> None:
        key = (scope, group, resource, tuple(sorted(set(names))))
        self._verbs.setdefault(key, set()).update(verbs)

    def add_rules(self, scope: str | None, rules: Iterable[PolicyRule]) -> None:
        for rule in rules:
            for plural in rule.resources:
                self.add(scope, rule.api_group, plural, rule.verbs, rule.resource_names)

    def add_resource(
        self, scope: str | None, res: ResolvedResource, verbs: Iterable[str], sub: str = ""
    ) -> None:
        plural = f"{res.plural}/{sub}" if sub else res.plural
        self.add(scope if res.namespaced else None, res.group, plural, verbs)

    def permissions(self) -> Permissions:
        cluster: list[PolicyRule] = []
        namespaced: dict[str, list[PolicyRule]] = {}
        for (scope, group, resource, names), verbs in sorted(
            self._verbs.items(), key=lambda item: (item[0][0] or "", *item[0][1:])
        ):
            if not verbs:
                continue
            if names:  # what the resource's own rule grants on every object is not repeated
                verbs = verbs - self._verbs.get((scope, group, resource, ()), set())
                if not verbs:
                    continue
            rule = PolicyRule(group, (resource,), tuple(sorted(verbs)), names)
            (cluster if scope is None else namespaced.setdefault(scope, [])).append(rule)
        return Permissions(tuple(cluster), {ns: tuple(r) for ns, r in namespaced.items()})
