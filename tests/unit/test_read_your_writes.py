"""The read-your-writes fence on its own: which writes a reconcile's next start waits for,
which events catch the cache up, and the bound. No controller, no server: writes are framed
as `fastctl.kube` frames them (`observed_write`) and answered by hand, and cache events are
told to the fence as a watch loop tells it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import ObjectRef, ReadYourWrites
from fastctl.errors import ApiError
from fastctl.kube import _http, delete
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._store import Store
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent
from fastctl.kube._writes import observed_write
from fastctl.runtime._metrics import ReconcileCounters
from fastctl.runtime._read_your_writes import CacheFence
from fastctl.runtime._written import WrittenObjects

WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
CM = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
SECRET = Resource("v1", "Secret", plural="secrets", namespaced=True)
WIDGETS = ResolvedResource("example.com", "v1", "Widget", "widgets", True)
CMS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
SECRETS = ResolvedResource("", "v1", "Secret", "secrets", True)
NS = "default"
KEY = f"{NS}/a"
WAIT = 5.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def obj(name: str, version: str, *, namespace: str = NS, uid: str | None = None) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    return {"metadata": {**meta, "resourceVersion": version}}


CACHED: dict[ObjectRef, dict[str, Any]] = {}
"""The ConfigMaps' cache as a write starts (empty unless a test fills it)."""


def fence_of(namespace: str | None = NS) -> tuple[CacheFence, ReconcileCounters, Clock]:
    counters = ReconcileCounters()
    clock = Clock()
    caches = {(WIDGET.group, WIDGET.kind): {}, (CM.group, CM.kind): CACHED}
    fence = CacheFence(caches, namespace, ReadYourWrites(max_wait=WAIT), counters, clock=clock)
    return fence, counters, clock


async def write(
    resource: ResolvedResource,
    name: str | None,
    status: int,
    answer: Any,
    *,
    namespace: str = NS,
    deleting: bool = False,
    meanwhile: Any = None,
) -> None:
    """One write framed as the object API frames it; `meanwhile()` runs while it is in
    flight (an echo that beats the answer)."""

    async def send(version: str | None) -> tuple[int, Any]:
        if meanwhile is not None:
            meanwhile()
        if isinstance(answer, Exception):
            raise answer
        return status, answer

    with observed_write(resource, namespace, name, deleting=deleting) as w:
        await w.send(send)


async def reconcile_writing(fence: CacheFence, *writes: Any, name: str = "a") -> None:
    """A reconcile of widget `name` that makes `writes` (coroutine factories), as the
    controller wraps it."""

    async def reconcile(o: Any, ctx: Any) -> None:
        for make in writes:
            with contextlib.suppress(ApiError):
                await make()

    await fence.observing(reconcile, None)(obj(name, "1"), None)  # type: ignore[misc]


def apply(o: dict[str, Any], kind: EventKind = EventKind.APPLY) -> ObjectEvent:
    return ObjectEvent(kind, o)  # type: ignore[arg-type]


async def test_the_next_start_waits_for_the_exact_version_written() -> None:
    fence, counters, clock = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(obj("c", "6")))  # an older version: not caught up
    clock.t = 1.0
    assert fence.hold(KEY, 1.0) == WAIT - 1.0
    fence.saw(CM)(apply(obj("c", "7")))
    assert fence.hold(KEY, 1.5) is None
    assert (counters.cache_waits, counters.cache_wait_expired) == (1, 0)
    assert counters.cache_wait_seconds == 1.5
    assert fence.hold(KEY, 2.0) is None  # the fence is used up
    assert len(fence) == 0
    assert len(fence.written) == 0


async def test_an_echo_that_beats_the_answer_counts() -> None:
    fence, counters, _ = fence_of()
    echo = apply(obj("c", "7"))
    await reconcile_writing(
        fence, lambda: write(CMS, "c", 200, obj("c", "7"), meanwhile=lambda: fence.saw(CM)(echo))
    )
    assert fence.hold(KEY, 0.0) is None
    assert counters.cache_waits == 0  # never held
    assert len(fence.written) == 0


async def test_a_write_that_changes_nothing_holds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A no-op write is answered with the object as it is: a version the cache showed
    before the write started, whose event will not come again."""
    monkeypatch.setitem(CACHED, ObjectRef("c", NS), obj("c", "7"))
    fence, _, _ = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    assert fence.hold(KEY, 0.0) is None


async def test_a_store_is_read_as_it_is_after_a_relist_too() -> None:
    """A `Store` is read for what it shows as a write starts by the extension itself, from
    the table the store holds then (a relist replaces it): a write answered with that
    version holds nothing, one answered with a newer version holds."""
    store = Store()

    def listed(version: str) -> None:
        store.apply(ListFrame(EventKind.INIT))
        store.apply(apply(obj("c", version), EventKind.INIT_APPLY))
        store.apply(ListFrame(EventKind.INIT_DONE))

    listed("6")
    options, counters = ReadYourWrites(max_wait=WAIT), ReconcileCounters()
    fence = CacheFence({(CM.group, CM.kind): store}, NS, options, counters, clock=Clock())
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "6")))
    assert fence.hold(KEY, 0.0) is None
    listed("8")
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "8")))
    assert fence.hold(KEY, 0.0) is None
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "9")))
    assert fence.hold(KEY, 0.0) == WAIT


async def test_a_write_that_failed_holds_nothing() -> None:
    fence, _, _ = fence_of()
    refused = ApiError(409, "Conflict", "taken")
    await reconcile_writing(fence, lambda: write(CMS, "c", 409, refused))
    assert fence.hold(KEY, 0.0) is None
    assert len(fence.written) == 0  # and nothing is followed


async def test_a_delete_waits_for_the_object_to_be_gone() -> None:
    """A child the last reconcile deleted is not seen as present by the next one: events
    that still show it (its last versions) do not catch the cache up, its deletion does."""
    fence, _, _ = fence_of()
    status = {"kind": "Status", "status": "Success", "details": {"name": "c", "uid": "uid-c"}}
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, status, deleting=True))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(obj("c", "6")))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(obj("c", "6", uid="uid-other"), EventKind.DELETE))  # another object
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(obj("c", "8"), EventKind.DELETE))
    assert fence.hold(KEY, 0.0) is None


async def test_a_delete_held_up_by_finalizers_waits_for_the_marked_version() -> None:
    fence, _, _ = fence_of()
    marked = obj("c", "9")
    marked["metadata"] |= {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]}
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, marked, deleting=True))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(marked))
    assert fence.hold(KEY, 0.0) is None


async def test_a_child_in_another_namespace_is_not_waited_for() -> None:
    """The controller watches one namespace: a write elsewhere never reaches its cache."""
    fence, _, _ = fence_of(NS)
    await reconcile_writing(
        fence, lambda: write(CMS, "c", 200, obj("c", "7", namespace="x"), namespace="x")
    )
    assert fence.hold(KEY, 0.0) is None
    everywhere, _, _ = fence_of(None)  # watching every namespace: it is waited for
    await reconcile_writing(
        everywhere, lambda: write(CMS, "c", 200, obj("c", "7", namespace="x"), namespace="x")
    )
    assert everywhere.hold(KEY, 0.0) == WAIT


async def test_a_kind_read_without_a_cache_is_not_waited_for() -> None:
    fence, _, _ = fence_of()
    await reconcile_writing(fence, lambda: write(SECRETS, "s", 200, obj("s", "7")))
    assert fence.hold(KEY, 0.0) is None


async def test_past_the_bound_the_reconcile_starts_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fence, counters, _ = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    assert fence.hold(KEY, 1.0) == WAIT - 1.0
    with caplog.at_level(logging.WARNING, logger="fastctl.controller"):
        assert fence.hold(KEY, WAIT) is None
    assert (counters.cache_waits, counters.cache_wait_expired) == (1, 1)
    assert "does not show 1 write(s)" in caplog.text
    assert len(fence) == 0
    assert len(fence.written) == 0


async def test_a_create_by_generate_name_is_caught_up_by_its_uid() -> None:
    """The name comes with the answer; the echo (any version of the new UID) may come
    before it, or after."""
    made = obj("c-x1", "7", uid="uid-new")
    early, _, _ = fence_of()
    echo = apply(made)
    await reconcile_writing(
        early, lambda: write(CMS, None, 201, made, meanwhile=lambda: early.saw(CM)(echo))
    )
    assert early.hold(KEY, 0.0) is None
    late, _, _ = fence_of()
    await reconcile_writing(late, lambda: write(CMS, None, 201, made))
    assert late.hold(KEY, 0.0) == WAIT
    late.saw(CM)(apply(obj("c-x1", "8", uid="uid-new")))  # a later version
    assert late.hold(KEY, 0.0) is None


async def test_a_listed_version_counts_once_the_list_is_complete() -> None:
    """The store swaps a relist in at its end: until then the cache shows the old state."""
    fence, _, _ = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    fence.saw(CM)(ListFrame(EventKind.INIT))
    fence.saw(CM)(apply(obj("c", "7"), EventKind.INIT_APPLY))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(ListFrame(EventKind.INIT_DONE))
    assert fence.hold(KEY, 0.0) is None


async def test_a_list_cut_short_counts_for_nothing() -> None:
    """A relist that starts again (``INIT`` before ``INIT_DONE``) drops what it had
    received: the store never swapped it in."""
    fence, _, _ = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    fence.saw(CM)(ListFrame(EventKind.INIT))
    fence.saw(CM)(apply(obj("c", "7"), EventKind.INIT_APPLY))
    fence.saw(CM)(ListFrame(EventKind.INIT))  # the list starts over, without c this time
    fence.saw(CM)(ListFrame(EventKind.INIT_DONE))
    assert fence.hold(KEY, 0.0) == WAIT


async def test_the_object_api_tells_the_fence_of_its_deletes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fastctl.kube.delete` is a write like the others: heard, answered, waited for; a
    DELETE of an object already gone (404, ``missing_ok``) changed nothing."""
    answers = iter([(200, {"kind": "Status", "details": {"uid": "uid-c"}}), (404, {})])

    async def request(client: Any, method: str, path: str, **kw: Any) -> Any:
        assert method == "DELETE", method
        status, body = next(answers)
        return _Answer(status, body)

    monkeypatch.setattr(_http, "request", request)
    fence, _, _ = fence_of()
    client = ApiClient(Configuration(host="http://fake.invalid"))
    await reconcile_writing(fence, lambda: delete(client, CMS, "c", namespace=NS))
    assert fence.hold(KEY, 0.0) == WAIT
    fence.saw(CM)(apply(obj("c", "8"), EventKind.DELETE))
    assert fence.hold(KEY, 0.0) is None
    await reconcile_writing(fence, lambda: delete(client, CMS, "c", namespace=NS))
    assert fence.hold(KEY, 0.0) is None


class _Answer:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._data = orjson.dumps(
            body if status < 400 else {"kind": "Status", "code": status, "reason": "NotFound"}
        )

    async def read(self) -> bytes:
        return self._data

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_a_held_key_is_woken_by_the_event_that_catches_its_cache_up() -> None:
    fence, _, _ = fence_of()
    woken: list[str] = []
    fence.bind(woken.append)
    await reconcile_writing(
        fence,
        lambda: write(CMS, "c", 200, obj("c", "7")),
        lambda: write(WIDGETS, "a", 200, obj("a", "8")),
    )
    fence.saw(CM)(apply(obj("c", "7")))
    assert woken == []  # not held yet: nothing to wake
    assert fence.hold(KEY, 0.0) == WAIT  # the widget's write is not shown yet
    fence.saw(WIDGET)(apply(obj("a", "8")))
    assert woken == [KEY]


async def test_fences_of_objects_never_reconciled_again_are_forgotten() -> None:
    fence, _, clock = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    assert len(fence) == 1
    clock.t = 10_000.0  # long past the deadline: the next start (of any object) sweeps it
    await reconcile_writing(fence)  # writes nothing: no fence, no sweep
    assert len(fence) == 1
    assert fence.hold(f"{NS}/other", clock.t) is None
    assert len(fence) == 0
    assert len(fence.written) == 0
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "8")))
    assert len(fence) == 1
    clock.t = 20_000.0  # and the next fence sweeps it too
    await reconcile_writing(fence, lambda: write(CMS, "d", 200, obj("d", "9")), name="b")
    assert len(fence) == 1  # b's: a's is gone


async def test_a_plain_reconciles_writes_are_handed_to_the_loop() -> None:
    """A plain function runs in a thread: what its observer hears is applied on the
    loop's thread (whose state it is), before the reconcile's end is."""
    fence, _, _ = fence_of()
    fence.bind(lambda key: None)
    threads: list[int] = []
    follow = fence.written.follow

    def spy(*args: Any) -> None:
        threads.append(threading.get_ident())
        follow(*args)

    fence.written.follow = spy  # type: ignore[method-assign,assignment]

    def reconcile(o: Any, ctx: Any) -> None:
        asyncio.run(write(CMS, "c", 200, obj("c", "7")))

    wrapped = fence.observing(reconcile, None)
    await asyncio.get_running_loop().run_in_executor(None, wrapped, obj("a", "1"), None)
    assert threads == [threading.get_ident()]
    assert fence.hold(KEY, 0.0) == WAIT


async def test_a_write_that_ends_after_its_reconcile_is_recorded_nowhere() -> None:
    """A task the reconcile left behind writes after the reconcile ended: no fence takes
    the write (its reconcile's is made), and its object is not kept followed for it."""
    fence, _, _ = fence_of()
    go = asyncio.Event()
    late: list[asyncio.Task[None]] = []

    async def write_later() -> None:
        await go.wait()
        await write(CMS, "c", 200, obj("c", "7"))

    async def reconcile(o: Any, ctx: Any) -> None:
        late.append(asyncio.create_task(write_later()))

    await fence.observing(reconcile, None)(obj("a", "1"), None)  # type: ignore[misc]
    go.set()
    await late[0]
    assert fence.hold(KEY, 0.0) is None
    assert len(fence.written) == 0
    assert fence.written.state.pending == 0


def test_the_options_refuse_what_is_not_a_bound() -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ValueError, match="max_wait"):
            ReadYourWrites(max_wait=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="enabled"):
        ReadYourWrites(enabled=1)  # type: ignore[arg-type]
    assert ReadYourWrites(max_wait=2).max_wait == 2.0


def test_an_object_followed_for_nothing_is_not_kept() -> None:
    written = WrittenObjects({(CM.group, CM.kind): {}}, None, lambda keys: None)
    written.follow(CMS, NS, "c")
    assert len(written) == 1
    assert written.answered(CMS, NS, "c", None, created=False, deleted=False) is None
    assert len(written) == 0


async def test_what_a_fence_keeps_is_no_python_object() -> None:
    """About a thousand fences are alive at once in a burst of writes: they are kept in the
    extension, so the collector has nothing of them to traverse. A write's record does not
    cross to Python either: a reconcile's writes are kept under a number its fence names."""
    fence, _, _ = fence_of()
    await reconcile_writing(fence, lambda: write(CMS, "c", 200, obj("c", "7")))
    gc.collect()
    alive = len(gc.get_objects())
    for i in range(100):
        child = f"c{i}"
        await reconcile_writing(
            fence, lambda child=child: write(CMS, child, 200, obj(child, "7")), name=f"w{i}"
        )
    gc.collect()
    assert len(fence) == 101
    assert len(gc.get_objects()) - alive < 50  # nothing kept per fence
    assert fence.written.state.pending == 0  # every reconcile's writes went to its fence
    assert fence.hold(KEY, 0.0) == WAIT  # and it still holds
