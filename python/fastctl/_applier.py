"""The applier (`fastctl.applier`): concurrent reconciles under the rules of docs/contract.md.

One asyncio driver owns a `fastctl.Scheduler`. Triggers go into it as they arrive (the
scheduler de-duplicates them at once, so memory is bounded by the number of distinct
objects, never by the number of triggers): from a user's async iterable through an ingest
task; from fastctl's own `Channel` (a controller's watches) synchronously, in the task
that puts them (`_Driver.attach`), with no task in between. The driver pops ready keys up
to the free slots, starts one task per reconcile, and when a task ends calls ``done`` with
the requeue or the failure. It sleeps on a single future that is woken by a new trigger
from the ingest task, a finished reconcile, a timer armed for the scheduler's next ready
time, or the scheduler itself when a group's cap changes (``set_group_concurrency``, which
may release held keys): no polling, no busy loop, and O(1) work per wake-up however many
reconciles are running. A trigger pushed from a `Channel` while the driver sleeps with no
result pending starts its reconcile at once, where it was pushed (`_Driver.kick`: what the
driver would have done woken, a loop iteration and two task wake-ups earlier); while the
driver is awake or its consumer holds a result, the trigger only waits in the scheduler.

How the rules are kept:

1. a key handed out by ``pop`` is in flight until ``done``; the scheduler never hands it out
   again meanwhile, so one object never has two reconciles at once;
2. the driver keeps up to ``concurrency`` reconciles running;
3. every applier has its own scheduler, so two appliers never block each other;
4. a busy key is not in the scheduler's ready order, so it cannot hold up a ready one;
5. triggers for a running key only mark it dirty, and ``done`` queues exactly one follow-up,
   which reads the store when it starts and so sees the latest state.

Results are yielded to the consumer as reconciles finish. The consumer applies backpressure:
while it does not ask for the next result, no new reconcile starts (running ones go on to
completion), which keeps memory bounded even for a slow consumer. A reconcile that ends is
acknowledged to the scheduler at once, in its own task: its requeue or backoff holds even if
its result is never consumed, and the scheduler's work duration is the reconcile's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import math
import threading
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fastctl._channel import Channel
from fastctl._clock import loop_clock, monotonic
from fastctl._core import Scheduler
from fastctl._fair import FairBy, check_group_concurrency, group_function
from fastctl._options import pick
from fastctl._rate import RateLimit
from fastctl._reasons import ReasonLog
from fastctl._requeue_limit import RequeueLimiter

if TYPE_CHECKING:
    from fastctl._core import SchedulerStats
    from fastctl._otel import ControllerTracing, RunSpan
from fastctl._threads import ThreadCall
from fastctl.errors import ReconcileCancelled, ReconcileTimeout
from fastctl.log import RedactingFilter, current_object
from fastctl.types import Action, ErrorPolicy, ObjectRef, Reconcile, ReconcileResult, Trigger

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_REQUEUE_LIMIT",
    "ApplierConfig",
    "SchedulerLike",
    "applier",
]

log = logging.getLogger("fastctl.runner")
log.addFilter(RedactingFilter())  # its records name objects and errors

DEFAULT_CONCURRENCY = 32
"""Reconciles run at once by default.

Not unbounded (kube-rs's 0 default is a footgun its maintainers regret, #1473): a relist
of 10,000 objects must not open 10,000 requests at once. Not 1 (controller-runtime's
default): reconciles are I/O-bound, so parallelism is nearly free. 32 stays well below
aiohttp's default pool of 100 connections that kubernetes-asyncio uses, leaving room for
watches and for requests made outside reconciles.
"""

DEFAULT_REQUEUE_LIMIT = RateLimit(qps=10.0, burst=100)
"""How fast an applier starts the reconciles it queued again itself (retries after
failures, immediate requeues) by default: controller-runtime's overall bucket, 10 a second
with bursts of 100, on top of each object's own backoff (`fastctl._requeue_limit`)."""

_UNBOUNDED_BATCH = 1024
"""With no concurrency limit, how many keys one ``pop_many`` takes before the driver
yields to the event loop (keeps one wake-up from starving other tasks)."""


class SchedulerLike(Protocol):
    """What the applier needs of a scheduler: `fastctl.Scheduler`, or the pure-Python model
    `fastctl.testing.model.ModelScheduler` (used to measure what the Rust core buys).

    The applier gives every call that depends on the time the runtime's clock (``now``,
    `fastctl._clock`), so the scheduler's ready times are on the clock its timers run on,
    a virtual one included."""

    def add(
        self,
        key: str,
        *,
        after: float = ...,
        priority: int = ...,
        group: str | None = ...,
        now: float | None = ...,
    ) -> None: ...
    def pop_many(self, max: int, *, now: float | None = ...) -> list[str]: ...
    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = ...,
        failed: bool = ...,
        now: float | None = ...,
    ) -> None: ...
    def done_many(self, keys: Iterable[str], *, now: float | None = ...) -> None: ...
    def next_ready_at(self) -> float | None: ...
    @property
    def in_flight(self) -> int: ...
    def __len__(self) -> int: ...
    def stats(self, *, now: float | None = ...) -> SchedulerStats: ...


@dataclass(frozen=True, slots=True)
class ApplierConfig:
    """How an applier runs reconciles: every option once, with its default.

    A value (frozen, comparable), so one config can serve many appliers or controllers
    (``applier(..., config=)``, ``Controller(..., config=)``; their keywords `concurrency`,
    `debounce` and `timeout` build one too). Invalid values raise `ValueError` here, at
    construction.
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
    fair_by: FairBy | None = None
    """Fair shares between tenants: ``"namespace"``, or a function of the cached object
    returning its group; among ready keys of one priority the groups are served in turn.
    ``None``: first in, first out across all objects (see `fastctl._fair`)."""
    group_concurrency: int = 0
    """With `fair_by`: the most reconciles of one group running at once (0: no cap), so a
    tenant whose reconciles are slow cannot take every slot of `concurrency`; the others'
    objects run meanwhile. Objects without a group are bounded by `concurrency` only. Set
    without `fair_by` it is refused: there would be no groups to cap."""
    failure_events: bool = True
    """A `Controller`'s failed reconcile records a Warning Event on its object (reason
    ``ReconcileFailed``, or ``InvalidObject`` when the model rejects it), one Event series
    per object and reason (``fastctl.runtime._failure_events``), through the controller's
    `recorder` or one of its own. False: none. A bare `applier` has no client and publishes
    no Event either way."""
    requeue_limit: RateLimit | None = DEFAULT_REQUEUE_LIMIT
    """The most reconciles a second this applier starts again on its own, without a change:
    retries after failures (whatever delay the backoff or the error policy chose) and
    immediate requeues (``Action.requeue(0)``), all objects together, on top of each
    object's backoff, so that an outage in which every reconcile fails costs a bounded
    rate (`fastctl._requeue_limit`). A change always starts its reconcile at once, and a
    requeue with a delay keeps its own schedule. ``None``: no bound."""

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
        if self.requeue_limit is not None and not isinstance(self.requeue_limit, RateLimit):
            raise ValueError(
                f"requeue_limit must be a fastctl.RateLimit or None, got {self.requeue_limit!r}"
            )
        group_function(self.fair_by)  # refuses a bad value here, at construction
        check_group_concurrency(self.group_concurrency, self.fair_by)

    def new_scheduler(self) -> Scheduler:
        """The scheduler an applier with these options runs on when it is given none."""
        return Scheduler(
            concurrency=self.concurrency,
            debounce=self.debounce,
            group_concurrency=self.group_concurrency,
        )


_DEFAULT_CONFIG = ApplierConfig()


class StartGate(Protocol):
    """What may hold a key back just before its reconcile starts (the controller's
    read-your-writes fence, `fastctl.runtime._read_your_writes`). A held key goes back to
    the scheduler, waiting, so it takes no slot while held; the gate wakes it when it may
    start (`bind`'s `wake`), or its wait runs out."""

    def hold(self, key: str, now: float) -> float | None:
        """``None``: start `key` now; else the most seconds to hold it back."""
        ...

    def release(self, key: str) -> None:
        """`key` will not start (gone from the store): forget what held it."""
        ...

    def bind(self, wake: Callable[[str], None] | None) -> None:
        """`wake(key)` queues a held key that may start now (``None``: the applier ended)."""
        ...


class Observation(Protocol):
    """What observes one reconcile call (the `_Driver`'s `observe`), ended once the call is
    over, however it ended."""

    def end(self) -> None: ...


_WAKE_PRIORITY = -(2**63)
"""The priority of the add that wakes a held key: the lowest, so that the merge keeps the
priority the key was queued with (the highest wins)."""


class _ReadyAware(Protocol):
    """A store that fills asynchronously (`fastctl.Store`): the applier waits for it."""

    @property
    def is_ready(self) -> bool: ...
    async def wait_ready(self) -> None: ...


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
        reasons: ReasonLog | None = None,
        gate: StartGate | None = None,
        on_requeue_held: Callable[[float], None] | None = None,
        tracing: ControllerTracing | None = None,
        observe: Callable[[Any], Observation] | None = None,
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
        self.group_of = group_function(config.fair_by)
        self.scheduler: SchedulerLike = (
            scheduler if scheduler is not None else config.new_scheduler()
        )
        self.loop: asyncio.AbstractEventLoop  # set when the iteration starts
        self.now: Callable[[], float] = monotonic  # `loop_clock(loop)` once it runs
        self.thread = 0  # the loop's thread, set then too
        self.running: dict[str, asyncio.Task[None]] = {}
        self.completed: deque[ReconcileResult] = deque()
        self.orphans: set[str] = set()  # cancelled while their thread runs on
        self.cancelling = False
        self.fatal: BaseException | None = None  # KeyboardInterrupt/SystemExit to re-raise
        self.blocked = False  # the last pop got less than asked (see `arm_ready_timer`)
        self.popped_at = -math.inf  # the clock just before that pop
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None
        self.triggers_ended = False
        self.ingest_error: BaseException | None = None
        self.ingest_task: asyncio.Task[None] | None = None
        self.parked: contextvars.Context | None = None
        """The driver's context when it last parked (see `kick`)."""
        self.ready_task: asyncio.Task[None] | None = None
        self.store_ready = not _is_ready_aware(store) or store.is_ready  # type: ignore[attr-defined]
        self.reasons = reasons
        """Why each key is queued (`fastctl._reasons`), when the caller keeps it."""
        self.gate = gate
        """What may hold a key back at its start (`StartGate`), when the caller has one."""
        self.requeues: RequeueLimiter | None = (
            None
            if config.requeue_limit is None
            else RequeueLimiter(config.requeue_limit, on_requeue_held)
        )
        """The bound on reconciles started again without a change (`requeue_limit`)."""
        self.tracing = tracing
        """The spans of this run's reconciles (`fastctl._otel`), while tracing is on."""
        self.observe = observe if self.is_async else None
        """``observe(obj)`` before each call of an async reconcile, ``.end()`` on what it
        returned once the call is over (the read-your-writes fence's write observer, set
        here rather than by a wrapper: one coroutine fewer per reconcile)."""

    # -- waking -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake the driver (idempotent; cheap enough to call on every event)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wake_from_any_thread(self) -> None:
        """`wake`, from whatever thread calls (a scheduler's waker may run in another)."""
        if threading.get_ident() == self.thread:
            self.wake()
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to wake
            self.loop.call_soon_threadsafe(self.wake)

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
            # The scheduler's times are on the loop's clock (`now=`): a past one fires at once.
            self.timer = self.loop.call_at(at, self._on_timer)

    # -- ingest -----------------------------------------------------------------------------

    def taker(self) -> Callable[[object], None]:
        """What takes one trigger into the scheduler (it de-duplicates them at once), with
        its notes (why queued, a change for the requeue bound, its trace link); raises
        `TypeError` for what is neither an `ObjectRef` nor a `Trigger`. `ingest` does the
        same inline: a change here is a change there."""
        add, now = self.scheduler.add, self.now
        group_of, store = self.group_of, self.store
        note = self.reasons.queued if self.reasons is not None else None
        changed = self.requeues.changed if self.requeues is not None else None
        running = self.running
        trace = self.tracing.queued if self.tracing is not None else None

        def take(item: object) -> None:
            if group_of is not None and isinstance(item, ObjectRef | Trigger):
                ref = item if isinstance(item, ObjectRef) else item.ref
                trigger = item if isinstance(item, Trigger) else None
                priority = 0 if trigger is None else trigger.priority
                key = ref.key
                add(key, priority=priority, group=group_of(ref, store), now=now())
                if note is not None:
                    note(key, None if trigger is None else trigger.reason)
            elif type(item) is ObjectRef:
                key = item.key
                add(key, now=now())
                if note is not None:
                    note(key, None)
            elif isinstance(item, Trigger):
                key = item.ref.key
                add(key, priority=item.priority, now=now())
                if note is not None:
                    note(key, item.reason)
            elif isinstance(item, ObjectRef):
                key = item.key
                add(key, now=now())
                if note is not None:
                    note(key, None)
            else:
                raise TypeError(
                    "triggers must yield fastctl.ObjectRef or fastctl.Trigger, "
                    f"got {type(item).__name__}: {item!r:.100}"
                )
            if changed is not None:
                changed(key, running)
            if trace is not None:  # its link joins the key's next run
                trace(item)

        return take

    async def ingest(self) -> None:
        """Feed triggers into the scheduler as they arrive (a trigger source of the user's:
        any async iterable). What `taker` does, written out here: one call fewer per
        trigger on this path."""
        add, now = self.scheduler.add, self.now
        group_of, store = self.group_of, self.store
        note = self.reasons.queued if self.reasons is not None else None
        changed = self.requeues.changed if self.requeues is not None else None
        running = self.running
        trace = self.tracing.queued if self.tracing is not None else None
        try:
            async for item in self.triggers:
                if group_of is not None and isinstance(item, ObjectRef | Trigger):
                    ref = item if isinstance(item, ObjectRef) else item.ref
                    trigger = item if isinstance(item, Trigger) else None
                    priority = 0 if trigger is None else trigger.priority
                    key = ref.key
                    add(key, priority=priority, group=group_of(ref, store), now=now())
                    if note is not None:
                        note(key, None if trigger is None else trigger.reason)
                elif type(item) is ObjectRef:
                    key = item.key
                    add(key, now=now())
                    if note is not None:
                        note(key, None)
                elif isinstance(item, Trigger):
                    key = item.ref.key
                    add(key, priority=item.priority, now=now())
                    if note is not None:
                        note(key, item.reason)
                elif isinstance(item, ObjectRef):
                    key = item.key
                    add(key, now=now())
                    if note is not None:
                        note(key, None)
                else:
                    raise TypeError(
                        "triggers must yield fastctl.ObjectRef or fastctl.Trigger, "
                        f"got {type(item).__name__}: {item!r:.100}"
                    )
                if changed is not None:
                    changed(key, running)
                if trace is not None:  # its link joins the key's next run
                    trace(item)
                self.wake()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.ingest_error = exc
        finally:
            self.triggers_ended = True
            self.wake()

    def attach(self, channel: Channel[Any]) -> None:
        """Take the triggers of fastctl's own `Channel` (a controller's watches) as they
        are put, in the producer's task: no ingest task to wake, and when the driver is
        parked the reconciles they make ready start at once (`kick`), with no wake-up of
        the driver either."""
        take = self.taker()

        def push(item: object) -> None:
            if self.ingest_error is not None:
                return
            try:
                take(item)
                self.kick()
            except BaseException as exc:  # a wrong trigger, or a start that failed
                self.ingest_error = exc
                self.triggers_ended = True
                channel._detach()
                self.wake()

        channel._attach(push, self.end_triggers)

    def end_triggers(self) -> None:
        self.triggers_ended = True
        self.wake()

    def kick(self) -> None:
        """A trigger was taken in: if the driver is parked, start what it made ready now,
        and arm the timer, as the driver would if woken (parked and not woken: its
        consumer waits, no result is pending, no error is to be raised). Otherwise the
        driver does it when it next goes round its loop: it is woken already, or its
        consumer holds a result, and nothing starts until the consumer asks again (the
        backpressure rule)."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # it runs its loop before it parks again
        if not self.store_ready:
            return  # the store's readiness wakes it
        if self._has_free_slot():
            self.start_ready(self.parked)
            if self._has_free_slot():
                self.arm_ready_timer()
                return
        self.arm_timer(None)

    async def await_store(self) -> None:
        await self.store.wait_ready()  # type: ignore[attr-defined]
        self.store_ready = True
        self.wake()

    # -- running reconciles -----------------------------------------------------------------

    def start_ready(self, context: contextvars.Context | None = None) -> None:
        """Start reconciles for ready keys while slots are free; each task runs in a copy
        of `context` (``None``: of the current one, the driver's)."""
        scheduler = self.scheduler
        store = self.store
        reasons = self.reasons
        tracing = self.tracing
        while True:
            if self.concurrency:
                free = self.concurrency - len(self.running)
                if free <= 0:
                    return
            else:
                free = _UNBOUNDED_BATCH
            self.popped_at = now = self.now()
            keys = scheduler.pop_many(free, now=now)
            # Fewer keys than asked: none ready, or the scheduler's own limit (it may be
            # lower than ours, or shared) is reached. `arm_ready_timer` tells which.
            self.blocked = len(keys) < free
            if not keys:
                return
            gone = []
            gate, requeues = self.gate, self.requeues
            for key in keys:
                ref = ObjectRef._from_trusted_key(key)
                obj = store.get(ref)
                if obj is None:
                    # Gone from the cache: nothing to reconcile. A later trigger (the object
                    # coming back) queues it again.
                    gone.append(key)
                    if reasons is not None:
                        reasons.dropped(key)
                    if tracing is not None:
                        tracing.dropped(key)
                    if gate is not None:
                        gate.release(key)
                    if requeues is not None:
                        requeues.forget(key)
                    continue
                if gate is not None:
                    wait = gate.hold(key, now)
                    if wait is not None:
                        self.put_back(key, wait, now)
                        continue
                if requeues is not None:
                    wait = requeues.hold(key, now)
                    if wait is not None:
                        self.put_back(key, wait, now)
                        continue
                run = tracing.start(key, scheduler) if tracing is not None else None
                self.running[key] = self.loop.create_task(
                    self.run_one(key, ref, obj, run),
                    name=f"fastctl-reconcile:{key}",
                    context=None if context is None else context.copy(),
                )
                if reasons is not None:
                    reasons.started(key)
            if gone:
                scheduler.done_many(gone, now=now)
            if not self.concurrency:
                return

    def put_back(self, key: str, wait: float, now: float) -> None:
        """Queue `key` again `wait` seconds from now, unstarted: a hold (`StartGate`). Its
        failure count is kept from shrinking: a retry held back still counts as a retry
        (a success would reset it, and a reconcile that writes and fails would then be
        retried as fast as its writes reach the cache); it grows by one instead."""
        failures = getattr(self.scheduler, "failures", None)
        failed = failures is not None and failures(key) > 0
        self.scheduler.done(key, requeue_after=wait, failed=failed, now=now)

    def wake_held(self, key: str) -> None:
        """The gate lets held `key` start: make it ready now (a merge: an earlier time)."""
        self.scheduler.add(key, priority=_WAKE_PRIORITY, now=self.now())
        self.wake()

    async def run_one(self, key: str, ref: ObjectRef, obj: Any, run: RunSpan | None = None) -> None:
        """Run one reconcile to its end and apply its outcome to the scheduler at once (so
        its requeue or backoff holds even if the result is never consumed); never raises
        (cancellation by the driver excepted, which it handles itself).

        Every ending releases the slot: a return, an `Exception`, any other
        `BaseException`, a cancellation from inside. `KeyboardInterrupt` and `SystemExit`
        release it and are then raised by the iterator: they ask the process to stop.
        `run` is its span, while tracing is on."""
        current_object.set(ref)
        if run is not None:
            run.enter()
        started = self.now()
        returned: Any = None
        error: BaseException | None = None
        try:
            returned = await self._call(key, obj)
            if returned is not None and not isinstance(returned, Action):
                raise TypeError(
                    f"reconcile of {key} returned {type(returned).__name__} ({returned!r:.100}); "
                    "expected fastctl.Action or None"
                )
        except asyncio.CancelledError:
            if self.cancelling or key in self.orphans:
                if run is not None:
                    run.cancelled()
                raise  # the applier is being cancelled: the driver cleans up
            _uncancel()
            error = ReconcileCancelled(key)
        except BaseException as exc:  # whatever ends it, the slot comes back
            error = exc
        decided: Action | None = None
        if error is not None and not isinstance(error, KeyboardInterrupt | SystemExit):
            self.log_failure(error, key)
            if self.error_policy is not None:  # in the slot: a coroutine policy may await
                try:
                    decided = await self.ask_error_policy(obj, error, key)
                except BaseException:  # the applier is cancelled meanwhile
                    if run is not None:
                        run.cancelled()
                    raise
        del self.running[key]
        ended = self.now()
        result = self.finish(key, ref, obj, returned, error, ended - started, ended, decided)
        if run is not None:
            action = result.action if result is not None else None
            again = action is not None and (
                action.requeue_after is not None or (error is not None and action is _BACKOFF)
            )
            run.end(error, action, ended, again=again)
        if result is not None:
            self.completed.append(result)
        self.wake()

    async def _call(self, key: str, obj: Any) -> Any:
        """Call the reconcile under the applier's timeout. Only the applier's own deadline
        becomes `ReconcileTimeout`; a `TimeoutError` the reconcile raises itself (a client
        timeout, say) is its error, with its own traceback."""
        if not self.is_async:
            return await self._run_in_thread(key, obj)
        observation = self.observe(obj) if self.observe is not None else None
        try:
            if self.timeout is None:
                return await self.reconcile(obj, self.context)  # type: ignore[misc]
            deadline = asyncio.timeout(self.timeout)
            try:
                async with deadline:
                    return await self.reconcile(obj, self.context)  # type: ignore[misc]
            except TimeoutError:
                if deadline.expired():
                    raise ReconcileTimeout(key, self.timeout) from None
                raise
        finally:
            if observation is not None:
                observation.end()

    async def _run_in_thread(self, key: str, obj: Any) -> Any:
        """A plain reconcile function runs in a thread, in a copy of the task's context (so
        `current_object` names the object there too). A thread cannot be stopped: on
        timeout the error is reported when the thread returns, and if the applier is
        cancelled meanwhile the key stays in flight until it does (`_thread_ended`), so no
        second reconcile of the same object can start beside it."""
        call = ThreadCall(self.loop, self.reconcile)
        fut = call.start(self.executor, obj, self.context)
        try:
            if self.timeout is None:
                return await fut
            done, _ = await asyncio.wait({fut}, timeout=self.timeout)
            if not done:
                with contextlib.suppress(Exception):
                    await asyncio.shield(fut)
                raise ReconcileTimeout(key, self.timeout)
            return fut.result()
        except asyncio.CancelledError:
            if call.abandon(lambda: self._thread_ended(key)):
                self.orphans.add(key)
                del self.running[key]  # the slot is the thread's until it returns
            raise

    def _thread_ended(self, key: str) -> None:
        """A thread whose reconcile was cancelled has returned: release its key now."""
        self.orphans.discard(key)
        log.warning("reconcile of %s: its thread returned after the applier stopped", key)
        self.scheduler.done(key, now=self.now())
        self._note_end(key, None, None)
        self.wake_peers(everyone=True)

    def wake_peers(self, *, everyone: bool = False) -> None:
        """Wake the other appliers running on this scheduler (a key or slot they wait for
        may be free now); cheap when there are none."""
        peers = _PEERS.get(id(self.scheduler), ())
        if len(peers) > 1 or everyone:
            for driver in peers:
                if everyone or driver is not self:
                    driver.wake()

    def finish(
        self,
        key: str,
        ref: ObjectRef,
        obj: Any,
        returned: Any,
        error: BaseException | None,
        duration: float,
        ended: float,
        decided: Action | None = None,
    ) -> ReconcileResult | None:
        """Tell the scheduler how a reconcile ended (at `ended`, on the clock) and build its
        result (``None`` for an ending that stops the applier); `decided` is the error
        policy's answer to a failure (None: the default backoff)."""
        requeues = self.requeues
        if error is None:
            action: Action = returned if returned is not None else _AWAIT
            self.scheduler.done(key, requeue_after=action.requeue_after, now=ended)
            if requeues is not None:
                requeues.ended(key, again=action.requeue_after == 0)
            if self.reasons is not None:
                self._note_end(key, None, None if action.requeue_after is None else "requeue")
        elif isinstance(error, KeyboardInterrupt | SystemExit):
            if requeues is not None:
                requeues.ended(key, again=False)
            log.error("reconcile of %s raised %r: stopping the applier", key, error)
            self.scheduler.done(key, failed=True, now=ended)
            self._note_end(key, error, "error retry")
            if self.fatal is None:
                self.fatal = error
            self.wake_peers()
            return None
        else:
            action = self.apply_error_policy(decided, key)
            if requeues is not None:
                requeues.ended(key, again=action is _BACKOFF or action.requeue_after is not None)
            if self.reasons is not None:
                retry = action is _BACKOFF or action.requeue_after is not None
                self._note_end(key, error, "error retry" if retry else None)
        self.wake_peers()
        return ReconcileResult(ref, action, error, duration, obj)

    def _note_end(self, key: str, error: BaseException | None, requeue: str | None) -> None:
        """Tell the reason log how `key`'s run ended (after the scheduler's ``done``)."""
        if self.reasons is not None:
            # Whether the scheduler still holds the key (`Scheduler` and the model answer
            # ``in``; a reason log is only given with one of them, by the Controller).
            again = key in self.scheduler  # type: ignore[operator]
            self.reasons.finished(key, error=error, requeue=requeue if again else None, again=again)

    def log_failure(self, error: BaseException, key: str) -> None:
        if isinstance(error, ReconcileTimeout | ReconcileCancelled):
            log.warning("reconcile of %s: %s", key, error)
        else:
            log.error("reconcile of %s failed: %r", key, error, exc_info=error)

    async def ask_error_policy(self, obj: Any, error: BaseException, key: str) -> Action | None:
        """The user's error policy's answer, awaited when it is a coroutine (it may publish
        an Event or read the API before deciding); None when it fails or answers something
        else than an `Action` (logged): the default backoff then applies."""
        assert self.error_policy is not None
        try:
            answer = self.error_policy(obj, error, self.context)
            if inspect.isawaitable(answer):
                answer = await answer
            if not isinstance(answer, Action):
                raise TypeError(
                    f"error_policy returned {type(answer).__name__} ({answer!r:.100}); "
                    "expected fastctl.Action"
                )
        except asyncio.CancelledError:
            if self.cancelling:
                raise  # the applier is being cancelled: the driver cleans up
            _uncancel()  # the policy cancelled itself: as if it had failed
            log.error("error_policy was cancelled for %s; using the default backoff", key)
            return None
        except Exception:
            log.exception("error_policy failed for %s; using the default backoff", key)
            return None
        return answer

    def apply_error_policy(self, decided: Action | None, key: str) -> Action:
        """Apply the error policy's answer to the scheduler; without one, the scheduler's
        per-key exponential backoff."""
        if decided is not None:
            if decided.requeue_after is None:
                self.scheduler.done(key, now=self.now())
            else:
                self.scheduler.done(
                    key, requeue_after=decided.requeue_after, failed=True, now=self.now()
                )
            return decided
        self.scheduler.done(key, failed=True, now=self.now())
        return _BACKOFF

    async def cancel_running(self) -> None:
        """Cancel every running reconcile, wait for them, and release their slots.

        Outcomes of reconciles that had ended were applied to the scheduler already (their
        requeue or backoff holds); their results are dropped unseen. A thread that is still
        running keeps its key in flight until it returns (see `_run_in_thread`)."""
        self.cancelling = True
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        keys = list(self.running)
        self.running.clear()
        self.scheduler.done_many(keys, now=self.now())
        for key in keys:
            self._note_end(key, None, None)
        self.completed.clear()
        self.wake_peers()

    # -- the loop ---------------------------------------------------------------------------

    async def results(self) -> AsyncIterator[ReconcileResult]:
        self.loop = asyncio.get_running_loop()
        self.now = loop_clock(self.loop)
        self.thread = threading.get_ident()
        if self.tracing is not None:
            self.tracing.bind(self.now)
        if isinstance(self.triggers, Channel):
            self.attach(self.triggers)
        else:
            self.ingest_task = self.loop.create_task(self.ingest(), name="fastctl-applier-ingest")
        if not self.store_ready:
            self.ready_task = self.loop.create_task(
                self.await_store(), name="fastctl-applier-ready"
            )
        _join(self)
        if self.gate is not None:
            self.gate.bind(self.wake_held)
        try:
            while True:
                if self.fatal is not None:
                    raise self.fatal
                while self.completed:
                    yield self.completed.popleft()
                if self.ingest_error is not None:
                    raise self.ingest_error
                stopping = self.triggers_ended
                if self.store_ready and not stopping:
                    self.start_ready()
                if stopping and not self.running and not self.completed:
                    return
                if self.store_ready and not stopping and self._has_free_slot():
                    self.arm_ready_timer()
                else:
                    self.arm_timer(None)
                if self.completed or self.fatal is not None:
                    continue
                self.waiter = self.loop.create_future()
                if self.ingest_task is None:  # fed by a `Channel`: see `kick`
                    # What a reconcile started while parked (in a producer's task) runs
                    # in: a copy of this context, as one started here would.
                    self.parked = contextvars.copy_context()
                try:
                    await self.waiter
                finally:
                    self.waiter = None
        finally:
            if isinstance(self.triggers, Channel):
                self.triggers._detach()
            if self.gate is not None:
                self.gate.bind(None)
            self.arm_timer(None)
            for task in (self.ingest_task, self.ready_task):
                if task is not None and not task.done():
                    task.cancel()
            await self.cancel_running()
            _leave(self)

    def _has_free_slot(self) -> bool:
        return not self.concurrency or len(self.running) < self.concurrency

    def arm_ready_timer(self) -> None:
        """Arm the timer for the next ready key, unless the key was ready already when the
        last pop came back short: then the scheduler's own limit holds it back, and the
        wake-up comes from a reconcile ending (ours or a peer's), not from the clock. A
        timer in the past would fire at once, again and again: a busy loop.

        The time compared is the one taken before that pop, not the clock now: a key that
        became ready since the pop (a slow pop, a loaded machine) was not held back by any
        limit, and with no timer for it nothing would ever wake the driver."""
        at = self.scheduler.next_ready_at()
        if at is not None and self.blocked and at <= self.popped_at:
            at = None
        self.arm_timer(at)


def _is_ready_aware(store: object) -> bool:
    return hasattr(store, "wait_ready") and hasattr(store, "is_ready")


def _uncancel() -> None:
    """Forget a cancellation the reconcile asked for itself (it is reported as an error)."""
    task = asyncio.current_task()
    if task is not None:
        while task.cancelling():
            task.uncancel()


_PEERS: dict[int, list[_Driver]] = {}
"""The appliers running on each scheduler (by ``id``): a key released by one, or by a
thread that outlived its applier, may be what another one waits for."""


def _join(driver: _Driver) -> None:
    """Count `driver` among its scheduler's appliers; the first one sets the scheduler's
    waker (a scheduler without ``_set_waker``, a user's own, has none)."""
    sid = id(driver.scheduler)
    peers = _PEERS.setdefault(sid, [])
    if not peers:
        set_waker = getattr(driver.scheduler, "_set_waker", None)
        if set_waker is not None:
            set_waker(_waker(sid))
    peers.append(driver)


def _leave(driver: _Driver) -> None:
    sid = id(driver.scheduler)
    peers = _PEERS[sid]
    peers.remove(driver)
    if not peers:
        del _PEERS[sid]
        set_waker = getattr(driver.scheduler, "_set_waker", None)
        if set_waker is not None:
            set_waker(None)


def _waker(sid: int) -> Callable[[], None]:
    """What the scheduler calls when a cap changes: wake every applier running on it. By
    the scheduler's ``id``, not the scheduler: it keeps the waker, and a reference back
    would be a cycle the garbage collector cannot see."""

    def wake() -> None:
        for driver in list(_PEERS.get(sid, ())):
            driver.wake_from_any_thread()

    return wake


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
    config: ApplierConfig | None = None,
) -> AsyncIterator[ReconcileResult]:
    """Reconcile the objects named by `triggers`, concurrently, under the rules of docs/contract.md.

    Each reconcile reads its object from `store` when it starts (objects missing from the
    store are skipped). `reconcile(obj, context)` returns an `Action` or ``None`` (await
    change); a plain function runs in `ApplierConfig.executor` (default: the loop's thread
    pool). An
    exception, a wrong return type, or running past `timeout` is an error: `error_policy`
    (``None``: the scheduler's per-key exponential backoff, reset on success) decides when
    to retry. If `store` has ``wait_ready`` (a `fastctl.Store`), nothing starts until it is
    ready; triggers that arrive before are de-duplicated meanwhile.

    When `triggers` ends, no new reconcile starts; the running ones finish and the iterator
    ends. `error_policy` may be a coroutine function: it is awaited in the failed reconcile's
    slot, so the object's next reconcile waits for its answer. Cancelling the iteration
    cancels the running reconciles (a plain function's thread
    cannot be stopped: its key stays in flight until it returns). A reconcile raising
    `KeyboardInterrupt` or `SystemExit` releases its slot, then the iterator raises it.
    `config` states every option once (`ApplierConfig`: also `executor`, and `fair_by` with
    `group_concurrency` for fair shares between tenants); its common fields `concurrency`,
    `debounce` and `timeout` are also keywords: pass those or `config`, not both.
    `scheduler` replaces the default ``config.new_scheduler()`` (for metrics, or to run on
    the pure-Python model; give it the group cap yourself). Close the iterator when you stop
    early (``contextlib.aclosing``) so its reconciles are cancelled at once.
    """
    options = pick(
        config,
        ApplierConfig(concurrency=concurrency, debounce=debounce, timeout=timeout),
        _DEFAULT_CONFIG,
    )
    return _Driver(reconcile, error_policy, context, store, triggers, options, scheduler).results()
