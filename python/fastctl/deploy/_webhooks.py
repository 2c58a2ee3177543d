"""The objects that let the API server call an operator's webhooks once it is deployed.

When the operator's module registers webhooks (a module-level ``WEBHOOKS``, a
`fastctl.webhook.Webhooks`), the API server must reach its webhook server in the pods and
trust its certificate. `webhook_objects` writes what that takes, beside the Deployment:

- a Service ``<name>-webhook`` in the operator's namespace, port 443 to the container's
  ``webhook`` port (`DeployOptions.webhook_port`, the `WebhookServer`'s ``port``): every
  replica serves (webhooks are not leader-elected), so the Service selects them all;
- the ValidatingWebhookConfiguration and MutatingWebhookConfiguration
  (`fastctl.webhook.configurations`), and the ``spec.conversion`` of each converter's CRD
  (`fastctl.webhook.conversion`), all pointing at that Service;
- the certificate, in one of two ways (`DeployOptions.webhook_certificates`):

  ``"cert-manager"`` (the default): a self-signed cert-manager Issuer and a Certificate for
  the Service's DNS names, stored in the Secret ``<name>-webhook-tls``, which the Deployment
  mounts read-only at `CERT_DIR` (serve it with ``ServingCertificate.from_files``); the
  configurations and CRDs carry ``cert-manager.io/inject-ca-from``, so cert-manager's CA
  injector writes their ``caBundle``. The manifests are complete, and the operator needs
  no right to change webhook configurations or CRDs.

  ``"managed"``: no certificate objects; the operator makes its own CA at start and patches
  the ``caBundle`` into the configurations and CRDs (``fastctl.webhook.install``, run by a
  managed webhook server), so its ClusterRole also gets `MANAGED_RULES`; the replicas
  share that CA through a Secret in the operator's namespace, which its Role lets it create,
  and read and patch by name (`shared_secret_rules`). The
  configurations carry the annotation `CA_NOTE` that says so. Needs no cert-manager in the
  cluster, at the price of those cluster-wide rights.

The choice of default: manifests are applied by people and pipelines that expect them to
say everything, and an operator able to rewrite any webhook configuration and CRD is a
larger target than one that reads a Secret.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from fastctl.deploy._rules import PolicyRule
from fastctl.webhook._configuration import Service, configurations, conversion
from fastctl.webhook._managed import shared_secret_of
from fastctl.webhook._registry import Webhooks

if TYPE_CHECKING:
    from fastctl.deploy._manifests import DeployOptions

__all__ = [
    "CA_NOTE",
    "CERT_DIR",
    "MANAGED_RULES",
    "CertificateMode",
    "shared_secret_rules",
    "webhook_objects",
    "webhook_rules",
    "webhook_secret",
    "webhook_service",
]

Obj = dict[str, Any]
CertificateMode = Literal["cert-manager", "managed"]

CERT_DIR = "/etc/fastctl/webhook"
"""Where the Deployment mounts the serving certificate's Secret (``tls.crt``, ``tls.key``)
in cert-manager mode."""

CA_NOTE = "webhook.fastctl.dev/ca-bundle"
"""The annotation, in managed mode, that says the operator patches the ``caBundle`` at
start."""

MANAGED_RULES = (
    PolicyRule(
        "admissionregistration.k8s.io",
        ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"),
        ("create", "patch"),
    ),
)
"""What ``fastctl.webhook.install`` sends for the configurations: a server-side apply (a
PATCH, authorized as a create when it creates one)."""


def shared_secret_rules(options: DeployOptions) -> tuple[PolicyRule, PolicyRule]:
    """Managed mode, in the operator's namespace: the Secret in which the replicas share one
    CA and serving certificate (`fastctl.webhook.shared_secret_of` of `webhook_service`),
    created by the first replica, read and renewed by all. ``get`` and ``patch`` are limited
    to that Secret's name; ``create`` cannot be (RBAC authorizes a create before the name
    is known), so it has a rule of its own: the operator may create Secrets in its
    namespace, but read or change no other."""
    name = shared_secret_of(webhook_service(options)).name
    return (
        PolicyRule("", ("secrets",), ("create",)),
        PolicyRule("", ("secrets",), ("get", "patch"), resource_names=(name,)),
    )


CRD_PATCH_RULE = PolicyRule("apiextensions.k8s.io", ("customresourcedefinitions",), ("patch",))
"""And for each converter's CRD: a merge patch of ``spec.conversion``."""

_INJECT = "cert-manager.io/inject-ca-from"


def webhook_service(options: DeployOptions) -> Service:
    """The Service the configurations point at (port 443)."""
    return Service(f"{options.name}-webhook", options.operator_namespace)


def webhook_rules(options: DeployOptions, webhooks: Webhooks) -> tuple[PolicyRule, ...]:
    """The cluster-wide rules the operator needs for its webhooks: none with cert-manager;
    in managed mode, those ``install`` uses."""
    if options.webhook_certificates != "managed":
        return ()
    return (*MANAGED_RULES, CRD_PATCH_RULE) if webhooks.converters else MANAGED_RULES


def _annotate(obj: Obj, annotations: Mapping[str, str]) -> Obj:
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return obj


def _certificate_objects(options: DeployOptions, service: Service) -> list[Obj]:
    labels = options.labels
    issuer = f"{options.name}-selfsigned"
    meta = {"namespace": options.operator_namespace, "labels": dict(labels)}
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": issuer, **meta},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": service.name, **meta},
            "spec": {
                "secretName": webhook_secret(options),
                "dnsNames": service.dns_names,
                "issuerRef": {"kind": "Issuer", "name": issuer},
            },
        },
    ]


def webhook_secret(options: DeployOptions) -> str:
    """The Secret cert-manager writes the serving certificate into."""
    return f"{options.name}-webhook-tls"


def webhook_objects(
    options: DeployOptions, webhooks: Webhooks, crds: Iterable[Mapping[str, Any]]
) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """``(crds, before, after)``: `crds` with each converter's ``spec.conversion`` (and CA
    annotation) set; the Service and certificate objects, to apply before the Deployment;
    the webhook configurations, to apply after it.
    `ValueError` for a converter whose CRD is not among `crds` (export it in ``CRDS``)."""
    service = webhook_service(options)
    if options.webhook_certificates == "cert-manager":
        annotations = {_INJECT: f"{options.operator_namespace}/{service.name}"}
    elif options.webhook_certificates == "managed":
        annotations = {CA_NOTE: "patched by the operator at start (fastctl managed mode)"}
    else:
        raise ValueError(
            f"webhook_certificates must be 'cert-manager' or 'managed', "
            f"not {options.webhook_certificates!r}"
        )
    by_name = {str(c["metadata"]["name"]): copy.deepcopy(dict(c)) for c in crds}
    for converter in webhooks.converters:
        crd = by_name.get(converter.crd)
        if crd is None:
            raise ValueError(
                f"a conversion webhook is registered for CRD {converter.crd}, which the "
                f"module does not export: add it to CRDS (known: {sorted(by_name) or 'none'})"
            )
        crd["spec"]["conversion"] = conversion(converter, service=service)
        _annotate(crd, annotations)
    objects: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": service.name,
                "namespace": service.namespace,
                "labels": dict(options.labels),
            },
            "spec": {
                "selector": {"app.kubernetes.io/name": options.name},
                "ports": [
                    {
                        "name": "webhook",
                        "port": service.port,
                        "targetPort": "webhook",
                        "protocol": "TCP",
                    }
                ],
            },
        }
    ]
    if options.webhook_certificates == "cert-manager":
        objects.extend(_certificate_objects(options, service))
    after = []
    for configuration in configurations(webhooks, options.name, service=service):
        configuration["metadata"]["labels"] = dict(options.labels)
        after.append(_annotate(configuration, annotations))
    return list(by_name.values()), objects, after
