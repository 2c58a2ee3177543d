"""The parts of an operator's manifests, for ``fastctl manifests --only``.

Many teams install CRDs and RBAC apart from the operator: CRDs once per cluster by a
cluster admin (or a chart's ``crds/`` directory, which Helm installs first and never
upgrades), RBAC reviewed by whoever owns permissions, the Deployment by the team that runs
it. controller-gen writes these as separate outputs for the same reason. The parts:

- ``crds``: the CustomResourceDefinitions (with their conversion stanza, when the operator
  converts: it points at the webhook Service of the ``operator`` part);
- ``rbac``: the ServiceAccount and every Role, RoleBinding, ClusterRole and
  ClusterRoleBinding (the operator's and the metrics' review rules);
- ``operator``: everything else (the Namespace, the Deployment, the webhook Service, its
  configurations and certificate objects).

Selected parts keep the order ``kubectl apply`` needs (see `manifests`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["PARTS", "parse_parts", "part_of", "select_parts"]

PARTS = ("crds", "rbac", "operator")

_RBAC_KINDS = frozenset(
    {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
)


def part_of(obj: Mapping[str, Any]) -> str:
    """The part `obj` belongs to."""
    kind = obj.get("kind")
    if kind == "CustomResourceDefinition":
        return "crds"
    if kind in _RBAC_KINDS:
        return "rbac"
    return "operator"


def parse_parts(text: str) -> frozenset[str]:
    """``"crds,rbac"`` -> the set of parts; `ValueError` naming an unknown one."""
    parts = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = sorted(parts - set(PARTS))
    if unknown or not parts:
        raise ValueError(
            f"unknown part {', '.join(unknown) or '(none given)'}: choose from {', '.join(PARTS)}"
        )
    return parts


_Obj = TypeVar("_Obj", bound=Mapping[str, Any])


def select_parts(objects: Iterable[_Obj], parts: Iterable[str]) -> list[_Obj]:
    """The objects of `parts`, in their order."""
    wanted = frozenset(parts)
    return [obj for obj in objects if part_of(obj) in wanted]
