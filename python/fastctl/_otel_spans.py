"""Spans made without the SDK's ``Tracer.start_span``, for the spans fastctl makes per change.

An SDK span costs about 11 µs of CPU before any attribute, about 0.9 µs per attribute and
4 µs per link (docs/benchmarks.md, tracing): the tracer's checks, a lock, the span's
`BoundedAttributes` (each value type-checked and copied), the links' attributes copied
again, and a `ReadableSpan` built at its end. A reconcile span and a request span carry a
handful of attributes fastctl made itself, of known types, and links it made; nothing
reads them until the span ends. `SpanMaker` so asks the tracer's sampler itself, keeps
what a span records in a `LightSpan` (a few slots and a dict) and builds the SDK's public
`ReadableSpan` once, at its end, for the tracer's span processor: what an exporter gets is
what the SDK would have given it.

Only where nothing can tell the difference:

- the tracer is the SDK's (`opentelemetry.sdk.trace.Tracer`), its span processors are the
  SDK's `BatchSpanProcessor` or `SimpleSpanProcessor` (whose ``on_start`` does nothing: a
  `LightSpan` is never started in a processor), checked again whenever a processor is
  added;
- no attribute length limit is configured (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``,
  ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``: values would have to be cut); the count
  limits (attributes, events, links) are kept.

Where the one processor is fastctl's own OTLP export (`fastctl._otlp.OtlpExport`, what
``fastctl run --tracing`` builds), not even the `ReadableSpan` is built: the span's end
hands a tuple (`fastctl._otlp.SpanRecord`) to the export, which writes it as protobuf at
once.

Anything else (another processor, a tracer that is not the SDK's, internals that moved)
makes spans through ``Tracer.start_span`` as before. What is skipped: the SDK's own
metrics about its spans (``otel.sdk.span.*``, recorded only with a meter provider given
to the tracer provider) and its experimental tracer configurator.

A span the sampler drops is a `NonRecordingSpan` carrying the sampled-out context, as the
SDK makes: and for the standard samplers (always on or off, trace id ratio, parent based
on them), which read neither a span's attributes nor its links, the decision comes first
(`SpanMaker.blind`), so the caller builds neither for a span that is not kept.
"""

from __future__ import annotations

import logging
import random as _random
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    SynchronousMultiSpanProcessor,
    Tracer,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util import types

import fastctl._otel_fast as _otel_fast
from fastctl._core import SpanBuffer, SpanSource
from fastctl._otlp import OtlpExport

__all__ = [
    "FLAGS",
    "ROOT",
    "LightSpan",
    "PlainLink",
    "SpanMaker",
    "as_link",
    "attach",
    "current_span",
    "detach",
]

_SPAN_KEY: str = trace._SPAN_KEY  # type: ignore[attr-defined]
_RUNTIME = getattr(otel_context, "_RUNTIME_CONTEXT", None)
_VAR: ContextVar[otel_context.Context] | None = getattr(_RUNTIME, "_current_context", None)
if type(_RUNTIME) is not ContextVarsRuntimeContext or not isinstance(_VAR, ContextVar):
    _VAR = None
"""OpenTelemetry's current context, a context variable: set and reset directly, a span is
made current at the cost of one `Context` (OpenTelemetry's ``attach`` and ``detach`` wrap
the same calls in a few more, and its ``set_span_in_context`` copies the context twice).
None where another runtime context is configured (``OTEL_PYTHON_CONTEXT``): theirs is used."""


def attach(context: otel_context.Context) -> object:
    """`context` made current; the token to `detach` it."""
    if _VAR is None:
        return otel_context.attach(context)
    return _VAR.set(context)


def detach(token: Any) -> None:
    """The context before `attach` made current again (in the context it was attached in;
    elsewhere, as OpenTelemetry's ``detach`` does, nothing but a log line)."""
    if _VAR is None:
        otel_context.detach(token)
        return
    try:
        _VAR.reset(token)
    except ValueError:
        log.debug("a span's context was left in another context than its own")


def current_span() -> trace.Span:
    """The current span (`trace.get_current_span`, with fewer calls)."""
    if _VAR is None:
        return trace.get_current_span()
    span = _VAR.get().get(_SPAN_KEY)
    return span if isinstance(span, trace.Span) else trace.INVALID_SPAN


ROOT = otel_context.Context()
"""A parent context with no span in it: the span started in it is a root (a reconcile's,
whatever is current where the applier starts it); `SpanMaker.start` skips the lookup."""

_PLAIN_PROCESSORS = (BatchSpanProcessor, SimpleSpanProcessor)
"""Span processors whose ``on_start`` and ``_on_ending`` do nothing: a span they see only at
its end may be built then."""

_BLIND_SAMPLERS = (StaticSampler, TraceIdRatioBased, ParentBased)
"""The standard samplers (``OTEL_TRACES_SAMPLER``): none reads a span's attributes or links
(`ParentBased` delegates to the others; its root is checked too)."""

_SCALARS = (str, bool, int, float)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)

_FLAGS = {bits: TraceFlags(bits) for bits in (0, _SAMPLED, _RANDOM, _SAMPLED | _RANDOM)}
"""The trace flags a span of fastctl's can have, made once."""
FLAGS = _FLAGS

log = logging.getLogger("fastctl.tracing")

_UNSET = Status(StatusCode.UNSET)

_NO_EVENTS = ()
"""A span's events while it has none (most spans): no list per span."""

_KINDS = {kind: kind.value + 1 for kind in SpanKind}
_SPAN_KINDS = {number: kind for kind, number in _KINDS.items()}
"""A span kind as OTLP numbers it (`fastctl._otlp.SpanRecord`)."""

PlainLink = tuple[int, int, bool, dict[str, Any]]
"""A link as fastctl's OTLP export writes it, ``(trace_id, span_id, is_remote,
attributes)``: for the links fastctl makes itself, where the span goes to that export only
(`SpanMaker.plain_links`), no `SpanContext` and `Link` object per link."""


def as_link(link: Link | PlainLink) -> Link:
    """`link` as the SDK's `Link` (a `PlainLink`'s context is not sampled)."""
    if type(link) is not tuple:
        return link  # type: ignore[return-value]
    trace_id, span_id, remote, attributes = link
    return Link(SpanContext(trace_id, span_id, remote, _NOT_SAMPLED), attributes)


def _blind(sampler: Sampler) -> bool:
    """Whether `sampler` is one of the standard ones, whose decision `_decide` makes."""
    if isinstance(sampler, ParentBased):
        parts = (
            getattr(sampler, "_root", None),
            getattr(sampler, "_remote_parent_sampled", None),
            getattr(sampler, "_remote_parent_not_sampled", None),
            getattr(sampler, "_local_parent_sampled", None),
            getattr(sampler, "_local_parent_not_sampled", None),
        )
        return all(p is not None and type(p) in _BLIND_SAMPLERS[:2] for p in parts)
    if type(sampler) is TraceIdRatioBased:
        return isinstance(getattr(sampler, "bound", None), int)
    return type(sampler) is StaticSampler and isinstance(
        getattr(sampler, "_decision", None), Decision
    )


def _decide(sampler: Any, parent: SpanContext | None, trace_id: int) -> Decision:
    """What a standard sampler (`_blind`) decides, as its ``should_sample`` would (they read
    only the parent's flags and the trace id), without building its `SamplingResult`."""
    if type(sampler) is StaticSampler:
        return sampler._decision  # type: ignore[no-any-return,unused-ignore]
    if type(sampler) is TraceIdRatioBased:
        if trace_id & sampler.TRACE_ID_LIMIT < sampler.bound:
            return Decision.RECORD_AND_SAMPLE
        return Decision.DROP
    # ParentBased: the root's sampler without a parent, else by the parent's kind and flags
    if parent is None:
        return _decide(sampler._root, None, trace_id)
    if parent.is_remote:
        if parent.trace_flags.sampled:
            return _decide(sampler._remote_parent_sampled, parent, trace_id)
        return _decide(sampler._remote_parent_not_sampled, parent, trace_id)
    if parent.trace_flags.sampled:
        return _decide(sampler._local_parent_sampled, parent, trace_id)
    return _decide(sampler._local_parent_not_sampled, parent, trace_id)


def _fixed(sampler: Any) -> tuple[Decision | None, ...]:
    """A standard sampler's (`_blind`) decisions that do not depend on the trace id, by
    where the parent is: none, remote sampled, remote not, local sampled, local not (None
    where a ratio decides): the common case (``parentbased_always_on``, the default) needs
    no call per span."""
    if type(sampler) is StaticSampler:
        return (sampler._decision,) * 5  # type: ignore[no-any-return,unused-ignore]
    if not isinstance(sampler, ParentBased):
        return (None,) * 5
    parts = (
        sampler._root,
        sampler._remote_parent_sampled,
        sampler._remote_parent_not_sampled,
        sampler._local_parent_sampled,
        sampler._local_parent_not_sampled,
    )
    return tuple(p._decision if type(p) is StaticSampler else None for p in parts)


def _rust_decisions(sampler: Any) -> list[tuple[int, int]]:
    """A standard sampler's (`_blind`) decisions for `fastctl._core.SpanSource`: for no
    parent, a local parent sampled, a local parent not sampled, ``(0, decision)`` or
    ``(1, bound)`` where a trace id ratio decides (``trace_id & (2**64 - 1) < bound``)."""
    if isinstance(sampler, ParentBased):
        parts = [sampler._root, sampler._local_parent_sampled, sampler._local_parent_not_sampled]
    else:
        parts = [sampler] * 3
    made = []
    for part in parts:
        if type(part) is StaticSampler:
            made.append((0, int(part._decision.value)))  # type: ignore[attr-defined,unused-ignore]
        else:
            assert type(part) is TraceIdRatioBased
            assert part.TRACE_ID_LIMIT == 2**64 - 1  # the bound's scale
            made.append((1, int(part.bound)))
    return made


_NO_STATE = SpanContext(1, 1, False).trace_state


def _checked_context(trace_id: int, span_id: int, flags: TraceFlags, state: Any) -> SpanContext:
    return SpanContext(trace_id, span_id, False, flags, state)


def _direct_context(trace_id: int, span_id: int, flags: TraceFlags, state: Any) -> SpanContext:
    """A local span's `SpanContext`, built as its ``__new__`` builds it (a tuple of its six
    fields) without the checks of values fastctl made itself: a third of its cost."""
    valid = 0 < trace_id <= _TRACE_ID_MAX and 0 < span_id <= _SPAN_ID_MAX
    state = state if state is not None else _NO_STATE
    return tuple.__new__(SpanContext, (trace_id, span_id, False, flags, state, valid))


_TRACE_ID_MAX = 2**128 - 1
_SPAN_ID_MAX = 2**64 - 1


def _same_layout() -> bool:
    """Whether a `SpanContext` is still the tuple `_direct_context` builds (else the SDK's
    own constructor is used)."""
    try:
        for args in ((5, 7, _FLAGS[1], None), (0, 7, _FLAGS[0], None)):
            mine, theirs = _direct_context(*args), _checked_context(*args)
            if (
                mine != theirs
                or mine.is_valid != theirs.is_valid
                or mine.trace_flags is not theirs.trace_flags
                or mine.trace_state != theirs.trace_state
                or mine.is_remote
            ):
                return False
    except Exception:
        return False
    return True


new_context = _direct_context if _same_layout() else _checked_context
"""A local span's context: ``(trace_id, span_id, flags, trace_state)``."""


class SpanMaker:
    """Makes the spans of one tracer: `LightSpan` where that cannot be told apart (see the
    module docstring), else the SDK's own."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self._checked: tuple[Any, ...] | None = None
        self._light = False
        self._processor: SynchronousMultiSpanProcessor | None = None
        self._export: OtlpExport | None = None
        self._sink: SpanBuffer | None = None
        self._source: SpanSource | None = None
        self._fixed: tuple[Decision | None, ...] = (None,) * 5
        self.sampler: Sampler | None = None
        self.blind = False
        """Whether the sampler decides without a span's attributes and links (the caller
        may then build them only for a span it keeps)."""
        self.plain_links = False
        """Whether the links a caller gives may be `PlainLink` tuples: the sampler reads no
        link (`blind`) and spans go to fastctl's OTLP export only, which writes them as
        they are."""
        if not isinstance(tracer, Tracer):
            return
        try:
            limits: SpanLimits = tracer._span_limits
            processor = tracer.span_processor
            self._resource = tracer.resource
            self._scope = tracer._instrumentation_scope
            self._info = tracer.instrumentation_info
            self._ids = tracer.id_generator
            self.sampler = tracer.sampler
            processor._span_processors  # noqa: B018 - there, or the SDK's own spans
        except AttributeError:
            return
        if limits.max_attribute_length is not None or limits.max_span_attribute_length:
            return  # values would have to be cut: the SDK does it
        if not isinstance(processor, SynchronousMultiSpanProcessor):
            return
        self._processor = processor
        self._max_attributes = limits.max_span_attributes
        self._max_events = limits.max_events
        self._max_links = limits.max_links
        self._random = _RANDOM if self._ids.is_trace_id_random() else 0
        self.blind = _blind(self.sampler)
        if self.blind:
            self._fixed = _fixed(self.sampler)

    def light(self) -> bool:
        """Whether spans are made light now (the processors may have changed since)."""
        processor = self._processor
        if processor is None:
            return False
        current = processor._span_processors
        if current is not self._checked:
            self._checked = current
            self._light = all(type(p) in _PLAIN_PROCESSORS for p in current)
            self._export = None
            if len(current) == 1 and type(current[0]) is OtlpExport:
                self._light = True
                self._export = current[0]
                self._sink = current[0].sink(self._resource, self._scope)
            self.plain_links = self._export is not None and self.blind
            if self._source is not None:  # its spans still open end as the SDK's
                self._source.retire(self._retired_end)
            self._source = self._make_source()
        return self._light

    def _make_source(self) -> SpanSource | None:
        """The maker of spans kept in the extension (`fastctl._otel_fast`), where the one
        processor is fastctl's OTLP export, the sampler a standard one and the context
        OpenTelemetry's context variable; else None. The SDK's random ids are drawn in the
        extension; another id generator is asked for each."""
        export = self._export
        if export is None or self._sink is None or not self.blind or _VAR is None:
            return None
        return SpanSource(
            self._sink,
            _otel_fast,
            export.wake,
            export.batch,
            _rust_decisions(self.sampler),
            self._random,
            (self._max_attributes, self._max_events, self._max_links),
            (_VAR, otel_context.Context, _SPAN_KEY),
            _random.getrandbits(64),
            None if type(self._ids) is RandomIdGenerator else self._ids,
        )

    def _retired_end(self, record: tuple[Any, ...]) -> None:
        """A span kept in the extension ended after the processors changed: the SDK's
        `ReadableSpan` of its `record` goes to them, as a `LightSpan`'s would."""
        name, trace_id, span_id, flags, parent_id, kind, start, end = record[:8]
        attributes, events, links, code, message = record[8:]
        trace_flags = _FLAGS[flags]
        context = new_context(trace_id, span_id, trace_flags, None)
        parent = None if parent_id is None else new_context(trace_id, parent_id, trace_flags, None)
        if self._processor is None:
            return
        self._processor.on_end(
            ReadableSpan(
                name=name,
                context=context,
                parent=parent,
                resource=self._resource,
                attributes=attributes,
                events=events,
                links=[as_link(_otel_fast.plain(link)) for link in links],
                kind=_SPAN_KINDS[kind],
                instrumentation_info=self._info,
                status=Status(StatusCode(code), message) if code else _UNSET,
                start_time=start,
                end_time=end,
                instrumentation_scope=self._scope,
            )
        )

    def source(self) -> SpanSource | None:
        """Where reconcile spans are made in the extension (`_make_source`), or None."""
        return self._source if self.light() else None

    def start(
        self,
        name: str,
        parent: otel_context.Context | None,
        kind: SpanKind,
        attributes: Callable[[], dict[str, Any]] | dict[str, Any],
        links: Callable[[], Sequence[Link | PlainLink]] | Sequence[Link | PlainLink] = (),
        parent_span: SpanContext | None = None,
    ) -> trace.Span:
        """A span started now, beneath the span current in `parent` (``None``: the current
        context; `parent_span`, when given, is that span's context, already looked up).
        `attributes` and `links` may be given as functions: called only for a span the
        sampler keeps, when it decides without them (`blind`)."""
        if not self.light():
            attrs = attributes() if callable(attributes) else attributes
            given = links() if callable(links) else links
            return self.tracer.start_span(name, parent, kind, attrs, given)  # type: ignore[no-any-return]
        if parent is ROOT:
            parent_context = None
        elif parent_span is not None:
            parent_context = parent_span
        else:
            parent_context = trace.get_current_span(parent).get_span_context()
        if parent_context is not None and parent_context.is_valid:
            trace_id = parent_context.trace_id
            random = parent_context.trace_flags & _RANDOM
            trace_state = parent_context.trace_state
        else:
            parent_context = trace_state = None
            trace_id = self._ids.generate_trace_id()
            random = self._random
        if self.blind:
            fixed = self._fixed
            if parent_context is None:
                decision = fixed[0]
            elif parent_context.is_remote:
                decision = fixed[1 if parent_context.trace_flags & _SAMPLED else 2]
            else:
                decision = fixed[3 if parent_context.trace_flags & _SAMPLED else 4]
            if decision is None:
                decision = _decide(self.sampler, parent_context, trace_id)
            if decision is Decision.DROP:
                flags = _FLAGS[_NOT_SAMPLED | random]
                context = new_context(trace_id, self._ids.generate_span_id(), flags, trace_state)
                return NonRecordingSpan(context)
            attrs = attributes() if callable(attributes) else attributes
            given = links() if callable(links) else links
        else:
            assert self.sampler is not None
            attrs = attributes() if callable(attributes) else attributes
            asked = [as_link(link) for link in (links() if callable(links) else links)]
            result = self.sampler.should_sample(parent, trace_id, name, kind, attrs, asked)
            given = asked
            decision, trace_state = result.decision, result.trace_state
            if result.attributes:
                attrs = {**attrs, **result.attributes}
        flags = _FLAGS[
            (_SAMPLED if decision is Decision.RECORD_AND_SAMPLE else _NOT_SAMPLED) | random
        ]
        context = new_context(trace_id, self._ids.generate_span_id(), flags, trace_state)
        if decision is Decision.DROP:
            return NonRecordingSpan(context)
        if self._max_links is not None and len(given) > self._max_links:
            given = list(given)[: self._max_links]
        return LightSpan(self, name, context, parent_context, kind, attrs, given)

    def ended(self, span: LightSpan, end_time: int) -> None:
        export, sink = self._export, self._sink
        if export is not None and sink is not None:
            context, parent, status = span._context, span._parent, span._status
            if not context.trace_flags & _SAMPLED:
                return  # recorded, not sampled: not exported (as the SDK's processors do)
            state = context.trace_state
            export.add(
                sink,
                (
                    span._name,
                    context.trace_id,
                    context.span_id,
                    state.to_header() if state else None,
                    parent.span_id if parent is not None else None,
                    parent is not None and parent.is_remote,
                    _KINDS[span._kind],
                    span._start,
                    end_time,
                    span._attributes,
                    span._events,
                    span._links,
                    0 if status is _UNSET else status.status_code.value,
                    None if status is _UNSET else status.description,
                    0,
                    0,
                    0,
                ),
            )
            return
        if not self._checked:
            return  # no processor (``OTEL_TRACES_EXPORTER=none``): no one to hand it to
        assert self._processor is not None
        self._processor.on_end(
            ReadableSpan(
                name=span._name,
                context=span._context,
                parent=span._parent,
                resource=self._resource,
                attributes=span._attributes,
                events=span._events,
                links=[as_link(link) for link in span._links],
                kind=span._kind,
                instrumentation_info=self._info,
                status=span._status,
                start_time=span._start,
                end_time=end_time,
                instrumentation_scope=self._scope,
            )
        )


class LightSpan(trace.Span):
    """A recording span whose attributes fastctl made are kept as given (their types are
    known); the span API (a reconcile may add to the current span) checks what others add,
    as the SDK does. Built into the SDK's `ReadableSpan` at its end (`SpanMaker.ended`)."""

    __slots__ = (
        "_attributes",
        "_context",
        "_end",
        "_events",
        "_kind",
        "_links",
        "_maker",
        "_name",
        "_parent",
        "_start",
        "_status",
    )

    def __init__(
        self,
        maker: SpanMaker,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: Sequence[Link | PlainLink],
    ) -> None:
        self._maker = maker
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._events: list[Event] | tuple[()] = _NO_EVENTS  # a list from the first one
        self._status = _UNSET
        self._start = time.time_ns()
        self._end: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._end is not None:
            return
        attrs = self._attributes
        if type(key) is not str or not key:
            return  # the SDK logs and ignores it
        if type(value) not in _SCALARS:
            checked = BoundedAttributes(attributes={key: value}, immutable=False)
            if key not in checked:
                return  # not a valid attribute value (the SDK's warning was logged)
            value = checked[key]
        if key not in attrs:
            limit = self._maker._max_attributes
            if limit is not None and len(attrs) >= limit:
                return
        attrs[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if self._end is not None:
            return
        limit = self._maker._max_events
        events = self._events
        if limit is not None and len(events) >= limit:
            return
        if type(events) is not list:
            self._events = events = []
        checked = BoundedAttributes(attributes=attributes, immutable=True)
        events.append(Event(name, checked, timestamp or time.time_ns()))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._end is not None or context is None or not context.is_valid:
            return
        limit = self._maker._max_links
        if limit is not None and len(self._links) >= limit:
            return
        self._links = [*self._links, Link(context, BoundedAttributes(attributes=attributes))]

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end is not None or self._status.status_code is StatusCode.OK:
            return  # as the SDK: an OK status is final
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}"
            if module and module != "builtins"
            else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end = end_time if end_time is not None else time.time_ns()
        self._maker.ended(self, end)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None and self._end is None:
            self.record_exception(exc, escaped=True)
            self.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.end()
