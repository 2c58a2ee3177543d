"""The read-your-writes hold in the applier and in a controller, on virtual time: a held key
takes no slot, is woken by the event that catches its cache up, keeps the scheduler's rules
(one follow-up for the triggers of a hold, a retry still counted as one), and a controller
that stops during a hold stops at once. And the bug it is for: an operator that creates a
child when its cache shows none creates one, not one per reconcile, behind a slow watch."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from fastctl import Action, ObjectRef, ReadYourWrites, Scheduler
from fastctl._applier import ApplierConfig, _Driver
from fastctl._channel import Channel
from fastctl.kube import _http
from fastctl.kube._objects import create
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.runtime.controller import Controller
from fastctl.testing import virtual_time

from .test_controller_relist import CHILD, DONE, INIT, NS, WIDGET, Sources, client, widget

WATCH_DELAY = 2.0


class Gate:
    """A `StartGate` the test drives: holds each key in `holds` (for at most that long
    after its first hold) until `open` wakes it, as the fence does."""

    def __init__(self, holds: dict[str, float]) -> None:
        self.holds = dict(holds)
        self.since: dict[str, float] = {}
        self.wake: Any = None
        self.released: list[str] = []

    def hold(self, key: str, now: float) -> float | None:
        bound = self.holds.get(key)
        if bound is None:
            return None
        since = self.since.setdefault(key, now)
        if now >= since + bound:
            del self.holds[key]
            return None
        return since + bound - now

    def open(self, key: str) -> None:
        del self.holds[key]
        self.wake(key)

    def release(self, key: str) -> None:
        self.released.append(key)

    def bind(self, wake: Any) -> None:
        self.wake = wake


class Runs:
    """Each reconcile's key and start time; `fail` keys raise."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.starts: list[tuple[str, float]] = []
        self.fail = set(fail)

    async def __call__(self, obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        self.starts.append((name, asyncio.get_running_loop().time()))
        await asyncio.sleep(1.0)
        if name in self.fail:
            raise RuntimeError("scripted")


def driven(
    runs: Runs, gate: Gate, triggers: Channel[ObjectRef], scheduler: Scheduler
) -> AsyncIterator[Any]:
    store = {ObjectRef(n, NS): widget(n, 1) for n in ("a", "b")}
    config = ApplierConfig(concurrency=1)
    driver = _Driver(runs, None, None, store, triggers, config, scheduler, gate=gate)
    return driver.results()


@contextlib.asynccontextmanager
async def consumed(results: AsyncIterator[Any]) -> AsyncIterator[asyncio.Task[None]]:
    async def consume() -> None:
        async for _ in results:
            pass

    task = asyncio.create_task(consume())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


@virtual_time
async def test_a_held_key_takes_no_slot_and_starts_when_woken() -> None:
    runs, gate = Runs(), Gate({f"{NS}/a": 10.0})
    triggers: Channel[ObjectRef] = Channel(maxsize=16)
    async with consumed(driven(runs, gate, triggers, Scheduler(concurrency=1))):
        await triggers.put(ObjectRef("a", NS))
        await triggers.put(ObjectRef("b", NS))
        await asyncio.sleep(0.5)
        assert runs.starts == [("b", 0.0)]  # a is held; b has the only slot
        await triggers.put(ObjectRef("a", NS))  # a trigger during the hold
        await triggers.put(ObjectRef("a", NS))
        await asyncio.sleep(1.5)
        gate.open(f"{NS}/a")
        await asyncio.sleep(5.0)
    assert runs.starts == [("b", 0.0), ("a", 2.0)]  # one run of a, for all its triggers


@virtual_time
async def test_a_hold_that_is_not_woken_ends_at_its_bound() -> None:
    runs, gate = Runs(), Gate({f"{NS}/a": 3.0})
    triggers: Channel[ObjectRef] = Channel(maxsize=16)
    async with consumed(driven(runs, gate, triggers, Scheduler(concurrency=1))):
        await triggers.put(ObjectRef("a", NS))
        await asyncio.sleep(10.0)
    assert runs.starts == [("a", 3.0)]


@virtual_time
async def test_a_retry_held_back_still_counts_as_one() -> None:
    """A success resets a key's failures: a hold must not, or a reconcile that writes and
    fails would be retried as fast as its writes reach the cache."""
    runs = Runs(fail=("a",))
    gate = Gate({})
    scheduler = Scheduler(concurrency=1, backoff_base=1.0, seed=1)
    triggers: Channel[ObjectRef] = Channel(maxsize=16)
    async with consumed(driven(runs, gate, triggers, scheduler)):
        await triggers.put(ObjectRef("a", NS))
        await asyncio.sleep(1.1)  # failed once; its retry is due within 1.2 s
        assert scheduler.failures(f"{NS}/a") == 1
        gate.holds[f"{NS}/a"] = 0.5
        await asyncio.sleep(1.3)  # the retry was popped, and held
        assert len(runs.starts) == 1
        assert scheduler.failures(f"{NS}/a") == 2


@virtual_time
async def test_a_key_gone_from_the_store_is_released() -> None:
    runs, gate = Runs(), Gate({})
    triggers: Channel[ObjectRef] = Channel(maxsize=16)
    async with consumed(driven(runs, gate, triggers, Scheduler(concurrency=1))):
        await triggers.put(ObjectRef("gone", NS))
        await asyncio.sleep(0.1)
    assert gate.released == [f"{NS}/gone"]


@virtual_time
async def test_each_async_call_is_observed_and_ended_before_the_error_policy() -> None:
    """The applier sets the fence's observer around each call of an async reconcile (no
    wrapper coroutine): begun before it, ended once it is over however it ended (returned,
    raised, timed out), before the error policy, whose own writes are no reconcile's."""
    log: list[tuple[str, str]] = []

    class Observation:
        def __init__(self, name: str) -> None:
            self.name = name

        def end(self) -> None:
            log.append(("end", self.name))

    def observe(obj: dict[str, Any]) -> Observation:
        log.append(("begin", obj["metadata"]["name"]))
        return Observation(obj["metadata"]["name"])

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        log.append(("run", name))
        await asyncio.sleep(5.0 if name == "c" else 1.0)
        if name == "b":
            raise RuntimeError("scripted")

    def policy(obj: dict[str, Any], error: BaseException, ctx: Any) -> Action:
        log.append(("policy", obj["metadata"]["name"]))
        return Action.await_change()

    store = {ObjectRef(n, NS): widget(n, 1) for n in ("a", "b", "c")}
    triggers: Channel[ObjectRef] = Channel(maxsize=16)
    config = ApplierConfig(concurrency=1, timeout=2.0)
    driver = _Driver(reconcile, policy, None, store, triggers, config, None, observe=observe)
    async with consumed(driver.results()):
        for name in ("a", "b", "c"):
            await triggers.put(ObjectRef(name, NS))
        await asyncio.sleep(10.0)
    assert log == [
        *(("begin", "a"), ("run", "a"), ("end", "a")),
        *(("begin", "b"), ("run", "b"), ("end", "b"), ("policy", "b")),
        *(("begin", "c"), ("run", "c"), ("end", "c"), ("policy", "c")),  # timed out
    ]


# -- a controller behind a slow watch ---------------------------------------------------------


class ChildServer:
    """Creates ConfigMaps (``generateName``), answered at once; the watch shows each one
    only `delay` seconds later (``None``: never)."""

    def __init__(
        self, sources: Sources, monkeypatch: pytest.MonkeyPatch, delay: float | None = WATCH_DELAY
    ) -> None:
        self.feed = sources.feeds[CHILD]
        self.delay = delay
        self.created: list[str] = []
        self.versions = itertools.count(100)
        monkeypatch.setattr(_http, "request", self.request)

    async def request(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        assert method == "POST", method
        assert path.endswith("/configmaps"), path
        body = orjson.loads(kw["body"])
        n = next(self.versions)
        name = f"{body['metadata']['generateName']}{n}"
        body["metadata"] |= {"name": name, "uid": f"uid-{name}", "resourceVersion": str(n)}
        self.created.append(name)
        event = ObjectEvent(EventKind.APPLY, copy.deepcopy(body))
        if self.delay is not None:
            asyncio.get_running_loop().call_later(self.delay, self.feed.push, event)
        return _Created(body)


class _Created:
    status = 201

    def __init__(self, body: Any) -> None:
        self._data = orjson.dumps(body)

    async def read(self) -> bytes:
        return self._data

    async def __aenter__(self) -> _Created:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def one_child_operator(ctl_options: ReadYourWrites) -> tuple[Controller, list[float]]:
    """Creates a child of its widget when its cache shows none, and looks again soon."""
    starts: list[float] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action:
        starts.append(asyncio.get_running_loop().time())
        if not ctx.owned_by(obj):
            owner = {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"],
                "controller": True,
            }
            meta = {"generateName": "a-", "namespace": NS, "ownerReferences": [owner]}
            await create(
                client(), CHILD, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
            )
        return Action.requeue(0.5)

    ctl = Controller(client(), WIDGET, reconcile, read_your_writes=ctl_options)
    ctl.owns(CHILD, cache=True)
    ctl.context = ctl.cache(CHILD)
    return ctl, starts


async def run_for(ctl: Controller, sources: Sources, seconds: float) -> float:
    """Run `ctl` over one widget for `seconds`; stop it; the time its run took to end."""
    sources.feeds[WIDGET].push(INIT, ObjectEvent(EventKind.INIT_APPLY, widget("a", 1)), DONE)
    sources.feeds[CHILD].push(INIT, DONE)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await asyncio.sleep(seconds)
    stop = asyncio.get_running_loop().time()
    ctl.shutdown()
    await task
    return asyncio.get_running_loop().time() - stop


@virtual_time
async def test_one_child_per_object_behind_a_slow_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = Sources(False, monkeypatch)
    server = ChildServer(sources, monkeypatch)
    ctl, starts = one_child_operator(ReadYourWrites())
    await run_for(ctl, sources, 6.0)
    assert len(server.created) == 1
    assert starts[:2] == [0.0, WATCH_DELAY]  # the requeue at 0.5 held until the echo
    assert ctl.counters.cache_waits >= 1
    assert ctl.counters.cache_wait_expired == 0


@virtual_time
async def test_without_the_guard_the_stale_cache_makes_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = Sources(False, monkeypatch)
    server = ChildServer(sources, monkeypatch)
    ctl, _ = one_child_operator(ReadYourWrites(enabled=False))
    await run_for(ctl, sources, 6.0)
    assert len(server.created) == 4  # at 0, 0.5, 1 and 1.5 s: the cache showed none


@virtual_time
async def test_a_controller_stopped_during_a_hold_stops_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = Sources(False, monkeypatch)
    ChildServer(sources, monkeypatch, delay=None)  # the hold would last its whole bound
    ctl, starts = one_child_operator(ReadYourWrites(max_wait=60.0))
    took = await run_for(ctl, sources, 1.0)
    assert took == 0.0
    assert starts == [0.0]  # the held follow-up never started
