"""Managed webhook servers of several replicas share one CA through a Secret, on the real
kube-apiserver: two replicas starting at once end with one Secret, install the same
``caBundle``, and each serves a certificate that bundle trusts for the Service's names; a
certificate about to expire is renewed in the Secret and served by the replica that checks;
a CA about to expire is replaced with a bundle trusting both, installed before the new
certificate is served; a Secret that is not fastctl's is refused by name. Under nothing but
the Secret rules of the deployment manifests' Role, replicas share and renew the Secret, and
can read or change no other Secret.

The installer is a stand-in that records each ``caBundle`` and dials the server with it
(the API server cannot reach an in-cluster Service from here, and real configurations
pointing at a missing Service would fail the matching writes of other tests).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes_asyncio.client import ApiClient

from fastctl._pki import CertificateAuthority
from fastctl.deploy import DeployOptions
from fastctl.deploy._webhooks import shared_secret_rules, webhook_service
from fastctl.kube import Resource
from fastctl.kube._http import ApiError
from fastctl.kube._objects import create, get, patch
from fastctl.webhook import ManagedWebhookServer, Service, SharedSecret, Webhooks, shared_secret_of
from fastctl.webhook import _shared_certificate as shared_certificate
from fastctl.webhook._shared_certificate import SECRET, ensure_shared_certificate

pytestmark = [pytest.mark.kube, pytest.mark.timeout(60)]


async def presented(server: ManagedWebhookServer, bundle: bytes, hostname: str) -> x509.Certificate:
    context = ssl.create_default_context(cadata=bundle.decode())
    _, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=context, server_hostname=hostname
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der)


class RecordingInstall:
    """Stands in for `fastctl.webhook.install`: records each ``caBundle`` and, at that
    moment, the certificate the server presents when dialled with that bundle."""

    def __init__(self) -> None:
        self.bundles: list[bytes] = []
        self.presented: list[x509.Certificate] = []
        self.server: ManagedWebhookServer | None = None

    async def __call__(self, client: Any, webhooks: Webhooks, name: str, **kw: Any) -> None:
        bundle = kw["ca_bundle"]
        self.bundles.append(bundle)
        assert self.server is not None
        self.presented.append(await presented(self.server, bundle, host_of(kw["service"])))


def host_of(service: Service) -> str:
    return service.dns_names[0]


def replica(
    client: ApiClient, service: Service, tmp: Path, secret: SharedSecret | None = None
) -> tuple[ManagedWebhookServer, RecordingInstall]:
    install = RecordingInstall()
    server = ManagedWebhookServer(
        Webhooks(),
        client,
        "shared-test",
        service=service,
        directory=tmp,
        port=0,
        host="127.0.0.1",
        install=install,
        shared=secret if secret is not None else True,
        check_interval=3600,
    )
    install.server = server
    return server, install


async def secret_data(client: ApiClient, secret: SharedSecret) -> dict[str, bytes]:
    obj = await get(client, SECRET, secret.name, namespace=secret.namespace)
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


async def replace_in_secret(client: ApiClient, secret: SharedSecret, **values: bytes) -> None:
    keys = {"ca_bundle_crt": "ca-bundle.crt"}
    data = {
        keys.get(k, k.replace("_", ".")): base64.b64encode(v).decode() for k, v in values.items()
    }
    await patch(client, SECRET, secret.name, {"data": data}, namespace=secret.namespace)


async def test_two_replicas_share_one_ca_and_renew_it(
    client: ApiClient, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service("ops-webhook", namespace)
    secret = SharedSecret("ops-webhook-managed-tls", namespace)
    (a, install_a), (b, install_b) = (
        replica(client, service, tmp_path / "a"),
        replica(client, service, tmp_path / "b"),
    )
    assert a.shared == secret  # the default Secret of a server behind a Service
    await asyncio.gather(a.start(), b.start())  # both find no Secret: one create wins
    try:
        await asyncio.wait_for(asyncio.gather(a.installed(), b.installed()), 20)
        stored = await secret_data(client, secret)
        assert install_a.bundles == install_b.bundles == [stored["ca-bundle.crt"]]
        bundle = stored["ca-bundle.crt"]
        for server in (a, b):  # each replica is trusted under the one installed bundle
            for name in service.dns_names:
                cert = await presented(server, bundle, name)
                assert (
                    cert.serial_number
                    == x509.load_pem_x509_certificate(stored["tls.crt"]).serial_number
                )
        first = x509.load_pem_x509_certificate(stored["tls.crt"])

        # A serving certificate about to expire (same CA) is renewed by whoever checks.
        ca = CertificateAuthority(tmp_path / "ca", pem=(stored["ca.crt"], stored["ca.key"]))
        short = ca.issue(
            "short",
            host_of(service),
            server_names=service.dns_names,
            validity=datetime.timedelta(days=2),
        )
        await replace_in_secret(
            client, secret, tls_crt=short.cert.read_bytes(), tls_key=short.key.read_bytes()
        )
        assert await a.check_certificate()
        renewed = await secret_data(client, secret)
        new = x509.load_pem_x509_certificate(renewed["tls.crt"])
        assert new.serial_number not in (first.serial_number,)
        assert new.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(
            days=300
        )
        assert renewed["ca.crt"] == stored["ca.crt"]
        assert renewed["ca-bundle.crt"] == bundle
        assert len(install_a.bundles) == 1  # same bundle: nothing to install again
        assert (await presented(a, bundle, host_of(service))).serial_number == new.serial_number
        # The other replica picks the renewal up on its next check.
        assert await b.check_certificate()
        assert (await presented(b, bundle, host_of(service))).serial_number == new.serial_number
        assert not await b.check_certificate()  # nothing changed since

        # A CA about to expire is replaced; the bundle then trusts the new and the old CA,
        # and is installed while the old CA's certificate still serves. First both
        # replicas take up a CA that ends in 60 days (not due with 30 days' notice)...
        old_ca = CertificateAuthority(
            tmp_path / "old", name="fastctl-webhook-ca", validity=datetime.timedelta(days=60)
        )
        leaf = old_ca.issue("tls", host_of(service), server_names=service.dns_names)
        await replace_in_secret(
            client,
            secret,
            ca_crt=old_ca.cert_pem,
            ca_key=old_ca.key_pem,
            tls_crt=leaf.cert.read_bytes(),
            tls_key=leaf.key.read_bytes(),
            ca_bundle_crt=old_ca.cert_pem + stored["ca.crt"],  # as after a rotation to it
        )
        assert await a.check_certificate()
        assert await b.check_certificate()
        # A changed bundle is installed (the recorder checks the served certificate is
        # trusted under it at that moment).
        assert install_b.bundles[-1] == old_ca.cert_pem + stored["ca.crt"]
        # ... then 90 days' notice makes it due.
        monkeypatch.setattr(shared_certificate, "RENEW_BEFORE", datetime.timedelta(days=90))
        assert await b.check_certificate()
        rotated = await secret_data(client, secret)
        new_ca = rotated["ca.crt"]
        assert new_ca != old_ca.cert_pem
        assert rotated["ca-bundle.crt"] == new_ca + old_ca.cert_pem
        assert install_b.bundles[-1] == rotated["ca-bundle.crt"]
        leaf_serial = x509.load_pem_x509_certificate(leaf.cert.read_bytes()).serial_number
        assert install_b.presented[-1].serial_number == leaf_serial  # installed first
        rotated_serial = x509.load_pem_x509_certificate(rotated["tls.crt"]).serial_number
        assert (await presented(b, new_ca, host_of(service))).serial_number == rotated_serial
        # a, still on the old CA's certificate, is trusted under the new bundle until it
        # checks, and then serves the new one.
        assert (await presented(a, rotated["ca-bundle.crt"], host_of(service))).serial_number == (
            leaf_serial
        )
        assert await a.check_certificate()
        assert (await presented(a, new_ca, host_of(service))).serial_number == rotated_serial
    finally:
        await asyncio.gather(a.stop(), b.stop())


async def test_a_foreign_secret_is_not_taken_over(
    client: ApiClient, namespace: str, tmp_path: Path
) -> None:
    secret = SharedSecret("someone-elses", namespace)
    body = {"metadata": {"name": secret.name}, "data": {"tls.crt": "eA=="}}
    await create(client, SECRET, body, namespace=namespace)
    with pytest.raises(ValueError, match=f"{namespace}/someone-elses .*lacks ca.crt, ca.key"):
        await ensure_shared_certificate(client, secret, ["x.svc"], tmp_path)
    stored = await get(client, SECRET, secret.name, namespace=namespace)
    assert stored["data"] == {"tls.crt": "eA=="}  # untouched


async def test_no_secret_rights_is_an_api_error(client: ApiClient, tmp_path: Path) -> None:
    """A namespace that does not exist: the create's 404 is reported, not retried silently."""
    with pytest.raises(ApiError):
        await ensure_shared_certificate(
            client, SharedSecret("x", "no-such-namespace-here"), ["x.svc"], tmp_path
        )


ROLE = Resource("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDING = Resource("rbac.authorization.k8s.io/v1", "RoleBinding")
ACCESS_REVIEW = Resource("authorization.k8s.io/v1", "SubjectAccessReview", namespaced=False)


async def may(client: ApiClient, user: str, namespace: str, verb: str, name: str = "") -> bool:
    review = {
        "spec": {
            "user": user,
            "resourceAttributes": {
                "namespace": namespace,
                "resource": "secrets",
                "verb": verb,
                "name": name,
            },
        }
    }
    answer = await create(client, ACCESS_REVIEW, review)
    return bool(answer["status"].get("allowed"))


async def test_the_manifests_role_lets_replicas_share_and_renew_and_touch_no_other_secret(
    client: ApiClient,
    namespace: str,
    tmp_path: Path,
    user_client: Callable[[str], Awaitable[ApiClient]],
) -> None:
    options = DeployOptions("m:make", "ops", "img", namespace, webhook_certificates="managed")
    service = webhook_service(options)
    secret = shared_secret_of(service)
    user = "webhook-replica"
    rules = [rule.as_policy_rule() for rule in shared_secret_rules(options)]
    await create(client, ROLE, {"metadata": {"name": user}, "rules": rules}, namespace=namespace)
    binding = {
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    await create(client, ROLE_BINDING, binding, namespace=namespace)
    deadline = time.monotonic() + 30
    while not await may(client, user, namespace, "get", secret.name):
        assert time.monotonic() < deadline, "the binding never took effect"
        await asyncio.sleep(0.05)
    restricted = await user_client(user)

    (a, install_a), (b, install_b) = (
        replica(restricted, service, tmp_path / "a"),
        replica(restricted, service, tmp_path / "b"),
    )
    await asyncio.gather(a.start(), b.start())  # the create race, the loser's read
    try:
        await asyncio.wait_for(asyncio.gather(a.installed(), b.installed()), 20)
        stored = await secret_data(client, secret)
        assert install_a.bundles == install_b.bundles == [stored["ca-bundle.crt"]]
        ca = CertificateAuthority(tmp_path / "ca", pem=(stored["ca.crt"], stored["ca.key"]))
        days = datetime.timedelta(days=2)
        short = ca.issue("short", host_of(service), server_names=service.dns_names, validity=days)
        await replace_in_secret(
            client, secret, tls_crt=short.cert.read_bytes(), tls_key=short.key.read_bytes()
        )
        assert await a.check_certificate()  # renewed: a patch of the Secret
        assert (await secret_data(client, secret))["tls.crt"] != short.cert.read_bytes()
    finally:
        await asyncio.gather(a.stop(), b.stop())

    other = {"metadata": {"name": "someone-elses"}, "data": {"token": "eA=="}}
    await create(client, SECRET, other, namespace=namespace)
    for attempt in (
        get(restricted, SECRET, "someone-elses", namespace=namespace),
        patch(restricted, SECRET, "someone-elses", {"data": {}}, namespace=namespace),
    ):
        with pytest.raises(ApiError) as refused:
            await attempt
        assert refused.value.status == 403
    assert not await may(client, user, namespace, "list")
