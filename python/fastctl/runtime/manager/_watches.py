"""Which watches a Manager's controllers share.

Two controllers share a watch (one watcher, one cache: `SharedWatch`) only when each would
have opened exactly that watch itself: the same client, resource, namespace (or set of
namespaces) and watch options (`WatchConfig`: its label and field selectors and its
transform among them), so two relations with different scopes never share a cache (one
would see the other's objects) and equal scopes still do. A transform is compared as a
value: the built-in transforms (`fastctl.kube.keep_paths`, ...) are equal when built
alike, a function of one's own only to itself. The client is part of the key because a
Manager may run controllers on several clusters, one client each: the same kind with the
same options on two clusters is two watches. A client is compared by identity (two
clients of one cluster may carry different credentials, so they do not share either). A
sharded primary watch lists only this replica's slots and is never shared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._namespace_watch import namespace_set_watcher
from fastctl.kube._namespaces import Namespaces, NamespaceScope
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import WatchConfig, WatchEvent, watcher
from fastctl.runtime._shared_watch import SharedWatch, Subscription
from fastctl.runtime.controller import Controller
from fastctl.runtime.controller._spec import WatchUse

__all__ = ["SharedWatches", "WatchKey", "share_watches"]


@dataclass(frozen=True, slots=True)
class WatchKey:
    """What makes two watches the same (see the module docstring)."""

    client_id: int
    resource: Resource
    namespace: NamespaceScope
    config: WatchConfig


@dataclass(frozen=True, slots=True)
class SharedWatches:
    """The shared watches, and each controller's subscriptions by watch use."""

    watches: tuple[SharedWatch, ...]
    sources: dict[str, dict[int | None, Subscription]]


def share_watches(
    controllers: Iterable[Controller], *, sharded: Callable[[Controller], bool]
) -> SharedWatches:
    """One `SharedWatch` for every watch more than one use needs (see the module
    docstring); every other use is left to the controller's own watch."""
    controllers = list(controllers)

    def uses(ctl: Controller) -> list[tuple[WatchUse, WatchKey]]:
        return [
            (use, WatchKey(id(ctl.client), use.resource, use.namespace, use.config))
            for use in ctl.spec.watch_uses()
            if use.use is not None or not sharded(ctl)
        ]

    counts: Counter[WatchKey] = Counter(key for ctl in controllers for _, key in uses(ctl))
    shared: dict[WatchKey, SharedWatch] = {}
    sources: dict[str, dict[int | None, Subscription]] = {}
    for ctl in controllers:
        mine = sources.setdefault(ctl.name, {})
        for use, key in uses(ctl):
            if counts[key] < 2:
                continue
            if key not in shared:
                shared[key] = _shared_watch(ctl.client, use)
            mine[use.use] = shared[key].subscribe()
    return SharedWatches(tuple(shared.values()), sources)


def _shared_watch(client: ApiClient, use: WatchUse) -> SharedWatch:
    """A shared watch of `use` on `client` whose watcher reports its retried errors to
    every subscriber (each controller counts them in its own metrics)."""

    def events() -> AsyncIterator[WatchEvent]:
        if isinstance(use.namespace, Namespaces):
            return namespace_set_watcher(
                client,
                use.resource,
                use.namespace,
                config=use.config,
                on_error=watch.report_error,
            )
        return watcher(
            client,
            use.resource,
            namespace=use.namespace,
            config=use.config,
            on_error=watch.report_error,
        )

    watch = SharedWatch(f"{use.resource}", events)
    return watch
