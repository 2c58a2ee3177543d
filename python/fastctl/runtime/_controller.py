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

With ``cache=True``, `owns` and `watches` also keep the related objects, and the reconcile
reads them (`RelatedCache`, ``fastctl.runtime._children``) instead of asking the API
server; with ``metadata_only=True`` the related watch lists and watches
``PartialObjectMetadata`` (names, labels, owners and versions, no body).

Given a `CustomResource` model instead of a `Resource`, the controller watches the model's
resource and each reconcile gets a validated instance (`fastctl.runtime._typed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio.client import ApiClient

from fastctl._applier import DEFAULT_CONCURRENCY, ApplierConfig, SchedulerLike, _Driver
from fastctl._channel import Channel, ChannelClosed
from fastctl._fair import FairBy
from fastctl._options import pick
from fastctl._reasons import ReasonLog
from fastctl.errors import InvalidObject
from fastctl.kube._events import Recorder
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._retry import resolve_patiently
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, WatchConfig, WatchEvent, watcher
from fastctl.log import RedactingFilter
from fastctl.runtime._children import RelatedCache
from fastctl.runtime._filters import EventFilter, Predicate, check_predicate
from fastctl.runtime._inspect import ObjectInspection, QueueSummary, inspect_key, summarize
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._own_writes import OwnWrites
from fastctl.runtime._settled_events import settled
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
    cache: RelatedCache | None = None  # cache=True: the objects, for the reconcile
    metadata_only: bool = False
    event_filter: Predicate | None = None


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
        group_concurrency: int = 0,
        scheduler: SchedulerLike | None = None,
        strip_managed_fields: bool = True,
        config: ApplierConfig | None = None,
        watch_config: WatchConfig | None = None,
        recorder: Recorder | None = None,
        event_filter: Predicate | None = None,
        ignore_own_writes: bool = False,
    ) -> None:
        """`concurrency`, `debounce`, `timeout`, `executor`, `fair_by` and
        `group_concurrency` are the fields of `ApplierConfig` (`fair_by="namespace"`, or a
        function of the object returning its group, serves tenants in turn instead of first
        come, first served; `group_concurrency=N` with it runs at most N reconciles of one
        group at once, so a tenant whose reconciles are slow cannot take every slot);
        `label_selector` and `strip_managed_fields` are those of `WatchConfig` (for the
        primary resource; related resources are watched without the selector): pass each
        group as keywords or as one object (`config`, `watch_config`), not both.
        `scheduler` replaces the default one built from `config` (for metrics or the model).
        `recorder` publishes Warning Events about objects a typed controller cannot parse.
        `event_filter` (a predicate ``(old, new) -> bool``, e.g. `generation_changed`)
        decides which changes of a primary object trigger it; `ignore_own_writes` holds
        back the watch events of the writes this controller's reconciles make to the
        objects it watches (docs/authoring.md, "Event filters").
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
        self.event_filter = check_predicate(event_filter, "Controller")
        self.ignore_own_writes = bool(ignore_own_writes)
        self._own_writes: OwnWrites | None = None
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
                group_concurrency=group_concurrency,
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
        self._reasons: ReasonLog | None = None
        """Why each queued object is queued, for `inspect`, once `record_reasons` is on."""
        self._relations: list[_Relation] = []
        self._resync_sources: list[AsyncIterable[Any]] = []
        self._triggers: Channel[ObjectRef | Trigger] | None = None
        self._shutdown_requested = False
        self._running = False
        self._resolved: ResolvedResource | None = None
        self._resolving: asyncio.Task[None] | None = None
        # One source per use (None: the primary watch; i: relation i), not per resource:
        # two relations on one resource each need their own subscription to a shared watch.
        self._event_sources: dict[int | None, EventSource] = {}
        self._primary_shared = False
        self._gate: asyncio.Event | None = None
        self._shard: ShardGate | None = None
        self._shard_member: ServingSet | None = None

    # -- builder ----------------------------------------------------------------------------

    def owns(
        self,
        resource: Resource,
        *,
        cache: bool = False,
        metadata_only: bool = False,
        event_filter: Predicate | None = None,
    ) -> Controller:
        """Also watch `resource`; a change to an object with a controller owner reference to
        a primary object triggers that owner (e.g. the ConfigMaps a Widget renders).

        `cache` keeps the objects for the reconcile to read (``ctl.cache(resource)``, a
        `RelatedCache`: ``owned_by(obj)``) instead of GETting them; off by default, since
        it holds every object of the resource in the namespace, not only the owned ones.
        `metadata_only` watches ``PartialObjectMetadata``: the cache (and the triggers)
        see only each object's metadata, a fraction of the memory and of the bytes.
        `event_filter` decides which changes of those objects trigger."""
        predicate = check_predicate(event_filter, "owns")
        rel = _Relation(resource, None, f"owned {resource.kind} changed", event_filter=predicate)
        self._add(rel, cache, metadata_only)
        return self

    def watches(
        self,
        resource: Resource,
        mapper: Mapper,
        *,
        cache: bool = False,
        metadata_only: bool = False,
        event_filter: Predicate | None = None,
    ) -> Controller:
        """Also watch `resource`; each change triggers the primary objects `mapper` returns,
        and those it returned for the object's previous state (a removed reference
        re-triggers its old target; a delete, the last targets). `cache` and
        `metadata_only` as for `owns`; the cache's ``mapped_to(obj)`` gives the objects
        the mapper last mapped to a primary object. `event_filter` decides which changes
        of those objects trigger."""
        if not callable(mapper):
            raise TypeError(f"mapper must be callable, got {type(mapper).__name__}")
        predicate = check_predicate(event_filter, "watches")
        rel = _Relation(
            resource, mapper, f"watched {resource.kind} changed", event_filter=predicate
        )
        self._add(rel, cache, metadata_only)
        return self

    def _add(self, rel: _Relation, cache: bool, metadata_only: bool) -> None:
        self._check_not_running()
        resource = rel.resource
        if not isinstance(resource, Resource):
            raise TypeError(f"resource must be a fastctl.Resource, got {type(resource).__name__}")
        if metadata_only and resource == self.resource:
            raise ValueError(
                f"{resource} is the primary resource, watched with full objects: "
                "metadata_only applies to related resources only"
            )
        for other in self._relations:
            if other.resource == resource and other.metadata_only != metadata_only:
                raise ValueError(
                    f"{resource} is already watched with metadata_only={other.metadata_only}: "
                    "one controller watches a resource one way"
                )
            if other.resource == resource and cache and other.cache is not None:
                raise ValueError(f"{resource} is already cached by this controller")
        made = RelatedCache(resource, metadata_only=metadata_only) if cache else None
        self._relations.append(replace(rel, cache=made, metadata_only=metadata_only))

    def cache(self, resource: Resource) -> RelatedCache:
        """The cache of a related resource added with ``cache=True`` (put it in the
        reconcile's context: ``ctx.configmaps.owned_by(obj)``). Available at once; it fills
        when the controller runs, and the controller reconciles only once it is ready."""
        for rel in self._relations:
            if rel.resource == resource and rel.cache is not None:
                return rel.cache
        raise KeyError(
            f"controller {self.name} does not cache {resource}: "
            "add it with owns(..., cache=True) or watches(..., cache=True)"
        )

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

    # -- looking into the queue (docs/inspect.md) -------------------------------------------

    def record_reasons(self) -> Controller:
        """Keep, per queued object, the triggers merged into its next run and its last
        error, for `inspect` (bounded: fastctl._reasons). Off by default: it costs a dict
        update per trigger and two per reconcile; a Manager with a debug queue turns it on
        for its controllers. Returns the controller."""
        self._check_not_running()
        if self._reasons is None:
            self._reasons = ReasonLog(f"{self.resource.kind} changed")
        return self

    def inspect(self, namespace: str | None, name: str) -> ObjectInspection:
        """Where the object `namespace`/`name` (`namespace` None: cluster-scoped) is in this
        controller's queue and why: its state, priority, failed attempts and backoff, when
        it runs, how many objects are ahead of it, the triggers merged into its next run
        and its last error. An object the controller neither caches nor queues gets the
        state ``not_known``, not an exception."""
        ref = ObjectRef(name, namespace)
        look = getattr(self.scheduler, "inspect", None)
        if look is None:
            raise TypeError(
                f"controller {self.name}: its scheduler ({type(self.scheduler).__name__}) "
                "cannot be inspected"
            )
        record = look(ref.key)
        return inspect_key(
            self.name,
            ref,
            record,
            self._reasons.get(ref.key) if record is not None and self._reasons else None,
            ref in self.store,
            in_flight=self.scheduler.in_flight,
            concurrency=self.concurrency,
        )

    def queue_summary(self) -> QueueSummary:
        """This controller's queue at a glance: objects by state and priority, the one ready
        the longest, when the next waiting one is due."""
        summary = getattr(self.scheduler, "queue_summary", None)
        if summary is None:
            raise TypeError(
                f"controller {self.name}: its scheduler ({type(self.scheduler).__name__}) "
                "has no queue summary"
            )
        return summarize(self.name, summary(), self.store)

    @property
    def resources(self) -> list[Resource]:
        """Every resource this controller watches: the primary first."""
        return [self.resource, *(rel.resource for rel in self._relations)]

    @property
    def owned(self) -> list[Resource]:
        """The resources added with `owns` (what the reconcile writes, for RBAC)."""
        return [rel.resource for rel in self._relations if rel.mapper is None]

    def _watch_uses(self) -> list[tuple[int | None, Resource, WatchConfig]]:
        """Every watch this controller would open: (use, resource, watch options), the
        primary's use being None and relation i's use i. The Manager shares watches per use,
        so two relations on one resource get a subscription each."""
        uses: list[tuple[int | None, Resource, WatchConfig]] = [
            (None, self.resource, self._watch_config_for(self.resource))
        ]
        for i, rel in enumerate(self._relations):
            uses.append((i, rel.resource, self._watch_config_for(rel.resource)))
        return uses

    def _use_shared_watch(self, use: int | None, shared: SharedWatch) -> None:
        """Take the events of `use` (see `_watch_uses`) from `shared` instead of opening a
        watch of its own (the Manager shares one watch and one cache per resource among its
        controllers). For the primary the shared store becomes this controller's cache."""
        self._check_not_running()
        self._event_sources[use] = shared.subscribe(on_error=self._on_watch_error)
        if use is None:
            self.store = shared.store
            self._primary_shared = True
        else:
            cache = self._relations[use].cache
            if cache is not None:
                cache.store = shared.store  # the shared watch feeds it

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
        """True once the primary cache, and every related cache, holds its first list."""
        return self.store.is_ready and all(c.is_ready for c in self._caches())

    def _caches(self) -> list[RelatedCache]:
        return [rel.cache for rel in self._relations if rel.cache is not None]

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
            if self.ignore_own_writes:
                self._own_writes = OwnWrites(self.resources)
            tasks.append(
                loop.create_task(self._watch_primary(triggers), name=f"{self.name}:primary")
            )
            for use, rel in enumerate(self._relations):
                tasks.append(
                    loop.create_task(
                        self._watch_related(use, rel, triggers),
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
            if self._own_writes is not None:
                reconcile = self._own_writes.observing(reconcile)
            store: Mapping[ObjectRef, Any] = self.store
            if self._gate is not None:
                store = _GatedStore(self.store, self._gate)
            if self._shard is not None:
                self._shard.bind(loop)
                reconcile = self._shard.track(reconcile)
                store = ShardedStore(self.store, self._shard)
            if self._caches():
                store = _GatedStore(store, None, [c.store for c in self._caches()])
            run = _Driver(
                reconcile,
                self.error_policy,
                self.context,
                store,
                triggers,
                self.config,
                self.scheduler,
                # Reasons need a scheduler that answers `in` (a user's own may not).
                self._reasons if hasattr(type(self.scheduler), "__contains__") else None,
            )
            async for result in run.results():
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

    def _events(self, resource: Resource, use: int | None) -> AsyncIterator[WatchEvent]:
        source = self._event_sources.get(use)
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
        metadata_only = any(r.metadata_only for r in self._relations if r.resource == resource)
        return replace(
            self.watch_config, label_selector=None, field_selector=None, metadata_only=metadata_only
        )

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
            events = self._events(self.resource, None)
        if not self._primary_shared and gate is None:
            events = reflector(self.store, events)
        store = self.store
        event_filter = self._event_filter(self.event_filter, self.resource)
        if self._own_writes is not None:
            events = settled(self._own_writes, self.resource, events)
        try:
            async for event in events:
                for trigger in primary_triggers(event, store, event_filter):
                    await triggers.put(trigger)
        except ChannelClosed:
            return

    async def _watch_related(
        self, use: int, rel: _Relation, triggers: Channel[ObjectRef | Trigger]
    ) -> None:
        related = RelatedTriggers(
            rel.mapper if rel.mapper is not None else self._owner_of,
            rel.reason,
            controller=self.name,
            kind=rel.resource.kind,
            index=rel.cache is not None,
            event_filter=self._event_filter(rel.event_filter, rel.resource),
        )
        events = self._events(rel.resource, use)
        if rel.cache is not None:
            rel.cache._bind(related)
            if use not in self._event_sources:  # a shared watch fills its own store
                events = reflector(rel.cache.store, events)
        if self._own_writes is not None:
            events = settled(self._own_writes, rel.resource, events)
        try:
            async for event in events:
                for trigger in related.on_event(event):
                    if self._shard is not None and not self._related_served(rel, event, trigger):
                        continue
                    await triggers.put(trigger)
        except ChannelClosed:
            return

    def _event_filter(self, predicate: Predicate | None, resource: Resource) -> EventFilter | None:
        """The filter state of one watch: `predicate`, and the own-writes echoes."""
        if predicate is None and self._own_writes is None:
            return None
        return EventFilter(
            predicate,
            controller=self.name,
            kind=resource.kind,
            own_writes=self._own_writes,
            on_error=self._on_filter_error,
        )

    def _on_filter_error(self) -> None:
        self._counters.event_filter_errors += 1

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
    """A store that is not ready until its gate opens (if any) and the related caches
    (`caches`) hold their first lists: the applier queues (and de-duplicates) triggers
    meanwhile, and starts reconciling when all are ready, so a reconcile never reads a
    child cache that merely looks empty because it has not been listed yet."""

    def __init__(
        self, store: Any, gate: asyncio.Event | None, caches: Sequence[Store] = ()
    ) -> None:
        self._store = store
        self._gate = gate
        self._caches = caches

    @property
    def is_ready(self) -> bool:
        gate_open = self._gate is None or self._gate.is_set()
        return gate_open and bool(self._store.is_ready) and all(c.is_ready for c in self._caches)

    async def wait_ready(self) -> None:
        if self._gate is not None:
            await self._gate.wait()
        for cache in self._caches:
            await cache.wait_ready()
        await self._store.wait_ready()

    def __getitem__(self, ref: ObjectRef) -> Any:
        return self._store[ref]

    def get(self, ref: ObjectRef, default: Any = None) -> Any:
        return self._store.get(ref, default)

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)
