"""The graceful drain of a Manager's controllers, cut short when it must be, and said aloud.

Running reconciles get `timeout` seconds to finish. Two things end the wait early: the end
of leadership (a lost lease, a failed elector), after which the leader-elected controllers
must not write once more and are cancelled at once while the sharded ones (whose safety
rests on their member's tenure, not on the leader Lease) drain on; and an abort (a second
SIGTERM/SIGINT), which cancels everything still running.

A drain is the one moment an operator's logs are read closely (why did the pod take 30 s to
stop? what did it leave half done?), so it says what it waits for: when it starts, each
controller with the objects it is reconciling; each controller that has drained; and, when
the timeout passes or something cuts it short, which controllers are cancelled and the
objects whose reconciles die with them (`describe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from fastctl.runtime.manager._roles import Task

__all__ = ["cancel", "describe", "drain"]

log = logging.getLogger("fastctl.manager")

SHOWN_KEYS = 10
"""Objects named per controller in a drain's log lines (the rest are counted): a
controller may run hundreds of reconciles at once, and a log line must stay readable."""

Describe = Callable[[asyncio.Task[None]], str]


def describe(task: Task) -> str:
    """A controller task as a drain names it: ``widgets (reconciling 2: shop/a, shop/b)``,
    or ``widgets (no reconcile running)``."""
    if task.controller is None:
        return task.name
    keys = task.controller.running_keys()
    if not keys:
        return f"{task.name} (no reconcile running)"
    shown = ", ".join(keys[:SHOWN_KEYS])
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return f"{task.name} (reconciling {len(keys)}: {shown}{more})"


def _all(tasks: Iterable[asyncio.Task[None]], what: Describe) -> str:
    return "; ".join(sorted(what(task) for task in tasks))


async def drain(
    controllers: set[asyncio.Task[None]],
    *,
    leadership: set[asyncio.Task[None]],
    elected: set[asyncio.Task[None]],
    timeout: float,
    abort: asyncio.Event,
    what: Describe = lambda task: task.get_name(),
) -> bool:
    """Wait for `controllers` to end (see the module docstring), naming each one by
    `what`. True if leadership ended during the drain."""
    pending = set(controllers)
    lost = False
    log.info(
        "draining %d controller(s) for up to %.0f s: %s", len(pending), timeout, _all(pending, what)
    )
    aborted = asyncio.ensure_future(abort.wait())
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while pending:
                    if aborted.done():
                        log.warning(
                            "aborted: cancelling %d controller(s) at once: %s",
                            len(pending),
                            _all(pending, what),
                        )
                        await cancel(pending)
                        return lost
                    if any(task.done() for task in leadership):
                        cut = pending & elected
                        log.warning(
                            "leadership ended during the drain: cancelling %d leader-elected "
                            "controller(s) at once: %s",
                            len(cut),
                            _all(cut, what) or "none",
                        )
                        await cancel(cut)
                        pending -= cut
                        leadership, lost = set(), True
                        continue
                    done, _ = await asyncio.wait(
                        pending | leadership | {aborted}, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in done & pending:
                        log.info("drained %s", task.get_name())
                    pending -= done
                return lost
        log.warning(
            "drain timeout (%.0f s) passed: cancelling %d controller(s): %s",
            timeout,
            len(pending),
            _all(pending, what),
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
