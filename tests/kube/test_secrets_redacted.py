"""A controller of Secrets that fails with the Secret in hand leaks no byte of its data.

The reconcile does each of the careless things an operator might: logs the object,
publishes an Event whose note quotes a value, makes a request the API server refuses with
an error that echoes the value (a ConfigMap named after it), and raises an exception that
holds the whole object. Every text fastctl produces from that (the captured logs, with the
handler ``fastctl run`` configures; the Events in the namespace; the ApiError's text; the
ReconcileResult's repr) holds neither the value nor its base64.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import _redact
from fastctl.errors import ApiError
from fastctl.kube._events import Recorder
from fastctl.kube._http import request_json
from fastctl.kube._resource import Resource
from fastctl.log import RedactingFilter
from fastctl.runtime.controller import Controller
from fastctl.types import Action, ObjectRef, ReconcileResult

pytestmark = pytest.mark.kube


async def test_a_failing_secret_reconcile_leaks_nothing(
    client: ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    value = f"Hunter2-{secrets.token_hex(8)}"  # upper case: not a valid object name
    encoded = base64.b64encode(value.encode()).decode()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "data": {"password": encoded},
    }
    path = f"/api/v1/namespaces/{namespace}/secrets"
    await request_json(client, "POST", path, body=orjson.dumps(body))
    recorder = Recorder(client, "example.com/secret-controller", "test")
    texts: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        password = base64.b64decode(obj["data"]["password"]).decode()
        logging.getLogger("test.operator").info("reconciling %s", obj)
        await recorder.publish(obj, type="Warning", reason="Rejected", note=f"bad {password}")
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": password}}
        try:
            await request_json(
                client,
                "POST",
                f"/api/v1/namespaces/{namespace}/configmaps",
                body=orjson.dumps(config_map),
            )
        except ApiError as exc:
            texts.append(str(exc))
        error = RuntimeError(f"cannot use {obj}")
        results.append(
            ReconcileResult(ObjectRef("creds", namespace), Action.await_change(), error, 0.0, obj)
        )
        raise error

    results: list[ReconcileResult] = []
    ctl = Controller(client, Resource("v1", "Secret"), reconcile, namespace=namespace)
    caplog.handler.addFilter(RedactingFilter())  # what `fastctl run` puts on its handler
    try:
        with caplog.at_level(logging.INFO):
            task = asyncio.create_task(ctl.run(handle_signals=False))
            deadline = time.monotonic() + 30
            while not texts:
                assert time.monotonic() < deadline, "the reconcile never ran"
                assert not task.done()
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # the failure is logged once the reconcile returns
            ctl.shutdown()
            await asyncio.wait_for(task, 30)
    finally:
        caplog.handler.removeFilter(caplog.handler.filters[-1])
    events = await request_json(
        client, "GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    )
    notes = [e.get("note", "") for e in events["items"]]
    assert notes  # the Event was published
    assert "Invalid value" in texts[0]  # the server did echo the name it refused
    assert "cannot use" in caplog.text  # the failure was logged, with its traceback
    for where, text in [
        ("logs", caplog.text),
        ("events", " ".join(notes)),
        ("ApiError", texts[0]),
        ("ReconcileResult", repr(results[0])),
    ]:
        assert value not in text, where
        assert encoded not in text, where
        assert "<redacted>" in text, where
    _redact._forget_all()
