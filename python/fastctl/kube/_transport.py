"""The lean transport: fastctl's object calls on keep-alive connections of its own.

An object call (get, create, patch, apply, delete, a status patch, a list page) is a small
request and a small answer. Through aiohttp it costs about 170 µs of client CPU: URL objects,
header multidicts, a stream reader, timers and trace hooks per request; written as one
buffer on an `asyncio.Protocol` and framed in the extension (`fastctl.kube._http1`) it
costs a fraction of that. `fastctl.kube._http.request` sends a request here when it is a watch
(``stream=True``: its body is decoded as it arrives, `fastctl.kube._watch_stream`) or has a
total timeout and nothing else (a paginated list's page, with a read timeout instead, stays
on aiohttp), and the client's `Pool` (`pool_for`) exists: the client is configured as the
lean transport supports. Otherwise, the request goes on kubernetes-asyncio's aiohttp
session as before:

- a proxy (the configuration's, or ``*_proxy`` variables or a ``.netrc`` for a session
  that reads the environment), a fake cluster of a test (`fastctl.kube._in_memory`);
- a session that is not kubernetes-asyncio's plain one (default headers or auth, a base
  URL, trace configs or middlewares, e.g. an instrumentation's), a connector that is not a
  TCP connector with an ``SSLContext`` for https, a server URL with user info or a query.

TLS is done in the extension with rustls (`fastctl._core.TlsSession`, fed by
`fastctl.kube._tls_connection.TlsConnection` from a plain TCP connection: one call per read and per
request) from the configuration's files, read when the pool is made: the CA file, the
client certificate and key, ``verify_ssl``, with ``tls_server_name`` (else the server's host,
a name or an IP address) as the name its certificate must carry. It is the session's own
``SSLContext`` (kubernetes-asyncio builds it from the same settings; Python's `ssl` over
the event loop's SSL transport) when rustls cannot take the configuration (no CA file
with ``verify_ssl``: the system's roots; an encrypted key or one ring cannot sign with;
``disable_strict_ssl_verification``; a file unreadable or not PEM), when the session is not
one kubernetes-asyncio made from the configuration, or when `TLS_SWITCH` says ``python``.
Certificates refused by either are ``ClientConnectorCertificateError`` naming the problem.
The client's ``default_headers`` and bearer token are headers `request` passes in. A pool
keeps at most the connector's limit of connections (kubernetes-asyncio's
``connection_pool_maxsize``, 100) for requests read whole, with waiters beyond it (a
watch's connection is outside the bound while it streams: the watches, which hold theirs
for minutes, never leave object calls without one); an idle connection is closed
after `IDLE_SECONDS` (aiohttp's keep-alive timeout); a connection goes back to the pool only
after its whole answer was read, and a request that fails, times out or is cancelled drops
its connection. Closing the client (``ApiClient.close``) closes the pool.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
import sys
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from yarl import URL

from fastctl._core import TlsConfig
from fastctl.kube._http1 import Connection, LeanResponse
from fastctl.kube._lazy_import import is_deferred
from fastctl.kube._lazy_rest import LazyRest
from fastctl.kube._tls_connection import TlsConnection
from fastctl.kube._watch_stream import LeanStream

__all__ = [
    "IDLE_SECONDS",
    "SWITCH",
    "TLS_SWITCH",
    "LeanResponse",
    "LeanStream",
    "Pool",
    "pool_for",
]

IDLE_SECONDS = 15.0
"""How long a connection may stay idle in the pool (aiohttp's keep-alive timeout)."""

_SAFE_PATH = re.compile(r"[A-Za-z0-9._~/:@!$&'()*+,;=-]*").fullmatch
"""A path sent as it is; any other (a space, ``%``, ``?``) is quoted as aiohttp would."""

_PROXY_VARIABLES = tuple(
    name
    for scheme in ("http", "https", "ws", "wss", "all")
    for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY")
)


class Pool:
    """The keep-alive connections of one client to its API server, on one event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        session: aiohttp.ClientSession | None,
        base: str,
        context: ssl.SSLContext | None,
        server_hostname: str | None,
        limit: int,
        tls: TlsConfig | None = None,
    ) -> None:
        """With `tls` (and `context`, for what errors name), TLS is rustls's, the server name
        `server_hostname` or else the host."""
        url = URL(base)
        self.loop, self.session, self.base, self.limit = loop, session, base, limit
        self.host = url.raw_host or ""
        self.port = url.port or (443 if context is not None else 80)
        self.prefix = base.split("://", 1)[1].partition("/")[2]
        self.prefix = "/" + self.prefix if self.prefix else ""
        self.ssl, self.server_hostname = context, server_hostname if context else None
        self.tls = tls if context is not None else None
        self.tls_name = server_hostname or self.host
        self.host_line = f"Host: {url.host_port_subcomponent}\r\n"
        self.clock = time.perf_counter
        self.count = 0  # connections open or being opened, and places handed to waiters
        self.idle: list[Connection] = []  # the most recently used last
        self.waiters: deque[asyncio.Future[Connection | None]] = deque()
        self.sweeper: asyncio.TimerHandle | None = None
        self.streams: set[Connection] = set()  # the connections of watches under way
        self.closed = False

    async def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes | None,
        total: float | None,
        stream: tuple[float, float] | None = None,
    ) -> tuple[LeanResponse | LeanStream, float]:
        """Send one request and read its whole answer: the answer, and the `clock` time its
        head arrived (what the request metrics time). A watch (`stream`: its connect and
        read timeouts) returns once the head of a 200 is in: a `LeanStream` that holds the
        connection until released."""
        data = self._message(method, path, params, headers, body)
        loop = self.loop
        deadline = None if total is None else loop.time() + total
        if stream is not None:  # the connect timeout, then the read timeout for the head
            conn = self._idle() or await self._acquire(loop.time() + stream[0])
            deadline = loop.time() + stream[1]
        else:
            conn = self._idle() or await self._acquire(deadline)
        waiter: asyncio.Future[None] = loop.create_future()
        conn.arm(loop, deadline)
        try:
            conn.send(data, waiter, method == "HEAD", None if stream is None else stream[1])
            await waiter
        except BaseException:  # failed, timed out or cancelled: never reused mid-answer
            conn.abort()
            self._forget(conn)
            raise
        finally:
            conn.deadline = None
        if conn.stream is not None:  # a watch holds its connection outside the bound
            self.streams.add(conn)
            self._forget(conn)
            return conn.stream, conn.head_at
        answer = LeanResponse(conn.status, conn.reason, conn.head, conn.body)
        head_at = conn.head_at
        conn.waiter, conn.body, conn.head = None, b"", b""
        self._release(conn)
        return answer, head_at

    def close(self) -> None:
        """Close the idle connections (a request under way closes its own when done) and
        the watches' (which fail as aiohttp's do when its session closes), and fail the
        waiters."""
        self.closed = True
        if self.sweeper is not None:
            self.sweeper.cancel()
            self.sweeper = None
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(aiohttp.ClientConnectionError("the client was closed"))
        for conn in list(self.streams):
            conn.abort()
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()
            self._forget(conn)

    def finished(self, conn: Connection, clean: bool) -> None:
        """A watch's stream on `conn` was released: read to its end (`clean`), the
        connection is reused while the bound has a place for it, else dropped."""
        self.streams.discard(conn)
        place = not self.limit or self.count < self.limit
        if clean and place and not self.closed and conn.keep_alive and conn.usable:
            conn.reuse()
            conn.counted = True
            self.count += 1
            self._release(conn)
        else:
            conn.abort()
            self._forget(conn)

    def lost(self, conn: Connection) -> None:
        """`conn` closed while no request waited on it (the server closed an idle one)."""
        if conn in self.idle:
            self.idle.remove(conn)
            self._forget(conn)

    # -- connections --------------------------------------------------------------------

    async def _acquire(self, deadline: float | None) -> Connection:
        while True:
            conn = self._idle()
            if conn is None:
                async with asyncio.timeout_at(deadline):
                    conn = await self._open()
            if conn.usable:
                return conn
            self._forget(conn)

    def _idle(self) -> Connection | None:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if conn.usable:
                return conn
            self._forget(conn)
        return None

    async def _open(self) -> Connection:
        """A new connection, once there is a place for it; or an idle one a waiter was
        handed."""
        if self.limit and self.count >= self.limit:
            handed = await self._turn()
            if handed is not None:
                return handed
        else:
            self.count += 1
        try:
            if self.tls is not None:
                conn = await self._open_tls(self.tls)
            else:
                _, conn = await self.loop.create_connection(
                    functools.partial(Connection, self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname,
                )
        except BaseException as exc:
            self._free()
            error = self._connect_error(exc)
            if error is exc:
                raise
            raise error from exc
        return conn

    async def _open_tls(self, tls: TlsConfig) -> Connection:
        """A plain TCP connection, then rustls's handshake on it."""
        _, conn = await self.loop.create_connection(
            functools.partial(TlsConnection, self, tls, self.tls_name), self.host, self.port
        )
        try:
            await conn.ready
        except BaseException:
            if not conn.ready.done():
                conn.ready.cancel()
            conn.abort()
            raise
        return conn

    async def _turn(self) -> Connection | None:
        """Wait at the bound: for a connection given back (handed over) or a place freed
        (``None``: open one)."""
        waiter: asyncio.Future[Connection | None] = self.loop.create_future()
        self.waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()  # given, then cancelled: pass it on
                if handed is None:
                    self._free()
                else:
                    self._release(handed)
            elif waiter in self.waiters:
                self.waiters.remove(waiter)
            raise

    def _release(self, conn: Connection) -> None:
        if self.closed or not conn.keep_alive or not conn.usable:
            conn.close()
            self._forget(conn)
            return
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = self.loop.time()
        self.idle.append(conn)
        if self.sweeper is None:
            self.sweeper = self.loop.call_later(IDLE_SECONDS, self._sweep)

    def _forget(self, conn: Connection) -> None:
        """`conn` no longer holds a place in the pool (once, however often it is said)."""
        if conn.counted:
            conn.counted = False
            self._free()

    def _free(self) -> None:
        """A place freed: a waiter's turn to open a connection, or one less counted."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.count -= 1

    def _sweep(self) -> None:
        """Close the connections idle for `IDLE_SECONDS`; come back for the others."""
        self.sweeper = None
        expired = self.loop.time() - IDLE_SECONDS * 0.99  # a timer may run a hair early
        keep = [conn for conn in self.idle if conn.idle_since > expired]
        for conn in self.idle:
            if conn.idle_since <= expired:
                conn.close()
                self._forget(conn)
        self.idle = keep
        if keep:
            self.sweeper = self.loop.call_at(keep[0].idle_since + IDLE_SECONDS, self._sweep)

    def _connect_error(self, exc: BaseException) -> BaseException:
        """What aiohttp's connector raises for a connection that could not be made."""
        if not isinstance(exc, OSError):  # ssl.SSLError and CertificateError are OSErrors
            return exc
        from aiohttp.client_reqrep import ConnectionKey  # on failure only: it is not light

        key = ConnectionKey(self.host, self.port, self.ssl is not None, self.ssl or False,
                            None, None, None, self.server_hostname)  # fmt: skip
        if isinstance(exc, ssl.CertificateError):
            return aiohttp.ClientConnectorCertificateError(key, exc)
        if isinstance(exc, ssl.SSLError):
            return aiohttp.ClientConnectorSSLError(key, exc)
        return aiohttp.ClientConnectorError(key, exc)

    # -- the request's bytes ------------------------------------------------------------

    def _message(
        self, method: str, path: str, params: Mapping[str, str], headers: Mapping[str, str],
        body: bytes | None,
    ) -> bytes:  # fmt: skip
        if _SAFE_PATH(path):
            target = self.prefix + path
            if params:
                target += "?" + "&".join([_pair(k, v) for k, v in params.items()])
        else:  # quoted as aiohttp quotes it
            url = URL(self.base + path)
            target = (url.extend_query(params) if params else url).raw_path_qs
        lines = [f"{method} {target} HTTP/1.1\r\n", self.host_line]
        for name, value in headers.items():
            if "\n" in value or "\r" in value:
                raise ValueError(f"a newline in the value of the header {name!r}")
            lines.append(f"{name}: {value}\r\n")
        if "Accept-Encoding" not in headers:
            lines.append("Accept-Encoding: gzip, deflate\r\n")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n\r\n")
            return "".join(lines).encode() + body
        if method in ("POST", "PUT", "PATCH"):
            lines.append("Content-Length: 0\r\n")
        lines.append("\r\n")
        return "".join(lines).encode()


@functools.lru_cache(maxsize=512)
def _pair(name: str, value: str) -> str:
    """One ``name=value`` of a query, quoted (cached: calls repeat their field manager,
    ``dryRun``, ``fieldValidation``...)."""
    from urllib.parse import quote_plus

    safe = "?/:@!$'()*,;"
    return f"{quote_plus(name, safe=safe)}={quote_plus(value, safe=safe)}"


def pool_for(client: ApiClient) -> Pool | None:
    """The client's lean `Pool` on the running loop, or ``None`` when its requests must go
    on its aiohttp session (see the module docstring)."""
    rest = client.rest_client
    cached: tuple[Any, str | None, Any, Pool | None] | None = rest.__dict__.get("_fastctl_lean")
    # A client of `load_client` without a session yet: its pool is made from its
    # configuration (`fastctl.kube._lazy_rest`), and kept when the session is made later,
    # unless aiohttp is loaded already (something may have set its session up
    # differently: it is made and looked at, then) or a session is assigned.
    session: Any = rest
    if not (cached is not None and cached[0] is rest and not rest.replaced) and not _unmade(rest):
        session = rest.pool_manager
    host = client.configuration.host
    loop = asyncio.get_running_loop()
    if cached is not None and cached[0] is session and cached[1] == host and cached[2] is loop:
        pool = cached[3]
        return None if pool is None or pool.closed else pool
    if cached is not None and cached[3] is not None:
        _close(cached[2], cached[3])  # made for another session, server or loop
    pool = _new_pool(loop, rest, session, host, client.configuration)
    rest.__dict__["_fastctl_lean"] = (session, host, loop, pool)
    if pool is not None and not rest.__dict__.get("_fastctl_close_hooked"):
        _close_pool_with(rest)
    return pool


SWITCH = "FASTCTL_HTTP"
"""``aiohttp`` sends every request on kubernetes-asyncio's aiohttp session, as before the
lean transport (an operator that meets a server the transport does not get right needs no
code change to step around it); ``lean``, the default, uses the transport where it applies.
Read when a client's pool is made."""


TLS_SWITCH = "FASTCTL_TLS"
"""``python`` makes the lean transport's TLS Python's `ssl` (the session's ``SSLContext``)
for every client, as before TLS moved into the extension; ``rustls``, the default, uses
the extension's where the configuration allows (see the module docstring). Read when a
client's pool is made."""


def _rustls_allowed() -> bool:
    choice = os.environ.get(TLS_SWITCH, "rustls")
    if choice not in ("rustls", "python"):
        raise ValueError(f"{TLS_SWITCH} must be 'rustls' or 'python', not {choice!r}")
    return choice == "rustls"


def _rustls_config(configuration: Any) -> TlsConfig | None:
    """rustls's settings from the configuration's files, or ``None``: Python's `ssl`
    (see the module docstring)."""
    if not _rustls_allowed() or not isinstance(configuration, Configuration):
        return None
    if getattr(configuration, "disable_strict_ssl_verification", False):
        return None
    verify = bool(configuration.verify_ssl)
    try:
        ca = _read(configuration.ssl_ca_cert) if verify else None
        cert = _read(configuration.cert_file)
        key = _read(configuration.key_file) if cert is not None else None
        return TlsConfig(ca, cert, key, verify)
    except (OSError, ValueError):  # unreadable, or what rustls does not take
        return None


def _read(path: str | None) -> bytes | None:
    return None if not path else Path(path).read_bytes()


def _made_from(rest: Any, context: ssl.SSLContext, configuration: Any) -> bool:
    """Whether the session is the one kubernetes-asyncio's REST client made from the
    configuration (so the configuration's files are its TLS), as far as can be told: not
    one assigned afterwards."""
    if isinstance(rest, LazyRest):
        return not rest.replaced
    from kubernetes_asyncio.client.rest import RESTClientObject

    verify = context.verify_mode != ssl.CERT_NONE
    return type(rest) is RESTClientObject and verify == bool(configuration.verify_ssl)


def _unmade(rest: Any) -> bool:
    """Whether `rest` is a `LazyRest` whose session neither exists nor was replaced, with
    aiohttp not loaded yet (so nothing can have changed how its session would be made)."""
    if not isinstance(rest, LazyRest) or rest.made or rest.replaced:
        return False
    module = sys.modules.get("aiohttp")
    return module is None or is_deferred(module)


def _lean_allowed() -> bool:
    choice = os.environ.get(SWITCH, "lean")
    if choice not in ("lean", "aiohttp"):
        raise ValueError(f"{SWITCH} must be 'lean' or 'aiohttp', not {choice!r}")
    return choice == "lean"


def _new_pool(
    loop: asyncio.AbstractEventLoop, rest: Any, session: Any, host: str | None,
    configuration: Any = None,
) -> Pool | None:  # fmt: skip
    if not _lean_allowed():
        return None
    if session is rest:  # a `LazyRest` without a session: plain, as kubernetes-asyncio's
        return _pool_from_configuration(loop, rest, host, configuration)
    if not isinstance(session, aiohttp.ClientSession) or session.closed or not host:
        return None
    if rest.proxy or rest.proxy_headers or (session.trust_env and _environment_applies()):
        return None
    plain = (
        not session.headers
        and session.auth is None
        and getattr(session, "_base_url", None) is None
        and not getattr(session, "_trace_configs", None)
        and not getattr(session, "_middlewares", None)
        and getattr(session, "_raise_for_status", False) is False
        and getattr(session, "_auto_decompress", True) is True
    )
    connector = session.connector
    if not plain or not isinstance(connector, aiohttp.TCPConnector):
        return None
    scheme = _scheme(host)
    context: ssl.SSLContext | None = None
    if scheme == "https":
        context = getattr(connector, "_ssl", None)
        if not isinstance(context, ssl.SSLContext):
            return None
    elif scheme != "http":
        return None
    tls = None
    if context is not None and _made_from(rest, context, configuration):
        tls = _rustls_config(configuration)
    return Pool(loop, session, host, context, rest.server_hostname, connector.limit, tls)


def _pool_from_configuration(
    loop: asyncio.AbstractEventLoop, rest: LazyRest, host: str | None, configuration: Any
) -> Pool | None:
    """The pool of a client whose session is not made: what kubernetes-asyncio's session
    would be, plain, with the TLS context and limit its connector would have."""
    if not host or rest.proxy or rest.proxy_headers:
        return None
    if rest.trust_env and _environment_applies():
        return None
    scheme = _scheme(host)
    if scheme not in ("http", "https"):
        return None
    context = rest.ssl_context if scheme == "https" else None
    tls = _rustls_config(configuration) if context is not None else None
    return Pool(loop, None, host, context, rest.server_hostname, rest.maxsize, tls)


def _scheme(host: str | None) -> str | None:
    """The server URL's scheme if the transport can send to it as it is, else ``None``."""
    try:
        url = URL(host or "")
    except ValueError:  # aiohttp says what is wrong with it (InvalidURL)
        return None
    if url.user or url.password or not url.raw_host:
        return None
    if url.query_string or url.fragment or not _SAFE_PATH(url.raw_path):
        return None
    return url.scheme


def _environment_applies() -> bool:
    """Whether a session that reads the environment would find a proxy or a ``.netrc``."""
    if any(os.environ.get(v) for v in _PROXY_VARIABLES):
        return True
    netrc = os.environ.get("NETRC") or Path("~/.netrc").expanduser()
    return Path(netrc).exists()


def _close_pool_with(rest: Any) -> None:
    """Make closing the REST client (``ApiClient.close``) close its pool first."""
    close = rest.close

    async def close_with_pool() -> None:
        cached = rest.__dict__.get("_fastctl_lean")
        if cached is not None and cached[3] is not None:
            _close(cached[2], cached[3])
        await close()

    rest.close = close_with_pool
    rest.__dict__["_fastctl_close_hooked"] = True


def _close(loop: asyncio.AbstractEventLoop, pool: Pool) -> None:
    """Close `pool` on its own loop (its connections are that loop's); a closed loop took
    them with it."""
    if loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is running or not loop.is_running():
        pool.close()
    else:
        loop.call_soon_threadsafe(pool.close)
