"""Who may scrape /metrics: TokenReview, SubjectAccessReview, the cache, and the HTTPS server
that asks them (with a fake API server: the real one is in tests/kube/test_metrics_auth.py)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry, Counter

from fastctl._tls import ServingCertificate
from fastctl.runtime import _metrics_auth
from fastctl.runtime._health import HealthServer
from fastctl.runtime._metrics_auth import MetricsAuthorizer

USERS = {"reader-token": "system:serviceaccount:mon:prometheus", "other-token": "someone"}
ALLOWED = {"system:serviceaccount:mon:prometheus"}


class FakeApi:
    """Answers TokenReviews from USERS and SubjectAccessReviews from ALLOWED."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.down = False
        monkeypatch.setattr(_metrics_auth, "request_json", self.request_json)

    async def request_json(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        body = orjson.loads(kw["body"])
        self.calls.append((path, body))
        if self.down:
            raise ConnectionError("the API server is down")
        if body["kind"] == "TokenReview":
            user = USERS.get(body["spec"]["token"])
            status = {"authenticated": True, "user": {"username": user}} if user else {}
            return {**body, "status": status}
        return {**body, "status": {"allowed": body["spec"]["user"] in ALLOWED}}

    def paths(self) -> list[str]:
        return [path.rsplit("/", 1)[1] for path, _ in self.calls]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def authorizer(**kw: Any) -> MetricsAuthorizer:
    return MetricsAuthorizer(cast(ApiClient, None), **kw)


async def test_no_or_malformed_header_is_401_without_an_api_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi(monkeypatch)
    auth = authorizer()
    for header in (None, "", "Bearer", "Bearer   ", "Basic dXNlcjpwYXNz", "reader-token"):
        assert (await auth.check(header)).status == 401
    assert api.calls == []


async def test_a_reader_is_allowed_and_asked_about_get_on_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi(monkeypatch)
    verdict = await authorizer().check("Bearer reader-token")
    assert verdict.status == 200
    assert api.paths() == ["tokenreviews", "subjectaccessreviews"]
    sar = api.calls[1][1]["spec"]
    assert sar["user"] == USERS["reader-token"]
    assert sar["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


async def test_unknown_token_is_401_and_a_user_without_the_role_is_403(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi(monkeypatch)
    auth = authorizer()
    assert (await auth.check("Bearer made-up")).status == 401
    assert api.paths() == ["tokenreviews"]  # no SAR for someone unknown
    verdict = await auth.check("bearer other-token")  # the scheme is case-insensitive
    assert verdict.status == 403
    assert "someone may not get /metrics" in verdict.reason


async def test_answers_are_cached_allowed_longer_than_denied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi(monkeypatch)
    clock = Clock()
    auth = authorizer(allowed_ttl=60, denied_ttl=10, clock=clock)
    for _ in range(50):
        assert (await auth.check("Bearer reader-token")).status == 200
        assert (await auth.check("Bearer other-token")).status == 403
    assert auth.reviews == 2  # one per token, for 100 scrapes
    assert len(api.calls) == 4  # a TokenReview and a SubjectAccessReview each
    clock.now += 11  # the refusal expired, the permission not
    await auth.check("Bearer reader-token")
    await auth.check("Bearer other-token")
    assert auth.reviews == 3
    clock.now += 50
    await auth.check("Bearer reader-token")
    assert auth.reviews == 4


async def test_the_cache_is_bounded_and_drops_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeApi(monkeypatch)
    auth = authorizer(max_entries=2)
    for n in range(100):
        await auth.check(f"Bearer flood-{n}")
    assert len(auth._cache) == 2
    await auth.check("Bearer flood-99")
    assert auth.reviews == 100  # the newest is still cached
    await auth.check("Bearer flood-0")
    assert auth.reviews == 101  # the oldest was dropped
    assert all(b"flood" not in key for key in auth._cache)  # digests, never tokens


async def test_a_failed_review_is_500_and_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(monkeypatch)
    auth = authorizer()
    api.down = True
    assert (await auth.check("Bearer reader-token")).status == 500
    api.down = False
    assert (await auth.check("Bearer reader-token")).status == 200
    assert auth.reviews == 2


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("scraped_things", "a sample", registry=registry).inc()
    return registry


def metrics_server(
    cert: ServingCertificate, registry: CollectorRegistry
) -> tuple[HealthServer, ssl.SSLContext]:
    """A /metrics-only HTTPS server on any port, behind an authorizer, and a client
    context that trusts its certificate."""
    trust = ssl.create_default_context(cadata=(cert.ca_bundle or b"").decode())
    server = HealthServer(
        0,
        host="127.0.0.1",
        registry=registry,
        probes=False,
        ssl_context=cert.ssl_context,
        authorizer=authorizer(),
    )
    return server, trust


async def test_the_https_server_answers_401_403_200_and_refuses_plain_http(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, registry: CollectorRegistry
) -> None:
    FakeApi(monkeypatch)
    cert = ServingCertificate.self_signed(tmp_path, ["127.0.0.1"], purpose="metrics")
    server, trust = metrics_server(cert, registry)
    async with server, aiohttp.ClientSession() as http:
        url = f"https://127.0.0.1:{server.port}/metrics"
        async with http.get(url, ssl=trust) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"] == "Bearer"
            assert "scraped_things" not in await resp.text()
        headers = {"Authorization": "Bearer other-token"}
        async with http.get(url, ssl=trust, headers=headers) as resp:
            assert resp.status == 403
        headers = {"Authorization": "Bearer reader-token"}
        async with http.get(url, ssl=trust, headers=headers) as resp:
            assert resp.status == 200
            assert "scraped_things_total 1.0" in await resp.text()
        with pytest.raises(aiohttp.ClientError):  # plain HTTP on the TLS port: dropped
            async with http.get(f"http://127.0.0.1:{server.port}/metrics") as resp:
                await resp.read()
