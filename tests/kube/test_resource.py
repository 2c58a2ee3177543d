"""Resolving resources through the real server's discovery: core kinds, CRDs, unknown kinds."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import apply, get
from fastctl.kube._resource import Discovery, Resource, ResourceNotFound
from fastctl.kube._retry import NOT_FOUND_RETRIES, Backoff
from fastctl.kube._watcher import watcher

pytestmark = pytest.mark.kube


async def test_core_kinds(client: ApiClient) -> None:
    cm = await Resource("v1", "ConfigMap").resolve(client)
    assert (cm.group, cm.version, cm.plural, cm.namespaced) == ("", "v1", "configmaps", True)
    assert cm.verbs is not None
    assert {"list", "watch", "patch"} <= cm.verbs
    assert not cm.has_status
    ns = await Resource("v1", "Namespace").resolve(client)
    assert (ns.plural, ns.namespaced) == ("namespaces", False)
    assert ns.has_status
    deploy = await Resource("apps/v1", "Deployment").resolve(client)
    assert deploy.collection_path("x") == "/apis/apps/v1/namespaces/x/deployments"
    assert deploy.subresources is not None
    assert {"status", "scale"} <= deploy.subresources
    # plural and singular names work as the kind too
    by_plural = await Resource("v1", "configmaps").resolve(client)
    assert by_plural.kind == "ConfigMap"


async def test_crds_are_resolved_by_discovery(client: ApiClient, crds: str) -> None:
    widget = await Resource(f"{crds}/v1", "Widget").resolve(client)
    assert (widget.group, widget.plural, widget.namespaced) == (crds, "widgets", True)
    assert widget.has_status
    gadget = await Resource(f"{crds}/v1", "Gadget").resolve(client)
    assert (gadget.plural, gadget.namespaced) == ("gadgets", False)
    assert gadget.object_path("g") == f"/apis/{crds}/v1/gadgets/g"


async def test_resolved_crd_paths_work(client: ApiClient, crds: str, namespace: str) -> None:
    widgets = Resource(f"{crds}/v1", "Widget")
    body = {"metadata": {"name": "w", "namespace": namespace}, "spec": {"size": 1}}
    created = await apply(client, widgets, body, field_manager="test")
    assert created["kind"] == "Widget"
    assert (await get(client, widgets, "w", namespace=namespace))["spec"] == {"size": 1}


async def test_unknown_kind_names_kind_and_group_version(client: ApiClient, crds: str) -> None:
    with pytest.raises(ResourceNotFound) as info:
        await Resource(f"{crds}/v1", "Wdget").resolve(client)
    message = str(info.value)
    assert f"Wdget ({crds}/v1)" in message
    assert "Widget" in message  # lists what is served, so the typo is obvious
    with pytest.raises(ResourceNotFound) as info:
        await Resource("v1", "Nothing").resolve(client)
    assert "Nothing (v1)" in str(info.value)


async def test_unknown_group_says_it_is_not_served(client: ApiClient) -> None:
    with pytest.raises(ResourceNotFound) as info:
        await Resource("nope.example.com/v1", "Widget").resolve(client)
    assert "does not serve nope.example.com/v1" in str(info.value)
    assert "CRD" in str(info.value)


async def test_watcher_gives_up_on_unknown_kind_after_its_lookups(client: ApiClient) -> None:
    """The watcher looks a missing kind up again (a CRD is often installed just after its
    operator), then raises before any event. A quick backoff keeps the default's half
    minute of lookups out of the test; the count of lookups is the same."""
    quick = Backoff(initial=0.01, maximum=0.02, jitter=0.0)
    with pytest.raises(ResourceNotFound) as info:
        async for _ in watcher(client, Resource("nope.example.com/v1", "Widget"), backoff=quick):
            pass
    assert f"looked up {NOT_FOUND_RETRIES + 1} times" in str(info.value)
    assert "does not serve nope.example.com/v1" in str(info.value)


async def test_offline_resolution_skips_discovery(client: ApiClient) -> None:
    res = await Resource(
        "nope.example.com/v1", "Widget", plural="widgets", namespaced=True
    ).resolve(client)
    assert res.collection_path("a") == "/apis/nope.example.com/v1/namespaces/a/widgets"
    assert res.subresources is None


async def test_discovery_is_cached_per_client(client: ApiClient) -> None:
    disc = Discovery.for_client(client)
    assert Discovery.for_client(client) is disc
    await Resource("v1", "ConfigMap").resolve(client)
    assert "v1" in disc._groups
    disc.invalidate("v1")
    assert "v1" not in disc._groups
