"""How a Manager's tasks end, on a virtual clock with faked Leases: which ends let the
controllers drain and which cut the leader-elected ones at once, an elector failing in the
middle of the drain, a term that ends while the next one has already begun, a failure that
comes with a stop, a controller task cancelled from outside; and the drain itself, on bare
tasks, with what it returns and logs."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from fastctl._tls import ServingCertificate
from fastctl.errors import LeadershipLost
from fastctl.runtime.controller import Controller
from fastctl.runtime.controller._environment import Environment
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.manager import Manager, _manager, _servers
from fastctl.runtime.manager._drain import drain
from fastctl.testing import run_virtual

from .test_controller_relist import WIDGET, client, listing, widget
from .test_manager_lifecycle import (
    ELECTION,
    BrokenElector,
    Cluster,
    Work,
    _make,
    _messages,
    _run_to_error,
    until,
)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    return Cluster(monkeypatch)


class FailingController(Controller):
    """A controller whose run fails `after` seconds (its watch broke, say); with `manager`,
    it asks that Manager to stop in the same step as it fails."""

    def __init__(self, after: float, manager: Manager | None = None) -> None:
        super().__init__(client(), WIDGET, Work(0.0).reconcile, name="broken")
        self.after = after
        self.manager = manager

    async def run(
        self, *, handle_signals: bool = True, environment: Environment | None = None
    ) -> None:
        await asyncio.sleep(self.after)
        if self.manager is not None:
            self.manager.shutdown()
        raise RuntimeError("controller broke")


async def _outcome(mgr: Manager) -> BaseException | None:
    """Run `mgr` to its end: what it raised (None: it returned)."""
    return await _run_to_error(asyncio.create_task(mgr.run()))


# -- which ends drain, which cut at once -----------------------------------------------------


def test_a_failing_controller_lets_the_others_drain_gracefully(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the end of leadership cuts the leader-elected reconciles short: a controller
    that fails stops the Manager, and the others' running reconciles finish first."""
    caplog.set_level(logging.WARNING, "fastctl.manager")
    work = Work(5.0)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    mgr.add(FailingController(after=2.0))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    raised = run_virtual(_outcome(mgr))
    assert isinstance(raised, RuntimeError)
    assert str(raised) == "controller broke"
    assert "a" not in work.cancelled
    assert work.ended["a"] == work.started["a"] + 5.0
    assert not mgr._alive()  # /healthz fails from then on
    assert _messages(caplog) == []


def test_a_failing_elector_cuts_the_elected_before_any_drain(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The elector fails while a leader-elected reconcile runs: it is cancelled when the
    elector fails, before the drain (so the drain has nothing to report), and the failure
    is what `run()` raises."""
    caplog.set_level(logging.WARNING, "fastctl.manager")
    monkeypatch.setattr(_manager, "LeaderElector", BrokenElector)
    work = Work(None)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    raised = run_virtual(_outcome(mgr))
    assert isinstance(raised, RuntimeError)
    assert str(raised) == "elector broke"
    assert work.cancelled["a"] == 1.0  # when the elector failed (BrokenElector: after 1 s)
    assert _messages(caplog) == []


class LateBrokenElector(BrokenElector):
    """Leads at once; its loop fails after five seconds."""

    async def run(self) -> None:
        await asyncio.sleep(5.0)
        raise RuntimeError("elector broke")


def test_an_elector_failing_during_the_drain_cuts_the_elected_at_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The elector is one of the two tasks whose end means the lease can no longer be
    trusted (the other follows its terms, and does not end when the elector fails): the
    drain cuts the leader-elected reconciles when it fails, not at the drain timeout, and
    `run()` raises LeadershipLost."""
    caplog.set_level(logging.WARNING, "fastctl.manager")
    monkeypatch.setattr(_manager, "LeaderElector", LateBrokenElector)
    work = Work(None)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> BaseException | None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.started, "the reconcile")
        mgr.shutdown()
        return await _run_to_error(run)

    raised = run_virtual(main())
    assert isinstance(raised, LeadershipLost)
    assert work.cancelled["a"] == 5.0
    assert _messages(caplog) == [
        "leadership ended during the drain: cancelling 1 leader-elected controller(s) at "
        "once: widgets (reconciling 1: default/a)"
    ]


class Reelected(BrokenElector):
    """Leads term 1; after two seconds that term ends and term 2 begins in the same step,
    so the replica leads again before anything looks."""

    def __init__(self, api: Any, config: LeaderElection) -> None:
        super().__init__(api, config)
        self.term = 1
        self.changed = asyncio.Event()

    async def wait_leading(self) -> int:
        return self.term

    async def wait_lost(self, term: int | None = None) -> None:
        # The real elector's rule: until not leading or, given a term, until it is over.
        while self.is_leader and (term is None or term == self.term):
            self.changed.clear()
            await self.changed.wait()

    async def run(self) -> None:
        await asyncio.sleep(2.0)
        self.term = 2
        self.changed.set()
        await asyncio.Event().wait()


def test_a_term_that_ends_is_a_lost_lease_even_when_the_next_has_begun(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two terms another replica may have led: the Manager follows the term it
    started reconciling in, and its end stops the reconciles even if this replica already
    leads again."""
    monkeypatch.setattr(_manager, "LeaderElector", Reelected)
    work = Work(None)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    raised = run_virtual(_outcome(mgr))
    assert isinstance(raised, LeadershipLost)
    assert work.cancelled["a"] == 2.0


# -- a failure together with a stop, a task cancelled from outside ----------------------------


def test_a_failure_that_comes_with_a_stop_is_still_raised(cluster: Cluster) -> None:
    """The stop and the failed task end in the same step, so the Manager sees both at once
    (in no fixed order: run several Managers, each with its own tasks): the failure is
    raised, never dropped for the stop."""
    for _ in range(12):
        mgr = _make(drain_timeout=60)
        mgr.add(FailingController(after=1.0, manager=mgr))
        raised = run_virtual(_outcome(mgr))
        assert isinstance(raised, RuntimeError)
        assert str(raised) == "controller broke"


def test_a_controller_task_cancelled_from_outside_ends_the_manager_without_an_error(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "fastctl.manager")
    work = Work(None)
    mgr = _make().add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> BaseException | None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.started, "the reconcile")
        (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "widgets"]
        task.cancel()
        return await _run_to_error(run)

    assert run_virtual(main()) is None
    assert _messages(caplog) == ["controller widgets ended unexpectedly"]


def test_cancelling_run_stops_gracefully_then_raises_the_cancellation(cluster: Cluster) -> None:
    """A `run()` cancelled from outside (a task group around it failing, say) stops as
    `shutdown()` does: the leader-elected reconcile running then finishes, the lease is
    released, and the cancellation goes on up."""
    work = Work(5.0)
    mgr = _make(leader_election=ELECTION, drain_timeout=60)
    mgr.add(Controller(client(), WIDGET, work.reconcile, name="widgets"))
    cluster.feeds["Widget"].push(*listing(widget("a", 0)))

    async def main() -> None:
        run = asyncio.create_task(mgr.run())
        await until(lambda: "a" in work.started, "the reconcile")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    run_virtual(main())
    assert "a" not in work.cancelled
    assert work.ended["a"] == work.started["a"] + 5.0
    assert cluster.lease.released_at is not None


# -- the drain, on bare tasks ------------------------------------------------------------------


async def _sleeper(seconds: float, ended: dict[float, float | None]) -> None:
    """Sleeps `seconds`; notes when it ended (None: cancelled)."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        ended[seconds] = None
        raise
    ended[seconds] = asyncio.get_running_loop().time()


def _controller(seconds: float, ended: dict[float, float | None]) -> asyncio.Task[None]:
    """A task standing for a controller that drains in `seconds`, named ``c<seconds>``."""
    return asyncio.create_task(_sleeper(seconds, ended), name=f"c{seconds:g}")


def test_a_drain_that_ends_in_time_returns_false_and_says_what_drained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    ended: dict[float, float | None] = {}

    async def main() -> object:
        tasks = {_controller(s, ended) for s in (1.0, 2.0)}
        return await drain(
            tasks, leadership=set(), elected=tasks, timeout=5.0, abort=asyncio.Event()
        )

    assert run_virtual(main()) is False
    assert ended == {1.0: 1.0, 2.0: 2.0}
    assert _messages(caplog) == [
        "draining 2 controller(s) for up to 5 s: c1; c2",
        "drained c1",
        "drained c2",
    ]


def test_a_drain_past_its_timeout_returns_false_and_says_how_many_are_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    ended: dict[float, float | None] = {}

    async def main() -> tuple[object, float]:
        tasks = {_controller(s, ended) for s in (1.0, 8.0, 9.0)}
        lost = await drain(
            tasks, leadership=set(), elected=set(), timeout=5.0, abort=asyncio.Event()
        )
        return lost, asyncio.get_running_loop().time()

    lost, when = run_virtual(main())
    assert lost is False
    assert when == 5.0
    assert _messages(caplog) == [
        "draining 3 controller(s) for up to 5 s: c1; c8; c9",
        "drained c1",
        "drain timeout (5 s) passed: cancelling 2 controller(s): c8; c9",
    ]


def test_a_drain_aborted_cancels_what_runs_at_once_and_returns_false(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    ended: dict[float, float | None] = {}

    async def main() -> tuple[object, float]:
        loop = asyncio.get_running_loop()
        abort = asyncio.Event()
        loop.call_later(2.0, abort.set)
        tasks = {_controller(s, ended) for s in (1.0, 8.0, 9.0)}
        lost = await drain(tasks, leadership=set(), elected=set(), timeout=60.0, abort=abort)
        return lost, loop.time()

    lost, when = run_virtual(main())
    assert lost is False
    assert when == 2.0
    assert ended == {1.0: 1.0, 8.0: None, 9.0: None}
    assert _messages(caplog) == [
        "draining 3 controller(s) for up to 60 s: c1; c8; c9",
        "drained c1",
        "aborted: cancelling 2 controller(s) at once: c8; c9",
    ]


def test_leadership_ending_in_a_drain_cuts_the_elected_and_returns_true(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    ended: dict[float, float | None] = {}

    async def main() -> tuple[object, float]:
        loop = asyncio.get_running_loop()
        elected = {_controller(s, ended) for s in (8.0, 9.0)}
        sharded = _controller(4.0, ended)
        lease = asyncio.create_task(asyncio.sleep(2.0))
        lost = await drain(
            {*elected, sharded},
            leadership={lease},
            elected=elected,
            timeout=60.0,
            abort=asyncio.Event(),
        )
        return lost, loop.time()

    lost, when = run_virtual(main())
    assert lost is True
    assert when == 4.0  # the sharded one drained on
    assert ended == {8.0: None, 9.0: None, 4.0: 4.0}
    assert _messages(caplog) == [
        "draining 3 controller(s) for up to 60 s: c4; c8; c9",
        "leadership ended during the drain: cancelling 2 leader-elected controller(s) at "
        "once: c8; c9",
        "drained c4",
    ]


# -- the metrics certificate made at start ----------------------------------------------------


def test_the_self_signed_metrics_certificate_is_made_in_a_named_directory_then_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its files live, for as long as it takes to load them, in a temporary directory named
    for what it holds (so a leftover one, after a crash, says whose it is)."""
    made_in: list[Path] = []
    real = ServingCertificate.self_signed

    def self_signed(where: Path, names: Any, *, purpose: str) -> ServingCertificate:
        made_in.append(where)
        return real(where, names, purpose=purpose)

    monkeypatch.setattr(ServingCertificate, "self_signed", self_signed)
    certificate = _servers._self_signed()
    assert certificate.ssl_context is not None
    (where,) = made_in
    assert where.name.startswith("fastctl-metrics-")
    assert not where.exists()
