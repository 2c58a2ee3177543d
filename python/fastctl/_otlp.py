"""The OTLP export of ``fastctl run --tracing``: span records in a buffer, written as
protobuf in Rust, sent in batches off the event loop.

The SDK's `BatchSpanProcessor` with its `OTLPSpanExporter` costs about 32 µs of CPU per
span to encode (a protobuf message object per span, attribute and value), more than
fastctl spends making the span, plus a `ReadableSpan` per span to hand over. Where the
export is fastctl's own (the provider `fastctl._otel.provider_from_environment` builds),
`OtlpExport` takes its place: fastctl's light spans (`fastctl._otel_spans`) give it a
tuple per span (`SpanRecord`) at their end, which it writes as protobuf at once
(`fastctl._core.SpanBuffer`, in Rust: a few µs per span, and nothing of the span stays in
Python's heap), and a thread wraps each batch in one ``ExportTraceServiceRequest`` and
sends it with the OTLP exporter's own HTTP client, so the endpoint, headers, timeout,
compression, certificates and retries are the exporter's, read from the same standard
variables. The spans on the wire are the ones the SDK's encoder would write (a test
decodes both and compares them). Spans made by the SDK's tracer (a webhook call's) reach
it as `ReadableSpan` through ``on_end`` and are written the same way.

The batching follows the SDK's variables: ``OTEL_BSP_SCHEDULE_DELAY`` (ms between
exports), ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (spans per request; a full batch is sent at
once), ``OTEL_BSP_MAX_QUEUE_SIZE`` (spans waiting; more are dropped and counted),
``OTEL_BSP_EXPORT_TIMEOUT`` (ms one batch's export may take, its retries included: the
client's deadline is cut to it when it is shorter).

A child process made by ``os.fork`` starts with an empty buffer (its parent sends what it
held) and a thread of its own (threads do not survive a fork), as the SDK's batch
processor does.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from fastctl._core import SpanBuffer

__all__ = ["OtlpExport", "SpanRecord", "record_of", "span_processor"]

log = logging.getLogger("fastctl.tracing")

SpanRecord = tuple[Any, ...]
"""One ended span, as `fastctl._core.otlp_encode` reads it: ``(name, trace_id, span_id,
trace_state, parent_span_id, parent_is_remote, kind, start, end, attributes, events,
links, status_code, status_message, dropped_attributes, dropped_events, dropped_links)``;
``trace_state`` is the header form or None, ``parent_span_id`` None for a root, ``kind``
the protobuf's ``SpanKind`` (the SDK's value + 1), ``attributes`` a mapping, ``events``
the SDK's `Event` objects, ``links`` the SDK's `Link` objects or plain tuples
``(trace_id, span_id, is_remote, attributes)`` (`fastctl._otel_spans.PlainLink`),
``status_code`` the `StatusCode`'s value."""

Header = tuple[Any, ...]
"""What `otlp_encode` writes before a group's spans: ``(resource_attributes,
resource_schema_url, scope_name, scope_version, scope_attributes, scope_schema_url)``."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        log.warning("%s=%r is not a number: %d is used", name, raw, default)
        return default
    return value if value > 0 else default


def header_of(resource: Resource, scope: InstrumentationScope | None) -> Header:
    """The `Header` of the spans of `resource` and `scope`, as the SDK's encoder writes
    them (no scope: an empty one)."""
    attributes = dict(resource.attributes)
    if scope is None:
        return (attributes, resource.schema_url, None, None, None, None)
    return (
        attributes,
        resource.schema_url,
        scope.name,
        scope.version,
        scope.attributes,
        scope.schema_url,
    )


def record_of(span: ReadableSpan) -> SpanRecord:
    """The `SpanRecord` of a span the SDK made (fastctl's own spans build theirs at their
    end, `fastctl._otel_spans.SpanMaker.ended`)."""
    context = span.context
    assert context is not None
    parent = span.parent
    state = context.trace_state
    status = span.status
    return (
        span.name,
        context.trace_id,
        context.span_id,
        state.to_header() if state else None,
        parent.span_id if parent is not None else None,
        bool(parent is not None and parent.is_remote),
        span.kind.value + 1,
        span.start_time,
        span.end_time,
        span.attributes,
        span.events,
        span.links,
        status.status_code.value,
        status.description,
        span.dropped_attributes,
        span.dropped_events,
        span.dropped_links,
    )


class OtlpExport(SpanProcessor):
    """A span processor that writes each span as protobuf when it ends, into a buffer per
    resource and scope (`fastctl._core.SpanBuffer`, outside Python's heap), and sends the
    buffers by OTLP/HTTP in batches from a thread of its own (`send` is the exporter's
    client: bytes in, a result with ``success`` out)."""

    def __init__(self, send: Callable[[bytes], Any], close: Callable[[], None]) -> None:
        self._send = send
        self._close = close
        self.max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.max_queue)
        self.delay = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._failed = 0
        self._buffers: dict[tuple[Resource, InstrumentationScope | None], SpanBuffer] = {}
        self._known: dict[
            tuple[int, int], tuple[Resource, InstrumentationScope | None, SpanBuffer]
        ] = {}
        self._stopped = False
        self._start()
        if hasattr(os, "register_at_fork"):
            again = weakref.WeakMethod(self._forked)

            def forked() -> None:
                method = again()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=forked)

    def _start(self) -> None:
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastctl-otlp", daemon=True)
        self._thread.start()

    def _forked(self) -> None:
        """In the child of ``os.fork``: what the parent buffered is the parent's to send
        (it is dropped here, uncounted), and the export thread, which did not survive the
        fork, is started again, with locks no thread of the parent can hold."""
        if self._stopped:
            return
        for buffer in list(self._buffers.values()):
            while buffer.take(self.batch) is not None:
                pass
        self._start()

    @property
    def dropped(self) -> int:
        """Spans not exported: their buffer was full, or they could not be written."""
        return self._failed + sum(b.dropped for b in list(self._buffers.values()))

    def sink(self, resource: Resource, scope: InstrumentationScope | None) -> SpanBuffer:
        """The buffer of the spans of `resource` and `scope` (`add` writes to it). Found by
        the objects' identity first: a `Resource` hashes a JSON dump of its attributes."""
        known = self._known.get((id(resource), id(scope)))
        if known is not None and known[0] is resource and known[1] is scope:
            return known[2]
        key = (resource, scope)
        found = self._buffers.get(key)
        if found is None:
            found = self._buffers[key] = SpanBuffer(header_of(resource, scope), self.max_queue)
        self._known[(id(resource), id(scope))] = (resource, scope, found)  # keeps them alive
        return found

    def wake(self) -> None:
        """A batch is full: the export thread sends it now."""
        self._wake.set()

    def add(self, sink: SpanBuffer, record: SpanRecord) -> None:
        """One ended span (from any thread), written into `sink` until its batch is sent."""
        try:
            waiting = sink.add(record)
        except Exception:  # a record the writer cannot read: a bug, not the span's maker's
            log.exception("a span could not be written for OTLP; it is dropped")
            self._failed += 1
            return
        if waiting == self.batch:
            self._wake.set()

    # -- the SDK's span processor interface (spans the SDK's tracer made) ------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        self.add(self.sink(span.resource, span.instrumentation_scope or None), record_of(span))

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        self._thread.join()
        for buffer in list(self._buffers.values()):
            buffer.close()  # what ends from now on is dropped
        self._drain()
        self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._drain()

    # -- the export thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.delay)
            self._wake.clear()
            self._drain()

    def _drain(self) -> bool:
        """Send every buffered span, a batch at a time; whether every batch was sent."""
        ok = True
        with self._drain_lock:
            for buffer in list(self._buffers.values()):
                while (taken := buffer.take(self.batch)) is not None:
                    ok = self._export(*taken) and ok
        return ok

    def _export(self, data: bytes, count: int) -> bool:
        try:
            result = self._send(data)
        except Exception:
            log.exception("OTLP export of %d spans failed", count)
            return False
        return bool(getattr(result, "success", True))


class _Failed:
    success = False


_FAILED = _Failed()


def _cut_timeout(client: Any) -> None:
    """``OTEL_BSP_EXPORT_TIMEOUT``: the most one batch's export may take. The exporter's
    client bounds each export, its retries included, by its own timeout (seconds,
    ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT``); the shorter of the two is kept."""
    if not os.environ.get("OTEL_BSP_EXPORT_TIMEOUT", "").strip():
        return
    limit = _env_int("OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000
    current = getattr(client, "_timeout", None)
    if isinstance(current, int | float) and limit < current:
        client._timeout = limit


def span_processor(exporter: SpanExporter) -> SpanProcessor:
    """`OtlpExport` sending through the OTLP/HTTP `exporter`'s client, or, where the
    exporter is not built as expected (another SDK version), the SDK's
    `BatchSpanProcessor` around it."""
    client = getattr(exporter, "_client", None)
    send = getattr(client, "export", None)
    if not callable(send):
        return BatchSpanProcessor(exporter)
    limit = getattr(exporter, "_max_request_size", 0)
    _cut_timeout(client)
    try:
        from fastctl._otlp_http import raw_transport
    except ImportError:  # an exporter without the transport interface: its client sends
        pass
    else:
        raw_transport(client)  # an http:// endpoint: the POST made in Rust, without the GIL

    def sized(data: bytes) -> Any:
        if isinstance(limit, int) and 0 < limit < len(data):
            log.warning("an OTLP export of %d bytes, over the limit: dropped", len(data))
            return _FAILED
        return send(data)

    return OtlpExport(sized, exporter.shutdown)
