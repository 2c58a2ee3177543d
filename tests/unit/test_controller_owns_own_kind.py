"""``ctl.owns(R)`` where R is the primary's own kind (a Widget that owns child Widgets):
a child's change reconciles the child itself (a primary object) and its controlling owner
(the relation), from one watch when the relation watches what the primary watches (the
same namespace, selectors and transform); from two when it does not (the relation must see
objects the primary's selector leaves out). Without a server: the watcher is patched to
read in-memory feeds, one per watch opened, so the test counts the watches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchConfig, WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.manager import _watches
from fastctl.runtime.manager._watches import share_watches

from .test_controller_relist import WIDGET, Feed, Seen, client, listing, running, until, widget


def owned(name: str, owner: str, version: int) -> dict[str, Any]:
    """A Widget controlled by the Widget `owner`."""
    obj = widget(name, version)
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner, "uid": f"uid-{owner}"}
    obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    obj["metadata"]["labels"] = {"tier": "child"}
    return obj


class Watches:
    """Every watch the controller opens: a feed each, by resource; `push` gives an event
    to every watch open on `resource` (what the API server does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened: dict[Resource, list[Feed]] = {}

        def fake_watcher(client: Any, resource: Resource, **_: Any) -> AsyncIterator[WatchEvent]:
            feed = Feed()
            self.opened.setdefault(resource, []).append(feed)
            return feed.events()

        for module in (_environment, _run, _watches):
            monkeypatch.setattr(module, "watcher", fake_watcher)

    def push(self, resource: Resource, *events: WatchEvent) -> None:
        for feed in self.opened.get(resource, []):
            feed.push(*events)


@pytest.mark.parametrize("shared", [False, True], ids=["own-watch", "manager"])
async def test_a_child_of_the_primarys_kind_reconciles_itself_and_its_owner_on_one_watch(
    monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """Broken once: the relation given its own watch again (red: two watches of widgets,
    own-watch); once: the folded relation's triggers not put (red: the owner "p" never
    reconciled for the child's change)."""
    watches = Watches(monkeypatch)
    seen = Seen()
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets").owns(WIDGET)
    env = None
    shared_watches: tuple[Any, ...] = ()
    if shared:  # as a Manager shares them
        made = share_watches([ctl], sharded=lambda _: False)
        shared_watches = made.watches
        env = _environment.Environment(ctl.client, sources=made.sources[ctl.name])
    async with running(ctl, *shared_watches, env=env):
        await until(lambda: WIDGET in watches.opened, "a watch of widgets")
        watches.push(WIDGET, *listing(widget("p", 0), owned("c", "p", 0)))
        await until(lambda: seen.names() == {"p", "c"}, "the initial list")
        before = len(seen.calls)
        watches.push(WIDGET, ObjectEvent(EventKind.APPLY, owned("c", "p", 1)))
        await until(lambda: seen.names(before) == {"p", "c"}, "the child's change")
        assert seen.last("c") == 1
        assert len(watches.opened[WIDGET]) == 1, "one watch of widgets"


async def test_a_relation_that_must_see_more_than_the_primary_watches_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The primary reconciles only the Widgets labelled tier=parent; it owns Widgets of any
    label: a second watch, which sees the children the primary's does not. Broken once:
    every relation of the primary's kind folded into its watch (red: one watch, and the
    child's change never reached its owner)."""
    watches = Watches(monkeypatch)
    seen = Seen()
    config = WatchConfig(label_selector="tier=parent")
    ctl = Controller(client(), WIDGET, seen.reconcile, name="widgets", watch_config=config)
    ctl.owns(WIDGET)
    async with running(ctl):
        await until(lambda: len(watches.opened.get(WIDGET, [])) == 2, "two watches of widgets")
        primary, related = watches.opened[WIDGET]
        primary.push(*listing(widget("p", 0)))
        related.push(*listing(widget("p", 0), owned("c", "p", 0)))
        await until(lambda: seen.names() == {"p"}, "the initial list")
        before = len(seen.calls)
        related.push(ObjectEvent(EventKind.APPLY, owned("c", "p", 1)))
        await until(lambda: seen.names(before) == {"p"}, "the child's change")
        assert "c" not in seen.names(), "not a primary object: the selector leaves it out"
