"""The manifests of an operator with webhooks are accepted by the real API server.

``fastctl manifests`` for the test operator ``tests/kube/operators/webhooked.py`` (one
validating, one mutating and one conversion webhook), in both certificate modes, is
server-side applied with ``dryRun=All``: the API server validates every object as it would
store it (the CRD with its conversion stanza, the Service, the webhook configurations, the
Deployment, the RBAC) and stores nothing. cert-manager is not installed here, so its
Certificate and Issuer are checked against stand-in CRDs that require the fields
cert-manager requires (the API server then checks their scope and shape, not cert-manager's
own rules).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_asyncio.client import ApiClient

from fastctl.cli import main
from fastctl.demo.widgets import install_crd
from fastctl.kube import ApiError, Resource, apply

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

OPERATOR = f"{Path(__file__).parent / 'operators' / 'webhooked.py'}:make"


def stand_in_crd(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {"spec": spec},
                        }
                    },
                }
            ],
        },
    }


CERTIFICATE_SPEC = {
    "type": "object",
    "required": ["secretName", "issuerRef"],
    "properties": {
        "secretName": {"type": "string", "minLength": 1},
        "dnsNames": {"type": "array", "items": {"type": "string"}},
        "issuerRef": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "kind": {"type": "string"}},
        },
    },
}
ISSUER_SPEC = {
    "type": "object",
    "properties": {"selfSigned": {"type": "object"}},
    "x-kubernetes-preserve-unknown-fields": True,
}


@pytest.mark.parametrize("mode", ["cert-manager", "managed"])
async def test_the_webhook_manifests_pass_a_server_side_dry_run(
    client: ApiClient, namespace: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if mode == "cert-manager":
        await install_crd(client, stand_in_crd("Certificate", CERTIFICATE_SPEC))
        await install_crd(client, stand_in_crd("Issuer", ISSUER_SPEC))
    argv = ["manifests", OPERATOR, "--namespace", namespace, "--webhook-certificates", mode]
    assert await asyncio.to_thread(main, argv) == 0  # the command runs its own event loop
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = {d["kind"] for d in docs}
    assert {"Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} <= kinds
    refused = []
    for obj in docs:
        resource = Resource(obj["apiVersion"], obj["kind"])
        try:
            stored = await apply(client, resource, obj, field_manager="manifests", dry_run=True)
        except ApiError as exc:
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {exc}")
            continue
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
    assert not refused, "\n".join(refused)
