"""Plain-function reconciles in threads, and what happens when their caller gives up.

A thread cannot be stopped. When the applier is cancelled while a plain-function reconcile
runs, the asyncio future it awaited is cancelled but the thread goes on, and may still
write. Two things must then hold until the thread really returns:

- its key stays in flight in the scheduler, or a second applier on the same scheduler would
  start a second reconcile of the same object beside it;
- nobody treats the process as quiet: a Manager must not release its Lease while such a
  thread may still write (a successor would start at once), and ``fastctl run`` exits the
  process rather than wait for it.

`ThreadCall` runs one function in an executor, in a copy of the caller's context (so
``fastctl.log.current_object`` names the object in the thread too), and tells, when its
caller is cancelled, whether the thread is still alive and when it ends. `live_threads()`
counts the calls whose function is running right now, in the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

__all__ = ["ThreadCall", "live_threads"]

_lock = threading.Lock()
_live = 0


def live_threads() -> int:
    """How many plain-function reconciles are running in a thread right now (process-wide),
    including the ones whose applier was cancelled and no longer waits for them."""
    return _live


class ThreadCall:
    """One call of `fn(*args)` in `executor`, in a copy of the current context.

    States: queued (not started), running, ended. `abandon` is called by the awaiting task
    when it is cancelled: a call that has not started never will (it is skipped), a running
    one is left to end and `on_end` is called on the loop once it has."""

    __slots__ = ("_abandoned", "_ended", "_fn", "_loop", "_on_end", "_started")

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any]) -> None:
        self._loop = loop
        self._fn = fn
        self._started = False
        self._ended = False
        self._abandoned = False
        self._on_end: Callable[[], None] | None = None

    def start(self, executor: Executor | None, *args: Any) -> asyncio.Future[Any]:
        """Submit the call; the future is its result (cancelling it does not stop the
        thread: call `abandon`)."""
        context = contextvars.copy_context()
        return self._loop.run_in_executor(executor, self._body, context, args)

    def _body(self, context: contextvars.Context, args: tuple[Any, ...]) -> Any:
        global _live
        with _lock:
            if self._abandoned:
                return None  # cancelled before it started: never run it
            self._started = True
            _live += 1
        try:
            return context.run(self._fn, *args)
        finally:
            with _lock:
                self._ended = True
                _live -= 1
                on_end = self._on_end
            if on_end is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                    self._loop.call_soon_threadsafe(on_end)

    def abandon(self, on_end: Callable[[], None]) -> bool:
        """The caller stops waiting. Returns True if the function is still running: then
        `on_end` runs on the loop once it returns. Returns False if it never started or has
        already ended (then `on_end` is not called: the caller is free at once)."""
        with _lock:
            self._abandoned = True
            if not self._started or self._ended:
                return False
            self._on_end = on_end
            return True
