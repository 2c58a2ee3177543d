"""The Scheduler through its Python binding: each rule of docs/scheduler.md, with explicit
`now` times so nothing depends on the wall clock."""

from __future__ import annotations

import time

import pytest

from fastctl import Scheduler
from fastctl._core import MAX_DELAY


def drain(s: Scheduler, now: float) -> list[str]:
    return s.pop_many(1_000_000, now=now)


def test_add_pop_done_round_trip() -> None:
    s = Scheduler()
    s.add("a", now=0.0)
    assert len(s) == 1
    assert "a" in s
    assert s.pop(now=0.0) == "a"
    assert s.is_in_flight("a")
    assert "a" not in s
    assert len(s) == 0
    assert s.in_flight == 1
    assert s.pop(now=0.0) is None
    s.done("a", now=1.0)
    assert s.in_flight == 0
    assert not s.is_in_flight("a")
    s._check_consistency()


def test_duplicate_add_keeps_earlier_time_and_replaces_later() -> None:
    s = Scheduler()
    s.add("a", after=10, now=0.0)
    s.add("a", after=20, now=0.0)
    assert s.next_ready_at() == 10.0
    s.add("a", after=3, now=0.0)
    assert s.next_ready_at() == 3.0
    assert len(s) == 1
    assert s.pop(now=2.9) is None
    assert s.pop(now=3.0) == "a"
    assert s.pop(now=100.0) is None


def test_priority_then_fifo() -> None:
    s = Scheduler()
    for key, prio in [("a", 0), ("b", 1), ("c", 0), ("d", 1), ("init", -100)]:
        s.add(key, priority=prio, now=0.0)
    assert drain(s, 0.0) == ["b", "d", "a", "c", "init"]


def test_merge_keeps_highest_priority() -> None:
    s = Scheduler()
    s.add("low", now=0.0)
    s.add("a", priority=1, now=0.0)
    s.add("low", priority=3, now=0.0)
    s.add("a", priority=-5, now=0.0)
    assert drain(s, 0.0) == ["low", "a"]


def test_busy_key_does_not_block_others() -> None:
    s = Scheduler()
    s.add("busy", priority=10, now=0.0)
    s.add("other", now=0.0)
    assert s.pop(now=0.0) == "busy"
    s.add("busy", priority=10, now=0.5)
    assert s.pop(now=1.0) == "other"
    assert s.pop(now=1.0) is None


def test_in_flight_adds_collapse_into_one_follow_up() -> None:
    s = Scheduler()
    s.add("a", now=0.0)
    assert s.pop(now=0.0) == "a"
    for i in range(10):
        s.add("a", now=0.1 * i)
    assert len(s) == 1
    assert s.stats(now=1.0)["dirty"] == 1
    assert s.pop(now=1.0) is None
    s.done("a", now=2.0)
    assert s.pop(now=2.0) == "a"
    assert s.pop(now=2.0) is None
    s.done("a", now=3.0)
    assert len(s) == 0


def test_requeue_merges_with_dirty_follow_up_earliest_wins() -> None:
    s = Scheduler()
    s.add("a", now=0.0)
    s.pop(now=0.0)
    s.add("a", after=30, now=0.0)
    s.done("a", requeue_after=5, now=1.0)
    assert s.next_ready_at() == 6.0


def test_requeue_after_keeps_popped_priority_unless_given() -> None:
    s = Scheduler()
    s.add("a", priority=7, now=0.0)
    s.pop(now=0.0)
    s.done("a", requeue_after=5, now=1.0)
    s.add("b", priority=6, now=6.0)
    assert drain(s, 6.0) == ["a", "b"]
    s.done("a", requeue_after=0, priority=-1, now=7.0)
    s.done("b", now=7.0)
    s.add("c", now=7.0)
    assert drain(s, 7.0) == ["c", "a"]


def test_max_wait_lets_old_low_priority_key_overtake() -> None:
    s = Scheduler(max_wait=10)
    s.add("low", priority=-100, now=0.0)
    s.add("hi1", now=5.0)
    s.add("hi2", now=5.0)
    assert s.pop(now=10.0) == "hi1"  # waited exactly max_wait: not longer
    assert s.pop(now=10.5) == "low"
    assert s.pop(now=10.5) == "hi2"


def test_concurrency_limit() -> None:
    s = Scheduler(concurrency=2)
    s.add_many(["a", "b", "c"], now=0.0)
    assert s.pop_many(10, now=0.0) == ["a", "b"]
    assert s.pop(now=0.0) is None
    s.done("a", now=1.0)
    assert s.pop_many(10, now=1.0) == ["c"]
    assert s.concurrency == 2


def test_backoff_grows_caps_and_resets() -> None:
    s = Scheduler(backoff_base=1.0, backoff_max=60.0, seed=7)
    s.add("a", now=0.0)
    now = 0.0
    for n in range(1, 11):
        assert s.pop(now=now) == "a"
        s.done("a", failed=True, now=now)
        assert s.failures("a") == n
        ready_at = s.next_ready_at()
        assert ready_at is not None
        delay = ready_at - now
        nominal = 2.0 ** (n - 1)
        assert min(60.0, nominal * 0.8) - 1e-9 <= delay <= min(60.0, nominal * 1.2) + 1e-9
        now = ready_at
    assert s.pop(now=now) == "a"
    s.done("a", now=now)
    assert s.failures("a") == 0
    assert len(s) == 0
    st = s.stats(now=now)
    assert (st["failures_total"], st["retries_total"], st["requeues_total"]) == (10, 10, 10)


def test_same_seed_same_backoff() -> None:
    def delays(seed: int) -> list[float]:
        s = Scheduler(seed=seed)
        out = []
        s.add("k", now=0.0)
        now = 0.0
        for _ in range(6):
            s.pop(now=now)
            s.done("k", failed=True, now=now)
            ready_at = s.next_ready_at()
            assert ready_at is not None
            out.append(ready_at - now)
            now = ready_at
        return out

    assert delays(1) == delays(1)
    assert delays(1) != delays(2)


def test_forget_resets_failures() -> None:
    s = Scheduler(seed=1)
    s.add("a", now=0.0)
    s.pop(now=0.0)
    s.done("a", failed=True, requeue_after=0, now=0.0)
    assert s.failures("a") == 1
    s.forget("a")
    s.forget("absent")
    assert s.failures("a") == 0


def test_debounce_trailing_edge_and_cap() -> None:
    s = Scheduler(debounce=1.0, debounce_max=3.0)
    assert s.debounce_max == 3.0
    now = 0.0
    served = None
    while now < 5.0:
        s.add("a", now=now)
        if s.pop(now=now) is not None:
            served = now
            break
        now += 0.5
    assert served == 3.0
    # Requeues are not debounced.
    s.done("a", requeue_after=0, now=3.0)
    assert s.pop(now=3.0) == "a"


def test_debounce_default_cap() -> None:
    assert Scheduler(debounce=0.5).debounce_max == 5.0


def test_huge_delays_are_clamped() -> None:
    s = Scheduler()
    s.add("inf", after=float("inf"), now=0.0)
    s.add("big", after=1e300, now=0.0)
    assert s.next_ready_at() == MAX_DELAY
    assert drain(s, MAX_DELAY) == ["inf", "big"]


def test_next_ready_at_when_ready_is_not_in_the_future() -> None:
    s = Scheduler()
    assert s.next_ready_at() is None
    s.add("w", after=5, now=10.0)
    assert s.next_ready_at() == 15.0
    s.add("r", now=12.0)
    assert s.next_ready_at() == 12.0  # ready since 12: <= now, don't sleep
    s.pop(now=13.0)
    assert s.next_ready_at() == 15.0


def test_default_clock_is_time_monotonic() -> None:
    s = Scheduler()
    before = time.monotonic()
    s.add("a", after=100.0)
    after = time.monotonic()
    ready_at = s.next_ready_at()
    assert ready_at is not None
    assert before + 100.0 <= ready_at <= after + 100.0
    assert s.pop() is None
    assert s.pop(now=after + 100.0) == "a"


def test_stats_shape_and_values() -> None:
    s = Scheduler()
    s.add("a", now=0.0)
    s.add("b", now=1.0)
    s.add("c", now=2.0)
    s.add("w", after=50, now=2.0)
    assert len(s.pop_many(3, now=4.0)) == 3
    s.add("a", now=4.0)
    s.add("d", now=5.0)
    st = s.stats(now=6.0)
    assert (st["depth"], st["waiting"], st["in_flight"], st["dirty"], st["len"]) == (1, 1, 3, 1, 3)
    assert st["adds_total"] == 6
    assert st["merges_total"] == 0
    assert st["pops_total"] == 3
    assert st["oldest_ready_age"] == 1.0
    assert st["longest_running"] == 2.0
    assert st["unfinished_work"] == 6.0
    q = st["queue_duration"]
    assert q["count"] == 3
    assert q["sum"] == 9.0
    assert [b for b, _ in q["buckets"]] == [10.0**i for i in range(-8, 4)] + [float("inf")]
    assert q["buckets"][-1] == (float("inf"), 3)
    assert st["work_duration"]["count"] == 0


def test_add_many_and_pop_many() -> None:
    s = Scheduler()
    s.add_many((f"k{i}" for i in range(100)), now=0.0)
    s.add_many(["k0", "k1"], priority=5, now=0.0)
    assert len(s) == 100
    got = s.pop_many(10, now=0.0)
    assert got[:2] == ["k0", "k1"]
    assert got[2:] == [f"k{i}" for i in range(2, 10)]
    assert s.pop_many(0, now=0.0) == []
    assert len(s.pop_many(1000, now=0.0)) == 90


def test_repr() -> None:
    assert repr(Scheduler(concurrency=3)) == "<Scheduler len=0 in_flight=0 concurrency=3>"


@pytest.mark.parametrize("key", ["", "ns/name", "ünïcødé/☃", "x" * 10_000])
def test_any_str_is_a_key(key: str) -> None:
    s = Scheduler()
    s.add(key, now=0.0)
    assert key in s
    assert s.pop(now=0.0) == key
    s.done(key, now=0.0)
