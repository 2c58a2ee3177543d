"""The applier fed by fastctl's own `Channel` (a controller's watches): triggers are taken
into the scheduler in the task that puts them, with no ingest task, and a reconcile they
make ready starts there when the driver is parked (`_Driver.kick`). The rules of
docs/contract.md hold on that path as on the async-iterable one (tests/unit/test_applier.py):
never two reconciles of one key, exactly one follow-up, no slot leak, backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastctl import Action, ObjectRef, ReconcileResult, Scheduler, Trigger
from fastctl._applier import applier
from fastctl._channel import Channel, ChannelClosed

from .test_applier import LateStore, Recorder, refs, store_of, wait_for
from .test_applier_edges import CountingScheduler, close, first_results

pytestmark = pytest.mark.timeout(120)

Triggers = Channel[ObjectRef | Trigger]


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_stress_never_two_at_once_limit_reached_and_no_trigger_lost() -> None:
    """20,000 triggers over 500 keys from four producers, each trigger after a change of its
    object: never two reconciles of a key at once, exactly `limit` at once at the peak, and
    every key's last reconcile starts after its last trigger was put and reads its last
    version."""
    rng = random.Random(2)
    keys = refs(500)
    store = store_of(keys)
    rec = Recorder()
    seen: dict[str, int] = {}
    put_at: dict[str, float] = {}
    limit = 16
    loop = asyncio.get_running_loop()

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        key = f"ns/{obj['name']}"
        with rec.span(key):
            seen[key] = obj["version"]
            await asyncio.sleep(rng.random() * 0.002)

    channel: Triggers = Channel(maxsize=64)
    sched = Scheduler(concurrency=limit)
    version = 0

    async def produce(n: int) -> None:
        nonlocal version
        for i in range(n):
            ref = rng.choice(keys)
            version += 1
            store[ref] = {"name": ref.name, "version": version}
            put_at[ref.key] = loop.time()
            await channel.put(ref)
            if i % 100 == 0:
                await asyncio.sleep(0.005)

    async def drive() -> None:
        await asyncio.gather(*(produce(5000) for _ in range(4)))
        await wait_for(lambda: rec.now_running == 0 and sched.in_flight == 0 and len(sched) == 0)
        channel.close()

    producer = asyncio.create_task(drive())
    results = [
        r
        async for r in applier(
            reconcile, None, None, store, channel, concurrency=limit, scheduler=sched
        )
    ]
    await producer
    rec.assert_no_overlap()
    assert rec.max_running == limit
    assert len(results) == len(rec.spans)
    assert all(r.ok for r in results)
    assert seen == {ref.key: store[ref]["version"] for ref in keys if ref.key in put_at}
    assert sched.in_flight == 0


async def test_a_push_while_the_driver_is_parked_starts_the_reconcile_in_the_put() -> None:
    """No task runs between the put and the start: the reconcile is in flight when `put`
    returns (the driver, parked, is not woken for it)."""
    a = ObjectRef("a", "ns")
    started = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        started.set()

    channel: Triggers = Channel()
    sched = Scheduler(concurrency=4)
    it = applier(reconcile, None, None, store_of([a]), channel, scheduler=sched)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)  # the driver parks
    await channel.put(a)
    assert sched.in_flight == 1  # popped and started, with no loop turn in between
    assert (await asyncio.wait_for(nxt, 10)).ref == a
    await close(it)


async def test_a_push_while_the_consumer_holds_a_result_starts_nothing() -> None:
    """Backpressure: while the consumer has not asked for the next result, a pushed trigger
    waits in the scheduler; it starts when the consumer asks."""
    a, b = refs(2)
    calls: list[str] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        calls.append(obj["name"])

    channel: Triggers = Channel()
    sched = Scheduler(concurrency=4)
    it = applier(reconcile, None, None, store_of([a, b]), channel, scheduler=sched)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    await channel.put(a)
    assert (await asyncio.wait_for(nxt, 10)).ref == a  # the iterator now waits at its yield
    await channel.put(b)
    await turns(20)
    assert calls == ["obj-0"]
    assert sched.in_flight == 0
    assert len(sched) == 1
    [second] = await first_results(it, 1)
    assert second.ref == b
    await close(it)


async def test_a_trigger_mid_reconcile_gives_exactly_one_follow_up_with_the_latest_state() -> None:
    ref = ObjectRef("a", "ns")
    store = {ref: {"name": "a", "version": 0}}
    seen: list[int] = []
    gate = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        seen.append(obj["version"])
        if len(seen) == 1:
            await gate.wait()

    channel: Triggers = Channel()
    it = applier(reconcile, None, None, store, channel)
    nxt = asyncio.ensure_future(first_results(it, 2))
    await turns(5)
    await channel.put(ref)
    await wait_for(lambda: len(seen) == 1)
    for version in range(1, 50):
        store[ref] = {"name": "a", "version": version}
        await channel.put(ref)
    gate.set()
    results = await asyncio.wait_for(nxt, 10)
    await turns(20)
    assert seen == [0, 49]
    assert [r.ref for r in results] == [ref, ref]
    await close(it)


async def test_a_reconcile_started_by_a_push_runs_in_the_consumers_context() -> None:
    """A reconcile started in the producer's task runs in a copy of the applier's context
    (its consumer's), as one the driver starts does, not in the producer's."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    a, b = refs(2)
    got: list[str] = []

    async def reconcile(obj: Any, ctx: None) -> None:
        got.append(var.get())
        var.set("changed by a reconcile")  # stays in its own copy

    channel: Triggers = Channel()

    async def producer() -> None:
        var.set("producer")
        await channel.put(a)
        await channel.put(b)

    var.set("consumer")
    it = applier(reconcile, None, None, store_of([a, b]), channel)
    nxt = asyncio.ensure_future(first_results(it, 2))
    await turns(5)
    await asyncio.create_task(producer(), context=contextvars.copy_context())
    await asyncio.wait_for(nxt, 10)
    assert got == ["consumer", "consumer"]
    assert var.get() == "consumer"
    await close(it)


async def test_a_pushed_trigger_with_a_debounce_runs_when_it_is_due() -> None:
    """The push arms the driver's timer for a key it made ready later (debounce): nothing
    else would wake the parked driver."""
    a = ObjectRef("a", "ns")

    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    channel: Triggers = Channel()
    it = applier(reconcile, None, None, store_of([a]), channel, debounce=0.05)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    await channel.put(a)
    assert (await asyncio.wait_for(nxt, 5)).ref == a
    await close(it)


async def test_pushes_before_the_store_is_ready_wait_and_are_deduplicated() -> None:
    a = ObjectRef("a", "ns")
    store = LateStore({a: {"name": "a"}})
    calls = 0

    async def reconcile(obj: Any, ctx: None) -> None:
        nonlocal calls
        calls += 1

    channel: Triggers = Channel()
    it = applier(reconcile, None, None, store, channel)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    for _ in range(10):
        await channel.put(a)
    await turns(20)
    assert calls == 0
    store.ready.set()
    assert (await asyncio.wait_for(nxt, 10)).ref == a
    await turns(20)
    assert calls == 1
    await close(it)


async def test_triggers_put_before_the_applier_starts_are_taken_and_blocked_producers_go_on() -> (
    None
):
    keys = refs(3)
    channel: Triggers = Channel(maxsize=2)
    await channel.put(keys[0])
    await channel.put(keys[1])
    blocked = asyncio.create_task(channel.put(keys[2]))  # the channel is full
    await turns(5)
    assert not blocked.done()

    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    it = applier(reconcile, None, None, store_of(keys), channel)
    results = await first_results(it, 3)
    await asyncio.wait_for(blocked, 5)
    assert sorted(r.ref.name for r in results) == ["obj-0", "obj-1", "obj-2"]
    await close(it)


async def test_closing_the_channel_drains_and_ends_and_a_closed_applier_lets_go() -> None:
    """Closing the channel ends the iteration once the running reconciles finish; after the
    applier ends, the channel is no longer fed to it (later puts are buffered)."""
    a, b = refs(2)
    gate = asyncio.Event()
    sched = Scheduler(concurrency=4)

    async def reconcile(obj: Any, ctx: None) -> None:
        await gate.wait()

    channel: Triggers = Channel(maxsize=4)
    it = applier(reconcile, None, None, store_of([a, b]), channel, scheduler=sched)
    done = asyncio.ensure_future(first_results(it, 10))
    await turns(5)
    await channel.put(a)
    channel.close()
    with pytest.raises(ChannelClosed):
        await channel.put(b)
    await turns(10)
    assert not done.done()
    gate.set()
    assert [r.ref for r in await asyncio.wait_for(done, 10)] == [a]
    assert sched.in_flight == 0
    assert len(sched) == 0

    other: Triggers = Channel(maxsize=4)
    it = applier(reconcile, None, None, store_of([a, b]), other, scheduler=sched)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    nxt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await nxt
    await close(it)
    await other.put(a)  # buffered, not pushed into the ended applier
    assert len(other) == 1
    assert len(sched) == 0


async def test_cancelling_mid_run_releases_every_slot() -> None:
    keys = refs(20)
    sched = Scheduler(concurrency=8)

    async def reconcile(obj: Any, ctx: None) -> None:
        await asyncio.sleep(10)

    channel: Triggers = Channel()
    it = applier(reconcile, None, None, store_of(keys), channel, scheduler=sched)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    for ref in keys:
        await channel.put(ref)
    assert sched.in_flight == 8
    nxt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await nxt
    await close(it)
    assert sched.in_flight == 0


async def test_a_pushed_trigger_of_the_wrong_type_is_a_clear_error() -> None:
    channel: Channel[Any] = Channel()

    async def reconcile(obj: Any, ctx: None) -> None:
        return None

    it = applier(reconcile, None, None, {}, channel)
    nxt = asyncio.ensure_future(anext(it))
    await turns(5)
    await channel.put("ns/a")
    with pytest.raises(TypeError, match=r"triggers must yield fastctl\.ObjectRef"):
        await asyncio.wait_for(nxt, 5)


async def test_requeues_and_results_on_the_push_path() -> None:
    """A reconcile that asks to run again does, and each run's result reaches the consumer."""
    a = ObjectRef("a", "ns")
    runs = 0

    async def reconcile(obj: Any, ctx: None) -> Action | None:
        nonlocal runs
        runs += 1
        return Action.requeue(0.001) if runs < 3 else None

    channel: Triggers = Channel()
    it = applier(reconcile, None, None, store_of([a]), channel)
    nxt = asyncio.ensure_future(first_results(it, 3))
    await turns(5)
    await channel.put(a)
    results: list[ReconcileResult] = await asyncio.wait_for(nxt, 10)
    assert [r.action.requeue_after for r in results] == [0.001, 0.001, None]
    await close(it)


# -- random interleavings, against the rules ---------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5)),
        st.tuples(st.just("finish"), st.integers(0, 7)),
        st.tuples(st.just("fail"), st.integers(0, 7)),
        st.tuples(st.just("ask"), st.just(0)),
        st.tuples(st.just("turn"), st.integers(1, 3)),
    ),
    max_size=60,
)


class _Watched(CountingScheduler):
    """A `Scheduler` that checks, at every pop (a start), that the consumer is waiting for
    a result: the backpressure rule."""

    waiting: Any = None

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        keys = super().pop_many(max, now=now)
        if keys:
            assert self.waiting is not None, "a reconcile started while no result was asked for"
            assert not self.waiting.done(), "a reconcile started while the consumer held a result"
        return keys


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, concurrency=st.integers(1, 3))
def test_random_pushes_ends_and_asks_keep_the_rules(
    ops: list[tuple[str, int]], concurrency: int
) -> None:
    """Pushes, reconciles ending or failing, and the consumer asking, in any order: never two
    reconciles of one key or more than `concurrency` at once, no start while the consumer
    holds a result, each key's last reconcile reads its last version, no slot left."""
    asyncio.run(_interleave(ops, concurrency))


async def _interleave(ops: list[tuple[str, int]], concurrency: int) -> None:
    keys = refs(6)
    store = store_of(keys)
    sched = _Watched(Scheduler(concurrency=concurrency))
    gates: list[tuple[str, asyncio.Future[bool]]] = []  # running: key, its end (True: fail)
    active: dict[str, int] = {}
    seen: dict[str, int] = {}
    version = 0

    async def reconcile(obj: dict[str, Any], ctx: None) -> None:
        key = f"ns/{obj['name']}"
        assert key not in active, f"two reconciles of {key}"
        assert len(active) < concurrency
        active[key] = 1
        seen[key] = obj["version"]
        end: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        gates.append((key, end))
        try:
            if await end:
                raise RuntimeError("failed on purpose")
        finally:
            del active[key]

    def release(i: int, fail: bool) -> None:
        if gates:
            _, end = gates.pop(i % len(gates))
            end.set_result(fail)

    channel: Triggers = Channel(maxsize=8)
    it = applier(
        reconcile,
        lambda obj, error, ctx: Action.await_change(),
        None,
        store,
        channel,
        scheduler=sched,
        concurrency=concurrency,
    )
    put_last: dict[str, int] = {}
    for op, arg in ops:
        if op == "put":
            if channel._sink is None and len(channel) >= 8:
                continue  # full, with no applier taking from it yet: the put would wait
            ref = keys[arg]
            version += 1
            store[ref] = {"name": ref.name, "version": version}
            put_last[ref.key] = version
            await channel.put(ref)
        elif op in ("finish", "fail"):
            release(arg, op == "fail")
        elif op == "ask":
            if sched.waiting is None or sched.waiting.done():
                sched.waiting = asyncio.ensure_future(anext(it))
        else:
            await turns(arg)
    # Drain: ask for every result and let every reconcile end until nothing is queued or
    # running, then end the triggers (what is queued when they end would not start).
    for _ in range(1000):
        waiting = sched.waiting
        if waiting is not None and waiting.done() and waiting.exception() is not None:
            raise AssertionError("the applier ended early") from waiting.exception()
        if waiting is None or waiting.done():
            sched.waiting = asyncio.ensure_future(anext(it))
        while gates:
            release(0, False)
        await turns(3)
        if not gates and not active and sched.in_flight == 0 and len(sched) == 0:
            break
    channel.close()
    if sched.waiting is not None:  # results already made may still come: take them
        with contextlib.suppress(StopAsyncIteration):
            await asyncio.wait_for(sched.waiting, 1)
    async with asyncio.timeout(1):
        rest = [r async for r in it]
    assert len(rest) <= concurrency
    assert not active
    assert sched.in_flight == 0
    assert len(sched) == 0
    for key, last in put_last.items():
        assert seen[key] == last, f"the last trigger of {key} was lost"
