"""The properties every simulated run must have, checked on its `Record`.

`violations(record, schedule)` returns one line per broken property, each starting with the
property's name, so a failing test says which rule broke and how:

- ``R1``: no two reconciles of one object at once within one controller (a thread
  reconcile counts until its function returns);
- ``lost-trigger``: after the run settled, each existing object's last reconcile saw its
  final cached state and started after the watch last showed a change of its owned
  children (a change no watch event or list ever showed is one no client can see); no deleted
  object was reconciled once the deletion could be known;
- ``follow-up``: triggers during a reconcile lead to one follow-up, and no reconcile
  starts without a trigger (or a retry) since the previous one;
- ``slots``: the scheduler's in-flight count matches the reconciles really running when
  settled, and is zero after the stop;
- ``stop-bound``: a graceful stop ends within its bound, and no reconcile starts after it;
- ``leader-safety``: reconciles start, run and write only within a tenure of the lease
  (plus `LEASE_MARGIN`), and the Lease is never released while a reconcile still runs;
- ``successor-overlap``: no write while another replica holds the lease;
- ``crash``: the run ends only when stopped (or, under a Manager, on a lost lease);
- ``spin``: ``pop_many`` calls stay within a constant factor of adds and dones, and the
  loop never goes round and round at one virtual instant (`fastctl.testing.Spin`);
- ``timeout-report``: only a reconcile that ran past its timeout is reported as timed out.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from .record import Record, Run
from .world import LEASE, MAX_DURATION, THREAD_HANG, Schedule

_EPS = 1e-6

LEASE_MARGIN = 0.0
"""How long after its tenure ends a replica may still run or write: none, as the Manager
documents that a lost lease cancels the running reconciles at once. A documented margin
(say, for threads that cannot be stopped) would go here; `successor-overlap` needs none."""


def violations(record: Record, schedule: Schedule) -> list[str]:
    out: list[str] = []
    out += _r1(record)
    out += _follow_up(record)
    out += _settled(record, schedule)
    out += _stop(record, schedule)
    if schedule.manager:
        out += _leader_safety(record)
    out += _crash(record)
    out += [f"spin: {s}" for s in record.spins]
    out += [f"timeout-report: {s}" for s in record.misreported_timeouts]
    return out


def _crash(record: Record) -> list[str]:
    """A controller or Manager ends only when stopped, or (a Manager) when it lost the
    lease; never by an exception of its own."""
    if record.ended_with.startswith(("raised", "cancelled")):
        return [f"crash: the run {record.ended_with}"]
    if record.stop_asked is None and record.ended_with == "returned":
        return ["crash: the run ended by itself, unstopped"]
    return []


def _by_ctl_key(record: Record) -> dict[tuple[str, str], list[Run]]:
    runs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in record.runs:
        runs[(run.ctl, run.key)].append(run)
    return runs


def _r1(record: Record) -> list[str]:
    out = []
    for (ctl, key), runs in _by_ctl_key(record).items():
        for before, after in itertools.pairwise(runs):
            if before.end_seq is None or before.end_seq > after.start_seq:
                out.append(
                    f"R1: {ctl} ran {key} twice at once: {before.outcome} (thread="
                    f"{before.thread}) from {before.start:.2f} to {before.end}, and another "
                    f"from {after.start:.2f}"
                )
    return out


def _follow_up(record: Record) -> list[str]:
    out = []
    settled = _settled_seq(record)
    for ctl, calls in record.sched.items():
        per_key: dict[str, list[tuple[str, int, bool, float]]] = defaultdict(list)
        for c in calls:
            per_key[c.key].append((c.op, c.seq, c.retry, c.t))
        for key, seq in per_key.items():
            pops = [i for i, (op, *_) in enumerate(seq) if op == "pop"]
            for n, i in enumerate(pops):
                j = next((k for k in range(i + 1, len(seq)) if seq[k][0] == "done"), None)
                added_during = j is not None and any(op == "add" for op, *_ in seq[i + 1 : j])
                nxt = pops[n + 1] if n + 1 < len(pops) else None
                if nxt is not None:
                    retried = j is not None and j < nxt and seq[j][2]
                    added = any(op == "add" for op, *_ in seq[i + 1 : nxt])
                    if not (retried or added):
                        out.append(
                            f"follow-up: {ctl} reconciled {key} again at {seq[nxt][3]:.2f} "
                            "with no trigger or retry since the previous reconcile"
                        )
                elif (
                    added_during
                    and j is not None
                    and settled is not None
                    and record.settled_at is not None
                    and seq[j][1] < settled
                    and seq[j][3] < record.settled_at - 5.0
                    and record.settled_running
                ):
                    out.append(
                        f"follow-up: {ctl}: triggers for {key} during its reconcile at "
                        f"{seq[i][3]:.2f} got no follow-up"
                    )
    return out


def _settled_seq(record: Record) -> int | None:
    """The sequence number at which the run settled (for `_follow_up`)."""
    if record.settled_at is None:
        return None
    return max(
        [c.seq for calls in record.sched.values() for c in calls if c.t <= record.settled_at] + [0]
    )


def _settled(record: Record, schedule: Schedule) -> list[str]:
    """What must hold once the run has settled, if it was still running then."""
    if not record.settled_running:
        return []
    out = []
    runs = _by_ctl_key(record)
    ctls = sorted(record.in_flight_at_settle)
    for ctl in ctls:
        if record.in_flight_at_settle[ctl] != record.running_at_settle[ctl]:
            out.append(
                f"slots: {ctl} has {record.in_flight_at_settle[ctl]} key(s) in flight but "
                f"{record.running_at_settle[ctl]} reconcile(s) running after settling"
            )
    for key, changes in sorted(record.primary_changes.items()):
        last = changes[-1]
        for ctl in ctls:
            mine = runs.get((ctl, key), [])
            if last.deleted:
                late = [r for r in mine if r.start > record.quiet_from]
                if late:
                    out.append(
                        f"lost-trigger: {ctl} reconciled deleted {key} at {late[0].start:.2f}"
                    )
                continue
            if not mine:
                out.append(f"lost-trigger: {ctl} never reconciled {key} (rv {last.rv})")
                continue
            final = mine[-1]
            if final.rv != str(last.rv):
                out.append(
                    f"lost-trigger: {ctl}'s last reconcile of {key} (at {final.start:.2f}) saw "
                    f"rv {final.rv}, not its final rv {last.rv} (changed at {last.t:.2f})"
                )
            child = record.child_observed.get(key)
            if child and final.start_seq < child[-1].seq:
                out.append(
                    f"lost-trigger: {ctl}'s last reconcile of {key} (at {final.start:.2f}) "
                    f"started before the watch last showed a change of its child (at "
                    f"{child[-1].t:.2f}, {'deleted' if child[-1].deleted else 'put'})"
                )
    return out


def _stop(record: Record, schedule: Schedule) -> list[str]:
    out: list[str] = []
    asked = record.stop_asked
    if asked is None:
        return out
    if schedule.manager:
        bound = schedule.drain_timeout + LEASE.renew_deadline
    else:
        bound = max(MAX_DURATION, THREAD_HANG) if schedule.threads else schedule.timeout
    if record.ended_with == "stop hung" or record.stopped is None:
        out.append(f"stop-bound: the stop asked at {asked:.2f} had not ended {bound + 1} s later")
    elif record.stopped > asked + bound + _EPS and record.ended_with == "returned":
        out.append(f"stop-bound: stop asked at {asked:.2f} ended at {record.stopped:.2f}")
    late = [r for r in record.runs if r.start > asked + _EPS]
    if late:
        out.append(f"stop-bound: {late[0].ctl} started {late[0].key} at {late[0].start:.2f}")
    for ctl, n in sorted(record.in_flight_at_end.items()):
        if n and record.stopped is not None:
            out.append(f"slots: {ctl} still has {n} key(s) in flight after it stopped")
    return out


def _leader_safety(record: Record) -> list[str]:
    out = []
    tenures = record.tenures

    def tenure_of(t: float) -> list[float] | None:
        return next((tn for tn in tenures if tn[0] - _EPS <= t <= tn[1] + _EPS), None)

    for run in record.runs:
        tenure = tenure_of(run.start)
        if tenure is None:
            out.append(f"leader-safety: {run.ctl} started {run.key} at {run.start:.2f} unled")
            continue
        end = run.end if run.end is not None else float("inf")
        if end > tenure[1] + LEASE_MARGIN + _EPS:
            out.append(
                f"leader-safety: {run.ctl}'s reconcile of {run.key} ({run.outcome}, thread="
                f"{run.thread}) ran until {end:.2f}, after the lease was lost at {tenure[1]:.2f}"
            )
    for t, ctl, key in record.writes:
        if tenure_of(t) is None and tenure_of(t - LEASE_MARGIN) is None:
            out.append(f"leader-safety: {ctl} wrote {key} at {t:.2f}, not leading")
        for start, end in record.rival_terms:
            if start - _EPS <= t <= end + _EPS:
                out.append(
                    f"successor-overlap: {ctl} wrote {key} at {t:.2f} while another replica "
                    f"led (from {start:.2f})"
                )
    for released in record.released_at:
        for run in record.runs:
            end = run.end if run.end is not None else float("inf")
            if run.start < released - _EPS and end > released + _EPS:
                out.append(
                    f"leader-safety: the Lease was released at {released:.2f} while "
                    f"{run.ctl}'s reconcile of {run.key} ran (until {end:.2f})"
                )
    return out
