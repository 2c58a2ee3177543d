"""The operator's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

What Kubernetes and Prometheus expect of a controller's pod::

    server = HealthServer(8080, registry=registry, live=lambda: loops_alive,
                          ready=lambda: (synced, "caches synced" if synced else "syncing"))
    await server.start()        # server.port is the bound port (useful with port=0)
    ...
    await server.stop()

- ``/metrics``: ``prometheus_client.generate_latest(registry)`` as the Prometheus text format.
- ``/healthz`` (liveness): 200 while ``live()`` is true, else 503. A failing liveness probe
  makes the kubelet restart the container, so it should only say whether the process's
  loops are still running, never whether the API server is reachable.
- ``/readyz`` (readiness): 200 when ``ready()`` says so, else 503 with a short reason.

A check returns a ``bool``, or ``(bool, reason)`` to say why in the body (a one-line
``text/plain`` answer, as kube-apiserver's own ``/readyz`` gives). A check that raises counts
as failing, and its exception becomes the reason: a probe must answer, not crash.

It runs on aiohttp (already a dependency through kubernetes-asyncio), in the operator's
event loop: the checks are plain callables that read in-memory state, cheap enough to call
from the loop.

One server may serve only some of the paths (`metrics`, `probes`): the Manager runs two, the
probes in plain HTTP on their own port, so that liveness never depends on the metrics' TLS
or on the API server answering a review, and ``/metrics`` over TLS (`ssl_context`) behind
an `authorizer` (`fastctl.runtime._metrics_auth`) that answers 401 or 403 before anything
is generated.
"""

from __future__ import annotations

import errno
import logging
import ssl
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import Self

    from aiohttp import web
    from prometheus_client import CollectorRegistry

    from fastctl.runtime._metrics_auth import Verdict

__all__ = ["Authorizer", "Check", "HealthServer", "HealthServerError", "PortInUseError"]

log = logging.getLogger("fastctl.health")

IDLE_TIMEOUT = 15.0
"""Seconds a connection may stay open without a complete request. aiohttp's default is
about an hour, so a client that sends half a request (or nothing) and waits holds a socket
that long, and a few thousand of them exhaust the pod's file descriptors; scrapers and the
kubelet just reconnect."""

Check = Callable[[], bool | tuple[bool, str]]
"""A health check: true when healthy, optionally with a reason for the response body."""


class HealthServerError(OSError):
    """The health/metrics server could not listen. ``str()`` is one line for the user (no
    ``[Errno 98]`` prefix); `errno` still says what happened, for code."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code


class PortInUseError(HealthServerError):
    """Another process (or another server in this one) already listens on the port."""


class Authorizer(Protocol):
    """What guards ``/metrics``: a verdict for the request's ``Authorization`` header."""

    def check(self, authorization: str | None) -> Awaitable[Verdict]: ...


def _always() -> bool:
    return True


class HealthServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on `host`:`port` (``port=0``:
    any free port; read `port` after `start`).

    `registry` defaults to prometheus_client's global ``REGISTRY``; `live` and `ready`
    default to always true. `metrics` and `probes` choose the paths served (both by
    default); `ssl_context` serves HTTPS; `authorizer` guards ``/metrics``. Also an async
    context manager (start on enter, stop on exit).
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "0.0.0.0",
        registry: CollectorRegistry | None = None,
        live: Check = _always,
        ready: Check = _always,
        metrics: bool = True,
        probes: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.what = "metrics" if metrics else "probe"
        if not 0 <= port <= 65535:
            raise ValueError(f"{self.what} port must be between 0 and 65535, not {port}")
        if not (metrics or probes):
            raise ValueError("a HealthServer must serve metrics, probes or both")
        self.port = port
        self.host = host
        if registry is None:  # prometheus_client's whole package: the server is about to run
            from prometheus_client import REGISTRY

            registry = REGISTRY
        self.registry = registry
        self.live = live
        self.ready = ready
        self.metrics = metrics
        self.probes = probes
        self.ssl_context = ssl_context
        self.authorizer = authorizer
        self._runner: web.AppRunner | None = None

    def __repr__(self) -> str:
        state = "serving" if self._runner is not None else "stopped"
        return f"<HealthServer {self.host}:{self.port} {state}>"

    async def start(self) -> None:
        """Listen and serve. Raises `PortInUseError` ("metrics port 8080 is already in
        use") or `HealthServerError` for other bind failures, without a chained traceback:
        the message is all an operator needs."""
        from aiohttp import web

        if self._runner is not None:
            raise RuntimeError("HealthServer is already started")
        app = web.Application(client_max_size=4096)  # GETs only: no body worth reading
        paths = []
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
            paths.append("/metrics")
        if self.probes:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/readyz", self._readyz)
            paths += ["/healthz", "/readyz"]
        # No access log: probes hit these every few seconds.
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, keepalive_timeout=IDLE_TIMEOUT
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise _bind_error(exc, self.host, self.port, self.what) from None
        self._runner = runner
        if self.port == 0:
            self.port = _bound_port(runner)
        scheme = "https" if self.ssl_context is not None else "http"
        log.debug("serving %s on %s://%s:%d", ", ".join(paths), scheme, self.host, self.port)

    async def stop(self) -> None:
        """Stop listening and close open connections; a no-op when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- handlers --------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if self.authorizer is not None:
            verdict = await self.authorizer.check(request.headers.get("Authorization"))
            if not verdict.allowed:
                headers = {"WWW-Authenticate": "Bearer"} if verdict.status == 401 else None
                return web.Response(
                    status=verdict.status, text=verdict.reason + "\n", headers=headers
                )
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest(self.registry)
        # CONTENT_TYPE_LATEST carries parameters (version, charset): set the header whole,
        # since aiohttp's content_type= takes a bare media type.
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return _answer(self.live, "live")

    async def _readyz(self, request: web.Request) -> web.Response:
        return _answer(self.ready, "ready")


def _answer(check: Check, what: str) -> web.Response:
    from aiohttp import web

    try:
        result = check()
    except Exception as exc:  # a probe answers; the failure becomes the reason
        log.warning("%s check failed: %r", what, exc)
        ok, reason = False, f"{what} check failed: {exc!r}"
    else:
        ok, reason = result if isinstance(result, tuple) else (bool(result), "")
    text = reason or ("ok" if ok else f"not {what}")
    return web.Response(status=200 if ok else 503, text=text + "\n")


def _bind_error(exc: OSError, host: str, port: int, what: str) -> HealthServerError:
    # asyncio raises a plain OSError whose errno is EADDRINUSE (or, for several addresses,
    # an OSError that names it only in its message).
    if exc.errno == errno.EADDRINUSE or "address already in use" in str(exc).lower():
        return PortInUseError(f"{what} port {port} is already in use", code=errno.EADDRINUSE)
    reason = exc.strerror or str(exc)
    serve = "metrics" if what == "metrics" else "probes"
    return HealthServerError(f"cannot serve {serve} on {host}:{port}: {reason}", code=exc.errno)


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the health server is listening on no TCP address")
