"""The local control plane (etcd + kube-apiserver) against kubernetes-asyncio: real objects,
a CRD with a status subresource, restarts, two control planes at once, port conflicts,
clear errors, and no orphan processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from fastctl.testing import ControlPlane

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parent.parent
MERGE = "application/merge-patch+json"


async def _client(kubeconfig: Path) -> ApiClient:
    return await config.new_client_from_config(str(kubeconfig), persist_config=False)


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    async with await _client(control_plane.kubeconfig) as api_client:
        yield api_client


def _configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Any:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}), data=data
    )


# -- the API through kubernetes-asyncio --------------------------------------------------


async def test_configmap_create_list_patch_delete(api: ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    created = await v1.create_namespaced_config_map(
        namespace, _configmap("one", {"a": "1"}, {"app": "demo"})
    )
    assert created.metadata.uid
    await v1.create_namespaced_config_map(namespace, _configmap("two", {"a": "2"}))

    listed = await v1.list_namespaced_config_map(namespace, label_selector="app=demo")
    assert [cm.metadata.name for cm in listed.items] == ["one"]

    patched = await v1.patch_namespaced_config_map("one", namespace, {"data": {"b": "2"}})
    assert patched.data == {"a": "1", "b": "2"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)

    await v1.delete_namespaced_config_map("one", namespace)
    with pytest.raises(ApiException) as missing:
        await v1.read_namespaced_config_map("one", namespace)
    assert missing.value.status == 404
    names = {cm.metadata.name for cm in (await v1.list_namespaced_config_map(namespace)).items}
    assert "one" not in names
    assert "two" in names


async def test_watch_sees_add_modify_delete(api: ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    start = (await v1.list_namespaced_config_map(namespace)).metadata.resource_version
    events: list[tuple[str, str]] = []

    async def collect() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                v1.list_namespaced_config_map,
                namespace,
                resource_version=start,
                timeout_seconds=30,
                _request_timeout=40,
            ):
                events.append((event["type"], event["object"].metadata.name))
                if event["type"] == "DELETED":
                    return

    watcher = asyncio.create_task(collect())
    await v1.create_namespaced_config_map(namespace, _configmap("w", {"a": "1"}))
    await v1.patch_namespaced_config_map("w", namespace, {"data": {"a": "2"}})
    await v1.delete_namespaced_config_map("w", namespace)
    await asyncio.wait_for(watcher, 30)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.fastctl.dev"},
    "spec": {
        "group": "test.fastctl.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {"ready": {"type": "boolean"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def _install_crd(api: ApiClient, crd: dict[str, Any]) -> None:
    """Create (or keep) the CRD and wait until it is Established and served."""
    ext = client.ApiextensionsV1Api(api)
    try:
        await ext.create_custom_resource_definition(crd)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while True:
        got = await ext.read_custom_resource_definition(crd["metadata"]["name"])
        conditions = {c.type: c.status for c in (got.status.conditions or [])}
        if conditions.get("Established") == "True":
            return
        assert time.monotonic() < deadline, f"CRD not established: {conditions}"
        await asyncio.sleep(0.1)


async def test_crd_with_status_subresource(api: ApiClient, namespace: str) -> None:
    await _install_crd(api, WIDGET_CRD)
    custom = client.CustomObjectsApi(api)
    group, version, plural = "test.fastctl.dev", "v1", "widgets"
    widget = {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
        "status": {"ready": True},  # ignored on create: status is a subresource
    }
    # A CRD is served a moment after Established; retry 404s briefly.
    for _ in range(50):
        try:
            created = await custom.create_namespaced_custom_object(
                group, version, namespace, plural, widget
            )
            break
        except ApiException as exc:
            if exc.status != 404:
                raise
            await asyncio.sleep(0.1)
    assert "status" not in created or not created["status"]

    patched = await custom.patch_namespaced_custom_object_status(
        group, version, namespace, plural, "w1", {"status": {"ready": True}}, _content_type=MERGE
    )
    assert patched["status"] == {"ready": True}
    assert patched["spec"] == {"size": 3}

    # Through the main resource the status cannot change, and the spec can.
    after = await custom.patch_namespaced_custom_object(
        group,
        version,
        namespace,
        plural,
        "w1",
        {"spec": {"size": 4}, "status": {"ready": False}},
        _content_type=MERGE,
    )
    assert after["spec"] == {"size": 4}
    assert after["status"] == {"ready": True}
    assert after["metadata"]["generation"] == 2

    listed = await custom.list_namespaced_custom_object(group, version, namespace, plural)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]
    await custom.delete_namespaced_custom_object(group, version, namespace, plural, "w1")


async def test_restricted_user_is_denied_until_bound(
    control_plane: ControlPlane, api: ApiClient, namespace: str
) -> None:
    kubeconfig = control_plane.user_kubeconfig("alice", groups=["test-devs"])
    async with await _client(kubeconfig) as alice:
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(alice).list_namespaced_config_map(namespace)
        assert denied.value.status == 403

        rbac = client.RbacAuthorizationV1Api(api)
        await rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "read-configmaps"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
                ],
            },
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "devs-read-configmaps"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-configmaps",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "test-devs"}
                ],
            },
        )
        listed = await client.CoreV1Api(alice).list_namespaced_config_map(namespace)
        assert listed.items == []
        with pytest.raises(ApiException) as still_denied:
            await client.CoreV1Api(alice).create_namespaced_config_map(
                namespace, _configmap("nope", {})
            )
        assert still_denied.value.status == 403
