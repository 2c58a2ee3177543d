"""Cached children and metadata-only watches against the real kube-apiserver.

An operator in miniature: each ConfigMap labelled ``role=owner`` gets a Secret child (a
controller owner reference), and ServiceAccounts point at owners through an annotation
(``to``). The controller caches both related resources, the ServiceAccounts as metadata
only; the reconcile reads its child and its pointers from the caches and writes only when
the child is missing or stale. Every request the controller makes goes through a
`FaultProxy`, which counts them and can force relists (a resume answered 410 Gone).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action
from fastctl.kube._objects import apply, create, delete, patch
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import MetadataOnlyUnsupported
from fastctl.runtime._children import RelatedCache
from fastctl.runtime.controller import Controller
from fastctl.runtime.manager import Manager
from fastctl.testing import ControlPlane
from fastctl.types import ObjectRef

from .faultproxy import FaultProxy
from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

CONFIGMAP = Resource("v1", "ConfigMap")
SECRET = Resource("v1", "Secret")
SA = Resource("v1", "ServiceAccount")
FIELD_MANAGER = "children-test"
SLOW = pytest.mark.skipif(
    not os.environ.get("FASTCTL_SLOW_KUBE"),
    reason="restarts kube-apiserver (~18 s): FASTCTL_SLOW_KUBE=1, see docs/benchmarks.md",
)


def pointed_at(obj: dict[str, Any]) -> list[ObjectRef]:
    meta = obj["metadata"]
    target = (meta.get("annotations") or {}).get("to")
    return [ObjectRef(target, meta["namespace"])] if target else []


class Operator:
    """Reconciles an owner from the caches: applies its child only when the cached child is
    missing or carries another version; records what every reconcile saw."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.secrets: RelatedCache | None = None
        self.accounts: RelatedCache | None = None
        self.seen: list[tuple[str, float, list[str], list[str]]] = []
        self.writes = 0

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        assert self.secrets is not None
        assert self.accounts is not None
        meta = obj["metadata"]
        version = (obj.get("data") or {}).get("v", "0")
        children = self.secrets.owned_by(obj)
        pointers = self.accounts.mapped_to(obj)
        self.seen.append(
            (
                meta["name"],
                time.monotonic(),
                [c["metadata"]["name"] for c in children],
                [p["metadata"]["name"] for p in pointers],
            )
        )
        if any((c["metadata"].get("annotations") or {}).get("v") == version for c in children):
            return None  # the cache says the child is right: no request at all
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}
        child = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{meta['name']}-child",
                "annotations": {"v": version},
                "ownerReferences": [{**owner, "controller": True}],
            },
        }
        self.writes += 1
        await apply(
            self.client, SECRET, child, field_manager=FIELD_MANAGER, namespace=self.namespace
        )
        return None

    def since(self, when: float, name: str) -> list[tuple[list[str], list[str]]]:
        return [(c, p) for n, start, c, p in self.seen if n == name and start >= when]


def controller(proxied: ApiClient, namespace: str) -> tuple[Controller, Operator]:
    operator = Operator(proxied, namespace)
    ctl = Controller(
        proxied, CONFIGMAP, operator.reconcile, namespace=namespace, label_selector="role=owner"
    )
    ctl.owns(SECRET, cache=True).watches(SA, pointed_at, cache=True, metadata_only=True)
    operator.secrets = ctl.cache(SECRET)
    operator.accounts = ctl.cache(SA)
    return ctl, operator


async def make_owners(client: ApiClient, namespace: str, names: list[str]) -> None:
    for name in names:
        body = {"metadata": {"name": name, "labels": {"role": "owner"}}, "data": {"v": "0"}}
        await create(client, CONFIGMAP, body, namespace=namespace)


def relists(proxy: FaultProxy, plural: str) -> int:
    return len([p for p in proxy.watches() if f"/{plural}?" in p and "sendInitialEvents" in p])


async def test_children_come_from_the_cache_and_deletes_and_moves_retrigger(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str
) -> None:
    owners = ["o-0", "o-1", "o-2"]
    await make_owners(client, namespace, owners)
    sa = {
        "metadata": {"name": "pointer", "annotations": {"to": "o-0"}},
        "automountServiceAccountToken": False,
    }
    await create(client, SA, sa, namespace=namespace)
    ctl, operator = controller(proxied, namespace)
    async with running(ctl):
        await eventually(lambda: len(ctl.cache(SECRET)) == 3, what="every child cached")
        await eventually(lambda: operator.writes == 3, what="one write per owner")

        # A change the cached child already reflects (a label): reconciled, no request.
        before = len(proxy.requests)
        mark = time.monotonic()
        for name in owners:
            await patch(
                client, CONFIGMAP, name, {"metadata": {"labels": {"x": "1"}}}, namespace=namespace
            )
        await eventually(
            lambda: all(operator.since(mark, n) for n in owners), what="owners reconciled"
        )
        requests = [(m, p) for m, p in proxy.requests[before:] if "watch=" not in p]
        assert requests == [], "a reconcile asked the API server for what the cache holds"
        assert all(operator.since(mark, n)[-1][0] == [f"{n}-child"] for n in owners)

        # The ServiceAccount is cached as metadata only, and maps to its owner.
        cached = ctl.cache(SA).get("pointer", namespace)
        assert cached is not None
        assert set(cached) == {"apiVersion", "kind", "metadata"}
        assert (cached["apiVersion"], cached["kind"]) == ("v1", "ServiceAccount")
        assert cached["metadata"]["annotations"]["to"] == "o-0"
        assert operator.since(0, "o-0")[-1][1] == ["pointer"]

        # A removed reference re-triggers its old target, which no longer sees it.
        mark = time.monotonic()
        await patch(
            client, SA, "pointer", {"metadata": {"annotations": {"to": "o-1"}}}, namespace=namespace
        )
        await eventually(
            lambda: bool(operator.since(mark, "o-0")), what="the old target re-triggered"
        )
        await eventually(lambda: bool(operator.since(mark, "o-1")), what="the new target triggered")
        assert operator.since(mark, "o-0")[-1][1] == []
        assert operator.since(mark, "o-1")[-1][1] == ["pointer"]

        # A deleted child re-triggers its owner, which recreates it.
        writes = operator.writes
        await delete(client, SECRET, "o-2-child", namespace=namespace)
        await eventually(lambda: operator.writes == writes + 1, what="o-2 recreated its child")
        await eventually(lambda: ctl.cache(SECRET).get("o-2-child", namespace) is not None)

        # The same after a relist: the watches are down while the child is deleted, and the
        # Secret watch's resume is answered 410 Gone, so the delete is only seen as a child
        # missing from the new list.
        secret_lists = relists(proxy, "secrets")
        writes = operator.writes
        proxy.fail(
            410, match=lambda method, path: "/secrets?" in path and "resourceVersion=" in path
        )
        proxy.down = True
        proxy.cut()
        await delete(client, SECRET, "o-1-child", namespace=namespace)
        proxy.down = False
        await eventually(lambda: operator.writes == writes + 1, what="o-1 recreated its child")
        assert relists(proxy, "secrets") > secret_lists, "the delete was not seen by a relist"
        await eventually(lambda: ctl.cache(SECRET).get("o-1-child", namespace) is not None)


@pytest.mark.slow
@SLOW
async def test_a_metadata_only_watch_survives_an_api_server_restart(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    await make_owners(client, namespace, ["r-0", "r-1"])
    sa = {"metadata": {"name": "pointer", "annotations": {"to": "r-0"}}}
    await create(client, SA, sa, namespace=namespace)
    ctl, operator = controller(proxied, namespace)
    async with running(ctl):
        await eventually(lambda: operator.writes == 2, what="one write per owner")
        sa_lists = relists(proxy, "serviceaccounts")
        await control_plane.restart_apiserver()
        # moved while the watches reconnect: seen by a resume or by a relist, either way
        mark = time.monotonic()
        await patch(
            client, SA, "pointer", {"metadata": {"annotations": {"to": "r-1"}}}, namespace=namespace
        )
        await eventually(lambda: bool(operator.since(mark, "r-1")), what="the new target triggered")
        await eventually(
            lambda: bool(operator.since(mark, "r-0")), what="the old target re-triggered"
        )
        assert operator.since(mark, "r-1")[-1][1] == ["pointer"]
        cached = ctl.cache(SA).get("pointer", namespace)
        assert cached is not None
        assert set(cached) == {"apiVersion", "kind", "metadata"}
        assert len(proxy.watches()) > sa_lists  # it did reconnect


async def test_metadata_only_on_a_resource_the_server_cannot_serve_so_is_a_clear_error(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str
) -> None:
    await make_owners(client, namespace, ["e-0"])
    # kube-apiserver serves every built-in resource as metadata; an aggregated API may not
    # (it answers 406 Not Acceptable, as the proxy does here for ServiceAccounts)
    proxy.fail(406, times=10, match=lambda method, path: "/serviceaccounts" in path)
    ctl, _ = controller(proxied, namespace)
    with pytest.raises(MetadataOnlyUnsupported, match=r"serviceaccounts\.v1 as metadata only.*406"):
        async with running(ctl) as task:
            await task


async def test_under_a_manager_the_shared_watch_fills_the_cache(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str
) -> None:
    """Two controllers in one Manager both watch Secrets (one owns them, cached; the other
    reconciles them): one Secret watch serves both, its store is the cache the owner's
    reconcile reads, and a deleted child still re-triggers its owner."""
    await make_owners(client, namespace, ["m-0", "m-1"])
    ctl, operator = controller(proxied, namespace)
    secrets_seen: list[str] = []

    async def on_secret(obj: dict[str, Any], ctx: Any) -> None:
        secrets_seen.append(obj["metadata"]["name"])

    other = Controller(proxied, SECRET, on_secret, namespace=namespace, name="secret-reader")
    manager = Manager(proxied, metrics_port=None, probe_port=None).add(ctl).add(other)
    task = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: operator.writes == 2, what="one write per owner")
        await eventually(lambda: len(ctl.cache(SECRET)) == 2, what="every child cached")
        await eventually(lambda: {"m-0-child", "m-1-child"} <= set(secrets_seen))
        assert relists(proxy, "secrets") == 1, "the two controllers did not share one watch"

        # The owner's reconcile reads its child from the shared store: no request.
        before = len(proxy.requests)
        mark = time.monotonic()
        await patch(
            client, CONFIGMAP, "m-0", {"metadata": {"labels": {"x": "1"}}}, namespace=namespace
        )
        await eventually(lambda: bool(operator.since(mark, "m-0")), what="m-0 reconciled")
        assert operator.since(mark, "m-0")[-1][0] == ["m-0-child"]
        requests = [(m, p) for m, p in proxy.requests[before:] if "watch=" not in p]
        assert requests == [], "a reconcile asked the API server for what the cache holds"

        # A deleted child re-triggers its owner through the shared watch.
        writes = operator.writes
        await delete(client, SECRET, "m-1-child", namespace=namespace)
        await eventually(lambda: operator.writes == writes + 1, what="m-1 recreated its child")
        await eventually(lambda: ctl.cache(SECRET).get("m-1-child", namespace) is not None)
    finally:
        manager.shutdown()
        await asyncio.wait_for(task, 30)
