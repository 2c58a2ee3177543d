"""fastctl's OTLP export (`fastctl._otlp.OtlpExport`): its plain links, its export timeout and
its life across ``os.fork``.

What must hold:

- a link fastctl makes for a watch event, handed to the export as a plain tuple (no
  `SpanContext`, no `Link`), is written byte for byte as the SDK's `Link` it stands for;
- a span started while the export was the only processor, and ended after another was
  added, reaches the processors with the SDK's `Link` objects (they cannot read tuples);
- ``OTEL_BSP_EXPORT_TIMEOUT`` bounds each batch's export when it is shorter than the
  exporter's own timeout;
- in a child made by ``os.fork``, the export sends the child's spans from a thread of its
  own, and not the ones its parent buffered before the fork;
- a link waiting with its queued key holds none of its watch event (thousands of keys
  queued would otherwise keep thousands of events alive for the collector to walk), and
  the link the run gets still says the event's object and ``resourceVersion``, read from
  the decoded frame or from the parsed object;
- an object's own change, its trigger and link made in one go, is linked as the general
  path links any event (the same fields, fresh ids, a user's id generator asked);
- a span's context built without the SDK's constructor is the one the constructor builds.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, TraceFlags

from fastctl import _tracing
from fastctl._core import otlp_encode
from fastctl._otel import LinkedTrigger, sdk_link
from fastctl._otel_spans import _checked_context, _direct_context, new_context
from fastctl._otlp import OtlpExport, span_processor
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.kube._wire import decode_watch_line
from fastctl.types import ObjectRef, Trigger

pytestmark = pytest.mark.timeout(60)

HEADER = ({"service.name": "svc"}, None, "fastctl", "1.0", None, None)


def record(links: list[Any], span_id: int = 0xDEF) -> tuple[Any, ...]:
    return (
        *("reconcile widgets", 0xABC << 64 | 1, span_id, None, None, False, 1, 10, 20),
        *({"fastctl.object": "ns/a"}, [], links, 0, None, 0, 0, 0),
    )


@pytest.mark.parametrize("remote", [False, True])
def test_a_plain_link_is_written_as_the_sdks_link_it_stands_for(remote: bool) -> None:
    attrs = {"fastctl.trigger.reason": "owned_child", "k8s.resource_version": "12"}
    trace_id, span_id = 0x0123456789ABCDEF0123456789ABCDEF, 0x0123456789ABCDEF
    sdk = Link(SpanContext(trace_id, span_id, remote, TraceFlags(0)), attrs)
    plain = (trace_id, span_id, remote, attrs)
    theirs = otlp_encode([(*HEADER, [record([sdk, sdk])])])
    mine = otlp_encode([(*HEADER, [record([plain, sdk])])])
    assert mine == theirs
    (span,) = ExportTraceServiceRequest.FromString(mine).resource_spans[0].scope_spans[0].spans
    assert span.links[0].span_id == span_id.to_bytes(8, "big")  # the bytes say something


class _Kind:
    name = "APPLY"


class _Event:
    kind = _Kind()

    def _meta(self) -> Mapping[str, str]:
        return {"name": "a", "namespace": "ns", "resourceVersion": "7"}


def test_a_span_ended_after_a_processor_was_added_hands_the_sdks_links() -> None:
    requests: list[bytes] = []
    provider = TracerProvider()
    provider.add_span_processor(OtlpExport(requests.append, lambda: None))
    assert _tracing.enable(provider)
    try:
        tracing = _tracing.active()
        assert tracing is not None
        controller = tracing.controller("widgets", "Widget")
        scheduler = type("S", (), {"failures": lambda self, key: 0})()
        (trigger,) = controller.primary(_Event(), [ObjectRef("a", "ns")])
        assert isinstance(trigger, LinkedTrigger)
        assert type(trigger.link) is tuple  # an EventLink
        controller.queued(trigger)
        run = controller.start("ns/a", scheduler)
        assert tracing.spans.plain_links  # the export alone: the link went in as a tuple
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        assert not tracing.spans.light()  # seen by the next span that starts
        run.end(None, None, 0.0, again=False)
    finally:
        _tracing.disable()
    (span,) = memory.get_finished_spans()
    (link,) = span.links
    assert isinstance(link, Link)
    assert trigger.link is not None
    assert link.context == sdk_link(trigger.link).context
    assert dict(link.attributes or {}) == {
        "fastctl.trigger.reason": "own_change",
        "k8s.resource_version": "7",
    }


class _Answer:
    status_code = 200
    reason = "OK"
    error = None


class _Transport:
    """The exporter's HTTP transport, faked: it keeps each request's timeout."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def request(self, method: str, url: str, **kwargs: Any) -> _Answer:
        self.timeouts.append(kwargs.get("timeout"))
        return _Answer()

    def close(self) -> None:
        pass

    def is_connection_error(self, error: Exception | None) -> bool:
        return False


def _exported_with(monkeypatch: pytest.MonkeyPatch, bsp_timeout: str | None) -> list[Any]:
    if bsp_timeout is not None:
        monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", bsp_timeout)
    transport = _Transport()
    exporter = OTLPSpanExporter(endpoint="http://collector:4318/v1/traces", timeout=20)
    exporter._client._transport = transport  # type: ignore[assignment]
    export = span_processor(exporter)
    assert isinstance(export, OtlpExport)
    export.add(export.sink(TracerProvider().resource, None), record([]))
    assert export.force_flush()
    export.shutdown()
    return transport.timeouts


def test_the_bsp_export_timeout_bounds_an_export(monkeypatch: pytest.MonkeyPatch) -> None:
    (bounded,) = _exported_with(monkeypatch, "250")
    assert bounded is not None
    assert 0 < bounded <= 0.25


def test_a_longer_bsp_export_timeout_leaves_the_exporters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (kept,) = _exported_with(monkeypatch, "60000")
    assert kept is not None
    assert 0.25 < kept <= 20
    (default,) = _exported_with(monkeypatch, None)
    assert default is not None
    assert 0.25 < default <= 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_forked_child_exports_its_own_spans_from_a_thread_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # only a full batch sends
    sent: list[bytes] = []
    arrived = threading.Event()

    def send(data: bytes) -> None:
        sent.append(data)
        arrived.set()

    export = OtlpExport(send, lambda: None)
    sink = export.sink(TracerProvider().resource, None)
    export.add(sink, record([], 0x111))  # buffered in the parent: the parent's to send
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report by the exit code, never return into pytest
        code = 1
        try:
            export.add(sink, record([], 0x222))
            export.add(sink, record([], 0x333))  # a full batch: the thread sends it itself
            if arrived.wait(30):
                request = ExportTraceServiceRequest.FromString(sent[0])
                spans = request.resource_spans[0].scope_spans[0].spans
                ids = [int.from_bytes(s.span_id, "big") for s in spans]
                code = 0 if ids == [0x222, 0x333] else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    try:
        reported = os.read(read, 1)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(read)
    assert reported == b"\x00", f"the child reported {reported!r}"
    assert os.waitstatus_to_exitcode(status) == 0
    assert not sent  # the parent's own span still waits in the parent
    assert len(sink) == 1
    export.shutdown()
    assert len(sent) == 1


class _HeldEvent:
    """A watch event whose life a test can see (a weak reference to it)."""

    def __init__(self, kind: str) -> None:
        self.kind = type("K", (), {"name": kind})()

    def _meta(self) -> Mapping[str, str]:
        return {"name": "b", "namespace": "ns", "resourceVersion": "8"}


def _widget_event(
    name: str, version: str, kind: Literal[EventKind.APPLY, EventKind.DELETE] = EventKind.DELETE
) -> ObjectEvent:
    """An event as the watcher makes it from a frame: decoded, its object not parsed."""
    obj = {"apiVersion": "g/v1", "kind": "Widget"}
    obj["metadata"] = {"name": name, "namespace": "ns", "resourceVersion": version}  # type: ignore[assignment]
    wire = "DELETED" if kind is EventKind.DELETE else "MODIFIED"
    line = f'{{"type":"{wire}","object":{json.dumps(obj)}}}'.encode()
    _, item = decode_watch_line(line, strip_managed_fields=True)
    assert not isinstance(item, bytes)
    return ObjectEvent._of_item(kind, item)


class _Ids(RandomIdGenerator):
    """An id generator of the user's: the links' ids must come from it."""

    def generate_trace_id(self) -> int:
        return 0xA1

    def generate_span_id(self) -> int:
        return 0xB2


@pytest.mark.parametrize("kind", [EventKind.APPLY, EventKind.DELETE])
@pytest.mark.parametrize("ids", [None, _Ids()])
def test_an_objects_own_change_is_linked_as_any_event_is(
    kind: Literal[EventKind.APPLY, EventKind.DELETE], ids: RandomIdGenerator | None
) -> None:
    """The primary watch's common event (its object's change, decoded from a frame, its
    one ref as a tuple) has its trigger and link made in one go: the same trigger and link
    as the general path's (`ControllerTracing.linked`), fresh ids for each event, and the
    ids of an id generator of the user's."""
    provider = TracerProvider(id_generator=ids) if ids is not None else TracerProvider()
    provider.add_span_processor(OtlpExport(lambda data: None, lambda: None))
    assert _tracing.enable(provider)
    try:
        tracing = _tracing.active()
        assert tracing is not None
        controller = tracing.controller("widgets", "Widget")
        event = _widget_event("c", "9", kind)
        ref = ObjectRef("c", "ns")
        (fast,) = controller.primary(event, (ref,))
        (again,) = controller.primary(_widget_event("c", "10", kind), (ref,))
        (general,) = controller.linked("Widget", "own_change", event, [ref])
    finally:
        _tracing.disable()
    assert type(fast) is LinkedTrigger
    assert type(general) is LinkedTrigger
    assert isinstance(fast, LinkedTrigger)
    assert isinstance(general, LinkedTrigger)
    assert isinstance(again, LinkedTrigger)
    assert (fast.ref, fast.priority, fast.reason) == (ref, 0, "")
    assert fast == LinkedTrigger(ref, 0, "", fast.link)
    assert fast.link is not None
    assert general.link is not None
    assert again.link is not None
    assert fast.link[2:] == general.link[2:]
    assert fast.link[2:] == ("Widget", "own_change", None, "9", kind is EventKind.DELETE)
    assert again.link[5] == "10"
    if ids is None:
        assert fast.link[0] != 0  # valid ids: neither is zero
        assert fast.link[1] != 0
        assert fast.link[:2] != again.link[:2] != general.link[:2]
        assert fast.link[0] < 2**128
        assert fast.link[1] < 2**64
    else:
        assert fast.link[:2] == general.link[:2] == (0xA1, 0xB2)


def test_a_queued_link_holds_none_of_its_watch_event() -> None:
    requests: list[bytes] = []
    export = OtlpExport(requests.append, lambda: None)
    provider = TracerProvider()
    provider.add_span_processor(export)
    assert _tracing.enable(provider)
    try:
        tracing = _tracing.active()
        assert tracing is not None
        controller = tracing.controller("widgets", "Widget")
        scheduler = type("S", (), {"failures": lambda self, key: 0})()
        held = _HeldEvent("APPLY")
        gone = weakref.ref(held)
        for trigger in controller.related("Gadget", True, held, [Trigger(ObjectRef("a", "ns"))]):
            controller.queued(trigger)
        decoded = _widget_event("c", "9")
        assert decoded._obj is None
        for trigger in controller.related("Gizmo", False, decoded, [Trigger(ObjectRef("a", "ns"))]):
            controller.queued(trigger)
        del held, trigger
        gc.collect()
        assert gone() is None  # the key waits; its links hold none of the event
        (waiting,) = controller._pending.values()
        assert not gc.is_tracked(waiting[0][0])  # a link of plain values: not walked
        assert decoded._obj is None  # the link read the frame, not a parsed object
        for trigger in controller.primary(decoded, [ObjectRef("d", "ns")]):
            controller.queued(trigger)
        del trigger
        gc.collect()
        gc.collect()  # (a record examined before its link in the first pass: in the next)
        assert not gc.is_tracked(controller._pending["ns/d"])  # one link: nothing to walk
        controller.dropped("ns/d")
        run = controller.start("ns/a", scheduler)
        run.end(None, None, 0.0, again=False)
        assert export.force_flush()
    finally:
        _tracing.disable()
    (data,) = requests
    (span,) = ExportTraceServiceRequest.FromString(data).resource_spans[0].scope_spans[0].spans
    attributes = [
        {kv.key: kv.value.string_value or kv.value.bool_value for kv in link.attributes}
        for link in span.links
    ]
    assert attributes == [
        {
            "fastctl.trigger.reason": "owned_child",
            "fastctl.watch.kind": "Gadget",
            "fastctl.watch.object": "ns/b",
            "k8s.resource_version": "8",
        },
        {
            "fastctl.trigger.reason": "mapped_object",
            "fastctl.watch.kind": "Gizmo",
            "fastctl.watch.object": "ns/c",
            "k8s.resource_version": "9",
            "fastctl.watch.deleted": True,
        },
    ]


@pytest.mark.parametrize(
    ("trace_id", "span_id"), [(1, 2), (2**128 - 1, 2**64 - 1), (0, 5), (5, 0), (2**128, 1)]
)
@pytest.mark.parametrize("flags", [0, 1])
def test_a_context_built_directly_is_the_one_the_sdk_builds(
    trace_id: int, span_id: int, flags: int
) -> None:
    assert new_context is _direct_context  # the direct way is the one in use
    mine = _direct_context(trace_id, span_id, TraceFlags(flags), None)
    theirs = _checked_context(trace_id, span_id, TraceFlags(flags), None)
    assert type(mine) is SpanContext
    assert mine == theirs
    assert mine.is_valid == theirs.is_valid
    assert mine.trace_flags.sampled == theirs.trace_flags.sampled
    assert mine.trace_state == theirs.trace_state
