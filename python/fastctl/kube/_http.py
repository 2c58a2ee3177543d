"""Raw HTTP to the API server, with kubernetes-asyncio's configuration, auth and session.

kubernetes-asyncio handles kubeconfig, in-cluster config, TLS and token refresh; its request
path, though, re-serialises bodies with the stdlib `json` and its typed models parse every
response twice. fastctl sends `orjson` bytes and reads raw bytes (`_preload_content=False`
in spirit), so the hot path never touches a model: object calls and watches on fastctl's
lean HTTP/1.1 transport (`fastctl.kube._transport`; a watch's body decoded as it arrives,
`fastctl.kube._watch_stream`) with the client's TLS and headers, or on the client's
`aiohttp` session where the transport does not apply.

`ApiError` turns a Kubernetes ``Status`` body into one line that names the request, which is
what an operator author needs in a log: ``PATCH /api/v1/namespaces/a/configmaps/b: 409
Conflict (Conflict): Apply failed with 1 conflict: ...``.

`request` is the one place a request is sent: it waits for the client's rate limit, if it
has one (`fastctl.kube._throttle`), and counts the request (`fastctl.kube._request_metrics`).
`request_json_status` sends an object call through it again after a failure that its
`Safety` allows (`fastctl.kube._call_retry`), each attempt a `request` of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal, overload

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._tracing import request_span
from fastctl.errors import ApiError, http_phrase
from fastctl.kube._call_retry import Safety, retry_delay
from fastctl.kube._in_memory import SESSIONS
from fastctl.kube._request_metrics import ERROR_CODE, REQUESTS
from fastctl.kube._throttle import rate_limit_of, retry_policy_of, throttle
from fastctl.kube._transport import LeanResponse, LeanStream, pool_for

__all__ = [
    "ApiError",
    "Timeout",
    "error_from_response",
    "request",
    "request_json",
    "request_json_status",
    "retry_after_header",
]

log = logging.getLogger("fastctl.client")

Query = Mapping[str, str | int | bool | None]


def error_from_response(
    status: int, data: bytes, *, method: str, path: str, retry_after: str | None = None
) -> ApiError:
    """The `ApiError` for a failed response, parsing its Status body when there is one;
    `retry_after` is the answer's ``Retry-After`` header, if it had one."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        err = ApiError.from_status(body, method=method, path=path, code=status)
        err.status = status  # the HTTP code is authoritative
    else:
        text = data[:300].decode("utf-8", "replace").strip()
        err = ApiError(status, http_phrase(status), text, method=method, path=path)
    if retry_after is not None:
        err.retry_after_header = _seconds(retry_after)
    return err


def retry_after_header(resp: aiohttp.ClientResponse | LeanResponse | LeanStream) -> str | None:
    """The answer's ``Retry-After`` header (an answer made up without headers has none)."""
    headers = getattr(resp, "headers", None)
    return None if headers is None else headers.get("Retry-After")


def _seconds(header: str) -> float | None:
    """A ``Retry-After`` header's delay in seconds (``None`` for an HTTP date or nonsense:
    client-go reads only seconds too)."""
    try:
        value = int(header.strip())
    except ValueError:
        return None
    return float(value) if value > 0 else None


STREAM_READ_TIMEOUT = 90.0
"""A streamed request's read timeout when the caller gives none: the watcher's default
(`WatchConfig.read_timeout`), so no stream waits longer for a byte than a watch does."""


@overload
async def request(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    client_timeout: aiohttp.ClientTimeout | Timeout | None = None,
    accept: str | None = None,
    stream: Literal[False] = False,
) -> aiohttp.ClientResponse | LeanResponse: ...
@overload
async def request(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    client_timeout: aiohttp.ClientTimeout | Timeout | None = None,
    accept: str | None = None,
    stream: bool,
) -> aiohttp.ClientResponse | LeanResponse | LeanStream: ...
async def request(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    client_timeout: aiohttp.ClientTimeout | Timeout | None = None,
    accept: str | None = None,
    stream: bool = False,
) -> aiohttp.ClientResponse | LeanResponse | LeanStream:
    """Send one request and return its response.

    The caller reads (or streams) the body and must release the response (``async with`` or
    ``.release()``). No status check happens here: watch streams and lists need the code.
    A watch (`stream`, with the connect and read timeouts of `client_timeout`) returns once
    its head is in: on the lean transport when the client allows it
    (`fastctl.kube._transport`), a `LeanStream` for a 200 (an error is read whole, a
    `LeanResponse`), else aiohttp's response, which streams. Any other request with a total
    timeout and no read timeout (an object call) is read whole before it returns, on the
    lean transport when the client allows it; one with a read timeout instead (a list that
    may be long) goes on aiohttp.
    `accept` replaces the ``Accept`` header (a metadata-only watch asks for
    ``PartialObjectMetadata`` this way); by default it is ``application/json``.
    Every request is counted, with its code and the time its headers took
    (`fastctl.kube._request_metrics`: the ``rest_client_*`` metrics), and, while tracing is
    on, made a span beneath the reconcile or webhook call that sends it (`fastctl._tracing`).
    A client with a rate limit (`fastctl.kube.set_rate_limit`) waits for it first.
    """
    config = client.configuration
    if not config.host:
        raise ValueError("the ApiClient's configuration has no host (load a kubeconfig first)")
    headers: dict[str, str] = {"Accept": "application/json", **client.default_headers}
    if accept is not None:
        headers["Accept"] = accept
    if body is not None:
        headers["Content-Type"] = content_type
    # auth_settings() runs the configuration's token refresh hook (exec plugins, in-cluster
    # token rotation), so every request carries a current token. It does nothing, hook
    # included, without a bearer token (client certificates): skip the coroutine then.
    if _BEARER in config.api_key:
        for auth in (await config.auth_settings()).values():
            if auth["in"] == "header":
                headers[auth["key"]] = auth["value"]
    params = {k: _qs(v) for k, v in (query or {}).items() if v is not None}
    timeout = client_timeout or _timeout(60.0)
    rest = client.rest_client
    # A fake cluster of a test answers from memory (`fastctl.kube._in_memory`).
    fake = SESSIONS.get(config.host)
    # A call with a total timeout and nothing else is read whole: on the lean transport,
    # when the client's configuration allows it (`fastctl.kube._transport`). Its session
    # (`fastctl.kube._lazy_rest`: made at first use) only for a request that is not.
    pool = None
    if fake is None and (stream or _whole(timeout)):
        pool = pool_for(client)
    if rate_limit_of(client) is not None:  # no coroutine per request without a limit
        await throttle(client, method, config.host)
    span = request_span(method, path)  # a child span of the reconcile, while tracing is on
    started = time.perf_counter()
    if pool is not None:
        limits = None
        if stream:  # uncompressed: the extension decodes the body as it arrives
            headers["Accept-Encoding"] = "identity"
            limits = (timeout.sock_connect or 30.0, timeout.sock_read or STREAM_READ_TIMEOUT)
        try:
            answer, head_at = await pool.request(
                method, path, params, headers, body, timeout.total, limits
            )
        except BaseException as exc:  # no answer, or one cut short, timed out or cancelled
            REQUESTS.record(method, config.host, ERROR_CODE, time.perf_counter() - started)
            span.failed(exc)
            raise
        REQUESTS.record(method, config.host, answer.status, head_at - started)
        span.answered(answer.status)
        return answer
    session: aiohttp.ClientSession = fake or rest.pool_manager  # type: ignore[assignment]
    if not isinstance(timeout, aiohttp.ClientTimeout):
        timeout = _client_timeout(timeout)
    kwargs: dict[str, Any] = {
        "params": params,
        "headers": headers,
        "data": body,
        "timeout": timeout,
    }
    if rest.proxy:
        kwargs["proxy"] = rest.proxy
    if rest.proxy_headers:
        kwargs["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        kwargs["server_hostname"] = rest.server_hostname
    try:
        response = await session.request(method, config.host + path, **kwargs)
    except BaseException as exc:  # no answer: refused, timed out, or cancelled while waiting
        REQUESTS.record(method, config.host, ERROR_CODE, time.perf_counter() - started)
        span.failed(exc)
        raise
    REQUESTS.record(method, config.host, response.status, time.perf_counter() - started)
    span.answered(response.status)
    return response


_BEARER = "BearerToken"
"""The key of kubernetes-asyncio's ``Configuration.api_key`` that holds a bearer token."""


@dataclasses.dataclass(frozen=True, slots=True)
class Timeout:
    """A request's timeouts, as `aiohttp.ClientTimeout` names them (`request` takes either):
    made without importing aiohttp's client, which a request on the lean transport never
    needs."""

    total: float | None = None
    connect: float | None = None
    sock_read: float | None = None
    sock_connect: float | None = None


def _whole(timeout: aiohttp.ClientTimeout | Timeout) -> bool:
    """Whether a request with this timeout is read whole (a total, no read timeout)."""
    return timeout.total is not None and timeout.sock_read is None and timeout.connect is None


@functools.lru_cache(maxsize=64)
def _timeout(total: float) -> Timeout:
    """One `Timeout` per value (it is immutable; a request need not build one)."""
    return Timeout(total=total)


@functools.lru_cache(maxsize=64)
def _client_timeout(timeout: Timeout) -> aiohttp.ClientTimeout:
    """The `aiohttp.ClientTimeout` of a request that goes on aiohttp's session."""
    return aiohttp.ClientTimeout(
        total=timeout.total,
        connect=timeout.connect,
        sock_read=timeout.sock_read,
        sock_connect=timeout.sock_connect,
    )


def _qs(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def request_json(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    request_timeout: float = 60.0,
    retry: Safety | None = None,
) -> Any:
    """One request whose answer is a JSON document: parsed with orjson, or `ApiError`."""
    _, answer = await request_json_status(
        client,
        method,
        path,
        query=query,
        body=body,
        content_type=content_type,
        request_timeout=request_timeout,
        retry=retry,
    )
    return answer


async def request_json_status(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    request_timeout: float = 60.0,
    retry: Safety | None = None,
) -> tuple[int, Any]:
    """`request_json`, with the HTTP status of the answer: a write that created its object
    is answered 201 (a POST, or a server-side apply of an object that did not exist).

    With `retry` (what the call may assume, `Safety`), a failure the client's `RetryPolicy`
    retries for it is sent again after its wait (`fastctl.kube._call_retry`), each retry
    counted; ``None``: sent once."""
    retries = 0
    while True:
        try:
            async with await request(
                client,
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                client_timeout=_timeout(request_timeout),
            ) as resp:
                data = await resp.read()
                status = resp.status
                if 200 <= status < 300:
                    return status, (orjson.loads(data) if data else None)
                failure: BaseException = error_from_response(
                    status,
                    data,
                    method=method,
                    path=path,
                    retry_after=retry_after_header(resp),
                )
                code: int | str = status
        except (aiohttp.ClientError, OSError) as exc:  # no answer, or one cut short
            if retry is None:
                raise
            failure, code = exc, ERROR_CODE
        if retry is None:
            raise failure
        retries += 1
        delay = retry_delay(retry_policy_of(client), retry, retries, failure)
        if delay is None:
            raise failure
        REQUESTS.record_retry(method, client.configuration.host or "", code)
        log.debug("%s %s: %s; retry %d in %.2f s", method, path, failure, retries, delay)
        await asyncio.sleep(delay)
