"""The Manager's shared watches honour their controllers' watch options, without a server:
the watcher is replaced by a fake that records how it was opened and reports one retried
error, as a real watcher does for a 503 it backs off from."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action
from fastctl.errors import ApiError
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchConfig, WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.manager import Manager, _watches
from fastctl.runtime.manager._watches import share_watches

WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
CHILD = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)


class FakeWatchers:
    """Stands in for `watcher`: each call is recorded (resource, strip_managed_fields), says
    once to its `on_error` that it retried a 503, lists nothing, and then waits."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, bool | None]] = []
        self.clients: list[Any] = []

    def __call__(
        self,
        client: Any,
        resource: Resource,
        *,
        config: WatchConfig,
        on_error: Any = None,
        **_: Any,
    ) -> AsyncIterator[WatchEvent]:
        self.opened.append((resource.kind, config.strip_managed_fields))
        self.clients.append(client)
        return self._events(on_error)

    async def _events(self, on_error: Any) -> AsyncIterator[WatchEvent]:
        if on_error is not None:
            on_error(ApiError(503, "ServiceUnavailable", "try later", method="GET", path="/x"))
        yield ListFrame(EventKind.INIT)
        yield ListFrame(EventKind.INIT_DONE)
        await asyncio.Event().wait()


async def nothing(obj: dict[str, Any], ctx: Any) -> Action | None:
    return None


@pytest.fixture
def watchers(monkeypatch: pytest.MonkeyPatch) -> FakeWatchers:
    fake = FakeWatchers()
    monkeypatch.setattr(_watches, "watcher", fake)
    monkeypatch.setattr(_environment, "watcher", fake)
    monkeypatch.setattr(_run, "watcher", fake)
    return fake


async def run_until_ready(manager: Manager) -> None:
    task = asyncio.create_task(manager.run())
    try:
        for _ in range(2000):
            if manager.is_ready():
                break
            await asyncio.sleep(0)
        assert manager.is_ready()
    finally:
        manager.shutdown()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)


CLIENT = ApiClient.__new__(ApiClient)  # never used: the watcher is faked


def controller(name: str, *, strip: bool = True, client: ApiClient = CLIENT) -> Controller:
    watch = WatchConfig(strip_managed_fields=strip)
    return Controller(client, WIDGET, nothing, name=name, watch_config=watch).owns(CHILD)


async def test_every_controller_counts_the_errors_of_a_shared_watch(
    watchers: FakeWatchers,
) -> None:
    manager = Manager(ApiClient.__new__(ApiClient), metrics_port=None, probe_port=None)
    manager.add(controller("a")).add(controller("b"))
    await run_until_ready(manager)
    assert sorted(watchers.opened) == [("ConfigMap", True), ("Widget", True)]  # shared
    for name in ("a", "b"):
        # one retried error on each of the two watches the controller uses
        errors = manager.registry.get_sample_value(
            "fastctl_watch_errors_total", {"controller": name}
        )
        assert errors == 2, name


async def test_controllers_on_two_clusters_never_share_a_watch(watchers: FakeWatchers) -> None:
    """The same kind with the same options through two clients (two clusters) is two
    watches, each on its own client, and two caches."""
    other = ApiClient.__new__(ApiClient)
    manager = Manager(CLIENT, metrics_port=None, probe_port=None)
    manager.add(controller("here")).add(controller("there", client=other))
    await run_until_ready(manager)
    assert sorted(watchers.opened) == [("ConfigMap", True)] * 2 + [("Widget", True)] * 2
    assert sorted(map(id, watchers.clients)) == sorted([id(CLIENT)] * 2 + [id(other)] * 2)
    here, there = manager.controllers
    assert here.store is not there.store


async def test_controllers_that_disagree_on_managed_fields_get_their_own_watches(
    watchers: FakeWatchers,
) -> None:
    """One shared watch per set of options: the two that keep managedFields share theirs."""
    manager = Manager(ApiClient.__new__(ApiClient), metrics_port=None, probe_port=None)
    keep = [controller(f"keeps-{i}", strip=False) for i in range(2)]
    manager.add(controller("a")).add(controller("b")).add(keep[0]).add(keep[1])
    await run_until_ready(manager)
    assert sorted(watchers.opened) == [
        ("ConfigMap", False),
        ("ConfigMap", True),
        ("Widget", False),
        ("Widget", True),
    ]
    assert keep[0].store is keep[1].store
    assert keep[0].store is not manager.controllers[0].store
    assert manager.controllers[0].store is manager.controllers[1].store


async def test_two_relations_on_one_resource_each_hear_every_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`owns(CHILD)` and `watches(CHILD, ...)` in one controller share the Manager's watch
    of CHILD through a subscription each: neither takes events from the other's stream, and
    no subscription is left unread (a bounded channel nobody reads stalls the shared watch)."""
    listing: list[WatchEvent] = [
        ListFrame(EventKind.INIT),
        *(
            ObjectEvent(EventKind.INIT_APPLY, {"metadata": {"name": f"c{i}", "namespace": "n"}})
            for i in range(5)
        ),
        ListFrame(EventKind.INIT_DONE),
    ]

    def fake(*_: Any, **__: Any) -> AsyncIterator[WatchEvent]:
        async def events() -> AsyncIterator[WatchEvent]:
            for event in listing:
                yield event
            await asyncio.Event().wait()

        return events()

    monkeypatch.setattr(_watches, "watcher", fake)
    ctl = controller("a").watches(CHILD, lambda obj: [])
    manager = Manager(ApiClient.__new__(ApiClient), metrics_port=None, probe_port=None)
    manager.add(ctl)
    shared = share_watches(manager.controllers, sharded=lambda c: False)
    watches = {w.name: w for w in shared.watches}
    assert set(watches) == {str(CHILD)}  # the primary is watched once: not shared
    watch = watches[str(CHILD)]
    task = watch.start()

    async def take(use: int) -> list[WatchEvent]:
        events = shared.sources[ctl.name][use].events(lambda exc: None)
        return [await anext(events) for _ in listing]

    try:
        owned, mapped = await asyncio.wait_for(asyncio.gather(take(0), take(1)), 10)
    finally:
        await watch.stop()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    assert owned == listing
    assert mapped == listing
