"""Deploying an operator: the RBAC rules its controllers need and the manifests that run it
(``fastctl manifests``; docs/authoring.md, "Running in a cluster").

Public: `needs` and `PolicyRule` (what an operator declares beyond its controllers),
`derive` (the `Permissions` its controllers need), `DeployOptions`, `manifests` and
`to_yaml` (the objects that run it), and `CERT_DIR` (where the webhook certificate is
mounted). The pieces ``fastctl manifests`` assembles them from are private.
"""

from fastctl.deploy._manifests import DeployOptions, manifests, to_yaml
from fastctl.deploy._rbac import Permissions, PolicyRule, derive, needs
from fastctl.deploy._webhooks import CERT_DIR

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
