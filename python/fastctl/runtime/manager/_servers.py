"""The HTTP servers of a Manager: probes, metrics, and the debug queue; and, since it lives
exactly as long, the process's tracing export when the Manager's `tracing` asks for it.

- ``/healthz`` and ``/readyz`` in plain HTTP on their own `probe_port` (8081), so a liveness
  probe never depends on the metrics' TLS or on the API server answering reviews;
- ``/metrics`` on `metrics_port` (8443), by default over HTTPS and only to callers the
  cluster's RBAC allows to ``get`` ``/metrics`` (a TokenReview and a SubjectAccessReview per
  new token, cached: `fastctl.runtime._metrics_auth`), with a self-signed certificate made
  at start or `metrics_certificate` (files reloaded when they change);
  ``metrics_secure=False`` serves plain HTTP to anyone, an explicit opt-out;
- ``/debug/queue`` (every controller's queue, and why each object is queued, as JSON for
  ``fastctl inspect``) on `debug_queue_port` when given (off by default), bound to
  `debug_queue_host` (``127.0.0.1``) and answering loopback clients only unless that host
  is not a loopback address (`fastctl.runtime._debug_queue`);
- tracing (docs/tracing.md): on from the servers' start, before the runnables and the
  controllers, until their stop, after them; the spans still buffered are exported then,
  from a thread (a blocking HTTP call: the loop goes on meanwhile, and with it an endpoint
  it may serve). Asked for without the ``otel`` extra, it fails at construction.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from fastctl._tls import ServingCertificate
from fastctl._tracing import checked, switch_on
from fastctl._tracing import disable as stop_tracing
from fastctl.runtime._debug_queue import DebugQueueServer, Inspectable, is_loopback
from fastctl.runtime._health import HealthServer
from fastctl.runtime._metrics_auth import MetricsAuthorizer

__all__ = ["ServerOptions", "Servers"]

log = logging.getLogger("fastctl.manager")


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Where and how a Manager serves its endpoints (see the module docstring); a port
    of None turns that server off."""

    metrics_port: int | None = 8443
    metrics_host: str = "0.0.0.0"
    metrics_secure: bool = True
    metrics_certificate: ServingCertificate | None = None
    probe_port: int | None = 8081
    probe_host: str = "0.0.0.0"
    debug_queue_port: int | None = None
    debug_queue_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        for field in ("metrics_port", "probe_port", "debug_queue_port"):
            port = getattr(self, field)
            if port is None:
                continue
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"{field} must be a port number (0-65535) or None, got {port!r}")
        if self.metrics_certificate is not None and not self.metrics_secure:
            raise ValueError("metrics_certificate with metrics_secure=False: it would be unused")


class Servers:
    """The running servers of one Manager run (see the module docstring)."""

    def __init__(self, options: ServerOptions, *, tracing: Any = False) -> None:
        self.options = options
        self.tracing = checked(tracing)
        self._traced = False
        self.health: HealthServer | None = None
        self.metrics: HealthServer | None = None
        self.debug_queue: DebugQueueServer | None = None
        self._cert_watch: asyncio.Task[None] | None = None

    async def start(
        self,
        client: ApiClient,
        registry: CollectorRegistry,
        *,
        live: Callable[[], bool],
        ready: Callable[[], tuple[bool, str]],
        controllers: Callable[[], Sequence[Inspectable]],
    ) -> None:
        """Turn tracing on if asked; start the probe server, the debug queue, then the
        metrics server."""
        self._traced = switch_on(self.tracing)
        o = self.options
        if o.probe_port is not None:
            self.health = HealthServer(
                o.probe_port, host=o.probe_host, live=live, ready=ready, metrics=False
            )
            await self.health.start()
            log.info("serving /healthz, /readyz on port %d", self.health.port)
        if o.debug_queue_port is not None:
            self.debug_queue = DebugQueueServer(
                controllers,
                port=o.debug_queue_port,
                host=o.debug_queue_host,
                allow_remote=not _names_loopback(o.debug_queue_host),
            )
            await self.debug_queue.start()
        if o.metrics_port is None:
            return
        context, authorizer = None, None
        if o.metrics_secure:
            certificate = o.metrics_certificate or _self_signed()
            if o.metrics_certificate is not None:
                self._cert_watch = asyncio.get_running_loop().create_task(
                    certificate.watch(), name="metrics certificate reload"
                )
            context = certificate.ssl_context
            authorizer = MetricsAuthorizer(client)
        self.metrics = HealthServer(
            o.metrics_port,
            host=o.metrics_host,
            registry=registry,
            probes=False,
            ssl_context=context,
            authorizer=authorizer,
        )
        await self.metrics.start()
        log.info(
            "serving /metrics on port %d (%s)",
            self.metrics.port,
            "HTTPS, TokenReview and SubjectAccessReview" if context else "plain HTTP, no auth",
        )

    async def stop(self) -> None:
        if self._cert_watch is not None:
            self._cert_watch.cancel()
        for server in (self.metrics, self.health, self.debug_queue):
            if server is not None:
                await server.stop()
        if self._traced:
            self._traced = False
            await asyncio.to_thread(stop_tracing)  # exports what is still buffered


def _self_signed() -> ServingCertificate:
    """A certificate for this pod's names, made now; its files are deleted once loaded, so
    no private key stays on disk (Prometheus scrapes pods with certificate checks off, or
    trusts a certificate it is given: `metrics_certificate`)."""
    names = ("localhost", "127.0.0.1", socket.gethostname())
    with tempfile.TemporaryDirectory(prefix="fastctl-metrics-") as where:
        return ServingCertificate.self_signed(Path(where), names, purpose="metrics")


def _names_loopback(host: str) -> bool:
    """Whether a listen address is loopback (then only local clients are answered)."""
    return host == "localhost" or is_loopback(host)
