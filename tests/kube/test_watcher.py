"""The watcher against the real kube-apiserver: lists, watches, relists, and every failure.

Faults the server cannot produce on demand (a silent connection, a corrupt line, 429/503
bursts) come from `FaultProxy`, which sits between the watcher and the real server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError
from fastctl.kube._objects import apply, delete, patch
from fastctl.kube._resource import Resource
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import Backoff, EventKind, ObjectEvent, WatchConfig, WatchEvent, watcher
from fastctl.testing import ControlPlane
from fastctl.types import ObjectRef

from .conftest import CM, Collector, make_configmap, name_of
from .faultproxy import FaultProxy

pytestmark = pytest.mark.kube

Collect = Callable[[AsyncIterable[WatchEvent]], Collector]
FAST = Backoff(initial=0.1, maximum=1.0)


def query(path: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}


def initial_done(n: int = 1) -> Callable[[list[WatchEvent]], bool]:
    return lambda events: sum(e.kind is EventKind.INIT_DONE for e in events) >= n


async def test_paginated_list_then_watch(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    for i in range(7):
        await make_configmap(client, namespace, f"cm-{i}", {"i": str(i)})
    paginated = WatchConfig(page_size=2, streaming_list=False)
    events = collect(watcher(proxied, CM, namespace=namespace, config=paginated))
    await events.wait_for(initial_done())
    kinds = [e.kind for e in events.events]
    assert kinds == [EventKind.INIT, *[EventKind.INIT_APPLY] * 7, EventKind.INIT_DONE]
    assert sorted(events.names(EventKind.INIT_APPLY)) == [f"cm-{i}" for i in range(7)]
    first = events.events[1]
    assert isinstance(first, ObjectEvent)
    # apiVersion and kind are filled in for lists
    assert (first.obj["apiVersion"], first.obj["kind"]) == ("v1", "ConfigMap")
    pages = [query(p) for p in proxy.lists() if "/configmaps" in p]
    assert len(pages) == 4
    assert all(p["limit"] == "2" for p in pages)
    assert "continue" not in pages[0]
    assert all("continue" in p for p in pages[1:])

    # the watch starts at the list's resourceVersion, with bookmarks and a server timeout
    await events.wait_for(lambda _: proxy.watches())
    watch = query(proxy.watches()[0])
    assert watch["allowWatchBookmarks"] == "true"
    assert watch["timeoutSeconds"] == "290"
    assert int(watch["resourceVersion"]) > 0

    await make_configmap(client, namespace, "new", {"a": "1"})
    await patch(client, CM, "new", {"data": {"a": "2"}}, namespace=namespace)
    await delete(client, CM, "new", namespace=namespace)
    await events.wait_for(lambda _: events.count(EventKind.DELETE, "new") == 1)
    live = [(e.kind, name_of(e)) for e in events.events[9:]]
    assert live == [
        (EventKind.APPLY, "new"),
        (EventKind.APPLY, "new"),
        (EventKind.DELETE, "new"),
    ]
    applied = [e.obj for e in events.events[9:11] if isinstance(e, ObjectEvent)]
    assert [o["data"]["a"] for o in applied] == ["1", "2"]
    deleted = events.events[11]
    assert isinstance(deleted, ObjectEvent)
    assert deleted.obj["data"] == {"a": "2"}  # the last known state


async def test_streaming_list_is_used_when_supported(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    for i in range(3):
        await make_configmap(client, namespace, f"cm-{i}")
    events = collect(watcher(proxied, CM, namespace=namespace))
    await events.wait_for(initial_done())
    assert sorted(events.names(EventKind.INIT_APPLY)) == ["cm-0", "cm-1", "cm-2"]
    assert not [p for p in proxy.lists() if "/configmaps" in p]  # no paginated list
    first = query(proxy.watches()[0])
    assert first["sendInitialEvents"] == "true"
    assert first["resourceVersionMatch"] == "NotOlderThan"
    # the same stream goes on as the watch
    await make_configmap(client, namespace, "later")
    await events.wait_for(lambda _: events.count(EventKind.APPLY, "later") == 1)
    assert len(proxy.watches()) == 1


async def test_streaming_list_falls_back_to_pagination_on_4xx(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    await make_configmap(client, namespace, "only")
    proxy.fail(422, match=lambda _m, path: "sendInitialEvents" in path)
    events = collect(watcher(proxied, CM, namespace=namespace, backoff=FAST))
    await events.wait_for(initial_done())
    assert events.names(EventKind.INIT_APPLY) == ["only"]
    assert [p for p in proxy.lists() if "/configmaps" in p]


async def test_cluster_scoped_resource(client: ApiClient, namespace: str, collect: Collect) -> None:
    events = collect(
        watcher(
            client,
            Resource("v1", "Namespace"),
            config=WatchConfig(field_selector=f"metadata.name={namespace}"),
        )
    )
    await events.wait_for(initial_done())
    assert events.names(EventKind.INIT_APPLY) == [namespace]
    await patch(
        client, Resource("v1", "Namespace"), namespace, {"metadata": {"labels": {"x": "y"}}}
    )
    await events.wait_for(lambda _: events.count(EventKind.APPLY, namespace) >= 1)


async def test_deletes_while_disconnected_are_replayed(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    """Within the watch cache's window a reconnect resumes, and the server replays the
    deletions as DELETED events: no relist needed."""
    for i in range(4):
        await make_configmap(client, namespace, f"cm-{i}")
    store = Store()
    events = collect(reflector(store, watcher(proxied, CM, namespace=namespace, backoff=FAST)))
    await events.wait_for(initial_done())
    proxy.down = True
    proxy.cut()
    await delete(client, CM, "cm-0", namespace=namespace)
    await delete(client, CM, "cm-1", namespace=namespace)
    await asyncio.sleep(0.5)
    proxy.down = False
    await events.wait_for(lambda _: sorted(events.names(EventKind.DELETE)) == ["cm-0", "cm-1"])
    assert events.count(EventKind.INIT) == 1  # resumed, not relisted
    assert sorted(r.name for r in store) == ["cm-2", "cm-3"]
    resumed = query(proxy.watches()[-1])
    assert int(resumed["resourceVersion"]) > 0


async def test_relist_after_410_reports_objects_deleted_meanwhile(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    collect: Collect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch is down while objects are deleted, and kube-apiserver restarts meanwhile, so
    its watch cache starts after our resourceVersion: the resume gets 410 Gone, the watcher
    lists again, and the store reports the objects that vanished as DELETE events."""
    caplog.set_level(logging.INFO, logger="fastctl.watcher")
    for i in range(5):
        await make_configmap(client, namespace, f"cm-{i}", {"v": "0"})
    store = Store()
    errors: list[BaseException] = []
    events = collect(
        reflector(
            store,
            watcher(proxied, CM, namespace=namespace, backoff=FAST, on_error=errors.append),
        )
    )
    await events.wait_for(initial_done())
    proxy.down = True  # every request now gets 503: the watcher backs off and retries
    proxy.cut()
    await delete(client, CM, "cm-0", namespace=namespace)
    await delete(client, CM, "cm-3", namespace=namespace)
    await patch(client, CM, "cm-1", {"data": {"v": "1"}}, namespace=namespace)
    await make_configmap(client, namespace, "cm-new")
    await control_plane.restart_apiserver()
    proxy.down = False

    await events.wait_for(initial_done(2), timeout=60)
    await events.wait_for(lambda _: len(events.names(EventKind.DELETE)) >= 2)
    assert sorted(events.names(EventKind.DELETE)) == ["cm-0", "cm-3"]
    assert events.count(EventKind.INIT) == 2
    assert "gone" in caplog.text  # it was a 410, not a lucky resume
    assert any(isinstance(e, ApiError) and e.status == 503 for e in errors)
    assert sorted(r.name for r in store) == ["cm-1", "cm-2", "cm-4", "cm-new"]
    assert store[ObjectRef("cm-1", namespace)]["data"] == {"v": "1"}
    # the DELETEs come after the relist's INIT_DONE, when the store has already dropped them
    last_done = max(i for i, e in enumerate(events.events) if e.kind is EventKind.INIT_DONE)
    assert {name_of(e) for e in events.events[last_done + 1 :] if e.kind is EventKind.DELETE} == {
        "cm-0",
        "cm-3",
    }


async def test_apiserver_restart_mid_watch_loses_no_update(
    client: ApiClient, control_plane: ControlPlane, namespace: str, collect: Collect
) -> None:
    """A writer keeps updating objects while kube-apiserver restarts under the watcher;
    afterwards the cache holds exactly the server's final state of every object."""
    names = [f"cm-{i}" for i in range(10)]
    for name in names:
        await make_configmap(client, namespace, name, {"n": "0"})
    store = Store()
    events = collect(reflector(store, watcher(client, CM, namespace=namespace, backoff=FAST)))
    await events.wait_for(initial_done())
    written: dict[str, int] = dict.fromkeys(names, 0)

    async def writer(stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            name = names[n % len(names)]
            try:
                await patch(client, CM, name, {"data": {"n": str(n)}}, namespace=namespace)
                written[name] = n
            except Exception:  # the API server is restarting: try again
                await asyncio.sleep(0.1)

    stop = asyncio.Event()
    task = asyncio.create_task(writer(stop))
    await asyncio.sleep(1.0)
    before = dict(written)
    await control_plane.restart_apiserver()
    await asyncio.sleep(2.0)
    stop.set()
    await task
    assert before != written  # writes landed after the restart too
    # the last write of each object must reach the cache
    await events.wait_for(
        lambda _: all(
            store.get(ObjectRef(n, namespace), {}).get("data", {}).get("n") == str(written[n])
            for n in names
        ),
        timeout=60,
    )
    assert all(n > 0 for n in before.values())  # and before it


async def test_silent_connection_is_dropped_after_read_timeout(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    await make_configmap(client, namespace, "a")
    quick = WatchConfig(read_timeout=2.0)
    events = collect(watcher(proxied, CM, namespace=namespace, config=quick, backoff=FAST))
    await events.wait_for(initial_done())
    await events.wait_for(lambda _: proxy.freeze() == 1)  # the open watch goes silent
    await patch(client, CM, "a", {"data": {"x": "1"}}, namespace=namespace)
    started = time.monotonic()
    await events.wait_for(lambda _: events.count(EventKind.APPLY, "a") == 1, timeout=20)
    assert time.monotonic() - started < 10  # noticed by the read timeout, not by luck
    assert len(proxy.watches()) >= 2


async def test_malformed_line_resumes_from_last_good_resource_version(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    namespace: str,
    collect: Collect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await make_configmap(client, namespace, "a")
    events = collect(watcher(proxied, CM, namespace=namespace, backoff=FAST))
    await events.wait_for(initial_done())
    await patch(client, CM, "a", {"data": {"x": "1"}}, namespace=namespace)
    await events.wait_for(lambda _: events.count(EventKind.APPLY, "a") == 1)
    last_event = events.events[-1]
    assert isinstance(last_event, ObjectEvent)
    last_good = last_event.obj
    await events.wait_for(lambda _: proxy.inject(b'{"type":"MODIFIED","object":{nonsense\n') == 1)
    # the corrupt line arrives just before this update's event, which must not be lost
    await patch(client, CM, "a", {"data": {"x": "2"}}, namespace=namespace)
    await make_configmap(client, namespace, "b")
    await events.wait_for(lambda _: events.count(EventKind.APPLY, "b") == 1)
    values = [
        e.obj["data"]["x"]
        for e in events.events
        if e.kind is EventKind.APPLY and name_of(e) == "a" and e.obj
    ]
    assert values == ["1", "2"]  # nothing lost, nothing twice
    assert "malformed watch line" in caplog.text
    resumed = query(proxy.watches()[-1])
    assert resumed["resourceVersion"] == last_good["metadata"]["resourceVersion"]


async def test_429_and_5xx_back_off_and_retry(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, namespace: str, collect: Collect
) -> None:
    await make_configmap(client, namespace, "a")
    proxy.fail(429, times=2, retry_after=1)
    proxy.fail(500, times=1)
    errors: list[BaseException] = []
    started = time.monotonic()
    events = collect(
        watcher(proxied, CM, namespace=namespace, backoff=FAST, on_error=errors.append)
    )
    await events.wait_for(initial_done())
    elapsed = time.monotonic() - started
    assert [e.status for e in errors if isinstance(e, ApiError)] == [429, 429, 500]
    assert elapsed >= 1.8  # the server's retryAfterSeconds (1 s, twice) was honoured
    assert events.names(EventKind.INIT_APPLY) == ["a"]


@pytest.mark.parametrize("streaming", [None, False], ids=["streaming-list", "paginated"])
async def test_forbidden_is_a_clear_error_and_is_retried(
    streaming: bool | None,
    client: ApiClient,
    user_client: Callable[[str], Awaitable[ApiClient]],
    namespace: str,
    collect: Collect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="fastctl.watcher")
    await make_configmap(client, namespace, "a")
    restricted = await user_client("restricted-watcher")
    errors: list[BaseException] = []
    events = collect(
        watcher(
            restricted,
            CM,
            namespace=namespace,
            config=WatchConfig(streaming_list=streaming),
            backoff=FAST,
            on_error=errors.append,
        )
    )
    await events.wait_for(lambda _: len(errors) >= 2, timeout=20)  # retried
    err = errors[0]
    assert isinstance(err, ApiError)
    assert err.status == 403
    assert err.reason == "Forbidden"
    assert 'User "restricted-watcher" cannot' in err.message
    assert "forbidden to" in caplog.text
    assert "configmaps" in caplog.text
    assert "RBAC" in caplog.text
    assert not events.events  # nothing half-listed

    # grant list+watch: the retrying watcher gets through without a restart
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [
            {"kind": "User", "name": "restricted-watcher", "apiGroup": "rbac.authorization.k8s.io"}
        ],
    }
    await apply(
        client, Resource("rbac.authorization.k8s.io/v1", "Role"), role, field_manager="test"
    )
    await apply(
        client,
        Resource("rbac.authorization.k8s.io/v1", "RoleBinding"),
        binding,
        field_manager="test",
    )
    await events.wait_for(initial_done(), timeout=30)
    assert events.names(EventKind.INIT_APPLY) == ["a"]


async def test_invalid_selector_raises(client: ApiClient, namespace: str) -> None:
    with pytest.raises(ApiError) as info:
        async for _ in watcher(
            client, CM, namespace=namespace, label_selector="a in (", backoff=FAST
        ):
            pass
    assert info.value.status in (400, 422)
    assert "/namespaces/" in str(info.value)
