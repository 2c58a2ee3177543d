"""A pure-Python model of `fastctl.Scheduler`: the same API and the same semantics, written
to be read rather than to be fast.

It serves two purposes. The Hypothesis test (tests/unit/test_scheduler_model.py) drives it and
the Rust scheduler with the same operations and times and checks that they agree after
every step; and the benchmarks use it as "the scheduler you would write in Python" to
measure what the Rust core buys.

It orders ready keys by priority, then serves each priority's fair groups in turn from a
ring (a group's weight is how many keys it takes per turn), each group's keys by (time they
became ready, sequence); it finds the oldest key by (time, sequence), where the Rust core
relies on sequence numbers alone; the two agree only
because keys enter the ready queue in the order they became ready, which is exactly what
the comparison test checks. With ``group_concurrency`` (or a group's own cap,
``set_group_concurrency``) a named group with its cap of keys in flight is held: it leaves
every ring (its keys stay counted at their levels) and its keys are not candidates for the
oldest key, until it drops below its cap (a key done, or the cap raised) and rejoins, at
the back, each ring where it has ready keys. The model finds the oldest key that can be served
by a scan of the records when a cap is set (the Rust core keeps held groups out of its
structures instead). Its queues are binary heaps with lazy deletion: an entry is
live only while it still matches its key's record. The jitter generator is the same
splitmix64, so equal seeds give bit-identical backoff delays.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:  # TypedDicts that exist only in the stub of the extension
    from fastctl._core import Histogram, SchedulerStats

__all__ = ["ModelScheduler"]

MAX_DELAY: Final = 15_552_000.0
"""Longest accepted delay in seconds (180 days); longer ones, and infinity, are clamped."""

BUCKETS: Final = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3)
"""Upper bounds of the duration histograms (controller-runtime's workqueue buckets)."""

_MASK: Final = (1 << 64) - 1
_MAX_WEIGHT: Final = (1 << 32) - 1
_MAX_GROUP_CONCURRENCY: Final = (1 << 32) - 1


class SplitMix64:
    """The splitmix64 generator, exactly as the Rust core implements it."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def next_unit(self) -> float:
        """Uniform in [0, 1): the top 53 bits times 2**-53 (exact, like the Rust side)."""
        return (self.next_u64() >> 11) * (1.0 / 9007199254740992.0)


def backoff_delay(base: float, cap: float, failures: int, rng: SplitMix64) -> float:
    """``min(cap, base * 2**(failures-1) * j)`` with ``j`` uniform in [0.8, 1.2]."""
    j = 0.8 + 0.4 * rng.next_unit()
    return min(cap, base * 2.0 ** min(max(failures - 1, 0), 1023) * j)


def _check_delay(name: str, value: float) -> float:
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value}")
    return min(value, MAX_DELAY) + 0.0


def _check_key(key: object, what: str = "key") -> str:
    if not isinstance(key, str):
        raise TypeError(f"{what} must be str, not {type(key).__name__}")
    return key


def _check_group(group: object) -> str | None:
    if group is not None and not isinstance(group, str):
        raise TypeError(f"group must be str or None, not {type(group).__name__}")
    if group == "":
        raise ValueError("group must be a non-empty str or None, got ''")
    return group


def _check_group_concurrency(value: object) -> int:
    if value is None:
        return 0
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= _MAX_GROUP_CONCURRENCY
    ):
        raise ValueError(
            f"group_concurrency must be an int in [0, {_MAX_GROUP_CONCURRENCY}] or None "
            f"(0 or None: no cap), got {value!r}"
        )
    return value


def _check_weight(group: str, weight: object) -> int:
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= _MAX_WEIGHT:
        raise ValueError(
            f'weight of group "{group}" must be an int in [1, {_MAX_WEIGHT}], got {weight}'
        )
    return weight


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                break
        self.sum += seconds
        self.count += 1

    def snapshot(self) -> Histogram:
        buckets, total = [], 0
        for bound, n in zip(BUCKETS, self.counts, strict=True):
            total += n
            buckets.append((bound, total))
        buckets.append((math.inf, self.count))
        return {"buckets": buckets, "sum": self.sum, "count": self.count}


@dataclass(slots=True)
class _Schedule:
    """A requested ready time; `deadline` is set while it is a debounce time (the latest a
    further debounced add may push it to)."""

    at: float
    deadline: float | None = None

    def merge_time(self, at: float) -> _Schedule:
        """Earliest wins; an explicit time also caps the debounce batch."""
        deadline = None if self.deadline is None else min(self.deadline, at)
        return _Schedule(min(self.at, at), deadline)


State = Literal["waiting", "ready", "running"]


@dataclass(slots=True)
class _Record:
    key: str
    state: State
    priority: int  # queued: merged priority; running: the priority it was popped with
    seq: int  # unique per queue entry, to tell live heap entries from stale ones
    at: float  # waiting: ready time; ready: when it became ready; running: when popped
    deadline: float | None = None  # waiting: the debounce cap
    failures: int = 0
    follow_up: _Schedule | None = None  # running and dirty: the queued follow-up
    follow_up_priority: int = 0
    group: str | None = None  # its fair group, set when the record is made


@dataclass(slots=True)
class _Level:
    """The ready keys of one priority: a heap of (since, seq, key) per fair group (entries
    go stale like the others), the exact count of each group's live entries, and the ring
    of groups with ready keys that are not held, the front served next for `turn` more
    keys."""

    queues: dict[str | None, list[tuple[float, int, str]]] = field(default_factory=dict)
    counts: dict[str | None, int] = field(default_factory=dict)
    ring: deque[str | None] = field(default_factory=deque)
    turn: int = 0


class ModelScheduler:
    """Pure-Python twin of `fastctl.Scheduler` (same constructor, methods and results).

    Its defaults are written here as literals, not read from the extension, so that the model
    stays an independent statement of the semantics; tests/unit/test_scheduler_defaults.py
    checks that they equal `fastctl._core.SCHEDULER_DEFAULTS`.
    """

    def __init__(
        self,
        *,
        concurrency: int = 0,
        debounce: float = 0.0,
        debounce_max: float | None = None,
        max_wait: float = 30.0,
        backoff_base: float = 0.005,
        backoff_max: float = 300.0,
        seed: int | None = None,
        group_weights: Mapping[str, int] | None = None,
        group_concurrency: int | None = 0,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
            raise ValueError(f"concurrency must be an int >= 0, got {concurrency}")
        self.concurrency = concurrency
        self.group_concurrency = _check_group_concurrency(group_concurrency)
        self._group_caps: dict[str, int] = {}  # groups' own caps, by name
        self._group_in_flight: dict[str, int] = {}  # named groups' keys in flight
        self._waker: Callable[[], object] | None = None  # see `_set_waker`
        self.debounce = self._config("debounce", debounce)
        self.debounce_max = (
            min(self.debounce * 10.0, MAX_DELAY)
            if debounce_max is None
            else self._config("debounce_max", debounce_max)
        )
        if self.debounce_max < self.debounce:
            raise ValueError(
                f"debounce_max must be >= debounce ({self.debounce}), got {self.debounce_max}"
            )
        if math.isnan(max_wait) or max_wait < 0:
            raise ValueError(f"max_wait must be a number of seconds >= 0, got {max_wait}")
        self.max_wait = float(max_wait)
        self.backoff_base = self._config("backoff_base", backoff_base)
        self.backoff_max = self._config("backoff_max", backoff_max)
        if seed is None:
            seed = random.getrandbits(64)
        elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MASK:
            raise ValueError(f"seed must be an int in [0, 2**64) or None, got {seed!r}")
        self._rng = SplitMix64(seed)
        self._records: dict[str, _Record] = {}
        self._levels: dict[int, _Level] = {}  # ready keys by priority
        self._weights: dict[str, int] = {}
        for group, weight in (group_weights or {}).items():
            self.set_group_weight(_check_key(group, "group_weights key"), weight)
        self._oldest: list[tuple[float, int, str]] = []  # (since, seq, key)
        self._waiting: list[tuple[float, int, str]] = []  # (ready time, seq, key)
        self._running: dict[str, _Record] = {}  # in pop order
        self._counts = {"ready": 0, "waiting": 0, "dirty": 0}
        self._seq = 0
        self._clock = -math.inf
        self._counters = dict.fromkeys(
            ("adds", "merges", "retries", "requeues", "pops", "done", "failures"), 0
        )
        self._queue_duration = _Histogram()
        self._work_duration = _Histogram()

    @staticmethod
    def _config(name: str, value: float) -> float:
        try:
            return _check_delay(name, value)
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value}") from None

    # ---- time ---------------------------------------------------------------------------

    def _tick(self, now: float | None) -> float:
        """Advance the clock (never backwards) and promote due waiting keys in time order."""
        now = time.monotonic() if now is None else float(now)
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite number of seconds, got {now}")
        now = max(self._clock, now + 0.0)
        self._clock = now
        while self._waiting and self._waiting[0][0] <= now:
            at, seq, key = heapq.heappop(self._waiting)
            rec = self._records.get(key)
            if rec is not None and rec.state == "waiting" and rec.seq == seq and rec.at == at:
                self._counts["waiting"] -= 1
                self._make_ready(rec, at)
        return now

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ---- queue transitions --------------------------------------------------------------

    def _make_ready(self, rec: _Record, since: float) -> None:
        rec.state, rec.at, rec.seq, rec.deadline = "ready", since, self._next_seq(), None
        self._ready_insert(rec)
        heapq.heappush(self._oldest, (since, rec.seq, rec.key))
        self._counts["ready"] += 1

    def _weight(self, group: str | None) -> int:
        return 1 if group is None else self._weights.get(group, 1)

    def _held(self, group: str | None) -> bool:
        """Whether `group` has its cap in flight (never for keys without a group)."""
        if group is None:
            return False
        cap = self._group_caps.get(group, self.group_concurrency)
        return bool(cap) and self._group_in_flight.get(group, 0) >= cap

    def _join_ring(self, level: _Level, group: str | None) -> None:
        """`group` joins the ring at the back (at the front, with a fresh turn, if the ring
        was empty)."""
        level.ring.append(group)
        if len(level.ring) == 1:
            level.turn = self._weight(group)

    def _leave_ring(self, level: _Level, group: str | None) -> None:
        """`group` leaves the ring; a front that leaves hands the turn to the next."""
        front = level.ring[0] == group
        level.ring.remove(group)
        if front and level.ring:
            level.turn = self._weight(level.ring[0])

    def _ready_insert(self, rec: _Record) -> None:
        """File a ready key in its level's group; a group new to the level joins the ring,
        unless it is held."""
        level = self._levels.setdefault(rec.priority, _Level())
        group = rec.group
        if group not in level.counts:
            level.counts[group] = 0
            level.queues[group] = []
            if not self._held(group):
                self._join_ring(level, group)
        level.counts[group] += 1
        heapq.heappush(level.queues[group], (rec.at, rec.seq, rec.key))

    def _ready_remove(self, rec: _Record) -> None:
        """Take a ready key out of its level (its heap entry goes stale); a group left with
        no keys leaves the ring, and a level with no keys goes."""
        level = self._levels[rec.priority]
        group = rec.group
        level.counts[group] -= 1
        if level.counts[group]:
            return
        del level.counts[group], level.queues[group]
        if group in level.ring:
            self._leave_ring(level, group)
        if not level.counts:
            del self._levels[rec.priority]

    def _hold(self, group: str) -> None:
        """`group` reached the cap: it leaves the ring of every level (its keys stay)."""
        for level in self._levels.values():
            if group in level.ring:
                self._leave_ring(level, group)

    def _release(self, group: str) -> None:
        """`group` dropped below the cap: it joins, at the back, the ring of every level
        where it has ready keys."""
        for level in self._levels.values():
            if group in level.counts:
                self._join_ring(level, group)

    def _pop_level(self, priority: int) -> _Record:
        """The next key of a level: the front group's oldest; then its turn goes on, or the
        ring moves on."""
        level = self._levels[priority]
        group = level.ring[0]
        queue = level.queues[group]
        while True:
            _, seq, key = heapq.heappop(queue)
            rec = self._records.get(key)
            # Stale once popped, requeued, or raised to another level.
            live = rec is not None and rec.state == "ready" and rec.seq == seq
            if live and rec is not None and rec.priority == priority:
                break
        self._ready_remove(rec)
        if level.counts.get(group):
            level.turn -= 1
            if level.turn == 0:
                level.ring.rotate(-1)
                level.turn = self._weight(level.ring[0])
        return rec

    def _enqueue(self, rec: _Record, schedule: _Schedule, now: float) -> None:
        if schedule.at <= now:
            self._make_ready(rec, now)
            return
        rec.state, rec.at, rec.seq, rec.deadline = (
            "waiting",
            schedule.at,
            self._next_seq(),
            schedule.deadline,
        )
        heapq.heappush(self._waiting, (rec.at, rec.seq, rec.key))
        self._counts["waiting"] += 1

    def _merge_add(self, current: _Schedule | None, after: float, now: float) -> _Schedule:
        """An add with no delay while debounce is on is debounced (trailing edge, capped);
        any other add is an explicit time, merged earliest-wins."""
        if not (self.debounce > 0 and after == 0):
            return _Schedule(now + after) if current is None else current.merge_time(now + after)
        if current is None:
            return _Schedule(now + self.debounce, now + self.debounce_max)
        if current.deadline is not None:
            return _Schedule(min(now + self.debounce, current.deadline), current.deadline)
        if now + self.debounce < current.at:
            return _Schedule(now + self.debounce, min(now + self.debounce_max, current.at))
        return current

    # ---- the API ------------------------------------------------------------------------

    def add(
        self,
        key: str,
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        _check_key(key)
        after = _check_delay("after", after)
        group = _check_group(group)
        self._add(key, after, priority, group, self._tick(now))

    def add_many(
        self,
        keys: Iterable[str],
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        if isinstance(keys, str):
            raise TypeError("add_many() takes an iterable of str keys, not a str")
        keys = list(keys)
        for i, key in enumerate(keys):
            _check_key(key, f"add_many() key at index {i}")
        after = _check_delay("after", after)
        group = _check_group(group)
        now = self._tick(now)
        for key in keys:
            self._add(key, after, priority, group, now)

    def _add(self, key: str, after: float, priority: int, group: str | None, now: float) -> None:
        self._counters["adds"] += 1
        rec = self._records.get(key)
        if rec is None:
            rec = _Record(key, "waiting", priority, 0, 0.0, group=group)
            self._records[key] = rec
            self._enqueue(rec, self._merge_add(None, after, now), now)
            return
        if rec.state == "running":
            if rec.follow_up is None:
                rec.follow_up = self._merge_add(None, after, now)
                rec.follow_up_priority = priority
                self._counts["dirty"] += 1
            else:
                self._counters["merges"] += 1
                rec.follow_up = self._merge_add(rec.follow_up, after, now)
                rec.follow_up_priority = max(rec.follow_up_priority, priority)
            return
        self._counters["merges"] += 1
        if rec.state == "ready":
            if priority > rec.priority:
                self._ready_remove(rec)
                rec.priority = priority  # the old heap entry goes stale
                self._ready_insert(rec)
            return
        rec.priority = max(rec.priority, priority)
        schedule = self._merge_add(_Schedule(rec.at, rec.deadline), after, now)
        if schedule.at <= now:
            self._counts["waiting"] -= 1
            self._make_ready(rec, now)
        else:
            if schedule.at != rec.at:
                heapq.heappush(self._waiting, (schedule.at, rec.seq, key))
            rec.at, rec.deadline = schedule.at, schedule.deadline

    def _live_oldest(self) -> _Record | None:
        while self._oldest:
            _, seq, key = self._oldest[0]
            rec = self._records.get(key)
            if rec is not None and rec.state == "ready" and rec.seq == seq:
                return rec
            heapq.heappop(self._oldest)
        return None

    def _oldest_servable(self) -> _Record | None:
        """The oldest ready key whose group is not held."""
        if not self.group_concurrency and not self._group_caps:
            return self._live_oldest()
        ready = (
            r for r in self._records.values() if r.state == "ready" and not self._held(r.group)
        )
        return min(ready, key=lambda r: (r.at, r.seq), default=None)

    def _pop(self, now: float) -> str | None:
        if self.concurrency and len(self._running) >= self.concurrency:
            return None
        # Levels whose ready keys are all of held groups have empty rings: skipped.
        servable = [p for p, level in self._levels.items() if level.ring]
        if not servable:
            return None
        # An overdue oldest key puts its level first; the level's ring picks the group.
        oldest = self._oldest_servable()
        if oldest is not None and now - oldest.at > self.max_wait:
            rec = self._pop_level(oldest.priority)
        else:
            rec = self._pop_level(max(servable))
        group = rec.group
        if group is not None:
            self._group_in_flight[group] = self._group_in_flight.get(group, 0) + 1
            if self._held(group):
                self._hold(group)
        self._counts["ready"] -= 1
        self._queue_duration.observe(now - rec.at)
        rec.state, rec.at, rec.seq = "running", now, self._next_seq()
        self._running[rec.key] = rec
        self._counters["pops"] += 1
        return rec.key

    def pop(self, *, now: float | None = None) -> str | None:
        return self._pop(self._tick(now))

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        if max < 0:
            raise ValueError(f"max must be >= 0, got {max}")
        now = self._tick(now)
        out: list[str] = []
        while len(out) < max and (key := self._pop(now)) is not None:
            out.append(key)
        return out

    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = None,
        failed: bool = False,
        priority: int | None = None,
        now: float | None = None,
    ) -> None:
        _check_key(key)
        if requeue_after is not None:
            requeue_after = _check_delay("requeue_after", requeue_after)
        rec = self._running.get(key)
        if rec is None:
            raise KeyError(f"done(): key {key!r} is not in flight")
        now = self._tick(now)
        del self._running[key]
        group = rec.group
        if group is not None:
            was_held = self._held(group)
            self._group_in_flight[group] -= 1
            if not self._group_in_flight[group]:
                del self._group_in_flight[group]
            if was_held and not self._held(group):
                self._release(group)
        self._work_duration.observe(now - rec.at)
        self._counters["done"] += 1
        if failed:
            rec.failures += 1
            self._counters["failures"] += 1
        else:
            rec.failures = 0
        prio = rec.priority if priority is None else priority
        schedule: _Schedule | None
        if rec.follow_up is not None:
            schedule = rec.follow_up
            if requeue_after is not None:
                schedule = schedule.merge_time(now + requeue_after)
            prio = max(prio, rec.follow_up_priority)
            rec.follow_up = None
            self._counts["dirty"] -= 1
        elif requeue_after is not None:
            schedule = _Schedule(now + requeue_after)
        elif failed:
            self._counters["retries"] += 1
            delay = backoff_delay(self.backoff_base, self.backoff_max, rec.failures, self._rng)
            schedule = _Schedule(now + delay)
        else:
            schedule = None
        if schedule is None:
            del self._records[key]
            return
        self._counters["requeues"] += 1
        rec.priority = prio
        self._enqueue(rec, schedule, now)

    def set_group_weight(self, group: str, weight: int) -> None:
        name = _check_group(_check_key(group, "group"))
        assert name is not None
        if _check_weight(name, weight) == 1:
            self._weights.pop(name, None)
        else:
            self._weights[name] = weight

    def set_group_concurrency(self, group: str, cap: int | None) -> None:
        name = _check_group(_check_key(group, "group"))
        assert name is not None
        was_held = self._held(name)
        if cap is None:
            self._group_caps.pop(name, None)
        else:
            self._group_caps[name] = _check_group_concurrency(cap)
        if self._held(name) and not was_held:
            self._hold(name)
        elif was_held and not self._held(name):
            self._release(name)
        if self._waker is not None:
            self._waker()

    def _set_waker(self, waker: Callable[[], object] | None, /) -> None:
        """As the Rust scheduler's: `waker()` after each `set_group_concurrency`."""
        if waker is not None and not callable(waker):
            raise TypeError(f"waker must be callable or None, not {type(waker).__name__}")
        self._waker = waker

    def group_concurrency_of(self, group: str) -> int:
        return self._group_caps.get(_check_key(group, "group"), self.group_concurrency)

    def group_weight(self, group: str) -> int:
        return self._weights.get(_check_key(group, "group"), 1)

    def group_of(self, key: str) -> str | None:
        rec = self._records.get(_check_key(key))
        return None if rec is None else rec.group

    def done_many(self, keys: Iterable[str], *, now: float | None = None) -> None:
        if isinstance(keys, str):
            raise TypeError("done_many() takes an iterable of str keys, not a str")
        keys = list(keys)
        for i, key in enumerate(keys):
            _check_key(key, f"done_many() key at index {i}")
        now = self._tick(now)
        for key in keys:
            if key not in self._running:
                raise KeyError(f"done_many(): key {key!r} is not in flight")
            self.done(key, now=now)

    def forget(self, key: str) -> None:
        rec = self._records.get(_check_key(key))
        if rec is not None:
            rec.failures = 0

    def failures(self, key: str) -> int:
        rec = self._records.get(_check_key(key))
        return 0 if rec is None else rec.failures

    def next_ready_at(self) -> float | None:
        rec = self._oldest_servable()
        if rec is not None:
            return rec.at
        while self._waiting:
            at, seq, key = self._waiting[0]
            w = self._records.get(key)
            if w is not None and w.state == "waiting" and w.seq == seq and w.at == at:
                return at
            heapq.heappop(self._waiting)
        return None

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def is_in_flight(self, key: str) -> bool:
        return _check_key(key) in self._running

    def __contains__(self, key: str) -> bool:
        rec = self._records.get(_check_key(key))
        return rec is not None and (rec.state != "running" or rec.follow_up is not None)

    def __len__(self) -> int:
        return self._counts["ready"] + self._counts["waiting"] + self._counts["dirty"]

    def stats(self, *, now: float | None = None) -> SchedulerStats:
        now = self._tick(now)
        oldest = self._oldest_servable()
        running = [now - rec.at for rec in self._running.values()]
        unfinished = 0.0
        for seconds in running:
            unfinished += seconds
        c = self._counters
        return {
            "depth": self._counts["ready"],
            "waiting": self._counts["waiting"],
            "in_flight": len(self._running),
            "dirty": self._counts["dirty"],
            "len": len(self),
            "adds_total": c["adds"],
            "merges_total": c["merges"],
            "retries_total": c["retries"],
            "requeues_total": c["requeues"],
            "pops_total": c["pops"],
            "done_total": c["done"],
            "failures_total": c["failures"],
            "oldest_ready_age": 0.0 if oldest is None else now - oldest.at,
            "longest_running": running[0] if running else 0.0,
            "unfinished_work": unfinished,
            "queue_duration": self._queue_duration.snapshot(),
            "work_duration": self._work_duration.snapshot(),
        }

    def _check_consistency(self) -> None:
        """Check that the state counts match the records (O(n)); raises AssertionError."""
        states = [rec.state for rec in self._records.values()]
        dirty = sum(rec.follow_up is not None for rec in self._running.values())
        assert states.count("ready") == self._counts["ready"], "ready count"
        assert states.count("waiting") == self._counts["waiting"], "waiting count"
        assert states.count("running") == len(self._running), "in-flight count"
        assert dirty == self._counts["dirty"], "dirty count"
        assert all(self._records[k] is rec for k, rec in self._running.items()), "in flight"
        ready: dict[int, dict[str | None, int]] = {}
        for rec in self._records.values():
            if rec.state == "ready":
                per_group = ready.setdefault(rec.priority, {})
                per_group[rec.group] = per_group.get(rec.group, 0) + 1
        assert {p: level.counts for p, level in self._levels.items()} == ready, "group counts"
        flying: dict[str, int] = {}
        for rec in self._running.values():
            if rec.group is not None:
                flying[rec.group] = flying.get(rec.group, 0) + 1
        assert flying == self._group_in_flight, "in-flight counts per group"
        for level in self._levels.values():
            servable = {g for g in level.counts if not self._held(g)}
            assert len(level.ring) == len(set(level.ring)) == len(servable), "group ring"
            assert set(level.ring) == servable, "group ring"
            assert not level.ring or level.turn >= 1, "front group turn"

    def __repr__(self) -> str:
        return (
            f"<ModelScheduler len={len(self)} in_flight={self.in_flight} "
            f"concurrency={self.concurrency}>"
        )
