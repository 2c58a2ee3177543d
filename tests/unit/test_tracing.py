"""Tracing a controller with the OpenTelemetry SDK's in-memory exporter: what a trace says
about why a reconcile ran (docs/tracing.md).

The controller runs on in-memory watch feeds (as in test_controller_relist) and a real
`ApiClient` whose HTTP session answers in memory, so its requests go through
`fastctl.kube._http.request` as they would to a server. What must hold:

- a change to an owned child gives a reconcile span of its owner, linked to that child's
  watch event (kind, object, resourceVersion, reason ``owned_child``: the link stands for
  the event, no span is made for it), with the span of every request the reconcile made
  beneath it;
- a change of the object itself links its run with the reason ``own_change`` and its
  resourceVersion;
- a relist gives reconcile spans linked to the one relist event (one span context shared
  by its runs), with the reason ``relist``;
- a failing reconcile gives a span per attempt, each an error with its attempt number and
  its backoff, each retry linked to the attempt before it (``error_retry``);
- a trace id and span id in the log records of a reconcile.

Every wait is for the spans themselves (an export wakes it), never for a time; the
timeout marker only bounds a test that would hang. The OpenTelemetry packages are imported,
not skipped when missing: the ``otel`` extra is
part of the development install, and a test that vanished with it would hide a broken one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fastctl import Action, ApplierConfig, ObjectRef, Scheduler, Trigger, _tracing
from fastctl._otel import _request_name
from fastctl.errors import ApiError
from fastctl.kube._objects import apply, get
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.log import JsonFormatter, ObjectContextFilter
from fastctl.runtime.controller import Controller
from fastctl.webhook import AdmissionRequest, Allow, Webhooks, WebhookServer

from .test_controller_relist import CHILD, DONE, INIT, NS, WIDGET, Sources, listing, running, until

pytestmark = pytest.mark.timeout(60)

CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)


def widget(name: str, version: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": version}
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


def child(name: str, owner: str, version: str) -> dict[str, Any]:
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner, "uid": f"uid-{owner}"}
    meta = {
        "name": name,
        "namespace": NS,
        "resourceVersion": version,
        "ownerReferences": [{**ref, "controller": True}],
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._data = orjson.dumps(body)

    async def read(self) -> bytes:
        return self._data

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Session:
    """The API server, in memory: a GET answers the ConfigMap asked for (404 when it does
    not exist), an apply (PATCH) answers its body."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.sent: list[tuple[str, str]] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> _Response:
        path = url.split("://", 1)[1].split("/", 1)[1]
        self.sent.append((method, "/" + path))
        name = path.rsplit("/", 1)[1]
        if method == "GET":
            if name not in self.objects:
                status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": name}
                return _Response(404, status)
            return _Response(200, self.objects[name])
        body = orjson.loads(kwargs["data"])
        self.objects[name] = body
        return _Response(200, body)


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    client = ApiClient(Configuration(host="https://api.example"))
    real = client.rest_client.pool_manager
    client.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    yield client
    await real.close()


class Spans(InMemorySpanExporter):
    """The in-memory exporter, and a wait for the spans a test expects: woken by each export
    (the simple processor exports as a span ends, on the loop's thread), so a wait depends
    on no clock, however slow the machine."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.ended.set()
        return result

    async def until(self, check: Callable[[], bool]) -> None:
        while not check():
            self.ended.clear()
            await self.ended.wait()


@pytest.fixture
def spans() -> Iterator[Spans]:
    """Tracing on, into memory, for the test."""
    exporter = Spans()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert _tracing.enable(provider)
    yield exporter
    _tracing.disable()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def attr(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


def reconciles_of(exporter: InMemorySpanExporter, key: str) -> list[ReadableSpan]:
    return [s for s in named(exporter, "reconcile ") if attr(s, "fastctl.object") == key]


def link_reasons(span: ReadableSpan) -> list[Any]:
    return [(link.attributes or {}).get("fastctl.trigger.reason") for link in span.links]


async def test_a_change_to_an_owned_child_links_its_owners_reconcile_to_the_event(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        with contextlib.suppress(ApiError):  # the first time: missing, then applied
            await get(api, CONFIGMAPS, f"{name}-config", namespace=NS)
        cm = {"metadata": {"name": f"{name}-config", "namespace": NS}, "data": {"k": "v"}}
        await apply(api, CONFIGMAPS, cm, field_manager="tracing-test")

    ctl = Controller(api, WIDGET, reconcile, name="widgets").owns(CHILD)
    sources.feeds[WIDGET].push(*listing(widget("a", "10")))
    sources.feeds[CHILD].push(*listing(child("a-config", "a", "11")))
    async with running(ctl):
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) >= 1)
        await until(lambda: ctl.scheduler.in_flight == 0, "the first reconcile's end")
        spans.clear()
        changed = child("a-config", "a", "42")
        sources.feeds[CHILD].push(ObjectEvent(EventKind.APPLY, changed))
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 1)

    (run,) = reconciles_of(spans, "default/a")
    assert not named(spans, "watch ")  # a watch event is a link, not a span
    # The reconcile is linked to the child's event, and the link says why.
    (link,) = run.links
    assert link.context.is_valid
    assert link.context.trace_id != run.context.trace_id  # the event's, not the run's
    assert link.attributes is not None
    assert link.attributes["fastctl.trigger.reason"] == "owned_child"
    assert link.attributes["fastctl.watch.kind"] == "ConfigMap"
    assert link.attributes["fastctl.watch.object"] == "default/a-config"
    assert link.attributes["k8s.resource_version"] == "42"
    assert attr(run, "fastctl.controller") == "widgets"
    assert attr(run, "fastctl.reconcile.outcome") == "done"
    assert attr(run, "fastctl.reconcile.attempt") == 1
    assert attr(run, "fastctl.reconcile.priority") == 0
    assert attr(run, "fastctl.reconcile.queue_wait") >= 0
    # Its requests are its children: the GET of the child, then the apply.
    requests = [s for s in spans.get_finished_spans() if s.parent is not None]
    assert [s.name for s in requests] == ["get configmaps", "patch configmaps"]
    for request in requests:
        assert request.parent is not None
        assert request.parent.span_id == run.context.span_id
        assert request.context.trace_id == run.context.trace_id
        assert attr(request, "http.response.status_code") == 200
        assert attr(request, "url.path") == f"/api/v1/namespaces/{NS}/configmaps/a-config"


async def test_a_change_of_the_object_itself_links_its_run_with_own_change(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    feed = sources.feeds[WIDGET]
    feed.push(*listing(widget("a", "1")))
    async with running(ctl):
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 1)
        await until(lambda: ctl.scheduler.in_flight == 0, "the first reconcile's end")
        spans.clear()
        feed.push(ObjectEvent(EventKind.APPLY, widget("a", "7")))
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 1)

    (run,) = reconciles_of(spans, "default/a")
    (link,) = run.links
    assert link.context.is_valid
    # The run's own kind and object are not repeated on the link.
    assert dict(link.attributes or {}) == {
        "fastctl.trigger.reason": "own_change",
        "k8s.resource_version": "7",
    }


async def test_a_reconcile_span_is_a_root_with_its_fair_group_whatever_span_is_current(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller run inside a span of the caller's: its reconciles are traces of their
    own (their causes are links), and the fair group is said."""
    sources = Sources(False, monkeypatch)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    config = ApplierConfig(fair_by="namespace")
    ctl = Controller(api, WIDGET, reconcile, name="widgets", config=config)
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    tracer = TracerProvider().get_tracer("caller")
    with tracer.start_as_current_span("the caller's"):
        async with running(ctl):
            await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 1)

    (run,) = reconciles_of(spans, "default/a")
    assert run.parent is None
    assert attr(run, "fastctl.reconcile.fair_group") == NS


def test_a_run_has_the_highest_priority_of_the_triggers_merged_into_it(spans: Spans) -> None:
    """As the scheduler keeps the highest priority of merged triggers, so does the span."""
    tracing = _tracing.active()
    assert tracing is not None
    run = tracing.controller("widgets", "Widget")
    ref = ObjectRef("a", NS)
    for priority in (-100, 5, 0):
        run.queued(Trigger(ref, priority))
    run.start(ref.key, Scheduler()).end(None, None, 0.0, again=False)
    (span,) = reconciles_of(spans, "default/a")
    assert attr(span, "fastctl.reconcile.priority") == 5


def test_a_request_span_is_named_by_its_verb_and_resource() -> None:
    base = f"/apis/example.com/v1/namespaces/{NS}/widgets"
    assert _request_name("PATCH", f"{base}/w/status") == "patch widgets/status"
    assert _request_name("GET", f"{base}?labelSelector=a") == "list widgets"
    assert _request_name("GET", "/api/v1/configmaps") == "list configmaps"
    assert _request_name("GET", f"/api/v1/namespaces/{NS}/configmaps/c") == "get configmaps"
    assert _request_name("DELETE", base) == "deletecollection widgets"
    assert _request_name("DELETE", f"{base}/w") == "delete widgets"
    assert _request_name("POST", base) == "create widgets"
    assert _request_name("PUT", f"{base}/w") == "update widgets"
    assert _request_name("GET", "/version") == "GET /version"


async def test_a_relist_links_the_reconciles_it_triggers_with_the_relist_reason(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    feed = sources.feeds[WIDGET]
    feed.push(*listing(widget("a", "1"), widget("b", "2")))
    async with running(ctl):
        await spans.until(lambda: len(named(spans, "reconcile ")) == 2)
        await until(lambda: ctl.scheduler.in_flight == 0, "the first reconciles' end")
        spans.clear()
        feed.push(INIT, ObjectEvent(EventKind.INIT_APPLY, widget("a", "3")))
        feed.push(ObjectEvent(EventKind.INIT_APPLY, widget("b", "2")), DONE)
        await spans.until(lambda: len(named(spans, "reconcile ")) == 2)

    runs = named(spans, "reconcile ")
    assert sorted(attr(s, "fastctl.object") for s in runs) == ["default/a", "default/b"]
    # One relist, one event: both runs link to the same span context, which says so.
    contexts = {(run.links[0].context.trace_id, run.links[0].context.span_id) for run in runs}
    assert len(contexts) == 1
    assert all(run.links[0].context.is_valid for run in runs)
    for run in runs:
        assert link_reasons(run) == ["relist"]
        assert (run.links[0].attributes or {})["fastctl.watch.kind"] == "Widget"
        assert attr(run, "fastctl.reconcile.priority") == -100  # a list's triggers


async def test_a_failing_reconcile_gives_an_error_span_per_attempt_with_its_backoff(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)
    failures = 3

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        nonlocal failures
        if failures:
            failures -= 1
            raise RuntimeError("the database is down")
        return None

    scheduler = Scheduler(backoff_base=0.001, backoff_max=0.004)
    ctl = Controller(api, WIDGET, reconcile, name="widgets", scheduler=scheduler)
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    async with running(ctl):
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 4)

    runs = sorted(reconciles_of(spans, "default/a"), key=lambda s: s.start_time or 0)
    assert [attr(s, "fastctl.reconcile.attempt") for s in runs] == [1, 2, 3, 4]
    assert [attr(s, "fastctl.reconcile.outcome") for s in runs] == [
        "error",
        "error",
        "error",
        "done",
    ]
    for failed in runs[:3]:
        assert not failed.status.is_ok
        assert attr(failed, "error.type") == "RuntimeError"
        assert attr(failed, "fastctl.reconcile.retry_in") >= 0
        (exception,) = [e for e in failed.events if e.name == "exception"]
        assert exception.attributes is not None
        assert "the database is down" in str(exception.attributes["exception.message"])
    assert runs[3].status.is_ok
    # Each retry is linked to the attempt before it; the first to the list.
    assert link_reasons(runs[0]) == ["relist"]
    for before, after in itertools.pairwise(runs):
        assert link_reasons(after) == ["error_retry"]
        assert after.links[0].context.span_id == before.context.span_id


async def test_log_records_of_a_reconcile_carry_its_trace_and_span_ids(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep()
    handler.addFilter(ObjectContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tracing-test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        logger.info("reconciling")

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    try:
        async with running(ctl):
            await spans.until(lambda: len(named(spans, "reconcile ")) == 1)
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    (run,) = named(spans, "reconcile ")
    inside, outside = (orjson.loads(line) for line in lines)
    assert inside["trace_id"] == format(run.context.trace_id, "032x")
    assert inside["span_id"] == format(run.context.span_id, "016x")
    assert "trace_id" not in outside


async def test_without_tracing_no_span_is_made(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off (the default), a provider that would record gets nothing, and a request gets the
    do-nothing span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sources = Sources(False, monkeypatch)
    seen: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(obj["metadata"]["name"])

    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    async with running(ctl):
        await until(lambda: seen == ["a"], "the reconcile")
    assert _tracing.request_span("GET", "/api/v1/namespaces") is _tracing.NO_SPAN
    assert exporter.get_finished_spans() == ()


def test_otel_sdk_disabled_keeps_tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not _tracing.enable(TracerProvider())
    assert not _tracing.is_enabled()


async def test_a_webhook_call_is_a_span_in_the_api_servers_trace(
    spans: Spans, api: ApiClient
) -> None:
    """The API server's ``traceparent`` makes the webhook's span its child; the requests the
    handler makes are the webhook span's children."""
    hooks = Webhooks()

    @hooks.validating(CHILD, name="cm.validate.test.dev")
    async def check(request: AdmissionRequest) -> Allow:
        with contextlib.suppress(ApiError):
            await get(api, CONFIGMAPS, "policy", namespace=NS)
        return Allow()

    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "object": child("c", "a", "1")},
    }
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
    async with (
        WebhookServer(hooks, None, port=0, host="127.0.0.1") as server,
        aiohttp.ClientSession() as session,
        session.post(
            server.url + "/validate/cm.validate.test.dev",
            data=orjson.dumps(review),
            headers=headers,
        ) as resp,
    ):
        assert resp.status == 200
    (call,) = named(spans, "webhook ")
    assert call.parent is not None
    assert format(call.context.trace_id, "032x") == trace_id
    assert format(call.parent.span_id, "016x") == parent_id
    assert attr(call, "http.response.status_code") == 200
    (request,) = named(spans, "get ")
    assert request.parent is not None
    assert request.parent.span_id == call.context.span_id


async def test_a_requeue_and_a_timeout_are_outcomes_and_their_next_runs_link_back(
    spans: Spans, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 asks for a requeue, run 2 overruns its timeout, run 3 is done: the outcomes
    say so, run 2 is linked to run 1 (``requeue``) and run 3 to run 2 (``error_retry``)."""
    sources = Sources(False, monkeypatch)
    runs = 0

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        nonlocal runs
        runs += 1
        if runs == 1:
            return Action.requeue(0.001)
        if runs == 2:
            await asyncio.Event().wait()  # past the timeout
        return None

    scheduler = Scheduler(backoff_base=0.001, backoff_max=0.004)
    ctl = Controller(api, WIDGET, reconcile, name="widgets", scheduler=scheduler, timeout=0.01)
    sources.feeds[WIDGET].push(*listing(widget("a", "1")))
    async with running(ctl):
        await spans.until(lambda: len(reconciles_of(spans, "default/a")) == 3)

    first, second, third = sorted(
        reconciles_of(spans, "default/a"), key=lambda s: s.start_time or 0
    )
    assert [attr(s, "fastctl.reconcile.outcome") for s in (first, second, third)] == [
        "requeue",
        "timeout",
        "done",
    ]
    assert attr(first, "fastctl.reconcile.requeue_after") == 0.001
    assert link_reasons(second) == ["requeue"]
    assert second.links[0].context.span_id == first.context.span_id
    assert attr(second, "error.type") == "ReconcileTimeout"
    assert link_reasons(third) == ["error_retry"]
    assert third.links[0].context.span_id == second.context.span_id
