"""Spans on OpenTelemetry: imported only once tracing is on (`fastctl._tracing.enable`).

What a trace of a controller holds (docs/tracing.md says what each attribute means):

- a ``reconcile <controller>`` span per reconcile, *linked* to every watch event merged
  into its run (the change of a primary object, of an owned child, of a mapped object, or
  a completed relist) and, for a requeue or an error retry, to the run before it; the
  link's attributes carry the reason, the kind, the object and its ``resourceVersion``,
  so the links alone answer "why did this run". The scheduler merges triggers, so one run
  may have many links, and one watch event (a relist) links to many runs: links, not
  parents, are how OpenTelemetry says that;
- beneath it, a client span per API request the reconcile makes through fastctl, and for
  a webhook call the server answers, a server span (continuing the API server's trace when
  its request carries one).

A link to a watch event travels with the trigger itself (`LinkedTrigger`), so it joins
exactly the run the scheduler merges the trigger into: the run that starts next, or the
follow-up of a run in flight.

A watch event is not a span of its own: an SDK span costs about as much CPU as the whole
controller path spends on the event, and a link needs only a span context. Each event that
triggers gets one made from the SDK's id generator (never exported: the runs one event
triggered share it, which is how a relist's runs are found together), and the event's
attributes ride on the link. What a change costs is so the reconcile span, its requests,
and a link per trigger (docs/benchmarks.md, tracing).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.sdk.resources import Resource as OtelResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode

from fastctl._clock import monotonic
from fastctl._core import ReconcileSpans, SpanSource
from fastctl._otel_fast import OtlpSpan
from fastctl._otel_spans import (
    _SPAN_KEY,
    _VAR,
    ROOT,
    PlainLink,
    SpanMaker,
    as_link,
    attach,
    current_span,
    detach,
)
from fastctl._reasons import error_text
from fastctl._redact import scrub
from fastctl._version import version
from fastctl.errors import ReconcileCancelled, ReconcileTimeout
from fastctl.types import Action, ObjectRef, Trigger

__all__ = [
    "MAX_LINKS",
    "ControllerTracing",
    "LinkedTrigger",
    "Reason",
    "RunSpan",
    "SdkRunSpan",
    "Tracing",
    "provider_from_environment",
]

log = logging.getLogger("fastctl.tracing")

MAX_LINKS = 32
"""Links kept per run: the first ones merged (a relist of a thousand children of one owner
would otherwise put a thousand links on one span); the others are counted in
``fastctl.reconcile.links_dropped``."""

_DEFAULT_SERVICE = "fastctl"


class Reason:
    """Why a run was triggered: the ``fastctl.trigger.reason`` of a link."""

    OWN_CHANGE = "own_change"
    OWNED_CHILD = "owned_child"
    MAPPED_OBJECT = "mapped_object"
    RELIST = "relist"
    RESYNC = "reconcile_all_on"
    REQUEUE = "requeue"
    ERROR_RETRY = "error_retry"


def provider_from_environment() -> TracerProvider:
    """A provider configured by the standard variables: ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` (service name ``fastctl`` when neither names one),
    ``OTEL_TRACES_EXPORTER`` (``otlp``, the default; ``console``; ``none``), and the OTLP
    exporter's own (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``..._TRACES_ENDPOINT``,
    ``..._HEADERS``, ``..._TIMEOUT``...), read by the exporter itself. Spans are exported
    in batches (``OTEL_BSP_*``), off the event loop; by OTLP, fastctl writes the protobuf
    itself and sends it with the exporter's client (`fastctl._otlp`)."""
    resource = OtelResource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(OtelResource({"service.name": _DEFAULT_SERVICE}))
    provider = TracerProvider(resource=resource)
    exporters = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    for name in (e.strip() for e in exporters.split(",")):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            from fastctl._otlp import span_processor

            provider.add_span_processor(span_processor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name != "none":
            log.warning("OTEL_TRACES_EXPORTER=%s: unknown exporter, ignored", name)
    return provider


class Tracing:
    """The process's tracing: the tracer, and the spans of requests and webhook calls."""

    def __init__(self, provider: Any = None) -> None:
        self._owned = provider is None
        self.provider = provider if provider is not None else provider_from_environment()
        self.tracer = self.provider.get_tracer("fastctl", version())
        self.spans = SpanMaker(self.tracer)

    def close(self) -> None:
        """Flush and shut down the provider this object built (a given one is the
        caller's)."""
        if self._owned:
            self.provider.shutdown()

    def current_lookup(self) -> tuple[Any, str | None, type | None]:
        """What `fastctl._tracing.request_span` reads to find the current span where it
        is kept in the extension: OpenTelemetry's context variable, the span's key in its
        contexts, `OtlpSpan`; ``(None, None, None)`` with another runtime context (it asks
        `request` then)."""
        if _VAR is None:
            return None, None, None
        return _VAR, _SPAN_KEY, OtlpSpan

    def controller(self, name: str, kind: str) -> ControllerTracing:
        return ControllerTracing(self.tracer, name, kind, self.spans)

    def request(self, method: str, path: str) -> RequestSpan | OtlpSpan | _Untraced:
        """A client span for one API request, beneath the current span; a request made
        outside any span (a watch, a Lease renewal) gets none: it answers no reconcile."""
        span: Any = _VAR.get().get(_SPAN_KEY) if _VAR is not None else None
        if type(span) is OtlpSpan:  # a reconcile's, kept in the extension: no more checks
            return span.request(method, path)
        span = current_span()
        parent = span.get_span_context()
        if not parent.is_valid:
            return _UNTRACED
        return RequestSpan(self.spans, method, path, parent)

    def webhook(self, path: str, headers: Mapping[str, str]) -> WebhookSpan:
        return WebhookSpan(self.tracer, path, headers)

    def ids(self) -> tuple[str, str] | None:
        span: Any = current_span()
        if type(span) is OtlpSpan:
            return span.hex_ids()
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


class _Untraced:
    """A request outside any span: nothing to record."""

    __slots__ = ()

    def answered(self, code: int) -> None:
        pass

    def failed(self, error: BaseException) -> None:
        pass

    def retried(self) -> None:
        pass


_UNTRACED = _Untraced()


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def _request_name(method: str, path: str) -> str:
    """A request's span name in Kubernetes terms: ``<verb> <resource>[/<subresource>]``
    (``/apis/g/v/namespaces/ns/widgets/w/status`` patched: ``patch widgets/status``);
    the path itself says the namespace and the name."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis":
        rest = parts[3:]
    else:
        return f"{method} {path}"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return f"{method} {path}"
    named = len(rest) > 1
    if method == "GET":
        verb = "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS.get(method) or method.lower()
    return f"{verb} {rest[0]}/{rest[2]}" if len(rest) > 2 else f"{verb} {rest[0]}"


class RequestSpan:
    """``<verb> <resource>``: one API request (`fastctl.kube._http.request`), from its
    sending to its answer's headers (what the ``rest_client_*`` metrics time too). Two
    attributes, the method and the path: every attribute is checked and copied by the SDK
    (about a microsecond each), and the name and the path say the rest."""

    __slots__ = ("_resends", "_span")

    def __init__(
        self, spans: SpanMaker, method: str, path: str, parent: SpanContext | None = None
    ) -> None:
        self._span = spans.start(
            _request_name(method, path),
            None,
            SpanKind.CLIENT,
            {"http.request.method": method, "url.path": path},
            parent_span=parent,  # the current span's, looked up once
        )
        self._resends = 0

    def answered(self, code: int) -> None:
        span = self._span
        span.set_attribute("http.response.status_code", code)
        if code >= 400:
            span.set_attribute("error.type", str(code))
            span.set_status(Status(StatusCode.ERROR, str(code)))
        span.end()

    def failed(self, error: BaseException) -> None:
        span = self._span
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(Status(StatusCode.ERROR, scrub(str(error))[:300] or type(error).__name__))
        span.end()

    def retried(self) -> None:
        self._resends += 1
        self._span.set_attribute("http.request.resend_count", self._resends)


class WebhookSpan:
    """``webhook <path>``: one call the webhook server answers, a child of the API
    server's span when its request carries a ``traceparent``."""

    __slots__ = ("_span", "_token")

    def __init__(self, tracer: trace.Tracer, path: str, headers: Mapping[str, str]) -> None:
        parent = extract(headers)
        self._span = tracer.start_span(
            f"webhook {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": path},
        )
        self._token: object | None = None

    def __enter__(self) -> WebhookSpan:
        # Current while the handler runs: the requests it makes are its children.
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def answered(self, code: int) -> None:
        self._span.set_attribute("http.response.status_code", code)
        if code >= 500:
            self._span.set_status(Status(StatusCode.ERROR, str(code)))

    def retried(self) -> None:
        pass

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None:
            self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self._span.end()


EventLink = tuple[int, int, str, str, str | None, str | None, bool]
"""The link to one watch event, shared by every run the event triggered: ``(trace_id,
span_id, kind, reason, object, resource_version, deleted)``, a span context of its own
(no span is made or exported for it) and what its attributes say (`plain_link`).

A plain tuple of strings, numbers and None on purpose: a link waits with its key until
the key's run starts, and with thousands of keys queued in a burst, objects held that
long outlive young collections and are promoted, for the collector to walk again and
again; a tuple of such values is untracked by the collector at its first pass. So the
event's few fields are read when the link is made (from the extension's decoded frame
where there is one: no metadata dict is built for it), and the event itself is not kept
(docs/benchmarks.md, tracing)."""


_bits = random.getrandbits
_LOW_64 = (1 << 64) - 1


def fresh_ids(ids: IdGenerator) -> tuple[int, int]:
    """A trace id and a span id from `ids`; from the SDK's own random generator, both drawn
    in one call of the `random` module it draws them from (192 random bits: the same ids,
    as random, for a third of the calls)."""
    if type(ids) is RandomIdGenerator:
        bits = _bits(192)
        trace_id, span_id = bits >> 64, bits & _LOW_64
        if trace_id and span_id:  # else (never, in practice) as the generator redraws
            return trace_id, span_id
    return ids.generate_trace_id(), ids.generate_span_id()


def event_link(ids: IdGenerator, kind: str, reason: str, event: Any) -> EventLink:
    """The `EventLink` of `event` (an ObjectEvent, or a ListFrame, which names no object),
    a watch event of `kind` that triggers for `reason`."""
    name: Any = None
    namespace: Any = None
    version: Any = None
    item = getattr(event, "_decoded", None)  # an ObjectEvent from a watch frame
    if item is not None:
        name, namespace, version = item.name, item.namespace, item.resource_version
    else:
        meta_of = getattr(event, "_meta", None)  # an ObjectEvent; a ListFrame has none
        if meta_of is not None:
            meta = meta_of()
            name, namespace = meta.get("name", ""), meta.get("namespace")
            version = meta.get("resourceVersion")
    named = None
    if name is not None and reason != Reason.OWN_CHANGE:  # else the run's own: not repeated
        named = f"{namespace}/{name}" if namespace else str(name)
    deleted = False
    if name is not None:  # an enum member's own field: its `name` is a property, a call
        kind_name = getattr(event.kind, "_name_", None)
        deleted = (kind_name if type(kind_name) is str else event.kind.name) == "DELETE"
    trace_id, span_id = fresh_ids(ids)
    return (
        trace_id,
        span_id,
        kind,
        reason,
        named,
        str(version) if version else None,
        deleted,
    )


def plain_link(link: EventLink) -> PlainLink:
    """`link` as fastctl's OTLP export writes it: ``(trace_id, span_id, False,
    attributes)`` (`fastctl._otlp.SpanRecord`), no `SpanContext` or `Link` built. Made
    only for a run the sampler keeps."""
    trace_id, span_id, kind, reason, named, version, deleted = link
    attrs: dict[str, Any] = {"fastctl.trigger.reason": reason}
    if reason != Reason.OWN_CHANGE:  # else the run's own kind and object: not repeated
        attrs["fastctl.watch.kind"] = kind
        if named is not None:
            attrs["fastctl.watch.object"] = named
    if version is not None:
        attrs["k8s.resource_version"] = version
    if deleted:
        attrs["fastctl.watch.deleted"] = True
    return (trace_id, span_id, False, attrs)


def sdk_link(link: EventLink) -> Link:
    """`link` as the SDK's span takes it. Made only for a run the sampler keeps."""
    return as_link(plain_link(link))


@dataclass(frozen=True, slots=True)
class LinkedTrigger(Trigger):
    """A trigger that carries the link to the watch event that caused it (made only while
    tracing is on; the applier treats it as the `Trigger` it is)."""

    link: EventLink | None = None


_new = object.__new__
_put = object.__setattr__


def carry(item: ObjectRef | Trigger, link: EventLink) -> LinkedTrigger:
    """`item` (a watch's trigger) as a `LinkedTrigger` carrying `link`. Its fields were
    checked when `item` was made, so the trigger is built without its checks again (a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` and then
    checks them: a third of the cost); anything else is checked as the class checks it."""
    if type(item) is ObjectRef:
        made = _new(LinkedTrigger)
        _put(made, "ref", item)
        _put(made, "priority", 0)
        _put(made, "reason", "")
        _put(made, "link", link)
        return made
    if isinstance(item, Trigger):
        made = _new(LinkedTrigger)
        _put(made, "ref", item.ref)
        _put(made, "priority", item.priority)
        _put(made, "reason", item.reason)
        _put(made, "link", link)
        return made
    return LinkedTrigger(item, 0, "", link)


_Pending = tuple[Any, float, int, int]
"""What a key's next run is for: ``(links, since, priority, dropped)``: its links (None, one
`EventLink` or `Link` as it is, or a list of them from the second on; the first
`MAX_LINKS`, the others counted in ``dropped``), when the first of its triggers came or its
retry was due (on the applier's clock), and the highest priority among them (the scheduler
keeps the highest). A plain tuple, replaced when it changes: with one link of plain values,
the collector untracks it (`EventLink`)."""


_ROOT = ROOT
"""The parent context of a reconcile span: none, whatever is current where the applier
starts it (a run is a trace of its own; its causes are links). Given, it also spares the
SDK looking the current one up."""


class ControllerTracing:
    """The spans of one controller run: a reconcile span per run, with its links to the
    watch events and runs that caused it. Everything is called from the event loop's
    thread."""

    def __init__(
        self, tracer: trace.Tracer, name: str, kind: str, spans: SpanMaker | None = None
    ) -> None:
        self.tracer = tracer
        self.spans = spans if spans is not None else SpanMaker(tracer)
        self.name = name
        self.kind = kind
        self.clock: Callable[[], float] = monotonic
        """The applier's clock (`bind` sets it): queue waits and retry delays read it."""
        self._pending: dict[str, _Pending] = {}
        self._span_name = f"reconcile {name}"
        ids = getattr(tracer, "id_generator", None)
        self._ids: IdGenerator = ids if isinstance(ids, IdGenerator) else RandomIdGenerator()
        self._random_ids = type(self._ids) is RandomIdGenerator
        self._scheduler: Any = None
        self._reads: tuple[Any, Any] = (None, None)
        self._source: SpanSource | None = None
        self._reconciles: ReconcileSpans | None = None

    def bind(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def _bind(self, source: SpanSource, scheduler: Any) -> ReconcileSpans:
        """The extension's maker of this run's reconcile spans, made once per source and
        scheduler (what is the same for every span held there, not passed per span); the
        scheduler's two reads looked up once."""
        self._source = source
        self._scheduler = scheduler
        self._reads = (getattr(scheduler, "failures", None), getattr(scheduler, "group_of", None))
        made = source.reconciles(self._span_name, self.name, self, scheduler)
        self._reconciles = made
        return made

    # -- watch events -----------------------------------------------------------------------

    def linked(
        self, kind: str, reason: str, event: Any, triggers: Iterable[ObjectRef | Trigger]
    ) -> Iterable[ObjectRef | Trigger]:
        """`triggers` (those of one watch event), each carrying the link to the event. The
        link is made at the first trigger: an event that triggers nothing costs nothing. A
        tuple or a list of them (an object's event: its one ref) is answered with a list,
        made at once; anything else (a list's triggers, made as they are sent) lazily."""
        if type(triggers) is tuple or type(triggers) is list:
            if not triggers:
                return triggers
            link = event_link(self._ids, kind, reason, event)
            return [carry(item, link) for item in triggers]
        return self._linked(kind, reason, event, triggers)

    def _linked(
        self, kind: str, reason: str, event: Any, triggers: Iterable[ObjectRef | Trigger]
    ) -> Iterator[ObjectRef | Trigger]:
        link: EventLink | None = None
        for item in triggers:
            if link is None:
                link = event_link(self._ids, kind, reason, event)
            yield carry(item, link)

    def primary(
        self, event: Any, triggers: Iterable[ObjectRef | Trigger]
    ) -> Iterable[ObjectRef | Trigger]:
        """The triggers of a primary watch event (a `fastctl.kube` WatchEvent: read by
        its fields, since this engine-level module does not import the Kubernetes layer).

        The common one, an object's change decoded from a watch frame that triggers its
        own ref, is made here in one go (the link's ids drawn, the event's version read,
        the trigger made): every hook runs once per change, between an operator's own work
        that leaves the CPU's caches cold for it, where each function call, object and
        dictionary read costs several times what it costs in a loop (docs/benchmarks.md)."""
        if type(triggers) is tuple and len(triggers) == 1 and self._random_ids:
            ref = triggers[0]
            item = getattr(event, "_decoded", None) if type(ref) is ObjectRef else None
            if item is not None:
                bits = _bits(192)
                trace_id, span_id = bits >> 64, bits & _LOW_64
                version = item.resource_version
                kind = event.kind
                # An enum member's own field: its `name` is a property, a Python call.
                named = getattr(kind, "_name_", None)
                if type(named) is not str:
                    named = kind.name
                if trace_id and span_id:
                    made = _new(LinkedTrigger)
                    _put(made, "ref", ref)
                    _put(made, "priority", 0)
                    _put(made, "reason", "")
                    link = (
                        trace_id,
                        span_id,
                        self.kind,
                        Reason.OWN_CHANGE,
                        None,
                        str(version) if version else None,
                        named == "DELETE",
                    )
                    _put(made, "link", link)
                    return (made,)
        named = getattr(event.kind, "_name_", None)  # `name` is a property: a Python call
        if type(named) is not str:
            named = event.kind.name
        reason = Reason.RELIST if named == "INIT_DONE" else Reason.OWN_CHANGE
        return self.linked(self.kind, reason, event, triggers)

    def related(
        self, kind: str, owned: bool, event: Any, triggers: Iterable[Trigger]
    ) -> Iterable[ObjectRef | Trigger]:
        named = getattr(event.kind, "_name_", None)  # `name` is a property: a Python call
        if type(named) is not str:
            named = event.kind.name
        if named == "INIT_DONE":
            reason = Reason.RELIST
        else:
            reason = Reason.OWNED_CHILD if owned else Reason.MAPPED_OBJECT
        return self.linked(kind, reason, event, triggers)

    # -- the applier's hooks ----------------------------------------------------------------

    def queued(self, item: object) -> None:
        """A trigger reached the scheduler: its link joins the key's next run."""
        if type(item) is LinkedTrigger:  # a watch event's: the common case first
            key = item.ref.key
            if key not in self._pending:
                self._pending[key] = (item.link, self.clock(), item.priority, 0)
            else:
                self._add(key, item.link, self.clock(), item.priority)
        elif isinstance(item, Trigger):
            link = item.link if isinstance(item, LinkedTrigger) else None
            self._add(item.ref.key, link, self.clock(), item.priority)
        elif isinstance(item, ObjectRef):
            self._add(item.key, None, self.clock(), 0)

    def _add(self, key: str, link: EventLink | Link | None, since: float, priority: int) -> None:
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = (link, since, priority, 0)
            return
        links, since, highest, dropped = pending
        if link is None:
            if priority > highest:
                self._pending[key] = (links, since, priority, dropped)
            return
        if links is None:
            links = link
        elif type(links) is not list:
            links = [links, link]
        elif len(links) < MAX_LINKS:
            links.append(link)
        else:
            dropped += 1
        self._pending[key] = (links, since, max(priority, highest), dropped)

    def dropped(self, key: str) -> None:
        """`key` leaves without a run (its object is gone)."""
        self._pending.pop(key, None)

    def start(self, key: str, scheduler: Any) -> RunSpan:
        """The span of `key`'s run (just popped), starting now, with the links merged into
        it; the scheduler says its attempt (its failure count) and fair group, two cheap
        reads (its ``inspect`` builds a whole record). Its attributes and links are built
        only for a span the sampler keeps (`SpanMaker.start`)."""
        pending = self._pending.pop(key, None)
        spans = self.spans
        processor = spans._processor  # `spans.source()`, its common case read in place
        if processor is not None and processor._span_processors is spans._checked:
            source = spans._source if spans._light else None
        else:
            source = spans.source()
        if source is not None:  # the span kept in the extension, started in one call
            reconciles = self._reconciles
            if reconciles is None or source is not self._source or scheduler is not self._scheduler:
                reconciles = self._bind(source, scheduler)
            failures, group_of = self._reads
            return reconciles.start(
                key,
                failures(key) + 1 if failures is not None else 1,
                group_of(key) if group_of is not None else None,
                pending,
                self.clock() if pending is not None else 0.0,
            )
        run = SdkRunSpan(self, key, scheduler, pending, self.clock())
        run.span = self.spans.start(
            self._span_name, _ROOT, SpanKind.INTERNAL, run.attributes, run.links
        )
        run.pending = None  # what the span needed of it is in the span now
        return run


class RunSpan(Protocol):
    """What the applier holds of one reconcile's span (`ControllerTracing.start`): made
    current in its task, ended with its outcome. A `SdkRunSpan`, or on fastctl's own OTLP
    export the `OtlpSpan` kept in the extension."""

    def enter(self) -> None: ...

    def cancelled(self) -> None: ...

    def end(
        self, error: BaseException | None, action: Action | None, ended: float, /, *, again: bool
    ) -> None: ...


class SdkRunSpan:
    """One reconcile's span: current in its task while it runs (`enter`), ended with its
    outcome (`end`, `cancelled`)."""

    __slots__ = (
        "_ended",
        "_owner",
        "_priority",
        "_scheduler",
        "_started",
        "_token",
        "key",
        "pending",
        "span",
    )

    span: Span

    def __init__(
        self,
        owner: ControllerTracing,
        key: str,
        scheduler: Any,
        pending: _Pending | None,
        started: float,
    ) -> None:
        self._owner = owner
        self._priority = pending[2] if pending is not None else 0
        self.key = key
        self.pending = pending
        self._started = started
        self._scheduler = scheduler
        self._token: object | None = None
        self._ended = False

    def attributes(self) -> dict[str, Any]:
        """The span's attributes at its start (asked for only when the sampler keeps it)."""
        owner, key, pending = self._owner, self.key, self.pending
        scheduler = self._scheduler
        attrs: dict[str, Any] = {"fastctl.controller": owner.name, "fastctl.object": key}
        failures = getattr(scheduler, "failures", None)
        attrs["fastctl.reconcile.attempt"] = failures(key) + 1 if failures is not None else 1
        if pending is not None:
            attrs["fastctl.reconcile.queue_wait"] = max(0.0, self._started - pending[1])
            if pending[3]:
                attrs["fastctl.reconcile.links_dropped"] = pending[3]
        attrs["fastctl.reconcile.priority"] = self._priority
        group_of = getattr(scheduler, "group_of", None)
        group = group_of(key) if group_of is not None else None
        if group is not None:
            attrs["fastctl.reconcile.fair_group"] = group
        return attrs

    def links(self) -> list[Link | PlainLink]:
        """The links to what triggered the run (asked for only when the sampler keeps it):
        tuples for fastctl's OTLP export, the SDK's `Link` objects for any other."""
        held = self.pending[0] if self.pending is not None else None
        if held is None:
            return []
        items = held if type(held) is list else [held]
        made = plain_link if self._owner.spans.plain_links else sdk_link
        return [made(item) if type(item) is tuple else item for item in items]

    def enter(self) -> None:
        """Make the span current in the reconcile's task (and so in its thread, which runs
        in a copy of the task's context): the requests it makes are its children."""
        self._token = attach(trace.set_span_in_context(self.span))

    def _leave(self) -> None:
        if self._token is not None:
            token, self._token = self._token, None
            detach(token)

    def cancelled(self) -> None:
        """The applier cancelled the run (a shutdown past its drain, a lost lease)."""
        self._leave()
        if self._ended:
            return
        self._ended = True
        self.span.set_attribute("fastctl.reconcile.outcome", "cancelled")
        self.span.set_status(Status(StatusCode.ERROR, "cancelled"))
        self.span.end()

    def end(
        self, error: BaseException | None, action: Action | None, ended: float, *, again: bool
    ) -> None:
        """The run ended (the scheduler has been told): its outcome, and when the scheduler
        runs it `again` by itself (a requeue, an error retry), the link its next run gets to
        this one."""
        self._leave()
        if self._ended:
            return
        self._ended = True
        finish_run(
            self.span,
            self._owner,
            self._scheduler,
            self.key,
            self._priority,
            error,
            action,
            ended,
            again=again,
        )


def finish_run(
    span: Any,
    owner: ControllerTracing,
    scheduler: Any,
    key: str,
    priority: int,
    error: BaseException | None,
    action: Action | None,
    ended: float,
    *,
    again: bool,
) -> None:
    """The end of a run's `span` (`SdkRunSpan.end`, and `fastctl._otel_fast` for a span kept
    in the extension, whose common ending, done, never comes here): its outcome and, when
    the scheduler runs the key `again` by itself, the link its next run gets to this one."""
    requeue_after = action.requeue_after if action is not None else None
    if error is None:
        outcome = "done" if requeue_after is None else "requeue"
    elif isinstance(error, ReconcileTimeout):
        outcome = "timeout"
    elif isinstance(error, ReconcileCancelled):
        outcome = "cancelled"
    else:
        outcome = "error"
    if requeue_after is None and error is None:  # the common case: one attribute
        span.set_attribute("fastctl.reconcile.outcome", outcome)
        span.end()
        return
    attrs: dict[str, Any] = {"fastctl.reconcile.outcome": outcome}
    if requeue_after is not None:
        attrs["fastctl.reconcile.requeue_after"] = requeue_after
    if error is not None:
        text = error_text(error)
        attrs["error.type"] = type(error).__name__
        span.add_event(
            "exception",
            {"exception.type": type(error).__name__, "exception.message": text},
        )
        span.set_status(Status(StatusCode.ERROR, text[:1024]))
    due = due_of(scheduler, key, ended) if again else None
    if due is not None:
        reason = Reason.REQUEUE if error is None else Reason.ERROR_RETRY
        if error is not None:
            attrs["fastctl.reconcile.retry_in"] = max(0.0, due - ended)
        owner._add(
            key,
            Link(
                span.get_span_context(),
                {
                    "fastctl.trigger.reason": reason,
                    "fastctl.reconcile.outcome": outcome,
                },
            ),
            due,
            priority,
        )
    span.set_attributes(attrs)
    span.end()


def due_of(scheduler: Any, key: str, now: float) -> float | None:
    """When the scheduler runs `key` again: its ready time when it waits (a requeue, a
    backoff), `now` when it is ready (a trigger came meanwhile), None when it does not
    hold the key."""
    inspect = getattr(scheduler, "inspect", None)
    if inspect is None:
        return None
    record = inspect(key, now=now)
    if record is None:
        return None
    ready_at = record["ready_at"] if record["state"] == "waiting" else None
    return float(ready_at) if ready_at is not None else now
