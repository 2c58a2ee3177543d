"""What `Controller.inspect` and `Controller.queue_summary` answer: "why is my object not
being reconciled?" (docs/inspect.md).

An answer joins three sources: the scheduler's record of the key (`Scheduler.inspect`: its
state, priority, failures, ready time and place in line), the controller's `ReasonLog`
(which triggers its pending run merged, what the running one was for, the last error), and
the cache (whether the controller knows the object at all). It names objects and says why;
it never carries an object's contents. Times are given twice: as seconds relative to the
answer (``ready_in``, ``age``) and as UTC wall-clock instants (``ready_at``, ``since``),
converted from the scheduler's monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from fastctl._clock import monotonic
from fastctl._reasons import KeyReasons, Reason
from fastctl.types import ObjectRef

if TYPE_CHECKING:
    from fastctl._core import KeyInspection
    from fastctl._core import QueueSummary as CoreSummary

__all__ = ["ObjectInspection", "QueueSummary", "ReasonCount", "inspect_key", "summarize"]

State = Literal["not_known", "idle", "waiting", "ready", "in_flight", "in_flight_dirty"]


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """A kind of trigger merged into a run: how many times, and how long ago (seconds) it
    was first and last seen."""

    reason: str
    count: int
    first_ago: float
    last_ago: float


@dataclass(frozen=True, slots=True)
class ObjectInspection:
    """One object's place in a controller's queue (see docs/inspect.md for each field)."""

    controller: str
    namespace: str | None
    name: str
    state: State
    """``not_known`` (neither cached nor queued), ``idle`` (cached, nothing queued),
    ``waiting``, ``ready``, ``in_flight``, or ``in_flight_dirty`` (runs again after)."""
    message: str
    """One line that answers the question."""
    cached: bool
    """Whether the object is in the controller's cache."""
    priority: int | None = None
    attempts: int = 0
    """Consecutive failed reconciles (reset by a success)."""
    backoff: float | None = None
    """The latest failure's backoff before jitter, in seconds."""
    ready_in: float | None = None
    """Seconds until it is ready (waiting; in flight and dirty: its follow-up)."""
    ready_at: str | None = None
    age: float | None = None
    """Seconds it has been ready, or running."""
    since: str | None = None
    ahead: int | None = None
    """Ready: ready objects served before it (at its priority plus at higher ones); None
    when held."""
    ahead_at_priority: int | None = None
    """Ready: ready objects of its priority served before it, the fair groups' turns
    included; None when held."""
    ahead_in_group: int | None = None
    """Ready: ready objects of its fair group and priority served before it."""
    reasons: tuple[ReasonCount, ...] = ()
    """Why its next run is queued."""
    running_reasons: tuple[ReasonCount, ...] = ()
    """What the run in flight was triggered by."""
    dropped_reasons: int = 0
    """Reasons past the per-key bound, dropped from `reasons`."""
    last_error: str | None = None
    """The latest failed run's exception, ``Type: message`` (truncated)."""
    last_error_ago: float | None = None
    group: str | None = None
    """Its fair group (the controller's ``fair_by``), in any state; None without one."""
    held: bool = False
    """Ready, but its fair group has its cap of reconciles running (``group_concurrency``):
    it is not in line until one of them ends (so it has no ``ahead``)."""
    group_concurrency: int | None = None
    """Its fair group's cap on reconciles running at once; None: no group, or no cap."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """A controller's queue at a glance."""

    controller: str
    ready: int
    waiting: int
    in_flight: int
    dirty: int
    concurrency: int
    ready_by_priority: dict[int, int]
    in_flight_by_priority: dict[int, int]
    oldest_ready: dict[str, Any] | None
    """``namespace``, ``name``, ``priority`` and ``age`` of the ready key waiting longest."""
    next_ready_in: float | None
    """Seconds until the next waiting key is ready."""
    cached: int
    """Objects in the controller's cache."""
    by_group: dict[str, Any] | None = None
    """Each named fair group with keys: ``keys`` (any state), ``ready``, ``in_flight``,
    ``weight``, ``group_concurrency`` (its cap, 0: none) and ``held`` (it has its cap in
    flight), by group name (empty without fair groups)."""
    group_concurrency: int = 0
    """The most reconciles of one fair group at once, for groups without their own cap (0:
    no cap)."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        # JSON object keys are strings.
        out["ready_by_priority"] = {str(p): n for p, n in self.ready_by_priority.items()}
        out["in_flight_by_priority"] = {str(p): n for p, n in self.in_flight_by_priority.items()}
        return out


class _Clocks:
    """The runtime's clock and the wall clock read once, to convert one into the other
    (the scheduler's and the reason log's times are on the runtime's clock)."""

    __slots__ = ("mono", "wall")

    def __init__(self) -> None:
        self.mono = monotonic()
        self.wall = time.time()  # wall clock: the answer gives UTC instants

    def ago(self, t: float) -> float:
        return round(self.mono - t, 3)

    def until(self, t: float) -> float:
        return round(t - self.mono, 3)

    def iso(self, t: float) -> str:
        instant = datetime.fromtimestamp(self.wall + (t - self.mono), UTC)
        return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _counts(reasons: dict[str, Reason] | None, clocks: _Clocks) -> tuple[ReasonCount, ...]:
    if not reasons:
        return ()
    # Most recently seen first.
    return tuple(
        ReasonCount(r.reason, r.count, clocks.ago(r.first), clocks.ago(r.last))
        for r in reversed(reasons.values())
    )


def _seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 120 else f"{s / 60:.1f}min"


def inspect_key(
    controller: str,
    ref: ObjectRef,
    record: KeyInspection | None,
    reasons: KeyReasons | None,
    cached: bool,
    *,
    in_flight: int = 0,
    concurrency: int = 0,
) -> ObjectInspection:
    """Join the scheduler's `record` of `ref`, its `reasons` and whether it is `cached`
    (`in_flight` and `concurrency` are for the message)."""
    clocks = _Clocks()
    base: dict[str, Any] = {
        "controller": controller,
        "namespace": ref.namespace,
        "name": ref.name,
        "cached": cached,
    }
    if record is None:
        if cached:
            return ObjectInspection(
                **base,
                state="idle",
                message="idle: in the cache and nothing queued; it runs on its next change",
            )
        return ObjectInspection(
            **base,
            state="not_known",
            message="not known to this controller: not in its cache and not queued",
        )
    r = reasons
    state: State = record["state"]
    info: dict[str, Any] = {
        "priority": record["priority"],
        "attempts": record["failures"],
        "backoff": record["backoff"],
        "reasons": _counts(r.pending if r else None, clocks),
        "running_reasons": _counts(r.running if r else None, clocks),
        "dropped_reasons": r.dropped if r else 0,
        "last_error": r.error if r else None,
        "last_error_ago": clocks.ago(r.error_at) if r and r.error_at is not None else None,
        "group": record["group"],
        "group_concurrency": record.get("group_concurrency"),
    }
    ready_at, since = record["ready_at"], record["since"]
    if ready_at is not None:
        info["ready_in"] = max(0.0, clocks.until(ready_at))
        info["ready_at"] = clocks.iso(ready_at)
    if since is not None:
        info["age"] = max(0.0, clocks.ago(since))
        info["since"] = clocks.iso(since)
    if state == "ready" and record.get("held"):
        # Not in line at all until its group is released: no position but its group's.
        info["held"] = True
        info["ahead_in_group"] = record["ahead_in_group"]
    elif state == "ready":
        at_priority, higher = record["ahead_at_priority"] or 0, record["ahead_higher"] or 0
        info["ahead"] = at_priority + higher
        info["ahead_at_priority"] = at_priority
        info["ahead_in_group"] = record["ahead_in_group"]
    message = _message(state, info, in_flight, concurrency)
    return ObjectInspection(**base, state=state, message=message, **info)


def _message(state: State, info: Mapping[str, Any], in_flight: int, concurrency: int) -> str:
    attempts = info["attempts"]
    failed = ""
    if attempts:
        failed = f" (failed {attempts} time{'s' if attempts != 1 else ''}"
        if info["last_error"]:
            failed += f": {info['last_error']}"
        failed += ")"
    if state == "waiting":
        return f"waiting: ready in {_seconds(info['ready_in'])}{failed}"
    if state == "ready" and info.get("held"):
        cap = info["group_concurrency"]
        return (
            f"held: its group {info['group']} has {cap} of {cap} reconciles running "
            f"(group_concurrency); ready for {_seconds(info['age'])}, it runs after one of "
            f"them ends ({info['ahead_in_group']} of its group ahead of it){failed}"
        )
    if state == "ready":
        slots = f"{in_flight} of {concurrency} slots busy" if concurrency else "no slot limit"
        group = info["group"]
        in_group = "" if group is None else f", {info['ahead_in_group']} of group {group}"
        return (
            f"ready for {_seconds(info['age'])}, {info['ahead']} ready ahead of it "
            f"({info['ahead_at_priority']} at its priority {info['priority']}{in_group}); "
            f"{slots}{failed}"
        )
    running = f"running for {_seconds(info['age'])}"
    if state == "in_flight_dirty":
        return f"{running}; triggered again meanwhile, so it runs again when it ends{failed}"
    return running + failed


def summarize(
    controller: str, summary: CoreSummary, store: Mapping[ObjectRef, Any]
) -> QueueSummary:
    """A controller's `QueueSummary` from its scheduler's summary."""
    clocks = _Clocks()
    oldest = summary["oldest_ready"]
    oldest_out: dict[str, Any] | None = None
    if oldest is not None:
        ref = ObjectRef._from_trusted_key(oldest["key"])
        oldest_out = {
            "namespace": ref.namespace,
            "name": ref.name,
            "priority": oldest["priority"],
            "age": max(0.0, clocks.ago(oldest["since"])),
            "group": oldest["group"],
        }
    next_at = summary["next_ready_at"]
    return QueueSummary(
        controller=controller,
        ready=summary["ready"],
        waiting=summary["waiting"],
        in_flight=summary["in_flight"],
        dirty=summary["dirty"],
        concurrency=summary["concurrency"],
        ready_by_priority=dict(summary["ready_by_priority"]),
        in_flight_by_priority=dict(summary["in_flight_by_priority"]),
        oldest_ready=oldest_out,
        next_ready_in=None if next_at is None else max(0.0, clocks.until(next_at)),
        cached=len(store),
        by_group={g: dict(c) for g, c in summary["by_group"].items()},
        group_concurrency=summary.get("group_concurrency", 0),
    )
