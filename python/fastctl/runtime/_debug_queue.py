"""``/debug/queue``: the controllers' queues as JSON, for ``fastctl inspect``.

- ``GET /debug/queue``: every controller's `QueueSummary`;
- ``GET /debug/queue/<controller>``: one controller's;
- ``GET /debug/queue/<controller>/<namespace>/<name>`` (``<controller>/<name>`` for a
  cluster-scoped object): one object's `ObjectInspection`.

Why a listener of its own, on ``127.0.0.1`` (`DEFAULT_PORT`), off unless asked for
(``Manager(debug_queue_port=...)``, ``fastctl run --debug-queue``), rather than a path on
the metrics server: the metrics server listens on every address for Prometheus, and its
TokenReview and SubjectAccessReview would make every ``fastctl inspect`` fetch a token
first. On loopback, only what runs in the pod reaches it: ``kubectl exec`` into it, or
``kubectl port-forward`` (which connects from the pod's own loopback), both of which the
cluster's RBAC already guards (``pods/exec``, ``pods/portforward``). On top of the bind,
each request is checked: a peer that is not a loopback address, or a ``Host`` header that
is not a loopback name (a DNS-rebinding page in a browser next to a port-forward), gets
403, unless `allow_remote` (a Manager given a non-loopback ``debug_queue_host``).

The answers carry names, states, counts and reason texts, never an object's contents.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from fastctl.runtime._health import IDLE_TIMEOUT, _bind_error, _bound_port
from fastctl.runtime._inspect import ObjectInspection, QueueSummary

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["DEFAULT_PORT", "DebugQueueServer", "is_loopback"]

log = logging.getLogger("fastctl.debug")

DEFAULT_PORT = 8082
"""The debug listener's port when none is given (beside the probes' 8081)."""


class Inspectable(Protocol):
    """What the server asks of a controller."""

    @property
    def name(self) -> str: ...
    def inspect(self, namespace: str | None, name: str) -> ObjectInspection: ...
    def queue_summary(self) -> QueueSummary: ...


def is_loopback(address: str | None) -> bool:
    """Whether `address` (an IP, as aiohttp reports a peer) is a loopback address."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _host_is_loopback(host: str | None) -> bool:
    """Whether a ``Host`` header (``localhost:8082``, ``[::1]:8082``) names loopback."""
    if not host:
        return False
    if host.startswith("["):
        name = host[1 : host.find("]")]
    elif host.count(":") == 1:
        name = host.split(":", 1)[0]
    else:
        name = host
    return name.lower() == "localhost" or is_loopback(name)


class DebugQueueServer:
    """Serves ``/debug/queue`` for `controllers()` on `host`:`port` (``port=0``: any free
    port; read `port` after `start`). A Manager runnable."""

    def __init__(
        self,
        controllers: Callable[[], Sequence[Inspectable]],
        *,
        port: int = DEFAULT_PORT,
        host: str = "127.0.0.1",
        allow_remote: bool = False,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"debug queue port must be between 0 and 65535, not {port}")
        self.controllers = controllers
        self.port = port
        self.host = host
        self.allow_remote = allow_remote
        self._runner: web.AppRunner | None = None

    def __repr__(self) -> str:
        state = "serving" if self._runner is not None else "stopped"
        return f"<DebugQueueServer {self.host}:{self.port} {state}>"

    def app(self) -> web.Application:
        from aiohttp import web

        app = web.Application(client_max_size=4096)
        app.router.add_get("/debug/queue", self._all)
        app.router.add_get("/debug/queue/{controller}", self._one)
        app.router.add_get("/debug/queue/{controller}/{name}", self._object)
        app.router.add_get("/debug/queue/{controller}/{namespace}/{name}", self._object)
        return app

    async def start(self) -> None:
        from aiohttp import web

        if self._runner is not None:
            raise RuntimeError("DebugQueueServer is already started")
        runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, keepalive_timeout=IDLE_TIMEOUT
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise _bind_error(exc, self.host, self.port, "debug queue") from None
        self._runner = runner
        if self.port == 0:
            self.port = _bound_port(runner)
        log.info("serving /debug/queue on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- handlers ---------------------------------------------------------------------------

    def _refusal(self, request: web.Request) -> web.Response | None:
        if self.allow_remote:
            return None
        if not is_loopback(request.remote):
            return _json({"error": "the debug queue answers local clients only"}, 403)
        if not _host_is_loopback(request.host):
            return _json({"error": "the debug queue answers loopback Host names only"}, 403)
        return None

    def _find(self, name: str) -> Inspectable | None:
        for ctl in self.controllers():
            if ctl.name == name:
                return ctl
        return None

    def _unknown(self, name: str) -> web.Response:
        known = sorted(c.name for c in self.controllers())
        return _json({"error": f"no controller named {name!r}", "controllers": known}, 404)

    async def _all(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        body = {"controllers": [c.queue_summary().to_json() for c in self.controllers()]}
        return _json(body)

    async def _one(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        ctl = self._find(request.match_info["controller"])
        if ctl is None:
            return self._unknown(request.match_info["controller"])
        return _json(ctl.queue_summary().to_json())

    async def _object(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        info = request.match_info
        ctl = self._find(info["controller"])
        if ctl is None:
            return self._unknown(info["controller"])
        try:
            answer = ctl.inspect(info.get("namespace"), info["name"])
        except (TypeError, ValueError) as exc:
            return _json({"error": str(exc)}, 400)
        return _json(answer.to_json())


def _json(body: Any, status: int = 200) -> web.Response:
    from aiohttp import web

    return web.Response(
        body=orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
        status=status,
        content_type="application/json",
    )
