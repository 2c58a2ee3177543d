"""The tracing hooks of one Widget change in a loop: CPU per change, every thread counted.

    .venv/bin/python benches/tracing_hooks.py MODE [CHANGES] [HEAP]
    .venv/bin/python benches/tracing_hooks.py MODE CHANGES --cold MB

A change as the Widget operator of benches/e2e makes it: the watch event of the update
and a run with one request span (the status patch), then the echo's event and its no-op
run: three spans, two links. MODE is where the spans go: ``drop`` (the SDK's
`BatchSpanProcessor` and an exporter that drops them), ``otlp`` (fastctl's `OtlpExport`,
every span written as protobuf, the sending stubbed) or ``sdk-otlp`` (the
`BatchSpanProcessor` and the SDK's OTLP encoder, the sending stubbed; its queue may
overflow, so a lower bound). HEAP long-lived objects (an operator's cache) make the
collector's work show. No API server, no event loop: a diagnosis of the hooks' own cost,
not an operator's.

``--cold MB``: the CPU's caches thrashed between changes (every cache line of MB
megabytes written), as an operator's own work between two changes leaves them, and the
watch events made as the watcher makes them from a frame (decoded, an `EventKind`); only
the hooks are timed (thread CPU), each change alone. A loop keeps the hooks' code and data
in the caches; in the operator every hook runs cold, at several times the cost.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from fastctl import _tracing
from fastctl.types import ObjectRef


class Drop(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class EncodeOnly(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        encode_spans(spans).SerializePartialToString()
        return SpanExportResult.SUCCESS


class _Kind:
    name = "APPLY"


class Event:
    """What the hooks read of a watch event."""

    kind = _Kind()

    def __init__(self, i: int) -> None:
        self.meta = {"name": f"w{i}", "namespace": "default", "resourceVersion": str(i)}

    def _meta(self) -> dict[str, str]:
        return self.meta


def _decoded_events(count: int) -> list[Any]:
    """Watch events of Widgets as the watcher makes them from frames (not parsed)."""
    import json

    from fastctl.kube._watcher import EventKind, ObjectEvent
    from fastctl.kube._wire import decode_watch_line

    events = []
    for i in range(count):
        meta = {"name": f"w{i}", "namespace": "default", "resourceVersion": str(1000 + i)}
        obj = {"apiVersion": "g/v1", "kind": "Widget", "metadata": meta}
        line = json.dumps({"type": "MODIFIED", "object": obj}).encode()
        _, item = decode_watch_line(line, strip_managed_fields=True)
        events.append(ObjectEvent._of_item(EventKind.APPLY, item))
    return events


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    cold_mb = 0
    if "--cold" in sys.argv:
        cold_mb = int(sys.argv[sys.argv.index("--cold") + 1])
        args.remove(str(cold_mb))
    mode = args[0]
    changes = int(args[1]) if len(args) > 1 else 20000
    heap = [{"k": [i, str(i)]} for i in range(int(args[2]) if len(args) > 2 else 0)]
    provider = TracerProvider()
    if mode == "drop":
        provider.add_span_processor(BatchSpanProcessor(Drop()))
    elif mode == "otlp":
        from fastctl._otlp import OtlpExport

        provider.add_span_processor(OtlpExport(lambda data: None, lambda: None))
    elif mode == "sdk-otlp":
        provider.add_span_processor(BatchSpanProcessor(EncodeOnly()))
    else:
        sys.exit(f"unknown mode {mode}")
    assert _tracing.enable(provider)
    tracing = _tracing.active()
    assert tracing is not None
    controller = tracing.controller("widgets", "Widget")
    scheduler = SimpleNamespace(failures=lambda key: 0, group_of=lambda key: None)

    def change(i: int) -> None:
        ref = ObjectRef(f"w{i % 1000}", "default")
        for echo in (False, True):
            for trigger in controller.primary(Event(i), [ref]):
                controller.queued(trigger)
            run = controller.start(ref.key, scheduler)
            run.enter()
            if not echo:
                path = f"/apis/g/v1/namespaces/default/widgets/w{i}/status"
                _tracing.request_span("PATCH", path).answered(200)
            run.end(None, None, 0.0, again=False)

    for i in range(2000):  # warm up
        change(i)
    if cold_mb:
        _cold(change, controller, scheduler, mode, changes, cold_mb)
        _tracing.disable()
        return
    start = time.process_time()
    for i in range(changes):
        change(i)
    provider.force_flush()
    spent = time.process_time() - start
    print(f"{mode}: {spent / changes * 1e6:.1f} µs a change (heap {len(heap)})")
    _tracing.disable()


def _cold(
    change: Any, controller: Any, scheduler: Any, mode: str, changes: int, megabytes: int
) -> None:
    """Each change's hooks timed alone, the caches thrashed before each (`--cold`)."""
    events = _decoded_events(changes)
    junk = bytearray(megabytes << 20)
    lines = b"\x01" * (len(junk) // 64)
    spent = 0
    for i, event in enumerate(events):
        junk[::64] = lines  # every cache line of `junk` written: the caches are cold
        ref = ObjectRef(f"w{i}", "default")
        path = f"/apis/g/v1/namespaces/default/widgets/w{i}/status"
        started = time.thread_time_ns()
        for echo in (False, True):
            for trigger in controller.primary(event, (ref,)):  # as primary_triggers gives
                controller.queued(trigger)
            run = controller.start(ref.key, scheduler)
            run.enter()
            if not echo:
                _tracing.request_span("PATCH", path).answered(200)
            run.end(None, None, 0.0, again=False)
        spent += time.thread_time_ns() - started
    print(f"{mode}: {spent / changes / 1000:.1f} µs a change, cold ({megabytes} MB thrashed)")


if __name__ == "__main__":
    main()
