"""The one clock the runtime reads: seconds that only go forward, for deadlines, tenures,
backoffs, ages and durations.

It is the running event loop's clock, ``loop.time()``: asyncio arms every timer and every
``asyncio.timeout`` on it, so what the runtime measures and what it waits for are one
clock. On asyncio's own loops that is ``time.monotonic()``, which is also what this module
reads where no loop runs, and what the Rust `Scheduler` reads when it is given no ``now``.
On uvloop, whose ``time()`` is that same clock cut to whole milliseconds, it reads
``time.monotonic()`` too: the same instants, to the microsecond.
A loop whose ``time()`` is virtual (`fastctl.testing.VirtualTimeLoop`) therefore moves the
time of the whole runtime with nothing patched; and since the applier passes this clock's
time to its scheduler (``now=``), the scheduler's ready times are on it too.

Runtime code reads the time here, never with ``time.monotonic()`` or ``loop.time()`` itself
(tests/unit/test_clock.py holds the package to it). A thread working for a loop (a plain
reconcile function) has no running loop: it passes that loop, ``monotonic(loop)``.

What stays on the wall clock, because others read it or it is compared with instants from
elsewhere:

- an Event's times, its series window and the suffix of its name (`fastctl.kube._events`,
  as client-go does), and the window of a failed reconcile's Event series, which follows
  the Recorder's (`fastctl.runtime._failure_events`);
- a Lease's ``acquireTime`` and ``renewTime`` (`fastctl.runtime.leader._rules`), which other
  replicas and kubectl read; the elector never compares them with its own clock, it times
  the lease on this one;
- a certificate's validity and its renewal check (`fastctl._pki`);
- a tracing span's start, end and event times (`fastctl._otel_spans`, and the spans kept in
  the extension, `fastctl._otel_fast`, which read it in Rust), nanoseconds of the wall
  clock as OpenTelemetry defines them (the SDK's own spans read the same);
- a status condition's ``lastTransitionTime`` (`fastctl.kube._conditions`), which kubectl
  and alerting read; `set_condition` takes ``now=`` for tests;
- the UTC instants `Controller.inspect` gives beside its ages (`fastctl.runtime._inspect`,
  converted from this clock once per answer);
- the demo operator's reconcile record (`fastctl.demo._record`, whose ``CLOCK_MONOTONIC``
  readings are compared across processes).

And some code times real processes, where virtual time has no meaning: the command line
(`fastctl.cli`) and starting a control plane (`fastctl.testing`'s `control_plane`,
`binaries` and `_process`). The pure-Python scheduler model (`fastctl.testing.model`)
defaults to ``time.monotonic()``, as the Rust scheduler it models does.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

__all__ = ["loop_clock", "monotonic"]

_system = time.monotonic
_running_loop = asyncio._get_running_loop


def monotonic(loop: asyncio.AbstractEventLoop | None = None) -> float:
    """Seconds on the runtime's clock: `loop`'s time, else the running loop's, else (no loop
    runs in this thread) ``time.monotonic()``."""
    if loop is None:
        loop = _running_loop()
        if loop is None:
            return _system()
    if _reads_the_system_clock(type(loop)):
        return _system()
    return loop.time()


def loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """`loop`'s clock as a function, for a hot path that reads it often on that loop (the
    applier): the readings of `monotonic`, at a fraction of its cost (``time.monotonic``
    itself for asyncio's own loops, whose ``time()`` only calls it)."""
    if _reads_the_system_clock(type(loop)):
        return _system
    return loop.time


def _reads_the_system_clock(loop_type: type) -> bool:
    """Whether loops of `loop_type` keep time on ``time.monotonic()``'s clock: asyncio's own
    (their ``time()`` only calls it), and uvloop's, whose ``time()`` reads the same
    monotonic clock through libuv but cut to whole milliseconds (a reconcile of 0.4 ms
    would last 0 or 1 ms there). A subclass that overrides ``time()`` (a virtual clock)
    keeps its own. Remembered per type: `monotonic` asks on every call."""
    known = _SYSTEM_CLOCK.get(loop_type)
    if known is None:
        time_of = getattr(loop_type, "time", None)
        uvloop = sys.modules.get("uvloop")
        known = time_of is asyncio.BaseEventLoop.time or (
            uvloop is not None and time_of is uvloop.Loop.time
        )
        _SYSTEM_CLOCK[loop_type] = known
    return known


_SYSTEM_CLOCK: dict[type, bool] = {}
"""`_reads_the_system_clock`'s answers, by loop type."""
