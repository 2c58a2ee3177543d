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
"""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import aiohttp
import orjson

from fastctl._clock import monotonic
from fastctl.runtime.sharding._slots import fnv1a_64
from fastctl.testing.fake._admission import ADMIN, Admission, Denied
from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._conversion import Conversion, ConversionFailed
from fastctl.testing.fake._kinds import BUILTIN, CRD_KIND, Kind, kinds_of_crd
from fastctl.testing.fake._patches import (
    ApplyConflict,
    JsonPatchError,
    Path,
    fields_of,
    fields_v1,
    from_fields_v1,
    iter_conflicts,
    json_patch,
    merge_patch,
    merged,
    overlaps,
    value_at,
    without,
)
from fastctl.testing.fake._selectors import SelectorError, field_selector, label_selector
from fastctl.testing.fake._validation import check
from fastctl.testing.fake._wire import Entry, Keep, Response, WatchStream, status_body

if TYPE_CHECKING:
    from fastctl.webhook._review import Operation

__all__ = ["FakeApiServer", "Fault", "RecordedRequest", "shard_filter"]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_SHARD_RANGE = re.compile(
    r"shardRange\(object\.metadata\.(uid|namespace), '0x([0-9a-f]+)', '0x([0-9a-f]+)'\)"
)


def shard_filter(selector: str | None) -> Keep | None:
    """The objects a ``shardSelector`` selects (FNV-1a-64 of the field in one of its
    ``[start, end)`` ranges), as a server with sharded lists and watches applies it."""
    if not selector:
        return None
    ranges = [(f, int(lo, 16), int(hi, 16)) for f, lo, hi in _SHARD_RANGE.findall(selector)]

    def keep(obj: Mapping[str, Any]) -> bool:
        meta = obj["metadata"]
        return any(lo <= fnv1a_64(str(meta.get(f) or "")) < hi for f, lo, hi in ranges)

    return keep


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server answered (or refused)."""

    method: str
    path: str
    verb: str
    """``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``apply``,
    ``delete``, or ``discovery``."""
    resource: str
    """The resource's plural (``widgets``; ``""`` for discovery)."""
    namespace: str | None
    name: str | None
    subresource: str | None
    query: Mapping[str, str]
    body: Any
    status: int
    """The HTTP status answered (0: refused, the server being down)."""
    at: float
    """The event loop's time."""

    @property
    def field_manager(self) -> str | None:
        return self.query.get("fieldManager")


@dataclass
class Fault:
    """Requests answered with an error instead: the next `times` that match."""

    status: int
    reason: str
    message: str
    times: int
    verb: str | None = None
    resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    retry_after: int | None = None

    def matches(self, req: _Route) -> bool:
        return (
            self.times > 0
            and self.verb in (None, req.verb)
            and self.resource in (None, req.kind.plural if req.kind else "")
            and self.name in (None, req.name)
            and self.namespace in (None, req.namespace)
        )


class Fail(Exception):
    """An error answer."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details or {})

    def response(self) -> Response:
        extra = {"details": self.details} if self.details else {}
        return Response(self.code, status_body(self.code, self.reason, self.message, **extra))


@dataclass
class _Route:
    method: str
    verb: str
    kind: Kind | None
    namespace: str | None
    name: str | None
    subresource: str | None
    query: dict[str, str]


_RESERVED = {"apiVersion", "kind", "metadata", "status"}

Hook = Callable[["Kind", dict[str, Any] | None, dict[str, Any] | None], dict[str, Any] | None]
"""Called with (kind, old, new) where a write is about to be stored: the object to store."""

_SERVER_SET = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "name",
    "namespace",
    "resourceVersion",
)
"""The metadata a webhook's patch cannot change (the server keeps its own)."""


class _Paused(Exception):
    """A write stopped where it would be stored: its object goes to admission first."""

    def __init__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        super().__init__("paused for admission")
        self.old, self.new = clone(old), clone(new)


class _Changed(Exception):
    """The object changed while the webhooks looked at it: admission starts again."""


def _comparable(obj: Mapping[str, Any] | None) -> Any:
    """`obj` without what a second computation of the same write draws anew (a uid, a
    generated name, timestamps)."""
    if obj is None:
        return None
    meta = dict(obj.get("metadata") or {})
    for key in ("uid", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    if meta.get("generateName"):
        meta.pop("name", None)
    return {**obj, "metadata": meta}


def _store(
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    admitted: dict[str, Any] | None,
    subresource: str | None,
    kind: Kind,
    now_old: dict[str, Any] | None,
    now_new: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The hook of a write's second computation: the admitted object, if the write
    computes the same as when the webhooks were asked (`_Changed` otherwise)."""
    if _comparable(now_old) != _comparable(old) or _comparable(now_new) != _comparable(new):
        raise _Changed
    if now_new is None or admitted is None:
        return now_new
    return _as_admitted(kind, now_new, admitted, subresource)


def _as_admitted(
    kind: Kind, stored: dict[str, Any], admitted: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """What the webhooks admitted, with what only the server sets kept from `stored`."""
    out = clone(admitted)
    meta = {k: v for k, v in (out.get("metadata") or {}).items() if k not in _SERVER_SET}
    meta.update({k: stored["metadata"][k] for k in _SERVER_SET if k in stored["metadata"]})
    out["metadata"] = meta
    out["apiVersion"], out["kind"] = stored["apiVersion"], stored["kind"]
    if kind.status and subresource is None:
        out.pop("status", None)
        if "status" in stored:
            out["status"] = clone(stored["status"])
    return out


@functools.lru_cache(maxsize=1)
def _timestamp(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    """The wall clock in the server's form (to the second, as the server keeps it), each
    second formatted once (``strftime`` was a tenth of a write's cost)."""
    return _timestamp(int(datetime.now(UTC).timestamp()))


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace or ''}/{name}"


class FakeApiServer:
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
        self.page_size = page_size
        self.streaming = streaming
        self.garbage_collection = garbage_collection
        self.request_latency = request_latency
        self.write_latency = write_latency
        self.item_delay = 0.0
        self.watch_delay = 0.0
        self.rv = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[Entry] = []
        self.compacted: dict[str, int] = {}
        self.down_until: float = 0.0
        self.down = False
        self.streams: set[WatchStream] = set()
        self._changed: asyncio.Event | None = None
        self.kinds: dict[tuple[str, str, str], Kind] = {}
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.admission = Admission()
        self.conversion = Conversion()
        self._hook: Hook | None = None
        self._uids = itertools.count(1)
        self._names = itertools.count(1)
        self._lists = itertools.count(1)
        for kind in BUILTIN:
            self.add_kind(kind)
        for name in namespaces:
            self._put_namespace(name)

    # -- state -------------------------------------------------------------------------

    @property
    def changed(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def now(self) -> float:
        """The runtime's clock (virtual on a `VirtualTimeLoop`); 0 outside an event loop,
        where a test arranges objects before anything runs."""
        if asyncio._get_running_loop() is None:
            return 0.0
        return monotonic()

    def add_kind(self, kind: Kind) -> None:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind

    def kind_of(self, api_version: str, kind: str) -> Kind | None:
        group, _, version = api_version.rpartition("/")
        for k in self.kinds.values():
            if (k.group, k.version, k.kind) == (group, version, kind):
                return k
        return None

    def stream_listed(self, stream: WatchStream, items: list[dict[str, Any]]) -> None:
        """Nothing to record (a subclass may)."""

    def stream_shown(self, stream: WatchStream, entry: Entry) -> None:
        """Nothing to record (a subclass may)."""

    def _release(self, stream: WatchStream) -> None:
        self.streams.discard(stream)

    def cut_streams(self, resource: str | None = None) -> None:
        """Break the open watches (of one resource, by plural or key, or all)."""
        for stream in [s for s in self.streams if resource in (None, s.resource)]:
            stream.cut = True
            self.streams.discard(stream)
        self._notify()

    def compact(self, resource: str | None = None) -> None:
        """Forget the history so far: a watch from any version up to now gets 410 Gone."""
        for kind in self.kinds.values():
            if resource in (None, kind.key, kind.plural):
                self.compacted[kind.key] = self.rv
        self.rv += 1

    def _snapshot(self, key: str, rv: int) -> dict[str, dict[str, Any]]:
        """The objects of resource `key` as they were at `rv` (replayed from the history)."""
        if rv >= self.rv:
            return {k: obj for (res, k), obj in self.objects.items() if res == key}
        state: dict[str, dict[str, Any]] = {}
        for entry in self.history:
            if entry.rv > rv:
                break
            if entry.resource != key:
                continue
            meta = entry.obj["metadata"]
            k = _key(meta.get("namespace"), meta["name"])
            if entry.etype == "DELETED":
                state.pop(k, None)
            else:
                state[k] = entry.obj
        return state

    def _commit(self, kind: Kind, obj: dict[str, Any], etype: str) -> dict[str, Any]:
        """Store a new version of `obj` (or its deletion) under the next resourceVersion."""
        self.rv += 1
        meta = obj["metadata"]
        obj["metadata"] = meta = {**meta, "resourceVersion": str(self.rv)}
        key = (kind.key, _key(meta.get("namespace"), meta["name"]))
        if etype == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append(Entry(self.rv, kind.key, etype, obj, self.now()))
        self._notify()
        return obj

    # -- the HTTP layer ----------------------------------------------------------------

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
        q = {k: _qs(v) for k, v in (query or {}).items() if v is not None}
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

    async def _dispatch(
        self,
        route: _Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """The answer to a routed request: through the admission webhooks when their rules
        name it, else at once."""
        if route.kind is not None and self.admission.rules_name(
            route.kind, route.verb, route.subresource
        ):
            return await self._admitted(route, path, body, content_type, accept, user)
        try:
            return self._answer(route, path, body, content_type, accept)
        except Fail as exc:
            return exc.response()

    # -- conversion --------------------------------------------------------------------

    def storage_of(self, kind: Kind) -> Kind:
        """The kind at its CRD's storage version (`kind` itself for a single version)."""
        for k in self.kinds.values():
            if k.key == kind.key and k.storage:
                return k
        return kind

    def _converting(self, kind: Kind) -> bool:
        """Whether a request at `kind`'s version goes through the CRD's converter."""
        return self.conversion.converts(kind) and self.storage_of(kind) != kind

    async def _convert(
        self, kind: Kind, objects: list[dict[str, Any]], desired: str
    ) -> list[dict[str, Any]]:
        try:
            return await self.conversion.convert(kind, objects, desired)
        except ConversionFailed as exc:
            raise Fail(500, "InternalError", str(exc)) from None

    async def _converted(
        self,
        route: _Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A request at a version other than the storage one (`fastctl.testing.fake._conversion`):
        its object converted to the storage version, served there, the answer converted back."""
        kind = route.kind
        assert kind is not None
        storage = self.storage_of(kind)
        at_storage = _Route(
            route.method,
            route.verb,
            storage,
            route.namespace,
            route.name,
            route.subresource,
            route.query,
        )
        stored_path = path.replace(
            f"/{kind.group}/{kind.version}/", f"/{storage.group}/{storage.version}/", 1
        )
        try:
            if route.verb == "patch":
                return await self._patched_at(route, stored_path, body, content_type, accept, user)
            if route.verb in ("create", "update", "apply"):
                doc = _parse(body, content_type)
                if isinstance(doc, dict):
                    doc.setdefault("apiVersion", kind.api_version)
                    doc.setdefault("kind", kind.kind)
                    [doc] = await self._convert(kind, [doc], storage.api_version)
                    body = orjson.dumps(doc)
            answer = await self._dispatch(at_storage, stored_path, body, content_type, accept, user)
            if route.verb == "watch" and answer.content is not None:
                stream = answer.content

                async def shown(obj: dict[str, Any]) -> dict[str, Any]:
                    [out] = await self.conversion.convert(kind, [obj], kind.api_version)
                    return out

                stream.convert = shown
                stream.bookmark["apiVersion"] = kind.api_version
                return answer
            return await self._answered_at(kind, answer)
        except Fail as exc:
            return exc.response()

    async def _answered_at(self, kind: Kind, answer: Response) -> Response:
        """`answer` (an object or a list, at the storage version) at `kind`'s version."""
        if answer.status >= 300 or answer.content is not None:
            return answer
        doc = orjson.loads(await answer.read())
        if doc.get("kind") == "Status":
            return answer
        if isinstance(doc.get("items"), list):
            doc["items"] = await self._convert(kind, doc["items"], kind.api_version)
            doc["apiVersion"] = kind.api_version
        else:
            [doc] = await self._convert(kind, [doc], kind.api_version)
        return Response(answer.status, orjson.dumps(doc), headers=answer.headers)

    async def _patched_at(
        self,
        route: _Route,
        stored_path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A merge or JSON patch at another version than the storage one: applied to the
        object converted to the request's version, the result converted back and stored
        (as an update, unless the object changed meanwhile: then again)."""
        kind = route.kind
        assert kind is not None
        assert route.name is not None
        storage = self.storage_of(kind)
        ctype = content_type.split(";")[0].strip()
        doc = _parse(body, content_type)
        while True:
            current = self._get(storage, route.namespace, route.name)
            version = current["metadata"]["resourceVersion"]
            [shown] = await self._convert(kind, [clone(current)], kind.api_version)
            new = _patched(kind, shown, doc, ctype)
            new["metadata"] = {**new.get("metadata", {}), "resourceVersion": version}
            [new] = await self._convert(kind, [new], storage.api_version)
            now = self.objects.get((storage.key, _key(route.namespace, route.name)))
            if now is not None and now["metadata"]["resourceVersion"] != version:
                continue  # written meanwhile: patch what is there now, as the server retries
            update = _Route(
                "PUT",
                "update",
                storage,
                route.namespace,
                route.name,
                route.subresource,
                route.query,
            )
            answer = await self._dispatch(
                update, stored_path, orjson.dumps(new), "application/json", accept, user
            )
            return await self._answered_at(kind, answer)

    async def _admitted(
        self,
        route: _Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A write through the admission webhooks: computed up to where it would be
        stored, admitted (`fastctl.testing.fake._admission`), then computed again and
        stored as admitted; again from the start if the object changed meanwhile."""
        kind = route.kind
        assert kind is not None
        while True:
            self._hook = self._pause
            try:
                return self._answer(route, path, body, content_type, accept)  # not a write
            except _Paused as paused:
                old, new = paused.old, paused.new
            except Fail as exc:
                return exc.response()
            finally:
                self._hook = None
            operation: Operation = (
                "DELETE" if new is None else "CREATE" if old is None else "UPDATE"
            )
            namespace = ((new or old or {}).get("metadata") or {}).get("namespace")
            labels = None
            if kind.namespaced:
                ns = self.objects.get(("namespaces", _key(None, str(namespace))))
                labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            try:
                admitted = await self.admission.admit(
                    kind,
                    operation,
                    old,
                    new,
                    user=user,
                    namespace_labels=labels,
                    validate=lambda obj: self._validated(kind, obj),
                )
            except Denied as exc:
                return Response(exc.code, status_body(exc.code, exc.reason, exc.message))
            except Fail as exc:
                return exc.response()

            self._hook = functools.partial(_store, old, new, admitted, route.subresource)
            try:
                return self._answer(route, path, body, content_type, accept)
            except _Changed:
                continue
            except Fail as exc:
                return exc.response()
            finally:
                self._hook = None

    @staticmethod
    def _pause(_: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        raise _Paused(old, new)

    def _at_admission(
        self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Where a write is about to be stored: the admission hook of the request, once."""
        hook, self._hook = self._hook, None
        return new if hook is None else hook(kind, old, new)

    def _record(
        self,
        method: str,
        path: str,
        route: _Route | None,
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

    def _route(self, method: str, path: str, q: dict[str, str]) -> _Route:
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return _Route(method, "discovery", None, None, None, None, q)
        if not rest:
            return _Route(method, "discovery", None, None, None, None, q)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            probe = self.kinds.get((group, version, rest[2]))
            if probe is not None and probe.namespaced:
                namespace, rest = rest[1], rest[2:]
        kind = self.kinds.get((group, version, rest[0]))
        if kind is None or len(rest) > 3:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (sub == "status" and kind.status):
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            verb = {"GET": "watch" if q.get("watch") in ("true", "1") else "list", "POST": "create"}
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        if method not in verb:
            raise Fail(405, "MethodNotAllowed", f"the server does not allow {method} here")
        return _Route(method, verb[method], kind, namespace, name, sub, q)

    def _answer(
        self,
        route: _Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
    ) -> Response:
        if route.kind is None:
            return Response(200, orjson.dumps(self._discovery(path)))
        kind, q = route.kind, route.query
        meta_only = bool(accept and "as=PartialObjectMetadata" in accept)
        if route.verb == "list":
            return self._list(kind, route.namespace, q, meta_only)
        if route.verb == "watch":
            return self._watch(kind, route.namespace, q, meta_only)
        doc = _parse(body, content_type)
        assert route.name is not None or route.verb == "create"
        if route.verb == "create":
            if route.subresource is not None:
                raise Fail(405, "MethodNotAllowed", "create of a subresource")
            obj = self.create(kind, route.namespace, doc, q.get("fieldManager"))
            return Response(201, orjson.dumps(self._shown(kind, obj)))
        name = str(route.name)
        if route.verb == "get":
            return Response(
                200, orjson.dumps(self._shown(kind, self._get(kind, route.namespace, name)))
            )
        if route.verb == "delete":
            out = self.delete(kind, route.namespace, name, doc if isinstance(doc, dict) else {})
            return Response(200, orjson.dumps(self._shown(kind, out)))
        if route.verb == "update":
            if not isinstance(doc, dict):
                raise Fail(400, "BadRequest", "the body of an update is an object")
            obj = self.update(
                kind, route.namespace, name, doc, route.subresource, q.get("fieldManager")
            )
            return Response(200, orjson.dumps(self._shown(kind, obj)))
        status, obj = self.patch(
            kind, route.namespace, name, doc, content_type, route.subresource, q
        )
        return Response(status, orjson.dumps(self._shown(kind, obj)))

    def _shown(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as served at `kind`'s version."""
        if obj.get("apiVersion") == kind.api_version:
            return obj
        return {**obj, "apiVersion": kind.api_version}

    # -- discovery ---------------------------------------------------------------------

    def _discovery(self, path: str) -> dict[str, Any]:
        parts = [p for p in path.strip("/").split("/") if p]
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["version"]:
            return {"major": "1", "minor": "36", "gitVersion": "v1.36.0-fake"}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for k in self.kinds.values():
                if k.group and k.version not in groups.setdefault(k.group, []):
                    groups[k.group].append(k.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        served = [k for k in self.kinds.values() if (k.group, k.version) == (group, version)]
        if not served:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        gv = f"{group}/{version}" if group else version
        resources = [e for k in served for e in k.discovery()]
        return {"kind": "APIResourceList", "groupVersion": gv, "resources": resources}

    # -- reads -------------------------------------------------------------------------

    def _get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        found = self.objects.get((kind.key, _key(namespace, name)))
        if found is None:
            raise _not_found(kind, name)
        return found

    def _filters(
        self, q: Mapping[str, str], namespace: str | None
    ) -> tuple[Keep | None, Keep | None]:
        """(`keep`: namespace and shard ranges, which never change for an object;
        `selector`: labels and fields, which may)."""
        try:
            labels = label_selector(q.get("labelSelector"))
            fields = field_selector(q.get("fieldSelector"))
        except SelectorError as exc:
            raise Fail(400, "BadRequest", str(exc)) from None
        shards = shard_filter(q.get("shardSelector"))
        selector: Keep | None = None
        if labels is not None or fields is not None:

            def selector(obj: Mapping[str, Any]) -> bool:
                return (labels is None or labels(obj)) and (fields is None or fields(obj))

        return shards, selector

    def _list(
        self, kind: Kind, namespace: str | None, q: Mapping[str, str], meta_only: bool
    ) -> Response:
        keep, selector = self._filters(q, namespace)
        token = q.get("continue")
        if token:
            try:
                snap, offset_s = token.split(":")
                rv, offset = int(snap), int(offset_s)
            except ValueError:
                raise Fail(400, "BadRequest", "invalid continue token") from None
            if rv <= self.compacted.get(kind.key, -1):
                raise Fail(410, "Expired", "the provided continue parameter is too old")
        else:
            rv, offset = self.rv, 0
            wanted = q.get("resourceVersion")
            if wanted and q.get("resourceVersionMatch") == "Exact":
                rv = int(wanted)
                if rv <= self.compacted.get(kind.key, -1):
                    raise Fail(410, "Expired", f"too old resource version: {rv}")
        state = self._snapshot(kind.key, rv)
        items = [
            state[k]
            for k in sorted(state)
            if (namespace is None or state[k]["metadata"].get("namespace") == namespace)
            and (keep is None or keep(state[k]))
            and (selector is None or selector(state[k]))
        ]
        limit = int(q.get("limit") or 0)
        size = min(limit, self.page_size) if limit else len(items)
        page = items[offset : offset + size]
        more = offset + size < len(items)
        meta: dict[str, Any] = {
            "resourceVersion": str(rv),
            "continue": f"{rv}:{offset + size}" if more else "",
        }
        if more:
            meta["remainingItemCount"] = len(items) - offset - size
        else:
            del meta["continue"]
        if keep is not None:
            meta["shardInfo"] = {"selector": q.get("shardSelector")}
        shown = [self._shown(kind, obj) for obj in page]
        if meta_only:
            doc = {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": [_metadata_only(obj) for obj in shown],
            }
        else:
            doc = {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": meta,
                "items": shown,
            }
        return Response(200, orjson.dumps(doc))

    def _watch(
        self, kind: Kind, namespace: str | None, q: Mapping[str, str], meta_only: bool
    ) -> Response:
        keep, selector = self._filters(q, namespace)
        deadline = self.now() + float(q.get("timeoutSeconds") or 1800)
        bookmark = {"kind": kind.kind, "apiVersion": kind.api_version}
        project = _metadata_only if meta_only else None
        since_s = q.get("resourceVersion") or ""
        initial: list[dict[str, Any]] | None = None
        if q.get("sendInitialEvents") in ("true", "1"):
            if not self.streaming:
                raise Fail(400, "BadRequest", "sendInitialEvents is not supported")
            since, initial = self.rv, []
        elif since_s in ("", "0"):
            since, initial = self.rv, []
            bookmark = {}
        else:
            since = int(since_s)
            if since <= self.compacted.get(kind.key, -1):
                raise Fail(410, "Expired", f"too old resource version: {since}")
        present: set[str] = set()
        if initial is not None or selector is not None:
            state = self._snapshot(kind.key, since)
            for k in sorted(state):
                obj = state[k]
                if namespace is not None and obj["metadata"].get("namespace") != namespace:
                    continue
                if (keep is None or keep(obj)) and (selector is None or selector(obj)):
                    present.add(k)
                    if initial is not None:
                        initial.append(self._shown(kind, obj))
        stream = WatchStream(
            self,
            kind.key,
            since,
            initial,
            deadline,
            namespace=namespace,
            keep=keep,
            selector=selector,
            present=present,
            bookmark=bookmark,
            project=project,
        )
        if initial is not None and not bookmark:
            stream.bookmark_pending = False
        self.streams.add(stream)
        return Response(200, b"", stream, self._release)

    # -- writes ------------------------------------------------------------------------

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if not kind.namespaced:
            return
        if not namespace:
            raise Fail(400, "BadRequest", "the namespace of the object is missing")
        ns = self.objects.get(("namespaces", _key(None, namespace)))
        if ns is None:
            raise Fail(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    def _validated(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        if kind.schema is None:
            return obj
        out, problems = check(obj, kind.schema)
        if problems:
            name = obj["metadata"].get("name", "")
            shown = ", ".join(f"{path}: {message}" for path, message in problems)
            raise Fail(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group} "{name}" is invalid: {shown}',
                {
                    "name": name,
                    "group": kind.group,
                    "kind": kind.kind,
                    "causes": [
                        {"reason": "FieldValueInvalid", "message": m, "field": p}
                        for p, m in problems
                    ],
                },
            )
        return out

    def create(
        self,
        kind: Kind,
        namespace: str | None,
        doc: Any,
        manager: str | None = None,
    ) -> dict[str, Any]:
        """Create an object (409 if it exists)."""
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "the body of a create is an object")
        obj = clone(doc)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise Fail(400, "BadRequest", "metadata is not an object")
        if kind.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise Fail(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            namespace = namespace or body_ns
        else:
            namespace = None
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise Fail(422, "Invalid", "name or generateName is required")
            name = f"{prefix}{_suffix(next(self._names))}"
        self._check_namespace(kind, namespace)
        if (kind.key, _key(namespace, name)) in self.objects:
            raise Fail(
                409,
                "AlreadyExists",
                f'{kind.plural}{"." + kind.group if kind.group else ""} "{name}" already exists',
                {"name": name, "group": kind.group, "kind": kind.plural},
            )
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
        meta["name"] = name
        if namespace:
            meta["namespace"] = namespace
        meta["uid"] = _uid(next(self._uids))
        meta["creationTimestamp"] = _now()
        if kind.generation:
            meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["metadata"] = meta
        if kind.status:
            obj.pop("status", None)
        obj = self._validated(kind, self._defaulted(kind, obj))
        admitted = self._at_admission(kind, None, obj)
        assert admitted is not None
        obj = admitted
        self._own(obj, manager or "unknown", "Update", fields_of(_owned_part(obj, None)), None)
        obj = self._commit(kind, obj, "ADDED")
        if kind is CRD_KIND or kind.key == CRD_KIND.key:
            self._install(obj)
        return obj

    def _defaulted(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """What the server fills in for some built-in kinds."""
        if kind.key == "namespaces":
            meta = obj["metadata"]
            meta["labels"] = {
                **(meta.get("labels") or {}),
                "kubernetes.io/metadata.name": meta["name"],
            }
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif kind.key == "secrets":
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            if data:
                obj["data"] = data
            obj.setdefault("type", "Opaque")
        return obj

    def _install(self, crd: dict[str, Any]) -> None:
        """A CRD object creates (or changes) the kinds it defines, established at once."""
        for kind in kinds_of_crd(crd):
            self.add_kind(kind)
        names = (crd.get("spec") or {}).get("names") or {}
        crd = clone(crd)
        # As the API server keeps it: every version objects may be stored in, the storage
        # version added on each change, the others removed only by a status write.
        stored = list((crd.get("status") or {}).get("storedVersions") or ())
        for v in (crd.get("spec") or {}).get("versions") or ():
            if v.get("storage") and v["name"] not in stored:
                stored.append(v["name"])
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": stored,
            "conditions": [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": _now()}
                for t, r in (
                    ("NamesAccepted", "NoConflicts"),
                    ("Established", "InitialNamesAccepted"),
                )
            ],
        }
        self._commit(CRD_KIND, crd, "MODIFIED")

    def _put_namespace(self, name: str) -> None:
        kind = self.kinds[("", "v1", "namespaces")]
        self.create(kind, None, {"metadata": {"name": name}}, "fake-cluster")

    def update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: dict[str, Any],
        subresource: str | None,
        manager: str | None,
    ) -> dict[str, Any]:
        """PUT: replace the object (or its status)."""
        old = self._get(kind, namespace, name)
        wanted = (doc.get("metadata") or {}).get("resourceVersion")
        new = clone(doc)
        new.setdefault("metadata", {})
        if not wanted:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write(kind, old, new, subresource, manager or "unknown", "Update", None)

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: Any,
        content_type: str,
        subresource: str | None,
        q: Mapping[str, str],
    ) -> tuple[int, dict[str, Any]]:
        """PATCH: merge (or strategic, taken as merge), JSON patch, or apply."""
        manager = q.get("fieldManager")
        ctype = content_type.split(";")[0].strip()
        if ctype == "application/apply-patch+yaml":
            return self.apply(
                kind, namespace, name, doc, subresource, manager, q.get("force") == "true"
            )
        old = self._get(kind, namespace, name)
        new = _patched(kind, clone(old), doc, ctype)
        return 200, self._write(kind, old, new, subresource, manager or "unknown", "Update", None)

    def apply(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: Any,
        subresource: str | None,
        manager: str | None,
        force: bool,
    ) -> tuple[int, dict[str, Any]]:
        """Server-side apply (see `fastctl.testing.fake._patches`)."""
        if not manager:
            raise Fail(422, "Invalid", "fieldManager is required for apply requests")
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "an apply body is an object")
        meta = doc.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise Fail(
                400, "BadRequest", "the name of the object does not match the name in the URL"
            )
        applied = clone(doc)
        old = self.objects.get((kind.key, _key(namespace, name)))
        if old is None:
            if subresource is not None:
                raise _not_found(kind, name)
            created = self.create(
                kind, namespace, {**applied, "metadata": {**meta, "name": name}}, None
            )
            fresh = clone(created)
            fresh["metadata"]["managedFields"] = []
            mine = fields_of(_owned_part(applied, None))
            self._own(fresh, manager, "Apply", mine, None)
            self.objects[(kind.key, _key(namespace, name))]["metadata"]["managedFields"] = fresh[
                "metadata"
            ]["managedFields"]
            return 201, self.objects[(kind.key, _key(namespace, name))]
        wanted = meta.get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise _conflict(kind, name)
        part = _owned_part(applied, subresource if kind.status else None)
        mine = fields_of(part)
        owners = _owners(old, subresource)
        before = owners.pop((manager, "Apply"), set())
        others = {m: f for (m, _), f in owners.items() if m != manager}
        conflicts = list(iter_conflicts(old, part, mine, others))
        if conflicts and not force:
            err = ApplyConflict(conflicts)
            raise Fail(
                409,
                "Conflict",
                str(err),
                {
                    "causes": [
                        {
                            "reason": "FieldManagerConflict",
                            "message": f'conflict with "{m}"',
                            "field": "." + ".".join(p),
                        }
                        for m, p in conflicts
                    ]
                },
            )
        new = merged(clone(old), part)
        for path in sorted(before - mine, key=len, reverse=True):
            if not any(overlaps(path, f) for fs in others.values() for f in fs):
                without(new, path)
        new["metadata"] = {**new["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]}
        return 200, self._write(kind, old, new, subresource, manager, "Apply", mine)

    def _write(
        self,
        kind: Kind,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        manager: str,
        operation: str,
        applied: set[Path] | None,
    ) -> dict[str, Any]:
        """Store `new` in place of `old`: precondition, the status subresource's split,
        server-set fields kept, generation, schema, managed fields, finalizers."""
        old_meta = old["metadata"]
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            raise Fail(400, "BadRequest", "metadata is not an object")
        wanted = new_meta.get("resourceVersion")
        if wanted is not None and str(wanted) != old_meta["resourceVersion"]:
            raise _conflict(kind, old_meta["name"])
        if new_meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise Fail(
                400, "BadRequest", "the name of the object does not match the name in the URL"
            )
        if kind.status and subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif kind.status:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = clone(old["status"])
        kept = {k: old_meta[k] for k in _SERVER_SET if k in old_meta}
        meta = {k: v for k, v in new["metadata"].items() if k not in kept}
        new["metadata"] = {**meta, **kept}
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        if old_meta.get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or ()) - set(
                old_meta.get("finalizers") or ()
            )
            if added:
                raise Fail(
                    422,
                    "Invalid",
                    f'{kind.kind} "{old_meta["name"]}" is invalid: metadata.finalizers: Forbidden: '
                    "no new finalizers can be added if the object is being deleted",
                )
        new = self._validated(kind, self._defaulted(kind, new) if kind.key == "secrets" else new)
        admitted = self._at_admission(kind, old, new)
        assert admitted is not None
        new = admitted
        if _body(new, kind) != _body(old, kind) and kind.generation:
            new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return old  # a no-op: no new version, no event
        sub = subresource if kind.status else None
        changed = applied if applied is not None else _changed_fields(old, new, sub)
        self._own(new, manager, operation, changed, sub, replace=applied is not None)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(kind, new)
        obj = self._commit(kind, new, "MODIFIED")
        if kind.key == CRD_KIND.key:
            self._install(obj)
        return obj

    def _own(
        self,
        obj: dict[str, Any],
        manager: str,
        operation: str,
        fields: set[Path],
        subresource: str | None,
        *,
        replace: bool = False,
    ) -> None:
        """Give `manager` the `fields` (taken from every other manager)."""
        entries = list(obj["metadata"].get("managedFields") or ())
        out: list[dict[str, Any]] = []
        mine: set[Path] = set()
        for entry in entries:
            owned = from_fields_v1(entry.get("fieldsV1") or {})
            same_sub = entry.get("subresource") == subresource
            if (entry.get("manager"), entry.get("operation")) == (manager, operation) and same_sub:
                mine = set() if replace else owned
                continue
            if same_sub or subresource is None or entry.get("subresource") is None:
                owned = {f for f in owned if not any(overlaps(f, g) for g in fields)}
            if owned:
                out.append({**entry, "fieldsV1": fields_v1(owned)})
        mine |= fields
        if mine:
            entry = {
                "manager": manager,
                "operation": operation,
                "apiVersion": obj.get("apiVersion", ""),
                "time": _now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(mine),
            }
            if subresource:
                entry["subresource"] = subresource
            out.append(entry)
        obj["metadata"]["managedFields"] = out

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """DELETE: at once, or (with finalizers) marked with a ``deletionTimestamp``."""
        old = self._get(kind, namespace, name)
        pre = options.get("preconditions") or {}
        meta = old["metadata"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise Fail(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise Fail(
                409,
                "Conflict",
                "Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        self._at_admission(kind, old, None)
        policy = options.get("propagationPolicy") or "Background"
        if policy == "Orphan":
            self._orphan(meta.get("uid"))
        if kind.key == "namespaces":
            for (res, key), obj in sorted(self.objects.items()):
                if key.startswith(f"{name}/"):
                    dep = self._kind_by_key(res)
                    if dep is not None and (res, key) in self.objects:
                        self.delete(dep, name, obj["metadata"]["name"], {})
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if kind.generation:
                new["metadata"]["generation"] = int(meta.get("generation") or 0) + 1
            if kind.key == "namespaces":
                new["status"] = {"phase": "Terminating"}
            return self._commit(kind, new, "MODIFIED")
        return self._remove(kind, clone(old))

    def _remove(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        gone = self._commit(kind, obj, "DELETED")
        if self.garbage_collection:
            self._collect(gone["metadata"].get("uid"))
        return gone

    def _kind_by_key(self, key: str) -> Kind | None:
        for kind in self.kinds.values():
            if kind.key == key:
                return kind
        return None

    def _dependents(self, uid: str | None) -> list[tuple[Kind, dict[str, Any]]]:
        out = []
        for (res, _), obj in sorted(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or ()
            if any(ref.get("uid") == uid for ref in refs):
                kind = self._kind_by_key(res)
                if kind is not None:
                    out.append((kind, obj))
        return out

    def _orphan(self, uid: str | None) -> None:
        for kind, obj in self._dependents(uid):
            new = clone(obj)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                del new["metadata"]["ownerReferences"]
            self._commit(kind, new, "MODIFIED")

    def _collect(self, uid: str | None) -> None:
        """The garbage collector: a dependent whose owners are all gone is deleted; one
        that keeps another owner loses the reference."""
        if not uid:
            return
        live = {o["metadata"].get("uid") for o in self.objects.values()}
        for kind, obj in self._dependents(uid):
            key = (kind.key, _key(obj["metadata"].get("namespace"), obj["metadata"]["name"]))
            if key not in self.objects:
                continue
            refs = obj["metadata"].get("ownerReferences") or ()
            if any(r.get("uid") in live for r in refs if r.get("uid") != uid):
                new = clone(obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self._commit(kind, new, "MODIFIED")
            else:
                meta = obj["metadata"]
                self.delete(kind, meta.get("namespace"), meta["name"], {})


def _patched(kind: Kind, current: dict[str, Any], doc: Any, ctype: str) -> dict[str, Any]:
    """`current` (a copy, changed in place) with a merge or JSON patch applied."""
    if ctype == "application/json-patch+json":
        if not isinstance(doc, list):
            raise Fail(400, "BadRequest", "a JSON patch is a list of operations")
        try:
            out: dict[str, Any] = json_patch(current, doc)
        except JsonPatchError as exc:
            raise Fail(422, "Invalid", str(exc)) from None
        return out
    if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        if ctype.startswith("application/strategic") and kind.schema is not None:
            raise Fail(
                415,
                "UnsupportedMediaType",
                "strategic merge patch is not supported for custom resources",
            )
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "a merge patch is an object")
        patched: dict[str, Any] = merge_patch(current, doc)
        return patched
    raise Fail(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {ctype}",
    )


def _qs(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse(body: bytes | None, content_type: str) -> Any:
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    if "yaml" in content_type:
        import yaml  # type: ignore[import-untyped]

        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise Fail(400, "BadRequest", f"invalid YAML: {exc}") from None
    raise Fail(400, "BadRequest", "the request body is not valid JSON")


def _not_found(kind: Kind, name: str) -> Fail:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return Fail(
        404,
        "NotFound",
        f'{what} "{name}" not found',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def _conflict(kind: Kind, name: str) -> Fail:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return Fail(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def _body(obj: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """What a change of bumps ``generation``: all but metadata (and status, when it is a
    subresource)."""
    skip = {"metadata", "status"} if kind.status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _owned_part(obj: Mapping[str, Any], subresource: str | None) -> dict[str, Any]:
    """The part of an object a write to `subresource` can own: its status, or the rest."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    return {k: v for k, v in obj.items() if k not in ("status", "apiVersion", "kind")}


def _owners(obj: Mapping[str, Any], subresource: str | None) -> dict[tuple[str, str], set[Path]]:
    out: dict[tuple[str, str], set[Path]] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if entry.get("subresource") != (subresource or None):
            continue
        key = (str(entry.get("manager")), str(entry.get("operation")))
        out.setdefault(key, set()).update(from_fields_v1(entry.get("fieldsV1") or {}))
    return out


def _changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], sub: str | None) -> set[Path]:
    """The leaf fields an update sets to a new value (the ones it takes ownership of)."""
    return {p for p in fields_of(_owned_part(new, sub)) if value_at(old, p) != value_at(new, p)}


def _metadata_only(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj["metadata"],
    }


def _suffix(n: int) -> str:
    """A generated name's five characters, from a counter (each name once, in order)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    out = ""
    for _ in range(5):
        n, r = divmod(n, len(alphabet))
        out = alphabet[r] + out
    return out


def _uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"
