"""The applier (`fastctl.applier`): concurrent reconciles under the rules of docs/contract.md.

One asyncio driver owns a `fastctl.Scheduler`. A separate ingest task feeds triggers into it
as they arrive (the scheduler de-duplicates them at once, so memory is bounded by the number
of distinct objects, never by the number of triggers). The driver pops ready keys up to the
free slots, starts one task per reconcile, and when a task ends calls ``done`` with the
requeue or the failure. It sleeps on a single future that is woken by a new trigger, a
finished reconcile, or a timer armed for the scheduler's next ready time: no polling, no
busy loop, and O(1) work per wake-up however many reconciles are running.

How the rules are kept:

1. a key handed out by ``pop`` is in flight until ``done``; the scheduler never hands it out
   again meanwhile, so one object never has two reconciles at once;
2. the driver keeps up to ``concurrency`` reconciles running;
3. every applier has its own scheduler, so two appliers never block each other;
4. a busy key is not in the scheduler's ready order, so it cannot hold up a ready one;
5. triggers for a running key only mark it dirty, and ``done`` queues exactly one follow-up,
   which reads the store when it starts and so sees the latest state.

Results are yielded to the consumer as reconciles finish. The consumer applies backpressure:
while it does not ask for the next result, no finished reconcile is acknowledged and no new
one starts (running ones go on to completion), which keeps memory bounded even for a slow
consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fastctl._core import Scheduler
from fastctl._options import pick

if TYPE_CHECKING:
    from fastctl._core import SchedulerStats
from fastctl.errors import ReconcileCancelled, ReconcileTimeout
from fastctl.log import current_object
from fastctl.types import Action, ErrorPolicy, ObjectRef, Reconcile, ReconcileResult, Trigger

__all__ = ["DEFAULT_CONCURRENCY", "ApplierConfig", "SchedulerLike", "applier"]

log = logging.getLogger("fastctl.runner")

DEFAULT_CONCURRENCY = 32
"""Reconciles run at once by default.

Not unbounded (kube-rs's 0 default is a footgun its maintainers regret, #1473): a relist
of 10,000 objects must not open 10,000 requests at once. Not 1 (controller-runtime's
default): reconciles are I/O-bound, so parallelism is nearly free. 32 stays well below
aiohttp's default pool of 100 connections that kubernetes-asyncio uses, leaving room for
watches and for requests made outside reconciles.
"""

_UNBOUNDED_BATCH = 1024
"""With no concurrency limit, how many keys one ``pop_many`` takes before the driver
yields to the event loop (keeps one wake-up from starving other tasks)."""


class SchedulerLike(Protocol):
    """What the applier needs of a scheduler: `fastctl.Scheduler`, or the pure-Python model
    `fastctl.testing.model.ModelScheduler` (used to measure what the Rust core buys)."""

    def add(self, key: str, *, after: float = ..., priority: int = ...) -> None: ...
    def pop_many(self, max: int) -> list[str]: ...
    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = ...,
        failed: bool = ...,
    ) -> None: ...
    def next_ready_at(self) -> float | None: ...
    @property
    def in_flight(self) -> int: ...
    def __len__(self) -> int: ...
    def stats(self) -> SchedulerStats: ...


@dataclass(frozen=True, slots=True)
class ApplierConfig:
    """How an applier runs reconciles: every option once, with its default.

    A value (frozen, comparable), so one config can serve many appliers or controllers;
    ``applier(...)`` and ``Controller(...)`` take the same options as keywords and build
    this. Invalid values raise `ValueError` here, at construction.
    """

    concurrency: int = DEFAULT_CONCURRENCY
    """Reconciles running at once (0: unbounded); see `DEFAULT_CONCURRENCY`."""
    debounce: float = 0.0
    """Seconds a triggered key waits before it is ready; triggers meanwhile fold into one
    reconcile (the scheduler validates it)."""
    timeout: float | None = None
    """Seconds one reconcile may run before it counts as failed (`ReconcileTimeout`) and is
    retried under the error policy; ``None``: no limit. A plain (thread) reconcile keeps its
    slot until the thread really returns."""
    executor: Executor | None = None
    """Where plain (non-async) reconcile functions run; ``None``: the loop's thread pool."""

    def __post_init__(self) -> None:
        concurrency, timeout = self.concurrency, self.timeout
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
            raise ValueError(f"concurrency must be an int >= 0 (0: unbounded), got {concurrency!r}")
        if timeout is not None:
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or math.isnan(timeout)
                or timeout <= 0
            ):
                raise ValueError(
                    f"timeout must be a number of seconds > 0 or None, got {timeout!r}"
                )
            object.__setattr__(self, "timeout", float(timeout))

    def new_scheduler(self) -> Scheduler:
        """The scheduler an applier with these options runs on when it is given none."""
        return Scheduler(concurrency=self.concurrency, debounce=self.debounce)


_DEFAULT_CONFIG = ApplierConfig()


class _ReadyAware(Protocol):
    """A store that fills asynchronously (`fastctl.Store`): the applier waits for it."""

    @property
    def is_ready(self) -> bool: ...
    async def wait_ready(self) -> None: ...


@dataclass(slots=True)
class _Outcome:
    """What one finished reconcile task reports back to the driver."""

    key: str
    ref: ObjectRef
    obj: Any
    returned: Any
    error: BaseException | None
    duration: float


class _Driver:
    """The state of one applier run: scheduler, running tasks, wake-up future."""

    def __init__(
        self,
        reconcile: Reconcile,
        error_policy: ErrorPolicy | None,
        context: Any,
        store: Mapping[ObjectRef, Any],
        triggers: AsyncIterable[ObjectRef | Trigger],
        config: ApplierConfig,
        scheduler: SchedulerLike | None,
    ) -> None:
        if not callable(reconcile):
            raise TypeError(f"reconcile must be callable, got {type(reconcile).__name__}")
        if error_policy is not None and not callable(error_policy):
            raise TypeError(f"error_policy must be callable, got {type(error_policy).__name__}")
        if not isinstance(store, Mapping):
            raise TypeError(
                f"store must be a Mapping[ObjectRef, obj] or a fastctl.Store, "
                f"got {type(store).__name__}"
            )
        self.reconcile = reconcile
        self.is_async = inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
            getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
        )
        self.error_policy = error_policy
        self.context = context
        self.store = store
        self.triggers = triggers
        self.concurrency = config.concurrency
        self.timeout = config.timeout
        self.executor = config.executor
        self.scheduler: SchedulerLike = (
            scheduler if scheduler is not None else config.new_scheduler()
        )
        self.loop: asyncio.AbstractEventLoop  # set when the iteration starts
        self.running: dict[str, asyncio.Task[None]] = {}
        self.completed: deque[_Outcome] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None
        self.triggers_ended = False
        self.ingest_error: BaseException | None = None
        self.ingest_task: asyncio.Task[None] | None = None
        self.ready_task: asyncio.Task[None] | None = None
        self.store_ready = not _is_ready_aware(store) or store.is_ready  # type: ignore[attr-defined]

    # -- waking -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake the driver (idempotent; cheap enough to call on every event)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_timer(self) -> None:
        self.timer = None
        self.timer_at = None
        self.wake()

    def arm_timer(self, at: float | None) -> None:
        """Keep one timer, for the earliest time a waiting key becomes ready."""
        if at == self.timer_at:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timer_at = at
        if at is not None:
            self.timer = self.loop.call_later(max(0.0, at - time.monotonic()), self._on_timer)

    # -- ingest -----------------------------------------------------------------------------

    async def ingest(self) -> None:
        """Feed triggers into the scheduler as they arrive; it de-duplicates them at once."""
        add = self.scheduler.add
        try:
            async for item in self.triggers:
                if type(item) is ObjectRef:
                    add(item.key)
                elif isinstance(item, Trigger):
                    add(item.ref.key, priority=item.priority)
                elif isinstance(item, ObjectRef):
                    add(item.key)
                else:
                    raise TypeError(
                        "triggers must yield fastctl.ObjectRef or fastctl.Trigger, "
                        f"got {type(item).__name__}: {item!r:.100}"
                    )
                self.wake()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.ingest_error = exc
        finally:
            self.triggers_ended = True
            self.wake()

    async def await_store(self) -> None:
        await self.store.wait_ready()  # type: ignore[attr-defined]
        self.store_ready = True
        self.wake()

    # -- running reconciles -----------------------------------------------------------------

    def start_ready(self) -> None:
        """Start reconciles for ready keys while slots are free."""
        scheduler = self.scheduler
        store = self.store
        while True:
            if self.concurrency:
                free = self.concurrency - len(self.running)
                if free <= 0:
                    return
            else:
                free = _UNBOUNDED_BATCH
            keys = scheduler.pop_many(free)
            if not keys:
                return
            for key in keys:
                ref = ObjectRef._from_trusted_key(key)
                obj = store.get(ref)
                if obj is None:
                    # Gone from the cache: nothing to reconcile. A later trigger (the object
                    # coming back) queues it again.
                    scheduler.done(key)
                    continue
                self.running[key] = self.loop.create_task(
                    self.run_one(key, ref, obj), name=f"fastctl-reconcile:{key}"
                )
            if not self.concurrency:
                return

    async def run_one(self, key: str, ref: ObjectRef, obj: Any) -> None:
        """Run one reconcile to its end and report the outcome; never raises (cancellation
        by the driver excepted, which it handles itself)."""
        current_object.set(ref)
        started = time.monotonic()
        returned: Any = None
        error: BaseException | None = None
        try:
            if self.is_async:
                if self.timeout is None:
                    returned = await self.reconcile(obj, self.context)  # type: ignore[misc]
                else:
                    async with asyncio.timeout(self.timeout):
                        returned = await self.reconcile(obj, self.context)  # type: ignore[misc]
            else:
                returned = await self._run_in_thread(obj)
            if returned is not None and not isinstance(returned, Action):
                raise TypeError(
                    f"reconcile of {key} returned {type(returned).__name__} ({returned!r:.100}); "
                    "expected fastctl.Action or None"
                )
        except TimeoutError:
            error = ReconcileTimeout(key, self.timeout)
        except Exception as exc:
            error = exc
        except asyncio.CancelledError:
            if _cancelling():
                raise  # the applier is being cancelled: the driver cleans up
            error = ReconcileCancelled(key)
        self.completed.append(_Outcome(key, ref, obj, returned, error, time.monotonic() - started))
        self.wake()

    async def _run_in_thread(self, obj: Any) -> Any:
        """A plain reconcile function runs in a thread. On timeout it is reported as an
        error, but the slot stays held until the thread really returns: a thread cannot be
        stopped, and releasing the slot early would let a second reconcile of the same
        object start beside it."""
        fut = self.loop.run_in_executor(self.executor, self.reconcile, obj, self.context)
        if self.timeout is None:
            return await fut
        done, _ = await asyncio.wait({fut}, timeout=self.timeout)
        if not done:
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)
            raise TimeoutError
        return fut.result()

    def finish(self, outcome: _Outcome) -> ReconcileResult:
        """Tell the scheduler how a reconcile ended and build its result."""
        key = outcome.key
        del self.running[key]
        error = outcome.error
        if error is None:
            action: Action = outcome.returned if outcome.returned is not None else _AWAIT
            self.scheduler.done(key, requeue_after=action.requeue_after)
        else:
            action = self.apply_error_policy(outcome.obj, error, key)
        return ReconcileResult(outcome.ref, action, error, outcome.duration, outcome.obj)

    def apply_error_policy(self, obj: Any, error: BaseException, key: str) -> Action:
        """Ask the user's error policy when to retry; without one (or if it fails), use the
        scheduler's per-key exponential backoff."""
        if isinstance(error, ReconcileTimeout | ReconcileCancelled):
            log.warning("reconcile of %s: %s", key, error)
        else:
            log.error("reconcile of %s failed: %r", key, error, exc_info=error)
        if self.error_policy is not None:
            try:
                action = self.error_policy(obj, error, self.context)
                if not isinstance(action, Action):
                    raise TypeError(
                        f"error_policy returned {type(action).__name__} ({action!r:.100}); "
                        "expected fastctl.Action"
                    )
            except Exception:
                log.exception("error_policy failed for %s; using the default backoff", key)
            else:
                if action.requeue_after is None:
                    self.scheduler.done(key)
                else:
                    self.scheduler.done(key, requeue_after=action.requeue_after, failed=True)
                return action
        self.scheduler.done(key, failed=True)
        return _BACKOFF

    async def cancel_running(self) -> None:
        """Cancel every running reconcile, wait for them, and release their slots."""
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for key in list(self.running):
            del self.running[key]
            self.scheduler.done(key)
        self.completed.clear()

    # -- the loop ---------------------------------------------------------------------------

    async def results(self) -> AsyncIterator[ReconcileResult]:
        self.loop = asyncio.get_running_loop()
        self.ingest_task = self.loop.create_task(self.ingest(), name="fastctl-applier-ingest")
        if not self.store_ready:
            self.ready_task = self.loop.create_task(
                self.await_store(), name="fastctl-applier-ready"
            )
        try:
            while True:
                while self.completed:
                    yield self.finish(self.completed.popleft())
                if self.ingest_error is not None:
                    raise self.ingest_error
                stopping = self.triggers_ended
                if self.store_ready and not stopping:
                    self.start_ready()
                if stopping and not self.running and not self.completed:
                    return
                self.arm_timer(
                    self.scheduler.next_ready_at()
                    if self.store_ready and not stopping and self._has_free_slot()
                    else None
                )
                if self.completed:
                    continue
                self.waiter = self.loop.create_future()
                try:
                    await self.waiter
                finally:
                    self.waiter = None
        finally:
            self.arm_timer(None)
            for task in (self.ingest_task, self.ready_task):
                if task is not None and not task.done():
                    task.cancel()
            await self.cancel_running()

    def _has_free_slot(self) -> bool:
        return not self.concurrency or len(self.running) < self.concurrency


def _is_ready_aware(store: object) -> bool:
    return hasattr(store, "wait_ready") and hasattr(store, "is_ready")


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


_AWAIT = Action.await_change()
_BACKOFF = Action(None)
"""The action reported when the scheduler's default backoff decides the retry time."""


def applier(
    reconcile: Reconcile,
    error_policy: ErrorPolicy | None,
    context: Any,
    store: Mapping[ObjectRef, Any],
    triggers: AsyncIterable[ObjectRef | Trigger],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    debounce: float = 0.0,
    timeout: float | None = None,
    scheduler: SchedulerLike | None = None,
    executor: Executor | None = None,
    config: ApplierConfig | None = None,
) -> AsyncIterator[ReconcileResult]:
    """Reconcile the objects named by `triggers`, concurrently, under the rules of docs/contract.md.

    Each reconcile reads its object from `store` when it starts (objects missing from the
    store are skipped). `reconcile(obj, context)` returns an `Action` or ``None`` (await
    change); a plain function runs in `executor` (default: the loop's thread pool). An
    exception, a wrong return type, or running past `timeout` is an error: `error_policy`
    (``None``: the scheduler's per-key exponential backoff, reset on success) decides when
    to retry. If `store` has ``wait_ready`` (a `fastctl.Store`), nothing starts until it is
    ready; triggers that arrive before are de-duplicated meanwhile.

    When `triggers` ends, no new reconcile starts; the running ones finish and the iterator
    ends. Cancelling the iteration cancels the running reconciles. `scheduler` replaces the
    default ``Scheduler(concurrency=concurrency, debounce=debounce)`` (for metrics, or to
    run on the pure-Python model). `concurrency`, `debounce`, `timeout` and `executor` are
    the fields of `ApplierConfig`: pass them as keywords or as one `config`, not both.
    Close the iterator when you stop early (``contextlib.aclosing``) so its reconciles are
    cancelled at once.
    """
    options = pick(
        config,
        ApplierConfig(
            concurrency=concurrency, debounce=debounce, timeout=timeout, executor=executor
        ),
        _DEFAULT_CONFIG,
    )
    return _Driver(reconcile, error_policy, context, store, triggers, options, scheduler).results()
