"""The configuration objects generated from registrations: what the API server (and
``fastctl manifests``) reads, field by field."""

from __future__ import annotations

import base64

import pytest

from fastctl.kube import Resource
from fastctl.webhook import Allow, Service, Webhooks, configurations, conversion

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
DEPLOYMENT = Resource("apps/v1", "Deployment", plural="deployments", namespaced=True)


def _hooks() -> Webhooks:
    hooks = Webhooks()
    hooks.validating(
        [CONFIGMAP, DEPLOYMENT],
        name="v.example.com",
        operations=["CREATE", "DELETE"],
        failure_policy="Ignore",
        timeout_seconds=5,
        namespace_selector={"matchLabels": {"team": "a"}},
    )(lambda r: Allow())
    hooks.mutating(CONFIGMAP, name="m.example.com", side_effects="NoneOnDryRun")(lambda r: r.object)
    return hooks


def test_one_validating_and_one_mutating_configuration_from_the_registrations() -> None:
    validating, mutating = configurations(
        _hooks(), "op", url="https://127.0.0.1:9443/", ca_bundle=b"PEM"
    )
    assert validating["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["metadata"] == {"name": "op"}
    (entry,) = validating["webhooks"]
    assert entry["name"] == "v.example.com"
    assert entry["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
         "operations": ["CREATE", "DELETE"], "scope": "*"},
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
         "operations": ["CREATE", "DELETE"], "scope": "*"},
    ]  # fmt: skip
    assert entry["clientConfig"] == {
        "url": "https://127.0.0.1:9443/validate/v.example.com",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert entry["admissionReviewVersions"] == ["v1"]
    assert entry["sideEffects"] == "None"
    assert entry["failurePolicy"] == "Ignore"
    assert entry["timeoutSeconds"] == 5
    assert entry["namespaceSelector"] == {"matchLabels": {"team": "a"}}
    (mentry,) = mutating["webhooks"]
    assert mentry["sideEffects"] == "NoneOnDryRun"
    assert mentry["failurePolicy"] == "Fail"
    assert mentry["rules"][0]["operations"] == ["CREATE", "UPDATE"]


def test_a_service_client_config_and_a_crd_conversion() -> None:
    hooks = _hooks()
    widgets = hooks.conversion("widgets.example.com")
    service = Service("op", "ops")
    (_, mutating) = configurations(hooks, "op", service=service)
    assert mutating["webhooks"][0]["clientConfig"] == {
        "service": {"name": "op", "namespace": "ops", "port": 443, "path": "/mutate/m.example.com"}
    }
    assert conversion(widgets, service=service, ca_bundle=b"PEM") == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "service": {"name": "op", "namespace": "ops", "port": 443,
                            "path": "/convert/widgets.example.com"},
                "caBundle": base64.b64encode(b"PEM").decode(),
            },
            "conversionReviewVersions": ["v1"],
        },
    }  # fmt: skip
    assert service.dns_names == ["op.ops.svc", "op.ops.svc.cluster.local"]


def test_exactly_one_of_url_and_service() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        configurations(_hooks(), "op")
