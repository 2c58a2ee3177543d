"""`fastctl.Controller`: the builder of a controller, and the handle of its runs.

A controller watches its primary resource into a `Store` (the reflector), and turns every
change into a trigger for that object; `owns` and `watches` add watches of related
resources whose changes trigger the objects they map to; `reconcile_all_on` re-triggers
every cached object whenever an external stream yields, `reconcile_on` the object of each
ref an external stream yields. All triggers flow through one
bounded `Channel` into the applier, which runs the reconciles on its own `Scheduler`.

The builder methods collect a frozen `ControllerSpec` (``ctl.spec``); `run` and `stream`
run that spec in an `Environment`: on its own, the controller's own watches on its client;
in a Manager, the environment the Manager built (shared watches, a leader gate, a shard
assignment). The run itself is `ControllerRun` (``_run.py``).

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
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio.client import ApiClient

from fastctl._applier import DEFAULT_CONCURRENCY, ApplierConfig, SchedulerLike
from fastctl._clock import monotonic
from fastctl._options import pick
from fastctl._reasons import ReasonLog
from fastctl.kube._events import Recorder
from fastctl.kube._namespaces import Namespaces, NamespaceScope, namespace_scope
from fastctl.kube._resource import Resource
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._store import Store
from fastctl.kube._transforms import Transform
from fastctl.kube._watcher import WatchConfig
from fastctl.runtime._children import RelatedCache
from fastctl.runtime._filters import Predicate, check_predicate
from fastctl.runtime._inspect import ObjectInspection, QueueSummary, inspect_key, summarize
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._read_your_writes import ReadYourWrites
from fastctl.runtime._signals import stop_on_signals
from fastctl.runtime._typed import is_model, typed_reconcile
from fastctl.runtime.controller._environment import Environment
from fastctl.runtime.controller._run import ControllerRun
from fastctl.runtime.controller._spec import INHERIT, ControllerSpec, Relation, _Inherit
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.types import ErrorPolicy, Mapper, ObjectRef, Reconcile, ReconcileResult

if TYPE_CHECKING:
    from fastctl._core import SchedulerStats
    from fastctl.kube._model import CustomResource

__all__ = ["Controller"]

_DEFAULT_CONFIG = ApplierConfig()
_READ_YOUR_WRITES = ReadYourWrites()
_DEFAULT_WATCH_CONFIG = WatchConfig()
"""A controller's caches drop managedFields unless told otherwise (see `Controller`)."""


class Controller:
    """Reconciles every object of one primary `resource` (docs/contract.md, "Controllers").

    ``reconcile(obj, ctx)`` gets the parsed JSON object (a dict) as it is in the cache when
    the reconcile starts, and returns `Action` or ``None``. The cache drops
    ``metadata.managedFields`` (`WatchConfig.strip_managed_fields`, on by default here):
    reconcilers rarely read it, server-side apply does not need it, and it is about half
    of a typical object.
    The builder methods return the controller, so they chain::

        ctl = Controller(client, Resource("example.com/v1", "Widget"), reconcile)
        ctl.owns(Resource("v1", "ConfigMap"))
        await ctl.run()

    With a `CustomResource` subclass as `resource` (``Controller(client, Widget, rec)``),
    ``rec`` gets a ``Widget`` validated from the cached object when the reconcile starts;
    an object that fails validation fails its reconcile with `InvalidObject` (logged, the
    error policy applies, and a Warning Event ``InvalidObject``); the others reconcile on.
    Every failed reconcile records a Warning Event on its object, one series per object
    and reason, unless ``ApplierConfig(failure_events=False)``. The error policy and
    `ReconcileResult.obj` see the JSON object.
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
        namespace: str | Iterable[str] | Namespaces | None = None,
        label_selector: str | None = None,
        name: str | None = None,
        scheduler: SchedulerLike | None = None,
        config: ApplierConfig | None = None,
        watch_config: WatchConfig | None = None,
        recorder: Recorder | None = None,
        event_filter: Predicate | None = None,
        ignore_own_writes: bool = False,
        read_your_writes: ReadYourWrites | None = None,
    ) -> None:
        """The options are stated once, in two objects: `config`, an `ApplierConfig` (how
        reconciles run: also `executor`, and `fair_by` with `group_concurrency` to serve
        tenants in turn and cap each one's reconciles), and `watch_config`, a `WatchConfig`
        (how the primary resource is listed and watched; related resources are watched
        without its selectors). The common ones are also keywords: `concurrency`,
        `debounce` and `timeout` of `config`, `label_selector` of `watch_config`; pass
        either those keywords or the object, not both. The caches drop
        ``metadata.managedFields`` unless `watch_config` says
        ``strip_managed_fields=False``; `WatchConfig.transform` shapes each primary
        object before it is cached (`fastctl.kube.drop_managed_fields`, `keep_paths`, ...).
        `namespace`: one namespace (None: all), or a set: a list of names, shell-style
        patterns (``"team-*"``), or a `Namespaces` (names, patterns, a label selector on
        the Namespaces), re-evaluated as namespaces come and go; each namespace of a set is
        watched on its own, with every guarantee of a one-namespace watch.
        `scheduler` replaces the default one built from `config` (for metrics or the model).
        `recorder` publishes the Warning Events of failed reconciles (None: one of the
        controller's own, reporting as ``fastctl/<name>``).
        `event_filter` (a predicate ``(old, new) -> bool``, e.g. `generation_changed`)
        decides which changes of a primary object trigger it; `ignore_own_writes` holds
        back the watch events of the writes this controller's reconciles make to the
        objects it watches (docs/authoring.md, "Event filters"). `read_your_writes`, a
        `ReadYourWrites` (on by default), holds a reconcile back while the controller's
        caches do not show yet what its object's previous reconcile wrote through
        `fastctl.kube`, for at most its `max_wait` (docs/authoring.md, "Reading your own
        writes").
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
        self.read_your_writes = pick(
            read_your_writes, _READ_YOUR_WRITES, _READ_YOUR_WRITES, name="read_your_writes"
        )
        self.context = context
        self.error_policy = error_policy
        self.config = pick(
            config,
            ApplierConfig(concurrency=concurrency, debounce=debounce, timeout=timeout),
            _DEFAULT_CONFIG,
        )
        self.watch_config = pick(
            watch_config,
            WatchConfig(label_selector=label_selector),
            _DEFAULT_WATCH_CONFIG,
            name="watch_config",
        ).with_default_stripping()
        self.namespace: NamespaceScope = namespace_scope(namespace, "Controller")
        self._name = name or f"{resource.kind.lower()}"
        self.scheduler: SchedulerLike = (
            scheduler if scheduler is not None else self.config.new_scheduler()
        )
        self.store = Store()
        """The primary cache: the controller's own, or, while a Manager shares the watch,
        the shared one."""
        self.counters = ReconcileCounters()
        """Reconciles by result, retried watch errors, failed event filters (metrics)."""
        self._reasons: ReasonLog | None = None
        """Why each queued object is queued, for `inspect`, once `record_reasons` is on."""
        self._relations: list[Relation] = []
        self._resync_sources: list[AsyncIterable[Any]] = []
        self._trigger_sources: list[AsyncIterable[ObjectRef]] = []
        self._shutdown_requested = False
        self._run: ControllerRun | None = None

    # -- builder ----------------------------------------------------------------------------

    def owns(
        self,
        resource: Resource,
        *,
        cache: bool = False,
        metadata_only: bool = False,
        event_filter: Predicate | None = None,
        namespace: str | Iterable[str] | Namespaces | _Inherit | None = INHERIT,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
    ) -> Controller:
        """Also watch `resource`; a change to an object with a controller owner reference to
        a primary object triggers that owner (e.g. the ConfigMaps a Widget renders).

        `cache` keeps the objects for the reconcile to read (``ctl.cache(resource)``, a
        `RelatedCache`: ``owned_by(obj)``) instead of GETting them; off by default, since
        it holds every object of the resource in the relation's scope, not only the owned
        ones: narrow the scope with `label_selector` (e.g. the label the reconcile puts on
        what it creates), `field_selector` and `namespace` (default: the controller's; a
        name, None for all, or a set as for the controller), and drop what the reconcile
        never reads with `transform` (`fastctl.kube.keep_paths`, `drop_last_applied`,
        ...). Only what the scope holds triggers and is cached: a child outside it is
        invisible to the controller.
        `metadata_only` watches ``PartialObjectMetadata``: the cache (and the triggers)
        see only each object's metadata, a fraction of the memory and of the bytes.
        `event_filter` decides which changes of those objects trigger."""
        self._check_related(resource)
        predicate = check_predicate(event_filter, "owns")
        rel = Relation(resource, None, f"owned {resource.kind} changed", event_filter=predicate)
        self._add(
            _scoped(rel, "owns", namespace, label_selector, field_selector, transform),
            cache,
            metadata_only,
        )
        return self

    def watches(
        self,
        resource: Resource,
        mapper: Mapper,
        *,
        cache: bool = False,
        metadata_only: bool = False,
        event_filter: Predicate | None = None,
        namespace: str | Iterable[str] | Namespaces | _Inherit | None = INHERIT,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
    ) -> Controller:
        """Also watch `resource`; each change triggers the primary objects `mapper` returns,
        and those it returned for the object's previous state (a removed reference
        re-triggers its old target; a delete, the last targets). `cache`,
        `metadata_only`, the scope (`namespace`, `label_selector`, `field_selector`) and
        `transform` as for `owns`; the cache's ``mapped_to(obj)`` gives the objects the
        mapper last mapped to a primary object. `event_filter` decides which changes of
        those objects trigger."""
        self._check_related(resource)
        if not callable(mapper):
            raise TypeError(f"mapper must be callable, got {type(mapper).__name__}")
        predicate = check_predicate(event_filter, "watches")
        rel = Relation(resource, mapper, f"watched {resource.kind} changed", event_filter=predicate)
        self._add(
            _scoped(rel, "watches", namespace, label_selector, field_selector, transform),
            cache,
            metadata_only,
        )
        return self

    def _check_related(self, resource: object) -> None:
        """Before anything reads `resource`: a clear error for what is not one."""
        self._check_not_running()
        if not isinstance(resource, Resource):
            raise TypeError(f"resource must be a fastctl.Resource, got {type(resource).__name__}")

    def _add(self, rel: Relation, cache: bool, metadata_only: bool) -> None:
        resource = rel.resource
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

    def reconcile_on(self, source: AsyncIterable[ObjectRef]) -> Controller:
        """Each `ObjectRef` `source` yields triggers that object: for changes the API server
        does not show (a webhook of an external system, a message queue, a cloud API
        polled). As for every trigger, the reconcile gets the object from the cache: a ref
        the cache does not hold (not created yet, deleted, another shard's, outside the
        controller's namespaces or selector) triggers nothing. Anything but an `ObjectRef`
        stops the controller with a `TypeError` naming it, as a failing source does."""
        self._check_not_running()
        self._trigger_sources.append(source)
        return self

    def _check_not_running(self) -> None:
        if self._run is not None:
            raise RuntimeError(f"controller {self.name} is running: configure it before")

    # -- what it is: the spec, and what the Manager and metrics read ------------------------

    @property
    def spec(self) -> ControllerSpec:
        """What this controller is, frozen (its runs read nothing else)."""
        return ControllerSpec(
            name=self._name,
            resource=self.resource,
            reconcile=self.reconcile,
            context=self.context,
            error_policy=self.error_policy,
            config=self.config,
            watch_config=self.watch_config,
            namespace=self.namespace,
            relations=tuple(self._relations),
            resync_sources=tuple(self._resync_sources),
            trigger_sources=tuple(self._trigger_sources),
            event_filter=self.event_filter,
            ignore_own_writes=self.ignore_own_writes,
            recorder=self.recorder,
            read_your_writes=self.read_your_writes,
        )

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

    def scheduler_stats(self) -> SchedulerStats:
        """The scheduler's counters and histograms (for metrics)."""
        return self.scheduler.stats(now=monotonic())

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
        record = look(ref.key, now=monotonic())
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
        return summarize(self.name, summary(now=monotonic()), self.store)

    def running_keys(self) -> list[str]:
        """The keys (``namespace/name``) of the objects being reconciled now, sorted: what
        a graceful stop waits for (a Manager's drain names them in its log)."""
        run = self._run
        return run.running_keys() if run is not None else []

    @property
    def resources(self) -> list[Resource]:
        """Every resource this controller watches: the primary first."""
        return [self.resource, *(rel.resource for rel in self._relations)]

    @property
    def owned(self) -> list[Resource]:
        """The resources added with `owns` (what the reconcile writes, for RBAC)."""
        return [rel.resource for rel in self._relations if rel.mapper is None]

    @property
    def shard(self) -> ShardGate | None:
        """The shard gate while a Manager runs this controller sharded."""
        run = self._run
        return run.env.shard.gate if run is not None and run.env.shard is not None else None

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
        if self._run is not None:
            self._run.stop()

    async def run(
        self, *, handle_signals: bool = True, environment: Environment | None = None
    ) -> None:
        """Run until `shutdown()`, or SIGTERM or SIGINT when `handle_signals` (a second
        signal cancels the running reconciles at once). A Manager runs its controllers in
        the `environment` it builds, with its own signal handling."""
        if not handle_signals:
            async for _ in self.stream(environment=environment):
                pass
            return
        task = asyncio.current_task()

        def cancel() -> None:
            if task is not None:
                task.cancel()

        with stop_on_signals(f"controller {self.name}", graceful=self.shutdown, at_once=cancel):
            async for _ in self.stream(environment=environment):
                pass

    async def stream(
        self, *, environment: Environment | None = None
    ) -> AsyncIterator[ReconcileResult]:
        """Run the controller, yielding each reconcile's result as it finishes. Without an
        `environment` it opens its own watches on its client."""
        self._check_not_running()
        env = environment if environment is not None else Environment(self.client)
        spec = self.spec
        uses = spec.watch_uses()
        primary = env.source(uses[0]).store if env.shard is None else None
        if primary is not None:
            self.store = primary  # a shared watch: its cache is this controller's
        for use, rel in zip(uses[1:], spec.relations, strict=True):
            shared = env.source(use).store
            if rel.cache is not None and shared is not None:
                rel.cache.store = shared  # the shared watch fills it
        run = ControllerRun(
            spec,
            env,
            store=self.store,
            scheduler=self.scheduler,
            counters=self.counters,
            reasons=self._reasons,
        )
        self._run = run
        if self._shutdown_requested:
            run.stop()
        try:
            async for result in run.results():
                yield result
        finally:
            self._run = None


def _scoped(
    rel: Relation,
    where: str,
    namespace: object,
    label_selector: str | None,
    field_selector: str | None,
    transform: Transform | None,
) -> Relation:
    """`rel` with the scope and transform `owns`/`watches` were given, checked."""
    for name, selector in (("label_selector", label_selector), ("field_selector", field_selector)):
        if selector is not None and not isinstance(selector, str):
            raise TypeError(f"{where}: {name} must be a string, got {type(selector).__name__}")
    if label_selector:
        LabelSelector.parse(label_selector)  # malformed: an error now, not at the first list
    if transform is not None and not callable(transform):
        raise TypeError(f"{where}: transform must be callable, got {type(transform).__name__}")
    scope = namespace if isinstance(namespace, _Inherit) else namespace_scope(namespace, where)
    return replace(
        rel,
        namespace=scope,
        label_selector=label_selector or None,
        field_selector=field_selector or None,
        transform=transform,
    )
