"""Virtual time for tests: an asyncio event loop whose clock jumps instead of waiting.

When every task waits, `VirtualTimeLoop` moves its clock straight to the next timer. A test
of minutes of requeues, backoffs, leases and timeouts runs in milliseconds, takes the same
steps every time, and can assert exact times (``loop.time() == 30.0``), with no slack for a
loaded machine.

The whole runtime follows it with nothing patched: fastctl reads its time from the running
loop's clock (``fastctl._clock``), and the applier passes that time to its scheduler.

What the loop adds to asyncio's own, beside the clock:

- `Deadlock`: every task waits and no timer is armed, so nothing can ever happen again
  (asyncio would wait forever); the error names the tasks and where each one waits;
- `Spin`: the loop went round `spin_limit` times without the clock moving: something
  re-arms itself at once, forever (a busy loop, which on a real clock burns a core);
- `on_step`: callbacks run at every turn of the loop, after that turn's callbacks and before
  the clock moves, so an invariant checked there sees every state the program passes
  through (they observe: work they schedule runs before the clock moves);
- threads: a call in an executor (a plain-function reconcile, ``asyncio.to_thread``) is
  real work in a real thread, and takes no virtual time. Before it moves the clock to a
  timer while such a call runs, the loop waits up to `thread_grace` real seconds for it to
  end (once per call: one that is still running then, hung or slow, is left to run on while
  the clock moves); with no timer at all it waits as long as the call takes. Calls that end
  within the grace so leave a test deterministic.

Sockets are polled but never waited for: talk to fakes in memory, not to servers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar, TypeVarTuple, overload

__all__ = [
    "SPIN_LIMIT",
    "THREAD_GRACE",
    "Deadlock",
    "Spin",
    "VirtualTimeLoop",
    "run_virtual",
    "virtual_time",
]

T = TypeVar("T")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")

SPIN_LIMIT = 1_000_000
"""Turns of the loop at one virtual instant that count as a busy loop, by default: a second
or more of CPU with the clock standing still, far more than any burst of real work needs."""

THREAD_GRACE = 1.0
"""Real seconds the loop waits, by default, for a running thread before it moves the clock
to a due timer."""


class Deadlock(RuntimeError):
    """Every task waits for something that no timer, thread or I/O can bring."""


class Spin(RuntimeError):
    """The loop went round `spin_limit` times without its clock moving: a busy loop."""


class _Call:
    """One function running in an executor thread, for the loop to know when it ends."""

    __slots__ = ("future", "overdue", "running")

    def __init__(self) -> None:
        self.running = True
        self.future: asyncio.Future[Any] | None = None  # set once submitted
        self.overdue = False
        """Waited for a whole grace already: the clock no longer waits for it."""

    def pending(self) -> bool:
        # Until the function returned and its result reached the loop: both, because the
        # result is posted to the loop a moment after the function returns (and a cancelled
        # future is done at once, while its thread runs on).
        return self.running or self.future is None or not self.future.done()


class _JumpingSelector(selectors.DefaultSelector):
    """Polls the real file descriptors without blocking and, instead of waiting for a timer,
    moves the virtual clock to it."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        for step in tuple(loop.on_step):
            step()
        if loop._ready:  # type: ignore[attr-defined]  # work a step scheduled runs first
            timeout = 0
        ready = super().select(0)
        if ready or timeout == 0:
            loop._turn()
            return ready
        # A thread's result is posted to the loop, which wakes these selects.
        calls = loop._running_calls()
        if timeout is None:
            if not calls and not loop._joining:
                raise Deadlock(loop._deadlock_message())
            ready = super().select(None)  # only a thread can bring anything now
            loop._turn()
            return ready
        fresh = [call for call in calls if not call.overdue]
        if (fresh or loop._joining) and loop.thread_grace > 0:
            ready = super().select(loop.thread_grace)
            if ready:
                loop._turn()
                return ready
            for call in fresh:
                call.overdue = True
        loop._move(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` is a virtual clock that starts at `start`.

    `spin_limit`: turns at one instant that raise `Spin` (None: never). `thread_grace`:
    real seconds to wait for a running executor thread before moving to a due timer."""

    def __init__(
        self,
        start: float = 0.0,
        *,
        spin_limit: int | None = SPIN_LIMIT,
        thread_grace: float = THREAD_GRACE,
    ) -> None:
        self._now = float(start)
        self._same_instant = 0
        self._calls: list[_Call] = []
        self._joining = 0
        self.spin_limit = spin_limit
        self.thread_grace = thread_grace
        self.on_step: list[Callable[[], None]] = []
        """Called at every turn of the loop, before the clock moves (see the module)."""
        super().__init__(_JumpingSelector(self))
        if spin_limit is not None and spin_limit < 1:
            self.close()
            raise ValueError(f"spin_limit must be at least 1 or None, got {spin_limit}")
        if not thread_grace >= 0:
            self.close()
            raise ValueError(f"thread_grace must be >= 0 seconds, got {thread_grace}")

    @classmethod
    def current(cls) -> VirtualTimeLoop:
        """The running loop, which must be a `VirtualTimeLoop` (`RuntimeError` if not)."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualTimeLoop):
            raise RuntimeError(f"the running loop is a {type(loop).__name__}, not virtual")
        return loop

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` ahead at once, as if the loop had been blocked that long
        (a slow callback, a stalled process): no callback runs in between, and timers that
        fell due run at the next turn."""
        if not seconds >= 0:
            raise ValueError(f"the clock only goes forward, got {seconds}")
        self._move(seconds)

    def _move(self, seconds: float) -> None:
        self._now += seconds
        self._same_instant = 0

    def _turn(self) -> None:
        """One more turn of the loop at this instant."""
        self._same_instant += 1
        if self.spin_limit is not None and self._same_instant > self.spin_limit:
            self._same_instant = 0  # the cleanup that follows gets turns of its own
            raise Spin(
                f"the loop went round {self.spin_limit} times at virtual time "
                f"{self._now:.3f} without the clock moving: a busy loop"
            )

    # -- threads ---------------------------------------------------------------------------

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        call = _Call()

        def run() -> T:
            try:
                return func(*args)
            finally:
                call.running = False

        future = super().run_in_executor(executor, run)
        call.future = future
        self._calls.append(call)
        return future

    async def shutdown_default_executor(self, *args: Any) -> None:
        self._joining += 1  # the join runs in a thread of its own, not in an executor
        try:
            await super().shutdown_default_executor(*args)
        finally:
            self._joining -= 1

    def _running_calls(self) -> list[_Call]:
        self._calls = [call for call in self._calls if call.pending()]
        return self._calls

    # -- reporting ------------------------------------------------------------------------

    def _deadlock_message(self) -> str:
        waiting = sorted(f"{task.get_name()} ({_where(task)})" for task in asyncio.all_tasks(self))
        shown = "; ".join(waiting[:10]) + ("; ..." if len(waiting) > 10 else "")
        return (
            f"deadlock at virtual time {self._now:.3f}: every task waits and no timer is "
            f"armed; waiting: {shown or 'no task'}"
        )


_ASYNCIO = os.path.dirname(asyncio.__file__)


def _where(task: asyncio.Task[Any]) -> str:
    """Where `task` waits: the innermost frame of its await chain outside asyncio itself
    (the code that awaits an Event, not the Event's own ``wait``)."""
    awaited: Any = task.get_coro()
    frame = None
    while awaited is not None:
        inner = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if inner is not None and not inner.f_code.co_filename.startswith(_ASYNCIO):
            frame = inner
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    if frame is None:
        return "in asyncio"
    code = frame.f_code
    return f"{code.co_name} at {os.path.basename(code.co_filename)}:{frame.f_lineno}"


def run_virtual(
    main: Coroutine[Any, Any, T],
    /,
    *,
    start: float = 0.0,
    spin_limit: int | None = SPIN_LIMIT,
    thread_grace: float = THREAD_GRACE,
) -> T:
    """Run the coroutine `main` to completion on a new `VirtualTimeLoop`, as ``asyncio.run``
    does on a real one (tasks left over are cancelled, the loop is closed), and return its
    result. Inside, ``VirtualTimeLoop.current()`` is the loop."""
    loop = VirtualTimeLoop(start, spin_limit=spin_limit, thread_grace=thread_grace)
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main)


@overload
def virtual_time(test: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, T]: ...
@overload
def virtual_time(
    *,
    start: float = ...,
    spin_limit: int | None = ...,
    thread_grace: float = ...,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, T]]: ...
def virtual_time(
    test: Callable[P, Coroutine[Any, Any, T]] | None = None,
    /,
    *,
    start: float = 0.0,
    spin_limit: int | None = SPIN_LIMIT,
    thread_grace: float = THREAD_GRACE,
) -> Callable[P, T] | Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, T]]:
    """Run an ``async def`` test on its own `VirtualTimeLoop`: ``@virtual_time`` or
    ``@virtual_time(start=..., ...)`` (the options of `run_virtual`).

    The decorated test is a plain function (pytest-asyncio leaves it alone, and no plugin is
    needed); pytest's fixtures still reach it by name. Async fixtures would run on another
    loop: build async things inside the test."""

    def decorate(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            return run_virtual(
                fn(*args, **kwargs), start=start, spin_limit=spin_limit, thread_grace=thread_grace
            )

        return run

    return decorate if test is None else decorate(test)
