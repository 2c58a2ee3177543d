"""`LeaderElector.wait_lost` and `release(timeout=...)` on a virtual clock (docs/
leader-election.md, "Using it"): exact bounds, no slack. The Lease is the in-memory one;
`cut()` makes every request hang, as a partition does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from fastctl.runtime.leader import _elector
from fastctl.runtime.leader._rules import LeaseRecord
from fastctl.testing import VirtualTimeLoop, run_virtual

from .fake_lease import LeaseStore
from .test_leader import _fake_elector, _FakeLeases

RENEW_DEADLINE = 0.3
VIRTUAL_LIMIT = 60.0
"""Virtual seconds a test of the elector may last. The longest needs a few; a broken
elector that never leads would otherwise make the loop jump its clock forever (mutation
testing meets many such)."""
T = TypeVar("T")


def run_bounded(main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, T]]) -> T:
    """`run_virtual`, failing with `TimeoutError` after `VIRTUAL_LIMIT` virtual seconds."""

    async def bounded() -> T:
        loop = VirtualTimeLoop.current()
        async with asyncio.timeout(VIRTUAL_LIMIT):
            return await main(loop)

    return run_virtual(bounded())


def _leases(elector: _elector.LeaderElector) -> _FakeLeases:
    leases = elector._leases
    assert isinstance(leases, _FakeLeases)
    return leases


def test_wait_lost_returns_at_the_deadline_and_at_once_for_a_term_already_over() -> None:
    """Cut off, the leader's term ends `renew_deadline` after its last successful send;
    `wait_lost` of that term returns then, and at once when a later term has begun (a
    level-triggered wait would block there)."""
    store = LeaseStore()
    a = _fake_elector(store, "a", renew_deadline=RENEW_DEADLINE)

    async def main(loop: VirtualTimeLoop) -> None:
        run = asyncio.create_task(a.run())
        first = await a.wait_leading()
        await asyncio.sleep(1.0)  # renewing
        sent = a.leading_until
        assert sent is not None
        _leases(a).cut()
        await a.wait_lost(first)
        assert loop.time() == pytest.approx(sent)  # the deadline set by the last send
        assert loop.time() <= sent  # never later: no slack
        _leases(a).reachable.set()
        second = await a.wait_leading()
        assert second == first + 1
        now = loop.time()
        await asyncio.wait_for(a.wait_lost(first), 1.0)  # over: at once, the clock stands
        assert loop.time() == now
        waiting = asyncio.create_task(a.wait_lost(second))
        await asyncio.sleep(1.0)
        assert not waiting.done()  # the current term goes on while it renews
        run.cancel()
        now = loop.time()
        await waiting  # cancelling run() ends the term at once
        assert loop.time() == now
        await asyncio.gather(run, return_exceptions=True)

    run_bounded(main)


@pytest.mark.parametrize("timeout", [None, 0.1, 2.0])
def test_release_that_the_server_never_answers_gives_up_after_its_timeout(
    timeout: float | None,
) -> None:
    """Leadership ends before the release is written; an unanswered release returns False
    after exactly `timeout` (default `renew_deadline`), and the Lease still names the
    leader, so a successor waits for it to expire."""
    store = LeaseStore()
    a = _fake_elector(store, "a", renew_deadline=RENEW_DEADLINE)

    async def main(loop: VirtualTimeLoop) -> None:
        run = asyncio.create_task(a.run())
        await a.wait_leading()
        await asyncio.sleep(0.5)
        _leases(a).cut()
        asked = loop.time()
        release = asyncio.create_task(a.release(timeout=timeout))
        await asyncio.sleep(0)
        assert not a.is_leader  # before anything is written
        assert await release is False
        assert loop.time() - asked == pytest.approx(RENEW_DEADLINE if timeout is None else timeout)
        lease = store.get()
        assert lease is not None
        assert LeaseRecord.from_lease(lease).holder == "a"
        await asyncio.wait_for(run, 0.01)  # run() ends after a release, answered or not

    run_bounded(main)
