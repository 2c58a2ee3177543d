"""The rare paths of fastctl's spans kept in Rust (`fastctl._core.OtlpSpan`).

Where fastctl's own OTLP export is the provider's one processor and its sampler is a
standard one (`fastctl._otel_spans.SpanMaker.source`), a reconcile's span and its
requests' spans are made, kept and written as protobuf in the extension: a span started
and ended in one call each, its ids drawn there, its attributes and links never Python
objects (docs/tracing.md, what it costs). What is rare there calls back into this module:
OpenTelemetry's checks of a value user code sets that is not a scalar, an event, a link
user code adds, a status, the span context (built only when something asks for it: user
code reading the current span, a span the SDK makes beneath it), and the end of a run
that did not simply succeed. Each does what the SDK's own span (or `LightSpan`) does.
"""

from __future__ import annotations

import traceback
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, Status, StatusCode

from fastctl._core import OtlpSpan
from fastctl._redact import scrub

__all__ = ["OtlpSpan"]

trace.Span.register(OtlpSpan)  # what `trace.get_current_span` accepts as a span


def context(trace_id: int, span_id: int, flags: int) -> trace.SpanContext:
    """The span's `SpanContext` (local, no trace state), made once when first asked."""
    from fastctl._otel_spans import FLAGS, new_context

    return new_context(trace_id, span_id, FLAGS[flags], None)


def checked(key: str, value: Any) -> tuple[Any] | None:
    """`value` as the SDK keeps it (a sequence becomes a tuple), or None when it is not
    a valid attribute value (the SDK's warning is logged)."""
    bounded = BoundedAttributes(attributes={key: value}, immutable=False)
    if key not in bounded:
        return None
    return (bounded[key],)


def event(name: str, attributes: Any, timestamp: int) -> Event:
    return Event(name, BoundedAttributes(attributes=attributes, immutable=True), timestamp)


def link(context: trace.SpanContext, attributes: Any) -> Link | None:
    if not context.is_valid:
        return None
    return Link(context, BoundedAttributes(attributes=attributes))


def status(given: Status | StatusCode, description: str | None) -> tuple[int, str | None]:
    """``(code, description)`` of `set_status`'s arguments (code 0: unset, ignored), as
    the SDK's `Status` keeps them (a description only with an error)."""
    made = given if isinstance(given, Status) else Status(given, description)
    return made.status_code.value, made.description


def exception_attributes(
    exception: BaseException, attributes: Any, escaped: bool
) -> dict[str, Any]:
    """The attributes of `record_exception`'s event, as the SDK's span writes them."""
    module = type(exception).__module__
    qualname = type(exception).__qualname__
    attrs: dict[str, Any] = {
        "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
        "exception.message": str(exception),
        "exception.stacktrace": "".join(traceback.format_exception(exception)),
        "exception.escaped": str(escaped),
    }
    if attributes:
        attrs.update(attributes)
    return attrs


def exit_status(exception: BaseException) -> tuple[int, str]:
    """The status of a span left by `exception` (``with span:``)."""
    return StatusCode.ERROR.value, f"{type(exception).__name__}: {exception}"


def failure_text(error: BaseException) -> str:
    """A request span's status message when no answer came."""
    return scrub(str(error))[:300] or type(error).__name__


def plain(link: Any) -> Any:
    """A link as `fastctl._otel_spans.as_link` takes it: an `EventLink` tuple as its
    `PlainLink`, anything else as it is."""
    if type(link) is tuple and len(link) == 7:
        from fastctl._otel import plain_link

        return plain_link(link)
    return link


def end_run(
    span: OtlpSpan,
    owner: Any,
    scheduler: Any,
    key: str,
    priority: int,
    error: BaseException | None,
    action: Any,
    ended: float,
    again: bool,
) -> None:
    """A run that failed or asked for a requeue: `fastctl._otel.finish_run`."""
    from fastctl._otel import finish_run

    finish_run(span, owner, scheduler, key, priority, error, action, ended, again=again)
