"""The in-memory API server of a fake cluster, answering fastctl's HTTP layer.

It keeps what a real server shows a client: one resourceVersion counter for every write and
a history of object events, so a list is a consistent snapshot and a watch resumes exactly
after the version it names; a compaction point (a watch or a list's continue token older
than it gets 410 Gone); lists streamed (``sendInitialEvents``, ending with the
initial-events-end bookmark) or paginated (``limit`` and ``continue``); watches that end at
their server-side timeout; and, per object: creation with ``generateName``, updates,
patches (merge, JSON, server-side apply with field managers), the status subresource,
``metadata.generation`` bumped on a change of anything but metadata and status,
optimistic concurrency (409 on a stale resourceVersion), finalizers and
``deletionTimestamp``, garbage collection of dependents through ``ownerReferences``, label
and field selectors, and custom resources checked against their CRD's schema.

Admission webhooks, when given (`fastctl.testing.fake._admission`): a write their rules
name is computed up to where it would be stored, admitted, then stored as admitted.
Conversion webhooks, when given (`fastctl.testing.fake._conversion`): a request at a
version other than the CRD's storage version is converted to it, and its answer back.

Faults on demand: outages (open streams cut, every request refused), watches expired (the
next watch from an old version gets 410 and the watcher relists), chosen requests
answered with an error (429 Too Many Requests, 409 Conflict, 500, ...), slow writes.
Every request is recorded (`RecordedRequest`).

The server is one class per concern, each on top of the last: its state (`_state`), reads
(`_reads`), deletion and garbage collection (`_deletion`), creates and updates (`_writes`,
with `_managed_fields`), patches (`_patching`), routes (`_routing`), admission
(`_admitting`), conversion (`_converting`), and here the HTTP entry point that records every
request and applies the faults.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import aiohttp
import orjson

from fastctl.testing.fake._admission import ADMIN
from fastctl.testing.fake._converting import Converting
from fastctl.testing.fake._kinds import BUILTIN
from fastctl.testing.fake._reads import shard_filter
from fastctl.testing.fake._requests import Fail, Fault, RecordedRequest, Route, query_value
from fastctl.testing.fake._wire import Response, status_body

__all__ = [
    "DEFAULT_NAMESPACES",
    "Fail",
    "FakeApiServer",
    "Fault",
    "RecordedRequest",
    "shard_filter",
]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class FakeApiServer(Converting):
    """The in-memory API server (see the module docstring)."""

    def __init__(
        self,
        *,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        page_size: int = 500,
        streaming: bool = True,
        garbage_collection: bool = True,
        request_latency: float = 0.0,
        write_latency: float = 0.0,
    ) -> None:
        super().__init__(
            page_size=page_size,
            streaming=streaming,
            garbage_collection=garbage_collection,
            request_latency=request_latency,
            write_latency=write_latency,
        )
        for kind in BUILTIN:
            self.add_kind(kind)
        for name in namespaces:
            self._put_namespace(name)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
        user: Mapping[str, Any] | None = None,
    ) -> Response:
        """Answer one request (what `fastctl.kube._http.request` sends), from `user`
        (``username`` and ``groups``, as the webhooks see it; default `ADMIN`)."""
        q = {k: query_value(v) for k, v in (query or {}).items() if v is not None}
        path, _, raw_query = path.partition("?")
        if raw_query:
            for pair in raw_query.split("&"):
                k, _, v = pair.partition("=")
                q.setdefault(unquote(k), unquote(v))
        try:
            route = self._route(method, path, q)
        except Fail as exc:
            self._record(method, path, None, q, body, exc.code)
            return exc.response()
        if route.verb == "patch" and content_type.startswith("application/apply-patch"):
            route.verb = "apply"
        writes = route.verb in ("create", "update", "patch", "apply", "delete")
        latency = self.request_latency + (self.write_latency if writes else 0.0)
        if latency:
            await asyncio.sleep(latency)
        if self.down or self.now() < self.down_until:
            self._record(method, path, route, q, body, 0)
            raise aiohttp.ClientConnectionError("the fake API server is down")
        for fault in self.faults:
            if fault.matches(route):
                fault.times -= 1
                self._record(method, path, route, q, body, fault.status)
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
                data = status_body(fault.status, fault.reason, fault.message)
                return Response(fault.status, data, headers=headers)
        meta_only = bool(accept and "as=PartialObjectMetadata" in accept)
        if route.kind is not None and not meta_only and self._converting(route.kind):
            answer = await self._converted(route, path, body, content_type, accept, user or ADMIN)
        else:
            answer = await self._dispatch(route, path, body, content_type, accept, user or ADMIN)
        self._record(method, path, route, q, body, answer.status)
        return answer

    def _record(
        self,
        method: str,
        path: str,
        route: Route | None,
        query: dict[str, str],
        body: bytes | None,
        status: int,
    ) -> None:
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = body.decode("utf-8", "replace") if body else None
        self.requests.append(
            RecordedRequest(
                method,
                path,
                route.verb if route else "discovery",
                route.kind.plural if route and route.kind else "",
                route.namespace if route else None,
                route.name if route else None,
                route.subresource if route else None,
                query,
                parsed,
                status,
                self.now(),
            )
        )
