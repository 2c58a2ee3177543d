"""The reflector store fed by the real watcher: readiness, live updates, owner/label indexes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import delete, patch
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, WatchConfig, WatchEvent, watcher
from fastctl.types import ObjectRef

from .conftest import CM, Collector, make_configmap

pytestmark = pytest.mark.kube

Collect = Callable[[AsyncIterable[WatchEvent]], Collector]


async def test_store_follows_the_server(
    client: ApiClient, namespace: str, collect: Collect
) -> None:
    parent = await make_configmap(client, namespace, "parent")
    for i in range(3):
        await make_configmap(client, namespace, f"child-{i}", labels={"app": "demo"}, owner=parent)
    await make_configmap(client, namespace, "loner", labels={"app": "other"})
    store = Store()
    assert not store.is_ready
    paged = WatchConfig(page_size=2)
    events = collect(reflector(store, watcher(client, CM, namespace=namespace, config=paged)))
    await asyncio.wait_for(store.wait_ready(), 30)
    assert len(store) == 5
    uid = parent["metadata"]["uid"]
    assert sorted(o["metadata"]["name"] for o in store.owned_by(uid)) == [
        "child-0",
        "child-1",
        "child-2",
    ]
    assert len(store.with_label("app", "demo")) == 3

    await patch(
        client, CM, "child-0", {"metadata": {"labels": {"app": "moved"}}}, namespace=namespace
    )
    await delete(client, CM, "child-1", namespace=namespace)
    await events.wait_for(lambda _: events.count(EventKind.DELETE, "child-1") == 1)
    assert sorted(o["metadata"]["name"] for o in store.with_label("app", "demo")) == ["child-2"]
    assert [o["metadata"]["name"] for o in store.with_label("app", "moved")] == ["child-0"]
    assert sorted(o["metadata"]["name"] for o in store.owned_by(uid)) == ["child-0", "child-2"]
    assert ObjectRef("child-1", namespace) not in store
    assert store[ObjectRef("child-0", namespace)]["metadata"]["labels"] == {"app": "moved"}


async def test_strip_managed_fields(client: ApiClient, namespace: str, collect: Collect) -> None:
    await make_configmap(client, namespace, "a", {"k": "v"})
    store = Store()
    stripped = WatchConfig(strip_managed_fields=True)
    collect(reflector(store, watcher(client, CM, namespace=namespace, config=stripped)))
    await asyncio.wait_for(store.wait_ready(), 30)
    obj = store[ObjectRef("a", namespace)]
    assert "managedFields" not in obj["metadata"]
    assert obj["data"] == {"k": "v"}
