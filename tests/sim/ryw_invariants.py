"""The properties of a run of `ryw_world`, checked on its `RywRecord`.

One line per broken property, each starting with the property's name:

- ``stale-start``: no reconcile of a widget starts on caches older than what the previous
  reconcile of that widget wrote, unless the bound (`RywSchedule.max_wait` after that
  reconcile ended) had passed: its status write shows in the widget it is given (that
  version or a later one); a child it created is cached (at that version or later; or
  absent because it was deleted on the server since, which a cache may show); a child it
  deleted is not cached. The simulated server's resourceVersions are one counter, so the
  check compares them as numbers (fastctl itself never does);
- ``R1``, ``follow-up``, ``slots``, ``crash``, ``spin``: as in `invariants`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from .invariants import _crash, _follow_up, _r1
from .record import Run
from .ryw_world import CTL, RywRecord, RywSchedule, View, Write

EPSILON = 1e-6


def violations(record: RywRecord, schedule: RywSchedule) -> list[str]:
    out: list[str] = []
    out += _r1(record)
    out += _follow_up(record)
    out += _stale_start(record, schedule)
    out += _slots(record)
    out += _crash(record)
    out += [f"spin: {s}" for s in record.spins]
    return out


def _stale_start(record: RywRecord, schedule: RywSchedule) -> list[str]:
    runs: dict[str, list[tuple[int, Run]]] = defaultdict(list)
    for i, run in enumerate(record.runs):
        if run.ctl == CTL:
            runs[run.key].append((i, run))
    out = []
    for key, seq in sorted(runs.items()):
        for (pi, before), (ri, after) in itertools.pairwise(seq):
            if before.end is None or after.start >= before.end + schedule.max_wait - EPSILON:
                continue  # the bound had passed: the reconcile may start on what is there
            view = record.views[ri]
            for w in record.wrote.get(pi, ()):
                stale = _stale(w, view, record.deleted_at, after.start)
                if stale:
                    out.append(
                        f"stale-start: {key} started at {after.start:.2f} on a cache where "
                        f"{stale} ({w.kind} of {w.plural}/{w.name} at rv {w.rv} by the "
                        f"reconcile that ended at {before.end:.2f})"
                    )
    return out


def _stale(w: Write, view: View, deleted_at: dict[str, float], start: float) -> str:
    """What the cache view lacks of write `w` ("": nothing)."""
    if w.plural == "widgets":
        return "" if view.widget >= w.rv else f"the widget is at rv {view.widget}"
    cached = view.children.get(w.name)
    if w.kind == "delete":
        return "" if cached is None else f"the deleted child is still there (rv {cached})"
    if cached is None:
        gone = deleted_at.get(w.name)
        return "" if gone is not None and gone <= start else "the created child is missing"
    return "" if cached >= w.rv else f"the child is at rv {cached}"


def _slots(record: RywRecord) -> list[str]:
    out = []
    if record.settled_running and record.in_flight_at_settle[CTL] != record.running_at_settle[CTL]:
        out.append(
            f"slots: {record.in_flight_at_settle[CTL]} key(s) in flight but "
            f"{record.running_at_settle[CTL]} reconcile(s) running after settling"
        )
    if record.in_flight_at_end.get(CTL):
        out.append(f"slots: {record.in_flight_at_end[CTL]} key(s) in flight after the stop")
    return out
