"""Per-relation scope and namespace sets against the real kube-apiserver.

- A cached relation with a label selector holds exactly the matching objects (counted),
  and follows objects labelled into and out of it.
- A controller on two namespaces of five reconciles exactly the objects of those two; a
  relist forced in one of them (its resume answered 410 Gone while the world changed) finds
  that namespace's deletions and creations and leaves the other's objects alone; with
  ``ignore_own_writes`` and `generation_changed`, the echo of its own spec write and a
  status-only write trigger nothing, in each namespace, while a spec change does, also
  after the other namespace's relist.
- A namespace created later that matches the controller's pattern is watched and its
  objects reconciled; one that does not match is never watched; a namespace labelled out
  of a selector set leaves it, with its objects.

Each "nothing ran" is checked after a later change in the same namespace has run: one
namespace's events come in order, so by then the earlier event has been delivered.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, Namespaces
from fastctl.kube._objects import create, delete, patch
from fastctl.kube._resource import Resource
from fastctl.runtime import generation_changed
from fastctl.runtime.controller import Controller
from fastctl.testing import ControlPlane
from fastctl.types import ObjectRef

from .conftest import make_configmap
from .faultproxy import FaultProxy
from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

CONFIGMAP = Resource("v1", "ConfigMap")


def widgets_of(crds: str) -> Resource:
    return Resource(f"{crds}/v1", "Widget", plural="widgets")


NAMESPACE = Resource("v1", "Namespace", plural="namespaces", namespaced=False)

MakeNamespaces = Callable[..., Awaitable[list[str]]]


@pytest.fixture
async def make_namespaces(
    client: ApiClient, control_plane: ControlPlane
) -> AsyncIterator[MakeNamespaces]:
    """``await make_namespaces(prefix, n, labels=None)``: n new namespaces, deleted after."""
    made: list[str] = []

    async def make(prefix: str, n: int, labels: dict[str, str] | None = None) -> list[str]:
        names = [f"{prefix}-{i}" for i in range(n)]
        for name in names:
            meta: dict[str, Any] = {"name": name}
            if labels is not None:
                meta["labels"] = labels
            await create(
                client, NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
            )
            made.append(name)
        return names

    yield make
    for name in made:
        control_plane.api_request("DELETE", f"/api/v1/namespaces/{name}")


async def make_widget(client: ApiClient, crds: str, namespace: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{crds}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"n": 0},
    }
    return await create(client, widgets_of(crds), body)


class Runs:
    """Every reconcile's (namespace, name, generation)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, int]] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        self.runs.append((meta["namespace"], meta["name"], meta.get("generation", 0)))
        return None

    def seen(self) -> set[tuple[str, str]]:
        return {(ns, name) for ns, name, _ in self.runs}

    def of(self, ns: str, name: str) -> list[int]:
        return [g for n, m, g in self.runs if (n, m) == (ns, name)]


async def test_a_cached_relation_with_a_label_selector_holds_only_matching_objects(
    client: ApiClient, crds: str, namespace: str
) -> None:
    runs = Runs()
    ctl = Controller(client, widgets_of(crds), runs.reconcile, namespace=namespace)
    ctl.owns(CONFIGMAP, cache=True, label_selector="app=mine")
    for i in range(3):
        await make_configmap(client, namespace, f"mine-{i}", labels={"app": "mine"})
    for i in range(4):
        await make_configmap(client, namespace, f"plain-{i}")
    for i in range(2):
        await make_configmap(client, namespace, f"theirs-{i}", labels={"app": "theirs"})
    await make_widget(client, crds, namespace, "w")
    cache = ctl.cache(CONFIGMAP)

    def cached() -> list[str]:
        return sorted(o["metadata"]["name"] for o in cache.store.values())

    async with running(ctl):
        await eventually(lambda: bool(runs.runs), what="the first reconcile")
        assert cache.is_ready
        assert len(cache) == 3  # counted: 9 ConfigMaps exist, 3 match
        assert cached() == ["mine-0", "mine-1", "mine-2"]
        # labelled into the selector: cached; labelled out: gone from the cache
        await patch(
            client,
            CONFIGMAP,
            "plain-0",
            {"metadata": {"labels": {"app": "mine"}}},
            namespace=namespace,
        )
        await patch(
            client,
            CONFIGMAP,
            "mine-2",
            {"metadata": {"labels": {"app": "other"}}},
            namespace=namespace,
        )
        await eventually(
            lambda: cached() == ["mine-0", "mine-1", "plain-0"], what="the relabelled ones"
        )
        assert len(cache) == 3


async def test_a_controller_on_two_namespaces_of_five_reconciles_exactly_theirs(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    crds: str,
    make_namespaces: MakeNamespaces,
) -> None:
    widgets = widgets_of(crds)
    all_ns = await make_namespaces(f"t-two-of-five-{secrets.token_hex(3)}", 5)
    mine = all_ns[:2]
    for ns in all_ns:
        for name in ("a", "b"):
            await make_widget(client, crds, ns, name)
    runs = Runs()
    wrote: list[tuple[str, str]] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        await runs.reconcile(obj, ctx)
        meta = obj["metadata"]
        if not obj["spec"].get("seen"):  # our own spec write: its echo must not trigger
            await patch(
                proxied,
                widgets,
                meta["name"],
                {"spec": {"seen": True}},
                namespace=meta["namespace"],
            )
            wrote.append((meta["namespace"], meta["name"]))
        return None

    ctl = Controller(
        proxied,
        widgets,
        reconcile,
        namespace=mine,
        ignore_own_writes=True,
        event_filter=generation_changed,
    )
    expected = {(ns, name) for ns in mine for name in ("a", "b")}
    async with running(ctl):
        await eventually(lambda: runs.seen() == expected and len(wrote) == 4, what="first runs")
        assert sorted({ns for ns, _ in runs.seen()}) == sorted(mine)
        assert len(ctl.store) == 4
        assert not any(f"/namespaces/{ns}/" in p for p in proxy.watches() for ns in all_ns[2:])

        # Per namespace: a status-only write (filtered), then a spec change (runs); once the
        # spec change has run, the echo of our own write and the status write were seen.
        for ns in mine:
            await patch(
                client, widgets, "a", {"status": {"x": 1}}, namespace=ns, subresource="status"
            )
            await patch(client, widgets, "b", {"spec": {"n": 1}}, namespace=ns)
        await eventually(
            lambda: all(len(runs.of(ns, "b")) == 2 for ns in mine), what="b's spec changes"
        )
        for ns in mine:
            assert runs.of(ns, "a") == [1], f"{ns}: an own write's echo or a status write ran"
            assert runs.of(ns, "b") == [1, 3]  # 2 was our own write

        # A relist in the first namespace only: its resume is answered 410 while the world
        # changes; the second resumes where it was.
        first, second = mine
        proxy.fail(
            410,
            match=lambda method, path: (
                f"/namespaces/{first}/widgets?" in path and "resourceVersion=" in path
            ),
        )
        proxy.down = True
        proxy.cut()
        await delete(client, widgets, "a", namespace=first)
        await make_widget(client, crds, first, "c")
        await patch(client, widgets, "b", {"spec": {"n": 2}}, namespace=second)
        await make_widget(client, crds, all_ns[3], "d")  # outside the set
        proxy.down = False
        await eventually(
            lambda: ObjectRef("a", first) not in ctl.store and bool(runs.of(first, "c")),
            what="the first namespace's relist (a deleted, c created)",
        )
        relists = [
            p
            for p in proxy.watches()
            if f"/namespaces/{first}/widgets?" in p and "sendInitialEvents" in p
        ]
        assert len(relists) >= 2, "the first namespace was not listed again"
        await eventually(lambda: len(runs.of(second, "b")) == 3, what="second's change")
        # the second namespace's objects were not touched by the first's relist
        assert ObjectRef("a", second) in ctl.store
        assert ObjectRef("b", second) in ctl.store
        assert {ns for ns, _ in runs.seen()} == set(mine)
        assert ObjectRef("d", all_ns[3]) not in ctl.store
        # the second namespace's filter memory survived the first's relist: a status-only
        # write there still triggers nothing
        await patch(
            client, widgets, "a", {"status": {"x": 2}}, namespace=second, subresource="status"
        )
        await patch(client, widgets, "b", {"spec": {"n": 3}}, namespace=second)
        await eventually(lambda: len(runs.of(second, "b")) == 4, what="second's next change")
        assert runs.of(second, "a") == [1]


async def test_a_namespace_created_later_that_matches_the_pattern_is_picked_up(
    proxied: ApiClient,
    proxy: FaultProxy,
    client: ApiClient,
    crds: str,
    control_plane: ControlPlane,
    make_namespaces: MakeNamespaces,
) -> None:
    token = secrets.token_hex(3)
    prefix = f"t-pattern-{token}"
    (early,) = await make_namespaces(f"{prefix}-early", 1)
    await make_widget(client, crds, early, "w")
    runs = Runs()
    ctl = Controller(proxied, widgets_of(crds), runs.reconcile, namespace=f"{prefix}-*")
    ctl.owns(CONFIGMAP)  # the same set for a second kind: the Namespace watch is shared
    async with running(ctl):
        await eventually(lambda: runs.seen() == {(early, "w")}, what="the early namespace")
        (other,) = await make_namespaces(f"t-nomatch-{token}", 1)
        await make_widget(client, crds, other, "w")
        (late,) = await make_namespaces(f"{prefix}-late", 1)
        await make_widget(client, crds, late, "w")
        await eventually(lambda: (late, "w") in runs.seen(), what="the late namespace")
        assert ObjectRef("w", late) in ctl.store
        assert not any(f"/namespaces/{other}/" in p for p in proxy.watches())
        assert runs.seen() == {(early, "w"), (late, "w")}
        await eventually(
            lambda: any(f"/namespaces/{late}/configmaps?" in p for p in proxy.watches()),
            what="the owned kind watched in the late namespace",
        )
        namespace_watches = [p for p in proxy.watches() if p.startswith("/api/v1/namespaces?")]
        assert len(namespace_watches) == 1, namespace_watches


async def test_a_namespace_labelled_out_of_a_selector_set_leaves_it_with_its_objects(
    client: ApiClient,
    crds: str,
    control_plane: ControlPlane,
    make_namespaces: MakeNamespaces,
) -> None:
    token = secrets.token_hex(3)
    label = {"scope-test": token}
    inside = await make_namespaces(f"t-selected-{token}", 2, labels=label)
    for ns in inside:
        await make_widget(client, crds, ns, "w")
    runs = Runs()
    ctl = Controller(
        client,
        widgets_of(crds),
        runs.reconcile,
        namespace=Namespaces(selector=f"scope-test={token}"),
    )
    async with running(ctl):
        await eventually(lambda: runs.seen() == {(ns, "w") for ns in inside}, what="both")
        await patch(client, NAMESPACE, inside[0], {"metadata": {"labels": {"scope-test": "no"}}})
        await eventually(lambda: ObjectRef("w", inside[0]) not in ctl.store, what="labelled out")
        assert ObjectRef("w", inside[1]) in ctl.store
