"""The kinds a fake cluster serves: a few built-in ones, and custom resources from their
CRDs (installed as objects, as on a real server, or from a model's generated CRD).

A kind knows what the server needs to address and treat its objects: group, version,
plural, scope, whether it has a ``status`` subresource (then the object's endpoint ignores
status and the status endpoint ignores everything else), whether its spec bumps
``metadata.generation``, and the structural schema its objects are checked against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BUILTIN", "Kind", "kinds_of_crd"]


@dataclass(frozen=True)
class Kind:
    """One served kind at one version."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    status: bool = False
    generation: bool = False
    schema: Mapping[str, Any] | None = None
    singular: str = ""
    short_names: tuple[str, ...] = ()
    storage: bool = False
    """Its CRD stores objects at this version."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """How the server names this resource (``widgets.example.com``, ``configmaps``);
        one name for every version of a kind."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[dict[str, Any]]:
        """Its entries of an ``APIResourceList``."""
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        entries: list[dict[str, Any]] = [
            {
                "name": self.plural,
                "singularName": self.singular or self.kind.lower(),
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": verbs,
                **({"shortNames": list(self.short_names)} if self.short_names else {}),
            }
        ]
        if self.status:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


def _core(kind: str, plural: str, **kw: Any) -> Kind:
    return Kind("", "v1", kind, plural, **kw)


CRD_KIND = Kind(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
    status=True,
    generation=True,
)

BUILTIN: tuple[Kind, ...] = (
    _core("Namespace", "namespaces", namespaced=False, status=True),
    _core("ConfigMap", "configmaps", short_names=("cm",)),
    _core("Secret", "secrets"),
    _core("ServiceAccount", "serviceaccounts", short_names=("sa",)),
    _core("Service", "services", status=True, short_names=("svc",)),
    _core("Pod", "pods", status=True, generation=True, short_names=("po",)),
    _core("Event", "events", short_names=("ev",)),
    _core("PersistentVolumeClaim", "persistentvolumeclaims", status=True),
    Kind("apps", "v1", "Deployment", "deployments", status=True, generation=True),
    Kind("apps", "v1", "StatefulSet", "statefulsets", status=True, generation=True),
    Kind("batch", "v1", "Job", "jobs", status=True, generation=True),
    Kind("coordination.k8s.io", "v1", "Lease", "leases"),
    Kind("events.k8s.io", "v1", "Event", "events"),
    Kind("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    Kind("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    Kind("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    Kind(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
    ),
    CRD_KIND,
)


def kinds_of_crd(crd: Mapping[str, Any]) -> list[Kind]:
    """The kinds (one per served version) a ``CustomResourceDefinition`` object defines."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        out.append(
            Kind(
                str(spec["group"]),
                str(version["name"]),
                str(names["kind"]),
                str(names["plural"]),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status="status" in (version.get("subresources") or {}),
                generation=True,
                schema=schema,
                singular=str(names.get("singular") or ""),
                short_names=tuple(names.get("shortNames") or ()),
                storage=bool(version.get("storage")),
            )
        )
    return out
