"""How long handovers take, per slot and direction, for
``fastctl_shard_handover_duration_seconds{group,direction}``:

- ``out``: from the moment this member stops serving a slot (the assignment moved it, the
  member leaves, or its tenure ended) until a successful write of its Lease no longer
  publishes it: the drain of its running reconciles plus the next renewal. Until then no
  other member may claim it, so this is the part of a handover the old owner holds up.
- ``in``: from the moment the assignment first gives this member a slot until it serves it:
  waiting for the old owner to unpublish it (or for its Lease to expire), then the claim's
  write and the read that checks it.

Times are the event loop's clock, as everywhere in the member, so a virtual clock drives it
in the tests. Nothing is recorded for a slot wanted and then given away before it was
served: that handover never happened here.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["BUCKETS", "Durations", "HandoverTimes"]

BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, math.inf)
"""Upper bounds, in seconds: a handover takes about a retry period when the old owner
leaves or drains quickly, and about a lease duration (15 s by default) after a crash."""


@dataclass
class Durations:
    """A histogram: observations counted in `BUCKETS` (not cumulative), and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """The ``(le, count)`` pairs of a Prometheus histogram."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(BUCKETS, self.counts, strict=True):
            running += n
            out.append(("+Inf" if math.isinf(bound) else repr(float(bound)), float(running)))
        return out


class HandoverTimes:
    """Start times of the handovers under way on one member, and the durations of the
    finished ones (`incoming`, `outgoing`)."""

    def __init__(self) -> None:
        self.incoming = Durations()
        self.outgoing = Durations()
        self._wanted_since: dict[int, float] = {}
        self._lost_since: dict[int, float] = {}

    def wanted(self, desired: Iterable[int], serving: Iterable[int], now: float) -> None:
        """The assignment gives this member `desired`; it serves `serving`. Starts the clock
        of every newly wanted slot, stops it (recording) for every wanted slot now served,
        and forgets the slots no longer wanted."""
        desired_set, serving_set = set(desired), set(serving)
        for slot in list(self._wanted_since):
            if slot not in desired_set:
                del self._wanted_since[slot]
        for slot in desired_set - serving_set:
            self._wanted_since.setdefault(slot, now)
        for slot in desired_set & serving_set:
            self._lost_since.pop(slot, None)  # served again before it was let go: no handover
            started = self._wanted_since.pop(slot, None)
            if started is not None:
                self.incoming.observe(now - started)

    def stopped(self, slots: Iterable[int], now: float) -> None:
        """This member stopped serving `slots`: their outgoing handovers begin."""
        for slot in slots:
            self._lost_since.setdefault(slot, now)

    def published(self, slots: Iterable[int], now: float) -> None:
        """A write publishing exactly `slots` succeeded: every lost slot it leaves out is
        handed over."""
        kept = set(slots)
        for slot in list(self._lost_since):
            if slot not in kept:
                self.outgoing.observe(now - self._lost_since.pop(slot))
