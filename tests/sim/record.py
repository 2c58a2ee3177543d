"""The record of one simulated run: what ran when, on the virtual clock.

Everything the invariants need is written here as it happens: object changes (from the API
server), what the watches were shown of them (a watch event, or a completed list that
differs from what was shown before), scheduler calls (adds, pops and dones, from the
scheduler wrapper), reconciles (start, end, the resourceVersion each saw, its writes), the
leader's tenures and the Lease's release, and when a stop was asked for and when it ended.
A global sequence number orders events that share a virtual instant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Run:
    """One reconcile: of `key` by controller `ctl`, as it really ran (a thread reconcile
    ends when its function returns, whatever the applier did meanwhile)."""

    ctl: str
    key: str
    rv: str
    outcome: str
    thread: bool
    start: float
    start_seq: int
    end: float | None = None
    end_seq: int | None = None


@dataclass(slots=True)
class Change:
    t: float
    seq: int
    rv: int
    deleted: bool
    ours: bool = False
    """Written by a controller (a reconcile's own write), not by another writer."""
    how: str = ""
    """For a related object's change as shown to a primary: ``gained``, ``lost`` or
    ``changed`` (the primary kept it)."""


@dataclass(slots=True)
class SchedCall:
    """A scheduler call: ``add``, ``pop``, or ``done`` (with what it asked for)."""

    op: str
    key: str
    seq: int
    t: float
    retry: bool = False  # done with failed=True or requeue_after


@dataclass
class Record:
    seq: int = 0
    runs: list[Run] = field(default_factory=list)
    primary_changes: dict[str, list[Change]] = field(default_factory=lambda: defaultdict(list))
    """Per primary object (``namespace/name``): its changes, in order."""
    child_changes: dict[str, list[Change]] = field(default_factory=lambda: defaultdict(list))
    """Per primary object: the changes of the related objects that map to it."""
    child_observed: dict[str, list[Change]] = field(default_factory=lambda: defaultdict(list))
    """Per primary object: the changes of its related objects (owned children, pointers at
    it) *as the watch delivered them* (a watch event, or a completed list that differs from
    what the watch had delivered before), including a related object that moved to or away
    from it."""
    sched: dict[str, list[SchedCall]] = field(default_factory=lambda: defaultdict(list))
    pop_many_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    spins: list[str] = field(default_factory=list)
    writes: list[tuple[float, str, str]] = field(default_factory=list)
    tenures: list[list[float]] = field(default_factory=list)
    rival_terms: list[tuple[float, float]] = field(default_factory=list)
    released_at: list[float] = field(default_factory=list)
    misreported_timeouts: list[str] = field(default_factory=list)
    stop_asked: float | None = None
    stopped: float | None = None
    ended_with: str = ""
    settled_at: float | None = None
    quiet_from: float = 0.0
    settled_running: bool = False
    in_flight_at_settle: dict[str, int] = field(default_factory=dict)
    running_at_settle: dict[str, int] = field(default_factory=dict)
    in_flight_at_end: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    clock: Callable[[], float] = field(default=lambda: 0.0)
    """The virtual clock (read from the loop and from simulated threads alike)."""

    @property
    def now(self) -> float:
        return self.clock()

    def change(
        self,
        plural: str,
        key: str,
        targets: tuple[str, ...],
        rv: int,
        *,
        deleted: bool,
        ours: bool = False,
    ) -> None:
        """The server changed `key` (``namespace/name``); a related object's `targets` are
        the primary objects it maps to; `ours`: a controller's write."""
        c = Change(self.now, self._next(), rv, deleted, ours)
        if plural == "widgets":
            self.primary_changes[key].append(c)
        else:
            for target in targets:
                self.child_changes[target].append(c)
        who = " (ours)" if ours else ""
        self.log.append(f"{c.t:.2f} {'delete' if deleted else 'put'} {plural}/{key} rv={rv}{who}")

    def delivered(
        self,
        plural: str,
        key: str,
        before: tuple[str, ...],
        after: tuple[str, ...],
        rv: int | None,
    ) -> None:
        """The watch of `plural` now shows `key` at `rv` (``None``: gone), mapping to the
        primaries `after` where it mapped to `before`."""
        seq, now = self._next(), self.now
        if plural != "widgets":
            for target in dict.fromkeys((*before, *after)):
                how = "changed" if target in before and target in after else "gained"
                if target not in after:
                    how = "lost"
                self.child_observed[target].append(Change(now, seq, rv or 0, rv is None, how=how))
        self.log.append(f"{now:.2f} delivered {plural}/{key} {'gone' if rv is None else rv}")

    def sched_call(self, ctl: str, op: str, key: str, *, retry: bool = False) -> None:
        self.sched[ctl].append(SchedCall(op, key, self._next(), self.now, retry))

    def start(self, ctl: str, key: str, rv: str, outcome: str, *, thread: bool) -> Run:
        run = Run(ctl, key, rv, outcome, thread, self.now, self._next())
        self.runs.append(run)
        self.log.append(f"{run.start:.2f} start {ctl} {key} rv={rv} {outcome}")
        return run

    def end(self, run: Run) -> None:
        run.end, run.end_seq = self.now, self._next()
        self.log.append(f"{run.end:.2f} end {run.ctl} {run.key} {run.outcome}")

    def write(self, ctl: str, key: str) -> None:
        self.writes.append((self.now, ctl, key))

    def tenure_start(self, at: float) -> None:
        self.tenures.append([at, float("inf")])
        self.log.append(f"{at:.2f} leading")

    def tenure_end(self, at: float) -> None:
        if self.tenures and self.tenures[-1][1] == float("inf"):
            self.tenures[-1][1] = at
            self.log.append(f"{at:.2f} not leading")

    def lease_released(self, at: float) -> None:
        self.released_at.append(at)
        self.log.append(f"{at:.2f} lease released")

    def rival_leads(self, start: float, end: float) -> None:
        self.rival_terms.append((start, end))
        self.log.append(f"{start:.2f} rival leads")
