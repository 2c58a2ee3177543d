"""Logging with the object being reconciled in context.

The applier sets `current_object` for the duration of each reconcile (it is a ContextVar,
so every task has its own value), and `ObjectContextFilter` copies it onto each log record
as ``record.fastctl_object``; every line logged from inside a reconcile, by fastctl or by
user code, then names its object without the user passing it around.

`RedactingFilter` removes the values of Secrets (and of fields marked with `mark_sensitive`)
from records: message, arguments and traceback (`fastctl._redact`). ``fastctl run`` puts it
on its handler; fastctl's own loggers that print objects or errors carry it, so their
records are clean under any logging configuration. Add it to your handlers to clean what
your own code logs; `redact` cleans a text (or an object) you write elsewhere.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import orjson

from fastctl._redact import active, mark_sensitive, redact, scrub
from fastctl._tracing import log_ids
from fastctl.types import ObjectRef

__all__ = [
    "JsonFormatter",
    "ObjectContextFilter",
    "RedactingFilter",
    "current_object",
    "mark_sensitive",
    "redact",
]

current_object: ContextVar[ObjectRef | None] = ContextVar("fastctl_current_object", default=None)
"""The object the current reconcile task is working on (``None`` outside reconciles)."""


class ObjectContextFilter(logging.Filter):
    """Adds ``fastctl_object`` (the key of the object being reconciled, or ``"-"``) to every
    record, so formatters can print it: ``%(fastctl_object)s``; and ``trace_id`` and
    ``span_id`` (hex; ``"-"`` while tracing is off or outside any span), so that a line
    logged in a reconcile leads to its trace (docs/tracing.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ref = current_object.get()
        record.fastctl_object = ref.key if ref is not None else "-"
        ids = log_ids()
        record.trace_id, record.span_id = ids if ids is not None else _NO_IDS
        return True


_NO_IDS = ("-", "-")


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``time``, ``level``, ``logger``, ``object``, ``message``,
    ``trace_id`` and ``span_id`` in a traced span, and ``exception`` when there is one),
    for log pipelines that parse fields. Use it with `ObjectContextFilter` so ``object``
    names the object being reconciled (and the ids are known)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "object": getattr(record, "fastctl_object", "-"),
            "message": record.getMessage(),
        }
        trace_id = getattr(record, "trace_id", "-")
        if trace_id != "-":
            entry["trace_id"] = trace_id
            entry["span_id"] = getattr(record, "span_id", "-")
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(
                record.exc_info  # type: ignore[arg-type]
            )
        return orjson.dumps(entry).decode()


class RedactingFilter(logging.Filter):
    """Replaces remembered sensitive values in a record's message and traceback with
    ``<redacted>`` (the record is changed in place, for every handler after this one)."""

    _format = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if not active():
            return True
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._format.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True
