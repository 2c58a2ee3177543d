"""Sets of namespaces and per-relation scopes, without a server.

A set is watched one namespace at a time, each namespace's (re)list framed with its name:
the store, the primary's triggers, the related triggers, the event filters and the
read-your-writes bookkeeping must each swap that namespace's list alone and leave the
others as they were. The merged watch starts and stops namespaces as a dynamic set
changes; shared watches are keyed by the whole scope; RBAC follows the set."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import ObjectRef
from fastctl.deploy import derive
from fastctl.deploy._rbac import NAMESPACES_RULE
from fastctl.kube import Namespaces, Resource, Store, keep_paths
from fastctl.kube import _namespace_watch as nsw
from fastctl.kube._namespaces import namespace_scope
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._selectors import LabelSelector
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent, WatchEvent
from fastctl.runtime import Controller
from fastctl.runtime._filters import EventFilter, generation_changed
from fastctl.runtime._triggers import RelatedTriggers, primary_triggers
from fastctl.runtime._written import CacheScope, WrittenObjects
from fastctl.runtime.manager._watches import share_watches
from fastctl.types import Trigger

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
NAMESPACE = ResolvedResource("", "v1", "Namespace", "namespaces", False)


def obj(name: str, ns: str, rv: str = "1", gen: int = 1, owner: str | None = None) -> Any:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{ns}-{name}",
        "resourceVersion": rv,
        "generation": gen,
    }
    if owner is not None:
        meta["ownerReferences"] = [{"uid": f"uid-{owner}", "name": owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def init(ns: str | None) -> WatchEvent:
    return ListFrame(EventKind.INIT, ns)


def done(ns: str | None) -> WatchEvent:
    return ListFrame(EventKind.INIT_DONE, ns)


def listed(o: Any) -> WatchEvent:
    return ObjectEvent(EventKind.INIT_APPLY, o)


def apply(o: Any) -> WatchEvent:
    return ObjectEvent(EventKind.APPLY, o)


def names(objs: Any) -> list[str]:
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objs)


# -- the set itself ---------------------------------------------------------------------------


def test_a_set_is_names_patterns_and_a_selector() -> None:
    both = Namespaces("b", "team-*", "a", selector="env=prod")
    assert both.names == ("a", "b")
    assert both.patterns == ("team-*",)
    assert both.matches("a")
    assert both.matches("team-x")
    assert not both.matches("other")
    assert Namespaces("a", "b").is_fixed
    assert not both.is_fixed
    assert Namespaces(selector="env=prod").matches("anything")  # the server selects
    assert Namespaces("b", "a") == Namespaces("a", "b")  # a value: equal sets share
    assert namespace_scope("one") == "one"
    assert namespace_scope(["one"]) == "one"
    assert namespace_scope(["a", "b"]) == Namespaces("a", "b")
    assert namespace_scope("team-*") == Namespaces("team-*")
    assert namespace_scope(None) is None
    for bad in ("", [""]):
        with pytest.raises(ValueError, match=r"empty namespace name|not a namespace name"):
            namespace_scope(bad)
    with pytest.raises(ValueError, match="cannot parse"):
        Namespaces(selector="a in (b")
    with pytest.raises(TypeError):
        namespace_scope(3)


def test_label_selectors_match_as_the_server_does() -> None:
    sel = LabelSelector.parse("app=web,tier!=cache,env in (prod, stage),!legacy,team")
    assert sel.matches({"app": "web", "env": "prod", "team": "x"})
    assert not sel.matches({"app": "web", "env": "prod", "team": "x", "legacy": "1"})
    assert not sel.matches({"app": "web", "env": "dev", "team": "x"})
    assert not sel.matches({"app": "web", "env": "prod", "team": "x", "tier": "cache"})
    assert not sel.matches({"app": "web", "env": "prod"})
    assert LabelSelector.parse("a notin (x)").matches({})
    assert LabelSelector.parse("").matches({})


# -- each consumer swaps one namespace's list alone --------------------------------------------


def test_the_store_swaps_one_namespaces_list_and_is_ready_when_all_have_listed() -> None:
    store = Store()
    events = [init(""), init("a"), init("b"), done("")]
    events += [listed(obj("x", "a")), listed(obj("y", "a")), done("a")]
    for e in events:
        store.apply(e)
    assert not store.is_ready  # b has not listed yet
    store.apply(listed(obj("z", "b")))
    store.apply(done("b"))
    assert store.is_ready
    assert names(store.values()) == ["a/x", "a/y", "b/z"]
    # a relists (after a 410, say) without y: y vanishes, b's objects stay
    store.apply(init("a"))
    store.apply(listed(obj("x", "a", rv="2")))
    vanished = store.apply(done("a"))
    assert names(vanished) == ["a/y"]
    assert names(store.values()) == ["a/x", "b/z"]
    assert store[ObjectRef("x", "a")]["metadata"]["resourceVersion"] == "2"
    assert [o["metadata"]["name"] for o in store.owned_by("uid-w")] == []
    # a namespace that leaves the set: an empty list empties it
    store.apply(init("b"))
    assert names(store.apply(done("b"))) == ["b/z"]
    assert names(store.values()) == ["a/x"]


def test_an_empty_set_is_ready_at_once() -> None:
    store = Store()
    store.apply(init(""))
    assert not store.is_ready
    store.apply(done(""))
    assert store.is_ready
    assert len(store) == 0


def test_the_owner_index_follows_a_namespace_swap() -> None:
    store = Store()
    for e in [init("a"), listed(obj("c", "a", owner="w")), done("a")]:
        store.apply(e)
    assert names(store.owned_by("uid-w")) == ["a/c"]
    store.apply(init("a"))
    store.apply(listed(obj("c", "a", rv="2", owner="v")))
    store.apply(done("a"))
    assert store.owned_by("uid-w") == []
    assert names(store.owned_by("uid-v")) == ["a/c"]


def test_a_namespaces_list_triggers_that_namespaces_objects_only() -> None:
    store = Store()
    for e in [init(""), init("a"), init("b"), done("")]:
        store.apply(e)
    for e in [listed(obj("x", "a")), done("a"), listed(obj("y", "b")), done("b")]:
        store.apply(e)
    store.apply(init("a"))
    store.apply(listed(obj("x", "a")))
    relist = done("a")
    store.apply(relist)
    triggers = list(primary_triggers(relist, store))
    assert [t.ref for t in triggers if isinstance(t, Trigger)] == [ObjectRef("x", "a")]


def test_an_event_filter_keeps_the_other_namespaces_memory_across_a_relist() -> None:
    """generation_changed remembers each object's last generation; a relist of namespace
    a must not forget b's (b's next unchanged update would pass as if new)."""
    f = EventFilter(generation_changed, controller="c", kind="ConfigMap")
    for e in [init(""), init("a"), init("b"), done("")]:
        assert f.admits(e)
    for e in [listed(obj("x", "a")), done("a"), listed(obj("y", "b")), done("b")]:
        f.admits(e)
    assert f.take_listed("b") == {ObjectRef("y", "b")}  # taken per namespace
    assert f.take_listed("a") == {ObjectRef("x", "a")}
    for e in [init("a"), listed(obj("x", "a", rv="3", gen=2)), done("a")]:
        f.admits(e)
    assert f.take_listed("a") == {ObjectRef("x", "a")}  # changed while the watch was down
    assert not f.admits(apply(obj("y", "b", rv="4")))  # b's memory survived: same generation
    assert f.admits(apply(obj("y", "b", rv="5", gen=2)))
    # a's relist without x forgets x (a later x is new)
    for e in [init("a"), done("a")]:
        f.admits(e)
    assert f.admits(apply(obj("x", "a", rv="6")))


def test_related_triggers_diff_one_namespaces_relist() -> None:
    def owner(o: dict[str, Any]) -> list[ObjectRef]:
        ref = (o["metadata"].get("ownerReferences") or [{}])[0]
        return [ObjectRef(ref["name"], o["metadata"]["namespace"])] if ref else []

    rt = RelatedTriggers(owner, "owned", controller="c", kind="ConfigMap", index=True)
    events: list[WatchEvent] = [init(""), init("a"), init("b"), done("")]
    events += [listed(obj("c1", "a", owner="w")), listed(obj("c2", "b", owner="v"))]
    for e in events:
        rt.on_event(e)
    rt.on_event(done("a"))
    rt.on_event(done("b"))
    assert rt.sources_of(ObjectRef("v", "b")) == (ObjectRef("c2", "b"),)
    # a relists without its child: its owner is re-triggered (to recreate it), b's kept
    rt.on_event(init("a"))
    triggers = rt.on_event(done("a"))
    assert [(t.ref, t.priority) for t in triggers] == [(ObjectRef("w", "a"), 0)]
    assert rt.sources_of(ObjectRef("w", "a")) == ()
    assert rt.sources_of(ObjectRef("v", "b")) == (ObjectRef("c2", "b"),)
    assert len(rt) == 1


def test_read_your_writes_counts_a_listed_write_when_its_namespace_is_swapped_in() -> None:
    shown: list[list[str]] = []
    store = Store()
    written = WrittenObjects({("", "ConfigMap"): store}, Namespaces("a", "b"), shown.append)
    written.follow(CM, "a", "x")
    w = written.answered(CM, "a", "x", obj("x", "a", rv="5"), created=False, deleted=False)
    assert w is not None
    written.saw(("", "ConfigMap"))(init("a"))
    written.saw(("", "ConfigMap"))(listed(obj("x", "a", rv="5")))
    written.saw(("", "ConfigMap"))(done("b"))  # another namespace's list: not yet
    assert not written.shown(w)
    written.saw(("", "ConfigMap"))(done("a"))
    assert written.shown(w)
    # out of scope: another namespace, or labels the cache's selector excludes
    assert written.answered(CM, "c", "x", obj("x", "c"), created=False, deleted=False) is None
    scoped = WrittenObjects(
        {("", "ConfigMap"): store},
        None,
        shown.append,
        {("", "ConfigMap"): CacheScope("a", LabelSelector.parse("app=web"))},
    )
    unlabelled = obj("y", "a")
    assert scoped.answered(CM, "a", "y", unlabelled, created=True, deleted=False) is None
    labelled = {**unlabelled, "metadata": {**unlabelled["metadata"], "labels": {"app": "web"}}}
    assert scoped.answered(CM, "a", "y", labelled, created=True, deleted=False) is not None


# -- the merged watch -----------------------------------------------------------------------


class Feeds:
    """One feed per (kind, namespace): what each watcher the set opens would yield."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str | None], asyncio.Queue[WatchEvent]] = {}
        self.opened: list[tuple[str, str | None]] = []
        self.closed: list[tuple[str, str | None]] = []

    def queue(self, kind: str, ns: str | None) -> asyncio.Queue[WatchEvent]:
        return self.queues.setdefault((kind, ns), asyncio.Queue())

    def push(self, kind: str, ns: str | None, *events: WatchEvent) -> None:
        for e in events:
            self.queue(kind, ns).put_nowait(e)

    def watcher(
        self, client: Any, resource: Any, *, namespace: str | None = None, **_: Any
    ) -> AsyncIterator[WatchEvent]:
        key = (resource.kind, namespace)
        self.opened.append(key)
        queue = self.queue(*key)

        async def events() -> AsyncIterator[WatchEvent]:
            try:
                while True:
                    yield await queue.get()
            finally:
                self.closed.append(key)

        return events()


def ns_obj(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": name}}


async def take(events: AsyncIterator[WatchEvent], n: int) -> list[WatchEvent]:
    out = []
    async with asyncio.timeout(5):
        for _ in range(n):
            out.append(await anext(events))
    return out


def frames(events: list[WatchEvent]) -> list[tuple[str, str | None]]:
    return [(e.kind.value, e.namespace) for e in events if isinstance(e, ListFrame)]


async def test_a_fixed_set_opens_one_watcher_per_namespace_and_frames_their_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feeds = Feeds()
    monkeypatch.setattr(nsw, "watcher", feeds.watcher)
    feeds.push("ConfigMap", "a", init(None), listed(obj("x", "a")), done(None))
    feeds.push("ConfigMap", "b", init(None), done(None), apply(obj("y", "b")))
    stream = nsw.namespace_set_watcher(ApiClient.__new__(ApiClient), CM, Namespaces("a", "b"))
    store = Store()
    got = await take(stream, 10)
    for e in got:
        store.apply(e)
    assert frames(got)[:4] == [("init", ""), ("init", "a"), ("init", "b"), ("init_done", "")]
    assert ("init_done", "a") in frames(got)
    assert ("init_done", "b") in frames(got)
    assert store.is_ready
    assert names(store.values()) == ["a/x", "b/y"]
    assert sorted(feeds.opened) == [("ConfigMap", "a"), ("ConfigMap", "b")]
    await stream.aclose()  # type: ignore[attr-defined]
    assert sorted(feeds.closed) == [("ConfigMap", "a"), ("ConfigMap", "b")]


async def test_a_pattern_set_follows_namespaces_as_they_come_and_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feeds = Feeds()
    monkeypatch.setattr(nsw, "watcher", feeds.watcher)
    feeds.push("Namespace", None, init(None), listed(ns_obj("team-a")), listed(ns_obj("other")))
    feeds.push("Namespace", None, done(None))
    feeds.push("ConfigMap", "team-a", init(None), listed(obj("x", "team-a")), done(None))
    stream = nsw.namespace_set_watcher(ApiClient.__new__(ApiClient), CM, Namespaces("team-*"))
    store = Store()
    for e in await take(stream, 6):
        store.apply(e)
    assert store.is_ready
    assert names(store.values()) == ["team-a/x"]
    assert ("ConfigMap", "other") not in feeds.opened
    # a namespace created later that matches: watched, listed, its objects cached
    feeds.push("Namespace", None, apply(ns_obj("team-b")), apply(ns_obj("nope")))
    feeds.push("ConfigMap", "team-b", init(None), listed(obj("y", "team-b")), done(None))
    for e in await take(stream, 4):
        store.apply(e)
    assert names(store.values()) == ["team-a/x", "team-b/y"]
    assert ("ConfigMap", "nope") not in feeds.opened
    # deleted: its watcher stops and its objects leave the cache
    feeds.push("Namespace", None, ObjectEvent(EventKind.DELETE, ns_obj("team-a")))
    gone: list[dict[str, Any]] = []
    for e in await take(stream, 2):
        gone.extend(store.apply(e))
    assert names(gone) == ["team-a/x"]
    assert names(store.values()) == ["team-b/y"]
    assert ("ConfigMap", "team-a") in feeds.closed
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_fatal_error_of_one_namespace_ends_the_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(client: Any, resource: Any, **kw: Any) -> AsyncIterator[WatchEvent]:
        async def events() -> AsyncIterator[WatchEvent]:
            if kw.get("namespace") == "b":
                raise ValueError("a malformed selector")
            yield init(None)
            await asyncio.Event().wait()

        return events()

    monkeypatch.setattr(nsw, "watcher", failing)
    stream = nsw.namespace_set_watcher(ApiClient.__new__(ApiClient), CM, Namespaces("a", "b"))

    async def drain() -> None:
        async with asyncio.timeout(5):
            async for _ in stream:
                pass

    with pytest.raises(ValueError, match="malformed selector"):
        await drain()


async def test_a_cluster_scoped_resource_has_no_namespace_set() -> None:
    stream = nsw.namespace_set_watcher(ApiClient.__new__(ApiClient), NAMESPACE, Namespaces("a"))
    with pytest.raises(ValueError, match="cluster-scoped"):
        await anext(stream)


# -- relations: their own scope, their own watch, their own RBAC -------------------------------


CLIENT = ApiClient.__new__(ApiClient)  # never connected


def controller(namespace: Any = None) -> Controller:
    return Controller(CLIENT, WIDGET, lambda o, c: None, namespace=namespace)


def test_a_relation_watches_its_own_scope() -> None:
    ctl = controller(["a", "b"])
    ctl.owns(CONFIGMAP, cache=True, label_selector="app=web", field_selector="type=x")
    ctl.watches(Resource("v1", "Secret"), lambda o: [], namespace="config")
    ctl.watches(Resource("v1", "Service"), lambda o: [], namespace=None)
    primary, owned, secrets, services = ctl.spec.watch_uses()
    assert primary.namespace == owned.namespace == Namespaces("a", "b")
    assert owned.config.label_selector == "app=web"
    assert owned.config.field_selector == "type=x"
    assert primary.config.label_selector is None
    assert secrets.namespace == "config"
    assert services.namespace is None
    with pytest.raises(ValueError, match="cannot parse"):
        ctl.owns(Resource("v1", "Pod"), label_selector="a in (b")


def test_shared_watches_are_keyed_by_the_whole_scope() -> None:
    """Equal scopes share one watch and one cache; a different selector, namespace or
    transform is a watch of its own (one would see the other's objects)."""

    def two(**scope: Any) -> tuple[Controller, Controller]:
        a, b = controller("ns"), controller("ns")
        a._name, b._name = "a", "b"
        a.owns(CONFIGMAP, cache=True, label_selector="app=a")
        b.owns(CONFIGMAP, cache=True, **scope)
        return a, b

    def shared_configmap_watches(a: Controller, b: Controller) -> int:
        shared = share_watches([a, b], sharded=lambda c: False)
        return sum(1 for w in shared.watches if "ConfigMap" in w.name)

    assert shared_configmap_watches(*two(label_selector="app=a")) == 1
    assert shared_configmap_watches(*two(label_selector="app=b")) == 0
    assert shared_configmap_watches(*two(label_selector="app=a", namespace="other")) == 0
    assert shared_configmap_watches(*two(label_selector="app=a", transform=keep_paths("x"))) == 0


async def test_rbac_follows_the_set() -> None:
    resolved = {
        WIDGET: ResolvedResource("example.com", "v1", "Widget", "widgets", True),
        CONFIGMAP: CM,
        Resource("v1", "Secret"): ResolvedResource("", "v1", "Secret", "secrets", True),
    }
    fixed = controller(["a", "b"])
    fixed.owns(CONFIGMAP)
    fixed.watches(Resource("v1", "Secret"), lambda o: [], namespace="config")
    perms = derive([fixed], resolved)
    assert sorted(perms.namespaced) == ["a", "b", "config"]  # a Role in each
    assert not any("widgets" in r.resources for r in perms.cluster)
    assert any("secrets" in r.resources for r in perms.namespaced["config"])
    assert not any("secrets" in r.resources for r in perms.namespaced["a"])
    pattern = controller("team-*")
    perms = derive([pattern], resolved)
    assert any("widgets" in r.resources for r in perms.cluster)  # a ClusterRole
    assert NAMESPACES_RULE in perms.cluster
    assert not perms.namespaced
