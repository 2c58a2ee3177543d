"""The pure rules of Lease leader election: the configuration, the record a replica
writes, what an observer concludes from what it saw, and how long a leader's tenure lasts.

Nothing here does I/O or reads a clock on its own: every function takes the time as an
argument, so the timing rules (the safety argument of docs/leader-election.md) are tested
with a fake clock.
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "MIN_SAFETY_MARGIN",
    "RETRY_JITTER",
    "LeaderElection",
    "LeaseRecord",
    "Observation",
    "Tenure",
    "check_lease_timings",
    "default_identity",
    "micro_time",
    "next_record",
    "released_record",
]

RETRY_JITTER = 0.2
"""A candidate waits ``retry_period · (1 + U[0, RETRY_JITTER])`` between attempts, so that
replicas started together do not poll in lock step."""


MIN_SAFETY_MARGIN = 0.5
"""The least ``lease_duration - renew_deadline`` accepted, in seconds.

The margin is the time between the end of a leader's tenure and the earliest moment a
successor may start. In it the former leader must notice the end (a timer on its event
loop), cancel its running reconciles, and let their cancellations run (each one an event
loop turn, plus whatever cleanup the reconcile does on the way out). A margin of a few
milliseconds is eaten by one slow callback or GC pause; half a second leaves room for
that on a loaded machine while still allowing the short leases of tests."""


def default_identity() -> str:
    """``<hostname>_<random>``: unique per process even when two share a host (or a pod
    name, after a restart), which matters because a lease names its holder only by this."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"


def micro_time(when: datetime | None = None) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds, e.g.
    ``2026-12-02T13:45:00.123456Z`` (the format Go's ``metav1.MicroTime`` writes)."""
    when = datetime.now(UTC) if when is None else when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_lease_timings(
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    why: str = "a leader must give up, and cancel its running reconciles, before its lease "
    "expires for others",
) -> None:
    """The checks every Lease-based protocol needs (leader election, shard membership):
    positive finite timings, a safety margin of `MIN_SAFETY_MARGIN` at least between
    `renew_deadline` and `lease_duration` (`why` says what it protects), and room for a
    retry within the renew deadline. Raises `ValueError` naming the option."""
    for what, value in (
        ("lease_duration", lease_duration),
        ("renew_deadline", renew_deadline),
        ("retry_period", retry_period),
    ):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{what} must be a positive number of seconds, not {value!r}")
    if not lease_duration - renew_deadline >= MIN_SAFETY_MARGIN:
        raise ValueError(
            f"lease_duration ({lease_duration}) must be longer than renew_deadline "
            f"({renew_deadline}) by at least {MIN_SAFETY_MARGIN} s: {why}"
        )
    if not renew_deadline > retry_period * (1 + RETRY_JITTER):
        raise ValueError(
            f"renew_deadline ({renew_deadline}) must be longer than "
            f"{1 + RETRY_JITTER} x retry_period ({retry_period}) to leave room for a retry"
        )


@dataclass(frozen=True, init=False)
class LeaderElection:
    """How a `fastctl.Manager` (or a `LeaderElector`) takes part in leader election.

    `name`/`namespace` name the Lease; `identity` names this replica in it (default:
    hostname + ``_`` + a random suffix; it must be unique among the replicas).

    Timings, in seconds, with client-go's defaults:

    - `lease_duration` (15): how long the others wait, after they last saw the lease change,
      before they take it over. Written to the Lease as whole seconds, rounded up.
    - `renew_deadline` (10): how long a leader keeps leading after its last successful
      renewal was sent. Must be shorter than `lease_duration` by `MIN_SAFETY_MARGIN` (0.5 s)
      at least: the difference is the safety margin for request latency, clock rate
      differences, and the cancellation of running reconciles.
    - `retry_period` (2): how often the leader renews and candidates retry.
    """

    name: str
    namespace: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __init__(
        self,
        name: str,
        *,
        namespace: str = "default",
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not name or not namespace:
            raise ValueError("LeaderElection needs a lease name and a namespace")
        if identity == "":
            raise ValueError("identity must not be empty: an empty holder means a free lease")
        check_lease_timings(lease_duration, renew_deadline, retry_period)
        set_ = object.__setattr__  # frozen: assign through object, once
        set_(self, "name", name)
        set_(self, "namespace", namespace)
        set_(self, "identity", identity if identity is not None else default_identity())
        set_(self, "lease_duration", float(lease_duration))
        set_(self, "renew_deadline", float(renew_deadline))
        set_(self, "retry_period", float(retry_period))

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds``: rounded *up*, so others never wait less than we
        assumed."""
        return max(1, math.ceil(self.lease_duration))


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader election fields of a Lease's ``spec`` (client-go's LeaderElectionRecord).

    An empty `holder` means nobody holds the lease (after a release)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=duration if isinstance(duration, int) else 0,
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=transitions if isinstance(transitions, int) else 0,
        )

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        return cls.from_spec(lease.get("spec"))

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def next_record(
    old: LeaseRecord | None, identity: str, lease_duration_seconds: int, now: str
) -> LeaseRecord:
    """The record `identity` writes to acquire or renew the lease at wall time `now`.

    A renewal (the old holder is us) keeps ``acquireTime`` and the transition count; taking
    the lease from anyone else (or from nobody, after a release) counts one transition."""
    if old is not None and old.holder == identity:
        return LeaseRecord(
            identity, lease_duration_seconds, old.acquire_time or now, now, old.transitions
        )
    transitions = old.transitions + 1 if old is not None else 0
    return LeaseRecord(identity, lease_duration_seconds, now, now, transitions)


def released_record(old: LeaseRecord, now: str) -> LeaseRecord:
    """The record a leader writes when it steps down on purpose: no holder, so any
    candidate may take the lease at once (client-go's ``ReleaseOnCancel`` writes the same,
    with a 1 s duration for older clients that ignore an empty holder)."""
    return LeaseRecord("", 1, now, now, old.transitions)


class Observation:
    """What a replica has seen of the lease and when, on its own monotonic clock.

    The expiry is ``observed_at + leaseDurationSeconds`` where `observed_at` is when a record
    *different from the previous one* was received. A record that was written at time w was
    received no earlier than w, and its writer sent it before w: so the expiry is never
    earlier than the writer's send time plus the lease duration, whatever the clocks say.
    """

    __slots__ = ("observed_at", "record")

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.observed_at: float = -math.inf

    def observe(self, record: LeaseRecord, now: float) -> bool:
        """Note `record`, received at `now`; True if it changed (and the clock restarted)."""
        if record == self.record:
            return False
        self.record = record
        self.observed_at = now
        return True

    def expires_at(self, fallback_duration: float) -> float:
        """When the observed holder's claim runs out (``-inf``: nobody holds the lease).

        `fallback_duration` serves a record without a valid ``leaseDurationSeconds``."""
        record = self.record
        if record is None or not record.holder:
            return -math.inf
        duration = record.lease_duration_seconds
        return self.observed_at + (duration if duration > 0 else fallback_duration)

    def held_by_other(self, identity: str, now: float, fallback_duration: float) -> bool:
        """True while someone other than `identity` holds an unexpired lease."""
        record = self.record
        return (
            record is not None
            and record.holder not in ("", identity)
            and now < self.expires_at(fallback_duration)
        )


@dataclass(slots=True)
class Tenure:
    """One uninterrupted stretch of leadership (`term` counts them from 1).

    It lasts until `deadline`: `renew_deadline` after the *send* time of the last write
    that succeeded. Using the send time (not the time the answer arrived) is what makes a
    slow request safe: the server applied the write after we sent it, so every other
    replica's expiry clock started after that too."""

    term: int
    started_at: float
    deadline: float

    def renewed(self, sent_at: float, renew_deadline: float) -> None:
        self.deadline = max(self.deadline, sent_at + renew_deadline)

    def valid(self, now: float) -> bool:
        return now < self.deadline
