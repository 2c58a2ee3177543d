"""``group_concurrency`` next to ``fair_by``: at most N reconciles of one fair group run at
once, so a tenant whose reconciles are slow cannot take every slot while the others wait.

The slow tenant's reconciles block on an event that only the other tenant's progress (or,
without the cap, the slow tenant filling every slot) sets: the outcome is decided by counts,
never by time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import ObjectRef, ReconcileResult, Trigger
from fastctl._applier import ApplierConfig, applier
from fastctl._core import Scheduler
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller
from fastctl.testing.model import ModelScheduler

from .test_applier import LateStore
from .test_controller_relist import settle

SLOTS = 4


class Tenants:
    """The test's own record of what ran: reconciles of each tenant in flight, the most at
    once, and how many fast ones had finished when the first slow one finished."""

    def __init__(self, fast: int) -> None:
        self.fast = fast
        self.running = {"slow": 0, "fast": 0}
        self.most = {"slow": 0, "fast": 0}
        self.fast_done = 0
        self.fast_done_before_slow: int | None = None
        self.release = asyncio.Event()  # lets the slow reconciles end

    async def reconcile(self, obj: Any, ctx: None) -> None:
        tenant = obj["tenant"]
        self.running[tenant] += 1
        self.most[tenant] = max(self.most[tenant], self.running[tenant])
        try:
            if tenant == "fast":
                await asyncio.sleep(0)
                self.fast_done += 1
                if self.fast_done == self.fast:
                    self.release.set()
                return
            if self.running["slow"] == SLOTS:
                # Every slot is the slow tenant's: nothing else can run, so end the wait.
                self.release.set()
            await self.release.wait()
            if self.fast_done_before_slow is None:
                self.fast_done_before_slow = self.fast_done
        finally:
            self.running[tenant] -= 1


async def run(group_concurrency: int, slow: int = 12, fast: int = 12) -> Tenants:
    """The slow tenant's objects are triggered first, then the fast tenant's, on an applier
    with `SLOTS` slots, ``fair_by="namespace"`` and the given cap (its own scheduler)."""
    refs = [ObjectRef(f"s{i}", "slow") for i in range(slow)]
    refs += [ObjectRef(f"f{i}", "fast") for i in range(fast)]
    store = LateStore({ref: {"tenant": ref.namespace} for ref in refs})
    tenants = Tenants(fast)
    finished = asyncio.Event()

    async def triggers() -> AsyncIterator[ObjectRef | Trigger]:
        for ref in refs:
            yield ref
        store.ready.set()
        await finished.wait()  # the applier starts nothing once its triggers end

    results = applier(
        tenants.reconcile,
        None,
        None,
        store,
        triggers(),
        config=ApplierConfig(
            concurrency=SLOTS, fair_by="namespace", group_concurrency=group_concurrency
        ),
    )
    done = 0
    async for _ in results:
        done += 1
        if done == len(refs):
            finished.set()
    return tenants


async def test_a_slow_tenant_never_has_more_than_its_cap_while_the_other_runs() -> None:
    tenants = await asyncio.wait_for(run(group_concurrency=2), 10)
    assert tenants.most["slow"] == 2
    # The fast tenant had the other slots: all its reconciles ended before any slow one.
    assert tenants.fast_done_before_slow == 12
    assert tenants.most["fast"] == SLOTS - 2


async def test_without_the_cap_the_slow_tenant_takes_every_slot() -> None:
    """The contrast: turns alone hand the slots freed by the fast tenant to the slow one
    until it holds them all and the fast tenant waits."""
    tenants = await asyncio.wait_for(run(group_concurrency=0), 10)
    assert tenants.most["slow"] == SLOTS
    assert tenants.fast_done_before_slow is not None
    assert tenants.fast_done_before_slow < 12


def _controller(**kw: Any) -> Controller:
    widget = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)

    async def reconcile(obj: Any, ctx: Any) -> None:
        return None

    client = ApiClient.__new__(ApiClient)  # never used
    return Controller(client, widget, reconcile, **kw)


def test_a_controller_builds_its_scheduler_with_the_cap() -> None:
    ctl = _controller(config=ApplierConfig(fair_by="namespace", group_concurrency=3))
    assert ctl.config.group_concurrency == 3
    assert getattr(ctl.scheduler, "group_concurrency", None) == 3
    assert getattr(_controller().scheduler, "group_concurrency", None) == 0
    config = ApplierConfig(fair_by="namespace", group_concurrency=2)
    assert _controller(config=config).config.group_concurrency == 2
    with pytest.raises(TypeError, match="either as keywords or as config"):
        _controller(config=config, concurrency=4)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", 2**32])
def test_a_bad_cap_is_refused_naming_the_parameter(bad: Any) -> None:
    with pytest.raises(ValueError, match="group_concurrency must be an int in"):
        ApplierConfig(fair_by="namespace", group_concurrency=bad)


def test_a_cap_without_fair_by_is_refused() -> None:
    """Without groups there is nothing to cap: silently ignoring it would leave the slow
    tenant it was set for free to take every slot."""
    with pytest.raises(ValueError, match="group_concurrency=2 needs fair_by"):
        ApplierConfig(group_concurrency=2)
    assert ApplierConfig(group_concurrency=0).group_concurrency == 0


@pytest.mark.parametrize("from_thread", [False, True], ids=["loop", "thread"])
@pytest.mark.parametrize("model", [False, True], ids=["rust", "model"])
async def test_raising_a_groups_cap_starts_its_held_objects_at_once(
    model: bool, from_thread: bool
) -> None:
    """A tenant at its cap of 1, one reconcile blocked: raising the cap to 3 at run time
    starts the two held objects while the first is still blocked (they used to wait for it
    to end: nothing woke the applier). From another thread too: the loop, idle meanwhile,
    must be woken through its thread-safe door."""
    scheduler: Scheduler | ModelScheduler = (
        ModelScheduler(concurrency=SLOTS, group_concurrency=1)
        if model
        else Scheduler(concurrency=SLOTS, group_concurrency=1)
    )
    refs = [ObjectRef(name, "t") for name in ("a", "b", "c")]
    store = {ref: {"name": ref.name} for ref in refs}
    started: list[str] = []
    first, three = asyncio.Event(), asyncio.Event()
    release = asyncio.Event()

    async def reconcile(obj: Any, ctx: None) -> None:
        started.append(obj["name"])
        first.set()
        if len(started) == 3:
            three.set()
        await release.wait()

    async def triggers() -> AsyncIterator[ObjectRef | Trigger]:
        for ref in refs:
            yield ref
        await release.wait()

    results = applier(
        reconcile,
        None,
        None,
        store,
        triggers(),
        scheduler=scheduler,
        config=ApplierConfig(fair_by="namespace"),
    )
    first_result = cast("AsyncGenerator[ReconcileResult, None]", results).__anext__()
    consumer = asyncio.create_task(first_result)
    raise_cap: threading.Thread | None = None
    try:
        await first.wait()
        await settle()
        assert len(started) == 1, "the cap of 1 holds the others"
        if from_thread:
            raise_cap = threading.Thread(target=scheduler.set_group_concurrency, args=("t", 3))
            raise_cap.start()
        else:
            scheduler.set_group_concurrency("t", 3)
        # Only a wake-up starts them; the deadline only turns a hang into a failure.
        await asyncio.wait_for(three.wait(), 30)
        assert not release.is_set()  # the first reconcile is still blocked
    finally:
        release.set()
        if raise_cap is not None:
            raise_cap.join()
        await consumer
        await cast("AsyncGenerator[ReconcileResult, None]", results).aclose()
    if isinstance(scheduler, ModelScheduler):
        assert scheduler._waker is None  # the applier ended: it is no longer woken
