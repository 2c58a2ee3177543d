"""One managed webhook certificate for every replica, kept in a Secret.

A `ManagedWebhookServer` that made its own CA in each replica would be wrong as soon as
there are two: each installs its own ``caBundle``, the last one wins, and the API server
then refuses the TLS handshake of every other replica the Service sends it to (with
``failurePolicy: Fail``, their share of the matching writes fails). So, with a Service,
the replicas share one CA and one serving certificate through a Secret (`SharedSecret`,
by default ``<service>-managed-tls`` in the Service's namespace), as cert-controller-style
rotators do:

- The first replica to start finds no Secret, makes a CA (valid `CA_VALIDITY`) and a
  serving certificate for the Service's DNS names (valid `SERVING_VALIDITY`) and creates
  the Secret; a replica that loses that race (409) reads the winner's.
- Every replica serves the Secret's certificate and installs its ``ca-bundle.crt``.
- The certificate is issued again, by the same CA, when it would expire within
  `RENEW_BEFORE`, does not name every DNS name, or is not the CA's; the CA is replaced when
  it would expire within `RENEW_BEFORE`, and then the bundle holds the new CA *and* the
  old one, so replicas still serving a certificate of the old CA stay trusted. Writes are
  merge patches carrying the ``resourceVersion`` read: of two replicas renewing at once,
  one wins and the other (409) reads again.
- A running server checks the Secret every `CHECK_INTERVAL` (`ManagedWebhookServer`
  ``check_interval``), picks up another replica's renewal, installs a bundle that changed
  and only then serves the new certificate.

A Secret of that name without the four keys fastctl writes is not taken over: the error
names it (delete it, or pass another `SharedSecret`).
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError
from fastctl.kube._objects import create, get, patch
from fastctl.kube._resource import Resource

__all__ = [
    "CA_VALIDITY",
    "CHECK_INTERVAL",
    "RENEW_BEFORE",
    "SERVING_VALIDITY",
    "CertificateMaterial",
    "SharedSecret",
    "ensure_shared_certificate",
]

log = logging.getLogger("fastctl.webhook")

SECRET = Resource("v1", "Secret", plural="secrets", namespaced=True)

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
"""A certificate (or the CA) is replaced this long before it expires: far more than
`CHECK_INTERVAL`, so every replica has picked up the new one before the old one ends."""
CHECK_INTERVAL = 3600.0
"""Seconds between a running server's checks of the Secret."""

_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
_BUNDLE = "ca-bundle.crt"
_ATTEMPTS = 5


@dataclass(frozen=True)
class SharedSecret:
    """Where the replicas keep their shared CA and serving certificate."""

    name: str
    namespace: str


@dataclass(frozen=True)
class CertificateMaterial:
    """The PEM contents of the shared Secret."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    bundle: bytes
    """What the API server must trust: the CA, and the previous one during a CA change."""

    def data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64)."""
        values = dict(zip(_KEYS, (self.ca_cert, self.ca_key, self.cert, self.key), strict=True))
        values[_BUNDLE] = self.bundle
        return {k: base64.b64encode(v).decode() for k, v in values.items()}

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Write the serving pair as ``tls.crt``/``tls.key`` in `directory` (the files a
        `fastctl.webhook.ServingCertificate` serves and reloads); key last, so a reload in
        between sees a pair that does not load and keeps the old one."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / "tls.crt", directory / "tls.key"
        cert_file.write_bytes(self.cert)
        key_file.write_bytes(self.key)
        key_file.chmod(0o600)
        return cert_file, key_file


def _decode(secret: SharedSecret, obj: Mapping[str, Any]) -> CertificateMaterial:
    data = obj.get("data") or {}
    missing = [k for k in _KEYS if k not in data]
    if missing:
        raise ValueError(
            f"Secret {secret.namespace}/{secret.name} exists but lacks {', '.join(missing)}: "
            "it is not a fastctl managed webhook certificate; delete it or choose another "
            "SharedSecret"
        )
    raw = {k: base64.b64decode(v) for k, v in data.items()}
    ca_cert, ca_key, cert, key = (raw[k] for k in _KEYS)
    return CertificateMaterial(ca_cert, ca_key, cert, key, raw.get(_BUNDLE, ca_cert))


def _issue(
    names: Sequence[str], directory: Path, previous: CertificateMaterial | None = None
) -> CertificateMaterial:
    """A serving certificate for `names`: by `previous`'s CA if it has one that is not
    expiring, else by a new CA (trusted beside `previous`'s in the bundle)."""
    from fastctl._pki import CertificateAuthority, expiry_problem

    keep_ca = previous is not None and not expiry_problem(
        previous.ca_cert, renew_before=RENEW_BEFORE
    )
    if previous is not None and keep_ca:
        ca = CertificateAuthority(directory, pem=(previous.ca_cert, previous.ca_key))
        bundle = previous.bundle
    else:
        ca = CertificateAuthority(directory, name="fastctl-webhook-ca", validity=CA_VALIDITY)
        bundle = ca.cert_pem + (previous.ca_cert if previous is not None else b"")
    pair = ca.issue("issued", names[0], server_names=names, validity=SERVING_VALIDITY)
    return CertificateMaterial(
        ca.cert_pem, ca.key_pem, pair.cert.read_bytes(), pair.key.read_bytes(), bundle
    )


def _problem(material: CertificateMaterial, names: Sequence[str]) -> str | None:
    from fastctl._pki import expiry_problem, serving_problem

    ca = expiry_problem(material.ca_cert, renew_before=RENEW_BEFORE)
    if ca is not None:
        return f"the CA: {ca}"
    return serving_problem(material.cert, material.ca_cert, names, renew_before=RENEW_BEFORE)


async def ensure_shared_certificate(
    client: ApiClient, secret: SharedSecret, names: Sequence[str], directory: Path
) -> CertificateMaterial:
    """The shared certificate for `names`, made or renewed in the Secret first if it needs
    to be (see the module docstring); `directory` holds the CA's scratch files."""
    if not names:
        raise ValueError("a shared webhook certificate needs at least one name")
    for _ in range(_ATTEMPTS):
        try:
            obj: dict[str, Any] | None = await get(
                client, SECRET, secret.name, namespace=secret.namespace
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            obj = None
        if obj is None:
            material = _issue(names, directory)
            body = {"metadata": {"name": secret.name}, "type": "Opaque", "data": material.data()}
            try:
                await create(client, SECRET, body, namespace=secret.namespace)
            except ApiError as exc:
                if exc.status == 409:  # another replica created it first: use theirs
                    continue
                raise
            log.info("created the shared webhook certificate %s/%s", secret.namespace, secret.name)
            return material
        current = _decode(secret, obj)
        why = _problem(current, names)
        if why is None:
            return current
        renewed = _issue(names, directory, current)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        change = {"metadata": {"resourceVersion": version}, "data": renewed.data()}
        try:
            await patch(client, SECRET, secret.name, change, namespace=secret.namespace)
        except ApiError as exc:
            if exc.status == 409:  # another replica renewed it meanwhile: read theirs
                continue
            raise
        log.info(
            "renewed the shared webhook certificate %s/%s: %s", secret.namespace, secret.name, why
        )
        return renewed
    raise RuntimeError(
        f"Secret {secret.namespace}/{secret.name}: still changing under us after "
        f"{_ATTEMPTS} attempts"
    )
