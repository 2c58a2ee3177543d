"""`ManagedWebhookServer`: a webhook server that certifies itself and tells the API server
about itself, in that order.

Managed mode is what an operator wants when nobody else issues its certificate: fastctl
makes a CA and a serving certificate (`ServingCertificate.self_signed`), serves, and only
then installs the webhook configurations and the CRDs' conversion stanza with this
process's ``caBundle`` (`fastctl.webhook.install`). The order matters: a configuration
written before the server listens makes the API server call an address that refuses the
connection, and with ``failurePolicy: Fail`` every matching write fails meanwhile.

Installing is retried (with a capped backoff) until it succeeds: the CRD of a converter may
not exist yet, the API server may be briefly unreachable. Until it succeeds `is_ready` is
false with the reason, which a Manager's ``/readyz`` reports (a replica is not ready
before the API server can call its webhooks); `installed` waits for it.

With a Service (in a cluster, with replicas) the CA and the certificate are not the
process's own but shared by every replica through a Secret, and renewed there before they
expire (`fastctl.webhook._shared_certificate`): one CA per process would have each replica
overwrite the others' ``caBundle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from fastctl._tls import ServingCertificate
from fastctl.webhook._configuration import Service, install
from fastctl.webhook._registry import Webhooks
from fastctl.webhook._server import WebhookServer
from fastctl.webhook._shared_certificate import (
    CHECK_INTERVAL,
    CertificateMaterial,
    SharedSecret,
    ensure_shared_certificate,
)

__all__ = ["Installer", "ManagedWebhookServer", "shared_secret_of"]

log = logging.getLogger("fastctl.webhook")

_T = TypeVar("_T")

Installer = Callable[..., Awaitable[None]]
"""`fastctl.webhook.install`'s signature: ``(client, webhooks, name, *, url=, service=,
ca_bundle=)``."""


class ManagedWebhookServer(WebhookServer):
    """A `WebhookServer` with a certificate fastctl made, that installs its configurations
    named `name` once it serves (see the module docstring).

    With `service` the API server calls it through that Service (the certificate names its
    DNS names); without, at this server's own URL (``https://<host>:<port>``, for an API
    server on the same host, as the local control plane).

    `shared`: where the replicas keep one CA and certificate (a `SharedSecret`); ``True``
    (default) means `shared_secret_of(service)` when there is a Service and the process's
    own CA when there is none; ``False``, the process's own CA always (one replica only).
    A shared certificate is read (or made) when the server starts, and checked every
    `check_interval` seconds for renewal."""

    def __init__(
        self,
        webhooks: Webhooks,
        client: ApiClient,
        name: str,
        *,
        service: Service | None = None,
        directory: Path | None = None,
        port: int = 9443,
        host: str = "0.0.0.0",
        names: Sequence[str] | None = None,
        registry: CollectorRegistry | None = None,
        install: Installer = install,
        retry: tuple[float, float] = (0.2, 5.0),
        shared: SharedSecret | bool = True,
        check_interval: float = CHECK_INTERVAL,
        **options: Any,
    ) -> None:
        if names is None:
            names = service.dns_names if service is not None else [_address(host)]
        if shared is True:
            shared = shared_secret_of(service) if service is not None else False
        self.shared: SharedSecret | None = shared if isinstance(shared, SharedSecret) else None
        """The Secret the replicas share the certificate in (None: this process's own)."""
        self.names = list(names)
        self.check_interval = check_interval
        self._directory = (
            Path(directory) if directory else Path(tempfile.mkdtemp(prefix="fastctl-webhook-"))
        )
        certificate = None
        if self.shared is None:
            certificate = ServingCertificate.self_signed(self._directory, names)
        super().__init__(webhooks, certificate, port=port, host=host, registry=registry, **options)
        self.client = client
        self.name = name
        self.service = service
        self._install = install
        self._retry = retry
        self._installed = asyncio.Event()
        self._installing: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Task[None] | None = None
        self._material: CertificateMaterial | None = None
        self._serving = False
        self.install_error: str | None = None
        """Why the last install attempt failed (None once installed)."""

    async def start(self) -> None:
        """Serve, then install the configurations (in the background, retried). A shared
        certificate is read from its Secret first (made there if it is missing; retried
        while the API server cannot be reached)."""
        loop = asyncio.get_running_loop()
        if self.shared is not None:
            self._material = await self._until_done(self._shared_material)
            cert_file, key_file = self._material.write(self._directory)
            self.certificate = ServingCertificate(
                cert_file, key_file, ca_bundle=self._material.bundle
            )
        await super().start()
        self._serving = True
        self._installing = loop.create_task(
            self._install_until_done(), name=f"install webhooks {self.name}"
        )
        if self.shared is not None:
            self._refreshing = loop.create_task(
                self._refresh(), name=f"webhook certificate {self.name}"
            )

    async def stop(self) -> None:
        self._serving = False
        for task in (self._installing, self._refreshing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._installing = self._refreshing = None
        await super().stop()

    async def _shared_material(self) -> CertificateMaterial:
        assert self.shared is not None
        return await ensure_shared_certificate(
            self.client, self.shared, self.names, self._directory / "ca"
        )

    async def check_certificate(self) -> bool:
        """Read the shared Secret now (renewing it there if due); if it holds another
        certificate than the one served, install a changed bundle first, then serve the
        new pair. True if the served certificate changed."""
        if self.shared is None or self.certificate is None or self._material is None:
            return False
        material = await self._shared_material()
        if material.cert == self._material.cert:
            return False
        if material.bundle != self._material.bundle:
            self.certificate.ca_bundle = material.bundle
            await self._install_now()
        material.write(self._directory)
        self.certificate.reload()
        self._material = material
        return True

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self.check_certificate()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("checking the shared webhook certificate failed: %s", exc)

    def is_ready(self) -> tuple[bool, str]:
        """Serving and installed; else false with the reason (for ``/readyz``)."""
        if not self._serving:
            return False, "webhook server not serving"
        if not self._installed.is_set():
            why = f": {self.install_error}" if self.install_error else ""
            return False, f"webhook configurations {self.name} not installed yet{why}"
        return True, "webhooks served and installed"

    async def installed(self) -> None:
        """Wait until the configurations are installed."""
        await self._installed.wait()

    async def _install_now(self) -> None:
        await self._install(
            self.client,
            self.webhooks,
            self.name,
            url=None if self.service is not None else self.url,
            service=self.service,
            ca_bundle=self.certificate.ca_bundle if self.certificate else None,
        )

    async def _until_done(self, step: Callable[[], Awaitable[_T]]) -> _T:
        """`step()`'s result, retried with a capped backoff; `install_error` says why the
        last try failed meanwhile."""
        delay, cap = self._retry
        while True:
            try:
                result = await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.install_error = f"{type(exc).__name__}: {exc}"
                log.warning("webhooks %s: %s (retrying)", self.name, self.install_error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, cap)
                continue
            self.install_error = None
            return result

    async def _install_until_done(self) -> None:
        await self._until_done(self._install_now)
        self._installed.set()
        whose = "shared" if self.shared is not None else "of this process"
        log.info("installed webhook configurations %s (caBundle %s)", self.name, whose)


def shared_secret_of(service: Service) -> SharedSecret:
    """The default Secret of a managed server behind `service`:
    ``<service>-managed-tls`` in its namespace (what the deployment manifests grant)."""
    return SharedSecret(f"{service.name}-managed-tls", service.namespace)


def _address(host: str) -> str:
    """The address the API server dials for a server listening on `host`."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host
