"""The finalizer protocol against the real server: add, apply, cleanup, remove, let go."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._finalizer import add_finalizer, finalizer, remove_finalizer
from fastctl.kube._objects import ApiError, apply, delete, get, patch
from fastctl.kube._resource import Resource
from fastctl.types import Action

pytestmark = pytest.mark.kube

NAME = "kubelayer.fastctl.dev/cleanup"


class Calls:
    def __init__(self, cleanup_result: Action | None = None) -> None:
        self.applied: list[dict[str, Any]] = []
        self.cleaned: list[dict[str, Any]] = []
        self.cleanup_result = cleanup_result
        self.fail_cleanup = False

    async def apply(self, obj: dict[str, Any]) -> Action | None:
        self.applied.append(obj)
        return Action.requeue(300)

    async def cleanup(self, obj: dict[str, Any]) -> Action | None:
        self.cleaned.append(obj)
        if self.fail_cleanup:
            raise RuntimeError("external system unavailable")
        return self.cleanup_result


def widgets(group: str) -> Resource:
    return Resource(f"{group}/v1", "Widget")


async def new_widget(client: ApiClient, group: str, namespace: str, **meta: Any) -> dict[str, Any]:
    body = {"metadata": {"name": "w", "namespace": namespace, **meta}, "spec": {"size": 1}}
    return await apply(client, widgets(group), body, field_manager="test")


async def test_full_flow(client: ApiClient, crds: str, namespace: str) -> None:
    res = widgets(crds)
    calls = Calls()
    obj = await new_widget(client, crds, namespace)

    # first reconcile: the finalizer is added and apply runs at once on the patched object
    action = await finalizer(client, res, obj, NAME, apply=calls.apply, cleanup=calls.cleanup)
    assert action == Action.requeue(300)
    assert calls.applied[0]["metadata"]["finalizers"] == [NAME]
    live = await get(client, res, "w", namespace=namespace)
    assert live["metadata"]["finalizers"] == [NAME]

    # a later reconcile only applies
    await finalizer(client, res, live, NAME, apply=calls.apply, cleanup=calls.cleanup)
    assert len(calls.applied) == 2
    assert not calls.cleaned

    # deletion: the object stays (deletionTimestamp) until cleanup ran and the finalizer left
    await delete(client, res, "w", namespace=namespace)
    doomed = await get(client, res, "w", namespace=namespace)
    assert doomed["metadata"]["deletionTimestamp"]
    action = await finalizer(client, res, doomed, NAME, apply=calls.apply, cleanup=calls.cleanup)
    assert action is None
    assert len(calls.cleaned) == 1
    assert len(calls.applied) == 2  # apply never runs on a deleted object
    with pytest.raises(ApiError) as info:
        await get(client, res, "w", namespace=namespace)
    assert info.value.status == 404


async def test_cleanup_that_requeues_or_fails_keeps_the_finalizer(
    client: ApiClient, crds: str, namespace: str
) -> None:
    res = widgets(crds)
    calls = Calls(cleanup_result=Action.requeue(5))
    obj = await new_widget(client, crds, namespace)
    obj = await add_finalizer(client, res, obj, NAME)
    await delete(client, res, "w", namespace=namespace)
    doomed = await get(client, res, "w", namespace=namespace)

    action = await finalizer(client, res, doomed, NAME, apply=calls.apply, cleanup=calls.cleanup)
    assert action == Action.requeue(5)  # still cleaning up
    assert (await get(client, res, "w", namespace=namespace))["metadata"]["finalizers"] == [NAME]

    calls.fail_cleanup = True
    with pytest.raises(RuntimeError):
        await finalizer(client, res, doomed, NAME, apply=calls.apply, cleanup=calls.cleanup)
    assert (await get(client, res, "w", namespace=namespace))["metadata"]["finalizers"] == [NAME]

    calls.fail_cleanup = False
    calls.cleanup_result = None
    assert (
        await finalizer(client, res, doomed, NAME, apply=calls.apply, cleanup=calls.cleanup) is None
    )
    assert len(calls.cleaned) == 3


async def test_other_finalizers_are_left_alone(
    client: ApiClient, crds: str, namespace: str
) -> None:
    res = widgets(crds)
    calls = Calls()
    obj = await new_widget(client, crds, namespace, finalizers=["other.example/keep"])
    await finalizer(client, res, obj, NAME, apply=calls.apply, cleanup=calls.cleanup)
    live = await get(client, res, "w", namespace=namespace)
    assert live["metadata"]["finalizers"] == ["other.example/keep", NAME]

    await delete(client, res, "w", namespace=namespace)
    doomed = await get(client, res, "w", namespace=namespace)
    await finalizer(client, res, doomed, NAME, apply=calls.apply, cleanup=calls.cleanup)
    left = await get(client, res, "w", namespace=namespace)
    assert left["metadata"]["finalizers"] == ["other.example/keep"]  # theirs holds it

    # ours is gone, so a further reconcile of the doomed object does nothing
    assert (
        await finalizer(client, res, left, NAME, apply=calls.apply, cleanup=calls.cleanup) is None
    )
    assert len(calls.cleaned) == 1
    await patch(client, res, "w", {"metadata": {"finalizers": None}}, namespace=namespace)


async def test_stale_copy_is_retried_against_a_fresh_read(
    client: ApiClient, crds: str, namespace: str
) -> None:
    """The guard (a JSON-patch test of the list) fails on a stale copy; the helper re-reads
    and succeeds without clobbering the finalizer someone else added meanwhile."""
    res = widgets(crds)
    stale = await new_widget(client, crds, namespace)
    await patch(
        client, res, "w", {"metadata": {"finalizers": ["other.example/new"]}}, namespace=namespace
    )
    updated = await add_finalizer(client, res, stale, NAME)
    assert updated["metadata"]["finalizers"] == ["other.example/new", NAME]
    # someone else removes theirs: our copy's index for NAME is now stale too
    await patch(client, res, "w", {"metadata": {"finalizers": [NAME]}}, namespace=namespace)
    removed = await remove_finalizer(client, res, updated, NAME)
    assert removed is not None
    assert removed["metadata"].get("finalizers") is None
