"""Warning Events on failed reconciles (`fastctl.runtime._failure_events`), without a
server: the controller's watch is faked and the Events are recorded or scripted. By default
a failure publishes one (through the controller's recorder, or one of its own), one series
per object and reason however often it fails and whatever the message; a success ends the
series; `ApplierConfig(failure_events=False)` turns them off; an object the model rejects
gets one Event series from its first failure, however quick the retries."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, ApplierConfig, ObjectRef, ReconcileResult
from fastctl.errors import InvalidObject
from fastctl.kube import _events
from fastctl.kube._events import Recorder
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime import _failure_events
from fastctl.runtime._failure_events import FailureEvents
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.controller._run import reporting_controller

from .test_typed_controller import Gizmo, gizmo

WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)


def widget(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
    }


def feed(monkeypatch: pytest.MonkeyPatch, *objects: dict[str, Any]) -> None:
    async def events(client: Any, resource: Resource, **_: Any) -> AsyncIterator[WatchEvent]:
        yield ListFrame(EventKind.INIT)
        for obj in objects:
            yield ObjectEvent(EventKind.INIT_APPLY, obj)
        yield ListFrame(EventKind.INIT_DONE)
        await asyncio.Event().wait()

    monkeypatch.setattr(_environment, "watcher", events)
    monkeypatch.setattr(_run, "watcher", events)


class FakeRecorder:
    def __init__(self, client: Any = None, reporting_controller: str = "") -> None:
        self.client = client
        self.reporting_controller = reporting_controller
        self.events: list[tuple[str, str, str, str]] = []
        self.made.append(self)

    made: ClassVar[list[FakeRecorder]] = []

    async def publish(self, obj: Any, *, type: str, reason: str, note: str, **_: Any) -> Any:
        self.events.append((obj["metadata"]["name"], type, reason, note))
        return {}


async def run_until(ctl: Controller, done: Any) -> list[ReconcileResult]:
    got: list[ReconcileResult] = []
    async for result in ctl.stream():
        got.append(result)
        if done(got):
            ctl.shutdown()
    return got


def client() -> ApiClient:
    return ApiClient.__new__(ApiClient)  # never used: the watch and the Events are faked


async def test_a_failed_reconcile_records_a_warning_event_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed(monkeypatch, widget("a"), widget("b"))
    FakeRecorder.made.clear()
    monkeypatch.setattr(_run, "Recorder", FakeRecorder)

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        if obj["metadata"]["name"] == "b":
            raise RuntimeError("the database refused: quota exceeded")
        return None

    api = client()
    ctl = Controller(api, WIDGET, reconcile, name="widgets")
    await run_until(ctl, lambda got: len(got) >= 2)
    await asyncio.sleep(0)
    [recorder] = FakeRecorder.made
    assert recorder.client is api
    assert recorder.reporting_controller == "fastctl/widgets"
    assert recorder.events == [
        (
            "b",
            "Warning",
            "ReconcileFailed",
            "reconcile failed: RuntimeError: the database refused: quota exceeded",
        )
    ]


async def test_the_controllers_recorder_is_used_and_the_switch_turns_them_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed(monkeypatch, widget("a"))

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        raise RuntimeError("boom")

    def policy(obj: Any, exc: BaseException, ctx: Any) -> Action:
        return Action.await_change()

    for enabled in (True, False):
        recorder = FakeRecorder()
        ctl = Controller(
            client(),
            WIDGET,
            reconcile,
            error_policy=policy,
            recorder=cast(Recorder, recorder),
            config=ApplierConfig(failure_events=enabled),
        )
        await run_until(ctl, lambda got: len(got) >= 1)
        await asyncio.sleep(0)
        assert [e[2] for e in recorder.events] == (["ReconcileFailed"] if enabled else [])


def test_the_reporting_controller_is_a_qualified_name() -> None:
    assert reporting_controller("widgets") == "fastctl/widgets"
    assert reporting_controller("My Widgets!") == "fastctl/My-Widgets"
    assert reporting_controller("café") == "fastctl/caf"
    assert reporting_controller("x" * 100) == "fastctl/" + "x" * 63
    assert reporting_controller("///") == "fastctl/controller"


# -- the series, on their own ---------------------------------------------------------------


def failed(name: str, error: BaseException | None, uid: str | None = None) -> ReconcileResult:
    obj = widget(name)
    if uid is not None:
        obj["metadata"]["uid"] = uid
    return ReconcileResult(ObjectRef(name, "default"), Action.await_change(), error, 0.0, obj)


async def settle(events: FailureEvents) -> None:
    while events.tasks:
        await asyncio.gather(*events.tasks)


async def test_one_series_per_object_and_reason_until_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    recorder = FakeRecorder()
    events = FailureEvents(cast(Recorder, recorder), "widgets")
    events.saw(failed("a", RuntimeError("first")))
    await settle(events)
    now[0] += 10
    events.saw(failed("a", RuntimeError("second, another message")))  # same reason
    await settle(events)
    events.saw(failed("b", RuntimeError("other object")))
    events.saw(failed("a", InvalidObject("default/a", "Widget", ["spec: bad"])))
    await settle(events)
    assert [(e[0], e[2], e[3]) for e in recorder.events] == [
        ("a", "ReconcileFailed", "reconcile failed: RuntimeError: first"),
        ("a", "ReconcileFailed", "reconcile failed: RuntimeError: first"),  # its series
        ("b", "ReconcileFailed", "reconcile failed: RuntimeError: other object"),
        ("a", "InvalidObject", "default/a is not a valid Widget: spec: bad"),
    ]
    events.saw(failed("a", None))  # a success ends the object's series
    events.saw(failed("a", RuntimeError("third")))
    now[0] += 6 * 60  # a quiet window ends one too
    events.saw(failed("b", RuntimeError("later")))
    await settle(events)
    assert [e[3] for e in recorder.events[4:]] == [
        "reconcile failed: RuntimeError: third",
        "reconcile failed: RuntimeError: later",
    ]


async def test_a_failure_while_its_event_is_written_is_not_another_request() -> None:
    release = asyncio.Event()

    class Slow(FakeRecorder):
        async def publish(self, obj: Any, **kw: Any) -> Any:
            await release.wait()
            return await super().publish(obj, **kw)

    recorder = Slow()
    events = FailureEvents(cast(Recorder, recorder), "widgets")
    for _ in range(3):
        events.saw(failed("a", RuntimeError("boom")))
    assert len(events.tasks) == 1
    release.set()
    await settle(events)
    events.saw(failed("a", RuntimeError("boom")))  # written: the next one is counted
    await settle(events)
    assert len(recorder.events) == 2


async def test_the_memory_of_series_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_failure_events, "MAX_SERIES", 2)
    events = FailureEvents(cast(Recorder, FakeRecorder()), "widgets")
    for name in ("a", "b", "c"):
        events.saw(failed(name, RuntimeError("boom")))
    await settle(events)
    assert list(events._series) == ["uid-b", "uid-c"]


# -- an object the model rejects: one Event from the first failure ---------------------------


async def test_quick_retries_of_an_invalid_object_make_one_event_and_its_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API server takes a while to create the first Event; the retries (5 ms backoff)
    come meanwhile. Once three separate Events were made in 18 ms; now one, then its series."""
    feed(monkeypatch, gizmo("bad", "many"))
    requests: list[tuple[str, str]] = []
    names = itertools.count()

    async def api(client: Any, method: str, path: str, **_: Any) -> Any:
        requests.append((method, path.rsplit("/", 1)[-1]))
        if method == "POST":
            await asyncio.sleep(0.05)  # the retries come before the Event exists
            return {"metadata": {"name": f"e{next(names)}"}}
        return {}

    monkeypatch.setattr(_events, "request_json", api)
    recorder = Recorder(client(), "gizmos")

    async def reconcile(obj: Gizmo, ctx: Any) -> Action | None:
        return None

    ctl = Controller(client(), Gizmo, reconcile, recorder=recorder)
    results = await run_until(ctl, lambda got: len(got) >= 6)
    assert all(isinstance(r.error, InvalidObject) for r in results)
    assert requests[0] == ("POST", "events")
    assert requests.count(("POST", "events")) == 1, requests
    assert set(requests[1:]) <= {("PATCH", "e0")}
