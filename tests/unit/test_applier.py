"""The applier against the rules of docs/contract.md, on the real Rust scheduler.

Every test records what ran when and checks the rules on that record, rather than trusting
the implementation's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

import fastctl
from fastctl import Action, ObjectRef, ReconcileResult, Scheduler, Trigger
from fastctl._applier import DEFAULT_CONCURRENCY, ApplierConfig, applier
from fastctl.errors import ReconcileCancelled, ReconcileTimeout

pytestmark = pytest.mark.timeout(120)


class Feed:
    """A trigger source the test pushes into; `close()` ends it. `taken` notes, per key,
    when the applier last took a trigger in (a trigger only counts from then)."""

    _END = object()

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.taken: dict[str, float] = {}

    def put(self, item: ObjectRef | Trigger) -> None:
        self.queue.put_nowait(item)

    def close(self) -> None:
        self.queue.put_nowait(self._END)

    def __aiter__(self) -> AsyncIterator[ObjectRef | Trigger]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ObjectRef | Trigger]:
        while True:
            item = await self.queue.get()
            if item is self._END:
                return
            self.taken[item.key if isinstance(item, ObjectRef) else item.ref.key] = time.monotonic()
            yield item


@dataclass
class Recorder:
    """Records (key, start, end) of every reconcile and the live count of running ones."""

    spans: list[tuple[str, float, float]] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    now_running: int = 0
    max_running: int = 0
    overlaps: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def span(self, key: str) -> Iterator[None]:
        start = time.monotonic()
        self.running[key] += 1
        if self.running[key] > 1:
            self.overlaps.append(key)
        self.now_running += 1
        self.max_running = max(self.max_running, self.now_running)
        try:
            yield
        finally:
            self.running[key] -= 1
            self.now_running -= 1
            self.spans.append((key, start, time.monotonic()))

    def assert_no_overlap(self) -> None:
        assert not self.overlaps
        by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for key, start, end in self.spans:
            by_key[key].append((start, end))
        for key, spans in by_key.items():
            spans.sort()
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert start >= end, f"two reconciles of {key} overlapped"


def refs(n: int, namespace: str = "ns") -> list[ObjectRef]:
    return [ObjectRef(f"obj-{i}", namespace) for i in range(n)]


def store_of(items: list[ObjectRef], version: int = 0) -> dict[ObjectRef, dict[str, Any]]:
    return {ref: {"name": ref.name, "version": version} for ref in items}


async def collect(it: AsyncIterator[ReconcileResult]) -> list[ReconcileResult]:
    return [result async for result in it]


async def from_list(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def run(
    reconcile: Any,
    store: Mapping[ObjectRef, Any],
    items: list[Any],
    until: int,
    error_policy: Any = None,
    context: Any = None,
    **kwargs: Any,
) -> list[ReconcileResult]:
    """Trigger `items`, then end the triggers once `until` results have arrived (ending them
    earlier would stop the applier from starting the rest: that is the graceful shutdown)."""
    feed = Feed()
    for item in items:
        feed.put(item)
    results: list[ReconcileResult] = []
    async for result in applier(reconcile, error_policy, context, store, feed, **kwargs):
        results.append(result)
        if len(results) == until:
            feed.close()
    return results


async def wait_for(predicate: Any, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


# -- rule 1 and 2 under stress ---------------------------------------------------------------


async def test_stress_never_two_at_once_and_limit_reached() -> None:
    """20,000 triggers over 500 keys whose objects change with every trigger: never two
    reconciles of a key at once, exactly `limit` at once at the peak, and every key's last
    reconcile starts after its last trigger was taken in and sees its final version."""
    rng = random.Random(1)
    keys = refs(500)
    store = store_of(keys)
    rec = Recorder()
    seen: dict[str, int] = {}  # the version each key's latest reconcile read
    limit = 16

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        key = f"ns/{obj['name']}"
        with rec.span(key):
            seen[key] = obj["version"]
            await asyncio.sleep(rng.random() * 0.002)

    feed = Feed()

    async def produce() -> None:
        for i in range(20_000):
            ref = rng.choice(keys)
            store[ref] = {"name": ref.name, "version": i + 1}
            feed.put(ref)
            if i % 200 == 0:
                await asyncio.sleep(0.01)
        await wait_for(lambda: feed.queue.empty())  # every trigger taken in
        # Drain: wait until nothing is running any more, then end the triggers.
        await wait_for(lambda: rec.now_running == 0 and sched.in_flight == 0 and len(sched) == 0)
        feed.close()

    sched = Scheduler(concurrency=limit)
    producer = asyncio.create_task(produce())
    results = await collect(
        applier(reconcile, None, None, store, feed, concurrency=limit, scheduler=sched)
    )
    await producer

    rec.assert_no_overlap()
    assert rec.max_running == limit
    assert len(results) == len(rec.spans)
    assert all(r.ok for r in results)
    # No lost trigger: every key's last reconcile started after its last trigger was taken
    # in, and read the object as the last trigger left it.
    last_start: dict[str, float] = {}
    for key, start, _ in rec.spans:
        last_start[key] = max(start, last_start.get(key, 0.0))
    assert set(last_start) == set(feed.taken)
    for key, at in feed.taken.items():
        assert last_start[key] >= at, f"the last trigger of {key} was lost"
    assert seen == {ref.key: store[ref]["version"] for ref in keys if ref.key in feed.taken}
    assert sched.in_flight == 0


async def test_triggers_during_a_reconcile_give_exactly_one_follow_up_with_latest_state() -> None:
    ref = ObjectRef("a", "ns")
    store = {ref: {"name": "a", "version": 0}}
    feed = Feed()
    started = asyncio.Event()
    release = asyncio.Event()
    seen: list[int] = []

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        seen.append(obj["version"])
        if len(seen) == 1:
            started.set()
            await release.wait()

    async def drive() -> None:
        feed.put(ref)
        await started.wait()
        for version in range(1, 51):
            store[ref] = {"name": "a", "version": version}
            feed.put(ref)
            await asyncio.sleep(0)
        release.set()
        await wait_for(lambda: len(seen) >= 2)
        await asyncio.sleep(0.05)  # a second follow-up would start within this
        feed.close()

    driver = asyncio.create_task(drive())
    results = await collect(applier(reconcile, None, None, store, feed))
    await driver
    assert seen == [0, 50]
    assert len(results) == 2


# -- rule 4 ----------------------------------------------------------------------------------


async def test_no_head_of_line_blocking() -> None:
    keys = refs(1001)
    blocked = keys[0]
    store = store_of(keys)
    unblock = asyncio.Event()
    done: set[str] = set()
    blocked_runs = 0

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        nonlocal blocked_runs
        if obj["name"] == blocked.name:
            await unblock.wait()
            blocked_runs += 1
        done.add(obj["name"])

    async def drive() -> None:
        feed.put(blocked)
        await asyncio.sleep(0.01)
        for ref in keys[1:]:
            feed.put(ref)
        # The blocked key is re-triggered too: it must not hold anything up either.
        feed.put(blocked)
        await wait_for(lambda: len(done) == 1000)
        assert blocked.name not in done
        unblock.set()
        await wait_for(lambda: blocked_runs == 2)
        await asyncio.sleep(0.02)
        feed.close()

    feed = Feed()
    driver = asyncio.create_task(drive())
    results = await collect(applier(reconcile, None, None, store, feed, concurrency=4))
    await driver
    assert len(done) == 1001
    # The blocked key ran once, then once more for the trigger that came while it ran.
    assert sum(r.ref == blocked for r in results) == 2


# -- actions, errors, timeouts ---------------------------------------------------------------


async def test_requeue_after_runs_again_and_await_change_does_not() -> None:
    a, b = ObjectRef("a"), ObjectRef("b")
    store = store_of([a, b])
    runs: dict[str, list[float]] = defaultdict(list)

    async def reconcile(obj: dict[str, Any], ctx: None) -> Action | None:
        runs[obj["name"]].append(time.monotonic())
        if obj["name"] == "a" and len(runs["a"]) < 3:
            return Action.requeue(0.05)
        return None if obj["name"] == "b" else Action.await_change()

    feed = Feed()
    feed.put(a)
    feed.put(b)

    async def stop_later() -> None:
        await wait_for(lambda: len(runs["a"]) == 3)
        await asyncio.sleep(0.15)
        feed.close()

    stopper = asyncio.create_task(stop_later())
    results = await collect(applier(reconcile, None, None, store, feed))
    await stopper
    assert len(runs["a"]) == 3
    assert len(runs["b"]) == 1
    gaps = [t2 - t1 for t1, t2 in zip(runs["a"], runs["a"][1:], strict=False)]
    assert all(gap >= 0.05 for gap in gaps)
    assert [r.action.requeue_after for r in results if r.ref == a] == [0.05, 0.05, None]


async def test_error_policy_receives_the_exception_and_decides_the_retry() -> None:
    ref = ObjectRef("a")
    store = store_of([ref])
    seen: list[tuple[Any, BaseException, Any]] = []
    attempts = 0

    async def reconcile(obj: dict[str, Any], ctx: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError(f"boom {attempts}")

    def error_policy(obj: Any, exc: BaseException, ctx: str) -> Action:
        seen.append((obj, exc, ctx))
        return Action.requeue(0.01)

    feed = Feed()
    feed.put(ref)

    async def stop_later() -> None:
        await wait_for(lambda: attempts == 3)
        feed.close()

    stopper = asyncio.create_task(stop_later())
    results = await collect(applier(reconcile, error_policy, "the-ctx", store, feed))
    await stopper
    assert [str(exc) for _, exc, _ in seen] == ["boom 1", "boom 2"]
    assert all(ctx == "the-ctx" and obj == store[ref] for obj, _, ctx in seen)
    assert [r.ok for r in results] == [False, False, True]
    assert isinstance(results[0].error, RuntimeError)


@pytest.mark.parametrize(
    ("policy_fails", "logged"),
    [
        ("raise", "RuntimeError: the policy broke"),
        ("wrong type", "error_policy returned int (42); expected fastctl.Action"),
    ],
)
async def test_an_error_policy_that_fails_falls_back_to_the_default_backoff(
    policy_fails: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    ref = ObjectRef("a")
    sched = Scheduler(backoff_base=0.001, backoff_max=0.002)
    attempts = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise KeyError("first attempt")

    def error_policy(obj: Any, exc: BaseException, ctx: None) -> Any:
        if policy_fails == "raise":
            raise RuntimeError("the policy broke")
        return 42

    results = await run(reconcile, store_of([ref]), [ref], 2, error_policy, scheduler=sched)
    assert isinstance(results[0].error, KeyError)  # the reconcile's error, not the policy's
    assert results[0].action == Action(None)  # the scheduler's backoff decided the retry
    assert results[1].ok  # ...and it came
    assert attempts == 2
    assert sched.stats()["retries_total"] == 1
    assert "error_policy failed for a; using the default backoff" in caplog.text
    assert logged in caplog.text


async def test_default_backoff_grows_and_resets_on_success() -> None:
    ref = ObjectRef("a")
    store = store_of([ref])
    starts: list[float] = []
    fail_until = 5  # runs 1-4 fail, 5 succeeds and requeues, 6 fails again, 7 succeeds

    async def reconcile(obj: dict[str, Any], ctx: None) -> Action | None:
        starts.append(time.monotonic())
        n = len(starts)
        if n < fail_until or n == fail_until + 1:
            raise ValueError(f"attempt {n}")
        return Action.requeue(0.0) if n == fail_until else None

    feed = Feed()
    feed.put(ref)

    async def stop_later() -> None:
        await wait_for(lambda: len(starts) == fail_until + 2)
        feed.close()

    stopper = asyncio.create_task(stop_later())
    sched = Scheduler(backoff_base=0.02, backoff_max=10.0)
    await collect(applier(reconcile, None, None, store, feed, scheduler=sched))
    await stopper
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Backoff after failures 1, 2, 3: 0.02, 0.04, 0.08 s, each with jitter in [0.8, 1.2].
    for gap, expected in zip(gaps[:3], [0.02, 0.04, 0.08], strict=True):
        assert gap >= expected * 0.8
    assert gaps[2] > gaps[0]
    # After the success, the next failure waits the first step again, not the fifth.
    assert gaps[fail_until] < 0.02 * 16 * 0.8


async def test_wrong_return_type_is_an_error_that_says_what_was_returned() -> None:
    ref = ObjectRef("a")

    async def reconcile(obj: Any, ctx: None) -> Any:
        return 42

    results = await run(reconcile, store_of([ref]), [ref], until=1)
    assert len(results) == 1
    error = results[0].error
    assert isinstance(error, TypeError)
    assert "returned int (42)" in str(error)
    assert "fastctl.Action" in str(error)


async def test_timeout_counts_as_error_and_releases_the_slot() -> None:
    ref = ObjectRef("slow")
    sched = Scheduler()
    cancelled = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def error_policy(obj: Any, exc: BaseException, ctx: None) -> Action:
        return Action.await_change()

    results = await run(
        reconcile, store_of([ref]), [ref], 1, error_policy, timeout=0.05, scheduler=sched
    )
    assert cancelled.is_set()
    assert len(results) == 1
    assert isinstance(results[0].error, ReconcileTimeout)
    assert isinstance(results[0].error, TimeoutError)
    assert "timeout of 0.05 s" in str(results[0].error)
    assert sched.in_flight == 0


async def test_no_slot_leaks_after_exceptions_cancellations_and_timeouts() -> None:
    keys = refs(60)
    sched = Scheduler(concurrency=8, backoff_base=0.001)
    kinds = ["raise", "cancel-self", "timeout", "base-exc", "ok"]

    class Custom(BaseException):
        pass

    async def reconcile(obj: Any, ctx: None) -> None:
        kind = kinds[int(obj["name"].split("-")[1]) % len(kinds)]
        if kind == "raise":
            raise KeyError("missing")
        if kind == "cancel-self":
            raise asyncio.CancelledError
        if kind == "timeout":
            await asyncio.sleep(5)
        if kind == "base-exc":
            raise Custom

    def error_policy(obj: Any, exc: BaseException, ctx: None) -> Action:
        return Action.await_change()

    results = await run(
        reconcile,
        store_of(keys),
        keys,
        60,
        error_policy,
        concurrency=8,
        timeout=0.02,
        scheduler=sched,
    )
    assert len(results) == 60
    assert sched.in_flight == 0
    expected: dict[str, type[BaseException] | None] = {
        "raise": KeyError,
        "cancel-self": ReconcileCancelled,
        "timeout": ReconcileTimeout,
        "base-exc": Custom,
        "ok": None,
    }
    by_kind: dict[str, list[type[BaseException] | None]] = defaultdict(list)
    for result in results:
        kind = kinds[int(result.ref.name.split("-")[1]) % len(kinds)]
        by_kind[kind].append(type(result.error) if result.error is not None else None)
    assert by_kind == {kind: [error] * 12 for kind, error in expected.items()}


async def test_cancelling_the_iteration_cancels_running_reconciles() -> None:
    keys = refs(10)
    sched = Scheduler(concurrency=4)
    started = 0
    cancelled = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal started, cancelled
        started += 1
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    task = asyncio.create_task(
        collect(
            applier(reconcile, None, None, store_of(keys), feed, concurrency=4, scheduler=sched)
        )
    )
    await wait_for(lambda: started == 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == 4
    assert sched.in_flight == 0


async def test_ending_the_triggers_drains_gracefully_and_starts_nothing_new() -> None:
    keys = refs(10)
    started: list[str] = []
    finished: list[str] = []
    sched = Scheduler(concurrency=4)

    async def reconcile(obj: Any, ctx: None) -> None:
        started.append(obj["name"])
        await asyncio.sleep(0.05)
        finished.append(obj["name"])

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    task = asyncio.create_task(
        collect(
            applier(reconcile, None, None, store_of(keys), feed, concurrency=4, scheduler=sched)
        )
    )
    await wait_for(lambda: len(started) == 4)
    feed.close()
    results = await task
    # The four running ones finished; the six still queued were never begun.
    assert sorted(finished) == sorted(started)
    assert len(started) == 4
    assert len(results) == 4
    assert all(r.ok for r in results)
    assert sched.in_flight == 0


# -- rule 3 ----------------------------------------------------------------------------------


async def test_two_appliers_reconcile_the_same_object_at_the_same_time() -> None:
    ref = ObjectRef("shared", "ns")
    store = store_of([ref])
    inside: set[str] = set()
    both_inside = asyncio.Event()

    def reconcile_as(name: str) -> Any:
        async def reconcile(obj: Any, ctx: None) -> None:
            inside.add(name)
            if len(inside) == 2:
                both_inside.set()
            await asyncio.wait_for(both_inside.wait(), timeout=5)

        return reconcile

    first, second = await asyncio.gather(
        run(reconcile_as("one"), store, [ref], 1),
        run(reconcile_as("two"), store, [ref], 1),
    )
    assert both_inside.is_set()
    assert first[0].ok
    assert second[0].ok


# -- readiness -------------------------------------------------------------------------------


class LateStore(Mapping[ObjectRef, Any]):
    """A store that becomes ready when the test says so (like a reflector's first list)."""

    def __init__(self, data: dict[ObjectRef, Any]) -> None:
        self.data = data
        self.ready = asyncio.Event()

    @property
    def is_ready(self) -> bool:
        return self.ready.is_set()

    async def wait_ready(self) -> None:
        await self.ready.wait()

    def __getitem__(self, key: ObjectRef) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


async def test_triggers_before_the_store_is_ready_are_deduplicated_and_run_once_ready() -> None:
    keys = refs(3)
    store = LateStore(store_of(keys))
    runs: list[str] = []
    sched = Scheduler()

    async def reconcile(obj: Any, ctx: None) -> None:
        runs.append(obj["name"])

    feed = Feed()

    async def drive() -> None:
        for _ in range(100):
            for ref in keys:
                feed.put(ref)
        await wait_for(lambda: len(sched) == 3)
        await asyncio.sleep(0.05)
        assert runs == []  # nothing runs before the store is ready
        store.ready.set()
        await wait_for(lambda: len(runs) == 3)
        await asyncio.sleep(0.05)
        feed.close()

    driver = asyncio.create_task(drive())
    await collect(applier(reconcile, None, None, store, feed, scheduler=sched))
    await driver
    assert sorted(runs) == ["obj-0", "obj-1", "obj-2"]


async def test_an_object_missing_from_the_store_is_not_reconciled() -> None:
    present, missing = ObjectRef("here"), ObjectRef("gone")
    sched = Scheduler()
    runs: list[str] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        runs.append(obj["name"])

    results = await run(reconcile, store_of([present]), [missing, present], 1, scheduler=sched)
    assert runs == ["here"]
    assert [r.ref for r in results] == [present]
    assert sched.in_flight == 0
    assert missing.key not in sched


# -- no deadlock with constant requeues (kube-rs #926) ----------------------------------------


async def test_5000_always_requeueing_objects_produce_15000_results_and_drain() -> None:
    keys = refs(5000)
    sched = Scheduler(concurrency=64)

    async def reconcile(obj: Any, ctx: None) -> Action:
        return Action.requeue(0)

    feed = Feed()
    for ref in keys:
        feed.put(ref)
    count = 0
    per_key: dict[ObjectRef, int] = defaultdict(int)
    # Immediate requeues of 5,000 objects, not bounded: the overall bound would hold them to
    # 10 a second (it has tests of its own).
    config = ApplierConfig(concurrency=64, requeue_limit=None)
    async for result in applier(
        reconcile, None, None, store_of(keys), feed, scheduler=sched, config=config
    ):
        assert result.ok
        count += 1
        if count <= 15_000:
            per_key[result.ref] += 1
        if count == 15_000:
            feed.close()
    assert count >= 15_000
    # Fair: requeued keys go to the back, so the first 15,000 results are three rounds over
    # all 5,000 keys (give or take the 64 in flight at each round's edge).
    assert set(per_key) == set(keys)
    assert min(per_key.values()) >= 2
    assert max(per_key.values()) <= 4
    assert sum(1 for n in per_key.values() if n == 3) >= len(keys) - 2 * 64
    assert sched.in_flight == 0


# -- priorities ------------------------------------------------------------------------------


async def test_a_live_change_overtakes_a_backlog_of_initial_list_triggers() -> None:
    backlog = refs(10_000, "old")
    live = ObjectRef("live", "new")
    store = store_of([*backlog, live])
    order: list[str] = []
    gate = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        order.append(obj["name"])
        if len(order) == 1:
            await gate.wait()

    feed = Feed()

    async def drive() -> None:
        for ref in backlog:
            feed.put(Trigger(ref, priority=-100, reason="initial list"))
        await wait_for(lambda: len(order) == 1)  # one backlog item running, slot is taken
        feed.put(Trigger(live, reason="live change"))
        await asyncio.sleep(0.01)
        gate.set()
        await wait_for(lambda: len(order) >= 3)
        feed.close()

    driver = asyncio.create_task(drive())
    await collect(applier(reconcile, None, None, store, feed, concurrency=1))
    await driver
    assert order[0].startswith("obj-")
    assert order[1] == "live"


# -- plain functions, bad input --------------------------------------------------------------


async def test_plain_functions_run_in_threads_with_the_same_guarantees() -> None:
    keys = refs(20)
    rec = Recorder()
    lock = threading.Lock()
    threads: set[int] = set()

    def reconcile(obj: Any, ctx: None) -> Action | None:
        with lock:
            threads.add(threading.get_ident())
            rec.running[obj["name"]] += 1
            assert rec.running[obj["name"]] == 1
        time.sleep(0.01)
        with lock:
            rec.running[obj["name"]] -= 1
        return None

    triggers = [ref for ref in keys for _ in range(5)]
    results = await run(reconcile, store_of(keys), triggers, 20, concurrency=4)
    assert all(r.ok for r in results)
    assert threading.get_ident() not in threads
    assert len(threads) > 1


async def test_plain_functions_retriggered_while_running_get_exactly_one_follow_up() -> None:
    keys = refs(8)
    store = store_of(keys)
    lock = threading.Lock()
    seen: dict[str, list[int]] = defaultdict(list)
    release = threading.Event()

    def reconcile(obj: Any, ctx: None) -> None:
        with lock:
            seen[obj["name"]].append(obj["version"])
            first = len(seen[obj["name"]]) == 1
        if first:
            assert release.wait(30)

    feed = Feed()
    for ref in keys:
        feed.put(ref)

    async def drive() -> None:
        # Every key is running, each in its own thread, before the re-triggers.
        await wait_for(lambda: len(seen) == len(keys))
        for version in range(1, 21):
            for ref in keys:
                store[ref] = {"name": ref.name, "version": version}
                feed.put(ref)
            await asyncio.sleep(0)
        await wait_for(lambda: feed.queue.empty())
        release.set()
        await wait_for(lambda: sum(map(len, seen.values())) >= 2 * len(keys))
        await asyncio.sleep(0.05)  # a second follow-up would start within this
        feed.close()

    driver = asyncio.create_task(drive())
    with ThreadPoolExecutor(len(keys)) as pool:
        results = await collect(
            applier(
                reconcile,
                None,
                None,
                store,
                feed,
                config=ApplierConfig(concurrency=8, executor=pool),
            )
        )
    await driver
    assert dict(seen) == {ref.name: [0, 20] for ref in keys}
    assert all(r.ok for r in results)
    assert len(results) == 2 * len(keys)


async def test_plain_function_timeout_keeps_the_slot_until_the_thread_returns() -> None:
    ref = ObjectRef("widget-7")
    sched = Scheduler()
    returned = threading.Event()

    def reconcile(obj: Any, ctx: None) -> None:
        time.sleep(0.2)
        returned.set()

    results = await run(reconcile, store_of([ref]), [ref], 1, timeout=0.05, scheduler=sched)
    assert returned.is_set()  # the result came only after the thread ended
    error = results[0].error
    assert isinstance(error, ReconcileTimeout)
    # The error says which object and which limit, as for a coroutine's timeout.
    assert (error.timeout, str(ref) in str(error)) == (0.05, True)
    assert sched.in_flight == 0


async def test_a_trigger_of_the_wrong_type_is_a_clear_error() -> None:
    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    with pytest.raises(TypeError, match=r"ObjectRef or fastctl.Trigger, got str"):
        await collect(applier(reconcile, None, None, {}, from_list(["ns/name"])))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": -1}, "concurrency must be an int >= 0"),
        ({"concurrency": 1.5}, "concurrency must be an int >= 0"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"timeout": float("nan")}, "timeout must be a number of seconds > 0"),
    ],
)
def test_bad_arguments_are_rejected_at_the_call(kwargs: dict[str, Any], message: str) -> None:
    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    with pytest.raises(ValueError, match=message):
        applier(reconcile, None, None, {}, from_list([]), **kwargs)


def test_store_must_be_a_mapping() -> None:
    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    with pytest.raises(TypeError, match="store must be a Mapping"):
        applier(reconcile, None, None, [], from_list([]))  # type: ignore[arg-type]


def test_default_concurrency_is_32() -> None:
    assert DEFAULT_CONCURRENCY == 32
    assert fastctl.applier is applier


async def test_the_default_runs_exactly_32_reconciles_at_once() -> None:
    keys = refs(100)
    rec = Recorder()
    gate = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        with rec.span(obj["name"]):
            await gate.wait()

    feed = Feed()
    for ref in keys:
        feed.put(ref)

    async def release() -> None:
        await wait_for(lambda: rec.now_running == 32)
        await asyncio.sleep(0.05)  # a 33rd would start within this
        assert rec.now_running == 32
        gate.set()
        await wait_for(lambda: len(rec.spans) == 100)
        feed.close()

    releaser = asyncio.create_task(release())
    results = await collect(applier(reconcile, None, None, store_of(keys), feed))
    await releaser
    assert rec.max_running == 32
    assert len(results) == 100
