"""Raw HTTP to the API server, on kubernetes-asyncio's session, configuration and auth.

kubernetes-asyncio handles kubeconfig, in-cluster config, TLS and token refresh; its request
path, though, re-serialises bodies with the stdlib `json` and its typed models parse every
response twice. fastctl sends `orjson` bytes and reads raw bytes (`_preload_content=False`
in spirit) through the same `aiohttp` session, so the hot path never touches a model.

`ApiError` turns a Kubernetes ``Status`` body into one line that names the request, which is
what an operator author needs in a log: ``PATCH /api/v1/namespaces/a/configmaps/b: 409
Conflict (Conflict): Apply failed with 1 conflict: ...``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._tracing import request_span
from fastctl.errors import ApiError, http_phrase
from fastctl.kube._request_metrics import ERROR_CODE, REQUESTS

__all__ = ["ApiError", "error_from_response", "request", "request_json", "request_json_status"]

Query = Mapping[str, str | int | bool | None]


def error_from_response(status: int, data: bytes, *, method: str, path: str) -> ApiError:
    """The `ApiError` for a failed response, parsing its Status body when there is one."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        err = ApiError.from_status(body, method=method, path=path, code=status)
        err.status = status  # the HTTP code is authoritative
        return err
    text = data[:300].decode("utf-8", "replace").strip()
    return ApiError(status, http_phrase(status), text, method=method, path=path)


async def request(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    client_timeout: aiohttp.ClientTimeout | None = None,
    accept: str | None = None,
) -> aiohttp.ClientResponse:
    """Send one request on the client's session and return the unread response.

    The caller reads (or streams) the body and must release the response (``async with`` or
    ``.release()``). No status check happens here: watch streams and lists need the code.
    `accept` replaces the ``Accept`` header (a metadata-only watch asks for
    ``PartialObjectMetadata`` this way); by default it is ``application/json``.
    Every request is counted, with its code and the time its headers took
    (`fastctl.kube._request_metrics`: the ``rest_client_*`` metrics), and, while tracing is
    on, made a span beneath the reconcile or webhook call that sends it (`fastctl._tracing`).
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
    rest = client.rest_client
    kwargs: dict[str, Any] = {
        "params": params,
        "headers": headers,
        "data": body,
        "timeout": client_timeout or _timeout(60.0),
    }
    if rest.proxy:
        kwargs["proxy"] = rest.proxy
    if rest.proxy_headers:
        kwargs["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        kwargs["server_hostname"] = rest.server_hostname
    session: aiohttp.ClientSession = rest.pool_manager
    span = request_span(method, path)  # a child span of the reconcile, while tracing is on
    started = time.perf_counter()
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


@functools.lru_cache(maxsize=64)
def _timeout(total: float) -> aiohttp.ClientTimeout:
    """One `aiohttp.ClientTimeout` per value (it is immutable; a request need not build one)."""
    return aiohttp.ClientTimeout(total=total)


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
) -> tuple[int, Any]:
    """`request_json`, with the HTTP status of the answer: a write that created its object
    is answered 201 (a POST, or a server-side apply of an object that did not exist)."""
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
        if not 200 <= status < 300:
            raise error_from_response(status, data, method=method, path=path)
    return status, (orjson.loads(data) if data else None)
