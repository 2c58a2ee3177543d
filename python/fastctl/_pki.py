"""A throw-away certificate authority and the leaf certificates it signs, with `cryptography`.

Two users: the local control plane (`fastctl.testing.ControlPlane`: the kube-apiserver
serving certificate and the client certificates of its users) and the webhook server
(`fastctl.webhook`: a serving certificate whose CA goes into the webhook configurations'
``caBundle``). ECDSA P-256 keys are used throughout because they are generated in
microseconds (RSA 2048 takes ~50 ms each).

`cryptography` is imported by this module only, and this module is imported only when a
certificate is made, so ``pip install fastctl`` without the ``testing`` or ``webhook`` extra
keeps working.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "generating certificates needs the `cryptography` package: "
        "pip install 'fastctl[testing]' (control planes) or 'fastctl[webhook]' (webhooks)"
    ) from exc

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """PEM files of a certificate and its private key."""

    cert: Path
    key: Path


def _private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


class CertificateAuthority:
    """A CA kept in memory (to sign more client certificates later) and on disk."""

    def __init__(
        self,
        directory: Path,
        name: str = "fastctl-control-plane-ca",
        *,
        validity: datetime.timedelta = _VALIDITY,
        pem: tuple[bytes, bytes] | None = None,
    ) -> None:
        """A new CA valid for `validity`, or, with `pem` (its certificate and key), an
        existing one loaded to issue more certificates (a shared managed webhook CA)."""
        self.directory = directory
        if pem is not None:
            self._cert = x509.load_pem_x509_certificate(pem[0])
            key = serialization.load_pem_private_key(pem[1], password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError("the CA key is not an ECDSA key fastctl made")
            self._key = key
            self._finish()
            return
        self._key = _private_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self._finish()

    def _finish(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        """The CA certificate (PEM): what a client trusts, e.g. a webhook's ``caBundle``."""
        self.key_pem = _key_pem(self._key)
        """The CA's private key (PEM): only for keeping the CA where its issuers share it."""
        self.cert_file = _write(self.directory / "ca.crt", self.cert_pem)
        _write(self.directory / "ca.key", self.key_pem, private=True)

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server_names: Sequence[str] = (),
        validity: datetime.timedelta = _VALIDITY,
    ) -> KeyPair:
        """A leaf certificate: a serving one when `server_names` (DNS names or IPs) are
        given, a client one otherwise. Written to ``<stem>.crt`` and ``<stem>.key``."""
        key = _private_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name(
            [
                *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations),
                # X.509 caps a CN at 64 characters; a long Service DNS name still goes
                # whole into the subjectAltName, which is what clients check.
                x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
            ]
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if server_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(name) for name in server_names]),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(
            cert=_write(
                self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)
            ),
            key=_write(self.directory / f"{stem}.key", _key_pem(key), private=True),
        )


def serving_problem(
    cert_pem: bytes,
    ca_pem: bytes,
    names: Sequence[str],
    *,
    renew_before: datetime.timedelta,
    now: datetime.datetime | None = None,
) -> str | None:
    """Why the serving certificate `cert_pem` should be issued again (``None``: it is
    fine): not signed by the CA `ca_pem`, not naming every one of `names`, or expiring
    within `renew_before`."""
    now = now or datetime.datetime.now(datetime.UTC)
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    if cert.issuer != ca.subject:
        return "it is not signed by the CA"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "its signature does not verify against the CA"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "it names no hosts"
    have = {str(v) for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    missing = [name for name in names if name not in have]
    if missing:
        return f"it does not name {', '.join(missing)}"
    return expiry_problem(cert_pem, renew_before=renew_before, now=now)


def expiry_problem(
    cert_pem: bytes, *, renew_before: datetime.timedelta, now: datetime.datetime | None = None
) -> str | None:
    """``"it expires in ..."`` when `cert_pem` ends within `renew_before` (``None``: not)."""
    now = now or datetime.datetime.now(datetime.UTC)
    left = x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc - now
    if left < renew_before:
        return f"it expires in {left} (renewed {renew_before} before)"
    return None


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def service_account_keys(directory: Path) -> KeyPair:
    """The key pair kube-apiserver signs and verifies service account tokens with
    (``--service-account-signing-key-file`` / ``--service-account-key-file``); `cert` holds
    the public key here, not a certificate."""
    key = _private_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(
        cert=_write(directory / "sa.pub", public),
        key=_write(directory / "sa.key", _key_pem(key), private=True),
    )
