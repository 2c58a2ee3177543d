"""The pure rules of sharding: the configuration, what a member publishes on its Lease, and
the state machine that decides which slots a member may serve.

Nothing here does I/O or reads a clock: the loop (`_member`) feeds it what it wrote, when it
sent it, and what it read, so the safety argument below is tested with a fake clock and a
model of the API server (tests/unit/test_sharding_protocol.py).

**The rule kept across replicas.** At any moment at most one member serves a slot; a member
starts a reconcile of an object only while it serves the object's slot. It rests on three
rules, the first two those of leader election (docs/leader-election.md):

1. An observer counts another member's Lease as expired only when ``leaseDurationSeconds``
   have passed, on its own monotonic clock, since it received a version of that Lease it
   had not seen before.
2. A member's tenure ends ``renew_deadline`` after it *sent* its last successful write;
   when it ends, the member stops serving every slot at once and starts over. Since
   ``renew_deadline < lease_duration`` by a margin, a member has stopped before anyone can
   count its Lease as expired.
3. A member serves a slot only after a write that *publishes* the slot on its Lease has
   succeeded, and a read of the group's Leases *sent after that write had succeeded*
   shows no other unexpired member publishing it. It keeps publishing every slot it serves or still
   drains, until the last reconcile of that slot has ended.

Of two members that both claim a slot, the one whose claim was written second reads the
other's (etcd is linearizable), so at most the first serves. A slot changes hands only
through a moment when just its old server publishes it (draining) and then nobody does.

**Renewing on a slow API server.** Rule 2 ends a tenure when no write has succeeded for
`renew_deadline` since the last successful one was sent; everything the loop spends
between two writes comes out of that. So the writes keep their own pace (`next_write`):
the next one goes a retry period after the last one was *sent*, however long it and the
reads took (the reads run beside the writes, never in front of them); a failed write is
retried sooner as the tenure's end nears, until it really ends; and each write may take
all the time left in the tenure (`write_budget`), not a fixed timeout that could give up
while the tenure still holds. The retry period is jittered per write, so members that an
overloaded API server answers in lock step drift apart again.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fastctl.runtime.leader._rules import check_lease_timings, default_identity
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._slots import KEY_FIELDS, ShardKey

__all__ = [
    "GROUP_LABEL",
    "RETRY_FLOOR",
    "SLOTS_ANNOTATION",
    "Member",
    "Sharding",
    "format_slots",
    "next_write",
    "parse_slots",
    "write_budget",
]

_NOT_NAME = re.compile(r"[^a-z0-9.-]+")

GROUP_LABEL = "sharding.fastctl.dev/group"
"""The label that puts a member's Lease in its group (the group's Leases are listed by it)."""

SLOTS_ANNOTATION = "sharding.fastctl.dev/slots"
"""The annotation of a member's Lease that publishes the slots it serves, claims or drains,
as ranges: ``0-15,32,40-47``."""


@dataclass(frozen=True, init=False)
class Sharding:
    """How a `fastctl.Manager` shares its controllers' objects with the other replicas of
    the same `group`.

    Every replica holds its own Lease named ``<group>-<identity>`` in `namespace`; the live
    members are the unexpired Leases of the group. The hash space of `key` (``"uid"`` or
    ``"namespace"``) is cut into `slots` slots, assigned to the live members by rendezvous
    hashing with bounded loads (no member more than ``ceil(slots / N)``). `lease_duration`,
    `renew_deadline` and `retry_period` mean what they mean for `fastctl.LeaderElection`,
    with the same defaults and the same checks.
    """

    group: str
    namespace: str
    identity: str
    key: ShardKey
    slots: int
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __init__(
        self,
        group: str,
        *,
        namespace: str = "default",
        identity: str | None = None,
        key: ShardKey = "uid",
        slots: int = 256,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not group or not namespace:
            raise ValueError("Sharding needs a group name and a namespace")
        if identity == "":
            raise ValueError("identity must not be empty")
        if key not in KEY_FIELDS:
            raise ValueError(f"key must be one of {sorted(KEY_FIELDS)}, not {key!r}")
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 65536:
            raise ValueError(f"slots must be an integer in [1, 65536], not {slots!r}")
        check_lease_timings(
            lease_duration,
            renew_deadline,
            retry_period,
            "a member must stop serving before the others may count its Lease as expired",
        )
        set_ = object.__setattr__  # frozen: assign through object, once
        set_(self, "group", group)
        set_(self, "namespace", namespace)
        set_(self, "identity", identity if identity is not None else default_identity())
        set_(self, "key", key)
        set_(self, "slots", slots)
        set_(self, "lease_duration", float(lease_duration))
        set_(self, "renew_deadline", float(renew_deadline))
        set_(self, "retry_period", float(retry_period))

    @property
    def lease_name(self) -> str:
        """This member's own Lease: ``<group>-<identity>``, made a valid object name (the
        default identity, ``host_random``, has an underscore): lower case, other characters
        as ``-``, and then a hash of the original so two identities never share a name."""
        raw = f"{self.group}-{self.identity}"
        name = _NOT_NAME.sub("-", raw.lower()).strip("-.")
        if name == raw:
            return name
        digest = hashlib.blake2b(raw.encode(), digest_size=4).hexdigest()
        return f"{name[:200]}-{digest}"

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds``, rounded up (others never wait less than assumed)."""
        return max(1, math.ceil(self.lease_duration))


RETRY_FLOOR = 0.1
"""The shortest wait before retrying a failed write, as a fraction of the retry period: a
write that fails at once (refused, reset) is retried soon, but never in a tight loop."""


def write_budget(now: float, deadline: float, renew_deadline: float) -> float:
    """How long a write sent at `now` may take: the time left in the tenure that ends at
    `deadline` (an answer after that comes too late to keep the slots, and giving up any
    sooner would throw them away while they could still be kept); with no tenure,
    `renew_deadline` (a write answered later than that after its send starts no tenure)."""
    return deadline - now if now < deadline else renew_deadline


def next_write(
    *,
    ok: bool,
    sent_at: float,
    now: float,
    deadline: float,
    retry_period: float,
    jitter: float,
) -> float:
    """The delay from `now` to the next write, after the write sent at `sent_at` succeeded
    (`ok`) or failed, for a tenure that ends at `deadline`.

    The period is ``retry_period · (1 + jitter)`` (`jitter` drawn in ``[0, RETRY_JITTER]``
    for each write) and counts from the last write's *send*: the time that write and the
    reads took does not push the next one towards the deadline. A write that failed while
    the tenure holds is retried sooner when the tenure would end first: after half the
    time left (so every retry leaves the next one room), never sooner than `RETRY_FLOOR`
    periods; the retries go on until the deadline. With no tenure, the plain period."""
    period = retry_period * (1.0 + jitter)
    due = sent_at + period
    if not ok and now < deadline:
        due = min(due, now + max(RETRY_FLOOR * retry_period, (deadline - now) / 2))
    return max(0.0, due - now)


def format_slots(slots: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` as ``"0-2,5"``: runs of adjacent slots as ranges."""
    parts: list[str] = []
    ordered = sorted(set(slots))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_slots(text: str | None, slots: int) -> frozenset[int]:
    """The inverse of `format_slots`. A value this member cannot read (another version, a
    hand edit) is taken to publish *every* slot: reading too much keeps others out, reading
    too little would let two members serve one slot."""
    if not text:
        return frozenset()
    owned: set[int] = set()
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            first, last = int(low), int(high or low)
            if not 0 <= first <= last < slots:
                raise ValueError(part)
            owned.update(range(first, last + 1))
    except ValueError:
        return frozenset(range(slots))
    return frozenset(owned)


@dataclass
class Member:
    """Which slots one member serves, claims and drains; the decisions of rule 3.

    The loop's writes call `to_publish()` for what to write, then `wrote(sent_at,
    published)` when that write succeeded (or `write_failed()`); its reads, which run
    beside the writes, take `durable` when a read is sent and then call `observed(others,
    now, durable)` with what it returned: each unexpired other member's published slots.
    `observed` returns the slots that stopped being served (the runtime must stop starting
    their reconciles and end the running ones, then call `drained(slot)`). `check(now)`
    ends the tenure on time between them.
    """

    identity: str
    slots: int
    renew_deadline: float
    serving: set[int] = field(default_factory=set)
    claiming: set[int] = field(default_factory=set)
    draining: set[int] = field(default_factory=set)
    deadline: float = -math.inf
    wanted: frozenset[int] = frozenset()
    """The slots the assignment gave this member at the last `observed` in its tenure."""
    _durable: frozenset[int] = frozenset()

    def to_publish(self) -> frozenset[int]:
        """Every slot this member may be serving, or may serve once its claim is checked."""
        return frozenset(self.serving | self.claiming | self.draining)

    def valid(self, now: float) -> bool:
        return now < self.deadline

    def serves(self, slot: int, now: float) -> bool:
        """True if a reconcile of an object in `slot` may start now."""
        return slot in self.serving and self.valid(now)

    def wrote(self, sent_at: float, published: frozenset[int]) -> None:
        """A write of `published`, sent at `sent_at`, succeeded."""
        self.deadline = max(self.deadline, sent_at + self.renew_deadline)
        self._durable = published

    def write_failed(self) -> None:
        """A write failed or timed out: it may or may not have been applied, so none of its
        new claims may be trusted; what earlier writes published still stands."""
        self._durable = self._durable & self.to_publish()

    def check(self, now: float) -> set[int]:
        """End the tenure if its deadline has passed: stop serving everything at once (the
        returned slots), forget all claims, and start over."""
        if self.valid(now) or not (self.serving or self.claiming or self.draining):
            return set()
        stopped = self.serving | self.draining
        self.serving, self.claiming, self.draining = set(), set(), set()
        self._durable = frozenset()
        return stopped

    @property
    def durable(self) -> frozenset[int]:
        """What the successful writes so far have certainly published: a read sent now
        may promote exactly these claims (pass it to `observed` with that read)."""
        return self._durable

    def observed(
        self,
        others: Mapping[str, frozenset[int]],
        now: float,
        durable: frozenset[int] | None = None,
    ) -> set[int]:
        """Act on a read of the group made after the last successful write: `others` maps
        every *unexpired* other member to the slots its Lease publishes. Returns the slots
        that stop being served now (to be drained). `durable`: `durable` as it was when
        the read was *sent* (default: now), when writes may complete while a read is on
        its way: only a claim published by a write that had succeeded before the read was
        sent may be served on its strength (rule 3)."""
        if durable is None:
            durable = self._durable
        stopped = self.check(now)
        if not self.valid(now):
            return stopped
        desired = assign([self.identity, *others], self.slots)[self.identity]
        self.wanted = desired
        taken: dict[int, str] = {}
        for other, published in sorted(others.items()):
            for slot in published:
                taken.setdefault(slot, other)
        # Slots we serve and no longer should: no new reconciles, drain the running ones.
        lost = self.serving - desired
        self.serving -= lost
        self.draining |= lost
        stopped |= lost
        # A draining slot is not served again until it has drained and been claimed anew:
        # only then is it certain that no reconcile of the earlier round still runs.
        for slot in sorted(self.claiming):
            holder = taken.get(slot)
            if slot not in desired or (holder is not None and holder < self.identity):
                self.claiming.discard(slot)  # withdraw: not ours, or the smaller claim wins
            elif holder is None and slot in durable:
                self.claiming.discard(slot)
                self.serving.add(slot)
        for slot in desired - self.serving - self.claiming - self.draining:
            if slot not in taken:
                self.claiming.add(slot)
        return stopped

    def drained(self, slot: int) -> None:
        """The last reconcile of `slot` has ended; the next write stops publishing it."""
        self.draining.discard(slot)
