"""Server-side apply, patch, create, get and delete against the real server, and ApiError."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import ApiError, apply, apply_status, create, delete, get, patch
from fastctl.kube._resource import Resource

from .conftest import CM

pytestmark = pytest.mark.kube


def managers(obj: dict[str, object]) -> set[str]:
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    return {m["manager"] for m in meta.get("managedFields", [])}


async def test_apply_creates_then_updates(client: ApiClient, namespace: str) -> None:
    intent = {"metadata": {"name": "a", "namespace": namespace}, "data": {"x": "1"}}
    created = await apply(client, CM, intent, field_manager="ctl")  # apiVersion/kind filled in
    assert created["data"] == {"x": "1"}
    assert "ctl" in managers(created)
    updated = await apply(client, CM, {**intent, "data": {"x": "2", "y": "3"}}, field_manager="ctl")
    assert updated["data"] == {"x": "2", "y": "3"}
    # fields this manager no longer applies are removed
    pruned = await apply(client, CM, {**intent, "data": {"y": "3"}}, field_manager="ctl")
    assert pruned["data"] == {"y": "3"}


async def test_apply_conflict_without_force_is_a_clear_error(
    client: ApiClient, namespace: str
) -> None:
    intent = {"metadata": {"name": "a", "namespace": namespace}, "data": {"x": "mine"}}
    await apply(client, CM, intent, field_manager="first")
    theirs = {**intent, "data": {"x": "theirs"}}
    with pytest.raises(ApiError) as info:
        await apply(client, CM, theirs, field_manager="second", force=False)
    err = info.value
    assert err.status == 409
    assert err.reason == "Conflict"
    assert err.method == "PATCH"
    assert err.path == f"/api/v1/namespaces/{namespace}/configmaps/a"
    assert str(err).startswith(f"PATCH /api/v1/namespaces/{namespace}/configmaps/a: 409 Conflict: ")
    assert '"first"' in err.message
    assert "\n" not in str(err).strip()
    # force takes the field over
    taken = await apply(client, CM, theirs, field_manager="second")
    assert taken["data"] == {"x": "theirs"}


async def test_apply_status_on_a_crd(client: ApiClient, crds: str, namespace: str) -> None:
    widgets = Resource(f"{crds}/v1", "Widget")
    base = {"metadata": {"name": "w", "namespace": namespace}}
    await apply(client, widgets, {**base, "spec": {"size": 2}}, field_manager="ctl")
    status = await apply_status(
        client, widgets, {**base, "status": {"ready": True}}, field_manager="ctl-status"
    )
    assert status["status"] == {"ready": True}
    assert status["spec"] == {"size": 2}
    # the main resource ignores status; the status subresource ignores spec
    again = await apply(
        client,
        widgets,
        {**base, "spec": {"size": 3}, "status": {"ready": False}},
        field_manager="ctl",
    )
    assert again["status"] == {"ready": True}
    assert again["spec"] == {"size": 3}


async def test_dry_run_changes_nothing(client: ApiClient, namespace: str) -> None:
    intent = {"metadata": {"name": "dry", "namespace": namespace}, "data": {"x": "1"}}
    await apply(client, CM, intent, field_manager="ctl", dry_run=True)
    with pytest.raises(ApiError) as info:
        await get(client, CM, "dry", namespace=namespace)
    assert info.value.status == 404
    assert info.value.reason == "NotFound"


async def test_create_patch_get_delete(client: ApiClient, namespace: str) -> None:
    made = await create(
        client, CM, {"metadata": {"name": "c"}, "data": {"a": "1"}}, namespace=namespace
    )
    assert made["metadata"]["namespace"] == namespace
    with pytest.raises(ApiError) as info:
        await create(client, CM, {"metadata": {"name": "c"}}, namespace=namespace)
    assert info.value.status == 409
    assert info.value.reason == "AlreadyExists"

    merged = await patch(client, CM, "c", {"data": {"b": "2"}}, namespace=namespace)
    assert merged["data"] == {"a": "1", "b": "2"}
    ops = [{"op": "remove", "path": "/data/a"}]
    jsonp = await patch(client, CM, "c", ops, namespace=namespace, patch_type="json")
    assert jsonp["data"] == {"b": "2"}
    assert (await get(client, CM, "c", namespace=namespace))["data"] == {"b": "2"}

    with pytest.raises(ApiError) as info:  # a failed precondition is an error
        await delete(client, CM, "c", namespace=namespace, uid="not-the-uid")
    assert info.value.status == 409
    assert await delete(client, CM, "c", namespace=namespace) is not None
    assert await delete(client, CM, "c", namespace=namespace) is None  # already gone: fine
    with pytest.raises(ApiError) as info:
        await delete(client, CM, "c", namespace=namespace, missing_ok=False)
    assert str(info.value) == (
        f"DELETE /api/v1/namespaces/{namespace}/configmaps/c: "
        '404 NotFound: configmaps "c" not found'
    )


async def test_cluster_scoped(client: ApiClient, crds: str) -> None:
    gadgets = Resource(f"{crds}/v1", "Gadget")
    got = await apply(
        client, gadgets, {"metadata": {"name": "g1"}, "spec": {"a": 1}}, field_manager="t"
    )
    assert "namespace" not in got["metadata"]
    status = await apply_status(
        client, gadgets, {"metadata": {"name": "g1"}, "status": {"ok": True}}, field_manager="t"
    )
    assert status["status"] == {"ok": True}
    await delete(client, gadgets, "g1")


async def test_requires_namespace_and_field_manager(client: ApiClient) -> None:
    with pytest.raises(ValueError, match="namespaced"):
        await apply(client, CM, {"metadata": {"name": "x"}}, field_manager="t")
    with pytest.raises(ValueError, match="field_manager"):
        await apply(client, CM, {"metadata": {"name": "x", "namespace": "d"}}, field_manager="")
