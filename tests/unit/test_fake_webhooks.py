"""A fake cluster calls a module's admission webhooks as the API server does: on the writes
their rules name (mutating first, then validating, each one handler of a `Webhooks`), with
the request's user, the object and the old object; a refusal is the request's error with
the handler's message, and nothing is stored."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import orjson
import pytest
from pydantic import Field

from fastctl import Controller, CustomResource, KubeModel, Resource
from fastctl.errors import ApiError
from fastctl.kube import apply, apply_status, create, delete, get, patch
from fastctl.testing import FakeCluster, run_until_quiet, virtual_time
from fastctl.webhook import AdmissionRequest, Allow, Deny, Webhooks

CM = Resource("v1", "ConfigMap", plural="configmaps")


class DeviceSpec(KubeModel):
    size: Literal["small", "large"] = "small"
    replicas: int = 1
    owner: str | None = None
    data: dict[str, str] = Field(default_factory=dict)


class DeviceStatus(KubeModel):
    observed: int = 0


class Device(CustomResource, group="hooks.fastctl.dev", version="v1"):
    spec: DeviceSpec = Field(default_factory=DeviceSpec)
    status: DeviceStatus | None = None


DEVICE = Device.resource()


def device(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hooks.fastctl.dev/v1",
        "kind": "Device",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


class Seen:
    """What the handlers were asked, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, AdmissionRequest]] = []

    def of(self, name: str) -> list[AdmissionRequest]:
        return [r for n, r in self.requests if n == name]


def device_hooks(seen: Seen) -> Webhooks:
    """A defaulting webhook (the owner: the creating user) and a validating one (large only
    for admins; replicas never go down; a Device labelled ``keep`` is never deleted)."""
    hooks = Webhooks()

    @hooks.mutating(DEVICE, name="devices.default.hooks.fastctl.dev", operations=["CREATE"])
    def default(request: AdmissionRequest) -> dict[str, Any]:
        seen.requests.append(("default", request))
        obj = request.object
        assert obj is not None
        spec = obj.setdefault("spec", {})
        spec.setdefault("owner", request.user_info.get("username"))
        return obj

    @hooks.validating(
        DEVICE,
        name="devices.validate.hooks.fastctl.dev",
        operations=["CREATE", "UPDATE", "DELETE"],
    )
    async def validate(request: AdmissionRequest) -> Allow | Deny:
        seen.requests.append(("validate", request))
        if request.operation == "DELETE":
            labels = (request.old_object or {})["metadata"].get("labels") or {}
            return Deny("this device is kept") if labels.get("keep") else Allow()
        new = Device.model_validate(request.object)
        if new.spec.size == "large" and "admins" not in request.user_info.get("groups", ()):
            return Deny("only admins may ask for a large device")
        if request.old_object is not None:
            old = Device.model_validate(request.old_object)
            if new.spec.replicas < old.spec.replicas:
                change = f"{old.spec.replicas} to {new.spec.replicas}"
                return Deny(f"replicas may not go down ({change})")
        return Allow()

    return hooks


@contextlib.asynccontextmanager
async def hooked(**kwargs: Any) -> Any:
    seen = Seen()
    async with FakeCluster(Device, webhooks=device_hooks(seen), **kwargs) as cluster:
        yield cluster, seen


@virtual_time
async def test_a_refused_create_is_the_handlers_message_and_stores_nothing() -> None:
    async with hooked() as (cluster, seen):
        client = cluster.client(user="bob", groups=("developers",))
        with pytest.raises(ApiError) as exc:
            await create(client, DEVICE, device("a", size="large"))
        assert exc.value.status == 403
        assert (
            'admission webhook "devices.validate.hooks.fastctl.dev" denied the request: '
            "only admins may ask for a large device"
        ) in str(exc.value)
        assert cluster.get(DEVICE.api_version, "Device", "a") is None
        assert [r.status for r in cluster.requests_of("create", "devices")] == [403]
        # The same create by an admin passes.
        admin = cluster.client(user="carol", groups=("admins",))
        made = await create(admin, DEVICE, device("a", size="large"))
        assert made["spec"]["size"] == "large"
        asked = seen.of("validate")[-1]
        assert asked.user_info["username"] == "carol"
        assert "admins" in asked.user_info["groups"]


@virtual_time
async def test_a_defaulted_field_is_stored_and_seen_by_the_validating_webhook() -> None:
    async with hooked() as (cluster, seen):
        made = await create(cluster.client(user="alice"), DEVICE, device("a"))
        assert made["spec"]["owner"] == "alice"
        stored = cluster.get(DEVICE.api_version, "Device", "a")
        assert stored is not None
        assert stored["spec"]["owner"] == "alice"
        assert stored["metadata"]["generation"] == 1
        # The validating webhook saw the object as the mutating one left it.
        assert seen.of("validate")[0].object is not None
        assert seen.of("validate")[0].object["spec"]["owner"] == "alice"
        # An apply that creates is a CREATE: defaulted too (the admin's client by default).
        applied = await apply(cluster.client(), DEVICE, device("b"), field_manager="t")
        assert applied["spec"]["owner"] == "fastctl-admin"
        # An UPDATE is not defaulted (the mutating webhook is for CREATE only).
        await patch(cluster.client(), DEVICE, "a", {"spec": {"owner": None}}, namespace="default")
        after = cluster.get(DEVICE.api_version, "Device", "a")
        assert after is not None
        assert "owner" not in after["spec"]


@virtual_time
async def test_an_update_sees_the_old_object() -> None:
    async with hooked() as (cluster, seen):
        client = cluster.client()
        await create(client, DEVICE, device("a", replicas=3))
        await patch(client, DEVICE, "a", {"spec": {"replicas": 5}}, namespace="default")
        update_request = seen.of("validate")[-1]
        assert update_request.operation == "UPDATE"
        assert update_request.old_object is not None
        assert update_request.old_object["spec"]["replicas"] == 3
        assert update_request.object is not None
        assert update_request.object["spec"]["replicas"] == 5
        writes: list[Callable[[], Awaitable[Any]]] = [
            lambda: patch(client, DEVICE, "a", {"spec": {"replicas": 2}}, namespace="default"),
            lambda: apply(client, DEVICE, device("a", replicas=2), field_manager="t", force=True),
        ]
        for write in writes:
            with pytest.raises(ApiError) as exc:
                await write()
            assert exc.value.status == 403
            assert "replicas may not go down (5 to 2)" in str(exc.value)
        current = await get(client, DEVICE, "a", namespace="default")
        assert current["spec"]["replicas"] == 5
        assert current["metadata"]["generation"] == 2
        # A PUT of the whole object goes through them too.
        current["spec"]["replicas"] = 1
        path = "/apis/hooks.fastctl.dev/v1/namespaces/default/devices/a"
        put = await cluster.server.request("PUT", path, body=orjson.dumps(current))
        assert put.status == 403


@virtual_time
async def test_a_delete_sees_the_old_object_and_may_be_refused() -> None:
    async with hooked() as (cluster, seen):
        client = cluster.client()
        kept = device("a")
        kept["metadata"]["labels"] = {"keep": "1"}
        await create(client, DEVICE, kept)
        await create(client, DEVICE, device("b"))
        with pytest.raises(ApiError) as exc:
            await delete(client, DEVICE, "a", namespace="default")
        assert exc.value.status == 403
        assert "this device is kept" in str(exc.value)
        assert cluster.get(DEVICE.api_version, "Device", "a") is not None
        await delete(client, DEVICE, "b", namespace="default")
        assert cluster.get(DEVICE.api_version, "Device", "b") is None
        asked = seen.of("validate")[-1]
        assert (asked.operation, asked.object) == ("DELETE", None)
        assert asked.old_object is not None
        assert asked.old_object["metadata"]["name"] == "b"


@virtual_time
async def test_status_writes_and_other_resources_are_not_sent() -> None:
    async with hooked() as (cluster, seen):
        client = cluster.client(user="bob")
        await create(client, DEVICE, device("a"))
        before = len(seen.requests)
        await apply_status(client, DEVICE, device("a"), status={"observed": 1}, field_manager="t")
        await create(client, CM, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c", "namespace": "default"}})  # fmt: skip
        assert len(seen.requests) == before
        # Writes made on the cluster directly are not sent either (as a write to etcd).
        cluster.create(device("b", size="large"))
        assert len(seen.requests) == before


@virtual_time
async def test_a_mutating_webhook_output_is_checked_against_the_schema() -> None:
    hooks = Webhooks()

    @hooks.mutating(DEVICE, name="devices.break.hooks.fastctl.dev")
    def wrong(request: AdmissionRequest) -> dict[str, Any]:
        obj = request.object
        assert obj is not None
        obj["spec"]["size"] = "huge"
        return obj

    async with FakeCluster(Device, webhooks=hooks) as cluster:
        with pytest.raises(ApiError) as exc:
            await create(cluster.client(), DEVICE, device("a"))
        assert exc.value.status == 422


@virtual_time
async def test_selectors_choose_what_is_sent() -> None:
    seen: list[str] = []
    hooks = Webhooks()

    @hooks.validating(
        CM,
        name="configmaps.validate.hooks.fastctl.dev",
        namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": "default"}},
        object_selector={"matchExpressions": [{"key": "checked", "operator": "Exists"}]},
    )
    def refuse(request: AdmissionRequest) -> Deny:
        seen.append(request.name)
        return Deny("no")

    def cm(name: str, namespace: str, **labels: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace, "labels": labels}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}

    async with FakeCluster(webhooks=hooks) as cluster:
        client = cluster.client()
        await create(client, CM, cm("a", "default"))
        await create(client, CM, cm("b", "kube-system", checked="1"))
        with pytest.raises(ApiError):
            await create(client, CM, cm("c", "default", checked="1"))
        assert seen == ["c"]


@virtual_time
async def test_the_operators_own_writes_pass_through_them() -> None:
    """A controller's applies are admitted like anyone's: the defaulting webhook fills the
    owner of the Devices it makes, the validating one refuses the large one."""
    async with hooked() as (cluster, _):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "order", "namespace": "default"},
                        "data": {"small": "1", "large": "2"}})  # fmt: skip
        refused: list[int] = []

        async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
            for name, size in (("made-small", "small"), ("made-large", "large")):
                try:
                    await apply(client, DEVICE, device(name, size=size), field_manager="op")
                except ApiError as exc:
                    refused.append(exc.status)

        client = cluster.client(user="system:serviceaccount:default:op")
        ctl = Controller(client, CM, reconcile, name="orders")
        await run_until_quiet(ctl)
        made = cluster.get(DEVICE.api_version, "Device", "made-small")
        assert made is not None
        assert made["spec"]["owner"] == "system:serviceaccount:default:op"
        assert cluster.get(DEVICE.api_version, "Device", "made-large") is None
        assert refused
        assert set(refused) == {403}


@virtual_time
async def test_a_write_is_admitted_again_when_the_object_changed_meanwhile() -> None:
    """Another writer changes the object while the webhook decides: the write is computed
    and admitted again on the new version, and keeps the other writer's change."""
    calls: list[dict[str, str]] = []
    hooks = Webhooks()
    cluster: FakeCluster

    @hooks.validating(DEVICE, name="devices.slow.hooks.fastctl.dev", operations=["UPDATE"])
    def slow(request: AdmissionRequest) -> Allow:
        assert request.old_object is not None
        calls.append(dict(request.old_object["metadata"].get("labels") or {}))
        if len(calls) == 1:
            current = cluster.get(DEVICE.api_version, "Device", "a")
            assert current is not None
            current["metadata"]["labels"] = {"other": "writer"}
            cluster.update(current)
        return Allow()

    async with FakeCluster(Device, webhooks=hooks) as cluster:
        client = cluster.client()
        await create(client, DEVICE, device("a"))
        await patch(client, DEVICE, "a", {"spec": {"replicas": 4}}, namespace="default")
        assert calls == [{}, {"other": "writer"}]
        stored = cluster.get(DEVICE.api_version, "Device", "a")
        assert stored is not None
        assert stored["spec"]["replicas"] == 4
        assert stored["metadata"]["labels"] == {"other": "writer"}


@virtual_time
async def test_a_handler_that_raises_refuses_as_the_webhook_server_would() -> None:
    hooks = Webhooks()

    @hooks.validating(DEVICE, name="devices.broken.hooks.fastctl.dev")
    def broken(request: AdmissionRequest) -> Allow:
        raise KeyError("spec")

    async with FakeCluster(Device, webhooks=hooks) as cluster:
        with pytest.raises(ApiError) as exc:
            await create(cluster.client(), DEVICE, device("a"))
        assert exc.value.status == 500
        assert "broken raised KeyError('spec')" in str(exc.value)
        assert cluster.get(DEVICE.api_version, "Device", "a") is None
