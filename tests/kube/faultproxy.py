"""A fault-injecting HTTP proxy in front of the real kube-apiserver (toxiproxy in spirit).

The watcher is tested against the real API server; some failures, though, cannot be
produced by the server on demand: a TCP connection that goes silent without closing, a
corrupt line in a watch stream, a burst of 429s or 503s. The proxy terminates plain HTTP
from the client under test, forwards every request to kube-apiserver over TLS as the admin,
and streams the answers back line by line, so it can:

- record every request (`requests`: method and path with query; `arrivals`: when each came,
  on the loop's clock) for assertions;
- `freeze` the streams open right now (they stop forwarding but stay open: a dead peer);
- `cut` the streams open right now (the client sees the connection drop);
- `inject` a line into the open watch streams, before the next real line;
- `hold_list_ends`: forward a streaming list's objects but hold back its end marker (the
  bookmark annotated ``k8s.io/initial-events-end``) until `release_list_ends`, so a test
  can look at a client in the middle of a (re)list, with every object received;
- `fail` the next requests matching a predicate with a given status and Status body
  (`heal` forgets those not yet used);
- be `down` (every request answered 503) while a test changes the world behind it;
- `throttle_writes`: answer every other write (POST, PUT, PATCH, DELETE) with 429 and a
  ``Retry-After``, as API priority and fairness does to a flow over its share, until
  `unthrottle` (`throttled` counts the writes refused so);
- show the watch streams late: with `watch_delay` set, each line of a watch stream is
  forwarded that many seconds after it came (in order, the stream read on meanwhile), while
  every other request passes at once (a loaded watch cache, a slow network path);
- not be there yet: `start` it on a port chosen beforehand, so that a client configured
  with that port first has its connections refused.

It asks the server for JSON even where the client asks for protobuf (the watches of
ConfigMaps and Secrets), since it reads streams as lines; the protobuf path is tested
without it (test_protobuf.py).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson
from aiohttp import web

__all__ = ["FaultProxy", "admin_ssl_context"]

_HOP_HEADERS = ("content-type", "retry-after", "audit-id", "warning")


@dataclass(eq=False)
class _Stream:
    request: web.Request
    frozen: bool = False
    injected: list[bytes] = field(default_factory=list)


@dataclass
class _Failure:
    status: int
    remaining: int
    match: Callable[[str, str], bool]
    retry_after: int | None


class FaultProxy:
    """Plain HTTP on 127.0.0.1 in front of `upstream` (an ``https://`` API server)."""

    def __init__(self, upstream: str, ssl_context: ssl.SSLContext) -> None:
        self.upstream = upstream.rstrip("/")
        self._ssl = ssl_context
        self.requests: list[tuple[str, str]] = []
        self.arrivals: list[float] = []  # the loop's time of each of `requests`
        self._throttle_every = 0  # 0: off; n: the n-th write of each n is refused
        self._throttle_retry_after = 1
        self._writes_seen = 0
        self.throttled = 0
        self.down = False
        self._streams: set[_Stream] = set()
        self._failures: list[_Failure] = []
        self._closing = asyncio.Event()
        self._list_ends = asyncio.Event()
        self._list_ends.set()
        self.held_list_ends = 0  # list end markers waiting for `release_list_ends`
        self.watch_delay = 0.0  # seconds each watch line is held back (read when it comes)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self, port: int = 0) -> str:
        """Listen on `port` (0: any free one); until then, connections to it are refused."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl), read_bufsize=2**21
        )
        app = web.Application(client_max_size=2**26)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def close(self) -> None:
        self._closing.set()
        self.cut()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- faults ---------------------------------------------------------------------------

    def freeze(self) -> int:
        """Stop forwarding on every open stream without closing it; returns how many."""
        for stream in self._streams:
            stream.frozen = True
        return len(self._streams)

    def cut(self) -> int:
        """Drop every open stream's client connection; returns how many."""
        streams = list(self._streams)
        for stream in streams:
            transport = stream.request.transport
            if transport is not None:
                transport.abort()
        return len(streams)

    def inject(self, line: bytes) -> int:
        """Send `line` on every open watch stream before its next real line."""
        watches = [s for s in self._streams if "watch=" in s.request.query_string]
        for stream in watches:
            stream.injected.append(line)
        return len(watches)

    def hold_list_ends(self) -> None:
        """From now on, hold back every streaming list's end marker (see the module
        docstring); `held_list_ends` counts those waiting."""
        self._list_ends.clear()

    def release_list_ends(self) -> None:
        """Send the held list end markers, and stop holding them."""
        self._list_ends.set()

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        match: Callable[[str, str], bool] = lambda method, path: True,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next `times` requests that `match` (method, path) with `status`."""
        self._failures.append(_Failure(status, times, match, retry_after))

    def throttle_writes(self, *, every: int = 2, retry_after: int = 1) -> None:
        """From now on, answer one write in `every` (every other one by default) with 429
        TooManyRequests, a ``Retry-After: retry_after`` header and the Status's
        ``details.retryAfterSeconds``, without forwarding it."""
        self._throttle_every = every
        self._throttle_retry_after = retry_after
        self._writes_seen = 0

    def unthrottle(self) -> None:
        """Forward every write again."""
        self._throttle_every = 0

    def heal(self) -> None:
        """Forget the failures `fail` asked for that have not happened yet."""
        self._failures.clear()

    def watches(self) -> list[str]:
        """The paths (with queries) of the watch requests seen so far."""
        return [path for method, path in self.requests if "watch=" in path]

    def lists(self) -> list[str]:
        """The paths of the plain (non-watch) GETs of collections seen so far."""
        return [p for m, p in self.requests if m == "GET" and "watch=" not in p]

    # -- the proxy ------------------------------------------------------------------------

    def _failure(self, method: str, path: str) -> _Failure | None:
        for failure in self._failures:
            if failure.remaining > 0 and failure.match(method, path):
                failure.remaining -= 1
                return failure
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path_qs
        self.requests.append((method, path))
        self.arrivals.append(asyncio.get_running_loop().time())
        if self.down:
            return _status_response(503, "ServiceUnavailable", "proxy is down", None)
        if self._throttle_every and method in ("POST", "PUT", "PATCH", "DELETE"):
            self._writes_seen += 1
            if self._writes_seen % self._throttle_every == 0:
                self.throttled += 1
                return _status_response(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    self._throttle_retry_after,
                )
        failure = self._failure(method, path)
        if failure is not None:
            return _status_response(
                failure.status, "Injected", "injected by FaultProxy", failure.retry_after
            )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type",)}
        accept = request.headers.get("Accept", "application/json")
        # Streams are handled line by line here (injected lines, list ends): a protobuf
        # watch (ConfigMaps, Secrets) is asked for as JSON, which the server then sends.
        headers["Accept"] = "application/json" if "protobuf" in accept else accept
        body = await request.read()
        try:
            upstream = await self._session.request(
                method,
                self.upstream + path,
                data=body or None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        except (aiohttp.ClientError, OSError) as exc:
            return _status_response(502, "BadGateway", f"upstream: {exc}", None)
        stream = _Stream(request)
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name in _HOP_HEADERS:
                if name in upstream.headers:
                    response.headers[name] = upstream.headers[name]
            await response.prepare(request)
            self._streams.add(stream)
            lines = upstream.content
            if self.watch_delay > 0 and "watch=" in request.query_string:
                lines = _Late(upstream.content, self.watch_delay)  # type: ignore[assignment]
            try:
                while True:
                    line = await lines.readline(max_line_length=2**26)
                    if not line:
                        break
                    if stream.frozen:
                        await self._closing.wait()  # a dead peer: silent, but open
                        return response
                    while stream.injected:
                        await response.write(stream.injected.pop(0))
                    if not self._list_ends.is_set() and _is_list_end(line):
                        self.held_list_ends += 1
                        try:
                            await self._list_ends.wait()
                        finally:
                            self.held_list_ends -= 1
                    await response.write(line)
                await response.write_eof()
            except (aiohttp.ClientError, ConnectionError, OSError):
                if request.transport is not None:
                    request.transport.abort()
            finally:
                self._streams.discard(stream)
        return response


class _Late:
    """The lines of `content`, each handed out `delay` seconds after it was read: a task
    reads ahead (so a burst is late by `delay`, not by `delay` per line)."""

    def __init__(self, content: aiohttp.StreamReader, delay: float) -> None:
        self._lines: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self._delay = delay
        self._reader = asyncio.create_task(self._read(content))

    async def _read(self, content: aiohttp.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await content.readline(max_line_length=2**26)
                await self._lines.put((loop.time() + self._delay, line))
                if not line:
                    return
        except (aiohttp.ClientError, ConnectionError, OSError):
            await self._lines.put((loop.time(), b""))

    async def readline(self, max_line_length: int = 0) -> bytes:
        due, line = await self._lines.get()
        wait = due - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        if not line:
            self._reader.cancel()
        return line


def _is_list_end(line: bytes) -> bool:
    """A streaming list's last frame: a BOOKMARK annotated ``k8s.io/initial-events-end``."""
    return b'"BOOKMARK"' in line and b"k8s.io/initial-events-end" in line


def _status_response(
    status: int, reason: str, message: str, retry_after: int | None
) -> web.Response:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": status,
    }
    headers = {}
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
        headers["Retry-After"] = str(retry_after)
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def admin_ssl_context(ca_file: str, cert_file: str, key_file: str) -> ssl.SSLContext:
    """TLS as the control plane's admin (client certificate in ``system:masters``)."""
    context = ssl.create_default_context(cafile=ca_file)
    context.load_cert_chain(cert_file, key_file)
    return context
