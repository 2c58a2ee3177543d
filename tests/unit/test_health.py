"""The /metrics, /healthz and /readyz endpoints, over real HTTP on loopback."""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter

from fastctl.runtime._health import HealthServer, HealthServerError, PortInUseError


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _get(http: aiohttp.ClientSession, server: HealthServer, path: str) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{server.port}{path}") as response:
        return response.status, await response.text()


async def test_metrics_serves_the_registry_in_the_prometheus_text_format(
    http: aiohttp.ClientSession,
) -> None:
    registry = CollectorRegistry()
    reconciles = Counter("demo_reconciles", "Reconciles.", ["result"], registry=registry)
    reconciles.labels("success").inc(3)
    async with HealthServer(0, host="127.0.0.1", registry=registry) as server:
        assert server.port > 0
        async with http.get(f"http://127.0.0.1:{server.port}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
            body = await response.text()
    assert 'demo_reconciles_total{result="success"} 3.0' in body
    assert "process_" not in body  # only the registry given, not the global one


async def test_healthz_follows_live(http: aiohttp.ClientSession) -> None:
    alive = True
    async with HealthServer(0, host="127.0.0.1", live=lambda: alive) as server:
        assert await _get(http, server, "/healthz") == (200, "ok\n")
        alive = False
        assert await _get(http, server, "/healthz") == (503, "not live\n")


async def test_readyz_flips_and_says_why(http: aiohttp.ClientSession) -> None:
    state: tuple[bool, str] = (False, "caches not synced: v1/ConfigMap")
    async with HealthServer(0, host="127.0.0.1", ready=lambda: state) as server:
        assert await _get(http, server, "/readyz") == (503, "caches not synced: v1/ConfigMap\n")
        state = (True, "")
        assert await _get(http, server, "/readyz") == (200, "ok\n")
        state = (True, "standby: the leader is pod-b")
        assert await _get(http, server, "/readyz") == (200, "standby: the leader is pod-b\n")
        # Liveness is a separate question.
        assert (await _get(http, server, "/healthz"))[0] == 200


async def test_a_check_that_raises_fails_the_probe_instead_of_crashing_it(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> bool:
        raise KeyError("controller")

    async with HealthServer(0, host="127.0.0.1", ready=broken) as server:
        status, text = await _get(http, server, "/readyz")
    assert status == 503
    assert text == "ready check failed: KeyError('controller')\n"
    assert "ready check failed" in caplog.text


async def test_unknown_paths_are_404_and_stop_closes_the_port(
    http: aiohttp.ClientSession,
) -> None:
    server = HealthServer(0, host="127.0.0.1")
    await server.start()
    assert (await _get(http, server, "/nope"))[0] == 404
    with pytest.raises(RuntimeError, match="already started"):
        await server.start()
    await server.stop()
    await server.stop()  # a second stop is a no-op
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(http, server, "/healthz")


async def test_a_port_in_use_is_one_clear_error_that_names_the_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HealthServer(port, host="127.0.0.1")
        with pytest.raises(PortInUseError) as caught:
            await server.start()
    error = caught.value
    assert str(error) == f"metrics port {port} is already in use"
    assert isinstance(error, OSError)
    assert error.errno == errno.EADDRINUSE
    assert error.__cause__ is None
    assert error.__suppress_context__  # no "during handling of the above exception"
    await server.stop()  # nothing was started: still fine


async def test_a_port_held_by_another_health_server_is_in_use_too() -> None:
    async with HealthServer(0, host="127.0.0.1") as first:
        with pytest.raises(PortInUseError, match=f"metrics port {first.port} is already"):
            await HealthServer(first.port, host="127.0.0.1").start()


async def test_other_bind_failures_name_the_address() -> None:
    with pytest.raises(HealthServerError, match=r"cannot serve metrics on 192\.0\.2\.1:0"):
        await HealthServer(0, host="192.0.2.1").start()  # TEST-NET-1: not ours to bind


def test_an_impossible_port_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="65535"):
        HealthServer(70000)
