"""The hash space of sharding: FNV-1a-64 of a key field, cut into a fixed number of slots,
and the ``shardSelector`` that asks the API server for a set of slots.

Kubernetes v1.36's server-side sharded list and watch (feature gate ``ShardedListAndWatch``)
returns only the objects whose 64-bit FNV-1a hash of ``metadata.uid`` (or
``metadata.namespace``) falls in ``[start, end)``. The client computes the same hash for
its fallback filter, so an object is assigned to the same slot whether the server or the
client filters.

Slot ``i`` of ``n`` covers ``[ceil(i·2⁶⁴/n), ceil((i+1)·2⁶⁴/n))``: contiguous, disjoint,
covering the whole space for any `n`, and a hash ``h`` is in slot ``(h·n) >> 64``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

__all__ = [
    "HASH_SPACE",
    "KEY_FIELDS",
    "ShardKey",
    "fnv1a_64",
    "merge_slots",
    "shard_selector",
    "slot_of",
    "slot_range",
]

HASH_SPACE = 1 << 64
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = HASH_SPACE - 1

ShardKey = Literal["uid", "namespace"]
KEY_FIELDS: dict[str, str] = {
    "uid": "object.metadata.uid",
    "namespace": "object.metadata.namespace",
}
"""The fields the API server can shard on, by the short name fastctl uses for them."""


def fnv1a_64(value: str) -> int:
    """FNV-1a, 64 bits, of the UTF-8 bytes of `value` (Go's ``hash/fnv.New64a``, which the
    API server uses)."""
    h = _FNV_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def _check_slots(slots: int) -> None:
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 65536:
        raise ValueError(f"the number of slots must be an integer in [1, 65536], not {slots!r}")


def slot_range(slot: int, slots: int) -> tuple[int, int]:
    """``[start, end)`` of `slot` in the hash space (``end`` may be 2⁶⁴)."""
    _check_slots(slots)
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot!r} is outside [0, {slots})")
    return -((-slot * HASH_SPACE) // slots), -((-(slot + 1) * HASH_SPACE) // slots)


def slot_of(hash_value: int, slots: int) -> int:
    """The slot a 64-bit hash falls in."""
    return (hash_value * slots) >> 64


def merge_slots(owned: Iterable[int], slots: int) -> list[tuple[int, int]]:
    """The owned slots as the fewest ``[start, end)`` hash ranges (adjacent slots merge)."""
    runs: list[tuple[int, int]] = []
    for slot in sorted(set(owned)):
        start, end = slot_range(slot, slots)
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
    return runs


def shard_selector(owned: Iterable[int], slots: int, key: ShardKey = "uid") -> str:
    """The ``shardSelector`` for the owned slots: ``shardRange(field, 'start', 'end')``
    terms OR-ed with ``||``, one per run of adjacent slots. Hex bounds are 0x-prefixed and
    16 digits wide; the end of the space is written ``0x10000000000000000`` as the server
    expects. Empty when nothing is owned (the caller must not list at all then: an empty
    selector means *everything* to the server)."""
    field = KEY_FIELDS[key]
    return " || ".join(
        f"shardRange({field}, '0x{start:016x}', '0x{end:016x}')"
        for start, end in merge_slots(owned, slots)
    )
