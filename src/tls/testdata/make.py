"""Write the certificates of `src/tls/tests.rs` (valid for a century): run from this directory
with an interpreter that has `cryptography`."""

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
END = NOW + datetime.timedelta(days=36500)


def name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def ca(stem: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(stem))
        .issuer_name(name(stem))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW)
        .not_valid_after(END)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    Path(f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def leaf(
    stem: str, issuer: tuple[Any, Any], curve: ec.EllipticCurve, server: bool
) -> ec.EllipticCurvePrivateKey:
    ca_key, ca_cert = issuer
    key = ec.generate_private_key(curve)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(stem))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW)
        .not_valid_after(END)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    Path(f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(f"{stem}.key").write_bytes(key_pem(key))
    return key


root = ca("ca")
ca("other-ca")
leaf("server", root, ec.SECP256R1(), True)
client = leaf("client", root, ec.SECP256R1(), False)
Path("client-encrypted.key").write_bytes(key_pem(client, b"secret"))
leaf("p521", root, ec.SECP521R1(), False)
