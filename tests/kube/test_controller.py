"""fastctl.Controller against the real local kube-apiserver (no mocks)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, ObjectRef, Scheduler
from fastctl.kube import _retry
from fastctl.kube._client import load_client
from fastctl.kube._http import ApiError, request_json
from fastctl.kube._resource import Resource, ResourceNotFound
from fastctl.runtime.controller import Controller
from fastctl.testing.control_plane import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

CONFIGMAP = Resource("v1", "ConfigMap")
SECRET = Resource("v1", "Secret")


def cm_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return base if name is None else f"{base}/{name}"


async def create_cm(
    client: ApiClient, namespace: str, name: str, data: dict[str, str], **meta: Any
) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}
    body["data"] = data
    result: dict[str, Any] = await request_json(
        client, "POST", cm_path(namespace), body=orjson.dumps(body)
    )
    return result


async def patch_cm(client: ApiClient, namespace: str, name: str, patch: dict[str, Any]) -> None:
    await request_json(
        client,
        "PATCH",
        cm_path(namespace, name),
        body=orjson.dumps(patch),
        content_type="application/merge-patch+json",
    )


async def eventually(check: Callable[[], bool], limit: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(ctl: Controller) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(ctl.run(handle_signals=False))
    try:
        yield task
    finally:
        ctl.shutdown()
        try:
            await asyncio.wait_for(task, 30)
        except BaseException:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise


def _version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


class Record:
    """What each reconcile saw, and when: (key, data version, start, end)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, float, float]] = []
        self.active: dict[str, int] = defaultdict(int)
        self.overlaps: list[str] = []
        self.not_latest: list[str] = []

    def reconciler(
        self, ctl_ref: list[Controller], work: float = 0.0, gate: asyncio.Event | None = None
    ) -> Callable[[dict[str, Any], Any], Awaitable[Action | None]]:
        """A reconcile that records its span; with `gate`, it holds its slot until the gate
        is open."""

        async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
            ref = ObjectRef.from_object(obj)
            key = ref.key
            cached = ctl_ref[0].store.get(ref)  # the reconcile got its own copy of it
            if cached is None or _version(cached) != _version(obj):
                self.not_latest.append(key)
            self.active[key] += 1
            if self.active[key] > 1:
                self.overlaps.append(key)
            start = time.monotonic()
            try:
                if work:
                    await asyncio.sleep(work)
                if gate is not None:
                    await gate.wait()
            finally:
                self.active[key] -= 1
                version = int((obj.get("data") or {}).get("v", "0"))
                self.spans.append((key, version, start, time.monotonic()))
            return None

        return reconcile

    def last_version(self, key: str) -> int | None:
        seen = [(start, v) for k, v, start, _ in self.spans if k == key]
        return max(seen)[1] if seen else None


async def test_create_update_delete_are_reconciled(client: ApiClient, namespace: str) -> None:
    """Create and update are reconciled; a delete is not (the object is gone), and a trigger
    still queued when its object is deleted is handed out, finds nothing, and is dropped."""
    record = Record()
    holder: list[Controller] = []
    gate = asyncio.Event()
    gate.set()
    ctl = Controller(
        client, CONFIGMAP, record.reconciler(holder, gate=gate), namespace=namespace, concurrency=1
    )
    holder.append(ctl)
    async with running(ctl):
        await eventually(lambda: ctl.is_ready, what="cache ready")
        await create_cm(client, namespace, "one", {"v": "1"})
        key = f"{namespace}/one"
        await eventually(lambda: record.last_version(key) == 1, what="create reconciled")
        await patch_cm(client, namespace, "one", {"data": {"v": "2"}})
        await eventually(lambda: record.last_version(key) == 2, what="update reconciled")
        # Hold the only slot, queue a trigger for "one", then delete it.
        gate.clear()
        await create_cm(client, namespace, "blocker", {})
        await eventually(lambda: ctl.scheduler.in_flight == 1, what="the slot is taken")
        await patch_cm(client, namespace, "one", {"data": {"v": "3"}})
        scheduler = ctl.scheduler
        assert isinstance(scheduler, Scheduler)
        await eventually(lambda: key in scheduler, what="a trigger of one queued")
        await request_json(client, "DELETE", cm_path(namespace, "one"))
        await eventually(lambda: ObjectRef("one", namespace) not in ctl.store, what="delete")
        pops = ctl.scheduler.stats()["pops_total"]
        reconciles = len(record.spans)
        gate.set()
        await eventually(lambda: len(record.spans) > reconciles, what="blocker done")
        await eventually(lambda: key not in scheduler, what="the queued trigger handed out")
        await asyncio.sleep(1.0)  # long enough for a late, wrong trigger or reconcile
        assert ctl.scheduler.stats()["pops_total"] == pops + 1  # handed out once, dropped
        assert len(record.spans) == reconciles + 1  # the blocker only
        assert record.last_version(key) == 2
        assert ctl.scheduler.in_flight == 0
    assert not record.overlaps
    assert not record.not_latest


async def test_a_change_to_an_owned_child_triggers_its_owner(
    client: ApiClient, namespace: str
) -> None:
    owners: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        owners.append(obj["metadata"]["name"])

    ctl = Controller(client, CONFIGMAP, reconcile, namespace=namespace).owns(SECRET)
    async with running(ctl):
        owner = await create_cm(client, namespace, "owner", {"v": "1"})
        await eventually(lambda: owners.count("owner") >= 1, what="owner reconciled")
        before = owners.count("owner")
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "child",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "stringData": {"k": "v"},
        }
        await request_json(
            client,
            "POST",
            f"/api/v1/namespaces/{namespace}/secrets",
            body=orjson.dumps(secret),
        )
        await eventually(lambda: owners.count("owner") > before, what="owner re-triggered")
        before = owners.count("owner")
        await request_json(client, "DELETE", f"/api/v1/namespaces/{namespace}/secrets/child")
        await eventually(lambda: owners.count("owner") > before, what="child deletion")


async def test_watches_with_a_mapper_and_reconcile_all_on(
    client: ApiClient, namespace: str
) -> None:
    seen: list[str] = []
    tick: asyncio.Queue[None] = asyncio.Queue()

    async def ticks() -> AsyncIterator[None]:
        while True:
            await tick.get()
            yield None

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(obj["metadata"]["name"])

    def mapper(secret: dict[str, Any]) -> list[ObjectRef]:
        target = (secret["metadata"].get("annotations") or {}).get("target")
        return [ObjectRef(target, namespace)] if target else []

    ctl = (
        Controller(client, CONFIGMAP, reconcile, namespace=namespace)
        .watches(SECRET, mapper)
        .reconcile_all_on(ticks())
    )
    await create_cm(client, namespace, "a", {})
    await create_cm(client, namespace, "b", {})
    async with running(ctl):
        await eventually(lambda: {"a", "b"} <= set(seen), what="initial reconciles")
        seen.clear()
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {"target": "b"}},
        }
        await request_json(
            client, "POST", f"/api/v1/namespaces/{namespace}/secrets", body=orjson.dumps(secret)
        )
        await eventually(lambda: "b" in seen, what="mapped trigger")
        await asyncio.sleep(1.0)  # long enough for a late, wrong trigger of "a"
        assert seen == ["b"]
        seen.clear()
        tick.put_nowait(None)
        await eventually(lambda: {"a", "b"} <= set(seen), what="reconcile_all_on")


async def test_2000_objects_converge_under_concurrent_updates(
    client: ApiClient, namespace: str
) -> None:
    record = Record()
    holder: list[Controller] = []
    hold = asyncio.Event()  # closed: the first 64 reconciles hold every slot meanwhile
    ctl = Controller(
        client,
        CONFIGMAP,
        record.reconciler(holder, work=0.002, gate=hold),
        namespace=namespace,
        concurrency=64,
    )
    holder.append(ctl)
    names = [f"cm-{i}" for i in range(2000)]
    final: dict[str, int] = {}
    gate = asyncio.Semaphore(32)

    async def lifecycle(name: str) -> None:
        async with gate:
            await create_cm(client, namespace, name, {"v": "1"})
        for version in (2, 3):
            async with gate:
                await patch_cm(client, namespace, name, {"data": {"v": str(version)}})
        final[f"{namespace}/{name}"] = 3

    async with running(ctl):
        await eventually(lambda: ctl.is_ready, what="cache ready")
        await asyncio.gather(*(lifecycle(n) for n in names))
        await eventually(
            lambda: all(
                (ctl.store.get(ObjectRef(n, namespace)) or {}).get("data") == {"v": "3"}
                for n in names
            ),
            limit=120,
            what="the cache holds every final version",
        )
        hold.set()
        await eventually(
            lambda: all(record.last_version(k) == 3 for k in final),
            limit=180,
            what="all 2000 objects converged",
        )
    assert len(final) == 2000
    assert not record.overlaps, f"rule 1 broken for {record.overlaps[:5]}"
    assert not record.not_latest
    # Versions seen by successive reconciles of an object never go backwards.
    by_key: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for key, version, start, _ in record.spans:
        by_key[key].append((start, version))
    for key, seen in by_key.items():
        versions = [v for _, v in sorted(seen)]
        assert versions == sorted(versions), f"{key} saw {versions}"
    # Triggers collapsed: far fewer reconciles than the 6,000 events. While the 64 slots
    # were held, every other object's events merged into one queued trigger, and each of
    # the 64 got one follow-up: one reconcile per object, plus at most one per slot.
    assert 2000 <= len(record.spans) <= 2000 + 64


async def test_apiserver_restart_mid_run_loses_no_update(
    client: ApiClient, namespace: str, control_plane: ControlPlane
) -> None:
    record = Record()
    holder: list[Controller] = []
    ctl = Controller(client, CONFIGMAP, record.reconciler(holder), namespace=namespace)
    holder.append(ctl)
    names = [f"r-{i}" for i in range(20)]
    async with running(ctl):
        for name in names:
            await create_cm(client, namespace, name, {"v": "1"})
        await eventually(
            lambda: all(record.last_version(f"{namespace}/{n}") == 1 for n in names),
            what="first versions",
        )
        await control_plane.restart_apiserver()
        for name in names:
            await patch_cm(client, namespace, name, {"data": {"v": "2"}})
        await create_cm(client, namespace, "after-restart", {"v": "2"})
        await eventually(
            lambda: all(
                record.last_version(f"{namespace}/{n}") == 2 for n in [*names, "after-restart"]
            ),
            limit=120,
            what="updates after the restart",
        )
    assert not record.overlaps


async def test_forbidden_by_rbac_is_a_clear_error_and_is_retried(
    control_plane: ControlPlane, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = control_plane.user_kubeconfig("restricted-user")
    client = await load_client(kubeconfig)
    seen: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(obj["metadata"]["name"])

    admin = await load_client(control_plane.kubeconfig)
    try:
        await create_cm(admin, namespace, "visible", {})
        ctl = Controller(client, CONFIGMAP, reconcile, namespace=namespace)
        async with running(ctl):
            await eventually(
                lambda: "forbidden" in caplog.text.lower(), what="a logged Forbidden error"
            )
            assert not ctl.is_ready
            # Grant the permission: the retrying watch recovers and the object is reconciled.
            role = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "cm-reader"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}
                ],
            }
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "cm-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "cm-reader",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": "restricted-user",
                    }
                ],
            }
            rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
            await request_json(admin, "POST", f"{rbac}/roles", body=orjson.dumps(role))
            await request_json(admin, "POST", f"{rbac}/rolebindings", body=orjson.dumps(binding))
            await eventually(lambda: "visible" in seen, limit=90, what="recovery after grant")
    finally:
        await client.close()
        await admin.close()
    assert "configmaps" in caplog.text.lower()


async def test_an_unknown_kind_fails_at_start_with_a_clear_error(
    client: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    # One lookup and one retry, not the default half a minute of them (a CRD may be
    # installed right after its operator; that wait is tested without a server).
    monkeypatch.setattr(_retry, "NOT_FOUND_RETRIES", 1)
    ctl = Controller(client, Resource("example.invalid/v1", "Nope"), reconcile)
    with pytest.raises(ResourceNotFound, match=r"Nope \(example.invalid/v1\).*not served by"):
        await ctl.run(handle_signals=False)


async def test_shutdown_drains_running_reconciles(client: ApiClient, namespace: str) -> None:
    started = asyncio.Event()
    finished: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(obj["metadata"]["name"])

    await create_cm(client, namespace, "slow", {})
    ctl = Controller(client, CONFIGMAP, reconcile, namespace=namespace)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await asyncio.wait_for(started.wait(), 60)
    ctl.shutdown()
    await asyncio.wait_for(task, 30)
    assert finished == ["slow"]


def test_api_error_names_the_request() -> None:
    err = ApiError(404, "NotFound", 'configmaps "x" not found', method="GET", path="/api/v1/x")
    assert str(err) == 'GET /api/v1/x: 404 NotFound: configmaps "x" not found'


async def test_a_failing_trigger_source_stops_the_controller_with_its_error(
    client: ApiClient, namespace: str
) -> None:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    async def broken() -> AsyncIterator[None]:
        await asyncio.sleep(0.5)
        raise RuntimeError("the resync source broke")
        yield  # pragma: no cover - makes this an async generator

    ctl = Controller(client, CONFIGMAP, reconcile, namespace=namespace).reconcile_all_on(broken())
    with pytest.raises(RuntimeError, match="the resync source broke"):
        await asyncio.wait_for(ctl.run(handle_signals=False), 60)
