"""`fastctl.Controller`: the applier bound to Kubernetes watches and a cache.

A controller watches its primary resource into a `Store` (the reflector), and turns every
change into a trigger for that object; `owns` and `watches` add watches of related
resources whose changes trigger the objects they map to; `reconcile_all_on` re-triggers
every cached object whenever an external stream yields. All triggers flow through one
bounded `Channel` into the applier, which runs the reconciles on its own `Scheduler`.

A (re)list triggers its objects only once it is complete and the store has swapped it in
(`fastctl.runtime._triggers`), so a reconcile never reads the cache from before the list;
those triggers get priority -100, so that after a restart the live changes are served
before the backlog of objects that merely exist (as controller-runtime does).

Given a `CustomResource` model instead of a `Resource`, the controller watches the model's
resource and each reconcile gets a validated instance (`fastctl.runtime._typed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio.client import ApiClient

from fastctl._applier import DEFAULT_CONCURRENCY, ApplierConfig, SchedulerLike, applier
from fastctl._channel import Channel, ChannelClosed
from fastctl._fair import FairBy
from fastctl._options import pick
from fastctl.errors import InvalidObject
from fastctl.kube._events import Recorder
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._retry import resolve_patiently
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, WatchConfig, WatchEvent, watcher
from fastctl.log import RedactingFilter
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._shared_watch import SharedWatch
from fastctl.runtime._triggers import INITIAL_LIST_PRIORITY, RelatedTriggers, primary_triggers
from fastctl.runtime._typed import is_model, typed_reconcile
from fastctl.runtime.sharding._gate import ShardedStore, ShardGate
from fastctl.runtime.sharding._watch import ServingSet, sharded_events
from fastctl.types import ErrorPolicy, Mapper, ObjectRef, Reconcile, ReconcileResult, Trigger

if TYPE_CHECKING:
    from fastctl._core import SchedulerStats
    from fastctl.kube._model import CustomResource

__all__ = ["INITIAL_LIST_PRIORITY", "Controller"]

log = logging.getLogger("fastctl.controller")
log.addFilter(RedactingFilter())  # its records name objects and errors

_DEFAULT_CONFIG = ApplierConfig()
_DEFAULT_WATCH_CONFIG = WatchConfig(strip_managed_fields=True)
"""A controller's cache drops managedFields unless told otherwise (see `Controller`)."""

_REPORT_GRACE = 5.0
"""Seconds a draining controller waits for its Events about invalid objects to be sent."""

EventSource = Callable[[], AsyncIterator[WatchEvent]]
"""Makes the event stream of one watched resource (the Manager shares these)."""


@dataclass(frozen=True, slots=True)
class _Relation:
    """A watched resource and how its objects map to primary objects."""

    resource: Resource
    mapper: Mapper | None  # None: follow controller owner references to the primary
    reason: str


class Controller:
    """Reconciles every object of one primary `resource` (docs/contract.md, "Controllers").

    ``reconcile(obj, ctx)`` gets the parsed JSON object (a dict) as it is in the cache when
    the reconcile starts, and returns `Action` or ``None``. The cache drops
    ``metadata.managedFields`` (`strip_managed_fields`, on by default): reconcilers rarely
    read it, server-side apply does not need it, and it is about half of a typical object.
    The builder methods return the controller, so they chain::

        ctl = Controller(client, Resource("example.com/v1", "Widget"), reconcile)
        ctl.owns(Resource("v1", "ConfigMap"))
        await ctl.run()

    With a `CustomResource` subclass as `resource` (``Controller(client, Widget, rec)``),
    ``rec`` gets a ``Widget`` validated from the cached object when the reconcile starts;
    an object that fails validation fails its reconcile with `InvalidObject` (logged, the
    error policy applies, and a Warning Event ``InvalidObject`` when `recorder` is given);
    the others reconcile on. The error policy and `ReconcileResult.obj` see the JSON object.
    """

    def __init__(
        self,
        client: ApiClient,
        resource: Resource | type[CustomResource],
        reconcile: Reconcile,
        *,
        context: Any = None,
        error_policy: ErrorPolicy | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        debounce: float = 0.0,
        timeout: float | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        name: str | None = None,
        executor: Executor | None = None,
        fair_by: FairBy | None = None,
        scheduler: SchedulerLike | None = None,
        strip_managed_fields: bool = True,
        config: ApplierConfig | None = None,
        watch_config: WatchConfig | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        """`concurrency`, `debounce`, `timeout`, `executor` and `fair_by` are the fields of
        `ApplierConfig` (`fair_by="namespace"`, or a function of the object returning its
        group, serves tenants in turn instead of first come, first served);
        `label_selector` and `strip_managed_fields` are those of `WatchConfig` (for the
        primary resource; related resources are watched without the selector): pass each
        group as keywords or as one object (`config`, `watch_config`), not both.
        `scheduler` replaces the default one built from `config` (for metrics or the model).
        `recorder` publishes Warning Events about objects a typed controller cannot parse.
        """
        if not callable(reconcile):
            raise TypeError(f"reconcile must be callable, got {type(reconcile).__name__}")
        self.model: type[CustomResource] | None = None
        if is_model(resource):
            self.model = resource  # type: ignore[assignment]
            resource = resource.resource()  # type: ignore[union-attr]
            reconcile = typed_reconcile(self.model, reconcile)  # type: ignore[arg-type]
        if not isinstance(resource, Resource):
            raise TypeError(
                "resource must be a fastctl.Resource or a CustomResource model, "
                f"got {type(resource).__name__}"
            )
        self.client = client
        self.resource = resource
        self.reconcile = reconcile
        self.recorder = recorder
        self.context = context
        self.error_policy = error_policy
        self.config = pick(
            config,
            ApplierConfig(
                concurrency=concurrency,
                debounce=debounce,
                timeout=timeout,
                executor=executor,
                fair_by=fair_by,
            ),
            _DEFAULT_CONFIG,
        )
        self.watch_config = pick(
            watch_config,
            WatchConfig(label_selector=label_selector, strip_managed_fields=strip_managed_fields),
            _DEFAULT_WATCH_CONFIG,
            name="watch_config",
        )
        self.namespace = namespace
        self._name = name or f"{resource.kind.lower()}"
        self.scheduler: SchedulerLike = (
            scheduler if scheduler is not None else self.config.new_scheduler()
        )
        self.store = Store()
        self._counters = ReconcileCounters()
        self._relations: list[_Relation] = []
        self._resync_sources: list[AsyncIterable[Any]] = []
        self._triggers: Channel[ObjectRef | Trigger] | None = None
        self._shutdown_requested = False
        self._running = False
        self._resolved: ResolvedResource | None = None
        self._resolving: asyncio.Task[None] | None = None
        self._event_sources: dict[Resource, EventSource] = {}
        self._primary_shared = False
        self._gate: asyncio.Event | None = None
        self._shard: ShardGate | None = None
        self._shard_member: ServingSet | None = None

    # -- builder ----------------------------------------------------------------------------

    def owns(self, resource: Resource) -> Controller:
        """Also watch `resource`; a change to an object with a controller owner reference to
        a primary object triggers that owner (e.g. the ConfigMaps a Widget renders)."""
        self._check_not_running()
        self._relations.append(_Relation(resource, None, f"owned {resource.kind} changed"))
        return self

    def watches(self, resource: Resource, mapper: Mapper) -> Controller:
        """Also watch `resource`; each change triggers the primary objects `mapper` returns."""
        self._check_not_running()
        if not callable(mapper):
            raise TypeError(f"mapper must be callable, got {type(mapper).__name__}")
        self._relations.append(_Relation(resource, mapper, f"watched {resource.kind} changed"))
        return self

    def reconcile_all_on(self, source: AsyncIterable[Any]) -> Controller:
        """Each item `source` yields re-triggers every cached object (e.g. a config reload
        or a periodic timer)."""
        self._check_not_running()
        self._resync_sources.append(source)
        return self

    def _check_not_running(self) -> None:
        if self._running:
            raise RuntimeError(f"controller {self.name} is running: configure it before")

    # -- what the Manager and metrics see (the underscored hooks are theirs alone) --------

    @property
    def name(self) -> str:
        """The controller's name (metrics label, logs); default: the kind in lower case."""
        return self._name

    @property
    def concurrency(self) -> int:
        return self.config.concurrency

    @property
    def label_selector(self) -> str | None:
        """The primary resource's label selector (`WatchConfig.label_selector`)."""
        return self.watch_config.label_selector

    def _scheduler_stats(self) -> SchedulerStats:
        return self.scheduler.stats()

    @property
    def resources(self) -> list[Resource]:
        """Every resource this controller watches: the primary first."""
        return [self.resource, *(rel.resource for rel in self._relations)]

    @property
    def owned(self) -> list[Resource]:
        """The resources added with `owns` (what the reconcile writes, for RBAC)."""
        return [rel.resource for rel in self._relations if rel.mapper is None]

    def _use_shared_watch(self, resource: Resource, shared: SharedWatch) -> None:
        """Take `resource`'s events from `shared` instead of opening a watch of its own (the
        Manager shares one watch and one cache per resource among its controllers). For the
        primary resource the shared store becomes this controller's cache."""
        self._check_not_running()
        self._event_sources[resource] = shared.subscribe(on_error=self._on_watch_error)
        if resource == self.resource:
            self.store = shared.store
            self._primary_shared = True

    def _gate_on(self, open_: asyncio.Event) -> None:
        """Start no reconcile until `open_` is set (the Manager's leader election: followers
        keep their caches warm and their triggers queued, and reconcile once leading)."""
        self._check_not_running()
        self._gate = open_

    def _shard_on(self, gate: ShardGate, member: ServingSet) -> None:
        """Reconcile only the objects of the slots `member` serves (the Manager's
        sharding): the primary watch lists just those, and `gate` checks each reconcile
        as it starts and counts it for the member's drains."""
        self._check_not_running()
        self._shard = gate
        self._shard_member = member

    @property
    def shard(self) -> ShardGate | None:
        """The shard gate when the Manager shards this controller's objects."""
        return self._shard

    @property
    def is_ready(self) -> bool:
        """True once the primary cache holds its first complete list."""
        return self.store.is_ready

    # -- running ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop gracefully: no new reconciles start; running ones finish; `stream()` ends."""
        self._shutdown_requested = True
        if self._triggers is not None:
            self._triggers.close()
        if self._resolving is not None:  # still waiting for discovery: stop waiting
            self._resolving.cancel()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run until `shutdown()`, or SIGTERM or SIGINT when `handle_signals` (a second
        signal cancels at once). A Manager runs its controllers with its own handling."""
        if not handle_signals:
            async for _ in self.stream():
                pass
            return
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        installed: list[signal.Signals] = []
        signals_seen = 0

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen == 1:
                log.info("controller %s: shutting down (signal); again to cancel", self.name)
                self.shutdown()
            elif task is not None:
                task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal)
                installed.append(sig)
        try:
            async for _ in self.stream():
                pass
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def stream(self) -> AsyncIterator[ReconcileResult]:
        """Run the controller, yielding each reconcile's result as it finishes."""
        self._check_not_running()
        self._running = True
        self._triggers = triggers = Channel[ObjectRef | Trigger](maxsize=1024)
        if self._shutdown_requested:
            triggers.close()
        tasks: list[asyncio.Task[None]] = []
        reports: set[asyncio.Task[None]] = set()  # Events about invalid objects
        try:
            if self._shutdown_requested:
                return  # stopped before it started: not even discovery
            loop = asyncio.get_running_loop()
            self._resolving = loop.create_task(self._resolve_resources())
            try:
                await self._resolving
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._shutdown_requested and (current is None or not current.cancelling()):
                    return  # shutdown() while waiting for the API server: nothing to drain
                raise
            finally:
                self._resolving = None
            tasks.append(
                loop.create_task(self._watch_primary(triggers), name=f"{self.name}:primary")
            )
            for rel in self._relations:
                tasks.append(
                    loop.create_task(
                        self._watch_related(rel, triggers),
                        name=f"{self.name}:{rel.resource.kind}",
                    )
                )
            for source in self._resync_sources:
                tasks.append(
                    loop.create_task(self._resync(source, triggers), name=f"{self.name}:resync")
                )
            failures: list[BaseException] = []
            for task in tasks:
                task.add_done_callback(lambda t: _stop_on_failure(t, triggers, failures))
            counters = self._counters
            reconcile = self.reconcile
            store: Mapping[ObjectRef, Any] = self.store
            if self._gate is not None:
                store = _GatedStore(self.store, self._gate)
            if self._shard is not None:
                self._shard.bind(loop)
                reconcile = self._shard.track(reconcile)
                store = ShardedStore(self.store, self._shard)
            async for result in applier(
                reconcile,
                self.error_policy,
                self.context,
                store,
                triggers,
                config=self.config,
                scheduler=self.scheduler,
            ):
                counters.count(
                    error=result.error is not None, requeue_after=result.action.requeue_after
                )
                if isinstance(result.error, InvalidObject) and self.recorder is not None:
                    report = loop.create_task(self._report_invalid(result))
                    reports.add(report)
                    report.add_done_callback(reports.discard)
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
            self._running = False

    async def _resolve_resources(self) -> None:
        """Resolve the primary and related resources, patiently: an API server that is not
        up yet is waited for (the controller is not ready meanwhile); an unknown kind still
        fails here, clearly, after a few lookups (`resolve_patiently`)."""
        self._resolved = await resolve_patiently(
            self.client, self.resource, on_error=self._on_watch_error
        )
        for rel in self._relations:
            await resolve_patiently(self.client, rel.resource, on_error=self._on_watch_error)

    async def _report_invalid(self, result: ReconcileResult) -> None:
        """A Warning Event on an object the model rejects, so ``kubectl describe`` says why
        it is not reconciled (best effort: a failure to publish is only logged)."""
        assert self.recorder is not None
        try:
            await self.recorder.publish(
                result.obj,
                type="Warning",
                reason="InvalidObject",
                note=str(result.error),
                action="Reconcile",
            )
        except Exception as exc:
            log.warning("controller %s: no Event for %s: %r", self.name, result.ref, exc)

    def _events(self, resource: Resource) -> AsyncIterator[WatchEvent]:
        source = self._event_sources.get(resource)
        if source is not None:
            return source()
        return watcher(
            self.client,
            resource,
            namespace=self.namespace,
            config=self._watch_config_for(resource),
            on_error=self._on_watch_error,
        )

    def _watch_config_for(self, resource: Resource) -> WatchConfig:
        """The primary resource is watched with `watch_config`; related ones without its
        selectors (they select primary objects, not the objects related to them)."""
        if resource == self.resource:
            return self.watch_config
        return replace(self.watch_config, label_selector=None, field_selector=None)

    def _on_watch_error(self, exc: BaseException) -> None:
        """The watcher retries by itself; count what it retried, for metrics."""
        self._counters.watch_errors += 1

    def _sharded_events(self, gate: ShardGate, member: ServingSet) -> AsyncIterator[WatchEvent]:
        """The primary watch of the served slots, restarted when they change."""

        def make(selector: str, keep: Callable[[dict[str, Any]], bool]) -> Any:
            return watcher(
                self.client,
                self._resolved or self.resource,
                namespace=self.namespace,
                config=self.watch_config,
                on_error=self._on_watch_error,
                shard_selector=selector,
                shard_filter=keep,
            )

        return sharded_events(
            member, gate.slots, gate.key, make, gate.in_slots, on_restart=gate.restarted
        )

    async def _watch_primary(self, triggers: Channel[ObjectRef | Trigger]) -> None:
        gate, member = self._shard, self._shard_member
        if gate is not None and member is not None:
            events = reflector(self.store, _counted(self._sharded_events(gate, member), gate))
        else:
            events = self._events(self.resource)
        if not self._primary_shared and gate is None:
            events = reflector(self.store, events)
        store = self.store
        try:
            async for event in events:
                for trigger in primary_triggers(event, store):
                    await triggers.put(trigger)
        except ChannelClosed:
            return

    async def _watch_related(self, rel: _Relation, triggers: Channel[ObjectRef | Trigger]) -> None:
        related = RelatedTriggers(
            rel.mapper if rel.mapper is not None else self._owner_of,
            rel.reason,
            controller=self.name,
            kind=rel.resource.kind,
        )
        try:
            async for event in self._events(rel.resource):
                for trigger in related.on_event(event):
                    if self._shard is not None and not self._related_served(rel, event, trigger):
                        continue
                    await triggers.put(trigger)
        except ChannelClosed:
            return

    def _related_served(
        self, rel: _Relation, event: WatchEvent, trigger: ObjectRef | Trigger
    ) -> bool:
        """Sharded: keep a related object's trigger only if its target's slot is served
        here. An owned object names its owner's UID; otherwise the target's namespace
        (key ``namespace``) or the cached target (key ``uid``) tells."""
        gate = self._shard
        assert gate is not None
        ref = trigger.ref if isinstance(trigger, Trigger) else trigger
        if rel.mapper is None and gate.key == "uid" and event.obj is not None:
            uid = _controller_uid(event.obj, ref.name)
            if uid is not None:
                return gate.member.serves(gate.slot_of(uid))
        return gate.admits_ref(ref, self.store)

    def _owner_of(self, obj: Mapping[str, Any]) -> list[ObjectRef]:
        """The primary object that controls `obj` (its ``controller: true`` owner reference
        of the primary kind), in `obj`'s namespace when the primary is namespaced."""
        resolved = self._resolved
        meta = obj.get("metadata") or {}
        for owner in meta.get("ownerReferences") or ():
            if not owner.get("controller"):
                continue
            if owner.get("kind") != self.resource.kind:
                continue
            group = str(owner.get("apiVersion", "")).rpartition("/")[0]
            if group != self.resource.group:
                continue
            namespaced = resolved.namespaced if resolved is not None else True
            return [ObjectRef(owner["name"], meta.get("namespace") if namespaced else None)]
        return []

    async def _resync(
        self, source: AsyncIterable[Any], triggers: Channel[ObjectRef | Trigger]
    ) -> None:
        try:
            async for _ in source:
                for ref in list(self.store):
                    await triggers.put(Trigger(ref, reason="reconcile_all_on"))
        except ChannelClosed:
            return


def _controller_uid(obj: Mapping[str, Any], name: str) -> str | None:
    """The UID of `obj`'s controller owner named `name`."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller") and owner.get("name") == name and owner.get("uid"):
            return str(owner["uid"])
    return None


async def _counted(events: AsyncIterator[WatchEvent], gate: ShardGate) -> AsyncIterator[WatchEvent]:
    """Count what a sharded watch delivers: list items and watch events apart."""
    async for event in events:
        if event.kind is EventKind.INIT_APPLY:
            gate.listed += 1
        elif event.obj is not None:
            gate.received += 1
        yield event


def _stop_on_failure(
    task: asyncio.Task[None],
    triggers: Channel[ObjectRef | Trigger],
    failures: list[BaseException],
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


class _GatedStore(Mapping[ObjectRef, Any]):
    """A store that is not ready until its gate opens: the applier queues (and de-duplicates)
    triggers meanwhile, and starts reconciling when both the cache and the gate are ready."""

    def __init__(self, store: Store, gate: asyncio.Event) -> None:
        self._store = store
        self._gate = gate

    @property
    def is_ready(self) -> bool:
        return self._gate.is_set() and self._store.is_ready

    async def wait_ready(self) -> None:
        await self._gate.wait()
        await self._store.wait_ready()

    def __getitem__(self, ref: ObjectRef) -> Any:
        return self._store[ref]

    def get(self, ref: ObjectRef, default: Any = None) -> Any:
        return self._store.get(ref, default)

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)
