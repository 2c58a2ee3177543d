"""The demo Widget operator (fastctl.demo.widgets) end to end on a fake cluster, through the
scenarios tests/kube/test_widget_operator.py runs on the real control plane (docs/benchmarks.md
compares the two): one Widget's life (rendered ConfigMap owned, Ready, finalizer, a spec
change re-rendered, a tampered child put right, the Event, deletion through the finalizer),
and 100 Widgets converging at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastctl.demo import widgets
from fastctl.errors import ApiError
from fastctl.kube import create, delete, patch
from fastctl.testing import FakeCluster, run_until_quiet, virtual_time

NAMESPACE = "default"
API = widgets.WIDGET.api_version


def ready(cluster: FakeCluster, name: str) -> dict[str, Any]:
    w = cluster.get(API, "Widget", name, NAMESPACE)
    assert w is not None
    conditions = {c["type"]: c for c in (w.get("status") or {}).get("conditions") or []}
    assert conditions["Ready"]["status"] == "True", name
    return w


def rendered(cluster: FakeCluster, name: str) -> dict[str, str] | None:
    cm = cluster.get("v1", "ConfigMap", f"{name}-rendered", NAMESPACE)
    return None if cm is None else cm.get("data")


@virtual_time
async def test_widget_lifecycle() -> None:
    # No garbage collector, as on the control plane: the ConfigMap goes by the finalizer.
    async with FakeCluster(widgets.CRD, garbage_collection=False) as cluster:
        client = cluster.client()
        body = widgets.widget("hello", NAMESPACE, {"greeting": "Hi {name}"})
        await create(client, widgets.WIDGET, body)
        await run_until_quiet(widgets.make_controller(client, namespace=NAMESPACE))
        cm = cluster.get("v1", "ConfigMap", "hello-rendered", NAMESPACE)
        assert cm is not None
        assert cm["data"] == {"greeting": "Hi hello"}
        owner = cm["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Widget"
        assert owner["controller"] is True
        w = ready(cluster, "hello")
        assert widgets.FINALIZER in w["metadata"]["finalizers"]
        assert w["status"]["observedGeneration"] == w["metadata"]["generation"]

        # A spec change re-renders.
        change = {"spec": {"data": {"greeting": "Bye {name}"}}}
        await patch(client, widgets.WIDGET, "hello", change, namespace=NAMESPACE)
        await run_until_quiet(widgets.make_controller(client, namespace=NAMESPACE))
        assert rendered(cluster, "hello") == {"greeting": "Bye hello"}

        # Tampering with the owned ConfigMap triggers the Widget, which puts it right.
        ctl = widgets.make_controller(client, namespace=NAMESPACE)
        running = asyncio.ensure_future(run_until_quiet(ctl))
        await asyncio.sleep(0)  # started
        await ctl.store.wait_ready()  # its caches listed: the tampering is a change it sees
        tamper = {"data": {"greeting": "tampered"}}
        await patch(client, widgets.CONFIGMAP, "hello-rendered", tamper, namespace=NAMESPACE)
        await running
        assert rendered(cluster, "hello") == {"greeting": "Bye hello"}
        tampered = [r for r in cluster.requests_of("patch", "configmaps") if r.body == tamper]
        assert len(tampered) == 1

        # An Event was published about the Widget.
        events = cluster.objects("events.k8s.io/v1", "Event", NAMESPACE)
        assert any(e["regarding"]["name"] == "hello" and e["reason"] == "Rendered" for e in events)

        # Deletion: the finalizer's cleanup deletes the ConfigMap, then lets the Widget go.
        await delete(client, widgets.WIDGET, "hello", namespace=NAMESPACE)
        await run_until_quiet(widgets.make_controller(client, namespace=NAMESPACE))
        assert cluster.get(API, "Widget", "hello", NAMESPACE) is None
        assert rendered(cluster, "hello") is None


@virtual_time
async def test_many_widgets_converge() -> None:
    names = [f"w-{i}" for i in range(100)]
    async with FakeCluster(widgets.CRD) as cluster:
        client = cluster.client()
        ctl = widgets.make_controller(client, namespace=NAMESPACE, concurrency=32)
        running = asyncio.ensure_future(run_until_quiet(ctl))
        await asyncio.gather(
            *(
                create(client, widgets.WIDGET, widgets.widget(n, NAMESPACE, {"k": "{name}"}))
                for n in names
            )
        )
        await running
        for n in names:
            ready(cluster, n)
            assert rendered(cluster, n) == {"k": n}


@virtual_time
async def test_the_widget_webhooks_on_a_fake_cluster() -> None:
    """The demo's admission webhooks, limited to one namespace by their selector: a Widget
    the reconcile could never render is refused there (and only there), the owner is
    defaulted, and the operator's own writes (finalizer, status) pass."""
    from fastctl.demo.webhooks import make_webhooks

    hooks = make_webhooks(namespace=NAMESPACE)
    async with FakeCluster(widgets.CRD, webhooks=hooks) as cluster:
        client = cluster.client(user="dana")
        bad = widgets.widget("bad", NAMESPACE, {"no spaces": "x"})
        with pytest.raises(ApiError) as refused:
            await create(client, widgets.WIDGET, bad)
        assert refused.value.status == 403
        assert "'no spaces' is not a valid ConfigMap key" in str(refused.value)
        elsewhere = widgets.widget("bad", "kube-public", {"no spaces": "x"})
        await create(client, widgets.WIDGET, elsewhere)  # not selected: admitted

        made = await create(client, widgets.WIDGET, widgets.widget("ok", NAMESPACE, {"a": "1"}))
        assert made["spec"]["owner"] == "dana"
        await run_until_quiet(widgets.make_controller(client, namespace=NAMESPACE))
        w = ready(cluster, "ok")
        assert w["spec"]["owner"] == "dana"
        assert widgets.FINALIZER in w["metadata"]["finalizers"]
        assert rendered(cluster, "ok") == {"a": "1"}
