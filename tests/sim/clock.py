"""A virtual clock for the simulation: an event loop that never sleeps.

`VirtualLoop` is a selector event loop whose `time()` is a number the loop itself moves:
when no callback is ready it jumps straight to the next timer instead of waiting for it.
Ten minutes of leases, backoffs and reconciles therefore run in milliseconds, and every run
of the same schedule takes the same steps in the same order.

fastctl reads `time.monotonic()` directly in a few places (the applier's timer, the
watcher's empty-stream guard, the leader elector's tenure); `virtual_time` points those
modules' ``time`` at a shim that reads the loop's clock, so both clocks are one.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import time as real_time
import types
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_MODULES_READING_MONOTONIC = (
    "fastctl._applier",
    "fastctl.kube._watcher",
    "fastctl.runtime.leader._elector",
)


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is armed: the simulated system can never move again."""


class Spin(RuntimeError):
    """The loop went round `SPIN_LIMIT` times without the virtual clock moving: something
    re-arms itself at once, forever (a busy loop, which on a real clock burns a core)."""


SPIN_LIMIT = 50_000
"""Loop iterations at one virtual instant that count as a busy loop (a schedule needs a few
hundred at most)."""


class _JumpingSelector(selectors.DefaultSelector):
    """Polls the real file descriptors (only the loop's self-pipe is ever registered)
    without blocking, and instead of waiting moves the virtual clock by the timeout."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock
        self._same_instant = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            self._same_instant += 1
            if self._same_instant > SPIN_LIMIT:
                raise Spin(
                    f"spin: {SPIN_LIMIT} loop iterations at virtual time {self._clock.now:.3f}"
                )
            return ready
        if timeout is None:
            raise Deadlock(f"nothing can happen any more (virtual time {self._clock.now:.3f})")
        self._clock.now += timeout
        self._same_instant = 0
        return []


class VirtualClock:
    """The simulation's one clock, in seconds (starts at 1000 so no time is negative)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on `VirtualClock`: same scheduling as asyncio, no real waiting."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_JumpingSelector(clock))
        self.clock = clock

    def time(self) -> float:
        return self.clock.now


@contextlib.contextmanager
def virtual_time(clock: VirtualClock) -> Iterator[None]:
    """Make fastctl's direct `time.monotonic()` reads return `clock`'s time."""
    import importlib

    shim = types.SimpleNamespace(**{n: getattr(real_time, n) for n in dir(real_time)})
    shim.monotonic = clock.monotonic
    saved: list[tuple[Any, Any]] = []
    for name in _MODULES_READING_MONOTONIC:
        module = importlib.import_module(name)
        saved.append((module, getattr(module, "time")))  # noqa: B009 - not every module has it
        setattr(module, "time", shim)  # noqa: B010
    try:
        yield
    finally:
        for module, original in saved:
            setattr(module, "time", original)  # noqa: B010


def run_virtual(main: Callable[[VirtualClock], Coroutine[Any, Any, T]]) -> T:
    """Run ``main(clock)`` to completion on a fresh virtual loop and clock."""
    clock = VirtualClock()
    loop = VirtualLoop(clock)
    try:
        with virtual_time(clock):
            return loop.run_until_complete(main(clock))
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
