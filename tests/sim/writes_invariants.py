"""The properties of a run of `writes_world`, checked on its `WritesRecord`.

One line per broken property, each starting with the property's name:

- ``held-back``: no change made by another writer is ever held back: each is followed by a
  reconcile that sees it (a reconcile of that object whose cached state was that version
  or a later one). Only the controller's own writes may go unreconciled, and that is what
  ``ignore_own_writes`` is for;
- ``related``: once settled, every existing widget whose related objects changed as its
  watch showed them (a child or pointer gained, lost or changed, also by a relist after a
  410) had its last reconcile start after the last such change;
- ``R1``, ``follow-up``, ``slots``, ``crash``, ``spin``: as in `invariants`.
"""

from __future__ import annotations

from collections import defaultdict

from .invariants import _crash, _follow_up, _r1
from .writes_world import CTL, WritesRecord, WritesSchedule


def violations(record: WritesRecord, schedule: WritesSchedule) -> list[str]:
    out: list[str] = []
    out += _r1(record)
    out += _follow_up(record)
    out += _held_back(record)
    out += _related(record)
    out += _slots(record)
    out += _crash(record)
    out += [f"spin: {s}" for s in record.spins]
    return out


def _held_back(record: WritesRecord) -> list[str]:
    if not record.settled_running:
        return []
    seen: dict[str, int] = defaultdict(int)  # the newest version a reconcile saw, per key
    for run in record.runs:
        seen[run.key] = max(seen[run.key], int(run.rv))
    out = []
    for key, changes in sorted(record.primary_changes.items()):
        if changes[-1].deleted:
            continue  # gone: nothing left to reconcile
        others = [c for c in changes if not c.ours and not c.deleted]
        if others and seen[key] < others[-1].rv:
            last = others[-1]
            out.append(
                f"held-back: another writer changed {key} at {last.t:.2f} (rv {last.rv}) and "
                f"no reconcile saw it (the newest version reconciled: rv {seen[key] or None})"
            )
    return out


def _related(record: WritesRecord) -> list[str]:
    if not record.settled_running:
        return []
    last_start: dict[str, int] = {}
    for run in record.runs:
        last_start[run.key] = max(last_start.get(run.key, 0), run.start_seq)
    out = []
    for key, shown in sorted(record.child_observed.items()):
        changes = record.primary_changes.get(key)
        if not changes or changes[-1].deleted:
            continue  # the widget does not exist (any more)
        last = shown[-1]
        if last_start.get(key, 0) < last.seq:
            out.append(
                f"related: {key} {last.how} a related object at {last.t:.2f} (as its watch "
                f"showed it) and was not reconciled after that"
            )
    return out


def _slots(record: WritesRecord) -> list[str]:
    out = []
    if record.settled_running and record.in_flight_at_settle[CTL] != record.running_at_settle[CTL]:
        out.append(
            f"slots: {record.in_flight_at_settle[CTL]} key(s) in flight but "
            f"{record.running_at_settle[CTL]} reconcile(s) running after settling"
        )
    if record.in_flight_at_end.get(CTL):
        out.append(f"slots: {record.in_flight_at_end[CTL]} key(s) in flight after the stop")
    return out
