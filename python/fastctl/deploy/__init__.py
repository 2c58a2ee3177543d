"""Deploying an operator: the RBAC rules its controllers need and the manifests that run it
(``fastctl manifests``; docs/authoring.md, "Running in a cluster")."""

from fastctl.deploy._manifests import (
    DeployOptions,
    collect_crds,
    deployment,
    manifests,
    metrics_rbac,
    rbac_objects,
    service_account,
    to_yaml,
)
from fastctl.deploy._operator import Operator, describe, resolve_resources
from fastctl.deploy._rbac import (
    BUILTIN_RESOURCES,
    EVENTS_RULE,
    LEASE_RULE,
    Needs,
    Permissions,
    PolicyRule,
    derive,
    needs,
    needs_of,
    resolve_offline,
)
from fastctl.deploy._webhooks import (
    CA_NOTE,
    CERT_DIR,
    MANAGED_RULES,
    shared_secret_rules,
    webhook_objects,
    webhook_rules,
    webhook_secret,
    webhook_service,
)

__all__ = [
    "BUILTIN_RESOURCES",
    "CA_NOTE",
    "CERT_DIR",
    "EVENTS_RULE",
    "LEASE_RULE",
    "MANAGED_RULES",
    "DeployOptions",
    "Needs",
    "Operator",
    "Permissions",
    "PolicyRule",
    "collect_crds",
    "deployment",
    "derive",
    "describe",
    "manifests",
    "metrics_rbac",
    "needs",
    "needs_of",
    "rbac_objects",
    "resolve_offline",
    "resolve_resources",
    "service_account",
    "shared_secret_rules",
    "to_yaml",
    "webhook_objects",
    "webhook_rules",
    "webhook_secret",
    "webhook_service",
]
