"""What `fastctl.kube._http.request` sends: the token (refreshed per request) when there is
one, nothing of auth without one, and the timeout asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._http import request, request_json


def _calls(client: ApiClient) -> list[tuple[str, str, dict[str, Any]]]:
    session: _Session = client.rest_client.pool_manager  # type: ignore[assignment]
    return session.calls


class _Response:
    status = 200

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return b'{"ok": true}'


class _Session:
    """Records each request's keywords instead of sending it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> _Response:
        self.calls.append((method, url, kwargs))
        return _Response()


@pytest.fixture
async def client() -> AsyncIterator[ApiClient]:
    cfg = Configuration(host="https://api.example")
    api = ApiClient(cfg)
    real = api.rest_client.pool_manager
    api.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    yield api
    await real.close()


async def test_a_bearer_token_is_refreshed_and_sent_on_every_request(client: ApiClient) -> None:
    cfg = client.configuration
    tokens = iter(["t1", "t2"])

    def refresh(config: Configuration) -> None:
        config.api_key["BearerToken"] = next(tokens)

    cfg.api_key = {"BearerToken": "t0"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    cfg.refresh_api_key_hook = refresh
    await request(client, "GET", "/api")
    await request(client, "GET", "/api")
    sent = [kw["headers"].get("authorization") for _, _, kw in _calls(client)]
    assert sent == ["Bearer t1", "Bearer t2"]


async def test_without_a_token_no_auth_work_is_done(client: ApiClient) -> None:
    async def no_auth_settings() -> dict[str, Any]:
        raise AssertionError("auth_settings() called without a bearer token")

    client.configuration.auth_settings = no_auth_settings  # type: ignore[method-assign]
    await request(client, "GET", "/api")
    (_, url, kwargs) = _calls(client)[0]
    assert url == "https://api.example/api"
    assert "authorization" not in {k.lower() for k in kwargs["headers"]}


async def test_request_json_sends_the_timeout_asked_for(client: ApiClient) -> None:
    assert await request_json(client, "GET", "/a", request_timeout=5.0) == {"ok": True}
    assert await request_json(client, "GET", "/b") == {"ok": True}
    timeouts = [kw["timeout"].total for _, _, kw in _calls(client)]
    assert timeouts == [5.0, 60.0]
