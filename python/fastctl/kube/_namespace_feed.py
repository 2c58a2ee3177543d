"""One watch of the Namespaces for every dynamic namespace set with the same selector.

A dynamic set (`Namespaces` with patterns or a selector) learns which namespaces exist from
a metadata-only watch of the Namespaces, with its selector on the server. Every use of such
a set (a controller's primary kind, each relation with its own kind) would otherwise open
its own: a controller of Widgets in ``team-*`` that owns Deployments and Services held three
identical Namespace watches. Here they share one per client, event loop and selector:

- the first subscriber opens the watch; the last one to leave closes it;
- a subscriber that joins late first gets the namespaces already known, as a list
  (``INIT``, one ``INIT_APPLY`` per namespace, ``INIT_DONE``), then the live events, so it
  sees what it would have seen from a watch of its own; one that joins while a relist is
  open gets the last complete list and then the open relist's namespaces so far;
- each retried error is told to every subscriber's ``on_error`` (each counts it in its own
  metrics), and a fatal error ends every subscriber's stream, each of which then raises it;
  the next subscriber opens a new watch.

What a subscriber sees is only names: the set follows names, and the objects are metadata
only, so a late joiner's list holds ``{"metadata": {"name": ...}}`` alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchConfig, WatchEvent

__all__ = ["NAMESPACE", "WatchFunction", "namespace_events"]

NAMESPACE = Resource("v1", "Namespace", plural="namespaces", namespaced=False)

WatchFunction = Callable[..., AsyncIterator[WatchEvent]]
"""`fastctl.kube._watcher.watcher`, or what a test puts in its place."""

OnError = Callable[[BaseException], None] | None


@dataclass(eq=False)
class _Subscriber:
    queue: asyncio.Queue[WatchEvent | BaseException] = field(default_factory=asyncio.Queue)
    on_error: OnError = None


@dataclass(eq=False)
class _Feed:
    """One Namespace watch and what it has told so far."""

    key: tuple[int, int, str | None]
    subscribers: list[_Subscriber] = field(default_factory=list)
    listed: set[str] | None = None
    """The namespaces of the last complete list, kept up to date by the events since;
    None until the first list is complete."""
    listing: list[str] | None = None
    """The namespaces of the (re)list now open, or None."""
    task: asyncio.Task[None] | None = None

    def join(self, subscriber: _Subscriber) -> None:
        """Add `subscriber`, told first what a watch of its own would have told so far."""
        put = subscriber.queue.put_nowait
        if self.listed is not None:
            put(ListFrame(EventKind.INIT))
            for name in sorted(self.listed):
                put(ObjectEvent(EventKind.INIT_APPLY, _named(name)))
            put(ListFrame(EventKind.INIT_DONE))
        if self.listing is not None:
            put(ListFrame(EventKind.INIT))
            for name in self.listing:
                put(ObjectEvent(EventKind.INIT_APPLY, _named(name)))
        self.subscribers.append(subscriber)

    def record(self, event: WatchEvent) -> None:
        """Keep what a late joiner must be told, then pass `event` to every subscriber."""
        if event.kind is EventKind.INIT:
            self.listing = []
        elif event.kind is EventKind.INIT_DONE:
            self.listed = set(self.listing or ())
            self.listing = None
        elif isinstance(event, ObjectEvent):
            name = _name_of(event.obj)
            if event.kind is EventKind.INIT_APPLY:
                if self.listing is None:
                    self.listing = []
                self.listing.append(name)
            elif self.listed is not None:
                if event.kind is EventKind.APPLY:
                    self.listed.add(name)
                else:
                    self.listed.discard(name)
        for subscriber in self.subscribers:
            subscriber.queue.put_nowait(event)

    def report(self, exc: BaseException) -> None:
        for subscriber in list(self.subscribers):
            if subscriber.on_error is not None:
                subscriber.on_error(exc)


_FEEDS: dict[tuple[int, int, str | None], _Feed] = {}


async def namespace_events(
    client: ApiClient,
    selector: str | None,
    *,
    watch: WatchFunction,
    on_error: OnError = None,
) -> AsyncIterator[WatchEvent]:
    """The events of the Namespaces matching `selector` (metadata only), from the watch
    shared by every subscriber with the same client, loop and selector (see the module
    docstring). Ends by raising the watch's fatal error, if it has one."""
    loop = asyncio.get_running_loop()
    key = (id(loop), id(client), selector)
    feed = _FEEDS.get(key)
    if feed is None:
        feed = _FEEDS[key] = _Feed(key)
        feed.task = loop.create_task(_pump(feed, client, watch), name="fastctl-watch:namespaces")
    subscriber = _Subscriber(on_error=on_error)
    feed.join(subscriber)
    try:
        while True:
            item = await subscriber.queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        feed.subscribers.remove(subscriber)
        if not feed.subscribers and _FEEDS.get(key) is feed:
            del _FEEDS[key]
            if feed.task is not None:
                feed.task.cancel()


async def _pump(feed: _Feed, client: ApiClient, watch: WatchFunction) -> None:
    config = WatchConfig(label_selector=feed.key[2], metadata_only=True)
    try:
        async for event in watch(client, NAMESPACE, config=config, on_error=feed.report):
            feed.record(event)
        raise RuntimeError("the watch of the Namespaces ended")
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # fatal: every subscriber raises it
        if _FEEDS.get(feed.key) is feed:
            del _FEEDS[feed.key]
        for subscriber in feed.subscribers:
            subscriber.queue.put_nowait(exc)


def _named(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
