"""The HTTP transport of fastctl's OTLP export to a plain ``http://`` collector: the POST
made in Rust without the GIL (`fastctl._core.OtlpHttp`).

The OTLP exporter's client (`OTLPSpanExporter`'s) sends through a transport: by default a
``requests`` session, which trusts the environment, so every batch looks up the proxy
variables and ``~/.netrc`` and goes through requests' and urllib3's machinery, holding the
GIL the event loop needs (about 15 µs of CPU per change in the Widget benchmark,
docs/benchmarks.md). For an ``http://`` endpoint, with no proxy for it in the environment
and no ``.netrc`` entry for its host (both looked up once, when tracing is turned on), this
transport takes the session's place under the same client: the client still compresses,
retries, applies ``OTEL_EXPORTER_OTLP_*`` headers and timeout; only the socket work is
elsewhere, on one kept-alive connection (a forked child opens its own). ``https://``
(certificates, client keys: TLS is not done in the extension) keeps the exporter's own
transport.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

from fastctl._core import OtlpHttp

__all__ = ["RawTransport", "raw_transport"]

log = logging.getLogger("fastctl.tracing")


class _Headers(dict[str, str]):
    """An answer's headers, read case-insensitively (names are kept in lower case)."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class _Result(BaseHTTPResult):
    __slots__ = ("_content", "_headers")

    _content: bytes
    _headers: _Headers

    def __init__(
        self,
        status_code: int | None = None,
        reason: str | None = None,
        error: Exception | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes = b"",
    ) -> None:
        object.__setattr__(self, "status_code", status_code)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "_headers", _Headers(headers or {}))
        object.__setattr__(self, "_content", content)

    def content(self) -> bytes:
        return self._content

    def headers(self) -> Mapping[str, str]:
        return self._headers


class RawTransport(BaseHTTPTransport):
    """POSTs to one ``http://`` URL from Rust (`fastctl._core.OtlpHttp`)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        self.url = url
        self._http = http = OtlpHttp(parts.hostname or "", parts.port or 80, target)
        if hasattr(os, "register_at_fork"):  # a forked child opens a connection of its own
            os.register_at_fork(after_in_child=http.close)

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> BaseHTTPResult:
        if method != "POST" or url != self.url:
            return _Result(error=ValueError(f"{method} {url}: this transport POSTs to {self.url}"))
        given = [
            (k, v)
            for k, v in (headers or {}).items()
            if k.lower() not in ("host", "content-length")
        ]
        try:
            status, reason, answer, content = self._http.post(
                given, data or b"", 3600.0 if timeout is None else timeout
            )
        except (ConnectionError, TimeoutError) as error:
            return _Result(error=error)
        return _Result(status, reason, None, dict(answer), content)

    def is_connection_error(self, exception: Exception | None) -> bool:
        return isinstance(exception, ConnectionError)

    def close(self) -> None:
        self._http.close()


def _netrc_has(host: str) -> bool:
    """Whether a ``.netrc`` file names `host` (requests would add its credentials)."""
    try:
        from requests.utils import get_netrc_auth
    except ImportError:
        return False
    try:
        return get_netrc_auth(f"http://{host}/") is not None
    except Exception:
        return True  # unreadable: leave it to requests


def raw_transport(client: Any) -> bool:
    """Put `RawTransport` under the OTLP exporter's `client` where its endpoint is plain
    ``http://`` and nothing of the environment's would change the request (a proxy, a
    ``.netrc`` entry); whether it did."""
    url = getattr(client, "_endpoint", None)
    transport = getattr(client, "_transport", None)
    if not isinstance(url, str) or not isinstance(transport, BaseHTTPTransport):
        return False
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
        return False
    try:
        parts.port  # noqa: B018 - a bad port raises
    except ValueError:
        return False
    type_name = type(transport).__name__
    if type_name != "RequestsHTTPTransport":
        return False  # a transport of the user's: theirs
    session = getattr(transport, "_session", None)
    if session is None or getattr(session, "auth", None) is not None:
        return False  # credentials of a session given by the user
    if type(session).__name__ != "Session" or session.proxies or session.hooks.get("response"):
        return False
    proxies = urllib.request.getproxies()
    if (proxies.get("http") or proxies.get("all")) and not urllib.request.proxy_bypass(
        parts.hostname
    ):
        return False
    headers = getattr(client, "_headers", {})
    if "authorization" not in {k.lower() for k in headers} and _netrc_has(parts.hostname):
        return False
    client._transport = RawTransport(url)
    transport.close()
    log.debug("OTLP export to %s: sent from the extension", url)
    return True
