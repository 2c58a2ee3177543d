"""Type stub of the Rust extension `fastctl._core` (see docs/scheduler.md)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final, Literal, Self, TypedDict, final

__all__ = [
    "MAX_DELAY",
    "SCHEDULER_DEFAULTS",
    "CompactMap",
    "Http1Reader",
    "Item",
    "OtlpHttp",
    "OtlpSpan",
    "ReconcileSpans",
    "Scheduler",
    "SpanBuffer",
    "SpanSource",
    "TlsConfig",
    "TlsSession",
    "WatchBody",
    "Writes",
    "Written",
    "WrittenHook",
    "__version__",
    "decode_frame",
    "decode_lines",
    "decode_list",
    "decode_object",
    "decode_proto_frames",
    "decode_proto_object",
    "otlp_encode",
]

__version__: Final[str]

MAX_DELAY: Final[float]
"""Longest accepted delay in seconds (180 days); longer delays, and infinity, are clamped."""

# SchedulerDefaults, Histogram, SchedulerStats, KeyInspection, OldestReady and QueueSummary
# exist only for type checkers (import them under `if TYPE_CHECKING:`); at run time they are
# plain dicts of this shape.

class SchedulerDefaults(TypedDict):
    """The value of each `Scheduler` keyword when it is omitted or None."""

    concurrency: int
    debounce: float
    debounce_max: float | None
    max_wait: float
    backoff_base: float
    backoff_max: float
    seed: int | None
    group_weights: Mapping[str, int] | None
    group_concurrency: int

SCHEDULER_DEFAULTS: Final[SchedulerDefaults]
"""The scheduler's defaults, read from the Rust `Config::default` (the one place they are
written): ``debounce_max`` None means 10 * ``debounce``, ``seed`` None a random seed. A copy
to read; changing it changes nothing."""

class Histogram(TypedDict):
    """A duration histogram: ``buckets`` are ``(upper_bound, cumulative_count)`` pairs, ending
    with ``(inf, count)``."""

    buckets: list[tuple[float, int]]
    sum: float
    count: int

class SchedulerStats(TypedDict):
    """What `Scheduler.stats` returns."""

    depth: int
    waiting: int
    in_flight: int
    dirty: int
    len: int
    adds_total: int
    merges_total: int
    retries_total: int
    requeues_total: int
    pops_total: int
    done_total: int
    failures_total: int
    oldest_ready_age: float
    longest_running: float
    unfinished_work: float
    queue_duration: Histogram
    work_duration: Histogram

KeyState = Literal["waiting", "ready", "in_flight", "in_flight_dirty"]

class KeyInspection(TypedDict):
    """What `Scheduler.inspect` returns for a key with a record (times on the scheduler's
    clock; see docs/inspect.md)."""

    state: KeyState
    priority: int
    """Queued: the merged priority. In flight: the priority it was popped with."""
    failures: int
    """Consecutive failures (reset by a success or `forget`)."""
    backoff: float | None
    """The latest failure's backoff before jitter (the delay drawn is 0.8-1.2 times it)."""
    ready_at: float | None
    """Waiting: when it becomes ready. In flight and dirty: the follow-up's ready time."""
    since: float | None
    """Ready: since when. In flight: since when it runs."""
    ahead_at_priority: int | None
    """Ready: ready keys of its priority served before it, the fair groups' turns included
    (the exact number of pops at its priority before it, if nothing is added meanwhile and
    no group is held or released). None for a held key: it is not in line."""
    ahead_higher: int | None
    """Ready: ready keys of higher priorities that can be served (served first, `max_wait`
    aside; held groups' keys are not counted). None for a held key."""
    ahead_in_group: int | None
    """Ready: ready keys of its own fair group and priority served before it."""
    follow_up_priority: int | None
    """In flight and dirty: the follow-up's priority."""
    group: str | None
    """The key's fair group (None: added without one)."""
    held: bool
    """Ready, and its group has its cap of keys in flight: it is not served until one of
    them ends."""
    group_concurrency: int | None
    """Its group's cap on keys in flight (None: no group, or no cap)."""

class OldestReady(TypedDict):
    key: str
    priority: int
    since: float
    group: str | None

class GroupCounts(TypedDict):
    """One named fair group in `QueueSummary.by_group`."""

    keys: int
    """Keys of the group in any state (waiting, ready, in flight)."""
    ready: int
    in_flight: int
    weight: int
    group_concurrency: int
    """Its cap on keys in flight (its own, else the default; 0: none)."""
    held: bool
    """It has its cap of keys in flight: its ready keys wait for one to end."""

class QueueSummary(TypedDict):
    """What `Scheduler.queue_summary` returns."""

    ready: int
    waiting: int
    in_flight: int
    dirty: int
    concurrency: int
    group_concurrency: int
    """The cap on keys in flight per named fair group without its own (0: none)."""
    ready_by_priority: dict[int, int]
    """Ready keys by priority (held groups' included), highest first."""
    in_flight_by_priority: dict[int, int]
    """Keys in flight by the priority they were popped with, highest first."""
    oldest_ready: OldestReady | None
    """The oldest ready key that can be served (a held group's keys cannot)."""
    next_ready_at: float | None
    """The earliest ready time of a waiting key."""
    now: float
    """The scheduler's clock the answer was computed at."""
    by_group: dict[str, GroupCounts]
    """Each named fair group with keys, by name (keys without a group are not listed)."""

@final
class Scheduler:
    """A keyed priority/delay queue with in-flight bookkeeping: one record per key, never two
    hand-outs of the same key at once. Thread-safe.

    Times are seconds on the `time.monotonic()` clock; every `now` of an update defaults to
    it. A query (`stats`, `inspect`, `queue_summary`) asked without `now` inside a running
    event loop reads that loop's `time()` instead, so a query on a virtual-time loop never
    moves the clock to real time.
    """

    def __new__(
        cls,
        *,
        concurrency: int | None = ...,
        debounce: float | None = ...,
        debounce_max: float | None = ...,
        max_wait: float | None = ...,
        backoff_base: float | None = ...,
        backoff_max: float | None = ...,
        seed: int | None = ...,
        group_weights: Mapping[str, int] | None = ...,
        group_concurrency: int | None = ...,
    ) -> Self:
        """Every keyword omitted or None takes its value from `SCHEDULER_DEFAULTS`.

        `concurrency`: most keys in flight at once (0: no limit). `debounce`: seconds an add
        that would make a key ready now waits instead (0: off). `debounce_max`: longest a
        debounce batch may be pushed back from its first add. `max_wait`: a ready key older
        than this is served before keys of higher priority. `backoff_base`, `backoff_max`: the
        first and the longest failure backoff, in seconds. `seed`: the jitter generator's
        seed, in [0, 2**64). `group_weights`: the weight of fair groups by name (as
        `set_group_weight`). `group_concurrency`: most keys of one named fair group in flight
        at once (0: no cap); a group at the cap is held, its ready keys skipped, until one
        of its keys is done.
        """
    def add(
        self,
        key: str,
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        """Queue `key` to be ready `after` seconds from now, or merge into its record
        (earliest ready time and highest priority win; an in-flight key becomes dirty).

        `group` is the key's fair group, set when the key gets its record (later adds keep
        it until the record is dropped); None: no group."""

    def add_many(
        self,
        keys: Iterable[str],
        *,
        after: float = 0.0,
        priority: int = 0,
        group: str | None = None,
        now: float | None = None,
    ) -> None:
        """`add` for each key, with one `now`; nothing is added if any key is not a str."""

    def pop(self, *, now: float | None = None) -> str | None:
        """The next ready key, now in flight; None if none is ready or `concurrency` keys are
        already in flight. Keys of held groups (`group_concurrency`) are skipped."""

    def pop_many(self, max: int, *, now: float | None = None) -> list[str]:
        """Up to `max` keys, as `pop` would return them one by one."""

    def done(
        self,
        key: str,
        *,
        requeue_after: float | None = None,
        failed: bool = False,
        priority: int | None = None,
        now: float | None = None,
    ) -> None:
        """End the in-flight state of `key` (KeyError if it is not in flight) and queue it
        again if it is dirty, `requeue_after` is given, or it `failed` (backoff)."""

    def set_group_weight(self, group: str, weight: int) -> None:
        """Serve fair group `group` up to `weight` keys in a row per turn among ready keys of
        one priority (default 1; an int in [1, 2**32)). Kept for the group's later keys."""

    def set_group_concurrency(self, group: str, cap: int | None) -> None:
        """Give fair group `group` its own cap on keys in flight (0: none; None: the default
        `group_concurrency` again), kept by name like a weight. Takes effect at once: a group
        that now has its cap in flight is held, one that no longer has it is released."""

    def _set_waker(self, waker: Callable[[], object] | None, /) -> None:
        """Call `waker()` after each `set_group_concurrency` (None: no more): the applier
        sets one while it runs on this scheduler, so that held keys a raised cap releases
        start at once. The waker must not refer to the scheduler (the garbage collector
        cannot see that reference)."""

    def group_concurrency_of(self, group: str) -> int:
        """The cap on keys in flight of fair group `group` (its own, else the default; 0:
        none)."""

    def group_weight(self, group: str) -> int:
        """The weight of fair group `group` (1 unless set)."""

    def group_of(self, key: str) -> str | None:
        """The fair group of `key`; None when it is absent or has no group."""

    def done_many(self, keys: Iterable[str], *, now: float | None = None) -> None:
        """`done` of each key in order with one `now` (no requeue, no failure): the batched
        end of successful reconciles. Nothing is done if any key is not a str; a key not in
        flight raises KeyError, the keys before it done, the ones after it not."""

    def forget(self, key: str) -> None:
        """Reset the consecutive-failure count of `key`."""

    def failures(self, key: str) -> int:
        """The consecutive-failure count of `key` (0 when it has none or is absent)."""

    def next_ready_at(self) -> float | None:
        """The time the oldest ready key that can be served became ready (<= the latest
        `now` seen), else the earliest waiting ready time, else None. Ignores dirty keys,
        `concurrency` and held groups' ready keys."""

    @property
    def in_flight(self) -> int:
        """Keys popped and not yet done (dirty ones included)."""

    def is_in_flight(self, key: str) -> bool: ...
    def __contains__(self, key: str, /) -> bool:
        """Whether `key` is queued: waiting, ready, or in flight with a follow-up."""

    def __len__(self) -> int:
        """Queued keys: ready + waiting + dirty (a clean in-flight key is not counted)."""

    def stats(self, *, now: float | None = None) -> SchedulerStats:
        """Counts, counters, ages measured at `now`, and duration histograms."""

    def inspect(self, key: str, *, now: float | None = None) -> KeyInspection | None:
        """The state of `key` as of `now` (due keys are promoted first), or None when it has
        no record. Cheap: one lookup, and for a ready key its rank in its priority level."""

    def queue_summary(self, *, now: float | None = None) -> QueueSummary:
        """Counts by state and priority, the oldest ready key, the next waiting time; costs
        O(priority levels + keys in flight) (waiting keys are not split by priority)."""

    def _check_consistency(self) -> None:
        """Check the internal invariants (O(n)); raises AssertionError."""

    @property
    def concurrency(self) -> int: ...
    @property
    def group_concurrency(self) -> int: ...
    @property
    def debounce(self) -> float: ...
    @property
    def debounce_max(self) -> float: ...
    @property
    def max_wait(self) -> float: ...
    @property
    def backoff_base(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...

# -- watch frames and the compact cache (docs/kubernetes.md, "The store") ------------------

@final
class Item:
    """One decoded object: its JSON as kept and the metadata fastctl reads."""

    @property
    def json(self) -> bytes: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def uid(self) -> str | None: ...
    @property
    def resource_version(self) -> str | None: ...
    @property
    def controller_uid(self) -> str | None: ...
    @property
    def generation(self) -> int | None: ...
    @property
    def deletion_timestamp(self) -> str | None: ...
    @property
    def api_version(self) -> str | None:
        """The object's own, as received (before any identity was given)."""
    @property
    def kind(self) -> str | None:
        """The object's own, as received."""
    @property
    def initial_events_end(self) -> bool: ...
    def labels(self) -> dict[str, str]: ...
    def owners(self) -> list[tuple[str, str, str, str, bool]]:
        """(apiVersion, kind, name, uid, controller) of each owner reference."""

def decode_frame(
    line: bytes,
    strip_managed_fields: bool = False,
    api_version: str | None = None,
    kind: str | None = None,
    replace_identity: bool = False,
) -> tuple[str, Item | bytes]:
    """A watch line: (type, Item), or ("ERROR", the Status's JSON); ValueError naming what
    is wrong."""

def decode_lines(
    buffer: bytes,
    strip_managed_fields: bool = False,
    api_version: str | None = None,
    kind: str | None = None,
    replace_identity: bool = False,
    max_line: int = ...,
) -> tuple[list[tuple[str, Item | bytes]], int, str | None, bytes | None]:
    """Every complete line of a watch stream's buffer: (frames, bytes used, and for a
    malformed line, or one over `max_line` bytes, its error message and the line; none
    after it is read)."""

def decode_proto_frames(
    buffer: bytes,
    strip_managed_fields: bool = False,
    api_version: str | None = None,
    kind: str | None = None,
    replace_identity: bool = False,
    max_frame: int = ...,
) -> tuple[list[tuple[str, Item | bytes]], int, str | None, bytes | None]:
    """Every complete frame of a protobuf watch stream's buffer (v1 ConfigMaps, Secrets and
    Status), as `decode_lines` gives a JSON stream's lines; each object is the JSON the API
    server would have sent for it."""

def decode_proto_object(encoded: bytes) -> bytes:
    """One protobuf-encoded v1 ConfigMap, Secret or Status as the API server's JSON of it."""

def decode_object(
    json: bytes,
    strip_managed_fields: bool = False,
    api_version: str | None = None,
    kind: str | None = None,
    replace_identity: bool = False,
    lenient: bool = False,
) -> Item:
    """`lenient`: an object made in Python; only ``metadata.name`` must be right."""

def decode_list(
    page: bytes,
    strip_managed_fields: bool = False,
    api_version: str | None = None,
    kind: str | None = None,
    replace_identity: bool = False,
) -> tuple[list[Item], str | None, str | None, str | None, bool]:
    """(items, kind, continue, resourceVersion, shard_info)."""

@final
class CompactMap:
    """Objects as JSON bytes by (name, namespace), indexed by controller owner uid."""

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def put(self, item: Item) -> None: ...
    def put_listed(self, item: Item, held: CompactMap) -> None: ...
    def get(self, name: str, namespace: str | None = None) -> bytes | None: ...
    def contains(self, name: str, namespace: str | None = None) -> bool: ...
    def version(
        self, name: str, namespace: str | None = None
    ) -> tuple[str | None, str | None] | None: ...
    def remove(self, name: str, namespace: str | None = None) -> bytes | None: ...
    def keys(self, namespace: str | None = None) -> list[tuple[str, str | None]]: ...
    def values(self, namespace: str | None = None) -> list[bytes]: ...
    def owned_by(self, uid: str) -> list[bytes]: ...
    def missing_from(
        self, other: CompactMap, namespace: str | None = None
    ) -> list[tuple[str, str | None, bytes]]: ...
    def merge(self, other: CompactMap) -> int: ...
    def holds_same(self, other: CompactMap, name: str, namespace: str | None = None) -> bool: ...
    def label(self, key: str, name: str, namespace: str | None = None) -> str | None: ...
    def label_values(self, key: str) -> list[tuple[str, str | None, str]]: ...
    def labels(self, name: str, namespace: str | None = None) -> dict[str, str]: ...
    def heap_bytes(self) -> int: ...

def otlp_encode(groups: list[tuple[Any, ...]]) -> bytes:
    """An OTLP ``ExportTraceServiceRequest``: per group ``(resource_attributes,
    resource_schema_url, scope_name, scope_version, scope_attributes, scope_schema_url,
    records)`` one ``ResourceSpans``; each record a `fastctl._otlp.SpanRecord`."""

@final
class SpanBuffer:
    """Spans of one resource and scope written as OTLP protobuf as they end, until taken."""

    def __new__(cls, header: tuple[Any, ...], max_spans: int) -> Self: ...
    def add(self, record: tuple[Any, ...]) -> int:
        """How many spans wait now; 0: dropped (full or closed)."""
    def take(self, max: int) -> tuple[bytes, int] | None:
        """A request of the first `max` spans, and their count; None when none waits."""
    @property
    def dropped(self) -> int: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...

@final
class OtlpHttp:
    """POSTs to one ``http://`` URL over a kept-alive connection, without the GIL."""

    def __new__(cls, host: str, port: int, target: str) -> Self: ...
    def post(
        self, headers: list[tuple[str, str]], body: bytes, timeout: float
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """``(status, reason, headers, content)``; `ConnectionError`, `TimeoutError`."""
    def close(self) -> None: ...

@final
class SpanSource:
    """Makes the spans fastctl keeps in the extension (`OtlpSpan`) into one `SpanBuffer`."""

    def __new__(
        cls,
        buffer: SpanBuffer,
        helpers: Any,
        wake: Callable[[], object],
        batch: int,
        decide: Sequence[tuple[int, int]],
        random: int,
        limits: tuple[int | None, int | None, int | None],
        context: tuple[Any, Any, str],
        seed: int,
        ids: Any,
    ) -> Self: ...
    def retire(self, to: Callable[[tuple[Any, ...]], object]) -> None:
        """Spans ending from now on go to `to` as records, not into the buffer."""
    def reconciles(self, name: str, controller: str, owner: Any, scheduler: Any) -> ReconcileSpans:
        """The maker of one controller run's reconcile spans, named `name`."""

@final
class ReconcileSpans:
    """Makes one controller run's reconcile spans (`SpanSource.reconciles`)."""

    def start(
        self,
        key: str,
        attempt: int,
        group: Any,
        pending: tuple[Any, float, int, int] | None,
        now: float,
    ) -> OtlpSpan:
        """The span of `key`'s run, a root, started now: ``pending`` is ``(links, since,
        priority, dropped)``, `now` on the clock of ``since``."""

@final
class OtlpSpan:
    """A span kept in the extension and written as OTLP when it ends; an OpenTelemetry
    span (registered as one) for user code that reads the current span."""

    def request(self, method: str, path: str) -> OtlpSpan:
        """A client span for one API request beneath this one."""
    def answered(self, code: int) -> None: ...
    def failed(self, error: BaseException) -> None: ...
    def retried(self) -> None: ...
    def enter(self) -> None:
        """Current in the caller's context (a reconcile's task)."""
    def cancelled(self) -> None: ...
    def end(
        self,
        end_time: Any = None,
        action: Any = None,
        ended: float | None = None,
        *,
        again: bool | None = None,
    ) -> None:
        """OpenTelemetry's ``end(end_time)``; with `again`, a run's end with its outcome
        (``end(error, action, ended, again=...)``)."""
    def hex_ids(self) -> tuple[str, str]: ...
    def get_span_context(self) -> Any: ...
    def is_recording(self) -> bool: ...
    def set_attribute(self, key: str, value: Any) -> None: ...
    def set_attributes(self, attributes: Mapping[str, Any]) -> None: ...
    def add_event(
        self, name: str, attributes: Any = None, timestamp: int | None = None
    ) -> None: ...
    def add_link(self, context: Any, attributes: Any = None) -> None: ...
    def update_name(self, name: str) -> None: ...
    def set_status(self, status: Any, description: str | None = None) -> None: ...
    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None: ...
    def __enter__(self) -> OtlpSpan: ...
    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None: ...

@final
class Written:
    """The read-your-writes guard's state of one controller run: the objects its reconciles
    wrote, followed through their caches' events, and each object's fence. Kinds are the
    indices the caller gives each cached kind; `seen` is 0 (applied), 1 (deleted) or 2 (a
    list's item, counted at its list's end). Calls that may catch a held key's fence up
    return the keys to wake (None: none)."""

    def __new__(cls, max_wait: float) -> Self: ...
    def __len__(self) -> int:
        """How many objects have a fence."""
    @property
    def followed(self) -> int:
        """How many objects are followed."""
    def set_waking(self, waking: bool) -> None: ...
    @property
    def pending(self) -> int:
        """How many reconciles have recorded writes not fenced yet."""
    def add_kind(
        self,
        group: str,
        kind: str,
        scope: str | object | None,
        reader: Callable[[str, str | None], tuple[str | None, str | None] | None] | object,
        selector: Callable[[Mapping[str, Any]], bool] | None = None,
        store: bool = False,
    ) -> int:
        """The next followed kind, its cache's scope (None: all; a namespace; a set with
        ``covers(namespace)``), how its cache shows an object's ``(uid, version)`` (a
        callable; or, `store` true, the `fastctl.Store` itself, whose table is read in the
        extension), and its label check of an answer; returns its index."""
    def set_on_started(
        self, on_started: Callable[[str, float, bool, bool, int], object] | None
    ) -> None:
        """Told ``(key, waited, was_held, expired, missing)`` of a start to count."""
    def set_key_of(self, key_of: Callable[[Any], str] | None) -> None:
        """The key of a reconciled object that is not a plain dict."""
    def set_observer_var(self, var: ContextVar[Any]) -> None:
        """The context variable `begin` sets each observer as (its `end` resets it)."""
    def set_clock(self, clock: Callable[[], float]) -> None:
        """The clock a writing reconcile's end is read from."""
    def follow(self, resource: Any, namespace: str | None, name: str) -> None:
        """A write begins: its object is followed (if a followed cache holds it)."""
    def answered(
        self,
        token: int,
        resource: Any,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        created: bool,
        deleted: bool,
    ) -> int:
        """A write ended: kept under `token` (0: the reconcile's first); the token (0:
        nothing recorded yet)."""
    def begin(self, obj: Any) -> Writes:
        """The observer of one async reconcile's writes, set as the write observer of the
        current context until its `end`."""
    def shown(self, token: int) -> bool:
        """Whether every write kept under `token` is shown."""
    def saw(
        self, kind: int, namespace: str, name: str, uid: str, version: str, seen: int
    ) -> list[str] | None: ...
    def saw_item(self, kind: int, item: Item, seen: int) -> list[str] | None: ...
    def list_frame(
        self, kind: int, done: bool, namespace: str | None = None
    ) -> list[str] | None: ...
    def fence(self, key: str, token: int, now: float) -> None: ...
    def hold(self, key: str, now: float) -> float | None:
        """None: start; a float: wait at most that long. A start after a hold or at the
        bound is told to `on_started` first."""
    def release(self, key: str) -> None: ...
    def hook(
        self,
        kind: int,
        list_frame: type,
        delete: object,
        init_apply: object,
        init_done: object,
        on_caught_up: Callable[[list[str]], object],
    ) -> WrittenHook:
        """What a cache of `kind` calls with each event it applied."""

@final
class Writes:
    """The observer of one async reconcile's writes (`Written.begin`)."""

    @property
    def token(self) -> int:
        """The number its writes are kept under (0: none)."""
    def started(self, resource: Any, namespace: str | None, name: str) -> str | None: ...
    def finished(
        self,
        resource: Any,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        *,
        made: bool,
        based_on: str | None,
        deleted: bool = False,
    ) -> None: ...
    def end(self) -> None:
        """The reconcile ended: the write observer is reset, and its writes are its
        object's fence from the `Written`'s clock; a write that ends later is recorded
        nowhere."""

@final
class WrittenHook:
    """The event hook of one cached kind (`Written.hook`)."""

    def __call__(self, event: Any) -> None: ...

@final
class WatchBody:
    """One watch response's body, decoded read by read off the socket: the HTTP/1.1 framing
    (`chunked`, else `length` bytes, else until the server closes) undone and the frames it
    completes decoded, as `decode_lines` (or, `protobuf`, `decode_proto_frames`) gives them."""

    def __new__(
        cls,
        chunked: bool,
        length: int | None = None,
        protobuf: bool = False,
        strip_managed_fields: bool = False,
        api_version: str | None = None,
        kind: str | None = None,
        replace_identity: bool = False,
        max_line: int = ...,
    ) -> Self: ...
    def feed(self, data: bytes) -> tuple[list[tuple[str, Item | bytes]], str | None, bytes | None]:
        """One read's bytes: (frames, and for the first malformed or too long frame, what
        is wrong and its bytes; nothing after it is read); ValueError for bad framing."""
    @property
    def done(self) -> bool:
        """The body is complete (its last chunk, or its length, was read)."""
    @property
    def overrun(self) -> bool:
        """Bytes came after the body's end: the connection cannot be used again."""
    @property
    def pending(self) -> int:
        """The bytes of a frame begun and not complete."""

@final
class TlsConfig:
    """The TLS settings of one API server for rustls, from the PEM bytes of its
    kubeconfig's files: the CA certificates (required when `verify`), the client
    certificate chain and its key (else looked for in `cert`). A `ValueError` says what
    cannot be loaded (no CA with `verify`, an encrypted key, a key type ring cannot sign
    with...): the transport then keeps Python's `ssl`."""

    def __new__(
        cls,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
        verify: bool = True,
    ) -> Self: ...

@final
class TlsSession:
    """One client connection's TLS (rustls) with `server_name` (a DNS name or an IP
    address) as the name the server's certificate must carry. A refused certificate is
    ``ssl.SSLCertVerificationError``, any other TLS failure ``ssl.SSLError``; a server name
    that is neither a name nor an address, a `ValueError`."""

    def __new__(cls, config: TlsConfig, server_name: str) -> Self: ...
    def start(self) -> bytes:
        """The first bytes to send (the ClientHello)."""
    def feed(self, data: bytes) -> tuple[bytes, bytes | None]:
        """One read of the socket: (the plaintext it completed, the TLS bytes to send back
        or ``None``)."""
    def encrypt(self, data: bytes) -> bytes:
        """`data` as TLS records to send (after the handshake)."""
    def close(self) -> bytes:
        """The close_notify alert to send before closing."""
    @property
    def handshaking(self) -> bool:
        """The handshake is still under way."""

_Http1Answer = tuple[int, str, bytes, bytes, bool, bytes, bool, int | None]

@final
class Http1Reader:
    """The answers of one HTTP/1.1 connection, one request at a time: ``expect`` when a
    request is sent, then every read to ``feed`` (or, on a TLS connection, ``feed_tls``)
    until it gives the answer: ``(status, reason, lines, body, keep_alive, encoding,
    chunked, length)``, ``lines`` the header lines with CRLF between them, ``encoding`` the
    ``Content-Encoding`` lowered, ``chunked`` and ``length`` the body's framing. A watch's
    200 is given once its head is in, with the bytes of its body read so far. A malformed
    answer is a `ValueError`."""

    def __new__(cls) -> Self: ...
    def expect(self, no_body: bool, stream: bool) -> None:
        """A request was sent: `no_body` for a ``HEAD``, `stream` when a 200 is a watch's."""
    def feed(self, data: bytes) -> _Http1Answer | None:
        """One read's bytes: the answer once complete, else ``None``."""
    def feed_tls(
        self, session: TlsSession, data: bytes
    ) -> tuple[_Http1Answer | None, bytes | None]:
        """One read of a TLS connection's socket, decrypted by `session` and read as by
        `feed`: (the answer or ``None``, the TLS bytes to send back or ``None``). A TLS
        failure is the `ssl` error `TlsSession.feed` raises."""
    def close(self) -> _Http1Answer | None:
        """The server closed the connection: the answer whose body lasted until then."""
    @property
    def phase(self) -> int:
        """0 reading the head, 1 a body by length, 2 a chunked one, 3 one until the
        server closes, 4 no answer awaited."""
