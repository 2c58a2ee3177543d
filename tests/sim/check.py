"""Run one schedule and fail with the broken properties and the run's log."""

from __future__ import annotations

from .invariants import violations
from .record import Record
from .world import Schedule, simulate


def check(schedule: Schedule) -> Record:
    record = simulate(schedule)
    broken = violations(record, schedule)
    if broken:
        log = "\n".join(record.log[-60:])
        raise AssertionError(
            "\n".join(broken) + f"\n-- ended: {record.ended_with}\n-- last events:\n{log}"
        )
    return record
