"""One run of a controller: its spec, in the environment it is given.

The run resolves the resources (patiently: an API server that is not up yet is waited
for), opens each watch use from its source, turns events into triggers (the primary's own,
related objects' targets, ``reconcile_all_on``), feeds them through one `Channel` into the
applier (which takes each one as it is put, in the watch's task: `fastctl._applier`), and
yields each reconcile's result. A trigger source that fails ends the
run gracefully (the applier drains) and the run then raises that failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fastctl._applier import SchedulerLike, _Driver
from fastctl._channel import Channel, ChannelClosed
from fastctl._reasons import ReasonLog
from fastctl._tracing import active as tracing_active
from fastctl.kube._events import Recorder
from fastctl.kube._namespaces import Namespaces
from fastctl.kube._owners import controller_uid, owner_of
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._retry import resolve_patiently
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent, watcher
from fastctl.log import RedactingFilter
from fastctl.runtime._failure_events import FailureEvents
from fastctl.runtime._filters import EventFilter, Predicate
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime._read_your_writes import CacheFence
from fastctl.runtime._settled_events import settled
from fastctl.runtime._triggers import RelatedTriggers, primary_triggers
from fastctl.runtime._written import CacheScope
from fastctl.runtime.controller._environment import Environment, ShardAssignment
from fastctl.runtime.controller._spec import PRIMARY, ControllerSpec, Relation, WatchUse
from fastctl.runtime.controller._wrappers import reconcile_view, store_view
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._watch import sharded_events
from fastctl.types import ObjectRef, ReconcileResult, Trigger

if TYPE_CHECKING:
    from fastctl._otel import ControllerTracing

__all__ = ["ControllerRun"]

log = logging.getLogger("fastctl.controller")
log.addFilter(RedactingFilter())  # its records name objects and errors

_REPORT_GRACE = 5.0
"""Seconds a draining controller waits for its Events about failed reconciles to be sent."""

Triggers = Channel[ObjectRef | Trigger]


class ControllerRun:
    """The state of one run: the trigger channel, the watch tasks, the resolved primary.

    `store` is the primary cache (the controller's own, or the one of a watch the
    environment shares); `scheduler`, `counters` and `reasons` are the controller's, kept
    across runs for metrics and ``inspect``."""

    def __init__(
        self,
        spec: ControllerSpec,
        env: Environment,
        *,
        store: Store,
        scheduler: SchedulerLike,
        counters: ReconcileCounters,
        reasons: ReasonLog | None,
    ) -> None:
        self.spec = spec
        self.env = env
        self.store = store
        self.scheduler = scheduler
        self.counters = counters
        self.reasons = reasons
        self.triggers: Triggers = Channel(maxsize=1024)
        self.resolved: ResolvedResource | None = None
        self.own_writes: OwnWrites | None = None
        self.fence: CacheFence | None = None
        self._resolving: asyncio.Task[None] | None = None
        self._stopping = False
        self._driver: _Driver | None = None
        self.tracing: ControllerTracing | None = None
        """The spans of this run (watch events, reconciles), while tracing is on."""

    def stop(self) -> None:
        """No new reconciles; running ones finish; `results()` ends."""
        self._stopping = True
        self.triggers.close()
        if self._resolving is not None:  # still waiting for the API server: stop waiting
            self._resolving.cancel()

    def running_keys(self) -> list[str]:
        """The objects whose reconciles are running, sorted."""
        return sorted(self._driver.running) if self._driver is not None else []

    async def results(self) -> AsyncIterator[ReconcileResult]:
        """Run, yielding each reconcile's result as it finishes."""
        spec, env = self.spec, self.env
        triggers = self.triggers
        tasks: list[asyncio.Task[None]] = []
        events = self._failure_events()
        reports = events.tasks if events is not None else set()
        try:
            if self._stopping:
                return  # stopped before it started: not even discovery
            tracing = tracing_active()
            if tracing is not None:
                self.tracing = tracing.controller(spec.name, spec.resource.kind)
            loop = asyncio.get_running_loop()
            self._resolving = loop.create_task(self._resolve_resources())
            try:
                await self._resolving
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stopping and (current is None or not current.cancelling()):
                    return  # stopped while waiting for the API server: nothing to drain
                raise
            finally:
                self._resolving = None
            if spec.ignore_own_writes:
                self.own_writes = OwnWrites(spec.resources)
            if spec.read_your_writes.enabled:
                self.fence = CacheFence(
                    self._caches(),
                    spec.namespace,
                    spec.read_your_writes,
                    self.counters,
                    scopes=self._cache_scopes(),
                )
            shard = env.shard.gate if env.shard is not None else None
            if shard is not None:
                shard.bind(loop)
            own = env.shard is None and PRIMARY not in env.sources  # the run opens its watches
            folded = [  # relations read off the primary's watch (`shares_primary_watch`)
                rel
                for use, rel in zip(spec.watch_uses()[1:], spec.relations, strict=True)
                if own and use.use not in env.sources and spec.shares_primary_watch(rel)
            ]
            primary = self._watch_primary([(r, self._related_triggers(r)) for r in folded])
            tasks.append(loop.create_task(primary, name=f"{spec.name}:primary"))
            for use, rel in zip(spec.watch_uses()[1:], spec.relations, strict=True):
                if rel in folded:  # read off the primary's watch
                    continue
                tasks.append(
                    loop.create_task(
                        self._watch_related(use, rel), name=f"{spec.name}:{rel.resource.kind}"
                    )
                )
            for source in spec.resync_sources:
                tasks.append(loop.create_task(self._resync(source), name=f"{spec.name}:resync"))
            for refs in spec.trigger_sources:
                name = f"{spec.name}:reconcile_on"
                tasks.append(loop.create_task(self._trigger(refs), name=name))
            failures: list[BaseException] = []
            for task in tasks:
                task.add_done_callback(lambda t: _stop_on_failure(t, triggers, failures))
            driver = _Driver(
                reconcile_view(
                    spec.reconcile,
                    own_writes=self.own_writes,
                    fence=self.fence,
                    shard=shard,
                    fresh_reads=isinstance(self.store, Store),
                ),
                spec.error_policy,
                spec.context,
                store_view(
                    self.store,
                    leader_gate=env.leader_gate,
                    shard=shard,
                    caches=[c.store for c in spec.caches],
                ),
                triggers,
                spec.config,
                self.scheduler,
                # Reasons need a scheduler that answers `in` (a user's own may not).
                self.reasons if hasattr(type(self.scheduler), "__contains__") else None,
                gate=self.fence,
                on_requeue_held=self.counters.requeue_held,
                tracing=self.tracing,
                observe=self.fence.begin if self.fence is not None else None,
            )
            self._driver = driver
            async for result in driver.results():
                self.counters.count(
                    error=result.error is not None, requeue_after=result.action.requeue_after
                )
                if events is not None:
                    events.saw(result)
                yield result
            if reports:  # drained: let the last Events go out (briefly; they are best effort)
                await asyncio.wait(reports, timeout=_REPORT_GRACE)
            if failures:
                # A trigger source died (a fatal watch error such as a bad selector, or a
                # reconcile_all_on iterable that raised): the applier has drained; say why.
                raise failures[0]
        finally:
            triggers.close()
            for task in [*tasks, *reports]:
                task.cancel()
            await asyncio.gather(*tasks, *reports, return_exceptions=True)

    def _caches(self) -> dict[tuple[str, str], Store]:
        """The caches the reconcile reads, by (group, kind): the primary's, and those of
        the related resources added with ``cache=True``."""
        caches = {
            (r.resource.group, r.resource.kind): r.cache.store
            for r in self.spec.relations
            if r.cache is not None
        }
        caches[(self.spec.resource.group, self.spec.resource.kind)] = self.store
        return caches

    def _cache_scopes(self) -> dict[tuple[str, str], CacheScope]:
        """What each cached related resource watches (its namespace and label selector),
        so that a write the cache will never show is not waited for."""
        spec = self.spec
        return {
            (r.resource.group, r.resource.kind): CacheScope(
                r.namespace_in(spec),
                LabelSelector.parse(r.label_selector) if r.label_selector else None,
            )
            for r in spec.relations
            if r.cache is not None
        }

    async def _resolve_resources(self) -> None:
        """Resolve the primary and related resources, patiently: an API server that is not
        up yet is waited for (the controller is not ready meanwhile); an unknown kind still
        fails here, clearly, after a few lookups (`resolve_patiently`)."""
        client = self.env.client
        if self.env.shard is not None and isinstance(self.spec.namespace, Namespaces):
            raise ValueError(
                f"controller {self.spec.name}: a sharded controller watches one namespace "
                f"or all, not {self.spec.namespace}"
            )
        self.resolved = await resolve_patiently(
            client, self.spec.resource, on_error=self.on_watch_error
        )
        for rel in self.spec.relations:
            await resolve_patiently(client, rel.resource, on_error=self.on_watch_error)

    def _failure_events(self) -> FailureEvents | None:
        """Warning Events on failed reconciles (`ApplierConfig.failure_events`), through
        the controller's recorder or one named after the controller."""
        spec = self.spec
        if not spec.config.failure_events:
            return None
        recorder = spec.recorder
        if recorder is None:
            recorder = Recorder(self.env.client, reporting_controller(spec.name))
        return FailureEvents(recorder, spec.name)

    def on_watch_error(self, exc: BaseException) -> None:
        """The watcher retries by itself; count what it retried, for metrics."""
        self.counters.watch_errors += 1

    def _sharded_events(self, shard: ShardAssignment) -> AsyncIterator[WatchEvent]:
        """The primary watch of the served slots, restarted when they change."""
        spec, gate = self.spec, shard.gate

        def make(selector: str, keep: Callable[[dict[str, Any]], bool]) -> Any:
            return watcher(
                self.env.client,
                self.resolved or spec.resource,
                namespace=spec.namespace if isinstance(spec.namespace, str) else None,
                config=spec.watch_config,
                on_error=self.on_watch_error,
                shard_selector=selector,
                shard_filter=keep,
            )

        events = sharded_events(
            shard.member, gate.slots, gate.key, make, gate.in_slots, on_restart=gate.restarted
        )
        return _counted(events, gate)

    def _primary_events(self) -> AsyncIterator[WatchEvent]:
        """The primary's events, applied to `store` (by the run itself, unless a shared
        watch already did)."""
        shard = self.env.shard
        if shard is not None:
            return reflector(self.store, self._sharded_events(shard))
        source = self.env.source(self.spec.watch_uses()[0])
        events = source.events(self.on_watch_error)
        return events if source.store is not None else reflector(self.store, events)

    async def _watch_primary(self, folded: list[tuple[Relation, RelatedTriggers]]) -> None:
        spec = self.spec  # `folded`: relations of the primary's kind read off its watch
        events = self._primary_events()
        event_filter = self._event_filter(spec.event_filter, spec.resource)
        if self.own_writes is not None:
            events = settled(self.own_writes, spec.resource, events)
        saw = self.fence.saw(spec.resource) if self.fence is not None else None
        tracing = self.tracing
        try:
            async for event in events:
                if saw is not None:  # before its triggers: a woken key sees this event
                    saw(event)
                triggers = primary_triggers(event, self.store, event_filter)
                if tracing is not None:  # each trigger carries a link to its event
                    triggers = tracing.primary(event, triggers)
                for trigger in triggers:
                    await self.triggers.put(trigger)
                for rel, related in folded:  # the owners of a changed object of its kind
                    made = related.on_event(event)
                    triggers = made
                    if tracing is not None and made:
                        triggers = tracing.related(rel.resource.kind, True, event, made)
                    for trigger in triggers:
                        await self.triggers.put(trigger)
        except ChannelClosed:
            return

    def _related_triggers(self, rel: Relation) -> RelatedTriggers:
        return RelatedTriggers(
            rel.mapper if rel.mapper is not None else self._owner_of,
            rel.reason,
            controller=self.spec.name,
            kind=rel.resource.kind,
            index=rel.cache is not None,
            event_filter=self._event_filter(rel.event_filter, rel.resource),
            metadata_mapper=rel.mapper is None,
        )

    async def _watch_related(self, use: WatchUse, rel: Relation) -> None:
        related = self._related_triggers(rel)
        source = self.env.source(use)
        events = source.events(self.on_watch_error)
        if rel.cache is not None:
            rel.cache._bind(related)
            if source.store is None:  # a shared watch fills its own store
                events = reflector(rel.cache.store, events)
        if self.own_writes is not None:
            events = settled(self.own_writes, rel.resource, events)
        shard = self.env.shard
        fence = self.fence if rel.cache is not None else None  # only what is read cached
        saw = fence.saw(rel.resource) if fence is not None else None
        tracing = self.tracing
        try:
            async for event in events:
                if saw is not None:
                    saw(event)
                made = related.on_event(event)
                triggers: Iterable[ObjectRef | Trigger] = made
                if tracing is not None and made:  # each carries a link to its event
                    triggers = tracing.related(rel.resource.kind, rel.mapper is None, event, made)
                for trigger in triggers:
                    if shard is not None and not self._related_served(
                        shard.gate, rel, event, trigger
                    ):
                        continue
                    await self.triggers.put(trigger)
        except ChannelClosed:
            return

    def _event_filter(self, predicate: Predicate | None, resource: Resource) -> EventFilter | None:
        """The filter state of one watch: `predicate`, and the own-writes echoes."""
        if predicate is None and self.own_writes is None:
            return None
        return EventFilter(
            predicate,
            controller=self.spec.name,
            kind=resource.kind,
            own_writes=self.own_writes,
            on_error=self._on_filter_error,
        )

    def _on_filter_error(self) -> None:
        self.counters.event_filter_errors += 1

    def _related_served(
        self, gate: ShardGate, rel: Relation, event: WatchEvent, trigger: ObjectRef | Trigger
    ) -> bool:
        """Sharded: keep a related object's trigger only if its target's slot is served
        here. An owned object names its owner's UID; otherwise the target's namespace
        (key ``namespace``) or the cached target (key ``uid``) tells."""
        ref = trigger.ref if isinstance(trigger, Trigger) else trigger
        if rel.mapper is None and gate.key == "uid" and isinstance(event, ObjectEvent):
            uid = controller_uid({"metadata": event._meta()}, ref.name)
            if uid is not None:
                return gate.member.serves(gate.slot_of(uid))
        return gate.admits_ref(ref, self.store)

    def _owner_of(self, obj: Mapping[str, Any]) -> list[ObjectRef]:
        namespaced = self.resolved.namespaced if self.resolved is not None else True
        return owner_of(obj, self.spec.resource, namespaced=namespaced)

    async def _resync(self, source: AsyncIterable[Any]) -> None:
        try:
            async for _ in source:
                for ref in list(self.store):
                    await self.triggers.put(Trigger(ref, reason="reconcile_all_on"))
        except ChannelClosed:
            return

    async def _trigger(self, source: AsyncIterable[ObjectRef]) -> None:
        try:
            async for ref in source:
                if not isinstance(ref, ObjectRef):
                    raise TypeError(
                        f"reconcile_on of {self.spec.name} yielded {type(ref).__name__} "
                        f"{ref!r}: expected an ObjectRef"
                    )
                await self.triggers.put(Trigger(ref, reason="reconcile_on"))
        except ChannelClosed:
            return


def reporting_controller(name: str) -> str:
    """``fastctl/<name>``: the Events' ``reportingController`` (a qualified name: the
    controller's name with what the API server refuses replaced, cut to 63 characters)."""
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "-" for c in name)
    safe = safe[:63].strip("-_.")
    return f"fastctl/{safe or 'controller'}"


async def _counted(events: AsyncIterator[WatchEvent], gate: ShardGate) -> AsyncIterator[WatchEvent]:
    """Count what a sharded watch delivers: list items and watch events apart."""
    async for event in events:
        if event.kind is EventKind.INIT_APPLY:
            gate.listed += 1
        elif isinstance(event, ObjectEvent):
            gate.received += 1
        yield event


def _stop_on_failure(
    task: asyncio.Task[None], triggers: Triggers, failures: list[BaseException]
) -> None:
    """A trigger source that fails ends the controller (gracefully) instead of leaving it
    running deaf to changes."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("%s failed: %r; stopping the controller", task.get_name(), exc)
        failures.append(exc)
        triggers.close()
