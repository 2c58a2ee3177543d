"""``owns(R)`` of the primary's own kind against the real kube-apiserver: a Widget
controller whose parents (Widgets with no owner) each apply a child Widget with a
controller owner reference to them. A change to a child reconciles the child (a primary
object) and its parent (the relation), and the controller, run on its own, opens one
watch of widgets, not two (docs/authoring.md, "Children of the primary's own kind")."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import apply, create, patch
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller

from .faultproxy import FaultProxy
from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


async def test_a_childs_change_reconciles_it_and_its_parent_on_one_watch(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, crds: str
) -> None:
    widgets = Resource(f"{crds}/v1", "Widget", plural="widgets")
    seen: list[tuple[str, float]] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        meta = obj["metadata"]
        seen.append((meta["name"], time.monotonic()))
        if meta.get("ownerReferences"):
            return  # a child: nothing to make
        owner = {"apiVersion": f"{crds}/v1", "kind": "Widget", "name": meta["name"]}
        child = {
            "apiVersion": f"{crds}/v1",
            "kind": "Widget",
            "metadata": {
                "name": f"{meta['name']}-child",
                "ownerReferences": [{**owner, "uid": meta["uid"], "controller": True}],
            },
            "spec": {"from": meta["name"]},
        }
        await apply(proxied, widgets, child, field_manager="owns-own-kind", namespace=namespace)

    def since(mark: float) -> set[str]:
        return {name for name, at in seen if at >= mark}

    ctl = Controller(proxied, widgets, reconcile, namespace=namespace).owns(widgets)
    await create(client, widgets, {"metadata": {"name": "p"}, "spec": {}}, namespace=namespace)
    async with running(ctl):
        await eventually(lambda: {"p", "p-child"} <= since(0), what="parent and child reconciled")
        mark = time.monotonic()
        body = {"metadata": {"labels": {"touched": "1"}}}
        await patch(client, widgets, "p-child", body, namespace=namespace)
        await eventually(lambda: since(mark) >= {"p", "p-child"}, what="both on the child's change")
        # Broken once (the relation given its own watch again): red, two watches.
        assert len([p for p in proxy.watches() if "/widgets?" in p]) == 1, proxy.watches()
