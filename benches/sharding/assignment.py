"""How even the slot shares are, and how many slots a join or a leave moves: fastctl's
assignment (rendezvous hashing with bounded loads) against plain rendezvous hashing, over
random identity sets (pure computation, no server; seconds).

    python benches/sharding/assignment.py [--slots 256] [--sets 200]

For each member count N it draws `--sets` sets of N random identities (``replica-<hex>``,
the shape of a pod name's suffix; a fixed seed, so runs repeat) and reports:

- **largest share**: the largest member's slots over all slots, median and worst over the
  sets (the fair share is 1/N);
- **join moves**: slots that change member when one more member joins, over the slots
  the joiner gets (1.00: only what it takes moves), mean and worst;
- **leave moves**: slots that change member when one member leaves, over the slots it
  held, mean and worst.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable, Mapping

from fastctl.runtime.sharding._assignment import assign, weight

Assignment = Callable[[list[str], int], Mapping[str, frozenset[int]]]


def plain_rendezvous(members: list[str], slots: int) -> dict[str, frozenset[int]]:
    """Each slot to the member of highest weight, no bound on the loads."""
    won: dict[str, set[int]] = {m: set() for m in members}
    for slot in range(slots):
        won[max(members, key=lambda m: (weight(m, slot), m))].add(slot)
    return {m: frozenset(s) for m, s in won.items()}


def owners(shares: Mapping[str, frozenset[int]]) -> dict[int, str]:
    return {slot: member for member, owned in shares.items() for slot in owned}


def moved(before: Mapping[str, frozenset[int]], after: Mapping[str, frozenset[int]]) -> int:
    a, b = owners(before), owners(after)
    return sum(1 for slot in a.keys() | b.keys() if a.get(slot) != b.get(slot))


def measure(how: Assignment, n: int, slots: int, sets: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    largest, joins, leaves = [], [], []
    for _ in range(sets):
        members = [f"replica-{rng.getrandbits(40):010x}" for _ in range(n)]
        before = how(members, slots)
        largest.append(max(len(s) for s in before.values()) / slots)
        joiner = f"replica-{rng.getrandbits(40):010x}"
        after = how([*members, joiner], slots)
        joins.append(moved(before, after) / max(1, len(after[joiner])))
        if n > 1:
            leaver = members[0]
            left = how(members[1:], slots)
            leaves.append(moved(before, left) / max(1, len(before[leaver])))
    return {
        "largest_median": statistics.median(largest),
        "largest_worst": max(largest),
        "join_mean": statistics.mean(joins),
        "join_worst": max(joins),
        "leave_mean": statistics.mean(leaves) if leaves else 1.0,
        "leave_worst": max(leaves) if leaves else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--sets", type=int, default=200)
    parser.add_argument("--members", type=int, nargs="+", default=[2, 3, 4, 6, 8, 12])
    args = parser.parse_args()
    print(
        "| N | assignment | largest share (median, worst) | fair | join moves / joiner's "
        "(mean, worst) | leave moves / leaver's (mean, worst) |"
    )
    print("| ---: | --- | --- | ---: | --- | --- |")
    for n in args.members:
        for name, how in (("plain rendezvous", plain_rendezvous), ("bounded (fastctl)", assign)):
            r = measure(how, n, args.slots, args.sets, seed=n)
            print(
                f"| {n} | {name} | {r['largest_median']:.1%}, {r['largest_worst']:.1%} "
                f"| {1 / n:.1%} | {r['join_mean']:.2f}, {r['join_worst']:.2f} "
                f"| {r['leave_mean']:.2f}, {r['leave_worst']:.2f} |"
            )


if __name__ == "__main__":
    main()
