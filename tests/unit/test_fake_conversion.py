"""Conversion webhooks on a fake cluster: a CRD with two versions (v1 stored, v2 served) and
a module's converter between them. A request at v2 goes through the converter, called
through the webhook server's own ConversionReview code, as a real API server calls it:
what is written is stored at v1, what is read (get, list, watch, a write's answer) is shown
at v2, a merge patch at v2 is applied at v2; a converter's failure is the request's 500."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Resource
from fastctl.errors import ApiError
from fastctl.kube import apply, create, get, patch
from fastctl.kube import list as list_objects
from fastctl.testing import FakeCluster, run_until_quiet, virtual_time
from fastctl.webhook import Webhooks

GROUP = "conv.fastctl.dev"
V1 = Resource(f"{GROUP}/v1", "Gizmo")
V2 = Resource(f"{GROUP}/v2", "Gizmo")


def _version(name: str, storage: bool, spec: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}
    return {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema},
    }


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gizmos.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
        "versions": [
            _version("v1", True, {"replicas": {"type": "integer"}}),
            _version("v2", False, {"count": {"type": "integer"}}),
        ],
    },
}


def make_webhooks(calls: list[tuple[str, str]]) -> Webhooks:
    """v1 ``spec.replicas`` is v2 ``spec.count``; a count of 13 cannot be converted."""
    hooks = Webhooks()
    converter = hooks.conversion(f"gizmos.{GROUP}")

    @converter.converts("v1", "v2")
    def up(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(("v1", "v2"))
        spec = obj.pop("spec", {})
        obj["spec"] = {"count": spec["replicas"]} if "replicas" in spec else {}
        return obj

    @converter.converts("v2", "v1")
    def down(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(("v2", "v1"))
        spec = obj.pop("spec", {})
        if spec.get("count") == 13:
            raise ValueError("13 is unlucky")
        obj["spec"] = {"replicas": spec["count"]} if "count" in spec else {}
        return obj

    return hooks


def gizmo(version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "g"}},
        "spec": spec,
    }


def stored(cluster: FakeCluster, name: str) -> dict[str, Any]:
    obj = cluster.server.objects[(f"gizmos.{GROUP}", f"default/{name}")]
    return {"apiVersion": obj["apiVersion"], "spec": obj.get("spec")}


@virtual_time
async def test_requests_at_another_version_go_through_the_converter() -> None:
    calls: list[tuple[str, str]] = []
    async with FakeCluster(CRD, webhooks=make_webhooks(calls)) as cluster:
        client = cluster.client()
        made = await create(client, V2, gizmo("v2", "a", {"count": 3}))
        assert made["apiVersion"] == f"{GROUP}/v2"
        assert made["spec"] == {"count": 3}
        assert made["metadata"]["labels"] == {"app": "g"}
        assert stored(cluster, "a") == {"apiVersion": f"{GROUP}/v1", "spec": {"replicas": 3}}
        assert ("v2", "v1") in calls

        at_v1 = await get(client, V1, "a", namespace="default")
        assert at_v1["spec"] == {"replicas": 3}
        at_v2 = await get(client, V2, "a", namespace="default")
        assert (at_v2["apiVersion"], at_v2["spec"]) == (f"{GROUP}/v2", {"count": 3})
        assert at_v2["metadata"]["uid"] == at_v1["metadata"]["uid"]

        await create(client, V1, gizmo("v1", "b", {"replicas": 4}))
        listed = await list_objects(client, V2, namespace="default")
        assert listed["apiVersion"] == f"{GROUP}/v2"
        assert {o["metadata"]["name"]: o["spec"] for o in listed["items"]} == {
            "a": {"count": 3},
            "b": {"count": 4},
        }

        # A merge patch at v2 is applied at v2, stored at v1.
        await patch(client, V2, "b", {"spec": {"count": 5}}, namespace="default")
        assert stored(cluster, "b")["spec"] == {"replicas": 5}
        # Server-side apply at v2, stored at v1.
        applied = await apply(client, V2, gizmo("v2", "b", {"count": 7}), field_manager="me")
        assert applied["spec"] == {"count": 7}
        assert stored(cluster, "b")["spec"] == {"replicas": 7}


@virtual_time
async def test_a_controller_at_another_version_watches_through_the_converter() -> None:
    seen: dict[str, dict[str, Any]] = {}

    async def reconcile(obj: dict[str, Any], _: ApiClient) -> None:
        seen[obj["metadata"]["name"]] = {"apiVersion": obj["apiVersion"], **obj["spec"]}

    async with FakeCluster(CRD, webhooks=make_webhooks([])) as cluster:
        client = cluster.client()
        await create(client, V1, gizmo("v1", "a", {"replicas": 1}))
        ctl = Controller(client, V2, reconcile, context=client)
        await run_until_quiet(ctl)
        assert seen == {"a": {"apiVersion": f"{GROUP}/v2", "count": 1}}
        await patch(client, V1, "a", {"spec": {"replicas": 2}}, namespace="default")
        await run_until_quiet(Controller(client, V2, reconcile, context=client))
        assert seen["a"] == {"apiVersion": f"{GROUP}/v2", "count": 2}


@virtual_time
async def test_a_failed_conversion_fails_the_request() -> None:
    async with FakeCluster(CRD, webhooks=make_webhooks([])) as cluster:
        client = cluster.client()
        with pytest.raises(ApiError) as failed:
            await create(client, V2, gizmo("v2", "bad", {"count": 13}))
        assert failed.value.status == 500
        assert "conversion webhook for" in str(failed.value)
        assert "13 is unlucky" in str(failed.value)
        assert (f"gizmos.{GROUP}", "default/bad") not in cluster.server.objects


@virtual_time
async def test_without_a_converter_a_version_is_relabelled() -> None:
    """As a CRD with ``strategy: None``: the object is shown at the version asked for, its
    fields unchanged."""
    async with FakeCluster(CRD) as cluster:
        client = cluster.client()
        await create(client, V1, gizmo("v1", "a", {"replicas": 3}))
        at_v2 = await get(client, V2, "a", namespace="default")
        assert at_v2["apiVersion"] == f"{GROUP}/v2"
        assert at_v2["spec"] == {"replicas": 3}
