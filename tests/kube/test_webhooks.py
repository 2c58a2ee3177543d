"""fastctl.webhook against the real kube-apiserver: it calls the server at
``https://127.0.0.1:PORT`` (``clientConfig.url``), trusting the CA fastctl made, through
configurations fastctl generated and installed.

Every configuration here is scoped to the test's namespace (``namespaceSelector``) and
deleted at the end, so the other tests on the shared control plane never meet it. The API
server picks up a new configuration a moment after it is written: each test first waits,
with a bounded number of dry-run probes, until the webhook answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.demo import webhooks as demo_webhooks
from fastctl.demo import widgets
from fastctl.errors import ApiError
from fastctl.kube import Resource, create, delete, get
from fastctl.kube._http import request, request_json
from fastctl.testing import ControlPlane
from fastctl.webhook import (
    AdmissionRequest,
    Allow,
    Converter,
    Deny,
    ServingCertificate,
    Webhooks,
    WebhookServer,
    install,
    uninstall,
)
from fastctl.webhook._configuration import MUTATING, VALIDATING

from .conftest import CM, GROUP, install_crd

pytestmark = pytest.mark.kube

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)


def _cm(name: str, namespace: str, labels: dict[str, str] | None = None, **data: str) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


async def _eventually(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    """Until `probe()` is true: the API server takes a moment to load a configuration."""
    for _ in range(200):
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: never happened")


class Served:
    """A running webhook server, its configurations installed for one namespace."""

    def __init__(self, server: WebhookServer, name: str) -> None:
        self.server = server
        self.name = name


@pytest.fixture
async def served(
    client: ApiClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[[Webhooks], Awaitable[Served]]]:
    started: list[Served] = []

    async def serve(hooks: Webhooks) -> Served:
        cert = ServingCertificate.self_signed(tmp_path / str(len(started)), ["127.0.0.1"])
        server = WebhookServer(hooks, cert, port=0, host="127.0.0.1")
        await server.start()
        name = f"fastctl-test-{namespace}-{len(started)}"
        served = Served(server, name)
        started.append(served)
        await install(client, hooks, name, url=server.url, ca_bundle=cert.ca_bundle)
        return served

    yield serve
    for served in started:
        for resource in (VALIDATING, MUTATING):
            await delete(client, resource, served.name)
        await served.server.stop()


def _in(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


async def _post(client: ApiClient, namespace: str, obj: Any, **query: str) -> tuple[int, Any, str]:
    """Create ConfigMap `obj`: (status, body, the Warning headers joined)."""
    return await _post_to(client, CM.collection_path(namespace), obj, **query)


async def _post_to(client: ApiClient, path: str, obj: Any, **query: str) -> tuple[int, Any, str]:
    """POST `obj` to collection `path`: (status, body, the Warning headers joined)."""
    async with await request(client, "POST", path, query=query, body=orjson.dumps(obj)) as resp:
        body = orjson.loads(await resp.read())
        return resp.status, body, " | ".join(resp.headers.getall("Warning", []))


async def test_validating_denies_with_its_message_and_warnings(
    client: ApiClient, namespace: str, served: Callable[[Webhooks], Awaitable[Served]]
) -> None:
    hooks = Webhooks()
    dry_runs: list[bool] = []

    @hooks.validating(CONFIGMAP, name="cm.validate.fastctl.dev", namespace_selector=_in(namespace))
    async def check(request: AdmissionRequest) -> Allow | Deny:
        assert request.object is not None
        data = request.object.get("data") or {}
        dry_runs.append(request.dry_run)
        if "explode" in data:
            raise RuntimeError("the handler broke")
        if "bad" in data:
            return Deny("bad is not allowed here", warnings=["rename bad"])
        return Allow(warnings=[f"seen by {request.user_info.get('username')}"])

    await served(hooks)

    async def active() -> bool:
        status, _, _ = await _post(
            client, namespace, _cm("probe", namespace, bad="1"), dryRun="All"
        )
        return status == 403

    await _eventually(active, "the validating webhook answering")

    status, body, warnings = await _post(client, namespace, _cm("a", namespace, bad="1"))
    assert status == 403
    assert "bad is not allowed here" in body["message"]
    assert "cm.validate.fastctl.dev" in body["message"]
    assert "rename bad" in warnings

    status, _, warnings = await _post(client, namespace, _cm("b", namespace, good="1"))
    assert status == 201
    assert "seen by " in warnings  # the user's name: userInfo reached the handler
    assert "seen by None" not in warnings

    dry_runs.clear()
    status, _, _ = await _post(client, namespace, _cm("c", namespace, good="1"), dryRun="All")
    assert status == 201
    assert dry_runs == [True], "the dry run reached the handler, flagged"
    with pytest.raises(ApiError) as missing:
        await get(client, CM, "c", namespace=namespace)
    assert missing.value.status == 404

    with pytest.raises(ApiError) as broken:
        await create(client, CM, _cm("d", namespace, explode="1"))
    assert "RuntimeError('the handler broke')" in broken.value.message
    assert "check" in broken.value.message


async def test_a_mutating_webhooks_patch_is_stored(
    client: ApiClient, namespace: str, served: Callable[[Webhooks], Awaitable[Served]]
) -> None:
    hooks = Webhooks()

    @hooks.mutating(
        CONFIGMAP, name="cm.mutate.fastctl.dev", operations=["CREATE"],
        namespace_selector=_in(namespace),
    )  # fmt: skip
    def default(request: AdmissionRequest) -> dict[str, Any]:
        obj = request.object
        assert obj is not None
        obj["metadata"].setdefault("labels", {})["app.kubernetes.io/managed-by"] = "fastctl"
        obj.setdefault("data", {}).pop("drop-me", None)
        return obj

    await served(hooks)

    async def active() -> bool:
        _, got, _ = await _post(client, namespace, _cm("probe", namespace, x="1"), dryRun="All")
        return "labels" in got["metadata"]

    await _eventually(active, "the mutating webhook patching")
    await create(
        client, CM, {**_cm("m", namespace, keep="1"), "data": {"keep": "1", "drop-me": "1"}}
    )
    stored = await get(client, CM, "m", namespace=namespace)
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "fastctl"}
    assert stored["data"] == {"keep": "1"}


def _convertible_crd() -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"convertibles.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "convertibles", "singular": "convertible", "kind": "Convertible"},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": schema},
                {"name": "v2", "served": True, "storage": False, "schema": schema},
            ],
        },
    }


async def _convertibles(
    control_plane: ControlPlane,
) -> tuple[Resource, Resource, Webhooks, Converter]:
    """The Convertible CRD installed (v1 stored, v2 served), its two versions, and webhooks
    with its converter (no functions yet)."""
    await asyncio.to_thread(install_crd, control_plane, _convertible_crd())
    v1 = Resource(f"{GROUP}/v1", "Convertible", plural="convertibles", namespaced=True)
    v2 = Resource(f"{GROUP}/v2", "Convertible", plural="convertibles", namespaced=True)
    hooks = Webhooks()
    return v1, v2, hooks, hooks.conversion(f"convertibles.{GROUP}")


async def test_a_conversion_webhook_converts_between_versions(
    client: ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    served: Callable[[Webhooks], Awaitable[Served]],
) -> None:
    v1, v2, hooks, convertibles = await _convertibles(control_plane)
    calls: list[tuple[str, str]] = []

    @convertibles.converts("v1", "v2")
    def up(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(("v1", "v2"))
        obj["spec"] = {"replicas": {"count": obj["spec"].pop("replicas")}}
        return obj

    @convertibles.converts("v2", "v1")
    async def down(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(("v2", "v1"))
        obj["spec"] = {"replicas": obj["spec"]["replicas"]["count"]}
        return obj

    await served(hooks)
    try:
        first = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Convertible",
            "metadata": {"name": "one", "namespace": namespace},
            "spec": {"replicas": 3},
        }
        await create(client, v1, first)

        async def converted() -> bool:
            try:
                got = await get(client, v2, "one", namespace=namespace)
            except ApiError:
                return False
            return bool(got["spec"] == {"replicas": {"count": 3}})

        await _eventually(converted, "the object read as v2 through the webhook")
        assert ("v1", "v2") in calls

        second = {
            "apiVersion": f"{GROUP}/v2",
            "kind": "Convertible",
            "metadata": {"name": "two", "namespace": namespace},
            "spec": {"replicas": {"count": 5}},
        }
        await create(client, v2, second)
        assert ("v2", "v1") in calls, "stored as v1, the storage version"
        back = await get(client, v1, "two", namespace=namespace)
        assert back["apiVersion"] == f"{GROUP}/v1"
        assert back["spec"] == {"replicas": 5}
    finally:
        await asyncio.to_thread(
            control_plane.api_request,
            "DELETE",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/convertibles.{GROUP}",
        )


async def test_failure_policy_when_the_server_is_down(
    client: ApiClient, namespace: str, served: Callable[[Webhooks], Awaitable[Served]]
) -> None:
    hooks = Webhooks()
    for policy in ("Fail", "Ignore"):
        hooks.validating(
            CONFIGMAP,
            name=f"cm.{policy.lower()}.fastctl.dev",
            failure_policy=policy,
            namespace_selector=_in(namespace),
            object_selector={"matchLabels": {"policy": policy}},
        )(lambda request: Deny("the server answered"))
    running = await served(hooks)

    async def active() -> bool:
        status, _, _ = await _post(
            client, namespace, _cm("probe", namespace, {"policy": "Fail"}), dryRun="All"
        )
        return status == 403

    await _eventually(active, "the webhooks answering")
    await running.server.stop()  # down: connections are refused from now on

    status, body, _ = await _post(client, namespace, _cm("f", namespace, {"policy": "Fail"}))
    assert status == 500
    assert "failed calling webhook" in body["message"]
    assert "cm.fail.fastctl.dev" in body["message"]
    status, _, _ = await _post(client, namespace, _cm("i", namespace, {"policy": "Ignore"}))
    assert status == 201, "Ignore admits what it cannot ask about"


def _widgets(namespace: str, version: str) -> str:
    return f"/apis/{widgets.GROUP}/{version}/namespaces/{namespace}/widgets"


@pytest.fixture
async def demo_served(client: ApiClient, namespace: str) -> AsyncIterator[None]:
    """The demo's managed webhook server, its admission webhooks scoped to `namespace`;
    uninstalled at the end (the Widget CRD back to no conversion)."""
    await widgets.install_crd(client)
    server = demo_webhooks.serve(client, namespace=namespace, name=f"fastctl-demo-{namespace}")
    await server.start()
    try:
        await asyncio.wait_for(server.installed(), 60)
        assert server.is_ready()[0]
        yield
    finally:
        await uninstall(client, server.webhooks, server.name)
        await server.stop()


async def test_the_demo_widget_is_validated_defaulted_and_warned_about(
    client: ApiClient, namespace: str, demo_served: None
) -> None:
    path = _widgets(namespace, "v1")

    async def active() -> bool:
        bad = widgets.widget("probe", namespace, {"not a key!": "x"})
        denied, _, _ = await _post_to(client, path, bad, dryRun="All")
        _, empty, _ = await _post_to(
            client, path, widgets.widget("probe", namespace, {}), dryRun="All"
        )
        return denied == 403 and bool((empty.get("spec") or {}).get("owner"))

    await _eventually(active, "the demo's admission webhooks answering")
    status, body, _ = await _post_to(client, path, widgets.widget("bad", namespace, {"a b": "1"}))
    assert status == 403
    assert "'a b' is not a valid ConfigMap key" in body["message"]
    assert demo_webhooks.VALIDATE in body["message"]
    with pytest.raises(ApiError):
        await get(client, widgets.WIDGET, "bad", namespace=namespace)

    status, body, warnings = await _post_to(client, path, widgets.widget("empty", namespace, {}))
    assert status == 201
    assert "spec.data is empty" in warnings
    stored = await get(client, widgets.WIDGET, "empty", namespace=namespace)
    owner = stored["spec"]["owner"]
    assert owner, "the defaulting webhook filled it"
    assert owner != "unknown", "with the user's name"


async def test_a_demo_widget_read_as_v1alpha1_and_written_back_is_unchanged(
    client: ApiClient, namespace: str, demo_served: None
) -> None:
    await create(client, widgets.WIDGET, widgets.widget("rt", namespace, {"b": "2", "a": "1"}))
    stored = await get(client, widgets.WIDGET, "rt", namespace=namespace)
    expected = [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]
    seen: list[Any] = []

    async def converted() -> bool:
        try:
            old = await request_json(client, "GET", f"{_widgets(namespace, 'v1alpha1')}/rt")
            listed = await request_json(client, "GET", _widgets(namespace, "v1alpha1"))
        except ApiError as err:
            # Each change to the CRD's conversion stanza (this fixture's install, the last
            # test's uninstall) re-creates its storage: 429 "storage is (re)initializing".
            if err.status == 429:
                return False
            raise
        seen.append((old, listed))
        return bool(old["spec"].get("values") == expected)

    await _eventually(converted, "the Widget read as v1alpha1 through the webhook")
    old, listed = seen[-1]
    assert old["apiVersion"] == f"{widgets.GROUP}/v1alpha1"
    assert old["spec"]["owner"] == stored["spec"]["owner"]
    assert [item["spec"]["values"] for item in listed["items"]] == [expected]

    old["metadata"].setdefault("labels", {})["written"] = "as-v1alpha1"
    await request_json(
        client, "PUT", f"{_widgets(namespace, 'v1alpha1')}/rt", body=orjson.dumps(old)
    )
    back = await get(client, widgets.WIDGET, "rt", namespace=namespace)
    assert back["spec"] == stored["spec"], "v1 -> v1alpha1 -> v1 gave the object back"
    assert back["metadata"]["labels"] == {"written": "as-v1alpha1"}


async def test_a_failing_conversion_reaches_the_client_and_stores_nothing(
    client: ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    served: Callable[[Webhooks], Awaitable[Served]],
) -> None:
    v1, v2, hooks, convertibles = await _convertibles(control_plane)

    @convertibles.converts("v1", "v2")
    def up(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("bad cannot be converted")
        obj["spec"] = {"replicas": {"count": obj["spec"].pop("replicas")}}
        return obj

    @convertibles.converts("v2", "v1")
    def down(obj: dict[str, Any]) -> dict[str, Any]:
        count = obj["spec"]["replicas"]["count"]
        if count == 13:
            raise ValueError("13 replicas have no v1 form")
        obj["spec"] = {"replicas": count}
        return obj

    await served(hooks)

    def convertible(name: str, version: str, spec: Any) -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace}
        return {"apiVersion": f"{GROUP}/{version}", "kind": "Convertible", "metadata": meta,
                "spec": spec}  # fmt: skip

    try:
        await create(client, v1, convertible("good", "v1", {"replicas": 3}))
        await create(client, v1, convertible("bad", "v1", {"replicas": 4}))

        async def converted() -> bool:
            try:
                got = await get(client, v2, "good", namespace=namespace)
            except ApiError:
                return False
            return bool(got["spec"] == {"replicas": {"count": 3}})

        await _eventually(converted, "the object read as v2 through the webhook")
        with pytest.raises(ApiError) as one:
            await get(client, v2, "bad", namespace=namespace)
        assert "RuntimeError('bad cannot be converted')" in one.value.message
        with pytest.raises(ApiError) as listing:
            await request_json(
                client, "GET", f"/apis/{GROUP}/v2/namespaces/{namespace}/convertibles"
            )
        assert "bad cannot be converted" in listing.value.message
        stored = await get(client, v1, "bad", namespace=namespace)
        assert stored["spec"] == {"replicas": 4}, "as stored, untouched by the failure"

        with pytest.raises(ApiError) as refused:
            await create(client, v2, convertible("thirteen", "v2", {"replicas": {"count": 13}}))
        assert "13 replicas have no v1 form" in refused.value.message
        with pytest.raises(ApiError) as missing:
            await get(client, v1, "thirteen", namespace=namespace)
        assert missing.value.status == 404, "a write whose conversion failed stored nothing"
    finally:
        await asyncio.to_thread(
            control_plane.api_request,
            "DELETE",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/convertibles.{GROUP}",
        )
