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
- namespaces: objects of one name in several namespaces, watched in one namespace or in
  all; each object gets a new UID when it is created again;
- writes from the controllers (through ``request``, which every JSON request of fastctl's
  HTTP layer goes through): a JSON merge patch of an object or of its
  status, answered after `ServerConfig.write_latency`, refused (409) when it carries a
  ``metadata.resourceVersion`` that is not the object's; a patch that changes nothing is a
  no-op, as on a real server: no new resourceVersion, no event, and the answer is the object
  as it is (with whatever version another writer gave it meanwhile);
- a Lease with optimistic concurrency (409 on a stale resourceVersion), requests from this
  replica that fail for a while (a partition), and a rival replica that takes the lease
  once it has not changed for a lease duration (a correct successor) and holds it a while.

The pieces a fake cluster has too come from `fastctl.testing.fake`: the watch stream read
line by line (`WatchStream`, told what it showed through `stream_listed` and
`stream_shown`), the history entries, the responses and Status bodies, JSON merge patches
and the ``shardSelector`` filter. What is this simulation's own stays here: the record of
what each change was and what the watches showed, races, the leader Lease and its rival.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from fastctl.errors import ApiError
from fastctl.kube._http import error_from_response
from fastctl.runtime.leader._rules import micro_time
from fastctl.testing.fake._patches import merge_patch
from fastctl.testing.fake._reads import shard_filter
from fastctl.testing.fake._wire import Entry, Response, WatchStream, status_body

from .record import Record

NAMESPACE = "sim"
GROUP_PATH = "/apis/example.com/v1"
LEASE_COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
KINDS = {"widgets": "Widget", "children": "Child", "pointers": "Pointer"}
RIVAL = "rival"


def key_of_obj(obj: Mapping[str, Any]) -> str:
    """``namespace/name``: how the server and the record name an object."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


class _Shown:
    """What the watches have been shown of each resource, to record each change of it
    (`Record.delivered`): a change that no watch event and no list ever showed cannot be
    seen by any list + watch client, so no trigger can be asked for it. One view per
    resource: the simulated process has one watch of each (a Manager shares them)."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.view: dict[str, dict[str, dict[str, Any]]] = {plural: {} for plural in KINDS}

    def _show(self, plural: str, key: str, obj: dict[str, Any] | None) -> None:
        before = self.view[plural].get(key)
        if obj is None:
            if before is None:
                return
            del self.view[plural][key]
            self.record.delivered(plural, key, targets(before), (), None)
        elif (
            before is None
            or before["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]
        ):
            self.view[plural][key] = obj
            rv = int(obj["metadata"]["resourceVersion"])
            old = targets(before) if before is not None else ()
            self.record.delivered(plural, key, old, targets(obj), rv)

    def event(self, plural: str, obj: dict[str, Any], deleted: bool) -> None:
        self._show(plural, key_of_obj(obj), None if deleted else obj)

    def list_done(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A list was delivered whole: the watch's view becomes exactly its items."""
        listed = {key_of_obj(obj): obj for obj in items}
        for key in sorted(set(self.view[plural]) | set(listed)):
            self._show(plural, key, listed.get(key))


def targets(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The primary objects a related object maps to (``namespace/name``): its controller
    owner (a child), or the widget its ``spec.target`` names (a pointer)."""
    meta = obj["metadata"]
    refs = meta.get("ownerReferences") or ()
    names = [ref["name"] for ref in refs if ref.get("controller")]
    target = (obj.get("spec") or {}).get("target")
    if target:
        names.append(target)
    return tuple(f"{meta['namespace']}/{name}" for name in names)


@dataclass
class ServerConfig:
    """How this server behaves (chosen per schedule)."""

    streaming: bool = True
    page_size: int = 2
    item_delay: float = 0.2
    request_latency: float = 0.01
    rival_hold: float = 0.0  # 0: no rival replica
    lease_duration: float = 15.0
    write_latency: float = 0.0
    """How long a controller's write takes on top of `request_latency`."""
    watch_delay: float = 0.0
    """Seconds between a write and its watch event (lists are not delayed); a schedule may
    change it as it runs (`ApiServer.watch_delay`)."""
    shards: bool = False
    """Apply ``shardSelector`` to lists and watches (and say so: ``metadata.shardInfo``),
    as a server with the sharded list and watch does; else ignore it, as an older one does."""


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
        self.watch_delay = config.watch_delay
        self.rv = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, ns/name)
        self.history: list[Entry] = []
        self.compacted: dict[str, int] = dict.fromkeys(KINDS, -1)
        self.down_until = 0.0
        self.streams: set[WatchStream] = set()
        self.changed = asyncio.Event()
        self.lease = _Lease()
        self.shown = _Shown(record)
        self.races: set[str] = set()
        """Objects (``namespace/name``) that another writer changes while the next write of
        a controller to them is in flight (`race`)."""
        self._created: dict[tuple[str, str], int] = {}  # how often each object was created
        self._pages: dict[str, list[dict[str, Any]]] = {}  # paginated lists in progress
        self._lists = itertools.count()
        self._names = itertools.count()

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _response(self, status: int, data: bytes, stream: WatchStream | None = None) -> Response:
        return Response(status, data, stream, self.streams.discard)

    def _stream(
        self,
        plural: str,
        after_rv: int,
        initial: list[dict[str, Any]] | None,
        deadline: float,
        namespace: str | None,
        keep: Callable[[Mapping[str, Any]], bool] | None,
    ) -> WatchStream:
        bookmark = {"kind": KINDS[plural], "apiVersion": "example.com/v1"}
        return WatchStream(
            self,
            plural,
            after_rv,
            initial,
            deadline,
            namespace=namespace,
            keep=keep,
            bookmark=bookmark,
        )

    def stream_listed(self, stream: WatchStream, items: list[dict[str, Any]]) -> None:
        """What the watches were shown: a whole initial list."""
        self.shown.list_done(stream.resource, items)

    def stream_shown(self, stream: WatchStream, entry: Entry) -> None:
        """What the watches were shown: one event."""
        self.shown.event(stream.resource, entry.obj, entry.etype == "DELETED")

    # -- what the schedule does ---------------------------------------------------------

    def put(
        self,
        plural: str,
        name: str,
        owner: str | None = None,
        *,
        namespace: str = NAMESPACE,
        target: str | None = None,
    ) -> None:
        """Create or change an object (a new generation in its spec), as another writer
        than the controllers: a child controlled by `owner`, a pointer at `target`."""
        key = f"{namespace}/{name}"
        old = self.objects.get((plural, key))
        if old is None:
            self._created[(plural, key)] = self._created.get((plural, key), 0) + 1
        self.rv += 1
        meta: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": self._uid(plural, key),
            "resourceVersion": str(self.rv),
        }
        if owner is not None:
            owner_obj = self.objects.get(("widgets", f"{namespace}/{owner}"))
            meta["ownerReferences"] = [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": owner,
                    "uid": owner_obj["metadata"]["uid"] if owner_obj else f"uid-gone-{owner}",
                    "controller": True,
                }
            ]
        gen = (old["spec"]["gen"] + 1) if old is not None else 1
        obj: dict[str, Any] = {
            "apiVersion": "example.com/v1",
            "kind": KINDS[plural],
            "metadata": meta,
            "spec": {"gen": gen, **({"target": target} if target is not None else {})},
        }
        if old is not None and "status" in old:
            obj["status"] = old["status"]
        self._store(plural, key, obj, "MODIFIED" if old else "ADDED", ours=False)

    def _uid(self, plural: str, key: str) -> str:
        """A new UID each time the object is created again (as the real server gives)."""
        uid = f"uid-{plural}-{key.replace('/', '-')}"
        n = self._created[(plural, key)]
        return uid if n == 1 else f"{uid}-{n}"

    def _store(self, plural: str, key: str, obj: dict[str, Any], etype: str, *, ours: bool) -> None:
        self.objects[(plural, key)] = obj
        self.history.append(Entry(self.rv, plural, etype, obj, self.now))
        self.record.change(plural, key, targets(obj), self.rv, deleted=False, ours=ours)
        self._notify()

    def delete(
        self, plural: str, name: str, *, namespace: str = NAMESPACE, ours: bool = False
    ) -> dict[str, Any] | None:
        """Delete an object (by another writer, unless `ours`); the object as deleted."""
        key = f"{namespace}/{name}"
        old = self.objects.pop((plural, key), None)
        if old is None:
            return None
        self.rv += 1
        obj = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.rv)}}
        self.history.append(Entry(self.rv, plural, "DELETED", obj, self.now))
        self.record.change(plural, key, targets(old), self.rv, deleted=True, ours=ours)
        self._notify()
        return obj

    def race(self, key: str) -> None:
        """Another writer changes `key` while a controller's next write to it is in flight,
        after that write started and before the server applies it."""
        self.races.add(key)

    def cut_streams(self, plural: str | None = None) -> None:
        for stream in [s for s in self.streams if plural in (None, s.resource)]:
            stream.cut = True
            self.streams.discard(stream)
        self._notify()

    def break_watch(self, plural: str) -> None:
        """The watches of one resource break, and that resource's history is compacted
        before they can resume (0.3 s, below the watcher's first backoff): they come back
        to 410 and relist, while the other resources' watches go on."""
        self.record.log.append(f"{self.now:.2f} the watches of {plural} break (compacted soon)")
        self.cut_streams(plural)
        asyncio.get_running_loop().call_later(0.3, self.compact, plural)

    def outage(self, duration: float, *, compact: bool) -> None:
        """The server goes away for `duration`: streams cut, requests refused; with
        `compact`, it comes back with its history compacted (the watches get 410)."""
        self.down_until = max(self.down_until, self.now + duration)
        gone = " (back compacted)" if compact else ""
        self.record.log.append(f"{self.now:.2f} server down until {self.down_until:.2f}{gone}")
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

    def check_up(self) -> None:
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
        stream: bool = False,
    ) -> Response:
        """`fastctl.kube._http.request`: collection GETs (lists and watches; full objects
        only: `accept` is for metadata-only watches, which the simulation has none of), and
        reads and patches of single objects (what `request_json` and the object API send).
        Every answer is one the watcher reads as it reads aiohttp's, `stream` or not."""
        parts = path.removeprefix(GROUP_PATH).strip("/").split("/")
        if (len(parts) in (4, 5) and parts[0] == "namespaces") or method == "POST":
            try:
                if method == "POST":
                    answer = await self._create(parts, body)
                else:
                    answer = await self._object_request(method, path, body)
            except ApiError as exc:
                return self._response(exc.status, status_body(exc.status, exc.reason, exc.message))
            return self._response(201 if method == "POST" else 200, orjson.dumps(answer))
        await asyncio.sleep(self.config.request_latency)
        self.check_up()
        q = {k: v for k, v in (query or {}).items() if v is not None}
        plural = parts[-1]
        namespace = parts[1] if len(parts) == 3 and parts[0] == "namespaces" else None
        if method != "GET" or plural not in KINDS or len(parts) not in (1, 3):
            return self._response(404, status_body(404, "NotFound", f"{method} {path}"))
        keep = shard_filter(str(q.get("shardSelector") or "")) if self.config.shards else None
        if q.get("watch"):
            return self._watch(plural, namespace, keep, q)
        return await self._list(plural, namespace, keep, q)

    def _snapshot(
        self,
        plural: str,
        rv: int,
        namespace: str | None = None,
        keep: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """The objects of `plural` as they were at `rv` (replayed from the history)."""
        state: dict[str, dict[str, Any]] = {}
        for entry in self.history:
            if entry.rv > rv:
                break
            if entry.resource != plural:
                continue
            if namespace is not None and entry.obj["metadata"]["namespace"] != namespace:
                continue
            key = key_of_obj(entry.obj)
            if entry.etype == "DELETED":
                state.pop(key, None)
            else:
                state[key] = entry.obj
        return [state[key] for key in sorted(state) if keep is None or keep(state[key])]

    async def _list(
        self,
        plural: str,
        namespace: str | None,
        keep: Callable[[Mapping[str, Any]], bool] | None,
        q: Mapping[str, Any],
    ) -> Response:
        token = q.get("continue")
        if token:
            snap_rv, offset_s, list_id = str(token).split(":")
            rv, offset = int(snap_rv), int(offset_s)
            await asyncio.sleep(self.item_delay)  # the pause between pages
            self.check_up()
            if rv <= self.compacted[plural]:
                self._pages.pop(list_id, None)
                return self._response(410, status_body(410, "Expired", "continue token expired"))
        else:
            rv, offset, list_id = self.rv, 0, str(next(self._lists))
        items = self._snapshot(plural, rv, namespace, keep)
        limit = int(q.get("limit") or 0)
        size = min(limit, self.config.page_size) if limit else len(items)
        page = items[offset : offset + size]
        more = offset + size < len(items)
        listed = self._pages.pop(list_id, []) if offset else []
        listed.extend(page)
        if more:
            self._pages[list_id] = listed
        else:
            self.shown.list_done(plural, listed)
        meta: dict[str, Any] = {
            "resourceVersion": str(rv),
            "continue": f"{rv}:{offset + size}:{list_id}" if more else "",
        }
        if keep is not None:
            meta["shardInfo"] = {"selector": q.get("shardSelector")}
        doc = {"kind": f"{KINDS[plural]}List", "metadata": meta, "items": page}
        return self._response(200, orjson.dumps(doc))

    def _watch(
        self,
        plural: str,
        namespace: str | None,
        keep: Callable[[Mapping[str, Any]], bool] | None,
        q: Mapping[str, Any],
    ) -> Response:
        deadline = self.now + float(q.get("timeoutSeconds") or 290)
        if q.get("sendInitialEvents"):
            if not self.config.streaming:
                return self._response(400, status_body(400, "BadRequest", "no sendInitialEvents"))
            initial = self._snapshot(plural, self.rv, namespace, keep)
            stream = self._stream(plural, self.rv, initial, deadline, namespace, keep)
        else:
            since = int(str(q.get("resourceVersion") or "0"))
            if since <= self.compacted[plural]:
                return self._response(410, status_body(410, "Expired", f"too old: {since}"))
            stream = self._stream(plural, since, None, deadline, namespace, keep)
        self.streams.add(stream)
        return self._response(200, b"", stream)

    # -- single objects: the controllers' writes ------------------------------------------

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
        """`fastctl.kube._http.request_json` for the Lease client (and single objects, as
        `request` answers them)."""
        if path.startswith(GROUP_PATH):
            return await self._object_request(method, path, body)
        return await self._lease_request(method, path, body)

    async def _object_request(self, method: str, path: str, body: bytes | None) -> Any:
        await asyncio.sleep(self.config.request_latency)
        self.check_up()
        parts = path.removeprefix(GROUP_PATH).strip("/").split("/")
        if len(parts) not in (4, 5) or parts[0] != "namespaces" or parts[2] not in KINDS:
            raise self._error(404, "NotFound", method, path)
        plural, key = parts[2], f"{parts[1]}/{parts[3]}"
        subresource = parts[4] if len(parts) == 5 else None
        if method == "GET":
            found = self.objects.get((plural, key))
            if found is None:
                raise self._error(404, "NotFound", method, path)
            return found
        if method == "DELETE":
            await asyncio.sleep(self.config.write_latency)
            self.check_up()
            namespace, name = key.split("/")
            gone = self.delete(plural, name, namespace=namespace, ours=True)
            if gone is None:
                raise self._error(404, "NotFound", method, path)
            return gone
        if method != "PATCH":
            raise self._error(405, "MethodNotAllowed", method, path)
        if key in self.races:
            self.races.discard(key)
            obj = self.objects.get((plural, key))
            if obj is not None:
                meta = obj["metadata"]
                self.put(plural, meta["name"], namespace=meta["namespace"])
        await asyncio.sleep(self.config.write_latency)
        self.check_up()
        old = self.objects.get((plural, key))
        if old is None:
            raise self._error(404, "NotFound", method, path)
        patch = orjson.loads(body or b"{}")
        meta = patch.get("metadata") or {}
        wanted = meta.get("resourceVersion")
        if wanted is not None and wanted != old["metadata"]["resourceVersion"]:
            raise self._error(409, "Conflict", method, path)  # a precondition, refused
        if wanted is not None:  # a condition, not a change
            rest = {k: v for k, v in meta.items() if k != "resourceVersion"}
            patch = {k: v for k, v in patch.items() if k != "metadata"}
            if rest:
                patch["metadata"] = rest
        if subresource == "status":
            patch = {"status": patch.get("status")} if "status" in patch else {}
        new = merge_patch(old, patch)
        if new == old:
            return old  # a no-op: no new version, no event
        self.rv += 1
        new["metadata"] = {**new["metadata"], "resourceVersion": str(self.rv)}
        self._store(plural, key, new, "MODIFIED", ours=True)
        return new

    async def _create(self, parts: list[str], body: bytes | None) -> Any:
        """A POST of a new object, named by ``generateName`` (a counter: each name once)."""
        await asyncio.sleep(self.config.request_latency + self.config.write_latency)
        self.check_up()
        path = "/".join(parts)
        if len(parts) != 3 or parts[0] != "namespaces" or parts[2] not in KINDS:
            raise self._error(404, "NotFound", "POST", path)
        plural, namespace = parts[2], parts[1]
        obj = orjson.loads(body or b"{}")
        meta = obj.setdefault("metadata", {})
        name = meta.get("name") or f"{meta.get('generateName', 'x-')}{next(self._names)}"
        key = f"{namespace}/{name}"
        if (plural, key) in self.objects:
            raise self._error(409, "AlreadyExists", "POST", path)
        self._created[(plural, key)] = self._created.get((plural, key), 0) + 1
        self.rv += 1
        meta |= {
            "name": name,
            "namespace": namespace,
            "uid": self._uid(plural, key),
            "resourceVersion": str(self.rv),
        }
        self._store(plural, key, obj, "ADDED", ours=True)
        return obj

    # -- the Lease --------------------------------------------------------------------

    async def _lease_request(self, method: str, path: str, body: bytes | None) -> Any:
        """The leader Lease: GET, POST and PUT of one object."""
        await asyncio.sleep(self.config.request_latency)
        self.check_up()
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

    @staticmethod
    def _error(code: int, reason: str, method: str, path: str) -> ApiError:
        return error_from_response(
            code, status_body(code, reason, reason), method=method, path=path
        )

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
