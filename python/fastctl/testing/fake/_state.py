"""What a fake API server keeps: the objects, the one resourceVersion counter and the
history of events, the kinds served, the open watches, compaction, and the admission hook
a write passes where it is stored. Each concern of the server (reads, writes, deletion,
admission, conversion) is a class on top of this one."""

from __future__ import annotations

import asyncio
import functools
import itertools
from datetime import UTC, datetime
from typing import Any

from fastctl._clock import monotonic
from fastctl.testing.fake._admission import Admission
from fastctl.testing.fake._conversion import Conversion
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._requests import Fault, Hook, RecordedRequest
from fastctl.testing.fake._wire import Entry, WatchStream

__all__ = ["ServerState", "key_of", "wall_stamp"]


@functools.lru_cache(maxsize=1)
def _timestamp(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wall_stamp() -> str:
    """The wall clock in the server's form (to the second, as the server keeps it), each
    second formatted once (``strftime`` was a tenth of a write's cost)."""
    return _timestamp(int(datetime.now(UTC).timestamp()))


def key_of(namespace: str | None, name: str) -> str:
    return f"{namespace or ''}/{name}"


class ServerState:
    """The state of a fake API server and the operations on it every concern shares."""

    def __init__(
        self,
        *,
        page_size: int,
        streaming: bool,
        garbage_collection: bool,
        request_latency: float,
        write_latency: float,
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

    def storage_of(self, kind: Kind) -> Kind:
        """The kind at its CRD's storage version (`kind` itself for a single version)."""
        for k in self.kinds.values():
            if k.key == kind.key and k.storage:
                return k
        return kind

    def _kind_by_key(self, key: str) -> Kind | None:
        for kind in self.kinds.values():
            if kind.key == key:
                return kind
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
            k = key_of(meta.get("namespace"), meta["name"])
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
        key = (kind.key, key_of(meta.get("namespace"), meta["name"]))
        if etype == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append(Entry(self.rv, kind.key, etype, obj, self.now()))
        self._notify()
        return obj

    def _at_admission(
        self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Where a write is about to be stored: the admission hook of the request, once."""
        hook, self._hook = self._hook, None
        return new if hook is None else hook(kind, old, new)
