"""Which live member should serve which slot: rendezvous (highest-random-weight) hashing.

Every member computes the map from the same inputs (the member identities it sees and the
slot count), so members that see the same Leases agree without talking to each other. When a
member joins or leaves, only the slots it wins or held move, about ``1/N`` of them: the
other members keep serving what they serve, with no handover and no relist.

The weight is BLAKE2b-64 of ``identity NUL slot``. FNV-1a would not do here: its low
avalanche makes the winner of neighbouring slots correlated, so shares come out uneven.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["assign", "weight"]


def weight(identity: str, slot: int) -> int:
    """The pseudo-random weight of `identity` for `slot` (the same on every machine)."""
    digest = hashlib.blake2b(f"{identity}\0{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(members: Iterable[str], slots: int) -> dict[str, frozenset[int]]:
    """The slots each member should serve: each slot goes to the member of highest weight
    (ties, which need a 64-bit collision, go to the larger identity). Every member appears
    in the result, with an empty set if it wins nothing; no members, an empty map."""
    names = sorted(set(members))
    won: dict[str, set[int]] = {name: set() for name in names}
    if not names:
        return {}
    for slot in range(slots):
        winner = max(names, key=lambda name: (weight(name, slot), name))
        won[winner].add(slot)
    return {name: frozenset(owned) for name, owned in won.items()}
