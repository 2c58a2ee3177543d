"""``fastctl inspect`` against an operator on the real API server: a failing object shows
its attempts, next run and error; objects behind a slow reconcile show their place; with
``fair_by="namespace"`` an object of a quiet namespace shows its group and its turn ahead of
a flood in another."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import ApplierConfig, Resource, Scheduler
from fastctl.cli import main
from fastctl.runtime import Controller, Manager, ServerOptions
from fastctl.testing import ControlPlane
from fastctl.testing.pytest_plugin import namespace_name

from .conftest import make_configmap

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


def _inspect(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["inspect", *argv])
    return code, out.getvalue()


async def _eventually(check: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def inspecting(
    client: ApiClient, ctl: Controller, release: asyncio.Event
) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """`ctl` running in a Manager with its debug queue server, and ``ask(*argv)``: the
    output of ``fastctl inspect --address <that server> *argv`` (parsed with ``--json``).
    On the way out `release` is set (the tests' reconciles wait on it) and all stops."""
    manager = Manager(
        client, servers=ServerOptions(metrics_port=None, probe_port=None, debug_queue_port=0)
    )
    manager.add(ctl)
    run = asyncio.create_task(manager.run())
    try:
        await _eventually(lambda: _ready(manager), "the debug queue server")
        assert manager.debug_queue is not None
        url = f"http://127.0.0.1:{manager.debug_queue.port}"

        async def ask(*argv: str) -> Any:
            code, text = await asyncio.to_thread(_inspect, "--address", url, *argv)
            assert code == 0
            return json.loads(text) if "--json" in argv else text

        yield ask
    finally:
        release.set()
        manager.shutdown()
        await asyncio.wait_for(run, 30)


async def test_fastctl_inspect_shows_failures_and_the_line(
    client: ApiClient, namespace: str
) -> None:
    release = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        if name == "bad":
            raise RuntimeError("cannot render bad: missing key 'port'")
        if name == "slow":
            await release.wait()

    ctl = Controller(
        client,
        Resource("v1", "ConfigMap"),
        reconcile,
        name="cms",
        namespace=namespace,
        concurrency=1,
        scheduler=Scheduler(concurrency=1, backoff_base=60.0),
    )
    async with inspecting(client, ctl, release) as ask:
        await make_configmap(client, namespace, "bad", {"k": "v"})

        async def failed() -> Any:
            answer = await ask("--json", f"{namespace}/bad")
            return answer if answer["attempts"] >= 1 else None

        bad = await _eventually(failed, "bad to fail")
        assert bad["state"] == "waiting"
        assert bad["attempts"] == 1
        assert bad["last_error"] == "RuntimeError: cannot render bad: missing key 'port'"
        assert 40.0 < bad["ready_in"] <= 72.0  # 60 s backoff, jittered 0.8-1.2
        assert [r["reason"] for r in bad["reasons"]] == ["error retry"]
        text = await ask(f"{namespace}/bad")
        assert f"{namespace}/bad in controller cms: waiting" in text
        assert "attempts:  1 failed" in text
        assert "next run:" in text
        assert "error:     RuntimeError: cannot render bad" in text

        # One slow reconcile holds the only slot; three objects queue behind it.
        await make_configmap(client, namespace, "slow", {"k": "v"})

        async def running() -> Any:
            answer = await ask("--json", "--controller", "cms", f"{namespace}/slow")
            return answer["state"] == "in_flight"

        await _eventually(running, "slow to run")
        for name in ("w1", "w2", "w3"):
            await make_configmap(client, namespace, name, {"k": "v"})

        async def third_in_line() -> Any:
            answer = await ask("--json", f"{namespace}/w3")
            return answer if answer["state"] == "ready" else None

        w3 = await _eventually(third_in_line, "w3 to be ready")
        assert (w3["ahead"], w3["ahead_at_priority"]) == (2, 2)
        assert [r["reason"] for r in w3["reasons"]] == ["ConfigMap changed"]
        text = await ask(f"{namespace}/w3")
        assert "position:  2 ahead (2 at its priority)" in text
        assert "1 of 1 slots busy" in text
        summary = await ask("--json", "--controller", "cms")
        assert (summary["ready"], summary["in_flight"], summary["waiting"]) == (3, 1, 1)
        assert summary["oldest_ready"]["name"] == "w1"
        assert "not known to this controller" in await ask(f"{namespace}/nope")
        release.set()


def second_namespace(control_plane: ControlPlane, prefix: str) -> str:
    """A namespace besides the test's own, for a second tenant (the test deletes it)."""
    name = namespace_name(prefix)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    status, response = control_plane.api_request("POST", "/api/v1/namespaces", body)
    assert status == 201, response
    return name


async def test_fastctl_inspect_shows_the_fair_group_and_its_turn(
    client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    quiet = second_namespace(control_plane, "fair-quiet")
    release = asyncio.Event()
    label = {"fastctl.dev/fair-test": quiet}

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        await release.wait()

    ctl = Controller(
        client,
        Resource("v1", "ConfigMap"),
        reconcile,
        name="fair",
        label_selector=f"fastctl.dev/fair-test={quiet}",
        config=ApplierConfig(concurrency=1, fair_by="namespace"),
    )
    async with inspecting(client, ctl, release) as ask:
        # One reconcile holds the only slot; then a flood in one namespace, and one object
        # in the quiet namespace after it.
        await make_configmap(client, namespace, "slow", {"k": "v"}, labels=label)

        async def running() -> Any:
            return (await ask("--json", f"{namespace}/slow"))["state"] == "in_flight"

        await _eventually(running, "slow to run")
        for i in range(6):
            await make_configmap(client, namespace, f"flood-{i}", {"k": "v"}, labels=label)

        async def flood_queued() -> Any:
            return (await ask("--json", "--controller", "fair"))["ready"] == 6

        await _eventually(flood_queued, "the flood to be queued")
        await make_configmap(client, quiet, "calm", {"k": "v"}, labels=label)

        async def calm_ready() -> Any:
            answer = await ask("--json", f"{quiet}/calm")
            return answer if answer["state"] == "ready" else None

        calm = await _eventually(calm_ready, "calm to be ready")
        # Behind six in FIFO order; with fair shares only the flood's current turn is ahead.
        assert calm["group"] == quiet
        assert (calm["ahead"], calm["ahead_at_priority"], calm["ahead_in_group"]) == (1, 1, 0)
        last = await ask("--json", f"{namespace}/flood-5")
        assert (last["group"], last["ahead"], last["ahead_in_group"]) == (namespace, 6, 5)
        text = await ask(f"{quiet}/calm")
        assert f"group:     {quiet}" in text
        assert "position:  1 ahead (1 at its priority, 0 of its group)" in text
        summary = await ask("--json", "--controller", "fair")
        assert summary["by_group"][quiet] == {
            "keys": 1,
            "ready": 1,
            "in_flight": 0,
            "weight": 1,
            "group_concurrency": 0,  # no cap
            "held": False,
        }
        assert summary["by_group"][namespace]["in_flight"] == 1
        assert summary["oldest_ready"]["group"] == namespace
        control_plane.api_request("DELETE", f"/api/v1/namespaces/{quiet}")


async def _ready(manager: Manager) -> bool:
    return manager.debug_queue is not None and manager.debug_queue.port != 0


async def test_a_group_at_its_cap_is_held_and_inspect_says_so(
    client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """Four slots, at most one reconcile per namespace: a namespace with three objects runs
    one and holds two, while an object of another namespace takes a free slot at once."""
    other = second_namespace(control_plane, "cap-other")
    release = asyncio.Event()
    label = {"fastctl.dev/cap-test": other}
    running: dict[str, int] = {}
    most: dict[str, int] = {}

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        ns = obj["metadata"]["namespace"]
        running[ns] = running.get(ns, 0) + 1
        most[ns] = max(most.get(ns, 0), running[ns])
        try:
            await release.wait()
        finally:
            running[ns] -= 1

    ctl = Controller(
        client,
        Resource("v1", "ConfigMap"),
        reconcile,
        name="capped",
        label_selector=f"fastctl.dev/cap-test={other}",
        config=ApplierConfig(concurrency=4, fair_by="namespace", group_concurrency=1),
    )
    async with inspecting(client, ctl, release) as ask:
        for i in range(3):
            await make_configmap(client, namespace, f"busy-{i}", {"k": "v"}, labels=label)

        async def held() -> Any:
            summary = await ask("--json", "--controller", "capped")
            group = summary["by_group"].get(namespace)
            return summary if group and group["held"] and group["ready"] == 2 else None

        summary = await _eventually(held, "the busy namespace to be held with two ready")
        assert summary["group_concurrency"] == 1
        assert summary["by_group"][namespace]["in_flight"] == 1
        await make_configmap(client, other, "calm", {"k": "v"}, labels=label)

        async def calm_running() -> Any:
            return (await ask("--json", f"{other}/calm"))["state"] == "in_flight"

        await _eventually(calm_running, "calm to run in a free slot")
        waiting = [await ask("--json", f"{namespace}/busy-{i}") for i in range(3)]
        states = sorted((w["state"], bool(w.get("held"))) for w in waiting)
        assert states == [("in_flight", False), ("ready", True), ("ready", True)]
        name = next(w["name"] for w in waiting if w.get("held"))
        text = await ask(f"{namespace}/{name}")
        assert f"held:      group {namespace} has its cap of reconciles running" in text
        release.set()

        async def all_done() -> Any:
            summary = await ask("--json", "--controller", "capped")
            return summary["in_flight"] == 0 and summary["ready"] == 0

        await _eventually(all_done, "every object reconciled")
    assert most == {namespace: 1, other: 1}
    control_plane.api_request("DELETE", f"/api/v1/namespaces/{other}")
