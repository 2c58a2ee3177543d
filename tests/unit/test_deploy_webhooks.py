"""``fastctl manifests`` for an operator with webhooks: the test operator
``tests/kube/operators/webhooked.py`` registers one validating, one mutating and one
conversion webhook; the manifests must route the API server to its pods (Service → the
container's webhook port), name every webhook at its path, set the CRD's conversion, and
certify it with cert-manager (default) or say that the operator patches the caBundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from fastctl.cli import main
from fastctl.deploy import CERT_DIR, DeployOptions, Permissions, manifests
from fastctl.deploy._webhooks import CA_NOTE
from fastctl.webhook import Webhooks

OPERATOR = str(Path(__file__).parents[1] / "kube" / "operators" / "webhooked.py") + ":make"
INJECT = "cert-manager.io/inject-ca-from"


METRICS_RBAC = ("-metrics-auth", "-metrics-reader")
"""The secure metrics' ClusterRoles and binding, filed apart from the operator's own."""


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, Any]]:
    """The manifests by kind; the metrics' RBAC objects under ``kind/name``."""
    assert main(["manifests", OPERATOR, "--namespace", "shop", *argv]) == 0
    docs: dict[str, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(capsys.readouterr().out):
        name = doc["metadata"]["name"]
        docs[f"{doc['kind']}/{name}" if name.endswith(METRICS_RBAC) else doc["kind"]] = doc
    return docs


def container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (only,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def test_the_order_puts_the_service_before_and_the_configurations_after_the_deployment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["manifests", OPERATOR, "--namespace", "shop"]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == [
        "CustomResourceDefinition",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",  # the metrics' review rights, and binding
        "ClusterRoleBinding",
        "ClusterRole",  # metrics-reader, for Prometheus to be bound to
        "Service",
        "Issuer",
        "Certificate",
        "Deployment",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ]


def test_the_service_reaches_the_webhook_port_of_every_replica(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = render(capsys, "--webhook-port", "9555")
    service = docs["Service"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    assert port["targetPort"] == "webhook"
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert ports == {"metrics": 8443, "probes": 8081, "webhook": 9555}
    pod_labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["metadata"]["namespace"] == docs["Deployment"]["metadata"]["namespace"]


def test_each_webhook_points_at_its_path_on_the_service(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = render(capsys)
    service = {"name": docs["Service"]["metadata"]["name"], "namespace": "shop", "port": 443}
    (validating,) = docs["ValidatingWebhookConfiguration"]["webhooks"]
    (mutating,) = docs["MutatingWebhookConfiguration"]["webhooks"]
    assert validating["clientConfig"]["service"] == {
        **service,
        "path": "/validate/gears.validate.hooked.fastctl.dev",
    }
    assert mutating["clientConfig"]["service"] == {
        **service,
        "path": "/mutate/configmaps.default.hooked.fastctl.dev",
    }
    conversion = docs["CustomResourceDefinition"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["service"] == {
        **service,
        "path": "/convert/gears.hooked.fastctl.dev",
    }


def test_cert_manager_certifies_the_service_and_injects_its_ca(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = render(capsys)
    certificate, issuer = docs["Certificate"], docs["Issuer"]
    assert certificate["spec"]["dnsNames"] == [
        "webhooked-webhook.shop.svc",
        "webhooked-webhook.shop.svc.cluster.local",
    ]
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    source = f"shop/{certificate['metadata']['name']}"
    for kind in (
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "CustomResourceDefinition",
    ):
        assert docs[kind]["metadata"]["annotations"] == {INJECT: source}, kind
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    assert mounts["webhook-certs"] == {
        "name": "webhook-certs",
        "mountPath": CERT_DIR,
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in docs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-certs"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert "ClusterRole" not in docs  # no right to rewrite configurations or CRDs


def test_managed_mode_writes_no_certificate_and_grants_what_install_sends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = render(capsys, "--webhook-certificates", "managed")
    assert "Certificate" not in docs
    assert "Issuer" not in docs
    for kind in ("ValidatingWebhookConfiguration", "CustomResourceDefinition"):
        assert CA_NOTE in docs[kind]["metadata"]["annotations"]
        assert INJECT not in docs[kind]["metadata"]["annotations"]
    assert [m["name"] for m in container(docs)["volumeMounts"]] == ["tmp"]
    rules = {
        (g, r): sorted(rule["verbs"])
        for rule in docs["ClusterRole"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert rules == {
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ["create", "patch"],
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ["create", "patch"],
        ("apiextensions.k8s.io", "customresourcedefinitions"): ["patch"],
    }
    assert docs["ClusterRoleBinding"]["subjects"][0]["name"] == "webhooked"
    # The replicas share one CA through a Secret in the operator's namespace.
    role = docs["Role"]
    assert role["metadata"]["namespace"] == "shop"
    # Create cannot be limited by name; reading and changing are limited to that Secret.
    secrets = [
        (r["apiGroups"], sorted(r["verbs"]), r.get("resourceNames"))
        for r in role["rules"]
        if r["resources"] == ["secrets"]
    ]
    assert sorted(secrets, key=str) == [
        ([""], ["create"], None),
        ([""], ["get", "patch"], ["webhooked-webhook-managed-tls"]),
    ]


def test_an_operator_without_webhooks_gets_none_of_it() -> None:
    options = DeployOptions("m:make", "op", "img", "ns")
    for hooks in (None, Webhooks()):
        kinds = [o["kind"] for o in manifests(options, Permissions(), (), hooks)]
        assert kinds == [
            "ServiceAccount",
            *("ClusterRole", "ClusterRoleBinding", "ClusterRole"),  # the metrics'
            "Deployment",
        ]


def test_a_converter_whose_crd_is_not_exported_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "lost_crd.py"
    module.write_text(
        "from fastctl import Controller, Resource\n"
        "from fastctl.webhook import Webhooks\n"
        "CM = Resource('v1', 'ConfigMap', plural='configmaps', namespaced=True)\n"
        "async def noop(obj, ctx): return None\n"
        "def make(client, namespace=None): return Controller(client, CM, noop)\n"
        "WEBHOOKS = Webhooks()\n"
        "WEBHOOKS.conversion('bolts.hooked.fastctl.dev')\n"
    )
    assert main(["manifests", f"{module}:make", "--namespace", "shop"]) != 0
    err = capsys.readouterr().err
    assert "bolts.hooked.fastctl.dev" in err
    assert "CRDS" in err
