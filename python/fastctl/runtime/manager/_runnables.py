"""The components a Manager runs beside its controllers (`Manager.add_runnable`): which
start at once and which wait for leadership, and the order they stop in.

A runnable is anything with ``async start()`` and ``async stop()``. One that says
``need_leader_election()`` is true (controller-runtime's ``LeaderElectionRunnable``) does
work only one replica may do: in a Manager that campaigns for the leader Lease it is started
once this replica leads, and stopped with everything else when the Lease is lost (the
process then exits, as for the controllers). Without leader election every runnable starts
at once. The others (a webhook server, say) run on every replica, leader or not, from
before the controllers start until after they stop.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Runnable", "Started", "needs_leader"]


class Runnable(Protocol):
    """A component the Manager starts before its controllers and stops after them. One
    that also has ``is_ready()`` (a bool, or ``(bool, reason)``) holds ``/readyz`` until it
    says so: a webhook server that does not serve yet makes the replica not ready."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


def needs_leader(runnable: Runnable) -> bool:
    """Whether `runnable` says it may run on the leader only."""
    check = getattr(runnable, "need_leader_election", None)
    return bool(check()) if callable(check) else False


class Started:
    """The runnables started so far, stopped in the reverse order."""

    def __init__(self) -> None:
        self.runnables: list[Runnable] = []

    async def start(self, *runnables: Runnable) -> None:
        for runnable in runnables:
            await runnable.start()
            self.runnables.append(runnable)

    async def stop(self) -> None:
        while self.runnables:
            await self.runnables.pop().stop()
