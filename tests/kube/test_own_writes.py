"""``ignore_own_writes`` against the real kube-apiserver: the echo of a write of ours is held
back; another writer's change is not, even when our write right after it changed nothing
(the server then answers with the object as it is, at the other writer's version).

The Widgets come from the session's test CRD (a status subresource).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._objects import create, patch
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller
from fastctl.testing import ControlPlane

from .test_controller import eventually, running

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

ROUNDS = 12


async def make_widget(api: ApiClient, widgets: Resource, namespace: str, name: str) -> None:
    body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"n": 0}}
    await create(api, widgets, {"apiVersion": widgets.api_version, "kind": "Widget", **body})


async def test_another_writers_change_before_a_no_op_write_of_ours_is_reconciled(
    client: ApiClient, control_plane: ControlPlane, crds: str, namespace: str
) -> None:
    """Each reconcile has a second client change the Widget's spec, then writes the status
    it computed, which is already there: a no-op, answered at the other client's version.
    Every one of the other client's changes is reconciled."""
    widgets = Resource(f"{crds}/v1", "Widget", plural="widgets")
    await make_widget(client, widgets, namespace, "a")
    ready = {"status": {"ready": True}}
    await patch(client, widgets, "a", ready, namespace=namespace, subresource="status")
    path = f"/apis/{crds}/v1/namespaces/{namespace}/widgets/a"
    seen: list[int] = []
    changed: set[int] = set()

    async def other_writer(n: int) -> None:
        """Not this controller's write: the admin's own blocking client, in a thread."""
        status, body = await asyncio.to_thread(
            control_plane.api_request,
            "PATCH",
            path,
            {"spec": {"n": n}},
            content_type="application/merge-patch+json",
        )
        assert status == 200, body

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        n = obj["spec"]["n"]
        seen.append(n)
        if n < ROUNDS and n + 1 not in changed:
            changed.add(n + 1)
            await other_writer(n + 1)
        await patch(client, widgets, "a", ready, namespace=namespace, subresource="status")

    ctl = Controller(client, widgets, reconcile, namespace=namespace, ignore_own_writes=True)
    async with running(ctl):
        with contextlib.suppress(AssertionError):  # the assertion below says what is missing
            await eventually(lambda: ROUNDS in seen, what=f"change {ROUNDS} reconciled")
    reconciled = sorted(set(seen))
    assert reconciled == list(range(ROUNDS + 1)), f"changes reconciled: {reconciled}"


async def test_the_echo_of_a_status_change_of_ours_triggers_nothing(
    client: ApiClient, crds: str, namespace: str
) -> None:
    """The reconcile writes a status that is not there yet: a change of ours, proven by the
    answer, so its echo is held back (``a`` runs once); a spec change of ``b`` afterwards is
    reconciled, so the watch has delivered the echo by then."""
    widgets = Resource(f"{crds}/v1", "Widget", plural="widgets")
    for name in ("a", "b"):
        await make_widget(client, widgets, namespace, name)
    seen: list[tuple[str, int]] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        meta = obj["metadata"]
        seen.append((meta["name"], obj["spec"]["n"]))
        if not obj.get("status"):
            ready = {"status": {"ready": True}}
            await patch(
                client, widgets, meta["name"], ready, namespace=namespace, subresource="status"
            )

    ctl = Controller(client, widgets, reconcile, namespace=namespace, ignore_own_writes=True)
    async with running(ctl):
        await eventually(lambda: {n for n, _ in seen} == {"a", "b"}, what="both reconciled")
        run = ctl._run
        assert run is not None
        own = run.own_writes
        assert own is not None
        await eventually(lambda: len(own) == 0, what="the echoes of both status writes came")
        await patch(client, widgets, "b", {"spec": {"n": 1}}, namespace=namespace)
        await eventually(lambda: ("b", 1) in seen, what="b's change reconciled")
    assert sorted(seen) == [("a", 0), ("b", 0), ("b", 1)], seen
