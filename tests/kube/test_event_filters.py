"""Event filters against the real kube-apiserver: under `generation_changed` a status-only
write does not trigger a reconcile and a spec change does, also across a relist.

The Widgets come from the session's test CRD (a status subresource, so the server bumps
``metadata.generation`` on spec changes only). The controller's requests go through a
`FaultProxy`, which forces the relist: the watch is down while the spec changes, and its
resume is answered 410 Gone, so the change is only seen in the new list.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action
from fastctl.kube._objects import create, patch
from fastctl.kube._resource import Resource
from fastctl.runtime import generation_changed
from fastctl.runtime.controller import Controller
from fastctl.types import ObjectRef

from .faultproxy import FaultProxy
from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


def relists(proxy: FaultProxy) -> int:
    """Streaming lists of Widgets so far (the watcher's initial list and its relists)."""
    return len([p for p in proxy.watches() if "/widgets?" in p and "sendInitialEvents" in p])


class Seen:
    """Every reconcile's (name, generation) and how many status writes it has seen."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        self.runs.append((meta["name"], meta["generation"]))
        return None

    def of(self, name: str) -> list[int]:
        return [generation for n, generation in self.runs if n == name]


async def test_the_generation_filter_skips_status_writes_and_keeps_spec_changes(
    proxied: ApiClient, proxy: FaultProxy, client: ApiClient, crds: str, namespace: str
) -> None:
    widgets = Resource(f"{crds}/v1", "Widget", plural="widgets")
    seen = Seen()
    ctl = Controller(
        proxied, widgets, seen.reconcile, namespace=namespace, event_filter=generation_changed
    )
    for name in ("a", "b"):
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"n": 0}}
        await create(client, widgets, {"apiVersion": f"{crds}/v1", "kind": "Widget", **body})
    async with running(ctl):
        await eventually(lambda: seen.of("a") == [1] and seen.of("b") == [1], what="first runs")

        # Status-only writes: seen by the watch (the cache follows them), but no reconcile.
        for i in range(3):
            await patch(
                client,
                widgets,
                "a",
                {"status": {"i": i}},
                namespace=namespace,
                subresource="status",
            )
        await eventually(
            lambda: (ctl.store.get(ObjectRef("a", namespace)) or {}).get("status") == {"i": 2},
            what="the status writes in the cache",
        )
        # A spec change of another object, after the status writes: once it has run, the
        # watch has delivered every earlier event.
        await patch(client, widgets, "b", {"spec": {"n": 1}}, namespace=namespace)
        await eventually(lambda: seen.of("b") == [1, 2], what="b's spec change reconciled")
        assert seen.of("a") == [1], "a status-only write triggered a reconcile"

        # A spec change triggers.
        await patch(client, widgets, "a", {"spec": {"n": 1}}, namespace=namespace)
        await eventually(lambda: seen.of("a") == [1, 2], what="a's spec change reconciled")

        # Across a relist: the spec changes while the watch is down and the resume gets 410,
        # so only the new list shows it. The changed object runs; the unchanged one does not.
        lists = relists(proxy)
        proxy.fail(
            410, match=lambda method, path: "/widgets?" in path and "resourceVersion=" in path
        )
        proxy.down = True
        proxy.cut()
        await patch(client, widgets, "a", {"spec": {"n": 2}}, namespace=namespace)
        proxy.down = False
        await eventually(lambda: seen.of("a") == [1, 2, 3], what="a's change seen by a relist")
        assert relists(proxy) > lists, "the change was not seen by a relist"
        await patch(client, widgets, "b", {"spec": {"n": 2}}, namespace=namespace)
        await eventually(lambda: seen.of("b") == [1, 2, 3], what="b after the relist")
        assert seen.of("a") == [1, 2, 3]
