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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from fastctl.webhook._configuration import Service, install
from fastctl.webhook._registry import Webhooks
from fastctl.webhook._server import WebhookServer
from fastctl.webhook._tls import ServingCertificate

__all__ = ["Installer", "ManagedWebhookServer"]

log = logging.getLogger("fastctl.webhook")

Installer = Callable[..., Awaitable[None]]
"""`fastctl.webhook.install`'s signature: ``(client, webhooks, name, *, url=, service=,
ca_bundle=)``."""


class ManagedWebhookServer(WebhookServer):
    """A `WebhookServer` with a certificate fastctl made, that installs its configurations
    named `name` once it serves (see the module docstring).

    With `service` the API server calls it through that Service (the certificate names its
    DNS names); without, at this server's own URL (``https://<host>:<port>``, for an API
    server on the same host, as the local control plane)."""

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
        **options: Any,
    ) -> None:
        if names is None:
            names = service.dns_names if service is not None else [_address(host)]
        certificate = ServingCertificate.self_signed(directory, names)
        super().__init__(webhooks, certificate, port=port, host=host, registry=registry, **options)
        self.client = client
        self.name = name
        self.service = service
        self._install = install
        self._retry = retry
        self._installed = asyncio.Event()
        self._installing: asyncio.Task[None] | None = None
        self._serving = False
        self.install_error: str | None = None
        """Why the last install attempt failed (None once installed)."""

    async def start(self) -> None:
        """Serve, then install the configurations (in the background, retried)."""
        await super().start()
        self._serving = True
        self._installing = asyncio.get_running_loop().create_task(
            self._install_until_done(), name=f"install webhooks {self.name}"
        )

    async def stop(self) -> None:
        self._serving = False
        if self._installing is not None:
            self._installing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._installing
            self._installing = None
        await super().stop()

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

    async def _install_until_done(self) -> None:
        delay, cap = self._retry
        url = None if self.service is not None else self.url
        while True:
            try:
                await self._install(
                    self.client,
                    self.webhooks,
                    self.name,
                    url=url,
                    service=self.service,
                    ca_bundle=self.certificate.ca_bundle if self.certificate else None,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.install_error = f"{type(exc).__name__}: {exc}"
                log.warning("installing webhooks %s failed (retrying): %s", self.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, cap)
                continue
            self.install_error = None
            self._installed.set()
            log.info("installed webhook configurations %s (caBundle of this process)", self.name)
            return


def _address(host: str) -> str:
    """The address the API server dials for a server listening on `host`."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host
