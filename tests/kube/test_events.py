"""The Event recorder against the real server: creation, series folding, cluster scope."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube import _events
from fastctl.kube._events import Recorder
from fastctl.kube._http import request_json
from fastctl.kube._resource import Resource

from .conftest import make_configmap

pytestmark = pytest.mark.kube

CONTROLLER = "kubelayer.fastctl.dev/test-controller"


async def events_in(client: ApiClient, namespace: str) -> list[dict[str, Any]]:
    doc = await request_json(client, "GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    items: list[dict[str, Any]] = doc["items"]
    return items


async def test_publish_and_fold_repeats(client: ApiClient, namespace: str) -> None:
    cm = await make_configmap(client, namespace, "subject")
    rec = Recorder(client, CONTROLLER, "pod-1")
    first = await rec.publish(cm, reason="Rendered", note="3 children up to date", action="Apply")
    assert first["reason"] == "Rendered"
    assert first["regarding"]["uid"] == cm["metadata"]["uid"]
    assert first["regarding"]["kind"] == "ConfigMap"
    assert first["reportingController"] == CONTROLLER
    assert first["reportingInstance"] == "pod-1"
    assert first["type"] == "Normal"

    again = await rec.publish(cm, reason="Rendered", note="3 children up to date", action="Apply")
    third = await rec.publish(cm, reason="Rendered", note="3 children up to date", action="Apply")
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert third["series"]["count"] == 3

    warning = await rec.publish(cm, type="Warning", reason="Failed", note="x" * 5000)
    assert warning["type"] == "Warning"
    assert warning["action"] == "Failed"  # action defaults to the reason
    assert len(warning["note"].encode()) <= 1024

    stored = await events_in(client, namespace)
    assert len(stored) == 2
    by_reason = {e["reason"]: e for e in stored}
    assert by_reason["Rendered"]["series"]["count"] == 3
    assert by_reason["Rendered"]["note"] == "3 children up to date"


async def test_expired_series_starts_a_new_event(client: ApiClient, namespace: str) -> None:
    cm = await make_configmap(client, namespace, "subject")
    rec = Recorder(client, CONTROLLER, "pod-1")
    first = await rec.publish(cm, reason="Tick")
    await request_json(
        client,
        "DELETE",
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events/{first['metadata']['name']}",
    )
    second = await rec.publish(cm, reason="Tick")  # the PATCH 404s: a fresh event instead
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert "series" not in second


async def test_a_repeat_after_the_series_window_starts_a_new_event(
    client: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder's clock jumps past the 6-minute window: the repeat is a new Event on the
    server, and the old one keeps its count (a repeat inside the window still folds)."""
    offset = [0.0]
    clock = types.SimpleNamespace(
        time=lambda: time.time() + offset[0], time_ns=time.time_ns, monotonic=time.monotonic
    )
    monkeypatch.setattr(_events, "time", clock)
    cm = await make_configmap(client, namespace, "subject")
    rec = Recorder(client, CONTROLLER, "pod-1")
    first = await rec.publish(cm, reason="Tick")
    offset[0] = _events._SERIES_WINDOW - 1.0
    folded = await rec.publish(cm, reason="Tick")
    assert folded["metadata"]["name"] == first["metadata"]["name"]
    assert folded["series"]["count"] == 2
    offset[0] += _events._SERIES_WINDOW + 1.0
    fresh = await rec.publish(cm, reason="Tick")
    assert fresh["metadata"]["name"] != first["metadata"]["name"]
    assert "series" not in fresh
    stored = {e["metadata"]["name"]: e for e in await events_in(client, namespace)}
    assert set(stored) == {first["metadata"]["name"], fresh["metadata"]["name"]}
    assert stored[first["metadata"]["name"]]["series"]["count"] == 2


async def test_cluster_scoped_objects_report_to_default(client: ApiClient, namespace: str) -> None:
    ns = await request_json(client, "GET", f"/api/v1/namespaces/{namespace}")
    ns.setdefault("apiVersion", "v1")
    ns.setdefault("kind", "Namespace")
    rec = Recorder(client, CONTROLLER, "pod-1")
    event = await rec.publish(ns, reason="Seen", note=f"namespace {namespace}")
    assert event["metadata"]["namespace"] == "default"
    assert event["regarding"]["name"] == namespace
    await Resource("v1", "Namespace").resolve(client)  # (and the regarding kind is real)


async def test_bad_arguments(client: ApiClient) -> None:
    rec = Recorder(client, CONTROLLER)
    with pytest.raises(ValueError, match="reason"):
        await rec.publish({"kind": "ConfigMap", "metadata": {"name": "x"}}, reason="")
    with pytest.raises(ValueError, match="type"):
        await rec.publish({"kind": "ConfigMap", "metadata": {"name": "x"}}, reason="R", type="Info")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        await rec.publish({"metadata": {"name": "x"}}, reason="R")


async def test_a_failing_reconcile_records_one_warning_event_series(
    client: ApiClient, namespace: str
) -> None:
    """By default a failed reconcile records a Warning Event on its object, through a
    recorder of the controller's own; quick retries (with new messages) fold into one
    series, whose note stays the first failure's; the object that succeeds gets none."""
    from fastctl import Action
    from fastctl.runtime import Controller

    await make_configmap(client, namespace, "fine")
    await make_configmap(client, namespace, "failing")
    failures = 0

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        nonlocal failures
        if obj["metadata"]["name"] == "failing":
            failures += 1
            raise RuntimeError(f"the backend said no (attempt {failures})")
        return None

    ctl = Controller(
        client, Resource("v1", "ConfigMap"), reconcile, namespace=namespace, name="cm-failer"
    )
    run = asyncio.create_task(ctl.run(handle_signals=False))
    try:
        deadline = time.monotonic() + 60
        while True:
            warnings = [e for e in await events_in(client, namespace) if e["type"] == "Warning"]
            if warnings and warnings[0].get("series", {}).get("count", 1) >= 2:
                break
            assert time.monotonic() < deadline, f"no series after {failures} failures"
            await asyncio.sleep(0.2)
    finally:
        ctl.shutdown()
        await asyncio.wait_for(run, 30)
    assert failures >= 3
    (event,) = warnings
    assert event["regarding"]["name"] == "failing"
    assert event["reason"] == "ReconcileFailed"
    assert event["reportingController"] == "fastctl/cm-failer"
    assert event["note"] == "reconcile failed: RuntimeError: the backend said no (attempt 1)"
