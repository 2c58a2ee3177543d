"""Logging with the object being reconciled in context.

The applier sets `current_object` for the duration of each reconcile (it is a ContextVar,
so every task has its own value), and `ObjectContextFilter` copies it onto each log record
as ``record.fastctl_object``; every line logged from inside a reconcile, by fastctl or by
user code, then names its object without the user passing it around.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import orjson

from fastctl.types import ObjectRef

__all__ = ["JsonFormatter", "ObjectContextFilter", "current_object"]

current_object: ContextVar[ObjectRef | None] = ContextVar("fastctl_current_object", default=None)
"""The object the current reconcile task is working on (``None`` outside reconciles)."""


class ObjectContextFilter(logging.Filter):
    """Adds ``fastctl_object`` (the key of the object being reconciled, or ``"-"``) to every
    record, so formatters can print it: ``%(fastctl_object)s``."""

    def filter(self, record: logging.LogRecord) -> bool:
        ref = current_object.get()
        record.fastctl_object = ref.key if ref is not None else "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``time``, ``level``, ``logger``, ``object``, ``message``,
    and ``exception`` when there is one), for log pipelines that parse fields. Use it with
    `ObjectContextFilter` so ``object`` names the object being reconciled."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "object": getattr(record, "fastctl_object", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()
