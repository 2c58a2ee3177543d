"""The runtime's one clock (`fastctl._clock`): what it reads, that no module of the package
reads a clock of its own beside it (but for the wall-clock uses it names), and that the
runtime, the Rust scheduler under the applier included, follows a virtual-time loop with
nothing patched."""

from __future__ import annotations

import ast
import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import fastctl
from fastctl import Action, ObjectRef, ReconcileResult, applier
from fastctl._clock import loop_clock, monotonic
from fastctl._reasons import ReasonLog
from fastctl.testing import VirtualTimeLoop, run_virtual, virtual_time

PACKAGE = Path(fastctl.__file__).resolve().parent

# -- what it reads ------------------------------------------------------------------------


def test_without_a_running_loop_it_is_time_monotonic() -> None:
    before = time.monotonic()
    now = monotonic()
    assert before <= now <= time.monotonic()


def test_on_asyncio_s_own_loop_it_is_the_loop_s_time() -> None:
    async def read() -> None:
        loop = asyncio.get_running_loop()
        before = loop.time()
        now = monotonic()
        assert before <= now <= loop.time()
        assert before <= loop_clock(loop)() <= loop.time()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        runner.run(read())


def test_on_uvloop_it_is_the_loop_s_clock_to_the_microsecond() -> None:
    """uvloop's ``time()`` is ``time.monotonic()``'s clock cut to whole milliseconds; the
    runtime reads that clock uncut, so a reconcile of 0.4 ms does not last 0 or 1 ms."""
    uvloop = pytest.importorskip("uvloop")

    async def read() -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        assert loop_clock(loop) is time.monotonic
        return loop.time(), monotonic(), time.monotonic(), loop.time()

    for _ in range(20):
        before, now, system, after = uvloop.run(read())
        assert before <= now <= system
        assert abs(after - system) < 0.002  # one clock, cut to the millisecond
        if now != round(now, 3):
            return
    raise AssertionError("monotonic() on uvloop never read a fraction of a millisecond")


@virtual_time(start=500.0)
async def test_on_a_virtual_loop_it_is_the_virtual_time() -> None:
    loop = VirtualTimeLoop.current()
    assert monotonic() == 500.0
    await asyncio.sleep(7.5)
    assert monotonic() == loop_clock(loop)() == 507.5


@virtual_time(start=500.0)
async def test_a_thread_reads_the_loop_it_works_for_by_passing_it() -> None:
    """A thread has no running loop: without the loop it reads the system clock, with it
    the loop's (as the shard gate does for plain-function reconciles)."""
    loop = VirtualTimeLoop.current()
    await asyncio.sleep(1.0)
    for_the_loop, own = await asyncio.to_thread(lambda: (monotonic(loop), monotonic()))
    assert for_the_loop == 501.0
    assert own != 501.0  # the system's monotonic clock, far from this virtual instant


# -- nothing else reads a clock -----------------------------------------------------------

_CLOCK_FUNCTIONS = frozenset(
    {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
)
_WALL_FUNCTIONS = frozenset({"gmtime", "localtime", "strftime", "ctime"})
_DATETIME_NOW = frozenset({"now", "utcnow", "today"})

ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    # (module path under python/fastctl, reading): (how many, why it is not the clock)
    ("kube/_events.py", "time.time"): (2, "an Event's times and series window: wall clock"),
    ("kube/_events.py", "time.time_ns"): (1, "an Event's name suffix, as client-go's"),
    ("runtime/_failure_events.py", "time.time"): (1, "a failure series: the Recorder's window"),
    ("runtime/leader/_rules.py", "datetime.now"): (1, "a Lease's renewTime: others read it"),
    ("kube/_conditions.py", "datetime.now"): (1, "lastTransitionTime: others read it"),
    ("_pki.py", "datetime.datetime.now"): (4, "certificate validity and its renewal"),
    ("runtime/_inspect.py", "time.time"): (1, "inspect's UTC instants, from the clock"),
    ("demo/_record.py", "time.monotonic"): (1, "compared across processes on a host"),
    ("demo/_record.py", "time.time"): (1, "compared across processes"),
    ("testing/model.py", "time.monotonic"): (1, "the Rust scheduler's default, modelled"),
    ("cli/demo.py", "time.monotonic"): (6, "a real cluster's progress, for a person"),
    ("cli/control_plane.py", "time.monotonic"): (4, "waits for real processes"),
    ("testing/control_plane.py", "time.monotonic"): (6, "waits for real processes"),
    ("testing/control_plane.py", "time.strftime"): (1, "a log file's timestamp"),
    ("testing/binaries.py", "time.monotonic"): (4, "timing a real build for its log"),
    ("testing/binaries.py", "time.strftime"): (1, "a log line's timestamp"),
    ("testing/_process.py", "time.monotonic"): (2, "waits for a real process to exit"),
    ("kube/_http.py", "time.perf_counter"): (4, "a real request's latency, for /metrics"),
    ("kube/_transport.py", "time.perf_counter"): (1, "a real request's latency, for /metrics"),
    ("kube/_transport.py", "loop.time"): (3, "a real socket's deadlines: timers of its loop"),
    ("kube/_transport.py", "self.loop.time"): (2, "a real connection's idle time: its loop's"),
    ("kube/_watch_stream.py", "loop.time"): (1, "a real stream's read timeout: its loop's"),
    ("kube/_watch_stream.py", "self._loop.time"): (1, "a real stream's read timer: its loop's"),
    ("_otel_spans.py", "time.time_ns"): (3, "a span's times: OpenTelemetry's wall clock"),
    ("testing/fake/_state.py", "datetime.now"): (1, "creationTimestamp: wall clock, a server's"),
}
"""Every direct clock reading in the package outside `fastctl._clock`, each justified (the
module docstring of `fastctl._clock` says which stay on the wall clock, and why)."""


def _readings(tree: ast.AST) -> Counter[str]:
    """Each direct reading of a clock: ``time.<clock>`` (called or passed as a function),
    ``from time import <clock>``, ``<anything>.time`` other than the time module's own
    functions (``loop.time()``), and ``datetime.now()`` in any spelling."""
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            for alias in node.names:
                if alias.name in _CLOCK_FUNCTIONS | _WALL_FUNCTIONS:
                    found[f"from time import {alias.name}"] += 1
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value)
        if owner == "time":
            if node.attr in _CLOCK_FUNCTIONS | _WALL_FUNCTIONS:
                found[f"time.{node.attr}"] += 1
        elif node.attr == "time":
            found[f"{owner}.time"] += 1
        elif node.attr in _DATETIME_NOW and owner.split(".")[-1] in ("datetime", "date"):
            found[f"{owner}.{node.attr}"] += 1
    return found


def _package_readings() -> dict[tuple[str, str], int]:
    readings: dict[tuple[str, str], int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        if where == "_clock.py":
            continue
        for reading, count in _readings(ast.parse(path.read_text())).items():
            readings[(where, reading)] = count
    return readings


def test_no_module_reads_a_clock_of_its_own_beside_the_runtime_s() -> None:
    """A module that reads ``time.monotonic()`` or ``loop.time()`` itself would not follow
    a virtual-time loop (or would follow it and not the system clock in a thread): it must
    read `fastctl._clock`. The allowlist must match exactly, so it cannot go stale."""
    readings = _package_readings()
    unexplained = {key: n for key, n in readings.items() if key not in ALLOWED}
    assert unexplained == {}, "read the clock through fastctl._clock (or justify it here)"
    counts = {key: count for key, (count, _) in ALLOWED.items()}
    assert readings == counts


@pytest.mark.parametrize(
    ("source", "reading"),
    [
        ("started = time.monotonic()", "time.monotonic"),
        ("def f(clock=time.perf_counter): ...", "time.perf_counter"),
        ("from time import monotonic", "from time import monotonic"),
        ("now = asyncio.get_running_loop().time()", "asyncio.get_running_loop().time"),
        ("now = self._loop.time()", "self._loop.time"),
        ("now = datetime.datetime.now(datetime.UTC)", "datetime.datetime.now"),
        ("now = datetime.now(UTC)", "datetime.now"),
    ],
)
def test_the_check_sees_each_way_of_reading_a_clock(source: str, reading: str) -> None:
    assert _readings(ast.parse(source)) == Counter({reading: 1})


def test_the_check_ignores_what_reads_no_clock() -> None:
    source = "time.sleep(1)\nx = obj.timeout\ny = self.now()\nz = monotonic()\n"
    assert _readings(ast.parse(source)) == Counter()


# -- the runtime follows a virtual-time loop ----------------------------------------------


def test_the_applier_and_its_scheduler_run_on_the_virtual_clock() -> None:
    """A reconcile that takes 7 virtual seconds reports 7 s exactly, and its requeue after
    30 s starts exactly 30 s after it ended: the applier measures on the loop's clock and
    gives the Rust scheduler that time (on its own clock, the system's, the requeue would
    be due at an instant unrelated to the loop's)."""
    ref = ObjectRef("a", "default")
    starts: list[float] = []

    async def reconcile(obj: Any, ctx: Any) -> Action | None:
        starts.append(monotonic())
        await asyncio.sleep(7.0)
        return Action.requeue(30.0) if len(starts) == 1 else None

    async def triggers() -> AsyncIterator[ObjectRef]:
        yield ref
        await asyncio.sleep(3600.0)

    async def main() -> list[ReconcileResult]:
        results = []
        store = {ref: {"metadata": {"name": "a", "namespace": "default"}}}
        async for result in applier(reconcile, None, None, store, triggers()):
            results.append(result)
            if len(results) == 2:
                break
        return results

    results = run_virtual(main(), start=1.0)
    assert starts == [1.0, 38.0]  # 1 + 7 s of reconcile + 30 s of requeue
    assert [r.duration for r in results] == [7.0, 7.0]


@virtual_time
async def test_the_reason_log_times_its_entries_on_the_virtual_clock() -> None:
    log = ReasonLog()
    log.queued("ns/a", "first")
    await asyncio.sleep(50.0)
    log.queued("ns/a", "first")
    entry = log.get("ns/a")
    assert entry is not None
    [reason] = entry.pending.values()
    assert (reason.first, reason.last, reason.count) == (0.0, 50.0, 2)


def test_looking_into_a_controller_keeps_its_scheduler_on_the_virtual_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`inspect`, `queue_summary` and the metrics' `scheduler_stats` ask the Rust scheduler
    at the loop's time: asked at the system's time (its default), the scheduler's clock,
    which never goes back, would jump to the machine's uptime and no requeue would come due
    on the virtual clock again."""
    from kubernetes_asyncio.client import ApiClient

    from fastctl import Controller, Resource
    from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
    from fastctl.runtime.controller import _environment

    obj = {"metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "1"}}
    starts: list[float] = []
    first, third = asyncio.Event(), asyncio.Event()

    async def reconcile(o: Any, ctx: Any) -> Action | None:
        starts.append(monotonic())
        if len(starts) == 1:
            first.set()
        if len(starts) == 3:
            third.set()
        return Action.requeue(30.0) if len(starts) < 3 else None

    async def events() -> AsyncIterator[WatchEvent]:
        yield ListFrame(EventKind.INIT)
        yield ObjectEvent(EventKind.INIT_APPLY, obj)
        yield ListFrame(EventKind.INIT_DONE)
        await asyncio.sleep(3600.0)

    async def main() -> None:
        monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: events())
        cm = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
        ctl = Controller(ApiClient.__new__(ApiClient), cm, reconcile)
        run = asyncio.create_task(ctl.run(handle_signals=False))
        await first.wait()
        await asyncio.sleep(1.0)  # the first reconcile has ended: its requeue is queued
        ctl.inspect("default", "a")
        ctl.queue_summary()
        ctl.scheduler_stats()
        await asyncio.wait_for(third.wait(), 3600.0)
        ctl.shutdown()
        await run

    run_virtual(main(), start=1.0)
    assert starts == [1.0, 31.0, 61.0]


def test_a_query_without_now_on_a_virtual_loop_keeps_virtual_time() -> None:
    """`stats()`, `inspect()` and `queue_summary()` move the scheduler's clock to the time
    they are asked at; asked without `now` on a virtual-time loop, that must be the loop's
    time, or a key waiting ten virtual seconds becomes due at once."""

    async def scenario() -> list[str | None]:
        loop = asyncio.get_running_loop()
        scheduler = fastctl.Scheduler()
        scheduler.add("waits", after=10.0, now=loop.time())
        scheduler.stats()
        scheduler.inspect("waits")
        scheduler.queue_summary()
        early = scheduler.pop(now=loop.time())
        await asyncio.sleep(10.0)
        return [early, scheduler.pop(now=loop.time())]

    loop = VirtualTimeLoop()
    try:
        assert loop.run_until_complete(scenario()) == [None, "waits"]
    finally:
        loop.close()
