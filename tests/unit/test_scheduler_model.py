"""The Rust scheduler against the pure-Python model (`fastctl.testing.model`): Hypothesis
drives both with the same random operations and explicit times, and after every step they
must agree on every result and every observable: return values, `len`, `in_flight`,
`next_ready_at`, membership, failure counts, and `stats()` (counters, ages, histograms), bit
for bit.

Agreement alone would pass a misreading of the rules shared by both, so the machine also
checks two of the applier's rules on its own bookkeeping, not on either implementation's:

- no head-of-line blocking (rule 4): with a free slot, a key the test made due at once
  (added with no delay and no debounce while not in flight) is never held back: `pop`
  returns a key, `pop_many(n)` at least as many as such keys and free slots allow; with a
  cap on keys in flight per group (`group_concurrency`, or a group's own), each named
  group's due keys count only up to the room its cap leaves, so a held group never holds up
  another's key;
- the group cap: no key is handed out while its group has its cap in flight (each key's
  group as the test recorded it when the key got its record, the caps as the test set
  them), so no group goes above its cap (one can stay above a cap lowered meanwhile);
- one slot per object, exactly one follow-up (rule 5): a key is never handed out twice;
  after `done`, it is queued again if and only if it was triggered while in flight, failed,
  or was requeued, and a follow-up triggered with no delay is due at once.

Times are sometimes passed slightly in the past, to exercise the never-backwards clock.

Each run checks FASTCTL_SCHEDULER_EXAMPLES sequences (default 1000); a longer hunt is
``FASTCTL_SCHEDULER_EXAMPLES=20000 python -m pytest tests/unit/test_scheduler_model.py``.
Sequences it found are replayed step by step below the machine.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fastctl import Scheduler
from fastctl.testing.model import ModelScheduler

EXAMPLES = int(os.environ.get("FASTCTL_SCHEDULER_EXAMPLES", "1000"))
KEYS = [f"ns/k{i}" for i in range(6)]
keys = st.sampled_from(KEYS)
# Dyadic steps keep many times exactly equal (ties matter); 0.1 adds rounding.
delays = st.sampled_from([0.0, 0.0, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 7.5, 40.0, math.inf])
priorities = st.sampled_from([0, 0, 0, 1, 5, -1, -100])
skews = st.sampled_from([0.0, 0.0, 0.0, 0.0, -0.25, -3.0])
GROUPS = ["g1", "g2", "g3"]
# Fair groups: mostly named, so rings of several groups form at one priority.
groups = st.sampled_from([None, "g1", "g2", "g2", "g3", "g3"])
weights = st.sampled_from([1, 1, 2, 3])


class SchedulerAgreesWithModel(RuleBasedStateMachine):
    rust: Scheduler
    model: ModelScheduler

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.running: set[str] = set()
        self.instant = False  # no debounce: a trigger with no delay is due at once
        self.due: set[str] = set()  # keys the test made due at once, not popped since
        self.dirty: set[str] = set()  # in flight, and triggered since they were popped
        self.dirty_now: set[str] = set()  # ...with no delay
        self.cap = 0  # group_concurrency
        self.caps: dict[str, int] = {}  # groups' own caps
        self.group_of: dict[str, str | None] = {}  # each key with a record: its group

    @initialize(
        concurrency=st.sampled_from([0, 0, 1, 2, 3]),
        debounce=st.sampled_from([0.0, 0.0, 0.5, 1.0]),
        debounce_factor=st.sampled_from([None, 1.0, 3.0]),
        max_wait=st.sampled_from([0.0, 1.0, 5.0, 30.0, math.inf]),
        backoff_base=st.sampled_from([0.005, 0.5, 2.0]),
        backoff_max=st.sampled_from([1.0, 300.0]),
        seed=st.integers(0, 2**64 - 1),
        group_weights=st.dictionaries(st.sampled_from(GROUPS), weights, max_size=3),
        group_concurrency=st.sampled_from([0, 0, 1, 2]),
    )
    def create(
        self,
        concurrency: int,
        debounce: float,
        debounce_factor: float | None,
        max_wait: float,
        backoff_base: float,
        backoff_max: float,
        seed: int,
        group_weights: dict[str, int],
        group_concurrency: int,
    ) -> None:
        config: dict[str, Any] = {
            "concurrency": concurrency,
            "debounce": debounce,
            "debounce_max": None if debounce_factor is None else debounce * debounce_factor,
            "max_wait": max_wait,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
            "seed": seed,
            "group_weights": group_weights,
            "group_concurrency": group_concurrency,
        }
        self.rust = Scheduler(**config)
        self.model = ModelScheduler(**config)
        self.instant = debounce == 0
        self.cap = group_concurrency

    def triggered(self, keys: list[str], after: float, group: str | None) -> None:
        """Note triggers of `keys` with delay `after` (the test's own record); a key
        without a record gets `group`."""
        for key in keys:
            self.group_of.setdefault(key, group)
            if key in self.running:
                self.dirty.add(key)
                if after == 0 and self.instant:
                    self.dirty_now.add(key)
            elif after == 0 and self.instant:
                self.due.add(key)

    def free_slots(self) -> float:
        limit = self.rust.concurrency
        return math.inf if not limit else limit - len(self.running)

    def cap_of(self, group: str | None) -> int:
        """The cap of `group` as the test set it (0: none)."""
        return 0 if group is None else self.caps.get(group, self.cap)

    def servable_due(self) -> int:
        """How many of the keys made due at once a pop must hand out, slots allowing: all,
        but a named group's only up to the room its cap leaves (a pop may also spend that
        room on other ready keys of the group: it still counts as that many)."""
        due = Counter(self.group_of[key] for key in self.due)
        flying = Counter(self.group_of[key] for key in self.running)
        total = 0
        for group, n in due.items():
            cap = self.cap_of(group)
            total += min(n, max(0, cap - flying[group])) if cap else n
        return total

    def popped(self, got: list[str], asked: float) -> None:
        """Rule 4: with free slots, the keys made due at once are handed out (each group's
        up to its cap); and no key is handed out while its group has its cap in flight."""
        need = min(asked, self.free_slots(), self.servable_due())
        assert len(got) >= need, (
            f"popped {got} of {sorted(self.due)} due with {self.free_slots()} free slots"
        )
        flying = Counter(self.group_of[key] for key in self.running)
        for key in got:
            group = self.group_of[key]
            cap = self.cap_of(group)
            assert not cap or flying[group] < cap, f"{key} popped with {group} at its cap {cap}"
            flying[group] += 1
        for key in got:
            assert key not in self.running, f"{key} handed out twice"
            self.running.add(key)
            self.due.discard(key)

    def at(self, skew: float) -> float:
        return self.now + skew

    @rule(dt=st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 3.0, 31.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(key=keys, after=delays, priority=priorities, group=groups, skew=skews)
    def add(self, key: str, after: float, priority: int, group: str | None, skew: float) -> None:
        now = self.at(skew)
        self.rust.add(key, after=after, priority=priority, group=group, now=now)
        self.model.add(key, after=after, priority=priority, group=group, now=now)
        self.triggered([key], after, group)

    @rule(batch=st.lists(keys, max_size=5), after=delays, priority=priorities, group=groups)
    def add_many(self, batch: list[str], after: float, priority: int, group: str | None) -> None:
        self.rust.add_many(batch, after=after, priority=priority, group=group, now=self.now)
        self.model.add_many(batch, after=after, priority=priority, group=group, now=self.now)
        self.triggered(batch, after, group)

    @rule(group=st.sampled_from(GROUPS), weight=weights)
    def set_group_weight(self, group: str, weight: int) -> None:
        self.rust.set_group_weight(group, weight)
        self.model.set_group_weight(group, weight)

    @rule(group=st.sampled_from(GROUPS), cap=st.sampled_from([None, 0, 1, 2]))
    def set_group_concurrency(self, group: str, cap: int | None) -> None:
        self.rust.set_group_concurrency(group, cap)
        self.model.set_group_concurrency(group, cap)
        if cap is None:
            self.caps.pop(group, None)
        else:
            self.caps[group] = cap

    @rule(skew=skews)
    def pop(self, skew: float) -> None:
        now = self.at(skew)
        got = self.rust.pop(now=now)
        assert got == self.model.pop(now=now)
        self.popped([] if got is None else [got], asked=1)

    @rule(n=st.integers(0, 4))
    def pop_many(self, n: int) -> None:
        got = self.rust.pop_many(n, now=self.now)
        assert got == self.model.pop_many(n, now=self.now)
        assert len(got) == len(set(got))
        self.popped(got, asked=n)

    @precondition(lambda self: self.running)
    @rule(
        data=st.data(),
        requeue_after=st.one_of(st.none(), delays),
        failed=st.booleans(),
        priority=st.one_of(st.none(), priorities),
        skew=skews,
    )
    def done(
        self,
        data: st.DataObject,
        requeue_after: float | None,
        failed: bool,
        priority: int | None,
        skew: float,
    ) -> None:
        key = data.draw(st.sampled_from(sorted(self.running)))
        now = self.at(skew)
        kwargs: dict[str, Any] = {
            "requeue_after": requeue_after,
            "failed": failed,
            "priority": priority,
            "now": now,
        }
        self.rust.done(key, **kwargs)
        self.model.done(key, **kwargs)
        self.running.discard(key)
        # Rule 5: queued again iff triggered meanwhile, failed or requeued; once.
        queued = key in self.dirty or failed or requeue_after is not None
        assert (key in self.rust) == (key in self.model) == queued, (key, kwargs)
        if not queued:
            del self.group_of[key]  # the record is dropped
        if key in self.dirty_now:
            self.due.add(key)
        self.dirty.discard(key)
        self.dirty_now.discard(key)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), stray=st.one_of(st.none(), keys), skew=skews)
    def done_many(self, data: st.DataObject, stray: str | None, skew: float) -> None:
        """A batch of in-flight keys, sometimes with a `stray` key put in its middle: if
        it is not in flight (or repeats one already done), both stop there with KeyError."""
        batch = data.draw(st.lists(st.sampled_from(sorted(self.running)), unique=True))
        if stray is not None:
            batch.insert(len(batch) // 2, stray)
        now = self.at(skew)
        errors = []
        for impl in (self.rust, self.model):
            try:
                impl.done_many(batch, now=now)
            except KeyError as exc:
                errors.append(exc.args[0])
        assert len(errors) in (0, 2), errors
        assert errors[:1] == errors[1:], errors
        # Expected: done in order, stopping at the first key no longer in flight.
        ended: list[str] = []
        for key in batch:
            if key not in self.running or key in ended:
                assert errors == [f"done_many(): key {key!r} is not in flight"] * 2
                break
            ended.append(key)
        else:
            assert not errors, errors
        for key in ended:
            self.running.discard(key)
            assert (key in self.rust) == (key in self.model) == (key in self.dirty), key
            if key not in self.dirty:
                del self.group_of[key]
            if key in self.dirty_now:
                self.due.add(key)
            self.dirty.discard(key)
            self.dirty_now.discard(key)

    @rule(key=keys)
    def done_not_in_flight(self, key: str) -> None:
        if key in self.running:
            return
        with pytest.raises(KeyError, match="not in flight"):
            self.rust.done(key, now=self.now)
        with pytest.raises(KeyError, match="not in flight"):
            self.model.done(key, now=self.now)

    @rule(key=keys)
    def forget(self, key: str) -> None:
        self.rust.forget(key)
        self.model.forget(key)

    @rule(skew=skews)
    def stats(self, skew: float) -> None:
        now = self.at(skew)
        assert self.rust.stats(now=now) == self.model.stats(now=now)

    @invariant()
    def agree(self) -> None:
        rust, model = self.rust, self.model
        assert len(rust) == len(model)
        assert rust.in_flight == model.in_flight == len(self.running)
        assert rust.next_ready_at() == model.next_ready_at()
        for key in KEYS:
            assert (key in rust) == (key in model), key
            assert rust.is_in_flight(key) == model.is_in_flight(key) == (key in self.running)
            assert rust.failures(key) == model.failures(key), key
            assert rust.group_of(key) == model.group_of(key), key
        for group in GROUPS:
            assert rust.group_weight(group) == model.group_weight(group), group
        if rust.concurrency:
            assert rust.in_flight <= rust.concurrency
        assert rust.group_concurrency == model.group_concurrency == self.cap
        for group in GROUPS:
            cap = self.cap_of(group)
            assert rust.group_concurrency_of(group) == model.group_concurrency_of(group) == cap
        for key in KEYS:
            assert rust.group_of(key) == self.group_of.get(key), key
        rust._check_consistency()
        model._check_consistency()


SchedulerAgreesWithModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_scheduler_agrees_with_model = SchedulerAgreesWithModel.TestCase


def test_an_older_key_raised_into_a_group_is_its_head() -> None:
    """A sequence the machine found, replayed step by step: keys of group g1 raised out of
    order to priority 0 (a re-add naming no group keeps the key's group) left g1's queue
    there holding only a key raised in below its back; the older k0 raised in next is g1's
    first key, and the level's oldest, which the Rust core did not record."""
    state = SchedulerAgreesWithModel()
    state.create(
        concurrency=0,
        debounce=0.0,
        debounce_factor=None,
        max_wait=0.0,
        backoff_base=0.005,
        backoff_max=1.0,
        seed=0,
        group_weights={},
        group_concurrency=0,
    )
    state.agree()
    state.add_many(after=0.0, batch=["ns/k0", "ns/k3", "ns/k5"], group="g1", priority=-1)
    state.agree()
    state.add_many(after=0.0, batch=["ns/k5", "ns/k3"], group=None, priority=0)
    state.agree()
    state.add_many(after=0.0, batch=["ns/k5"], group=None, priority=1)
    state.agree()
    state.add_many(after=0.0, batch=["ns/k0"], group=None, priority=0)
    state.agree()
    state.pop_many(n=4)
    state.agree()
    state.teardown()


def test_backoff_delays_are_bit_identical() -> None:
    """Same seed, same failures: the same delays to the last bit."""
    for seed in (0, 1, 2**63, 2**64 - 1):
        rust, model = Scheduler(seed=seed), ModelScheduler(seed=seed)
        for s in (rust, model):
            s.add("k", now=0.0)
        now = 0.0
        for _ in range(30):
            for s in (rust, model):
                assert s.pop(now=now) == "k"
                s.done("k", failed=True, now=now)
            got = rust.next_ready_at()
            assert got is not None
            assert got == model.next_ready_at()
            now = got
