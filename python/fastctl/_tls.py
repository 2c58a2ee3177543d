"""A TLS server's certificate: made by fastctl, or read from files and reloaded.

Shared by the webhook server and the Manager's metrics server (both serve TLS that someone
else verifies, and both may be handed files that cert-manager renews). Two ways to certify:

- `ServingCertificate.self_signed(directory, names)`: fastctl makes a CA and a serving
  certificate for `names` (the Service's DNS names, or an IP), and `ca_bundle` is what the
  webhook configurations and CRDs must trust (`fastctl.webhook.install` writes it there).
- `ServingCertificate.from_files(cert, key)`: files someone else issues and renews
  (cert-manager, mounted from a Secret). `watch()` polls them and, when their content
  changes, loads the new pair into a fresh `ssl.SSLContext` and swaps it in: connections
  made from then on are served the new certificate, connections already open keep theirs,
  and no request is dropped. A pair that does not load (a certificate written before its
  key) is logged and retried on the next change; the old one serves meanwhile.

The swap uses the server context's SNI callback, which OpenSSL calls on every handshake
(with no server name when the client sends none, as for an IP address): it points the new
connection at the current context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ServingCertificate"]

log = logging.getLogger("fastctl.tls")


def _load(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class ServingCertificate:
    """A serving certificate and key on disk, and the TLS context that serves them."""

    def __init__(self, cert_file: Path, key_file: Path, *, ca_bundle: bytes | None = None) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.ca_bundle = ca_bundle
        """The PEM CA the API server must trust (None when someone else injects it)."""
        self._seen = self._read()
        self._current = _load(self.cert_file, self.key_file)
        self._server = _load(self.cert_file, self.key_file)
        self._server.sni_callback = self._pick
        self.reloads = 0
        """How many times a changed pair was loaded."""

    @classmethod
    def self_signed(
        cls,
        directory: Path | None = None,
        names: Sequence[str] = ("127.0.0.1",),
        *,
        purpose: str = "webhook",
    ) -> ServingCertificate:
        """A new CA and a serving certificate for `names` (DNS names or IP addresses),
        written to `directory` (a new temporary one by default); `purpose` names the CA
        (``fastctl-<purpose>-ca``) and the temporary directory."""
        from fastctl._pki import CertificateAuthority  # needs cryptography

        where = (
            Path(directory) if directory else Path(tempfile.mkdtemp(prefix=f"fastctl-{purpose}-"))
        )
        where.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(where, name=f"fastctl-{purpose}-ca")
        pair = ca.issue("tls", names[0], server_names=names)
        return cls(pair.cert, pair.key, ca_bundle=ca.cert_pem)

    @classmethod
    def from_files(
        cls, cert_file: Path | str, key_file: Path | str, *, ca_file: Path | str | None = None
    ) -> ServingCertificate:
        """Files issued elsewhere (``tls.crt``, ``tls.key`` of a cert-manager Secret)."""
        ca = Path(ca_file).read_bytes() if ca_file else None
        return cls(Path(cert_file), Path(key_file), ca_bundle=ca)

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The context to listen with; it hands each new connection the current pair."""
        return self._server

    def _pick(self, sock: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        sock.context = self._current

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    def reload(self) -> bool:
        """Load the files again if their content changed; True if a new pair now serves."""
        try:
            content = self._read()
        except OSError as exc:
            log.warning("serving certificate: cannot read %s: %s", self.cert_file, exc)
            return False
        if content == self._seen:
            return False
        self._seen = content
        try:
            context = _load(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            log.warning(
                "serving certificate: %s does not load yet (%s); still serving the old one",
                self.cert_file,
                exc,
            )
            return False
        self._current = context
        self.reloads += 1
        log.info("serving certificate: loaded the new %s", self.cert_file)
        return True

    async def watch(self, interval: float = 1.0) -> None:
        """Reload on change, every `interval` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                self.reload()
