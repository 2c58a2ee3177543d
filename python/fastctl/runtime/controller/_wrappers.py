"""The reconcile and the store as the applier sees them, built in one place.

A run wraps the user's reconcile and the primary cache for what its environment asks:

- the reconcile: given its own copy of the cached object (`fastctl.runtime._copy_on_read`:
  a reconcile may change what it got, the cache stays as the API server sent it), its
  writes observed (for the read-your-writes fence, which also tells the
  own-writes registry; or for own-write echoes alone, ``ignore_own_writes`` with the fence
  off), then counted per shard slot (sharded, for drains);
- the store: filtered to the served slots (sharded), and not ready until the leader gate
  is open and every related cache has its first list.

Each wrapper does one thing and they compose in a fixed order, so a leader gate and a shard
assignment together keep both checks (an earlier version wrapped the store twice, the outer
wrapper discarding the inner one's gate).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fastctl.kube._store import Store
from fastctl.runtime._copy_on_read import copied
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime._read_your_writes import CacheFence
from fastctl.runtime.sharding._gate import ShardedStore, ShardGate
from fastctl.types import ObjectRef, Reconcile

__all__ = ["ReadinessGate", "reconcile_view", "store_view"]


def reconcile_view(
    reconcile: Reconcile,
    *,
    own_writes: OwnWrites | None,
    fence: CacheFence | None = None,
    shard: ShardGate | None,
    fresh_reads: bool = False,
) -> Reconcile:
    """`reconcile`, given its own copy of the object, its writes observed and tracked per
    slot, as the run needs. One observer per call: the fence's, which tells the own-writes
    registry too (set by the applier, `CacheFence.begin`, where the fence leaves it to
    it), or the registry itself. `fresh_reads`: the store already returns a new
    object on every read (a `fastctl.Store`): that object is the copy."""
    if not fresh_reads:
        reconcile = copied(reconcile)
    if fence is not None:  # an async reconcile's observer may be left to the applier
        reconcile = fence.observing(reconcile, own_writes, by_applier=True)
    elif own_writes is not None:
        reconcile = own_writes.observing(reconcile)
    if shard is not None:
        reconcile = shard.track(reconcile)
    return reconcile


def store_view(
    store: Store,
    *,
    leader_gate: asyncio.Event | None,
    shard: ShardGate | None,
    caches: Sequence[Store],
) -> Mapping[ObjectRef, Any]:
    """The primary cache as the applier reads it. The cases:

    - nothing to add: the store itself;
    - sharded: objects outside the served slots look absent (`ShardedStore`);
    - a leader gate or related caches: not ready until the gate is open and every cache
      has its first list (`ReadinessGate`), around the sharded view when both apply."""
    view: Any = ShardedStore(store, shard) if shard is not None else store
    if leader_gate is None and not caches:
        return view  # type: ignore[no-any-return]
    return ReadinessGate(view, leader_gate, caches)


class ReadinessGate(Mapping[ObjectRef, Any]):
    """A store that is not ready until its gate opens (if any) and the related caches
    (`caches`) hold their first lists: the applier queues (and de-duplicates) triggers
    meanwhile, and starts reconciling when all are ready, so a reconcile never reads a
    child cache that merely looks empty because it has not been listed yet, and a follower
    never reconciles."""

    def __init__(
        self, store: Any, gate: asyncio.Event | None, caches: Sequence[Store] = ()
    ) -> None:
        self._store = store
        self._gate = gate
        self._caches = caches

    @property
    def is_ready(self) -> bool:
        gate_open = self._gate is None or self._gate.is_set()
        return gate_open and bool(self._store.is_ready) and all(c.is_ready for c in self._caches)

    async def wait_ready(self) -> None:
        if self._gate is not None:
            await self._gate.wait()
        for cache in self._caches:
            await cache.wait_ready()
        await self._store.wait_ready()

    def __getitem__(self, ref: ObjectRef) -> Any:
        return self._store[ref]

    def get(self, ref: ObjectRef, default: Any = None) -> Any:
        return self._store.get(ref, default)

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)
