"""A Manager started before its API server answers, on the real API server: the fault proxy
in front of it is not there yet (connections refused), then answers 503 (a server starting
up), then passes. The Manager waits, alive and not ready, then comes up and reconciles, with
leader election (whose Lease client starts against the same absent server)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import Controller, Manager, Resource, ServerOptions
from fastctl.testing.control_plane import ControlPlane

from .faultproxy import FaultProxy, admin_ssl_context
from .test_controller import eventually
from .test_manager import create_configmaps
from .test_manager_edges import fast_election

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

CM = Resource("v1", "ConfigMap")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _status(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url) as resp:
        return resp.status


async def test_a_manager_started_before_the_api_server_comes_up_and_reconciles(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    await create_configmaps(client, namespace, ["early"])
    port = _free_port()
    proxy = FaultProxy(
        control_plane.server,
        admin_ssl_context(
            str(control_plane.ca_file),
            str(control_plane.admin_cert_file),
            str(control_plane.admin_key_file),
        ),
    )
    seen: list[str] = []

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(obj["metadata"]["name"])

    async with ApiClient(Configuration(host=f"http://127.0.0.1:{port}")) as absent:
        ctl = Controller(absent, CM, reconcile, namespace=namespace)
        mgr = Manager(
            absent,
            leader_election=fast_election("startup", namespace),
            servers=ServerOptions(
                metrics_port=0, metrics_host="127.0.0.1", probe_port=0, probe_host="127.0.0.1"
            ),
        ).add(ctl)
        run = asyncio.create_task(mgr.run())
        try:
            await eventually(lambda: ctl.counters.watch_errors >= 2, what="refused lookups")
            assert mgr.health is not None
            base = f"http://127.0.0.1:{mgr.health.port}"
            async with aiohttp.ClientSession() as http:
                assert await _status(http, f"{base}/healthz") == 200
                assert await _status(http, f"{base}/readyz") == 503
                proxy.down = True  # there, but answering 503, as a server starting up
                await proxy.start(port)
                refused = ctl.counters.watch_errors
                await eventually(lambda: ctl.counters.watch_errors > refused, what="a 503 retried")
                assert not run.done()
                assert await _status(http, f"{base}/readyz") == 503
                proxy.down = False
                await eventually(lambda: "early" in seen, what="the first reconcile")
                await create_configmaps(client, namespace, ["late"])
                await eventually(lambda: "late" in seen, what="a reconcile of a new object")
                assert await _status(http, f"{base}/readyz") == 200
                assert await _status(http, f"{base}/healthz") == 200
            assert mgr.is_leader
        finally:
            mgr.shutdown()
            await asyncio.wait_for(run, 60)
            await proxy.close()
