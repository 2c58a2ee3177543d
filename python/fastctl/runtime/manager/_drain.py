"""The graceful drain of a Manager's controllers, cut short when it must be.

Running reconciles get `timeout` seconds to finish. Two things end the wait early: the end
of leadership (a lost lease, a failed elector), after which the leader-elected controllers
must not write once more and are cancelled at once while the sharded ones (whose safety
rests on their member's tenure, not on the leader Lease) drain on; and an abort (a second
SIGTERM/SIGINT), which cancels everything still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

__all__ = ["cancel", "drain"]

log = logging.getLogger("fastctl.manager")


async def drain(
    controllers: set[asyncio.Task[None]],
    *,
    leadership: set[asyncio.Task[None]],
    elected: set[asyncio.Task[None]],
    timeout: float,
    abort: asyncio.Event,
) -> bool:
    """Wait for `controllers` to end (see the module docstring). True if leadership ended
    during the drain."""
    pending = set(controllers)
    lost = False
    aborted = asyncio.ensure_future(abort.wait())
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while pending:
                    if aborted.done():
                        log.warning("aborted: cancelling %d controller(s) at once", len(pending))
                        await cancel(pending)
                        return lost
                    if any(task.done() for task in leadership):
                        cut = pending & elected
                        log.warning(
                            "leadership ended during the drain: cancelling %d leader-elected "
                            "controller(s) at once",
                            len(cut),
                        )
                        await cancel(cut)
                        pending -= cut
                        leadership, lost = set(), True
                        continue
                    done, _ = await asyncio.wait(
                        pending | leadership | {aborted}, return_when=asyncio.FIRST_COMPLETED
                    )
                    pending -= done
                return lost
        log.warning(
            "drain timeout (%.0f s) passed: cancelling %d controller(s)", timeout, len(pending)
        )
        return lost
    finally:
        aborted.cancel()


async def cancel(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel `tasks` (controllers: their running reconciles with them) and wait for them."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
