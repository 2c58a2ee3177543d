"""The simulated world: the real fastctl runtime on the in-memory API server and a
`fastctl.testing.VirtualTimeLoop`, driven by a `Schedule`, writing a `Record`.

What is fake, and why it is faithful:

- time: the loop's virtual clock, which the runtime reads as its own (`fastctl._clock`)
  and the applier passes to its scheduler: nothing is patched for it;
- `SimScheduler` wraps the real Rust `Scheduler` and writes every add, pop and done to the
  record (the applier accepts any scheduler).
- `SimExecutor` stands in for the thread pool of plain-function reconciles: each call runs
  in a real thread (whatever fastctl wraps around the reconcile runs unchanged), in
  lockstep with the loop, and sleeps on the virtual clock; like a real thread it cannot be
  cancelled once running, so it goes on, and writes, after the applier has let it go.
- Reconciles follow a per-object script of outcomes (return, requeue, raise, raise a
  `BaseException`, cancel their own task, raise their own `TimeoutError`, hang past the
  timeout); after the script they return at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

import fastctl.kube._watcher as watcher_module
import fastctl.runtime.leader._lease_api as lease_api_module
import fastctl.runtime.manager._manager as manager_module
from fastctl import Action, ApplierConfig, Controller, LeaderElection, Manager, Resource
from fastctl._core import Scheduler
from fastctl.errors import LeadershipLost, ReconcileTimeout
from fastctl.runtime.leader import LeaderElector
from fastctl.testing import VirtualTimeLoop, run_virtual
from fastctl.types import ReconcileResult

from .apiserver import NAMESPACE, ApiServer, ServerConfig
from .record import Record, Run
from .tls import rest_module, ssl_once

WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
CHILD = Resource("example.com/v1", "Child", plural="children", namespaced=True)

TIMEOUT = 5.0
"""A simulated controller's reconcile timeout, unless the schedule sets another."""
HANG = 1000.0
"""How long a hanging async reconcile would take (its timeout cuts it)."""
MAX_DURATION = 12.0
"""The longest scripted reconcile (the strategies draw durations up to it)."""
THREAD_HANG = 8.0
"""How long a hanging plain-function reconcile takes: past the timeout, and then it returns
(a thread cannot be stopped)."""
SETTLE = 150.0
"""Virtual seconds after the last operation for everything to settle: longer than the
watcher's longest backoff (36 s), a relist, and the longest scheduler backoff (2 s)."""
QUIET_AFTER = 60.0
"""From this long after the last operation on, nothing may react to stale state."""
START = 1000.0
"""The virtual clock's first reading (so that no time, minus a lease or a backoff, is
negative)."""
SPIN_LIMIT = 50_000
"""Loop turns at one virtual instant that count as a busy loop (`fastctl.testing.Spin`): a
schedule needs a few hundred at most."""
LEASE = LeaderElection(
    "sim",
    namespace=NAMESPACE,
    identity="me",
    lease_duration=15.0,
    renew_deadline=10.0,
    retry_period=2.0,
)


class SimSpin(RuntimeError):
    """The applier called ``pop_many`` far more often than events could explain."""


class SimBaseException(BaseException):
    """A `BaseException` that is neither `Exception` nor `CancelledError`."""


class SimError(Exception):
    """A reconcile's ordinary failure."""


@dataclass(frozen=True)
class Outcome:
    """How one reconcile ends: `kind`, after `duration` virtual seconds."""

    kind: str  # ok requeue error base cancel timeouterror hang
    duration: float = 0.1


@dataclass(frozen=True)
class Op:
    """One step of a schedule, `delay` virtual seconds after the previous one."""

    delay: float
    kind: str  # put delete put_child delete_child outage relist burst sigterm partition
    index: int = 0
    arg: float = 0.0
    flag: bool = False


@dataclass(frozen=True)
class Schedule:
    """Everything one simulated run does; Hypothesis generates these."""

    objects: int = 2
    ops: tuple[Op, ...] = ()
    scripts: tuple[tuple[Outcome, ...], ...] = ()
    threads: bool = False
    concurrency: int = 2
    scheduler_concurrency: int | None = None  # None: the controller's own
    server: ServerConfig = field(default_factory=ServerConfig)
    manager: bool = False
    controllers: int = 1
    drain_timeout: float = 10.0
    timeout: float = TIMEOUT
    seed: int = 0


def name_of(index: int) -> str:
    return f"w{index}"


def key_of(index: int) -> str:
    return f"{NAMESPACE}/w{index}"


class SimScheduler:
    """The real Rust scheduler, with every call recorded; the applier gives each call the
    virtual time (``now``)."""

    def __init__(self, ctl: str, record: Record, concurrency: int) -> None:
        self._inner = Scheduler(concurrency=concurrency, backoff_base=0.05, backoff_max=2.0, seed=1)
        self._ctl = ctl
        self._record = record
        self._events = 0

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def add(
        self,
        key: str,
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        self._events += 1
        self._record.sched_call(self._ctl, "add", key)
        self._inner.add(key, after=after, priority=priority, group=group, now=now)

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        calls = self._record.pop_many_calls[self._ctl] = self._record.pop_many_calls[self._ctl] + 1
        if calls > 100 + 10 * self._events:
            self._record.spins.append(
                f"{self._ctl}: {calls} pop_many calls for {self._events} adds and dones "
                f"(virtual time {self._now():.3f})"
            )
            raise SimSpin(self._record.spins[-1])
        keys = self._inner.pop_many(max, now=now)
        for key in keys:
            self._record.sched_call(self._ctl, "pop", key)
        return keys

    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = None,
        failed: bool = False,
        now: float | None = None,
    ) -> None:
        self._events += 1
        retry = failed or requeue_after is not None
        self._record.sched_call(self._ctl, "done", key, retry=retry)
        self._inner.done(key, requeue_after=requeue_after, failed=failed, now=now)

    def done_many(self, keys: Iterable[str], *, now: float | None = None) -> None:
        for key in keys:
            self.done(key, now=now)

    def next_ready_at(self) -> float | None:
        return self._inner.next_ready_at()

    def failures(self, key: str) -> int:
        return self._inner.failures(key)

    @property
    def in_flight(self) -> int:
        return self._inner.in_flight

    def __len__(self) -> int:
        return len(self._inner)

    def stats(self, *, now: float | None = None) -> Any:
        return self._inner.stats(now=self._now() if now is None else now)


class _Reconciler:
    """The scripted reconciles of one controller."""

    def __init__(self, ctl: str, record: Record, schedule: Schedule) -> None:
        self.ctl = ctl
        self.record = record
        self.scripts = schedule.scripts
        self.count: dict[str, int] = defaultdict(int)

    def next(self, obj: dict[str, Any]) -> tuple[str, str, Outcome]:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        index = int(meta["name"][1:])
        n = self.count[key]
        self.count[key] = n + 1
        script = self.scripts[index] if index < len(self.scripts) else ()
        outcome = script[n] if n < len(script) else Outcome("ok", 0.1)
        return key, str(meta["resourceVersion"]), outcome

    def finish(self, key: str, outcome: Outcome) -> Action | None:
        """The end of a reconcile: it writes, then returns or raises as scripted."""
        self.record.write(self.ctl, key)
        kind = outcome.kind
        if kind == "requeue":
            return Action.requeue(1.0)
        if kind == "error":
            raise SimError(f"scripted failure of {key}")
        if kind == "base":
            raise SimBaseException(f"scripted BaseException of {key}")
        if kind == "timeouterror":
            raise TimeoutError(f"the reconcile's own timeout ({key})")
        return None


class AsyncReconciler(_Reconciler):
    async def __call__(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        key, rv, outcome = self.next(obj)
        run = self.record.start(self.ctl, key, rv, outcome.kind, thread=False)
        try:
            if outcome.kind == "cancel":
                await asyncio.sleep(outcome.duration)
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)
            await asyncio.sleep(HANG if outcome.kind == "hang" else outcome.duration)
            return self.finish(key, outcome)
        finally:
            self.record.end(run)


class ThreadReconciler(_Reconciler):
    """A plain-function reconcile: it runs in a real thread (`SimExecutor`), whose waits
    are on the virtual clock."""

    def __init__(self, ctl: str, record: Record, schedule: Schedule, pool: SimExecutor) -> None:
        super().__init__(ctl, record, schedule)
        self.pool = pool

    def __call__(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        key, rv, outcome = self.next(obj)
        if outcome.kind == "cancel":  # a thread cannot cancel a task: it fails instead
            outcome = Outcome("error", outcome.duration)
        run = self.record.start(self.ctl, key, rv, outcome.kind, thread=True)
        try:
            self.pool.sleep(THREAD_HANG if outcome.kind == "hang" else outcome.duration)
            return self.finish(key, outcome)
        finally:
            self.record.end(run)


class _SimAbort(BaseException):
    """Ends a simulated thread still asleep when the run is over."""


class SimExecutor(Executor):
    """Threads in lockstep with the virtual clock: see the module docstring.

    `submit` starts a real thread for whatever function the applier hands it (fastctl wraps
    the reconcile), and the loop waits, blocked, until that thread is asleep in `sleep` or
    done; `sleep` arms a loop timer for the wake-up, at which the loop again waits for the
    thread. Only one side ever runs at a time, so runs stay deterministic; like a real
    thread, a submitted call cannot be cancelled once it runs."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle = True
        self._wants: tuple[float, threading.Event] | None = None
        self._sleeping: list[threading.Event] = []
        self._abort = False

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_running_or_notify_cancel()

        def thread() -> None:
            try:
                result = fn(*args, **kwargs)
            except _SimAbort:
                pass
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            finally:
                with self._cond:
                    self._idle = True
                    self._cond.notify_all()

        self._run_until_idle(lambda: threading.Thread(target=thread, daemon=True).start())
        return fut

    def _run_until_idle(self, resume: Callable[[], None]) -> None:
        """On the loop: let one thread run (start or wake it) until it sleeps or ends."""
        with self._cond:
            self._idle = False
            self._wants = None
        resume()
        with self._cond:
            self._cond.wait_for(lambda: self._idle)
            wants, self._wants = self._wants, None
        if wants is not None:
            delay, event = wants
            self._sleeping.append(event)
            asyncio.get_running_loop().call_later(delay, self._wake, event)

    def _wake(self, event: threading.Event) -> None:
        if event in self._sleeping:
            self._sleeping.remove(event)
            self._run_until_idle(event.set)

    def sleep(self, delay: float) -> None:
        """In a simulated thread: sleep `delay` virtual seconds."""
        event = threading.Event()
        with self._cond:
            self._wants = (delay, event)
            self._idle = True
            self._cond.notify_all()
        event.wait()
        if self._abort:
            raise _SimAbort()

    def abort(self) -> None:
        """End every thread still asleep, as the process exit does (on the loop)."""
        self._abort = True
        while self._sleeping:
            self._run_until_idle(self._sleeping.pop().set)


def _recording_elector(record: Record) -> type[LeaderElector]:
    """A `LeaderElector` that writes its tenures to `record` (the Manager makes its own)."""

    class RecordingElector(LeaderElector):
        def _wrote(self, lease: dict[str, Any], sent: float) -> bool:
            was = self._tenure is not None
            leading = super()._wrote(lease, sent)
            if not was and self._tenure is not None:
                record.tenure_start(asyncio.get_running_loop().time())
            return leading

        def _lose(self, reason: str, **kwargs: Any) -> None:
            tenure = self._tenure
            super()._lose(reason, **kwargs)
            if tenure is not None:
                record.tenure_end(min(asyncio.get_running_loop().time(), tenure.deadline))

    return RecordingElector


@contextlib.contextmanager
def patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(module, name, value)`` set while the block runs, then the old values back
    (the worlds point fastctl's private imports at the in-memory server this way)."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@contextlib.contextmanager
def no_signals(what: str, *, graceful: Any, at_once: Any) -> Iterator[None]:
    """The Managers' `stop_on_signals`, taking no signal: the simulated Managers share the
    test process, and a SIGTERM sent to it (someone ending the test run) must end the run,
    not stop a simulated Manager as if the schedule had (a spurious `crash`)."""
    yield


@contextlib.contextmanager
def _wired(server: ApiServer, record: Record) -> Iterator[None]:
    """Point fastctl's HTTP calls at `server` and the Manager at the recording elector and
    at no signal handler (by attribute: these names are the modules' private imports)."""
    patches: list[tuple[Any, str, Any]] = [
        (watcher_module, "request", server.request),
        (lease_api_module, "request_json", server.request_json),
        (manager_module, "LeaderElector", _recording_elector(record)),
        (manager_module, "stop_on_signals", no_signals),
        (rest_module, "ssl", ssl_once()),
    ]
    with patched(patches):
        yield


async def _bursts(queue: asyncio.Queue[None]) -> AsyncIterator[None]:
    while True:
        await queue.get()
        yield None


def _controller(
    name: str,
    client: ApiClient,
    record: Record,
    schedule: Schedule,
    bursts: asyncio.Queue[None],
    pool: SimExecutor,
) -> Controller:
    reconcile: Any = (
        ThreadReconciler(name, record, schedule, pool)
        if schedule.threads
        else AsyncReconciler(name, record, schedule)
    )
    sched_concurrency = schedule.scheduler_concurrency or schedule.concurrency
    ctl = Controller(
        client,
        WIDGET,
        reconcile,
        name=name,
        config=ApplierConfig(
            concurrency=schedule.concurrency,
            timeout=schedule.timeout,
            executor=pool,
            failure_events=False,  # the simulation judges the scheduling, not Events
        ),
        namespace=NAMESPACE,
        scheduler=SimScheduler(name, record, sched_concurrency),
    )
    ctl.owns(CHILD)
    ctl.reconcile_all_on(_bursts(bursts))
    return ctl


async def _consume(ctl: Controller, record: Record, timeout: float) -> None:
    """Run a controller's stream, noting errors reported as the applier's own timeout
    although the reconcile had not run that long."""
    async for result in ctl.stream():
        _check_timeout_report(ctl.name, record, result, timeout)


def _check_timeout_report(
    ctl: str, record: Record, result: ReconcileResult, timeout: float
) -> None:
    if not isinstance(result.error, ReconcileTimeout):
        return
    runs = [r for r in record.runs if r.ctl == ctl and r.key == result.ref.key]
    ran = asyncio.get_running_loop().time() - runs[-1].start if runs else 0.0
    if ran < timeout - 1e-6:
        record.misreported_timeouts.append(
            f"{ctl} {result.ref.key}: its {runs[-1].outcome!r} outcome after {ran:.2f} s "
            f"was reported as {result.error}"
        )


async def _simulate(schedule: Schedule, record: Record) -> None:
    random.seed(schedule.seed)
    loop = asyncio.get_running_loop()
    server = ApiServer(record, schedule.server)
    for i in range(schedule.objects):
        server.put("widgets", name_of(i))
    with _wired(server, record):
        client = ApiClient(Configuration(host="http://sim.invalid"))
        names = ["a", "b"][: schedule.controllers]
        bursts = {n: asyncio.Queue[None]() for n in names}
        pools = {n: SimExecutor() for n in names}
        ctls = [_controller(n, client, record, schedule, bursts[n], pools[n]) for n in names]
        manager: Manager | None = None
        if schedule.manager:
            manager = Manager(
                client,
                leader_election=LEASE,
                metrics_port=None,
                probe_port=None,
                drain_timeout=schedule.drain_timeout,
            )
            for ctl in ctls:
                manager.add(ctl)
            task = loop.create_task(manager.run())
        else:
            task = loop.create_task(_consume(ctls[0], record, schedule.timeout))

        task.add_done_callback(lambda _: setattr(record, "stopped", loop.time()))
        if manager is not None:
            # As `fastctl run` does: once Manager.run() returns, the process exits at once,
            # and its threads with it (docs/leader-election.md, threads and a lost lease).
            task.add_done_callback(lambda _: _process_exit(pools.values()))

        def stop() -> None:
            if record.stop_asked is None:
                record.stop_asked = loop.time()
            if manager is not None:
                manager.shutdown()
            else:
                ctls[0].shutdown()

        last_op = loop.time()
        for op in schedule.ops:
            await asyncio.sleep(op.delay)
            _apply(op, server, bursts, stop)
            last_op = max(loop.time(), server.down_until, server.lease.partition_until)
        await asyncio.sleep(max(0.0, last_op - loop.time()) + SETTLE)
        record.settled_at = loop.time()
        record.quiet_from = last_op + QUIET_AFTER
        for ctl in ctls:
            record.in_flight_at_settle[ctl.name] = ctl.scheduler.in_flight
            record.running_at_settle[ctl.name] = sum(
                1 for r in record.runs if r.ctl == ctl.name and r.end is None
            )
        record.settled_running = not task.done() and record.stop_asked is None
        bound = (
            schedule.drain_timeout + LEASE.renew_deadline
            if manager
            else max(MAX_DURATION, THREAD_HANG, schedule.timeout)
        )
        await stop_and_record(record, task, stop, bound + 1.0)
        for ctl in ctls:
            record.in_flight_at_end[ctl.name] = ctl.scheduler.in_flight
        # let stray thread reconciles end, so their writes are on the record
        await asyncio.sleep(MAX_DURATION + 1.0)
        for pool in pools.values():
            pool.abort()
    await client.close()


def _process_exit(pools: Iterable[SimExecutor]) -> None:
    for pool in pools:
        pool.abort()


async def stop_and_record(
    record: Record, task: asyncio.Task[None], stop: Callable[[], None], bound: float
) -> None:
    """Ask the run `task` to stop and record how it ended: how it had already ended, or how
    it ends once asked; still running `bound` seconds later, it is "stop hung" (then
    cancelled, so the world can close). Every world ends its run this way."""
    record.ended_with = "running" if not task.done() else _how(task)
    stop()
    await asyncio.wait({task}, timeout=bound)
    if task.done():
        if record.ended_with == "running":
            record.ended_with = _how(task)
    else:
        record.ended_with = "stop hung"
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


def _how(task: asyncio.Task[None]) -> str:
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    if exc is None:
        return "returned"
    if isinstance(exc, LeadershipLost):
        return "leadership lost"
    return f"raised {exc!r}"


def _apply(
    op: Op, server: ApiServer, bursts: dict[str, asyncio.Queue[None]], stop: Callable[[], None]
) -> None:
    kind = op.kind
    if kind == "put":
        server.put("widgets", name_of(op.index))
    elif kind == "delete":
        server.delete("widgets", name_of(op.index))
    elif kind == "put_child":
        server.put("children", f"c{op.index}", owner=name_of(op.index))
    elif kind == "delete_child":
        server.delete("children", f"c{op.index}")
    elif kind == "outage":
        server.outage(op.arg, compact=op.flag)
    elif kind == "relist":
        server.break_watch("children" if op.flag else "widgets")
    elif kind == "burst":
        for queue in bursts.values():
            for _ in range(int(op.arg) or 1):
                queue.put_nowait(None)
    elif kind == "sigterm":
        stop()
    elif kind == "partition":
        server.partition_lease(op.arg)
    else:  # pragma: no cover
        raise ValueError(f"unknown op {kind!r}")


def simulate(schedule: Schedule) -> Record:
    """Run `schedule` on a fresh virtual loop; return what happened."""
    record = Record()

    async def main() -> None:
        record.clock = VirtualTimeLoop.current().time
        await _simulate(schedule, record)

    fastctl_log = logging.getLogger("fastctl")
    level = fastctl_log.level
    fastctl_log.setLevel(logging.CRITICAL)  # thousands of retry warnings cost real CPU
    try:
        # Simulated threads wait for the loop's timers: the loop must not wait for them.
        run_virtual(main(), start=START, spin_limit=SPIN_LIMIT, thread_grace=0)
    finally:
        fastctl_log.setLevel(level)
    return record


__all__ = ["Op", "Outcome", "Run", "Schedule", "ServerConfig", "simulate"]
