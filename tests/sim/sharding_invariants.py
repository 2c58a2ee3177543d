"""The properties every sharded run must have, checked on its `ShardRecord`.

One line per broken property, each starting with the property's name:

- ``shard-overlap``: never two members reconciling one object at the same virtual time (the
  rule sharding exists to keep; a reconcile counts from its start to its end, whatever
  ended it);
- ``R1``: within one member, never two reconciles of one object at once;
- ``shard-coverage``: once the faults are over and the run has settled, every slot is
  served by exactly one live member;
- ``shard-lost``: once settled, every existing object's last version has been reconciled
  (by whichever member: the slot may have moved meanwhile);
- ``crash``: a Manager ends only when stopped, by returning;
- ``stop-bound``: a stopped Manager ends within its bound, and no reconcile outlives the
  run;
- ``spin``: as in `invariants`.
"""

from __future__ import annotations

from collections import defaultdict

from .invariants import _r1
from .record import Run
from .sharding_world import ShardRecord, ShardSchedule


def violations(record: ShardRecord, schedule: ShardSchedule) -> list[str]:
    out: list[str] = []
    out += _overlap(record)
    out += _r1(record)
    out += _settled(record, schedule)
    out += _ends(record)
    out += [f"spin: {s}" for s in record.spins]
    return out


def _overlap(record: ShardRecord) -> list[str]:
    by_key: dict[str, list[Run]] = defaultdict(list)
    for run in record.runs:
        by_key[run.key].append(run)
    out = []
    for key, runs in sorted(by_key.items()):
        for i, a in enumerate(runs):
            a_end = a.end_seq if a.end_seq is not None else float("inf")
            for b in runs[i + 1 :]:
                if b.ctl == a.ctl or b.start_seq > a_end:
                    continue
                out.append(
                    f"shard-overlap: {a.ctl} and {b.ctl} both reconciled {key}: {a.ctl} from "
                    f"{a.start:.2f} to {a.end}, {b.ctl} from {b.start:.2f} to {b.end}"
                )
    return out


def _settled(record: ShardRecord, schedule: ShardSchedule) -> list[str]:
    live = record.live_at_settle
    if not live:
        return []
    out = []
    holders: dict[int, list[str]] = defaultdict(list)
    for name in live:
        for slot in record.serving_at_settle[name]:
            holders[slot].append(name)
    for slot in range(schedule.slots):
        if len(holders[slot]) != 1:
            who = ", ".join(holders[slot]) or "no member"
            out.append(
                f"shard-coverage: slot {slot} is served by {who} after settling "
                f"(live: {', '.join(live)})"
            )
    seen: dict[str, set[str]] = defaultdict(set)
    for run in record.runs:
        seen[run.key].add(run.rv)
    for key, changes in sorted(record.primary_changes.items()):
        last = changes[-1]
        if not last.deleted and str(last.rv) not in seen[key]:
            out.append(
                f"shard-lost: no member reconciled {key} at its last version (rv {last.rv}, "
                f"changed at {last.t:.2f})"
            )
    return out


def _ends(record: ShardRecord) -> list[str]:
    out = []
    for name in record.members:
        how = record.ended_how.get(name, "running")
        asked = record.stop_asked_of.get(name)
        if how == "stop hung":
            out.append(f"stop-bound: {name}'s Manager had not ended after its stop")
        elif how != "returned":
            out.append(f"crash: {name}'s Manager {how}")
        elif asked is None or record.stopped_at[name] < asked:
            out.append(f"crash: {name}'s Manager ended by itself, unstopped")
    for run in record.runs:
        if run.end is None:
            out.append(f"stop-bound: {run.ctl}'s reconcile of {run.key} never ended")
    return out
