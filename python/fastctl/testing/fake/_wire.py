"""What an in-memory API server hands back through fastctl's HTTP layer: responses, the
watch stream read line by line, and ``Status`` bodies.

fastctl's HTTP layer (`fastctl.kube._http.request`) reads a response's ``status``, its body
(``read()``) or its stream (``content.readany()``: what has arrived, here one line at a
time), and releases it. `Response` is that, from memory; `WatchStream` is a watch's body,
replayed from the server's history (one resourceVersion counter, so a watch resumes
exactly after the version it names), ending cleanly at the watch's server-side timeout and
breaking (a dropped connection) when the server cuts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from fastctl._clock import monotonic
from fastctl.kube._watcher import INITIAL_EVENTS_END

__all__ = ["Entry", "Keep", "Response", "StreamSource", "WatchStream", "status_body"]

Keep = Callable[[Mapping[str, Any]], bool]
"""Whether a watch or a list shows an object (selectors, shard ranges)."""


@dataclass(slots=True)
class Entry:
    """One object event in a server's history, made at `at` (loop seconds)."""

    rv: int
    resource: str
    etype: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    at: float = 0.0


def status_body(code: int, reason: str, message: str, **extra: Any) -> bytes:
    """A failure ``Status``, as the API server answers an error."""
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
            **extra,
        }
    )


class StreamSource(Protocol):
    """What a `WatchStream` reads from its server."""

    history: list[Entry]
    item_delay: float
    watch_delay: float

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change (a new event each time)."""

    def stream_listed(self, stream: WatchStream, items: list[dict[str, Any]]) -> None:
        """The stream's initial list was delivered whole."""

    def stream_shown(self, stream: WatchStream, entry: Entry) -> None:
        """The stream delivered `entry`."""


class WatchStream:
    """The body of one watch response, read line by line as the watcher does.

    With `initial` (``sendInitialEvents``), the objects come first as ADDED events and the
    initial-events-end bookmark after them; then every history entry after `after_rv` that
    `keep` keeps. With `selector`, the stream tracks what it has shown: an object that
    stops matching is shown DELETED, one that starts matching ADDED (as a real server's
    filtered watch does); `project` turns each object into what is sent (metadata-only
    watches).
    """

    def __init__(
        self,
        server: StreamSource,
        resource: str,
        after_rv: int,
        initial: list[dict[str, Any]] | None,
        deadline: float,
        *,
        namespace: str | None = None,
        keep: Keep | None = None,
        selector: Keep | None = None,
        present: set[str] | None = None,
        bookmark: Mapping[str, str] | None = None,
        project: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.server = server
        self.resource = resource
        self.namespace = namespace
        self.keep = keep
        self.selector = selector
        self.present = present if present is not None else set()
        """With a selector: the objects (``namespace/name``) the client holds as matching."""
        self.after_rv = after_rv
        self.initial = list(initial) if initial is not None else None
        self.bookmark_pending = initial is not None
        self.bookmark = dict(bookmark or {})
        self.project = project
        self.deadline = deadline
        self.pos = 0
        self.cut = False
        self.listed: list[dict[str, Any]] = []  # the initial events delivered so far
        self.convert: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
        """Each object shown turned into the version the watch asked for (a conversion
        webhook's), or as stored; a failure ends the watch with an ``ERROR`` event."""

    def _wanted(self, entry: Entry) -> bool:
        if entry.resource != self.resource or entry.rv <= self.after_rv:
            return False
        if self.namespace is not None and entry.obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.keep is None or self.keep(entry.obj)

    async def _event(self, etype: str, obj: dict[str, Any]) -> bytes:
        if self.convert is not None:
            try:
                obj = await self.convert(obj)
            except Exception as exc:  # the conversion webhook's failure, as the server sends it
                self.deadline = float("-inf")  # then the watch ends
                status = orjson.loads(status_body(500, "InternalError", str(exc)))
                return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"
        shown = self.project(obj) if self.project is not None else obj
        return orjson.dumps({"type": etype, "object": shown}) + b"\n"

    def _filtered(self, entry: Entry) -> str | None:
        """The event type a selector's watch shows for `entry` (``None``: nothing)."""
        if self.selector is None:
            return entry.etype
        meta = entry.obj["metadata"]
        key = f"{meta.get('namespace') or ''}/{meta['name']}"
        held = key in self.present
        if entry.etype != "DELETED" and self.selector(entry.obj):
            self.present.add(key)
            return "MODIFIED" if held else "ADDED"
        if held:
            self.present.discard(key)
            return "DELETED"
        return None

    async def readany(self) -> bytes:
        """The next line, as a chunk of the stream (a real one may hold many lines, or part
        of one); ``b""`` at the end."""
        return await self.readline()

    async def readline(self, max_line_length: int = 0) -> bytes:
        server = self.server
        while True:
            if self.cut:
                raise aiohttp.ServerDisconnectedError()
            if self.initial:
                obj = self.initial.pop(0)
                await asyncio.sleep(server.item_delay)
                if self.cut:
                    raise aiohttp.ServerDisconnectedError()
                self.listed.append(obj)
                return await self._event("ADDED", obj)
            if self.bookmark_pending:
                self.bookmark_pending = False
                server.stream_listed(self, self.listed)
                mark = {
                    **self.bookmark,
                    "metadata": {
                        "resourceVersion": str(self.after_rv),
                        "annotations": {INITIAL_EVENTS_END: "true"},
                    },
                }
                return orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n"
            history = server.history
            while self.pos < len(history):
                entry = history[self.pos]
                if not self._wanted(entry):
                    self.pos += 1
                    continue
                due = entry.at + server.watch_delay
                if due > monotonic():  # a slow watch: shown `watch_delay` s after the write
                    await asyncio.sleep(due - monotonic())
                    if self.cut:
                        raise aiohttp.ServerDisconnectedError()
                    continue
                self.pos += 1
                etype = self._filtered(entry)
                if etype is None:
                    continue
                server.stream_shown(self, entry)
                return await self._event(etype, entry.obj)
            remaining = self.deadline - monotonic()
            if remaining <= 0:
                return b""  # the server-side timeout: a clean end
            changed = server.changed
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                pass


class Response:
    """What `fastctl.kube._http.request` returns: ``status``, ``read()``, ``content`` (a
    watch's stream) and ``release()``, as an ``aiohttp.ClientResponse`` has them."""

    def __init__(
        self,
        status: int,
        data: bytes,
        stream: WatchStream | None = None,
        on_release: Callable[[WatchStream], None] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self._data = data
        self.content = stream
        self._on_release = on_release
        self.headers = dict(headers or {})

    async def read(self) -> bytes:
        return self._data

    def release(self) -> None:
        if self.content is not None and self._on_release is not None:
            self._on_release(self.content)

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
