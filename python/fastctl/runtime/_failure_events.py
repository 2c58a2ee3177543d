"""A Warning Event on each object whose reconcile fails, one series per object and reason.

A failing reconcile is logged, but the one who reads the logs is rarely the one whose object
failed: ``kubectl describe`` is what a user of the operator sees, and kopf posts an Event per
failure for that reason. A controller does so by default (`ApplierConfig.failure_events`):
reason ``InvalidObject`` when the model rejects the cached object (the note names the
fields), ``ReconcileFailed`` for any other error (the note is the exception's type and
message, scrubbed of Secret values as every Event is).

Rate-limited, because a failing object is retried with a backoff that starts at 5 ms:

- one Event series per object and reason: a failure of an object that failed for the same
  reason within the series window (six minutes, the Recorder's) bumps that Event's count,
  even if its message changed (an Event's note cannot change, so the note stays the first
  failure's; the logs and ``fastctl inspect`` have the latest). After a success, or a quiet
  window, the next failure starts a new series with its own note;
- at most one request per object and reason in flight: a failure that comes while the last
  one's Event is still being written is not counted (the count is of failures seen, not a
  census);
- the memory of series is bounded (`MAX_SERIES` objects, the least recently failed
  forgotten first).

Publishing is best effort: an Event that cannot be written (no RBAC for ``events.k8s.io``,
the API server away) is logged at WARNING and the reconciles go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from fastctl._reasons import error_text
from fastctl.errors import InvalidObject
from fastctl.kube._events import Recorder
from fastctl.log import RedactingFilter
from fastctl.types import ReconcileResult

__all__ = ["MAX_SERIES", "FailureEvents"]

log = logging.getLogger("fastctl.controller")
log.addFilter(RedactingFilter())

MAX_SERIES = 4096
"""Objects whose failure series are remembered (the Recorder's own cache size)."""

_WINDOW = 6 * 60.0
"""A series goes on while failures come within this many seconds of each other (the
Recorder's window, client-go's)."""


@dataclass(slots=True)
class _Series:
    note: str
    last: float
    busy: bool = False


class FailureEvents:
    """Publishes the Warning Events of one controller run's failed reconciles."""

    def __init__(self, recorder: Recorder, controller: str) -> None:
        self.recorder = recorder
        self.controller = controller
        self._series: OrderedDict[str, dict[str, _Series]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def tasks(self) -> set[asyncio.Task[None]]:
        """The publishes under way (the run lets them finish when it drains)."""
        return self._tasks

    def saw(self, result: ReconcileResult) -> None:
        """Note one reconcile's result: a failure starts a publish (unless one for the same
        object and reason is under way); a success ends the object's series."""
        if result.error is None:
            if self._series:  # usually none: nothing failed lately
                self._series.pop(_uid(result), None)
            return
        uid = _uid(result)
        reason = "InvalidObject" if isinstance(result.error, InvalidObject) else "ReconcileFailed"
        note = (
            str(result.error)
            if reason == "InvalidObject"
            else f"reconcile failed: {error_text(result.error)}"
        )
        now = time.time()
        reasons = self._series.get(uid)
        if reasons is None:
            reasons = self._series[uid] = {}
        self._series.move_to_end(uid)
        while len(self._series) > MAX_SERIES:
            self._series.popitem(last=False)
        series = reasons.get(reason)
        if series is not None and series.busy:
            return
        if series is None or now - series.last >= _WINDOW:
            series = reasons[reason] = _Series(note, now)
        series.last = now
        series.busy = True
        task = asyncio.get_running_loop().create_task(self._publish(result, reason, series))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, result: ReconcileResult, reason: str, series: _Series) -> None:
        try:
            await self.recorder.publish(
                result.obj, type="Warning", reason=reason, note=series.note, action="Reconcile"
            )
        except Exception as exc:
            log.warning("controller %s: no Event for %s: %r", self.controller, result.ref, exc)
        finally:
            series.busy = False


def _uid(result: ReconcileResult) -> str:
    """The object's uid (a recreated object is another series), else its key."""
    obj = result.obj
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return str(uid) if uid else result.ref.key
