"""An asyncio event loop on a virtual clock, for tests of timing rules.

When every task is waiting, the loop jumps its clock to the next timer instead of sleeping,
so a test of seconds of leases, deadlines and latencies runs in milliseconds, exactly the
same way every time, and bounds on its clock need no slack for a loaded machine. Code under
test that reads ``time.monotonic()`` itself must be pointed at `VirtualTimeLoop.time`.

`on_step` callbacks run at every turn of the loop, after the callbacks of that turn and
before the clock moves: state that changes only inside callbacks is seen in every version
it takes.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Every task waits for something that no timer or I/O can bring."""


class _JumpingSelector(selectors.DefaultSelector):
    """Polls the real file descriptors without blocking, then jumps the clock."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        for step in self._loop.on_step:
            step()
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise Deadlock("every task is waiting and no timer is due")
        self._loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector loop whose `time()` is a virtual clock starting at 0."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_step: list[Callable[[], None]] = []
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_virtual(
    main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, T]],
) -> T:
    """Run ``main(loop)`` to completion on a fresh `VirtualTimeLoop`."""
    loop = VirtualTimeLoop()
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main(loop))


def virtual_monotonic() -> float:
    """A drop-in for ``time.monotonic`` inside a `VirtualTimeLoop`."""
    return asyncio.get_running_loop().time()
