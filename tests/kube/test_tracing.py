"""Traces over the wire: a Manager with ``tracing=True`` against the real kube-apiserver,
exporting by OTLP/HTTP (configured by the standard ``OTEL_*`` variables alone) to a
receiver in the test that decodes the protobuf requests as a collector would.

The operator: each Widget gets a child ConfigMap (a controller owner reference), applied by
the reconcile when its cache shows none or one changed; a Widget with ``spec.fail`` fails
its first two reconciles. What the receiver must get:

- the reconcile of a Widget listed at start, linked to the list's event (reason
  ``relist``; a watch event is a link, no span of its own), with the span of the apply of
  its child beneath it, in its trace;
- after the test changes the child, a reconcile of its owner linked to that change's watch
  event (reason ``owned_child``, the child, the change's resourceVersion), with the apply
  that puts the child back beneath it;
- for the failing Widget, error spans with attempts 1 and 2, each retry linked to the
  attempt before it (``error_retry``), and a third attempt that succeeds.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from fastctl import Manager
from fastctl.kube._objects import apply, create, patch
from fastctl.kube._resource import Resource
from fastctl.runtime._children import RelatedCache
from fastctl.runtime.controller import Controller

from .conftest import GROUP

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

WIDGET = Resource(f"{GROUP}/v1", "Widget")
CONFIGMAP = Resource("v1", "ConfigMap")
DATA = {"a": "1"}


class Receiver:
    """An OTLP/HTTP trace receiver: every span of every request, with its service name."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.services: set[str] = set()
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.requests += 1
        for resource_spans in message.resource_spans:
            for kv in resource_spans.resource.attributes:
                if kv.key == "service.name":
                    self.services.add(kv.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def attrs(kvs: Any) -> dict[str, Any]:
    """OTLP key-values as a dict of plain values."""
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        value = kv.value
        which = value.WhichOneof("value")
        assert which is not None, kv
        out[kv.key] = getattr(value, which)
    return out


@pytest.fixture
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Receiver]:
    server = Receiver()
    await server.start()
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{server.url}/v1/traces")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "widgets-under-test")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    yield server
    await server.stop()


class Operator:
    """Applies a Widget's child when its cache shows none, or one with other data; records,
    per Widget, how many runs started and which child versions they saw in the cache; wakes
    the test at the end of each run."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.children: RelatedCache | None = None
        self.runs: dict[str, int] = {}
        self.saw: dict[str, list[str]] = {}
        self.ended = asyncio.Event()

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> None:
        try:
            await self._reconcile(obj)
        finally:
            self.ended.set()

    async def _reconcile(self, obj: dict[str, Any]) -> None:
        assert self.children is not None
        meta = obj["metadata"]
        name = meta["name"]
        self.runs[name] = self.runs.get(name, 0) + 1
        children = self.children.owned_by(obj)
        self.saw.setdefault(name, []).extend(c["metadata"]["resourceVersion"] for c in children)
        if (obj.get("spec") or {}).get("fail") and self.runs[name] <= 2:
            raise RuntimeError(f"{name}: failing on purpose")
        if children and children[0].get("data") == DATA:
            return  # the child is as it should be: nothing to write
        owner = {
            "apiVersion": obj["apiVersion"],
            "kind": "Widget",
            "name": name,
            "uid": meta["uid"],
            "controller": True,
        }
        meta = {"name": f"{name}-child", "namespace": self.namespace, "ownerReferences": [owner]}
        child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": DATA}
        await apply(self.client, CONFIGMAP, child, field_manager="tracing-test")

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait for the end of a run after which `done()` holds."""
        while not done():
            self.ended.clear()
            await self.ended.wait()


def widget(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


async def test_the_spans_reach_an_otlp_receiver_over_the_wire(
    client: ApiClient, namespace: str, crds: str, receiver: Receiver
) -> None:
    op = Operator(client, namespace)
    await create(client, WIDGET, widget("listed", namespace))
    ctl = Controller(client, WIDGET, op.reconcile, namespace=namespace, name="widgets")
    ctl.owns(CONFIGMAP, cache=True)
    op.children = ctl.cache(CONFIGMAP)
    manager = Manager(client, tracing=True, metrics_port=None, probe_port=None)
    manager.add(ctl)
    task = asyncio.create_task(manager.run())
    try:
        # Listed at start: a run applies the child, the child's creation runs it again.
        await op.until(lambda: bool(op.saw.get("listed")))
        changed = await patch(
            client, CONFIGMAP, "listed-child", {"data": {"a": "2"}}, namespace=namespace
        )
        version = changed["metadata"]["resourceVersion"]
        await op.until(lambda: version in op.saw["listed"])
        await create(client, WIDGET, widget("flaky", namespace, fail=True))
        await op.until(lambda: op.runs.get("flaky", 0) >= 3)
    finally:
        manager.shutdown()
        await task
    # The Manager's end flushed the exporter: every span has been received by now.
    spans = receiver.spans
    assert receiver.services == {"widgets-under-test"}
    by_id = {span.span_id: span for span in spans}
    reconciles = [s for s in spans if s.name == "reconcile widgets"]

    def runs_of(name: str) -> list[Span]:
        key = f"{namespace}/{name}"
        found = [s for s in reconciles if attrs(s.attributes)["fastctl.object"] == key]
        return sorted(found, key=lambda s: s.start_time_unix_nano)

    # The listed Widget's first run: linked to the list, its apply of the child beneath it.
    first = runs_of("listed")[0]
    (link,) = first.links
    assert attrs(link.attributes)["fastctl.trigger.reason"] == "relist"
    assert attrs(link.attributes)["fastctl.watch.kind"] == "Widget"
    assert link.span_id != bytes(8)
    assert link.span_id not in by_id  # the event is a link, not a span
    beneath = [s for s in spans if s.parent_span_id == first.span_id]
    assert [s.name for s in beneath] == ["patch configmaps"]
    assert beneath[0].trace_id == first.trace_id
    assert attrs(beneath[0].attributes)["http.response.status_code"] in (200, 201)
    assert str(attrs(beneath[0].attributes)["url.path"]).endswith("/configmaps/listed-child")
    # The run after the child's change: linked to that change's watch event.
    linked = [
        (run, link)
        for run in runs_of("listed")
        for link in run.links
        if attrs(link.attributes).get("k8s.resource_version") == version
    ]
    assert len(linked) == 1, "no reconcile (or more than one) linked to the child's change"
    run, link = linked[0]
    beneath = [s for s in spans if s.parent_span_id == run.span_id]
    assert [s.name for s in beneath] == ["patch configmaps"]
    assert beneath[0].trace_id == run.trace_id
    assert attrs(link.attributes)["fastctl.trigger.reason"] == "owned_child"
    assert attrs(link.attributes)["fastctl.watch.kind"] == "ConfigMap"
    assert attrs(link.attributes)["fastctl.watch.object"] == f"{namespace}/listed-child"
    # The failing Widget: two error spans, then the success, each retry linked to the last.
    flaky = runs_of("flaky")[:3]  # a fourth: the echo of the child it applied
    assert [attrs(s.attributes)["fastctl.reconcile.attempt"] for s in flaky] == [1, 2, 3]
    assert [attrs(s.attributes)["fastctl.reconcile.outcome"] for s in flaky] == [
        "error",
        "error",
        "done",
    ]
    assert [s.status.code for s in flaky] == [Status.STATUS_CODE_ERROR] * 2 + [
        Status.STATUS_CODE_UNSET
    ]
    for before, after in itertools.pairwise(flaky):
        (retry,) = after.links
        assert attrs(retry.attributes)["fastctl.trigger.reason"] == "error_retry"
        assert retry.span_id == before.span_id
