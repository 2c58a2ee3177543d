"""`WebhookServer`: the HTTPS endpoint the API server calls, on aiohttp.

It serves every webhook of a `Webhooks` at its own path, in the operator's event loop (as a
Manager component: ``manager.add_runnable(server)``) or on its own (``async with``). What
it guarantees the API server:

- an answer with a body to every request: an AdmissionReview or ConversionReview for any
  review it can parse (a failing handler is a denial, see `fastctl.webhook.AdmissionWebhook`),
  and a one-line text error otherwise: 400 for a body that is not a review, 404 for an
  unknown path, 413 for a body over `max_body_bytes`, 504 past `request_timeout`;
- metrics under controller-runtime's names (`WebhookMetrics`, `fastctl.webhook._metrics`);
- while tracing is on (docs/tracing.md), a span per call, continuing the API server's trace
  when its request carries one.

TLS is required by the API server; `certificate` gives it, and is reloaded on change when
it comes from files (`ServingCertificate.watch`). ``certificate=None`` serves plain HTTP,
for tests behind something that terminates TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from fastctl._clock import monotonic
from fastctl._tls import ServingCertificate
from fastctl._tracing import webhook_span
from fastctl.webhook._admission import AdmissionWebhook
from fastctl.webhook._metrics import WebhookMetrics
from fastctl.webhook._registry import Webhooks
from fastctl.webhook._review import ReviewError, parse_admission_review

if TYPE_CHECKING:
    from typing import Self

__all__ = ["MAX_BODY_BYTES", "WebhookServer"]

log = logging.getLogger("fastctl.webhook")

MAX_BODY_BYTES = 7 * 1024 * 1024
"""An AdmissionReview carries an object and its old version, each up to etcd's 3 MiB (or
so): 7 MiB, as controller-runtime allows."""

Answer = Callable[[bytes], Awaitable[dict[str, Any]]]


def _admission(webhook: AdmissionWebhook) -> Answer:
    async def answer(body: bytes) -> dict[str, Any]:
        return await webhook.review(parse_admission_review(body))

    return answer


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n")


class WebhookServer:
    """Serves `webhooks` on `host`:`port` (``port=0``: any free port; read `port` after
    `start`). Also an async context manager (start on enter, stop on exit)."""

    def __init__(
        self,
        webhooks: Webhooks,
        certificate: ServingCertificate | None,
        *,
        port: int = 9443,
        host: str = "0.0.0.0",
        registry: CollectorRegistry | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout: float = 30.0,
        reload_interval: float = 1.0,
    ) -> None:
        self.webhooks = webhooks
        self.certificate = certificate
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.reload_interval = reload_interval
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = WebhookMetrics(self.registry)
        self._routes: dict[str, Answer] = {}
        for webhook in webhooks.admission:
            self._routes[webhook.path] = _admission(webhook)
        for converter in webhooks.converters:
            self._routes[converter.path] = converter.review
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def paths(self) -> list[str]:
        return list(self._routes)

    @property
    def url(self) -> str:
        """``https://host:port`` (the base of every webhook's path)."""
        scheme = "https" if self.certificate is not None else "http"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body_bytes)
        for path in self._routes:
            app.router.add_post(path, self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        context = self.certificate.ssl_context if self.certificate is not None else None
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        if self.certificate is not None and self.reload_interval > 0:
            self._watch = asyncio.get_running_loop().create_task(
                self.certificate.watch(self.reload_interval), name="webhook certificate reload"
            )
        log.info("serving %d webhook(s) on %s", len(self._routes), self.url)

    def is_ready(self) -> tuple[bool, str]:
        """Listening, or false with the reason: a Manager's ``/readyz`` holds until the
        replica can answer the API server's reviews."""
        if self._runner is None:
            return False, "webhook server not serving"
        return True, "webhooks served"

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

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

    async def _serve(self, request: web.Request) -> web.Response:
        path = request.path
        started = monotonic()
        self.metrics.in_flight.labels(path).inc()
        try:
            with webhook_span(path, request.headers) as span:  # while tracing is on
                response = await self._answer(request, self._routes[path])
                span.answered(response.status)
        finally:
            self.metrics.in_flight.labels(path).dec()
        self.metrics.latency.labels(path).observe(monotonic() - started)
        self.metrics.requests.labels(path, str(response.status)).inc()
        return response

    async def _answer(self, request: web.Request, answer: Answer) -> web.Response:
        try:
            async with asyncio.timeout(self.request_timeout):
                body = await request.read()
                review = await answer(body)
        except web.HTTPRequestEntityTooLarge:
            return _text(413, f"the body is over the limit of {self.max_body_bytes} bytes")
        except ReviewError as exc:
            return _text(400, str(exc))
        except TimeoutError:
            log.error("%s: no answer within %g s", request.path, self.request_timeout)
            return _text(504, f"no answer within {self.request_timeout:g} s")
        except Exception as exc:  # a bug of fastctl's: still an answer with a body
            log.exception("%s: answering failed", request.path)
            return _text(500, f"answering failed: {exc!r}")
        return web.Response(body=orjson.dumps(review), content_type="application/json")
