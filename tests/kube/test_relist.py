"""A Controller across a relist forced by a 410, against the real kube-apiserver.

The controller is an operator in miniature: each ConfigMap ("owner") gets a Secret child
with a controller owner reference, written by the reconcile. While its watches are down,
owners are changed, created and deleted and children are deleted; kube-apiserver restarts
meanwhile, so the resumes are answered 410 Gone and both watches relist. The proxy holds
each relist just before its end (every object received, the store not yet swapped), which
is where a reconcile reading the old cache would go wrong; then lets the lists end.

After it: every owner's last reconcile saw its current state, the ones created during the
outage were reconciled, and every owner of a deleted child was re-triggered and recreated it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action
from fastctl.kube._http import request_json
from fastctl.kube._objects import apply, create, delete, patch
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller
from fastctl.testing import ControlPlane

from .faultproxy import FaultProxy
from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

CONFIGMAP = Resource("v1", "ConfigMap")
SECRET = Resource("v1", "Secret")
FIELD_MANAGER = "relist-test"


class Operator:
    """Reconciles an owner by applying its child Secret (carrying the owner's version), and
    records what each reconcile saw, (name, version, start), and which children it wrote
    (name, start)."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.seen: list[tuple[str, int, float]] = []
        self.wrote: list[tuple[str, float]] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        version = int((obj.get("data") or {}).get("v", "0"))
        start = time.monotonic()
        self.seen.append((meta["name"], version, start))
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}
        child = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": child_of(meta["name"]),
                "ownerReferences": [{**owner, "controller": True}],
            },
            "stringData": {"v": str(version)},
        }
        await apply(
            self.client, SECRET, child, field_manager=FIELD_MANAGER, namespace=self.namespace
        )
        self.wrote.append((meta["name"], start))
        return None

    def last(self, name: str) -> int | None:
        versions = [v for n, v, _ in self.seen if n == name]
        return versions[-1] if versions else None

    def since(self, when: float) -> set[str]:
        """The owners whose reconcile started at `when` or later."""
        return {n for n, _, start in self.seen if start >= when}

    def wrote_since(self, when: float) -> set[str]:
        """The owners whose child a reconcile started at `when` or later has written."""
        return {n for n, start in self.wrote if start >= when}


def child_of(owner: str) -> str:
    return f"{owner}-child"


async def children(client: ApiClient, namespace: str) -> set[str]:
    listed = await request_json(client, "GET", f"/api/v1/namespaces/{namespace}/secrets")
    return {item["metadata"]["name"] for item in listed["items"]}


async def test_a_relist_after_410_reconciles_every_object_with_its_current_state(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fastctl.watcher")
    names = [f"cm-{i:02}" for i in range(30)]
    for name in names:
        body = {"metadata": {"name": name}, "data": {"v": "0"}}
        await create(client, CONFIGMAP, body, namespace=namespace)
    operator = Operator(client, namespace)  # it writes directly: only the watches go down
    ctl = Controller(proxied, CONFIGMAP, operator.reconcile, namespace=namespace)
    ctl.owns(SECRET)
    async with running(ctl):
        await eventually(lambda: operator.wrote_since(0) == set(names), what="first pass")
        assert await children(client, namespace) >= {child_of(n) for n in names}

        # The outage: the watches are down (503s, backed off) while the world changes.
        proxy.down = True
        proxy.cut()
        changed = names[0:6]
        deleted = names[6:9]
        created = [f"new-{i}" for i in range(3)]
        orphaned = [*names[4:6], *names[9:13]]  # owners whose child is deleted; two changed
        for name in changed:
            await patch(client, CONFIGMAP, name, {"data": {"v": "1"}}, namespace=namespace)
        for name in deleted:
            await delete(client, CONFIGMAP, name, namespace=namespace)
        for name in created:
            body = {"metadata": {"name": name}, "data": {"v": "5"}}
            await create(client, CONFIGMAP, body, namespace=namespace)
        for name in orphaned:
            await delete(client, SECRET, child_of(name), namespace=namespace)
        # A fresh watch cache starts after our resourceVersions: the resumes get 410 Gone.
        await control_plane.restart_apiserver()
        proxy.hold_list_ends()
        outage_over = time.monotonic()
        proxy.down = False

        # Both relists have sent every object but not their end: the caches still hold the
        # old state, and nothing may be reconciled against it.
        await eventually(lambda: proxy.held_list_ends == 2, what="both relists held at their end")
        await asyncio.sleep(1.0)  # room for a wrong implementation to reconcile meanwhile
        assert operator.since(outage_over) == set(), "reconciled against the pre-relist cache"
        proxy.release_list_ends()

        current = {n: 1 if n in changed else 0 for n in names if n not in deleted}
        current.update(dict.fromkeys(created, 5))
        await eventually(
            lambda: all(operator.last(n) == v for n, v in current.items()),
            what="every object reconciled with its current state",
        )
        await eventually(
            lambda: operator.wrote_since(outage_over) >= {*orphaned, *created},
            what="every owner of a deleted child re-triggered, every new owner reconciled",
        )
        assert await children(client, namespace) >= {child_of(n) for n in current}
        assert sorted(str(r) for r in ctl.store) == sorted(f"{namespace}/{n}" for n in current)
    # both relists came from a 410, not from a lucky resume
    gone = [r.getMessage() for r in caplog.records if "gone" in r.getMessage()]
    assert any("configmaps" in m for m in gone), gone
    assert any("secrets" in m for m in gone), gone
    relists = [p for m, p in proxy.requests if "sendInitialEvents=true" in p]
    assert len([p for p in relists if "/configmaps" in p]) >= 2
    assert len([p for p in relists if "/secrets" in p]) >= 2
