"""fastctl's own OTLP export (`fastctl._otlp`) against the SDK's encoder.

``fastctl run --tracing`` exports by OTLP without the SDK's `BatchSpanProcessor` and
encoder: its spans end as tuples in a buffer and `fastctl._core.otlp_encode` writes the
protobuf. What must hold:

- for the same spans, the bytes decode (with opentelemetry-proto's classes) to the message
  the SDK's ``encode_spans`` builds, field for field, including the odd cases (a remote
  parent and its trace state, every attribute value type, a value that cannot be encoded,
  counts of what the limits dropped, events, links, an error status);
- a controller's spans exported through `OtlpExport` (built without any `ReadableSpan`)
  say on the wire what the SDK's own path says, under a sampler that keeps every trace
  and one that drops some;
- a full batch is sent at once, each request holds at most a batch, and a full queue
  drops spans and counts them.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from fastctl._core import otlp_encode
from fastctl._otlp import OtlpExport, header_of, record_of

from .test_tracing_spans import api, scenario  # noqa: F401 - the fixture, and the runs

pytestmark = pytest.mark.timeout(60)


def sdk_made_spans() -> list[ReadableSpan]:
    """Spans of every shape the encoder must write, made by the SDK's own tracer."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource({"service.name": "svc", "k8s.pod.name": "p-0"}, "https://schema/r"),
        span_limits=SpanLimits(max_span_attributes=12, max_links=2, max_events=2),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope", "1.2.3", schema_url="https://schema/s")
    remote = SpanContext(
        0xABCDEF0123456789ABCDEF0123456789,
        0x0123456789ABCDEF,
        True,
        TraceFlags(TraceFlags.SAMPLED),
        TraceState([("vendor", "x=1"), ("other", "y")]),
    )
    parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    values: dict[str, Any] = {
        "s": "text",
        "empty": "",
        "t": True,
        "f": False,
        "zero": 0,
        "neg": -5,
        "big": 2**62,
        "pi": 3.25,
        "strs": ["a", ""],
        "ints": (1, -2),
        "floats": [0.5],
        "bools": [True, False],
    }
    with tracer.start_as_current_span(
        "server",
        context=parent,
        kind=SpanKind.SERVER,
        attributes=values,
        links=[  # the limit keeps the last two
            Link(SpanContext(9, 10, False), {"dropped": "by the link limit"}),
            Link(SpanContext(7, 8, False), None),
            Link(remote, {"why": "remote"}),
        ],
    ) as span:
        span.set_attribute("one.too.many", "past the attribute limit")
        span.add_event("first", {"k": "v", "n": 1}, timestamp=123)
        span.add_event("second")
        span.add_event("third, past the event limit")
        with tracer.start_as_current_span("client", kind=SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.ERROR, "went wrong: é"))
        with tracer.start_as_current_span("producer", kind=SpanKind.PRODUCER) as other:
            other.set_status(StatusCode.OK)
    tracer.start_span("consumer", kind=SpanKind.CONSUMER).end()
    return list(exporter.get_finished_spans())


def ours(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    first = spans[0]
    header = header_of(first.resource, first.instrumentation_scope)
    data = otlp_encode([(*header, [record_of(s) for s in spans])])
    request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(data)
    return request


def test_the_bytes_decode_to_the_message_the_sdks_encoder_builds() -> None:
    spans = sdk_made_spans()
    sdk = encode_spans(spans)
    mine = ours(spans)
    assert mine == sdk
    assert mine.SerializeToString() == sdk.SerializeToString()
    # The comparison covered what it was meant to: the odd cases are in it.
    (server,) = [s for s in sdk.resource_spans[0].scope_spans[0].spans if s.name == "server"]
    assert server.trace_state
    assert server.parent_span_id
    assert server.flags == 0x300  # a remote parent
    assert server.dropped_attributes_count
    assert server.dropped_events_count
    assert server.dropped_links_count
    assert [link.flags for link in server.links] == [0x100, 0x300]  # the last one remote
    assert sdk.resource_spans[0].schema_url
    assert sdk.resource_spans[0].scope_spans[0].schema_url


def test_spans_the_sdks_tracer_made_reach_the_wire_as_the_sdks_encoder_writes_them() -> None:
    requests: list[bytes] = []
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    export = OtlpExport(requests.append, lambda: None)
    provider.add_span_processor(export)  # beside another: handed the SDK's spans at their end
    tracer = provider.get_tracer("webhooks", "9")
    with tracer.start_as_current_span("webhook /validate", kind=SpanKind.SERVER) as span:
        span.set_attribute("http.response.status_code", 200)
        tracer.start_span("patch widgets", attributes={"url.path": "/x"}).end()
    export.shutdown()
    (request,) = requests
    sdk = encode_spans(exporter.get_finished_spans())
    assert len(sdk.resource_spans[0].scope_spans[0].spans) == 2
    assert ExportTraceServiceRequest.FromString(request) == sdk


def test_a_value_the_sdk_cannot_encode_is_left_out_with_its_key() -> None:
    spans = sdk_made_spans()
    server = next(s for s in spans if s.name == "server")
    record = list(record_of(server))
    record[9] = {"before": "a", "huge": 2**70, "mixed": [1, 2**70], "after": {"k": 1}}
    header = header_of(server.resource, server.instrumentation_scope)
    mine = ExportTraceServiceRequest.FromString(otlp_encode([(*header, [tuple(record)])]))
    (span,) = mine.resource_spans[0].scope_spans[0].spans
    assert [kv.key for kv in span.attributes] == ["before", "after"]
    assert span.attributes[1].value.kvlist_value.values[0].value.int_value == 1


def value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    if which == "kvlist_value":
        return attrs(v.kvlist_value.values)
    return getattr(v, which) if which else None


def attrs(kvs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        found[kv.key] = value(kv.value)
    return found


def wire_shape(requests: list[bytes]) -> list[tuple[Any, ...]]:
    """What a receiver can tell of the spans in `requests`, less what differs run to run
    (ids, times), with each parent named and each link's context checked for form."""
    spans: list[tuple[dict[str, Any], str, str, Any]] = []
    for data in requests:
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans:
            resource = attrs(rs.resource.attributes)
            resource.pop("service.instance.id", None)
            for ss in rs.scope_spans:
                spans.extend((resource, ss.scope.name, ss.scope.version, s) for s in ss.spans)
    names = {s.span_id: s.name for *_, s in spans}
    out: list[tuple[Any, ...]] = []
    for resource, scope, version, s in spans:
        assert len(s.trace_id) == 16
        assert len(s.span_id) == 8
        span_attrs = attrs(s.attributes)
        span_attrs.pop("fastctl.reconcile.queue_wait", None)  # a time
        links = [
            (len(lk.trace_id), len(lk.span_id), lk.flags, attrs(lk.attributes)) for lk in s.links
        ]
        events = [(e.name, attrs(e.attributes)) for e in s.events]
        parent = names.get(s.parent_span_id, "?") if s.parent_span_id else None
        assert s.end_time_unix_nano >= s.start_time_unix_nano > 0
        status = (s.status.code, s.status.message)
        out.append((s.name, s.kind, parent, s.flags, span_attrs, links, status, events))
        out.append((resource, scope, version))
    return sorted(out, key=repr)


@pytest.mark.parametrize(
    "sampler", [ALWAYS_ON, ParentBased(TraceIdRatioBased(0.5))], ids=["always_on", "ratio"]
)
async def test_a_controllers_spans_on_the_wire_are_the_ones_the_sdk_path_sends(
    api: ApiClient,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    sampler: Sampler,
) -> None:
    exported: list[ReadableSpan] = []

    class Sdk(SimpleSpanProcessor):  # not a plain processor: the SDK builds the spans
        def on_end(self, span: ReadableSpan) -> None:
            exported.append(span)

    requests: list[bytes] = []
    made: list[OtlpExport] = []

    def ours(exporter: Any) -> OtlpExport:  # its requests kept, not sent
        made.append(OtlpExport(requests.append, lambda: None))
        return made[-1]

    _, _, built = await scenario(api, monkeypatch, sampler, ours)  # type: ignore[arg-type]
    assert built
    (export,) = made
    export.shutdown()  # sends what it still holds
    _, _, built = await scenario(api, monkeypatch, sampler, Sdk)
    assert not built
    assert exported  # the scenario made spans: a comparison of something
    sdk_wire = [encode_spans(exported).SerializeToString()]
    assert wire_shape(requests) == wire_shape(sdk_wire)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # only a full batch sends


def test_a_full_batch_is_sent_at_once_and_a_full_queue_drops(small_batches: None) -> None:
    sending = threading.Event()
    release = threading.Event()
    requests: list[bytes] = []

    def send(data: bytes) -> None:
        requests.append(data)
        sending.set()
        release.wait(30)  # the first request hangs until the queue has been filled

    export = OtlpExport(send, lambda: None)
    spans = sdk_made_spans()
    sink = export.sink(spans[0].resource, spans[0].instrumentation_scope)
    export.add(sink, record_of(spans[0]))
    assert not requests
    export.add(sink, record_of(spans[1]))
    assert sending.wait(30)  # the second span filled a batch: sent without waiting the delay
    for span in spans:  # 4 more while the first request hangs: the queue (3) drops one
        export.add(sink, record_of(span))
    release.set()
    export.shutdown()
    counts = [
        len(ExportTraceServiceRequest.FromString(r).resource_spans[0].scope_spans[0].spans)
        for r in requests
    ]
    assert counts == [2, 2, 1]
    assert export.dropped == 1
