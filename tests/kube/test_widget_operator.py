"""The example operator (fastctl.demo.widgets) end to end on the real API server: CRD,
owned ConfigMaps, status conditions, Events and the finalizer."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.demo import widgets
from fastctl.kube._http import ApiError, request_json
from fastctl.kube._objects import create, get, patch
from fastctl.runtime.controller import Controller

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
async def widget_crd(client: ApiClient) -> None:
    await widgets.install_crd(client)


async def until(check: Callable[[], Any], limit: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + limit
    while True:
        try:
            value = await check()
        except ApiError as exc:
            if exc.status != 404:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(ctl: Controller) -> AsyncIterator[None]:
    task = asyncio.create_task(ctl.run(handle_signals=False))
    try:
        yield
    finally:
        ctl.shutdown()
        await asyncio.wait_for(task, 30)


async def test_widget_lifecycle(client: ApiClient, namespace: str) -> None:
    ctl = widgets.make_controller(client, namespace=namespace)
    async with running(ctl):
        await create(
            client, widgets.WIDGET, widgets.widget("hello", namespace, {"greeting": "Hi {name}"})
        )

        async def rendered() -> Any:
            cm = await get(client, widgets.CONFIGMAP, "hello-rendered", namespace=namespace)
            return cm if cm.get("data") == {"greeting": "Hi hello"} else None

        cm = await until(rendered, what="ConfigMap rendered")
        owner = cm["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Widget"
        assert owner["controller"] is True

        async def ready() -> Any:
            w = await get(client, widgets.WIDGET, "hello", namespace=namespace)
            conds = (w.get("status") or {}).get("conditions") or []
            return w if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) else None

        w = await until(ready, what="Ready condition")
        assert widgets.FINALIZER in w["metadata"]["finalizers"]
        assert w["status"]["observedGeneration"] == w["metadata"]["generation"]

        # A spec change re-renders.
        await patch(
            client,
            widgets.WIDGET,
            "hello",
            {"spec": {"data": {"greeting": "Bye {name}"}}},
            namespace=namespace,
        )

        async def rerendered() -> Any:
            cm = await get(client, widgets.CONFIGMAP, "hello-rendered", namespace=namespace)
            return cm.get("data") == {"greeting": "Bye hello"}

        await until(rerendered, what="re-render after a spec change")

        # Tampering with the owned ConfigMap triggers the Widget, which puts it right.
        await patch(
            client,
            widgets.CONFIGMAP,
            "hello-rendered",
            {"data": {"greeting": "tampered"}},
            namespace=namespace,
        )
        await until(rerendered, what="owned child restored")

        # An Event was published about the Widget.
        events = await request_json(
            client, "GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        )
        assert any(
            e["regarding"]["name"] == "hello" and e["reason"] == "Rendered" for e in events["items"]
        )

        # Deletion: the finalizer's cleanup deletes the ConfigMap, then lets the Widget go.
        await request_json(
            client, "DELETE", f"/apis/demo.fastctl.dev/v1/namespaces/{namespace}/widgets/hello"
        )

        async def gone() -> bool:
            for resource, name in (
                (widgets.WIDGET, "hello"),
                (widgets.CONFIGMAP, "hello-rendered"),
            ):
                try:
                    await get(client, resource, name, namespace=namespace)
                except ApiError as exc:
                    if exc.status == 404:
                        continue
                    raise
                return False
            return True

        await until(gone, what="Widget and ConfigMap deleted")


async def test_many_widgets_converge(client: ApiClient, namespace: str) -> None:
    ctl = widgets.make_controller(client, namespace=namespace, concurrency=32)
    names = [f"w-{i}" for i in range(100)]
    async with running(ctl):
        await asyncio.gather(
            *(
                create(client, widgets.WIDGET, widgets.widget(n, namespace, {"k": "{name}"}))
                for n in names
            )
        )

        async def all_ready() -> bool:
            doc = await request_json(
                client, "GET", f"/apis/demo.fastctl.dev/v1/namespaces/{namespace}/widgets"
            )
            ready = [
                w
                for w in doc["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (w.get("status") or {}).get("conditions") or []
                )
            ]
            return len(ready) == len(names)

        await until(all_ready, limit=120, what="100 widgets ready")
    cms = await request_json(client, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    rendered = {cm["metadata"]["name"]: cm.get("data") for cm in cms["items"]}
    for n in names:
        assert rendered[f"{n}-rendered"] == {"k": n}
