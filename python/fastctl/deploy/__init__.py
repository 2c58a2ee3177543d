"""Deploying an operator: the RBAC rules its controllers need and the manifests that run it
(``fastctl manifests``; docs/authoring.md, "Running in a cluster").

Public: `needs` and `PolicyRule` (what an operator declares beyond its controllers),
`derive` (the `Permissions` its controllers need), `DeployOptions`, `manifests` and
`to_yaml` (the objects that run it), and `CERT_DIR` (where the webhook certificate is
mounted). The pieces ``fastctl manifests`` assembles them from are private.
"""

from typing import TYPE_CHECKING, Any

from fastctl.deploy._rbac import derive, needs
from fastctl.deploy._rules import Permissions, PolicyRule

if TYPE_CHECKING:
    from fastctl.deploy._manifests import DeployOptions, manifests, to_yaml
    from fastctl.deploy._webhooks import CERT_DIR


def __getattr__(name: str) -> Any:
    """The manifest names load the webhook package (its configurations): on first use, so
    that an operator module declaring its RBAC with `needs` (imported by ``fastctl run``)
    does not load it."""
    if name in ("DeployOptions", "manifests", "to_yaml"):
        from fastctl.deploy import _manifests

        return getattr(_manifests, name)
    if name == "CERT_DIR":
        from fastctl.deploy import _webhooks

        return _webhooks.CERT_DIR
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CERT_DIR",
    "DeployOptions",
    "Permissions",
    "PolicyRule",
    "derive",
    "manifests",
    "needs",
    "to_yaml",
]
