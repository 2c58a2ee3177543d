"""The objects that tell the API server to call the webhooks, generated from `Webhooks`,
and `install`, which writes them (with the CA bundle) into the cluster.

- `configurations(webhooks, name, url=... | service=...)`: the
  ValidatingWebhookConfiguration and MutatingWebhookConfiguration dicts (those that have a
  webhook), one entry per registration: its rules, ``sideEffects``, ``failurePolicy``,
  ``timeoutSeconds``, selectors, ``admissionReviewVersions: ["v1"]`` and a ``clientConfig``
  that is a `url` (the server's base URL) or a `Service` (in-cluster), plus the path.
- `conversion(converter, ...)`: the ``spec.conversion`` of the converter's CRD.
- `install(client, webhooks, name, ...)`: server-side applies the configurations (fastctl
  owns them whole) and merge-patches each CRD's ``spec.conversion`` (the CRD itself belongs
  to whoever installed it). Run it at start-up when fastctl made the certificate, so the
  ``caBundle`` follows the CA of this process.
- `uninstall(client, webhooks, name)`: takes them out again, for a process that installed
  them for itself alone (a demo, a test); a replicated operator leaves them in place.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import apply, delete, patch
from fastctl.kube._resource import Resource
from fastctl.webhook._admission import AdmissionWebhook
from fastctl.webhook._conversion import Converter
from fastctl.webhook._registry import Webhooks

__all__ = ["Service", "configurations", "conversion", "install", "uninstall"]

_ADMISSION = "admissionregistration.k8s.io/v1"
VALIDATING = Resource(
    _ADMISSION,
    "ValidatingWebhookConfiguration",
    plural="validatingwebhookconfigurations",
    namespaced=False,
)
MUTATING = Resource(
    _ADMISSION,
    "MutatingWebhookConfiguration",
    plural="mutatingwebhookconfigurations",
    namespaced=False,
)
CRD = Resource(
    "apiextensions.k8s.io/v1",
    "CustomResourceDefinition",
    plural="customresourcedefinitions",
    namespaced=False,
)


@dataclass(frozen=True)
class Service:
    """The in-cluster Service in front of the webhook server."""

    name: str
    namespace: str
    port: int = 443

    @property
    def dns_names(self) -> list[str]:
        """The names its serving certificate must carry."""
        return [
            f"{self.name}.{self.namespace}.svc",
            f"{self.name}.{self.namespace}.svc.cluster.local",
        ]


def _client_config(
    path: str, url: str | None, service: Service | None, ca_bundle: bytes | None
) -> dict[str, Any]:
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url= (the server's base URL) and service=")
    config: dict[str, Any]
    if url is not None:
        config = {"url": url.rstrip("/") + path}
    else:
        assert service is not None
        config = {
            "service": {
                "name": service.name,
                "namespace": service.namespace,
                "port": service.port,
                "path": path,
            }
        }
    if ca_bundle is not None:
        config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return config


def _entry(webhook: AdmissionWebhook, client_config: dict[str, Any]) -> dict[str, Any]:
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": [plural],
            "operations": list(webhook.operations),
            "scope": "*",
        }
        for group, version, plural in webhook.resources
    ]
    entry: dict[str, Any] = {
        "name": webhook.name,
        "rules": rules,
        "clientConfig": client_config,
        "admissionReviewVersions": ["v1"],
        "sideEffects": webhook.side_effects,
        "failurePolicy": webhook.failure_policy,
        "timeoutSeconds": webhook.timeout_seconds,
        "matchPolicy": "Equivalent",
    }
    if webhook.namespace_selector is not None:
        entry["namespaceSelector"] = dict(webhook.namespace_selector)
    if webhook.object_selector is not None:
        entry["objectSelector"] = dict(webhook.object_selector)
    if webhook.mutating:
        entry["reinvocationPolicy"] = "Never"
    return entry


def configurations(
    webhooks: Webhooks,
    name: str,
    *,
    url: str | None = None,
    service: Service | None = None,
    ca_bundle: bytes | None = None,
) -> list[dict[str, Any]]:
    """The Validating- and MutatingWebhookConfiguration named `name` (each only if it has
    a webhook)."""
    out = []
    for mutating, kind in ((False, VALIDATING.kind), (True, MUTATING.kind)):
        entries = [
            _entry(w, _client_config(w.path, url, service, ca_bundle))
            for w in webhooks.admission
            if w.mutating is mutating
        ]
        if entries:
            out.append(
                {
                    "apiVersion": _ADMISSION,
                    "kind": kind,
                    "metadata": {"name": name},
                    "webhooks": entries,
                }
            )
    return out


def conversion(
    converter: Converter,
    *,
    url: str | None = None,
    service: Service | None = None,
    ca_bundle: bytes | None = None,
) -> dict[str, Any]:
    """The CRD's ``spec.conversion`` that sends its conversions to `converter`."""
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": _client_config(converter.path, url, service, ca_bundle),
            "conversionReviewVersions": ["v1"],
        },
    }


async def install(
    client: ApiClient,
    webhooks: Webhooks,
    name: str,
    *,
    url: str | None = None,
    service: Service | None = None,
    ca_bundle: bytes | None = None,
    field_manager: str = "fastctl-webhook",
) -> None:
    """Write the configurations and the CRDs' conversion into the cluster (see the module
    docstring): what `configurations` and `conversion` return."""
    for obj in configurations(webhooks, name, url=url, service=service, ca_bundle=ca_bundle):
        resource = MUTATING if obj["kind"] == MUTATING.kind else VALIDATING
        await apply(client, resource, obj, field_manager=field_manager)
    for converter in webhooks.converters:
        spec = conversion(converter, url=url, service=service, ca_bundle=ca_bundle)
        await patch(client, CRD, converter.crd, {"spec": {"conversion": spec}})


async def uninstall(client: ApiClient, webhooks: Webhooks, name: str) -> None:
    """Delete the configurations named `name` and set each converter's CRD back to no
    conversion: once the server is gone, a configuration with ``failurePolicy: Fail``
    would refuse every matching write, and a CRD could not serve its other versions."""
    for resource, mutating in ((VALIDATING, False), (MUTATING, True)):
        if any(w.mutating is mutating for w in webhooks.admission):
            await delete(client, resource, name)
    for converter in webhooks.converters:
        none = {"strategy": "None", "webhook": None}
        await patch(client, CRD, converter.crd, {"spec": {"conversion": none}})
