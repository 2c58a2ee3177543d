"""Dynamic namespace sets share one watch of the Namespaces per client and selector.

A controller whose primary kind and relations all watch ``team-*`` needs to know which
namespaces exist once, not once per kind: the sets share the Namespace watch, a set that
joins late is told the namespaces already known, and the watch closes with its last user."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube import Namespaces, Store
from fastctl.kube import _namespace_feed as feed_module
from fastctl.kube import _namespace_watch as nsw
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent

from .test_controller_relist import until

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
SECRET = ResolvedResource("", "v1", "Secret", "secrets", True)


class Server:
    """Watches by (kind, namespace, label selector), each fed from a queue the test fills."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str | None, str | None], asyncio.Queue[Any]] = {}
        self.opened: list[tuple[str, str | None, str | None]] = []
        self.closed: list[tuple[str, str | None, str | None]] = []
        self.on_error: dict[tuple[str, str | None, str | None], Any] = {}

    def queue(self, kind: str, ns: str | None, sel: str | None = None) -> asyncio.Queue[Any]:
        return self.queues.setdefault((kind, ns, sel), asyncio.Queue())

    def push(self, kind: str, ns: str | None, *events: Any, sel: str | None = None) -> None:
        for event in events:
            self.queue(kind, ns, sel).put_nowait(event)

    def watcher(
        self, client: Any, resource: Any, *, namespace: str | None = None, **kw: Any
    ) -> AsyncIterator[WatchEvent]:
        config = kw.get("config")
        key = (resource.kind, namespace, config.label_selector if config else None)
        self.opened.append(key)
        self.on_error[key] = kw.get("on_error")
        queue = self.queue(*key)

        async def events() -> AsyncIterator[WatchEvent]:
            try:
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                self.closed.append(key)

        return events()

    def namespace_watches(self, opened: bool = True) -> int:
        keys = self.opened if opened else self.closed
        return sum(1 for kind, _, _ in keys if kind == "Namespace")


def ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": name}}


def cm(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}"}}


def init() -> WatchEvent:
    return ListFrame(EventKind.INIT)


def done() -> WatchEvent:
    return ListFrame(EventKind.INIT_DONE)


def listed(obj: dict[str, Any]) -> WatchEvent:
    return ObjectEvent(EventKind.INIT_APPLY, obj)


def apply(obj: dict[str, Any]) -> WatchEvent:
    return ObjectEvent(EventKind.APPLY, obj)


async def holds(store: Store, *names: str) -> None:
    """Wait until `store` holds exactly `names` (namespace/name)."""

    def check() -> bool:
        return sorted(f"{k.namespace}/{k.name}" for k in store) == sorted(names)

    await until(check, f"the store holds {names}")


async def consume(stream: AsyncIterator[WatchEvent], store: Store) -> None:
    async for event in stream:
        store.apply(event)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Server:
    server = Server()
    monkeypatch.setattr(nsw, "watcher", server.watcher)
    return server


async def test_two_kinds_in_one_dynamic_set_share_one_namespace_watch(server: Server) -> None:
    client = ApiClient.__new__(ApiClient)
    server.push("Namespace", None, init(), listed(ns("team-a")), listed(ns("other")), done())
    server.push("ConfigMap", "team-a", init(), listed(cm("x", "team-a")), done())
    server.push("Secret", "team-a", init(), listed(cm("s", "team-a")), done())
    configmaps, secrets = Store(), Store()
    first = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, CM, Namespaces("team-*")), configmaps)
    )
    await holds(configmaps, "team-a/x")
    # the second set joins after the first list: told the namespaces already known
    second = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, SECRET, Namespaces("team-*")), secrets)
    )
    await holds(secrets, "team-a/s")
    assert secrets.is_ready
    # a namespace created later reaches both sets from the one watch
    server.push("ConfigMap", "team-b", init(), listed(cm("y", "team-b")), done())
    server.push("Secret", "team-b", init(), listed(cm("t", "team-b")), done())
    server.push("Namespace", None, apply(ns("team-b")))
    await holds(configmaps, "team-a/x", "team-b/y")
    await holds(secrets, "team-a/s", "team-b/t")
    assert server.namespace_watches() == 1
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert server.namespace_watches(opened=False) == 0  # the other set still uses it
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    await asyncio.sleep(0)
    assert server.namespace_watches(opened=False) == 1  # closed with its last user
    assert feed_module._FEEDS == {}


async def test_sets_with_different_selectors_or_clients_do_not_share(server: Server) -> None:
    one, two = ApiClient.__new__(ApiClient), ApiClient.__new__(ApiClient)
    for sel in (None, "env=prod"):
        server.push("Namespace", None, init(), done(), sel=sel)
    tasks = [
        asyncio.create_task(consume(nsw.namespace_set_watcher(c, CM, s), Store()))
        for c, s in (
            (one, Namespaces("team-*")),
            (one, Namespaces(selector="env=prod")),
            (two, Namespaces("team-*")),
        )
    ]
    await until(lambda: server.namespace_watches() == 3, "three Namespace watches")
    assert sorted(server.opened, key=str) == sorted(
        [("Namespace", None, None), ("Namespace", None, "env=prod"), ("Namespace", None, None)],
        key=str,
    )
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_set_joining_during_a_relist_sees_the_last_list_and_the_relist(
    server: Server,
) -> None:
    client = ApiClient.__new__(ApiClient)
    server.push("Namespace", None, init(), listed(ns("team-a")), done())
    server.push("ConfigMap", "team-a", init(), listed(cm("x", "team-a")), done())
    first_store = Store()
    first = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, CM, Namespaces("team-*")), first_store)
    )
    await holds(first_store, "team-a/x")
    # a relist opens (team-a gone, team-b listed so far) when the second set joins
    server.push("Namespace", None, init(), listed(ns("team-b")))
    key = (id(asyncio.get_running_loop()), id(client), None)
    await until(lambda: feed_module._FEEDS[key].listing == ["team-b"], "the relist is open")
    server.push("Secret", "team-b", init(), listed(cm("t", "team-b")), done())
    server.push("Secret", "team-a", init(), listed(cm("s", "team-a")), done())
    secrets = Store()
    second = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, SECRET, Namespaces("team-*")), secrets)
    )
    await holds(secrets, "team-a/s")  # the last complete list: team-a
    server.push("Namespace", None, done())  # the relist ends without team-a
    await holds(secrets, "team-b/t")
    for task in (first, second):
        task.cancel()
    await asyncio.gather(first, second, return_exceptions=True)


async def test_a_fatal_namespace_watch_error_ends_every_set_and_retried_ones_reach_all(
    server: Server,
) -> None:
    client = ApiClient.__new__(ApiClient)
    heard: list[str] = []

    def hear(kind: str) -> Callable[[BaseException], None]:
        return lambda exc: heard.append(f"{kind}: {exc}")

    streams = [
        nsw.namespace_set_watcher(client, kind, Namespaces("team-*"), on_error=hear(kind.kind))
        for kind in (CM, SECRET)
    ]

    async def drain(stream: AsyncIterator[WatchEvent]) -> None:
        async for _ in stream:
            pass

    tasks = [asyncio.create_task(drain(stream)) for stream in streams]
    key = (id(asyncio.get_running_loop()), id(client), None)
    await until(
        lambda: (
            key in feed_module._FEEDS
            and len(feed_module._FEEDS[key].subscribers) == 2
            and ("Namespace", None, None) in server.on_error
        ),
        "both sets subscribed to the open watch",
    )
    server.on_error[("Namespace", None, None)](ConnectionResetError("retried"))
    assert sorted(heard) == ["ConfigMap: retried", "Secret: retried"]
    server.push("Namespace", None, PermissionError("namespaces is forbidden"))
    for task in tasks:
        with pytest.raises(PermissionError, match="forbidden"):
            async with asyncio.timeout(5):
                await task
    assert feed_module._FEEDS == {}


async def test_a_late_set_is_told_of_namespaces_created_and_not_of_those_deleted(
    server: Server,
) -> None:
    client = ApiClient.__new__(ApiClient)
    server.push("Namespace", None, init(), listed(ns("team-a")), listed(ns("team-c")), done())
    server.push("ConfigMap", "team-a", init(), done())
    server.push("ConfigMap", "team-c", init(), done())
    first = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, CM, Namespaces("team-*")), Store())
    )
    await until(lambda: ("ConfigMap", "team-c", None) in server.opened, "team-c watched")
    server.push("Namespace", None, ObjectEvent(EventKind.DELETE, ns("team-c")))
    await until(lambda: ("ConfigMap", "team-c", None) in server.closed, "team-c left")
    server.push("ConfigMap", "team-d", init(), done())
    server.push("Namespace", None, apply(ns("team-d")))
    await until(lambda: ("ConfigMap", "team-d", None) in server.opened, "team-d watched")
    server.push("Secret", "team-a", init(), listed(cm("s", "team-a")), done())
    server.push("Secret", "team-d", init(), listed(cm("u", "team-d")), done())
    secrets = Store()
    second = asyncio.create_task(
        consume(nsw.namespace_set_watcher(client, SECRET, Namespaces("team-*")), secrets)
    )
    await holds(secrets, "team-a/s", "team-d/u")
    assert secrets.is_ready
    assert ("Secret", "team-c", None) not in server.opened
    for task in (first, second):
        task.cancel()
    await asyncio.gather(first, second, return_exceptions=True)
