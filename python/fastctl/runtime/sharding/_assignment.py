"""Which live member should serve which slot: rendezvous (highest-random-weight) hashing
with bounded loads.

Every member computes the map from the same inputs (the member identities it sees and the
slot count), so members that see the same Leases agree without talking to each other.

Plain rendezvous hashing gives each slot to the member that weighs it highest. A join or a
leave then moves only the slots the joiner wins or the leaver held (about ``1/N``), but the
shares are only as even as chance makes them: over 256 slots, with 4 members the largest
share is 28 % in the median identity set and 33 % or more in one of twenty (a third more
work than the fair 25 %), with 3 members up to 42 %. A replica sized for ``1/N`` of the
load then runs hot, and adding replicas helps less than it should.

So the loads are bounded: no member takes more than ``ceil(slots / N)``. The member-slot
pairs are taken in descending order of weight, and each slot goes to the first member that
reaches it with room left. A member still gets the slots it weighs highest, as long as it
has room; the shares are as even as the slot count allows (at most one slot apart from the
fair share). The price is in moves: a join or leave can now move a few slots between
members that stay, where a capped member's order is shifted by the new cap. Over random
identity sets and 256 slots (``benches/sharding/assignment.py``) a join moves 3-22 % more
slots than the joiner ends up with at 2-8 members (46 % at 12), a leave 0-26 % more than
the leaver held; steady evenness is what a replica is sized by, and a move is one handover.

The weight is BLAKE2b-64 of ``identity NUL slot``. FNV-1a would not do here: its low
avalanche makes the winner of neighbouring slots correlated, so shares come out uneven.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

__all__ = ["assign", "weight"]


def weight(identity: str, slot: int) -> int:
    """The pseudo-random weight of `identity` for `slot` (the same on every machine)."""
    digest = hashlib.blake2b(f"{identity}\0{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(members: Iterable[str], slots: int) -> dict[str, frozenset[int]]:
    """The slots each member should serve (see the module docstring): every slot goes to one
    member, none gets more than ``ceil(slots / N)``. Ties of weight, which need a 64-bit
    collision, go to the larger identity. Every member appears in the result (with an empty
    set if it gets nothing); no members, an empty map."""
    return dict(_assign(tuple(sorted(set(members))), slots))


@functools.lru_cache(maxsize=32)
def _assign(names: tuple[str, ...], slots: int) -> tuple[tuple[str, frozenset[int]], ...]:
    """`assign` of sorted, distinct `names` (cached: each member recomputes the map from
    the Leases it reads every `retry_period`, and the members rarely change)."""
    if not names:
        return ()
    room = -(-slots // len(names))
    pairs = sorted(
        ((weight(name, slot), name, slot) for name in names for slot in range(slots)),
        reverse=True,
    )
    won: dict[str, set[int]] = {name: set() for name in names}
    owner: dict[int, str] = {}
    for _, name, slot in pairs:
        if slot in owner or len(won[name]) >= room:
            continue
        owner[slot] = name
        won[name].add(slot)
        if len(owner) == slots:
            break
    return tuple((name, frozenset(won[name])) for name in names)
