"""Start-up without an API server: discovery waits for one (`resolve_patiently`), with no
server at all. A port where nothing listens refuses the first attempts; then a fake API
server starts on that port and answers discovery as scripted. Permanent refusals (401, 403)
fail at once, naming what was refused; a resource that stays unserved fails after a bounded
number of lookups; and a Manager meanwhile reports alive but not ready, and stops at once."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.errors import DiscoveryError, ResourceNotFound
from fastctl.kube._resource import Discovery, Resource
from fastctl.kube._retry import NOT_FOUND_RETRIES, Backoff, resolve_patiently
from fastctl.runtime.controller import Controller
from fastctl.runtime.manager import Manager, ServerOptions

WIDGET = Resource("example.com/v1", "Widget")
DOC = {"resources": [{"name": "widgets", "kind": "Widget", "namespaced": True, "verbs": []}]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class FakeApiServer:
    """Answers every GET with the next scripted status (200: the discovery document), the
    last one for ever; records the paths asked for."""

    def __init__(self, port: int, *statuses: int) -> None:
        self.port = port
        self.statuses = list(statuses)
        self.paths: list[str] = []
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if status == 200:
            return web.Response(body=orjson.dumps(DOC), content_type="application/json")
        body = {"kind": "Status", "code": status, "reason": "Scripted", "message": "as scripted"}
        return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[tuple[ApiClient, int]]:
    port = _free_port()
    api = ApiClient(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        yield api, port
    finally:
        await api.close()


def _fast() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


async def _until(condition: Any, what: str) -> None:
    """Wait (in short sleeps, a bounded number of them) until `condition()` holds."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def test_discovery_retries_a_refused_connection_until_the_server_answers(
    client: tuple[ApiClient, int], caplog: pytest.LogCaptureFixture
) -> None:
    api, port = client
    errors: list[BaseException] = []
    caplog.set_level(logging.WARNING, "fastctl.discovery")
    task = asyncio.create_task(
        resolve_patiently(
            api, WIDGET, discovery=Discovery(api), backoff=_fast(), on_error=errors.append
        )
    )
    await _until(lambda: len(errors) >= 3, "three refused attempts")
    assert not task.done()
    assert all(isinstance(e, aiohttp.ClientConnectorError) for e in errors)
    server = FakeApiServer(port, 503, 429, 200)  # then starting up: 503, busy: 429, up
    await server.start()
    try:
        resolved = await task
    finally:
        await server.stop()
    assert (resolved.plural, resolved.namespaced) == ("widgets", True)
    assert server.paths == ["/apis/example.com/v1"] * 3
    retried = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retried) == len(errors)  # one line per failed attempt, with its reason
    assert "Connect" in retried[0].getMessage()
    assert "503" in retried[-2].getMessage()


async def test_a_crd_installed_after_the_operator_is_found(client: tuple[ApiClient, int]) -> None:
    api, port = client
    server = FakeApiServer(port, 404, 404, 200)
    await server.start()
    try:
        resolved = await resolve_patiently(
            api, WIDGET, discovery=Discovery(api), backoff=_fast(), not_found_retries=3
        )
    finally:
        await server.stop()
    assert resolved.plural == "widgets"
    assert len(server.paths) == 3


async def test_a_resource_never_served_is_fatal_after_a_bounded_number_of_lookups(
    client: tuple[ApiClient, int],
) -> None:
    api, port = client
    server = FakeApiServer(port, 404)
    await server.start()
    try:
        patient = resolve_patiently(
            api, WIDGET, discovery=Discovery(api), backoff=_fast(), not_found_retries=3
        )
        with pytest.raises(ResourceNotFound, match="not served by this API server") as info:
            await asyncio.wait_for(patient, 30)  # unbounded retries would hang here
    finally:
        await server.stop()
    assert "Widget (example.com/v1)" in str(info.value)
    assert len(server.paths) == 4  # the first lookup and 3 retries


async def test_by_default_a_missing_resource_is_looked_up_for_half_a_minute(
    client: tuple[ApiClient, int],
) -> None:
    """The default budget: `NOT_FOUND_RETRIES` lookups again (the first test's budget is
    explicit), which with the default `Backoff` at its shortest jitter wait 25 s or more: a
    CRD applied by the same deployment, just after the operator, is found."""
    waits = sum(min(30.0, 0.5 * 2.0**n) for n in range(NOT_FOUND_RETRIES)) * (1 - 0.2)
    assert waits >= 25.0
    api, port = client
    server = FakeApiServer(port, 404)
    await server.start()
    try:
        patient = resolve_patiently(api, WIDGET, discovery=Discovery(api), backoff=_fast())
        with pytest.raises(ResourceNotFound, match=f"looked up {NOT_FOUND_RETRIES + 1} times"):
            await asyncio.wait_for(patient, 30)
    finally:
        await server.stop()
    assert len(server.paths) == NOT_FOUND_RETRIES + 1


@pytest.mark.parametrize(("status", "says"), [(401, "credentials"), (403, "RBAC")])
async def test_refused_credentials_or_rbac_are_fatal_at_once(
    client: tuple[ApiClient, int], status: int, says: str
) -> None:
    api, port = client
    server = FakeApiServer(port, status)
    await server.start()
    try:
        patient = resolve_patiently(api, WIDGET, discovery=Discovery(api), backoff=_fast())
        with pytest.raises(DiscoveryError) as info:
            await asyncio.wait_for(patient, 30)  # retrying a refusal would hang here
    finally:
        await server.stop()
    message = str(info.value)
    assert "Widget (example.com/v1)" in message
    assert f"GET /apis/example.com/v1 (discovery) failed with {status}" in message
    assert says in message
    assert len(server.paths) == 1


async def test_a_manager_without_an_api_server_is_alive_not_ready_and_stops_at_once(
    client: tuple[ApiClient, int],
) -> None:
    api, _ = client

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(api, WIDGET, reconcile)
    manager = Manager(
        api,
        drain_timeout=600,
        servers=ServerOptions(
            metrics_port=0, metrics_host="127.0.0.1", probe_port=0, probe_host="127.0.0.1"
        ),
    )
    manager.add(ctl)
    run = asyncio.create_task(manager.run())
    await _until(lambda: ctl.counters.watch_errors >= 2, "two failed discoveries")
    assert manager.health is not None
    base = f"http://127.0.0.1:{manager.health.port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 503
    manager.shutdown()
    # Not the drain timeout (600 s): nothing runs yet, so the run ends without waiting.
    await asyncio.wait_for(run, 60)
    assert run.exception() is None


async def test_fastctl_run_reports_a_refused_discovery_in_one_line(
    tmp_path: Path, client: tuple[ApiClient, int]
) -> None:
    """The CLI ends with exit status 1 and one line naming what was refused, no traceback."""
    _, port = client
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    server = FakeApiServer(port, 403)
    await server.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fastctl.cli",
            "run",
            "fastctl.demo.widgets:make_controller",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-port",
            "0",
            "--probe-port",
            "0",
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
    stderr = err.decode()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("fastctl: error: cannot resolve ")
    assert "(discovery) failed with 403" in last


async def test_a_controller_stopped_before_it_runs_does_not_wait_for_the_api_server(
    client: tuple[ApiClient, int],
) -> None:
    api, _ = client

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(api, WIDGET, reconcile)
    ctl.shutdown()
    await asyncio.wait_for(ctl.run(handle_signals=False), 60)  # would retry for ever
    assert ctl.counters.watch_errors == 0  # not one lookup was tried
