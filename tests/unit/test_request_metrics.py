"""Every request `fastctl.kube._http.request` sends is counted by code, method and host, and
timed to its headers; a Manager's registry exports those counts under client-go's names, and
the process metrics controller-runtime registers by default."""

from __future__ import annotations

import ast
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import PROCESS_COLLECTOR, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import fastctl
from fastctl.kube import _http
from fastctl.kube._http import request, request_json
from fastctl.kube._request_metrics import RequestTotals
from fastctl.runtime._process_metrics import ClientRequestCollector, register_process_metrics
from fastctl.runtime.manager import Manager

HOST = "api.example:6443"
PACKAGE = Path(fastctl.__file__).parent


class _Response:
    def __init__(self, status: int) -> None:
        self.status = status

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return b"{}"


class _Session:
    """Answers each request with the next of `answers`: a status, or an exception raised."""

    def __init__(self) -> None:
        self.answers: list[int | BaseException] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> _Response:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return _Response(answer)


class _Clock:
    """`time.perf_counter` that moves on by the next of `steps` at every reading."""

    def __init__(self) -> None:
        self.now = 0.0
        self.steps: list[float] = []

    def perf_counter(self) -> float:
        self.now += self.steps.pop(0) if self.steps else 0.0
        return self.now


@pytest.fixture
def totals(monkeypatch: pytest.MonkeyPatch) -> RequestTotals:
    fresh = RequestTotals()
    monkeypatch.setattr(_http, "REQUESTS", fresh)
    return fresh


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(_http, "time", fake)
    return fake


@pytest.fixture
async def client() -> AsyncIterator[tuple[ApiClient, _Session]]:
    api = ApiClient(Configuration(host=f"https://{HOST}"))
    real = api.rest_client.pool_manager
    session = _Session()
    api.rest_client.pool_manager = session  # type: ignore[assignment]
    yield api, session
    await real.close()


async def test_each_request_is_counted_by_code_method_and_host(
    client: tuple[ApiClient, _Session], totals: RequestTotals
) -> None:
    api, session = client
    session.answers = [200, 404, 201, aiohttp.ClientConnectionError("refused"), 200]
    await request_json(api, "GET", "/api/v1/namespaces/a/configmaps/b")
    with pytest.raises(_http.ApiError):
        await request_json(api, "GET", "/api/v1/namespaces/a/configmaps/missing")
    await request_json(api, "PATCH", "/api/v1/namespaces/a/configmaps/b", body=b"{}")
    with pytest.raises(aiohttp.ClientConnectionError):
        await request_json(api, "GET", "/api/v1/namespaces/a/configmaps/b")
    async with await request(api, "GET", "/api/v1/configmaps", query={"watch": True}):
        pass
    assert totals.counts() == {
        ("200", "GET", HOST): 2,
        ("404", "GET", HOST): 1,
        ("201", "PATCH", HOST): 1,
        ("<error>", "GET", HOST): 1,
    }


async def test_a_request_cancelled_before_its_answer_counts_as_an_error(
    client: tuple[ApiClient, _Session], totals: RequestTotals
) -> None:
    import asyncio

    api, session = client
    session.answers = [asyncio.CancelledError()]
    with pytest.raises(asyncio.CancelledError):
        await request_json(api, "DELETE", "/api/v1/namespaces/a/configmaps/b")
    assert totals.counts() == {("<error>", "DELETE", HOST): 1}


async def test_the_time_until_the_headers_lands_in_its_bucket(
    client: tuple[ApiClient, _Session], totals: RequestTotals, clock: _Clock
) -> None:
    api, session = client
    session.answers = [200, 200, 500]
    clock.steps = [0.0, 0.3, 0.0, 0.004, 0.0, 61.0]  # start, answered; three times
    await request_json(api, "GET", "/api/v1/namespaces")
    await request_json(api, "GET", "/api/v1/namespaces")
    with pytest.raises(_http.ApiError):
        await request_json(api, "GET", "/api/v1/namespaces")
    histogram = totals.latencies()[("GET", HOST)]
    assert histogram.counts == [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]  # <=5 ms, <=0.5 s, +Inf
    assert histogram.total == pytest.approx(61.304)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_collector_exports_client_gos_names_and_cumulative_buckets() -> None:
    totals = RequestTotals()
    totals.record("GET", "https://h:1", 200, 0.003)
    totals.record("GET", "https://h:1", 200, 0.2)
    totals.record("POST", "https://h:1", 409, 0.2)
    registry = CollectorRegistry()
    registry.register(ClientRequestCollector(totals))
    got = samples(registry)
    code = (("code", "200"), ("host", "h:1"), ("method", "GET"))
    assert got[("rest_client_requests_total", code)] == 2
    conflict = (("code", "409"), ("host", "h:1"), ("method", "POST"))
    assert got[("rest_client_requests_total", conflict)] == 1

    def bucket(le: str) -> float:
        labels = (("host", "h:1"), ("le", le), ("verb", "GET"))
        return got[("rest_client_request_duration_seconds_bucket", labels)]

    assert (bucket("0.005"), bucket("0.1"), bucket("0.25"), bucket("+Inf")) == (1, 1, 2, 2)
    per_verb = (("host", "h:1"), ("verb", "GET"))
    assert got[("rest_client_request_duration_seconds_count", per_verb)] == 2
    assert got[("rest_client_request_duration_seconds_sum", per_verb)] == pytest.approx(0.203)


async def test_a_managers_registry_has_the_process_and_client_metrics() -> None:
    api = ApiClient(Configuration(host="https://unused"))
    try:
        manager = Manager(api, metrics_port=None, probe_port=None)
        names = {name for name, _ in samples(manager.registry)}
        families = {f.name for f in manager.registry.collect()}
    finally:
        await api.close()
    assert {"rest_client_requests", "rest_client_request_duration_seconds"} <= families
    assert "python_info" in names
    if sys.platform == "linux":  # prometheus_client reads /proc
        assert {
            "process_resident_memory_bytes",
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        } <= names


def test_a_registry_that_has_the_process_metrics_keeps_one_copy() -> None:
    """As the global registry does: it has them, and it refuses names it has already."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(PROCESS_COLLECTOR)
    register_process_metrics(registry)  # no "Duplicated timeseries" error
    families = [f.name for f in registry.collect()]
    assert families.count("process_resident_memory_bytes") <= 1
    assert "rest_client_requests" in families


def senders_in(source: str) -> list[str]:
    """Calls that send on an aiohttp session (``....session.request``,
    ``....pool_manager.request``) or through kubernetes-asyncio's generated API
    (``call_api``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = ast.unparse(node.func.value)
        if node.func.attr == "call_api" or (
            node.func.attr == "request" and owner.endswith(("session", "pool_manager"))
        ):
            found.append(ast.unparse(node.func))
    return found


def test_only_the_counting_function_sends_on_the_api_session() -> None:
    """The counts are complete only while every request goes through `_http.request`: no
    other library module sends on the ApiClient's session or calls its generated API (the
    test control plane's admin connection is not fastctl's client)."""
    senders = [
        f"{path.relative_to(PACKAGE)}: {call}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent.name != "testing"
        for call in senders_in(path.read_text())
    ]
    assert senders == ["kube/_http.py: session.request"]


def test_the_check_sees_a_request_that_bypasses_the_count() -> None:
    source = (
        "async def f(client, api):\n"
        "    await client.rest_client.pool_manager.request('GET', url)\n"
        "    await api.call_api('/api/v1/pods', 'GET')\n"
        "    await connection.request('GET', '/health')\n"
    )
    assert senders_in(source) == ["client.rest_client.pool_manager.request", "api.call_api"]
