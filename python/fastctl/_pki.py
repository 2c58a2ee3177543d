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

    def __init__(self, directory: Path, name: str = "fastctl-control-plane-ca") -> None:
        self.directory = directory
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
            .not_valid_after(now + _VALIDITY)
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
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        """The CA certificate (PEM): what a client trusts, e.g. a webhook's ``caBundle``."""
        self.cert_file = _write(directory / "ca.crt", self.cert_pem)
        _write(directory / "ca.key", _key_pem(self._key), private=True)

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server_names: Sequence[str] = (),
    ) -> KeyPair:
        """A leaf certificate: a serving one when `server_names` (DNS names or IPs) are
        given, a client one otherwise. Written to ``<stem>.crt`` and ``<stem>.key``."""
        key = _private_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name(
            [
                *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
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
            .not_valid_after(now + _VALIDITY)
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
