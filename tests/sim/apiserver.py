"""An in-memory Kubernetes API server, faked at fastctl's HTTP layer.

fastctl talks to the API server through two functions: `fastctl.kube._http.request` (the
watcher's lists and watch streams) and `request_json` (the Lease client). `ApiServer`
answers both from memory, so the real watcher, `Store`, `Controller`, `Manager` and
`LeaderElector` run unchanged on top of it. It keeps what a real server shows a client:

- one resourceVersion counter for every write, and a history of object events, so a list is
  a consistent snapshot and a watch resumes exactly after the version it names;
- a compaction point: a watch (or a list's continue token) older than it gets 410 Gone;
- lists both ways: streaming (``sendInitialEvents``, ADDED per object then the
  initial-events-end bookmark) or, when the schedule says the server is old, a 400 for that
  and paginated lists with ``continue`` tokens; both pause between items or pages, which is
  where a relist can be caught half-way;
- outages: open streams are cut and every request fails until the server is back;
- the watch's server-side timeout (streams end cleanly and are resumed);
- a Lease with optimistic concurrency (409 on a stale resourceVersion), requests from this
  replica that fail for a while (a partition), and a rival replica that takes the lease
  once it has not changed for a lease duration (a correct successor) and holds it a while.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from fastctl.errors import ApiError
from fastctl.kube._http import error_from_response
from fastctl.kube._watcher import INITIAL_EVENTS_END
from fastctl.runtime.leader._rules import micro_time

from .record import Record

NAMESPACE = "sim"
GROUP_PATH = "/apis/example.com/v1"
LEASE_COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
KINDS = {"widgets": "Widget", "children": "Child"}
RIVAL = "rival"


@dataclass(slots=True)
class _Entry:
    """One object event in the server's history."""

    rv: int
    plural: str
    etype: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]


def _status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


class _Stream:
    """The body of one watch response, read line by line as the watcher does."""

    def __init__(
        self,
        server: ApiServer,
        plural: str,
        after_rv: int,
        initial: list[dict[str, Any]] | None,
        deadline: float,
    ) -> None:
        self.server = server
        self.plural = plural
        self.after_rv = after_rv
        self.initial = list(initial) if initial is not None else None
        self.bookmark_pending = initial is not None
        self.deadline = deadline
        self.pos = 0
        self.cut = False
        self.listed: list[dict[str, Any]] = []  # the initial events delivered so far

    async def readline(self, max_line_length: int = 0) -> bytes:
        server = self.server
        loop = asyncio.get_running_loop()
        while True:
            if self.cut:
                raise aiohttp.ServerDisconnectedError()
            if self.initial:
                obj = self.initial.pop(0)
                await asyncio.sleep(server.item_delay)
                if self.cut:
                    raise aiohttp.ServerDisconnectedError()
                self.listed.append(obj)
                return orjson.dumps({"type": "ADDED", "object": obj}) + b"\n"
            if self.bookmark_pending:
                self.bookmark_pending = False
                server.shown.list_done(self.plural, self.listed)
                mark = {
                    "kind": KINDS[self.plural],
                    "apiVersion": "example.com/v1",
                    "metadata": {
                        "resourceVersion": str(self.after_rv),
                        "annotations": {INITIAL_EVENTS_END: "true"},
                    },
                }
                return orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n"
            history = server.history
            while self.pos < len(history):
                entry = history[self.pos]
                self.pos += 1
                if entry.plural == self.plural and entry.rv > self.after_rv:
                    server.shown.event(self.plural, entry.obj, entry.etype == "DELETED")
                    return orjson.dumps({"type": entry.etype, "object": entry.obj}) + b"\n"
            remaining = self.deadline - loop.time()
            if remaining <= 0:
                return b""  # the server-side timeout: a clean end
            changed = server.changed
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                pass


class _Shown:
    """What the watches have been shown of each resource, to record each change of it
    (`Record.delivered`): a change that no watch event and no list ever showed cannot be
    seen by any list + watch client, so no trigger can be asked for it. One view per
    resource: the simulated process has one watch of each (a Manager shares them)."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.view: dict[str, dict[str, dict[str, Any]]] = {plural: {} for plural in KINDS}

    def _show(self, plural: str, name: str, obj: dict[str, Any] | None) -> None:
        before = self.view[plural].get(name)
        if obj is None:
            if before is None:
                return
            del self.view[plural][name]
            self.record.delivered(plural, name, _owner(before), None)
        elif (
            before is None
            or before["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]
        ):
            self.view[plural][name] = obj
            rv = int(obj["metadata"]["resourceVersion"])
            self.record.delivered(plural, name, _owner(obj), rv)

    def event(self, plural: str, obj: dict[str, Any], deleted: bool) -> None:
        self._show(plural, obj["metadata"]["name"], None if deleted else obj)

    def list_done(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A list was delivered whole: the watch's view becomes exactly its items."""
        listed = {obj["metadata"]["name"]: obj for obj in items}
        for name in sorted(set(self.view[plural]) | set(listed)):
            self._show(plural, name, listed.get(name))


def _owner(obj: dict[str, Any]) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or [{}]
    name: str | None = refs[0].get("name")
    return name


class _Response:
    """What `request` returns: ``status``, ``read()``, ``content`` and a context manager."""

    def __init__(
        self, server: ApiServer, status: int, data: bytes, stream: _Stream | None = None
    ) -> None:
        self._server = server
        self.status = status
        self._data = data
        self.content = stream

    async def read(self) -> bytes:
        return self._data

    def release(self) -> None:
        if self.content is not None:
            self._server.streams.discard(self.content)

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


@dataclass
class ServerConfig:
    """How this server behaves (chosen per schedule)."""

    streaming: bool = True
    page_size: int = 2
    item_delay: float = 0.2
    request_latency: float = 0.01
    rival_hold: float = 0.0  # 0: no rival replica
    lease_duration: float = 15.0


@dataclass
class _Lease:
    obj: dict[str, Any] | None = None
    changed_at: float = 0.0
    rival_timer: asyncio.TimerHandle | None = None
    transitions: int = 0
    partition_until: float = 0.0
    rival_until: float = 0.0
    rival_renewals: list[asyncio.TimerHandle] = field(default_factory=list)


class ApiServer:
    """The in-memory API server (see the module docstring)."""

    def __init__(self, record: Record, config: ServerConfig) -> None:
        self.record = record
        self.config = config
        self.item_delay = config.item_delay
        self.rv = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[_Entry] = []
        self.compacted: dict[str, int] = dict.fromkeys(KINDS, -1)
        self.down_until = 0.0
        self.streams: set[_Stream] = set()
        self.changed = asyncio.Event()
        self.lease = _Lease()
        self.shown = _Shown(record)
        self._pages: dict[str, list[dict[str, Any]]] = {}  # paginated lists in progress

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    # -- what the schedule does ---------------------------------------------------------

    def put(self, plural: str, name: str, owner: str | None = None) -> None:
        """Create or change an object (a new generation in its spec)."""
        self.rv += 1
        old = self.objects.get((plural, name))
        meta: dict[str, Any] = {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{plural}-{name}",
            "resourceVersion": str(self.rv),
        }
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": owner,
                    "uid": f"uid-widgets-{owner}",
                    "controller": True,
                }
            ]
        gen = (old["spec"]["gen"] + 1) if old is not None else 1
        obj = {
            "apiVersion": "example.com/v1",
            "kind": KINDS[plural],
            "metadata": meta,
            "spec": {"gen": gen},
        }
        self.objects[(plural, name)] = obj
        self.history.append(_Entry(self.rv, plural, "MODIFIED" if old else "ADDED", obj))
        self.record.change(plural, name, owner, self.rv, deleted=False)
        self._notify()

    def delete(self, plural: str, name: str) -> None:
        old = self.objects.pop((plural, name), None)
        if old is None:
            return
        self.rv += 1
        obj = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.rv)}}
        self.history.append(_Entry(self.rv, plural, "DELETED", obj))
        self.record.change(plural, name, _owner(old), self.rv, deleted=True)
        self._notify()

    def cut_streams(self, plural: str | None = None) -> None:
        for stream in [s for s in self.streams if plural in (None, s.plural)]:
            stream.cut = True
            self.streams.discard(stream)
        self._notify()

    def break_watch(self, plural: str) -> None:
        """The watches of one resource break, and that resource's history is compacted
        before they can resume (0.3 s, below the watcher's first backoff): they come back
        to 410 and relist, while the other resources' watches go on."""
        self.cut_streams(plural)
        asyncio.get_running_loop().call_later(0.3, self.compact, plural)

    def outage(self, duration: float, *, compact: bool) -> None:
        """The server goes away for `duration`: streams cut, requests refused; with
        `compact`, it comes back with its history compacted (the watches get 410)."""
        self.down_until = max(self.down_until, self.now + duration)
        if compact:
            asyncio.get_running_loop().call_at(self.down_until, self.compact)
        self.cut_streams()

    def compact(self, plural: str | None = None) -> None:
        """Forget the history so far (of one resource, or all), as a restart with a fresh
        watch cache does: a watch from any version up to now gets 410 Gone (and lists from
        now on are newer)."""
        for name in self.compacted:
            if plural in (None, name):
                self.compacted[name] = self.rv
        self.rv += 1

    def partition_lease(self, duration: float) -> None:
        """This replica's Lease requests fail for `duration` (the others' do not)."""
        self.lease.partition_until = max(self.lease.partition_until, self.now + duration)

    # -- the HTTP layer -----------------------------------------------------------------

    def _check_up(self) -> None:
        if self.now < self.down_until:
            raise aiohttp.ClientConnectionError("simulated API server is down")

    async def request(
        self,
        client: object,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool | None] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
        accept: str | None = None,
    ) -> _Response:
        """`fastctl.kube._http.request` for collection GETs (lists and watches); full
        objects only (`accept` is for metadata-only watches, which the simulation has none of)."""
        await asyncio.sleep(self.config.request_latency)
        self._check_up()
        q = {k: v for k, v in (query or {}).items() if v is not None}
        plural = path.rsplit("/", 1)[1]
        if method != "GET" or plural not in KINDS:
            return _Response(self, 404, _status(404, "NotFound", f"{method} {path}"))
        if q.get("watch"):
            return self._watch(plural, q)
        return await self._list(plural, q)

    def _snapshot(self, plural: str, rv: int) -> list[dict[str, Any]]:
        """The objects of `plural` as they were at `rv` (replayed from the history)."""
        state: dict[str, dict[str, Any]] = {}
        for entry in self.history:
            if entry.rv > rv:
                break
            if entry.plural != plural:
                continue
            name = entry.obj["metadata"]["name"]
            if entry.etype == "DELETED":
                state.pop(name, None)
            else:
                state[name] = entry.obj
        return [state[name] for name in sorted(state)]

    async def _list(self, plural: str, q: Mapping[str, Any]) -> _Response:
        token = q.get("continue")
        if token:
            snap_rv, _, offset_s = str(token).partition(":")
            rv, offset = int(snap_rv), int(offset_s)
            await asyncio.sleep(self.item_delay)  # the pause between pages
            self._check_up()
            if rv <= self.compacted[plural]:
                return _Response(self, 410, _status(410, "Expired", "continue token expired"))
        else:
            rv, offset = self.rv, 0
        items = self._snapshot(plural, rv)
        limit = int(q.get("limit") or 0)
        size = min(limit, self.config.page_size) if limit else len(items)
        page = items[offset : offset + size]
        more = offset + size < len(items)
        listed = self._pages.pop(plural, []) if offset else []
        listed.extend(page)
        if more:
            self._pages[plural] = listed
        else:
            self.shown.list_done(plural, listed)
        doc = {
            "kind": f"{KINDS[plural]}List",
            "metadata": {
                "resourceVersion": str(rv),
                "continue": f"{rv}:{offset + size}" if more else "",
            },
            "items": page,
        }
        return _Response(self, 200, orjson.dumps(doc))

    def _watch(self, plural: str, q: Mapping[str, Any]) -> _Response:
        deadline = self.now + float(q.get("timeoutSeconds") or 290)
        if q.get("sendInitialEvents"):
            if not self.config.streaming:
                return _Response(self, 400, _status(400, "BadRequest", "no sendInitialEvents"))
            stream = _Stream(self, plural, self.rv, self._snapshot(plural, self.rv), deadline)
        else:
            since = int(str(q.get("resourceVersion") or "0"))
            if since <= self.compacted[plural]:
                return _Response(self, 410, _status(410, "Expired", f"too old: {since}"))
            stream = _Stream(self, plural, since, None, deadline)
        self.streams.add(stream)
        return _Response(self, 200, b"", stream)

    # -- the Lease --------------------------------------------------------------------

    async def request_json(
        self,
        client: object,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool | None] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        request_timeout: float = 60.0,
    ) -> Any:
        """`fastctl.kube._http.request_json` for the Lease client."""
        await asyncio.sleep(self.config.request_latency)
        self._check_up()
        if self.now < self.lease.partition_until:
            raise aiohttp.ClientConnectionError("simulated partition from the API server")
        lease = self.lease
        if method == "GET":
            if lease.obj is None:
                raise self._error(404, "NotFound", method, path)
            return lease.obj
        doc = orjson.loads(body or b"{}")
        if method == "POST":
            if lease.obj is not None:
                raise self._error(409, "AlreadyExists", method, path)
            return self._write_lease(doc)
        if method == "PUT":
            if lease.obj is None:
                raise self._error(404, "NotFound", method, path)
            current = lease.obj["metadata"]["resourceVersion"]
            if (doc.get("metadata") or {}).get("resourceVersion") != current:
                raise self._error(409, "Conflict", method, path)
            return self._write_lease(doc)
        raise self._error(405, "MethodNotAllowed", method, path)

    def _error(self, code: int, reason: str, method: str, path: str) -> ApiError:
        return error_from_response(code, _status(code, reason, reason), method=method, path=path)

    def _write_lease(self, doc: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        meta = {**(doc.get("metadata") or {}), "resourceVersion": str(self.rv)}
        lease = self.lease
        holder = (doc.get("spec") or {}).get("holderIdentity") or ""
        old_holder = ((lease.obj or {}).get("spec") or {}).get("holderIdentity") or ""
        lease.obj = {**doc, "metadata": meta}
        lease.changed_at = self.now
        if holder == "" and old_holder not in ("", RIVAL):
            self.record.lease_released(self.now)
        self._arm_rival()
        return lease.obj

    def _arm_rival(self) -> None:
        """The rival replica takes the lease once it saw no change for a lease duration."""
        lease = self.lease
        if lease.rival_timer is not None:
            lease.rival_timer.cancel()
            lease.rival_timer = None
        if not self.config.rival_hold:
            return
        loop = asyncio.get_running_loop()
        at = lease.changed_at + self.config.lease_duration
        lease.rival_timer = loop.call_at(at, self._rival_takes_over)

    def _rival_takes_over(self) -> None:
        lease = self.lease
        lease.rival_timer = None
        holder = ((lease.obj or {}).get("spec") or {}).get("holderIdentity") or ""
        if holder == RIVAL:
            return
        lease.transitions += 1
        lease.rival_until = self.now + self.config.rival_hold
        self.record.rival_leads(self.now, lease.rival_until + self.config.lease_duration)
        self._rival_write(RIVAL)
        loop = asyncio.get_running_loop()
        t = 2.0
        while t < self.config.rival_hold:
            lease.rival_renewals.append(loop.call_later(t, self._rival_write, RIVAL))
            t += 2.0
        lease.rival_renewals.append(loop.call_later(self.config.rival_hold, self._rival_write, ""))

    def _rival_write(self, holder: str) -> None:
        now = micro_time()
        spec = {
            "holderIdentity": holder,
            "leaseDurationSeconds": int(self.config.lease_duration),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": self.lease.transitions,
        }
        base = self.lease.obj or {"metadata": {"name": "sim"}}
        self._write_lease(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": base["metadata"]["name"]},
                "spec": spec,
            }
        )
