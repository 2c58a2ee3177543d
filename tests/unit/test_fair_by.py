"""Controllers opt in to fair shares between tenants with ``fair_by``: the applier passes
each key's group to the scheduler, and a small tenant is served while a big one floods.

Orders are checked by counts (which reconcile ran n-th), never by time: every trigger is
queued before the store turns ready, and one reconcile runs at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import ObjectRef, Scheduler, Trigger
from fastctl._applier import ApplierConfig, applier
from fastctl._fair import FairBy, group_function
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller

from .test_applier import LateStore


def flood() -> list[ObjectRef]:
    """200 objects of a big tenant, then 5 of a small one."""
    big = [ObjectRef(f"b{i}", "big") for i in range(200)]
    return big + [ObjectRef(f"s{i}", "small") for i in range(5)]


async def run_order(fair_by: FairBy | None, refs: list[ObjectRef], data: Any = None) -> list[str]:
    # Ready once the trigger source has given every trigger (so all keys are queued).
    store = LateStore(data or {ref: {"tenant": ref.namespace} for ref in refs})
    order: list[str] = []
    finished = asyncio.Event()

    async def triggers() -> AsyncIterator[ObjectRef | Trigger]:
        for i, ref in enumerate(refs):
            yield ref if i % 2 else Trigger(ref)
        store.ready.set()
        await finished.wait()  # the applier starts nothing once its triggers end

    async def reconcile(obj: Any, ctx: None) -> None:
        order.append(obj["tenant"])
        if len(order) == len(refs):
            finished.set()

    results = applier(
        reconcile,
        None,
        None,
        store,
        triggers(),
        scheduler=Scheduler(concurrency=1, max_wait=float("inf")),
        config=ApplierConfig(fair_by=fair_by),
    )
    async for _ in results:
        pass
    return order


def small_positions(order: list[str]) -> list[int]:
    return [i for i, tenant in enumerate(order) if tenant == "small"]


async def test_fair_by_namespace_serves_a_small_tenant_while_a_big_one_floods() -> None:
    order = await run_order("namespace", flood())
    assert len(order) == 205
    # Two active tenants: every other reconcile is the small tenant's until it is done.
    assert small_positions(order) == [1, 3, 5, 7, 9]


async def test_without_fair_by_the_small_tenant_waits_behind_the_flood() -> None:
    order = await run_order(None, flood())
    assert small_positions(order) == [200, 201, 202, 203, 204]


async def test_fair_by_a_function_of_the_object() -> None:
    refs = flood()
    # Everything in one namespace; the tenant is a field of the object.
    data = {ObjectRef(r.name, "one"): {"tenant": r.namespace} for r in refs}
    one = list(data)
    order = await run_order(lambda obj: obj["tenant"], one, data)
    assert small_positions(order) == [1, 3, 5, 7, 9]
    assert small_positions(await run_order("namespace", one, data)) == list(range(200, 205))


def test_group_functions_and_bad_values() -> None:
    by_ns = group_function("namespace")
    assert by_ns is not None
    assert by_ns(ObjectRef("x", "ns"), {}) == "ns"
    assert by_ns(ObjectRef("cluster-scoped"), {}) is None
    assert group_function(None) is None
    by_label = group_function(lambda obj: obj.get("tenant"))
    assert by_label is not None
    ref = ObjectRef("x", "ns")
    assert by_label(ref, {}) is None, "not cached: no group"
    assert by_label(ref, {ref: {"tenant": ""}}) is None, "'' means no group"
    assert by_label(ref, {ref: {"tenant": "t"}}) == "t"
    with pytest.raises(TypeError, match="fair_by must return a str or None, got int for ns/x"):
        by_label(ref, {ref: {"tenant": 3}})
    for bad in ("name", 3):
        with pytest.raises(ValueError, match="fair_by must be"):
            ApplierConfig(fair_by=bad)  # type: ignore[arg-type]


def test_a_controller_takes_fair_by_into_its_config() -> None:
    widget = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)

    async def reconcile(obj: Any, ctx: Any) -> None:
        return None

    client = ApiClient.__new__(ApiClient)  # never used
    ctl = Controller(client, widget, reconcile, config=ApplierConfig(fair_by="namespace"))
    assert ctl.config.fair_by == "namespace"
    assert Controller(client, widget, reconcile).config.fair_by is None
