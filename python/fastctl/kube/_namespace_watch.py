"""The watch of a set of namespaces: one `watcher` per namespace, merged into one stream.

Each namespace of a `Namespaces` set is watched by a `watcher` of its own, so each keeps
every guarantee of a one-namespace watch (its own resourceVersion, relists after a 410,
retries, backoff), and the namespace-scoped RBAC of a Role in each namespace suffices. The
events are merged into one stream, in which each namespace's (re)list is framed by
`ListFrame`s naming it: a store swaps in that namespace's objects alone, and a relist of one
namespace leaves the others' objects, filters and triggers as they are.

The first lists: the stream opens with ``INIT`` for the set itself (namespace ``""``), then
an ``INIT`` for each namespace of the set, then the set's ``INIT_DONE``; a `Store` is ready
once no list is open after an ``INIT_DONE``, that is once every namespace of the set has
been listed once (at once when the set is empty).

A dynamic set (patterns, a selector) also watches the Namespaces, metadata only, with the
selector on the server (one such watch per client and selector, shared by every set that
needs it: `fastctl.kube._namespace_feed`): a namespace that appears (created, or labelled
into the set) gets its watcher and its first list; one that goes (deleted, or labelled
out) has its watcher stopped and an empty list framed for it, so its objects leave the
caches as ``DELETE`` events (a `reflector` reports them) and nothing of it lingers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._namespace_feed import NAMESPACE, namespace_events
from fastctl.kube._namespaces import Namespaces
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._retry import resolve_patiently
from fastctl.kube._watcher import (
    EventKind,
    ListFrame,
    ObjectEvent,
    WatchConfig,
    WatchEvent,
    watcher,
)

__all__ = ["NAMESPACE", "namespace_set_watcher"]

log = logging.getLogger("fastctl.watcher")

_SET = ""
"""The namespace the set's own first list is framed with (no object is in it)."""

_BUFFER = 1024
"""Events of all namespaces queued ahead of the consumer: a slow consumer slows the
watches down rather than making memory grow."""


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


OnError = Callable[[BaseException], None] | None


class _Merged:
    """The per-namespace watchers of one set, and the queue they all feed."""

    def __init__(
        self,
        client: ApiClient,
        resource: ResolvedResource,
        config: WatchConfig,
        on_error: OnError,
    ) -> None:
        self.client = client
        self.resource = resource
        self.config = config
        self.on_error = on_error
        self.queue: asyncio.Queue[WatchEvent | _Failed] = asyncio.Queue(_BUFFER)
        self.watching: dict[str, asyncio.Task[None]] = {}

    async def start(self, namespace: str) -> None:
        """Watch `namespace`: its list is open from now (so a store is not ready before it)."""
        if namespace in self.watching:
            return
        await self.queue.put(ListFrame(EventKind.INIT, namespace))
        self.watching[namespace] = asyncio.get_running_loop().create_task(
            self._pump(namespace), name=f"fastctl-watch:{self.resource}/{namespace}"
        )

    async def stop(self, namespace: str) -> None:
        """Stop watching `namespace`; its objects leave the caches (an empty list)."""
        task = self.watching.pop(namespace, None)
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        log.info("watcher[%s]: namespace %s left the set", self.resource, namespace)
        await self.queue.put(ListFrame(EventKind.INIT, namespace))
        await self.queue.put(ListFrame(EventKind.INIT_DONE, namespace))

    async def _pump(self, namespace: str) -> None:
        try:
            async for event in watcher(
                self.client,
                self.resource,
                namespace=namespace,
                config=self.config,
                on_error=self.on_error,
            ):
                if isinstance(event, ListFrame):
                    event = ListFrame(event.kind, namespace)
                await self.queue.put(event)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # fatal for the whole watch, as for one namespace
            await self.queue.put(_Failed(exc))

    async def follow(self, namespaces: Namespaces) -> None:
        """Start the set's namespaces, and follow a dynamic set's changes (forever)."""
        if namespaces.is_fixed:
            await self._initial(set(namespaces.names))
            return
        listing: set[str] | None = None
        first = True
        try:
            async for event in namespace_events(
                self.client, namespaces.selector, watch=watcher, on_error=self.on_error
            ):
                if event.kind is EventKind.INIT:
                    listing = set()
                elif event.kind is EventKind.INIT_APPLY:
                    name = _name(event.obj)
                    if listing is None:
                        listing = set()
                    if namespaces.matches(name):
                        listing.add(name)
                elif event.kind is EventKind.INIT_DONE:
                    members = set(namespaces.names) | (listing or set())
                    listing = None
                    if first:
                        first = False
                        await self._initial(members)
                        continue
                    for gone in set(self.watching) - members:
                        await self.stop(gone)
                    for name in sorted(members - set(self.watching)):
                        await self.start(name)
                elif isinstance(event, ObjectEvent) and not first:
                    name = _name(event.obj)
                    if event.kind is EventKind.APPLY and namespaces.matches(name):
                        if name not in self.watching:
                            log.info(
                                "watcher[%s]: namespace %s joined the set", self.resource, name
                            )
                        await self.start(name)
                    elif event.kind is EventKind.DELETE and name not in namespaces.names:
                        await self.stop(name)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self.queue.put(_Failed(exc))

    async def _initial(self, members: set[str]) -> None:
        await self.queue.put(ListFrame(EventKind.INIT, _SET))
        for name in sorted(members):
            await self.start(name)
        await self.queue.put(ListFrame(EventKind.INIT_DONE, _SET))

    async def close(self) -> None:
        tasks = list(self.watching.values())
        self.watching.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


async def namespace_set_watcher(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    namespaces: Namespaces,
    *,
    config: WatchConfig | None = None,
    on_error: OnError = None,
) -> AsyncIterator[WatchEvent]:
    """Events of `resource` in every namespace of `namespaces`, forever (see the module
    docstring). `config` and `on_error` as for `watcher`, for each namespace's watcher (the
    Namespace watch of a dynamic set reports its retried errors to `on_error` too). A
    fatal error of any of the watches is raised here."""
    resolved = (
        resource
        if isinstance(resource, ResolvedResource)
        else await resolve_patiently(client, resource, on_error=on_error)
    )
    if not resolved.namespaced:
        raise ValueError(f"{resolved} is cluster-scoped: it cannot be watched in {namespaces}")
    merged = _Merged(client, resolved, config or WatchConfig(), on_error)
    follower = asyncio.get_running_loop().create_task(
        merged.follow(namespaces), name=f"fastctl-watch:{resolved}:namespaces"
    )
    try:
        while True:
            item = await merged.queue.get()
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await merged.close()
