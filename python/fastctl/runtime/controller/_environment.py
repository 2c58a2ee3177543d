"""Where a controller runs: the `Environment` a run is given.

A controller describes what it needs (`ControllerSpec.watch_uses`); the environment says
where each need is met: the client of the cluster, the source of every watch (its own
watcher, or a subscription to a watch the Manager shares), the leader gate (reconcile only
while leading) and the shard assignment (reconcile only the served slots). A controller run
on its own gets `Environment(client)`: its own watches, no gates. A Manager builds one
environment per controller and never touches the controller's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kubernetes_asyncio.client import ApiClient

from fastctl.kube._namespace_watch import namespace_set_watcher
from fastctl.kube._namespaces import Namespaces
from fastctl.kube._store import Store
from fastctl.kube._watcher import WatchEvent, watcher
from fastctl.runtime.controller._spec import WatchUse
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._watch import ServingSet

__all__ = ["Environment", "OnError", "OwnWatch", "ShardAssignment", "WatchSource"]

OnError = Callable[[BaseException], None]
"""Hears every error a watch retries (the controller counts them in its metrics)."""


class WatchSource(Protocol):
    """The events of one watch use."""

    @property
    def store(self) -> Store | None:
        """The cache this source keeps itself (a shared watch), or None: the run applies
        the events to a store of its own."""
        ...

    def events(self, on_error: OnError) -> AsyncIterator[WatchEvent]:
        """The event stream; call once per run."""
        ...


@dataclass(frozen=True, slots=True)
class OwnWatch:
    """A watch opened by the run itself, on `client`."""

    client: ApiClient
    use: WatchUse
    store: Store | None = None

    def events(self, on_error: OnError) -> AsyncIterator[WatchEvent]:
        use = self.use
        if isinstance(use.namespace, Namespaces):
            return namespace_set_watcher(
                self.client, use.resource, use.namespace, config=use.config, on_error=on_error
            )
        return watcher(
            self.client,
            use.resource,
            namespace=use.namespace,
            config=use.config,
            on_error=on_error,
        )


@dataclass(frozen=True, slots=True)
class ShardAssignment:
    """The slots this replica serves (`member`) and the gate that checks each reconcile
    against them and counts the running ones for drains (`gate`)."""

    gate: ShardGate
    member: ServingSet


@dataclass(frozen=True, slots=True)
class Environment:
    """What one run of a controller is given (see the module docstring).

    `sources` maps a watch use (`WatchUse.use`) to its source; a use not in it is watched
    by the run itself on `client`. `leader_gate`: no reconcile starts until it is set.
    `shard`: only the served slots' objects are listed and reconciled; the primary watch is
    then always the run's own (it lists only those slots)."""

    client: ApiClient
    sources: Mapping[int | None, WatchSource] = field(default_factory=dict)
    leader_gate: asyncio.Event | None = None
    shard: ShardAssignment | None = None

    def source(self, use: WatchUse) -> WatchSource:
        found = self.sources.get(use.use)
        return found if found is not None else OwnWatch(self.client, use)
