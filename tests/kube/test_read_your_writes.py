"""Read your writes against the real kube-apiserver, behind a proxy that shows the watch
streams 3 s late (every other request passes at once): an operator that creates a child
ConfigMap per Widget whenever its cache shows none, and looks again every half second,
creates exactly one per Widget with the guard, and several without it (counted)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, Controller, ReadYourWrites
from fastctl.kube._http import request_json
from fastctl.kube._objects import create
from fastctl.kube._resource import Resource

from .faultproxy import FaultProxy
from .test_controller import eventually

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

WIDGETS = 4
WATCH_DELAY = 3.0
RUN = 9.0
"""Seconds the operator runs: the first reconciles, three watch delays, and more."""
CONFIGMAPS = Resource("v1", "ConfigMap")


async def one_child_each(
    admin: ApiClient, proxied: ApiClient, proxy: FaultProxy, crds: str, namespace: str, guard: bool
) -> tuple[dict[str, int], Controller]:
    widgets = Resource(f"{crds}/v1", "Widget", plural="widgets")
    for i in range(WIDGETS):
        body = {"metadata": {"name": f"w{i}", "namespace": namespace}, "spec": {}}
        await create(admin, widgets, {"apiVersion": widgets.api_version, "kind": "Widget", **body})

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action:
        if not ctx.owned_by(obj):
            meta = obj["metadata"]
            owner = {
                "apiVersion": obj["apiVersion"],
                "kind": "Widget",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
            }
            child = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"generateName": f"{meta['name']}-", "ownerReferences": [owner]},
            }
            await create(proxied, CONFIGMAPS, child, namespace=namespace)
        return Action.requeue(0.5)

    ctl = Controller(
        proxied,
        widgets,
        reconcile,
        namespace=namespace,
        read_your_writes=ReadYourWrites(enabled=guard),
    )
    ctl.owns(CONFIGMAPS, cache=True)
    ctl.context = ctl.cache(CONFIGMAPS)
    proxy.watch_delay = WATCH_DELAY  # read when a watch opens: before the controller's
    task = asyncio.create_task(ctl.run(handle_signals=False))
    try:
        await eventually(lambda: ctl.is_ready, what="the caches listed (late too)")
        await asyncio.sleep(RUN)
    finally:
        ctl.shutdown()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)
    children: dict[str, int] = {f"w{i}": 0 for i in range(WIDGETS)}
    listed = await request_json(admin, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    for cm in listed["items"]:
        for ref in cm["metadata"].get("ownerReferences") or ():
            children[ref["name"]] += 1
    return children, ctl


async def test_with_the_guard_one_child_per_widget(
    client: ApiClient, proxied: ApiClient, proxy: FaultProxy, crds: str, namespace: str
) -> None:
    children, ctl = await one_child_each(client, proxied, proxy, crds, namespace, guard=True)
    print(f"\nwith the guard: children {children}, counters {ctl.counters}")
    assert children == {f"w{i}": 1 for i in range(WIDGETS)}
    assert ctl.counters.cache_waits >= WIDGETS  # each first follow-up waited for its child
    assert ctl.counters.cache_wait_expired == 0


async def test_without_the_guard_a_late_watch_makes_more(
    client: ApiClient, proxied: ApiClient, proxy: FaultProxy, crds: str, namespace: str
) -> None:
    children, _ = await one_child_each(client, proxied, proxy, crds, namespace, guard=False)
    print(f"\nwithout the guard: children {children}")
    assert all(n > 1 for n in children.values()), children
