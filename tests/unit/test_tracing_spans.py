"""The spans fastctl builds itself (`fastctl._otel_spans`) against the SDK's own.

Where the provider's span processors are the SDK's batch or simple ones, reconcile and
request spans are built without ``Tracer.start_span`` and handed to the processor as the
SDK's `ReadableSpan` at their end; anywhere else (another processor, which may use
``on_start``) the SDK makes them. What must hold:

- an exporter gets the same spans either way (names, kinds, parents, attributes, links,
  status, events, sampling), under each standard sampler (``OTEL_TRACES_SAMPLER``), with
  trace ids chosen so that a ratio sampler keeps some traces and drops others;
- a reconcile the sampler drops builds neither the span's attributes nor the links to its
  watch events, yet its requests see an (unsampled) current span, as with the SDK;
- a processor of another kind sees every span start (``on_start``), as the SDK promises.

The controller runs on in-memory watch feeds and an in-memory API (test_tracing's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)

from fastctl import _otel, _tracing
from fastctl.errors import ApiError
from fastctl.kube._objects import apply, get
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.runtime.controller import Controller

from .test_controller_relist import CHILD, NS, WIDGET, Sources, listing, running, until
from .test_tracing import CONFIGMAPS, _Session, child, widget

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    client = ApiClient(Configuration(host="https://api.example"))
    real = client.rest_client.pool_manager
    client.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    yield client
    await real.close()


class Ids(RandomIdGenerator):
    """Trace ids a ratio sampler keeps (`keep`) or drops, whichever the test asks for next:
    the same for both ways of building spans, however many ids each asks for."""

    def __init__(self) -> None:
        self.keep = True

    def generate_trace_id(self) -> int:
        low = 1 if self.keep else (1 << 64) - 1  # a ratio sampler reads the low 64 bits
        return (super().generate_trace_id() >> 64 << 64) | low


class OnStart(SimpleSpanProcessor):
    """A processor of another kind: it counts the spans it sees start."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.started = 0

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.started += 1


def shape(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    """What an exporter can tell of `spans`, less what differs run to run (ids, times)."""
    names = {s.context.span_id: s.name for s in spans}
    out = []
    for s in spans:
        attrs = dict(s.attributes or {})
        attrs.pop("fastctl.reconcile.queue_wait", None)  # a time
        links = [
            (link.context.is_valid, link.context.trace_flags.sampled, dict(link.attributes or {}))
            for link in s.links
        ]
        events = [(e.name, dict(e.attributes or {})) for e in s.events]
        parent = names.get(s.parent.span_id, "?") if s.parent is not None else None
        out.append(
            (
                s.name,
                s.kind,
                parent,
                s.context.trace_flags.sampled,
                attrs,
                links,
                s.status.status_code,
                s.status.description,
                events,
                {k: v for k, v in s.resource.attributes.items() if k != "service.instance.id"},
                s.instrumentation_scope.name if s.instrumentation_scope else None,
            )
        )
    return sorted(out, key=repr)


async def scenario(
    api: ApiClient,
    monkeypatch: pytest.MonkeyPatch,
    sampler: Sampler,
    processor: type[SimpleSpanProcessor],
) -> tuple[list[tuple[Any, ...]], SimpleSpanProcessor, bool]:
    """An owner reconciled on its listing and on changes of its own and of its child, each
    run's trace kept or dropped by turns: the spans exported, the processor, and whether
    fastctl built the spans itself."""
    api.rest_client.pool_manager = _Session()  # type: ignore[assignment]  # nothing applied yet
    exporter = InMemorySpanExporter()
    ids = Ids()
    provider = TracerProvider(sampler=sampler, id_generator=ids)
    proc = processor(exporter)
    provider.add_span_processor(proc)
    assert _tracing.enable(provider)
    tracing = _tracing.active()
    assert tracing is not None
    light = tracing.spans.light()
    sources = Sources(False, monkeypatch)
    calls = 0

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        nonlocal calls
        name = obj["metadata"]["name"]
        current = trace.get_current_span()
        current.set_attribute("user.sizes", [1, 2])
        current.add_event("user.note", {"k": "v"})
        with contextlib.suppress(ApiError):
            await get(api, CONFIGMAPS, f"{name}-config", namespace=NS)
        cm = {"metadata": {"name": f"{name}-config", "namespace": NS}, "data": {"k": "v"}}
        await apply(api, CONFIGMAPS, cm, field_manager="tracing-test")
        calls += 1

    ctl = Controller(api, WIDGET, reconcile, name="widgets").owns(CHILD)
    steps = [
        (False, ObjectEvent(EventKind.APPLY, child("a-config", "a", "20"))),
        (True, ObjectEvent(EventKind.APPLY, widget("a", "21"))),
        (False, ObjectEvent(EventKind.APPLY, widget("a", "22"))),
        (True, ObjectEvent(EventKind.DELETE, child("a-config", "a", "23"))),
    ]
    try:
        ids.keep = True
        sources.feeds[WIDGET].push(*listing(widget("a", "10")))
        sources.feeds[CHILD].push(*listing(child("a-config", "a", "11")))
        async with running(ctl):
            await until(lambda: calls == 1 and ctl.scheduler.in_flight == 0, "the first run")
            for done, (keep, event) in enumerate(steps, start=2):
                ids.keep = keep
                feed = sources.feeds[CHILD if event.obj["kind"] == "ConfigMap" else WIDGET]
                feed.push(event)
                await until(
                    lambda n=done: calls == n and ctl.scheduler.in_flight == 0,  # type: ignore[misc]
                    f"run {done}",
                )
    finally:
        _tracing.disable()
    return shape(exporter.get_finished_spans()), proc, light


SAMPLERS = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "traceidratio": TraceIdRatioBased(0.5),
    "parentbased_always_on": ParentBased(ALWAYS_ON),
    "parentbased_traceidratio": ParentBased(TraceIdRatioBased(0.5)),
    # A child of a dropped run recorded all the same: the parent's flags decide.
    "parentbased_unsampled_children_kept": ParentBased(
        TraceIdRatioBased(0.5), local_parent_not_sampled=ALWAYS_ON
    ),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
async def test_an_exporter_gets_the_spans_the_sdk_would_have_made(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    sampler = SAMPLERS[name]
    light, _, built = await scenario(api, monkeypatch, sampler, SimpleSpanProcessor)
    assert built  # fastctl built these spans itself
    sdk, processor, built = await scenario(api, monkeypatch, sampler, OnStart)
    assert not built  # the SDK made these
    assert light == sdk
    if name == "always_off":
        assert not light
    else:  # the scenario's runs are not all alike: a comparison of something
        assert len({span[0] for span in light}) >= 3
    if "traceidratio" in name:
        kept = [s for s in light if s[0].startswith("reconcile ")]
        assert 0 < len(kept) < 5  # some traces kept, some dropped
    assert isinstance(processor, OnStart)
    assert processor.started >= len(sdk)  # every recorded span was started in it


async def test_a_dropped_run_builds_no_link_and_its_requests_see_its_span(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = 0
    real = _otel.plain_link

    def counted(link: _otel.EventLink) -> Any:
        nonlocal built
        built += 1
        return real(link)

    monkeypatch.setattr(_otel, "plain_link", counted)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert _tracing.enable(provider)
    sources = Sources(False, monkeypatch)
    seen: list[trace.SpanContext] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(trace.get_current_span().get_span_context())
        with contextlib.suppress(ApiError):
            await get(api, CONFIGMAPS, "a-config", namespace=NS)

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    try:
        sources.feeds[WIDGET].push(*listing(widget("a", "1")))
        async with running(ctl):
            await until(lambda: len(seen) == 1 and ctl.scheduler.in_flight == 0, "a run")
            sources.feeds[WIDGET].push(ObjectEvent(EventKind.APPLY, widget("a", "2")))
            await until(lambda: len(seen) == 2 and ctl.scheduler.in_flight == 0, "a rerun")
    finally:
        _tracing.disable()
    assert not exporter.get_finished_spans()
    assert built == 0  # the links to the watch events were never needed
    assert all(c.is_valid and not c.trace_flags.sampled for c in seen)
    assert len({c.trace_id for c in seen}) == 2  # a trace each, as the SDK gives
