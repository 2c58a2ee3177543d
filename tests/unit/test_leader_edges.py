"""The elector's edges on a virtual clock: how it reports failing requests, how it names
itself, and how `release()` retries and gives up. The Lease is the in-memory one, with
failures scripted per request."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, Self

import pytest

from fastctl.kube._http import ApiError
from fastctl.runtime.leader import LeaderElection, _elector, _rules
from fastctl.runtime.leader._rules import (
    RETRY_JITTER,
    LeaseRecord,
    Observation,
    check_lease_timings,
    default_identity,
    micro_time,
    next_record,
)
from fastctl.testing import VirtualTimeLoop

from .fake_lease import LeaseStore
from .test_leader import MICRO_TIME, _fake_elector, _FakeLeases
from .test_leader_timing import run_bounded

RENEW_DEADLINE = 0.3


class _FailingLeases(_FakeLeases):
    """`_FakeLeases` whose next requests raise the scripted `failures`, in order (``None``:
    that request goes through); `sent` has the time each request was sent."""

    def __init__(self, store: LeaseStore, failures: list[BaseException | None]) -> None:
        super().__init__(store)
        self.failures = failures
        self.requests = 0
        self.sent: list[float] = []

    async def _wire(self) -> None:
        self.sent.append(asyncio.get_running_loop().time())
        await super()._wire()
        self.requests += 1
        if self.failures and (failure := self.failures.pop(0)) is not None:
            raise failure


def _failing(
    store: LeaseStore, identity: str, *failures: BaseException | None
) -> _elector.LeaderElector:
    elector = _fake_elector(store, identity)
    leases = _FailingLeases(store, list(failures))
    elector._leases = leases  # type: ignore[assignment]
    return elector


def _failing_leases(elector: _elector.LeaderElector) -> _FailingLeases:
    leases = elector._leases
    assert isinstance(leases, _FailingLeases)
    return leases


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "fastctl.leader"]


def _spec(store: LeaseStore) -> dict[str, Any]:
    """The spec of the lease in `store` (which must exist)."""
    lease = store.get()
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


WHERE = "lease default/l as 'a'"
CONFLICT = ApiError(409, "Conflict", "modified")
DOWN = ApiError(500, "InternalError", "down")


def test_each_distinct_error_is_a_warning_once_and_the_recovery_is_noted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A candidate retries every retry period: the same error again is only a debug line, a
    different one (or an empty one, named by its type; a timeout, named as such) a new
    warning, and the first success after errors says the server answers again."""
    store = LeaseStore()
    a = _failing(store, "a", DOWN, DOWN, OSError(), TimeoutError(), DOWN)

    async def main(loop: VirtualTimeLoop) -> None:
        run = asyncio.create_task(a.run())
        await a.wait_leading()
        await asyncio.sleep(0.2)  # renewals: they succeed, and say nothing
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    with caplog.at_level(logging.DEBUG, logger="fastctl.leader"):
        run_bounded(main)
    where = WHERE
    lines = [line for line in _lines(caplog) if "holder" not in line[1]]
    assert lines == [
        (logging.INFO, f"{where}: taking part in leader election"),
        (logging.WARNING, f"{where}: 500 InternalError: down"),
        (logging.DEBUG, f"{where}: 500 InternalError: down"),
        (logging.WARNING, f"{where}: OSError"),
        (logging.WARNING, f"{where}: request timed out"),
        (logging.WARNING, f"{where}: 500 InternalError: down"),
        (logging.INFO, f"{where}: leading (term 1, 0 transitions)"),
        (logging.INFO, f"{where}: the API server answers again"),
        (logging.INFO, f"{where}: stopped leading after 0.2 s (term 1): run() was stopped"),
    ]


def test_repr_says_whether_it_leads_and_in_which_term() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")

    async def main(loop: VirtualTimeLoop) -> list[str]:
        seen = [repr(a)]
        run = asyncio.create_task(a.run())
        await a.wait_leading()
        seen.append(repr(a))
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return seen

    assert run_bounded(main) == [
        "<LeaderElector lease default/l as 'a' candidate>",
        "<LeaderElector lease default/l as 'a' leading (term 1)>",
    ]


def test_the_default_identity_ends_in_twelve_random_hex_digits() -> None:
    suffix = default_identity().rsplit("_", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{12}", suffix)
    assert LeaderElection("op").identity.rsplit("_", 1)[1] != suffix


async def _leading(elector: _elector.LeaderElector) -> asyncio.Task[None]:
    run = asyncio.create_task(elector.run())
    await elector.wait_leading()
    return run


def test_a_clean_start_and_release_are_logged_as_information(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        assert await a.release()
        await run

    with caplog.at_level(logging.INFO, logger="fastctl.leader"):
        run_bounded(main)
    assert _lines(caplog) == [
        (logging.INFO, f"{WHERE}: taking part in leader election"),
        (logging.INFO, f"{WHERE}: leading (term 1, 0 transitions)"),
        (logging.INFO, f"{WHERE}: stopped leading after 0.0 s (term 1): releasing the lease"),
        (logging.INFO, f"{WHERE}: released"),
    ]


@pytest.mark.parametrize(
    ("failure", "said"), [(TimeoutError(), "timed out"), (DOWN, "500 InternalError: down")]
)
def test_a_release_that_fails_says_why(
    caplog: pytest.LogCaptureFixture, failure: BaseException, said: str
) -> None:
    store = LeaseStore()
    a = _failing(store, "a")

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        _failing_leases(a).failures.append(failure)
        caplog.clear()
        assert not await a.release()
        await run

    with caplog.at_level(logging.WARNING, logger="fastctl.leader"):
        run_bounded(main)
    assert _lines(caplog) == [(logging.WARNING, f"{WHERE}: could not release: {said}")]


def test_a_release_re_reads_after_a_conflict_and_gives_up_after_three_writes() -> None:
    """A 409 means our copy is stale: re-read and write again, three writes at most (the
    lease still names us, so the successor waits for its expiry)."""
    store = LeaseStore()
    a = _failing(store, "a")

    async def main(loop: VirtualTimeLoop) -> tuple[bool, int]:
        run = await _leading(a)
        leases = _failing_leases(a)
        leases.failures += [CONFLICT, None] * 3
        before = leases.requests
        released = await a.release()
        await run
        return released, leases.requests - before

    assert run_bounded(main) == (False, 6)  # PUT 409, GET, three times
    lease = store.get()
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "a"


def test_a_release_after_a_conflict_writes_over_the_copy_it_re_read() -> None:
    store = LeaseStore()
    a = _failing(store, "a")

    async def main(loop: VirtualTimeLoop) -> bool:
        run = await _leading(a)
        lease = store.get()
        assert lease is not None
        store.put(lease)  # a meddler: a new resourceVersion, the same record
        released = await a.release()
        await run
        return released

    assert run_bounded(main)
    spec = _spec(store)
    assert spec["holderIdentity"] == ""
    assert MICRO_TIME.match(spec["renewTime"])
    assert spec["acquireTime"] == spec["renewTime"]


def test_a_release_with_nothing_read_or_after_the_lease_was_deleted_is_false() -> None:
    store = LeaseStore()
    fresh = _fake_elector(store, "a")
    a = _failing(store, "a")

    async def main(loop: VirtualTimeLoop) -> tuple[bool, bool]:
        never_ran = await fresh.release()
        run = await _leading(a)
        _failing_leases(a).failures.append(CONFLICT)  # our copy is stale: re-read ...
        store.lease = None  # ... and find the lease deleted
        deleted = await a.release()
        await run
        return never_ran, deleted

    assert run_bounded(main) == (False, False)


class _MostJitter:
    """`random` for the elector: `uniform` always draws its upper bound, and notes its
    bounds."""

    def __init__(self) -> None:
        self.bounds: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.bounds.append((a, b))
        return b


def _held_by_x(store: LeaseStore, lease_duration_seconds: int) -> None:
    store.put(
        {"metadata": {"name": "l"}, "spec": LeaseRecord("x", lease_duration_seconds).to_spec()}
    )


@pytest.mark.parametrize("seconds", [1, 0])
def test_a_candidate_polls_every_jittered_retry_period_and_wakes_at_the_expiry(
    monkeypatch: pytest.MonkeyPatch, seconds: int
) -> None:
    """While another holds the lease, a candidate polls ``retry_period · (1 + U[0,
    RETRY_JITTER])`` apart (each poll is a GET, on the wire for 1 ms); when the lease it
    saw expires sooner than that, it polls at the expiry, and takes the lease over. A
    lease without a valid duration (`seconds` 0) lasts our own `lease_duration`, 1 s."""
    jitter = _MostJitter()
    monkeypatch.setattr(_elector, "random", jitter)
    store = LeaseStore()
    _held_by_x(store, seconds)
    a = _failing(store, "a")  # retry_period 0.05, fallback lease_duration 1.0
    leases = _failing_leases(a)

    async def main(loop: VirtualTimeLoop) -> float:
        run = await _leading(a)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return loop.time()

    run_bounded(main)
    seen_at = leases.sent[0] + 0.001  # the first answer starts the expiry clock
    polls = [t for t in leases.sent if t < seen_at + 1.0]
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    assert gaps == pytest.approx([0.001 + 0.05 * (1 + RETRY_JITTER)] * len(gaps))
    assert len(gaps) >= 10
    takeover = leases.sent[len(polls)]
    assert takeover == pytest.approx(seen_at + 1.0)  # at the expiry, not a retry later
    assert set(jitter.bounds) == {(0, RETRY_JITTER)}


def test_a_one_second_lease_lasts_one_second_not_the_fallback() -> None:
    seen = Observation()
    seen.observe(LeaseRecord("x", 1), now=10.0)
    assert seen.expires_at(fallback_duration=15) == 11.0


class _LateLeases(_FakeLeases):
    """`_FakeLeases` whose server applies each write when it arrives, after which the
    event loop is blocked while the answer is read, until `late[i]` seconds after the
    write was sent (none left, or that moment past already: not blocked), and whose answers
    name `holder` instead of the writer, if set (a server that changed what it stored)."""

    def __init__(self, store: LeaseStore, late: list[float], holder: str | None = None) -> None:
        super().__init__(store)
        self.late = late
        self.holder = holder

    async def _answer(self, sent: float, written: dict[str, Any]) -> dict[str, Any]:
        if self.late:
            loop = VirtualTimeLoop.current()
            blocked = sent + self.late.pop(0) - loop.time()
            loop.advance(max(0.0, blocked))  # no timer runs meanwhile
        if self.holder is not None:
            written["spec"]["holderIdentity"] = self.holder
        return written

    async def create(self, record: LeaseRecord) -> dict[str, Any]:
        sent = asyncio.get_running_loop().time()
        return await self._answer(sent, await super().create(record))

    async def replace(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        sent = asyncio.get_running_loop().time()
        return await self._answer(sent, await super().replace(lease, record))


@pytest.mark.parametrize("late", [RENEW_DEADLINE, RENEW_DEADLINE + 0.1])
def test_a_write_answered_at_or_after_its_renew_deadline_starts_no_tenure(late: float) -> None:
    """The tenure counts from the send: an answer read ``renew_deadline`` or more after
    it (here the loop was blocked while it came in, so the attempt's own timeout could not
    fire) leaves none of it, so the elector does not lead on it; the next write, answered
    in time, starts the term."""
    store = LeaseStore()
    a = _fake_elector(store, "a", renew_deadline=RENEW_DEADLINE)
    a._leases = _LateLeases(store, [late])  # type: ignore[assignment]

    async def main(loop: VirtualTimeLoop) -> tuple[float, int]:
        run = asyncio.create_task(a.run())
        term = await a.wait_leading()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return loop.time(), term

    led_at, term = run_bounded(main)
    assert term == 1  # no term began (and ended at once) on the late answer
    answered_at = 0.001 + late  # after the GET, the POST's answer
    assert led_at > answered_at + 0.01  # a retry later: not on the late answer
    lease = store.get()
    assert lease is not None
    assert lease["metadata"]["resourceVersion"] == "2"  # created, then renewed


def test_a_write_whose_answer_names_another_holder_starts_no_tenure() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")
    a._leases = _LateLeases(store, [], holder="x")  # type: ignore[assignment]

    async def main(loop: VirtualTimeLoop) -> tuple[bool, str | None]:
        run = asyncio.create_task(a.run())
        await asyncio.sleep(1.0)
        leading = a.is_leader
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return leading, a.leader

    assert run_bounded(main) == (False, "x")


class _GatedLeases(_FakeLeases):
    """`_FakeLeases` whose create is applied at once but answered only when `gate` is
    opened; `applied` is set in between."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store)
        self.applied = asyncio.Event()
        self.gate = asyncio.Event()

    async def create(self, record: LeaseRecord) -> dict[str, Any]:
        written = await super().create(record)
        self.applied.set()
        await self.gate.wait()
        return written


def test_a_write_answered_after_release_was_asked_starts_no_term(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`release()` is asked while a write is on its way back: the answer names us, but
    the elector does not lead on it (it was told to stop), and the release still clears
    the lease the write took."""
    store = LeaseStore()
    a = _fake_elector(store, "a")
    leases = _GatedLeases(store)
    a._leases = leases  # type: ignore[assignment]

    async def main(loop: VirtualTimeLoop) -> bool:
        run = asyncio.create_task(a.run())
        await leases.applied.wait()
        release = asyncio.create_task(a.release())  # runs first: asks to stop ...
        leases.gate.set()  # ... then the answer comes in
        released = await release
        await run
        return released

    with caplog.at_level(logging.INFO, logger="fastctl.leader"):
        assert run_bounded(main)
    assert not [line for _, line in _lines(caplog) if "leading" in line]
    lease = store.get()
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""


def test_a_leader_renews_every_retry_period_without_jitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only candidates jitter their polls: a leader's renewals (each a PUT over its own
    copy, on the wire for 1 ms) are one retry period apart."""
    monkeypatch.setattr(_elector, "random", _MostJitter())
    store = LeaseStore()
    a = _failing(store, "a")  # retry_period 0.05
    leases = _failing_leases(a)

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        await asyncio.sleep(1.0)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    run_bounded(main)
    renewals = leases.sent[2:]  # after the GET and the POST
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    assert len(gaps) >= 10
    assert gaps == pytest.approx([0.05 + 0.001] * len(gaps))


class _SlowToCancelLeases(_FakeLeases):
    """`_FakeLeases` whose requests, while cut off, take `cleanup` seconds to give up
    once cancelled (a client that closes its connection on the way out)."""

    def __init__(self, store: LeaseStore, cleanup: float) -> None:
        super().__init__(store)
        self.cleanup = cleanup

    async def _wire(self) -> None:
        try:
            await super()._wire()
        except asyncio.CancelledError:
            await asyncio.sleep(self.cleanup)
            raise


def test_the_tenure_ends_at_its_deadline_even_if_a_request_is_slow_to_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A timer ends the tenure at the deadline, whatever the renewal in flight does: here
    it takes a second more to give up after its attempt's own timeout cancelled it."""
    store = LeaseStore()
    a = _fake_elector(store, "a", renew_deadline=RENEW_DEADLINE)
    leases = _SlowToCancelLeases(store, cleanup=1.0)
    a._leases = leases  # type: ignore[assignment]

    async def main(loop: VirtualTimeLoop) -> tuple[float, float]:
        run = asyncio.create_task(a.run())
        term = await a.wait_leading()
        await asyncio.sleep(0.5)
        deadline = a.leading_until
        assert deadline is not None
        leases.cut()
        caplog.clear()
        await a.wait_lost(term)
        lost_at = loop.time()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return lost_at, deadline

    with caplog.at_level(logging.WARNING, logger="fastctl.leader"):
        lost_at, deadline = run_bounded(main)
    assert lost_at == pytest.approx(deadline)
    assert _lines(caplog)[0] == (
        logging.WARNING,
        f"{WHERE}: stopped leading after 0.8 s (term 1): the renew deadline passed",
    )


def test_a_renewal_keeps_the_transition_count() -> None:
    taken = LeaseRecord("a", 15, "t0", "t1", 3)
    assert next_record(taken, "a", 15, "t2") == LeaseRecord("a", 15, "t0", "t2", 3)


@pytest.fixture
def _local_time_is_not_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is five and a half hours off UTC (no daylight
    saving): a time written in local time instead of UTC shows."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


NOW = datetime(2026, 12, 2, 14, 45, 0, 123456, tzinfo=UTC)


class _Stopped(datetime):
    """`datetime` whose clock stands at `NOW` (naive: in local time, as `now()` gives)."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> Self:
        now = NOW.astimezone(tz) if tz is not None else NOW.astimezone().replace(tzinfo=None)
        return cls.combine(now.date(), now.timetz())


@pytest.mark.usefixtures("_local_time_is_not_utc")
def test_micro_time_is_utc_whatever_the_local_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert time.localtime(0).tm_gmtoff == 19800  # the fixture took effect
    two_hours_east = timezone(timedelta(hours=2))
    when = datetime(2026, 12, 2, 16, 45, 0, 123456, tzinfo=two_hours_east)
    assert micro_time(when) == "2026-12-02T14:45:00.123456Z"
    monkeypatch.setattr(_rules, "datetime", _Stopped)
    assert micro_time() == "2026-12-02T14:45:00.123456Z"


# -- races and a lease that changes under the leader -----------------------------------------


def _led_at(elector: _elector.LeaderElector) -> float:
    """Run `elector` on a virtual clock until it leads; when it began to."""

    async def main(loop: VirtualTimeLoop) -> float:
        run = await _leading(elector)
        led_at = loop.time()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return led_at

    return run_bounded(main)


@pytest.mark.parametrize("free", [False, True], ids=["create", "take-over"])
def test_a_write_lost_to_another_candidate_is_no_error(
    caplog: pytest.LogCaptureFixture, free: bool
) -> None:
    """Two candidates racing for the lease: the loser's write is refused with a 409 (a
    create over the lease the other created, or a PUT over a copy the other has written
    since). That is the protocol working, not a failure: no warning, and the loser
    competes again on its next poll (here the 409 was scripted, so it wins then)."""
    store = LeaseStore()
    if free:  # a free lease: a candidate reads it, then PUTs its record over it
        store.put({"metadata": {"name": "l"}, "spec": LeaseRecord().to_spec()})
    a = _failing(store, "a", None, CONFLICT)  # the GET goes through, the write is refused

    with caplog.at_level(logging.DEBUG, logger="fastctl.leader"):
        led_at = _led_at(a)
    assert led_at > 0.05  # on the next poll, a retry period later
    levels = {level for level, line in _lines(caplog)}
    assert logging.WARNING not in levels
    assert not [line for _, line in _lines(caplog) if "answers again" in line]


def test_a_leader_whose_lease_was_deleted_creates_it_again_in_the_same_term(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A renewal over our own copy finds the lease gone (404): read, find nothing, create
    it again; the tenure goes on, with no warning."""
    store = LeaseStore()
    a = _fake_elector(store, "a")

    async def main(loop: VirtualTimeLoop) -> tuple[int, bool]:
        run = await _leading(a)
        store.lease = None  # deleted by someone
        await asyncio.sleep(1.0)  # more than the renew deadline
        term, leading = await a.wait_leading(), a.is_leader
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return term, leading

    with caplog.at_level(logging.WARNING, logger="fastctl.leader"):
        assert run_bounded(main) == (1, True)
    assert _lines(caplog) == []
    assert _spec(store)["holderIdentity"] == "a"


def test_a_lease_that_names_us_already_is_renewed_at_once() -> None:
    """A replica restarted with the same identity finds the lease naming it: it is ours,
    so it renews it at once (keeping acquireTime and the transition count) instead of
    waiting for it to expire as if another held it, and writes our duration."""
    store = LeaseStore()
    store.put({"metadata": {"name": "l"}, "spec": LeaseRecord("a", 7, "t0", "t1", 4).to_spec()})
    a = _fake_elector(store, "a", lease_duration=2.0)

    assert _led_at(a) == pytest.approx(0.002)  # the GET and the PUT, 1 ms each
    spec = _spec(store)
    assert (spec["holderIdentity"], spec["acquireTime"], spec["leaseTransitions"]) == ("a", "t0", 4)
    assert spec["leaseDurationSeconds"] == 2


def test_every_write_of_a_leader_carries_its_lease_duration() -> None:
    """The create, a renewal over our own copy, and a renewal after a 409 (read, then
    write over the copy read) all write ``leaseDurationSeconds``."""
    store = LeaseStore()
    a = _failing(store, "a")
    a_leases = _failing_leases(a)
    durations: list[int] = []  # of every write the store applied

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        await asyncio.sleep(0.1)  # a renewal over our own copy
        a_leases.failures.append(CONFLICT)  # the next one is refused: read, then write
        await asyncio.sleep(0.1)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    store_put = store.put

    def noting_put(lease: dict[str, Any]) -> dict[str, Any]:
        durations.append(lease["spec"]["leaseDurationSeconds"])
        return store_put(lease)

    store.put = noting_put  # type: ignore[method-assign]
    run_bounded(main)
    assert len(durations) >= 4  # the create, renewals over our copy, the one after the 409
    assert set(durations) == {1}  # lease_duration 1.0


def test_a_release_while_a_renewal_after_a_conflict_hangs_writes_over_the_copy_read() -> None:
    """A renewal meets a 409, reads the lease (still ours) and its PUT hangs; `release()`
    cuts it short and writes the release over the copy that renewal read."""
    store = LeaseStore()
    a = _failing(store, "a")
    leases = _failing_leases(a)

    async def main(loop: VirtualTimeLoop) -> bool:
        run = await _leading(a)
        before = leases.requests
        leases.failures.append(CONFLICT)
        read = asyncio.Event()

        def stall_the_put_after_the_read() -> None:
            if not read.is_set() and leases.requests == before + 2:  # a 409, then the GET
                leases.stall_next = True
                read.set()

        loop.on_step.append(stall_the_put_after_the_read)
        await read.wait()
        await asyncio.sleep(0.01)  # the PUT is on its way, and hangs
        assert len(leases.sent) == before + 3
        released = await a.release()
        await run
        return released

    assert run_bounded(main)
    assert _spec(store)["holderIdentity"] == ""


# -- after a term ------------------------------------------------------------------------------


def test_a_leader_whose_renewals_are_refused_competes_again_after_its_deadline() -> None:
    """Renewals that fail at once (a 500 each) until the renew deadline end the term at
    the deadline, while the loop sleeps between retries; `run()` then goes on as a
    candidate and leads again (term 2) once the server answers."""
    store = LeaseStore()
    a = _failing(store, "a")
    leases = _failing_leases(a)

    async def main(loop: VirtualTimeLoop) -> tuple[float, float, int]:
        run = await _leading(a)
        deadline = a.leading_until
        assert deadline is not None
        leases.failures += [DOWN] * 1000
        await a.wait_lost(1)
        lost_at = loop.time()
        leases.failures.clear()
        term = await a.wait_leading()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return lost_at, deadline, term

    lost_at, deadline, term = run_bounded(main)
    assert lost_at == pytest.approx(deadline, abs=0.06)  # at most a retry period after it
    assert term == 2


def test_run_can_be_started_again_after_it_was_cancelled() -> None:
    store = LeaseStore()
    a = _fake_elector(store, "a")

    async def main(loop: VirtualTimeLoop) -> list[int]:
        terms = []
        for _ in range(2):
            run = await _leading(a)
            terms.append(await a.wait_leading())
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            assert not a.is_leader
        return terms

    assert run_bounded(main) == [1, 2]


def test_a_leader_that_finds_another_holder_says_who(caplog: pytest.LogCaptureFixture) -> None:
    """The holder of a lease that changed is noted (debug), and a leader that finds it
    held by another says so as it stops."""
    store = LeaseStore()
    a = _fake_elector(store, "a")

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        await asyncio.sleep(0.1)
        caplog.clear()
        _held_by_x(store, 1)  # x took the lease: our next PUT meets a 409, then we read
        await a.wait_lost(1)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    with caplog.at_level(logging.DEBUG, logger="fastctl.leader"):
        run_bounded(main)
    assert _lines(caplog)[:2] == [
        (logging.DEBUG, f"{WHERE}: the holder is 'x'"),
        (
            logging.WARNING,
            f"{WHERE}: stopped leading after 0.1 s (term 1): the lease is held by 'x'",
        ),
    ]


def test_a_term_that_ran_out_while_the_loop_was_blocked_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The loop was blocked past the deadline while a renewal's answer came in (so the
    deadline timer could not run first): the loop itself ends the term, and says why."""
    store = LeaseStore()
    a = _fake_elector(store, "a", renew_deadline=RENEW_DEADLINE)
    a._leases = _LateLeases(store, [0.0, 1.0])  # type: ignore[assignment]

    async def main(loop: VirtualTimeLoop) -> None:
        run = await _leading(a)
        await a.wait_lost(1)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="fastctl.leader"):
        run_bounded(main)
    why = "renewals failed for the renew deadline"
    assert _lines(caplog) == [
        (logging.WARNING, f"{WHERE}: stopped leading after 1.1 s (term 1): {why}")
    ]


# -- refused settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"lease_duration": math.nan},
            "lease_duration must be a positive number of seconds, not nan",
        ),
        ({"renew_deadline": 0}, "renew_deadline must be a positive number of seconds, not 0"),
        ({"retry_period": -1}, "retry_period must be a positive number of seconds, not -1"),
        (
            {"lease_duration": 10, "renew_deadline": 10},
            "lease_duration (10) must be longer than renew_deadline (10) by at least 0.5 s: a "
            "leader must give up, and cancel its running reconciles, before its lease expires "
            "for others",
        ),
        (
            {"renew_deadline": 2.2, "retry_period": 2},
            "renew_deadline (2.2) must be longer than 1.2 x retry_period (2) to leave room for "
            "a retry",
        ),
        ({"namespace": ""}, "LeaderElection needs a lease name and a namespace"),
        ({"identity": ""}, "identity must not be empty: an empty holder means a free lease"),
    ],
)
def test_a_refused_setting_is_named_with_its_value_and_why(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        LeaderElection("op", **kwargs)


def test_the_timings_say_what_the_margin_protects_and_leave_room_for_a_retry() -> None:
    with pytest.raises(ValueError, match=r"by at least 0\.5 s: shards move$"):
        check_lease_timings(1.0, 1.0, 0.1, why="shards move")
    # A renew deadline of exactly 1.2 retry periods leaves no room for a jittered retry.
    assert 0.25 * (1 + RETRY_JITTER) == 0.3
    with pytest.raises(ValueError, match="to leave room for a retry"):
        check_lease_timings(1.0, 0.3, 0.25)
    check_lease_timings(1.0, 0.31, 0.25)
