"""The tracing switch, and the hooks the runtime calls, without OpenTelemetry.

Tracing (docs/tracing.md) is off by default and must then cost nothing: this module is what
the hot paths import, and it imports no OpenTelemetry package. It holds the process's one
switch (`enable`, `disable`; a Manager's ``tracing=`` and ``fastctl run --tracing`` call
them) and, while tracing is off, hooks that do no span work at all:

- a controller run asks `active()` once when it starts: None, and its applier and watches
  get no tracing object (one ``is not None`` test per trigger and per reconcile);
- every API request goes through `request_span` (`fastctl.kube._http.request`) and every
  webhook call through `webhook_span`: off, each returns the same do-nothing context
  manager.

Only `enable` imports `fastctl._otel` (and with it the OpenTelemetry SDK), so a process
without the ``otel`` extra never imports it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastctl._otel import Tracing

__all__ = [
    "EXTRA_HINT",
    "NO_SPAN",
    "active",
    "available",
    "checked",
    "disable",
    "enable",
    "is_enabled",
    "log_ids",
    "request_span",
    "sdk_disabled",
    "switch_on",
    "webhook_span",
]

log = logging.getLogger("fastctl.tracing")

EXTRA_HINT = "tracing needs the otel extra: pip install 'fastctl[otel]'"

_active: Tracing | None = None

# While tracing is on, what `request_span` reads to find the current span kept in the
# extension itself (`fastctl._otel.Tracing.current_lookup`): OpenTelemetry's context
# variable's `get` (bound once), the span's key in its context, the extension's span type.
# None: ask `_active`.
_span_get: Any = None
_span_key: Any = None
_span_type: Any = None


class _NoSpan:
    """What the hooks give while tracing is off: a span that records nothing (a context
    manager too, for `webhook_span`)."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def answered(self, code: int) -> None:
        """The HTTP status of the answer (a request span ends here)."""

    def failed(self, error: BaseException) -> None:
        """No answer came: `error` (a request span ends here)."""

    def retried(self) -> None:
        """The request is sent again (counted as ``http.request.resend_count``)."""


NO_SPAN = _NoSpan()


def active() -> Tracing | None:
    """The process's tracing while it is on, else None."""
    return _active


def is_enabled() -> bool:
    """Whether tracing is on in this process."""
    return _active is not None


def available() -> bool:
    """Whether the OpenTelemetry SDK is installed (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:  # no opentelemetry package at all
        return False


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the standard variable that turns every SDK off."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def enable(provider: Any = None) -> bool:
    """Turn tracing on for this process: spans go to `provider` (an OpenTelemetry
    ``TracerProvider``), or, with None, to one built from the standard ``OTEL_*``
    variables that exports by OTLP (`fastctl._otel.provider_from_environment`). Returns
    False, and leaves tracing off, when ``OTEL_SDK_DISABLED=true``. Raises `ImportError`
    when the ``otel`` extra is not installed."""
    global _active
    if sdk_disabled():
        log.info("tracing stays off: OTEL_SDK_DISABLED=true")
        return False
    if not available():
        raise ImportError(EXTRA_HINT)
    from fastctl._otel import Tracing

    global _span_get, _span_key, _span_type
    previous = _active
    _active = tracing = Tracing(provider)
    var, _span_key, _span_type = tracing.current_lookup()
    _span_get = var.get if var is not None else None
    if previous is not None:
        previous.close()
    return True


def checked(setting: Any) -> Any:
    """`setting` (a Manager's ``tracing=``: True, a provider, or False/None), refused at
    once when it asks for tracing and the ``otel`` extra is missing."""
    if setting is not False and setting is not None and not available():
        raise ImportError(EXTRA_HINT)
    return setting


def switch_on(setting: Any) -> bool:
    """Turn tracing on as a Manager's `setting` says; whether this call did."""
    if setting is False or setting is None:
        return False
    return enable(None if setting is True else setting)


def disable() -> None:
    """Turn tracing off; a provider `enable` built is flushed and shut down (the spans it
    still buffers are exported first)."""
    global _active
    tracing, _active = _active, None
    if tracing is not None:
        tracing.close()


def request_span(method: str, path: str) -> Any:
    """The span of one API request, started now: it ends with ``answered(code)`` or
    ``failed(error)``; ``retried()`` counts a resend. Off: `NO_SPAN`, which does nothing.
    Beneath a reconcile's span kept in the extension (the common case on fastctl's own
    OTLP export), made by that span here, without another Python call in between."""
    tracing = _active
    if tracing is None:
        return NO_SPAN
    get = _span_get
    if get is not None:
        span = get().get(_span_key)
        if type(span) is _span_type:
            return span.request(method, path)
    return tracing.request(method, path)


def webhook_span(path: str, headers: Mapping[str, str]) -> Any:
    """A context manager around one webhook call the server answers (`headers` may carry
    the API server's trace context); ``answered(code)`` reports the status. Off:
    `NO_SPAN`."""
    tracing = _active
    if tracing is None:
        return NO_SPAN
    return tracing.webhook(path, headers)


def log_ids() -> tuple[str, str] | None:
    """The current trace and span ids (hex) for a log record, or None: tracing is off or no
    span is current."""
    tracing = _active
    if tracing is None:
        return None
    return tracing.ids()
