"""The spans fastctl keeps in the extension on its own OTLP export (`fastctl._core.OtlpSpan`,
`fastctl._otel_fast`): user code still reads the reconcile's span through OpenTelemetry's
API, the spans it starts and the requests fastctl makes are its children, log records carry
its ids, and the context before the run is current again after it.

The controller runs on in-memory watch feeds and an `ApiClient` answered in memory (as in
test_tracing); the spans are read from the protobuf fastctl's export would send.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as WireSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from fastctl import ObjectRef, Scheduler, _tracing
from fastctl._core import OtlpSpan
from fastctl._otlp import OtlpExport
from fastctl.errors import ApiError
from fastctl.kube._objects import get
from fastctl.log import JsonFormatter, ObjectContextFilter
from fastctl.runtime.controller import Controller

from .test_controller_relist import NS, WIDGET, Sources, listing, running, until
from .test_tracing import CONFIGMAPS, api, widget  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(60)


def wire(requests: list[bytes]) -> list[WireSpan]:
    return [
        span
        for data in requests
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def attributes(span: WireSpan) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in kv_list(span)}


def kv_list(span: WireSpan) -> Any:
    return span.attributes


def traced(sampler: Any = None) -> tuple[TracerProvider, list[bytes]]:
    """Tracing on, through fastctl's own OTLP export alone (its requests kept)."""
    requests: list[bytes] = []
    provider = TracerProvider() if sampler is None else TracerProvider(sampler=sampler)
    provider.add_span_processor(OtlpExport(requests.append, lambda: None))
    assert _tracing.enable(provider)
    return provider, requests


async def test_user_code_reads_the_reconcile_span_and_its_children_are_beneath_it(
    api: ApiClient,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, requests = traced()
    sources = Sources(False, monkeypatch)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep()
    handler.addFilter(ObjectContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tracing-fast-test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    seen: list[Any] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        span = trace.get_current_span()
        seen.append((type(span), span.is_recording(), span.get_span_context()))
        span.set_attribute("user.sizes", [1, 2])
        span.set_attribute("user.note", "kept")
        span.add_event("user.event", {"k": "v"})
        with provider.get_tracer("user").start_as_current_span("user work"):
            logger.info("in the user's span")
        logger.info("in the reconcile")
        with contextlib.suppress(ApiError):
            await get(api, CONFIGMAPS, "missing", namespace=NS)

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    try:
        async with running(ctl):
            await until(lambda: len(seen) == 1 and ctl.scheduler.in_flight == 0, "the run")
        assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current
    finally:
        logger.removeHandler(handler)
        _tracing.disable()
        provider.shutdown()  # what it still holds is sent
    ((kind, recording, context),) = seen
    assert kind is OtlpSpan  # the span kept in the extension, read through OTel's API
    assert recording
    assert context.is_valid
    spans = {s.name: s for s in wire(requests)}
    run, user, request = spans["reconcile widgets"], spans["user work"], spans["get configmaps"]
    assert run.span_id == context.span_id.to_bytes(8, "big")
    assert run.trace_id == context.trace_id.to_bytes(16, "big")
    assert not run.parent_span_id
    assert user.parent_span_id == run.span_id
    assert request.parent_span_id == run.span_id
    assert user.trace_id == request.trace_id == run.trace_id
    assert attributes(request)["http.response.status_code"] == 404
    got = attributes(run)
    assert got["user.note"] == "kept"
    assert [v.int_value for v in got["user.sizes"].values] == [1, 2]
    assert got["fastctl.reconcile.outcome"] == "done"
    assert [e.name for e in run.events] == ["user.event"]
    in_user, in_run = (orjson.loads(line) for line in lines)
    assert in_user["span_id"] == user.span_id.hex()
    assert in_run["span_id"] == run.span_id.hex()
    assert in_run["trace_id"] == run.trace_id.hex()


def test_a_run_is_current_only_between_its_enter_and_its_end() -> None:
    """The context variable is set for the run and reset at its end, in whatever context
    the run was entered (a copy here, as a reconcile's task has)."""
    provider, requests = traced()
    try:
        tracing = _tracing.active()
        assert tracing is not None
        controller = tracing.controller("widgets", "Widget")
        seen: list[Any] = []

        def one_run() -> None:
            run = controller.start(ObjectRef("a", NS).key, Scheduler())
            assert type(run) is OtlpSpan
            seen.append(trace.get_current_span())
            run.enter()
            seen.append(trace.get_current_span())
            run.end(None, None, 0.0, again=False)
            seen.append(trace.get_current_span())

        contextvars.copy_context().run(one_run)
    finally:
        _tracing.disable()
        provider.shutdown()
    before, during, after = seen
    assert before is trace.INVALID_SPAN
    assert type(during) is OtlpSpan
    assert after is trace.INVALID_SPAN
    (span,) = wire(requests)
    assert span.span_id == during.get_span_context().span_id.to_bytes(8, "big")


async def test_a_dropped_run_is_current_not_recording_and_exports_nothing(
    api: ApiClient,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, requests = traced(ALWAYS_OFF)
    sources = Sources(False, monkeypatch)
    seen: list[Any] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        span = trace.get_current_span()
        seen.append((type(span), span.is_recording(), span.get_span_context()))
        with contextlib.suppress(ApiError):
            await get(api, CONFIGMAPS, "missing", namespace=NS)

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    try:
        async with running(ctl):
            await until(lambda: len(seen) == 1 and ctl.scheduler.in_flight == 0, "the run")
    finally:
        _tracing.disable()
        provider.shutdown()
    ((kind, recording, context),) = seen
    assert kind is OtlpSpan
    assert not recording
    assert context.is_valid  # its ids still name it (log records read them)
    assert not context.trace_flags.sampled
    assert wire(requests) == []
