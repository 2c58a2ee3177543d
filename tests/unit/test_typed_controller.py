"""Typed reconciles without a server: a fake watcher feeds the cache plain JSON objects, one
of which the model rejects. The reconcile gets validated instances; the bad object fails
its own reconcile with `InvalidObject` (error policy, Event) and the others go on. And a
status model is applied as its set fields, by alias."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, cast

import pytest
from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import Action, CustomResource, InvalidObject, KubeModel, ReconcileResult
from fastctl.kube import _objects, apply_status
from fastctl.kube._events import Recorder
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run


class Spec(KubeModel):
    replicas: Annotated[int, Field(ge=0)] = 1


class Status(KubeModel):
    observed_generation: int | None = None
    ready_replicas: int = 0
    message: str | None = None


class Gizmo(CustomResource, group="test.fastctl.dev", version="v1"):
    spec: Spec
    status: Status | None = None


def gizmo(name: str, replicas: object) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    return {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Gizmo",
        "metadata": meta,
        "spec": {"replicas": replicas},
    }


OBJECTS = [gizmo("a", 1), gizmo("bad", "many"), gizmo("c", 3)]


@pytest.fixture(autouse=True)
def fake_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    async def events(client: Any, resource: Resource, **_: Any) -> AsyncIterator[WatchEvent]:
        assert resource == Gizmo.resource()
        yield ListFrame(EventKind.INIT)
        for obj in OBJECTS:
            yield ObjectEvent(EventKind.INIT_APPLY, obj)
        yield ListFrame(EventKind.INIT_DONE)
        await asyncio.Event().wait()

    monkeypatch.setattr(_environment, "watcher", events)

    monkeypatch.setattr(_run, "watcher", events)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def publish(self, obj: Any, *, type: str, reason: str, note: str, **_: Any) -> Any:
        self.events.append((obj["metadata"]["name"], type, reason))
        return {}


async def results_of(ctl: Controller, count: int) -> list[ReconcileResult]:
    got: list[ReconcileResult] = []
    async for result in ctl.stream():
        got.append(result)
        if len(got) == count:
            ctl.shutdown()
    return got


def client() -> ApiClient:
    return ApiClient.__new__(ApiClient)  # never used: the events are faked


async def test_reconciles_get_instances_and_a_bad_object_fails_alone() -> None:
    seen: dict[str, Spec] = {}
    policy_calls: list[tuple[str, type[BaseException]]] = []
    recorder = FakeRecorder()

    async def reconcile(obj: Gizmo, ctx: Any) -> Action | None:
        assert isinstance(obj, Gizmo)
        assert obj.metadata.name is not None
        seen[obj.metadata.name] = obj.spec
        return None

    def policy(obj: Any, exc: BaseException, ctx: Any) -> Action:
        policy_calls.append((obj["metadata"]["name"], type(exc)))  # the JSON object
        return Action.await_change()

    ctl = Controller(
        client(),
        Gizmo,
        reconcile,
        error_policy=policy,
        recorder=cast(Recorder, recorder),
    )
    assert ctl.resource == Gizmo.resource()
    results = await results_of(ctl, 3)
    assert seen == {"a": Spec(replicas=1), "c": Spec(replicas=3)}
    (bad,) = [r for r in results if r.error is not None]
    assert bad.ref.name == "bad"
    assert isinstance(bad.error, InvalidObject)
    assert "default/bad is not a valid Gizmo" in str(bad.error)
    assert "spec.replicas" in str(bad.error)
    assert bad.obj == gizmo("bad", "many")
    assert policy_calls == [("bad", InvalidObject)]
    await asyncio.sleep(0)
    assert recorder.events == [("bad", "Warning", "InvalidObject")]


async def test_a_plain_function_reconcile_stays_on_a_thread() -> None:
    threads: set[str] = set()

    def reconcile(obj: Gizmo, ctx: Any) -> None:
        assert isinstance(obj, Gizmo)
        threads.add(threading.current_thread().name)

    ctl = Controller(client(), Gizmo, reconcile)
    results = await results_of(ctl, 3)
    assert sum(r.error is None for r in results) == 2
    assert threading.main_thread().name not in threads


async def test_a_plain_resource_still_gets_dicts() -> None:
    got: list[object] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        got.append(obj)

    await results_of(Controller(client(), Gizmo.resource(), reconcile), 3)
    assert sorted(o["metadata"]["name"] for o in got) == ["a", "bad", "c"]  # type: ignore[index]


async def test_apply_status_sends_the_set_fields_of_a_status_model_by_alias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, bytes]] = []

    async def request_json_status(client: Any, method: str, path: str, **kw: Any) -> Any:
        sent.append((path, kw["body"]))
        return 200, {}

    monkeypatch.setattr(_objects, "request_json_status", request_json_status)
    obj = Gizmo.model_validate(gizmo("a", 2))
    # ready_replicas left unset; message set to None, its default: "no value", left out too
    status = Status(observed_generation=4, message=None)
    await apply_status(client(), Gizmo.resource(), obj, status=status, field_manager="m")
    import orjson

    path, body = sent[0]
    assert path.endswith("/namespaces/default/gizmos/a/status")
    assert orjson.loads(body) == {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Gizmo",
        "metadata": {"name": "a", "namespace": "default"},
        "status": {"observedGeneration": 4},
    }


class Finish(KubeModel):
    colour: Literal["red", "blue"] | None = None  # optional: None is "no value"
    given: int | None  # required, but nullable: None must be sent as null
    shade: str | None = "dark"  # a None that differs from the default is kept
    extra: dict[str, Any] = Field(default_factory=dict)


def test_a_none_whose_default_is_none_is_left_out_of_every_dump() -> None:
    finish = Finish(colour=None, given=None, shade=None, extra={"k": None})
    expected = {"given": None, "shade": None, "extra": {"k": None}}
    assert finish.model_dump(mode="json") == expected
    assert finish.model_dump(mode="json", exclude_unset=True) == expected
    assert Finish.model_validate(finish.model_dump()) == finish  # absence parses back as None
    assert Finish(colour="red", given=1).model_dump(exclude_unset=True) == {
        "colour": "red",
        "given": 1,
    }
