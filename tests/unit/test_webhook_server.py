"""`WebhookServer` on loopback, over TLS with a certificate fastctl made: a review answered
end to end, the answers with a body for what is not a review (400, 404, 413), the metrics
under controller-runtime's names, a Manager running it as a component, and certificate
files replaced while a client keeps calling (no failed request; the new one is served)."""

from __future__ import annotations

import asyncio
import os
import ssl
import uuid
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import generate_latest

from fastctl._pki import CertificateAuthority
from fastctl.kube import Resource
from fastctl.runtime import Manager
from fastctl.webhook import (
    AdmissionRequest,
    Allow,
    Deny,
    ServingCertificate,
    Webhooks,
    WebhookServer,
)

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
PATH = "/validate/cm.validate.test.dev"


def _hooks() -> Webhooks:
    hooks = Webhooks()

    @hooks.validating(CONFIGMAP, name="cm.validate.test.dev")
    async def check(request: AdmissionRequest) -> Allow | Deny:
        assert request.object is not None
        if request.object.get("data", {}).get("bad"):
            return Deny("bad data")
        return Allow()

    return hooks


def _review(data: dict[str, str]) -> bytes:
    request = {
        "uid": str(uuid.uuid4()),
        "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": data},
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


def _client_context(ca: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.decode())


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    cert = ServingCertificate.self_signed(tmp_path)
    assert cert.ca_bundle is not None
    async with WebhookServer(
        _hooks(), cert, port=0, host="127.0.0.1", max_body_bytes=4096
    ) as server:
        connector = aiohttp.TCPConnector(ssl=_client_context(cert.ca_bundle))
        async with aiohttp.ClientSession(connector=connector) as session:
            yield server, session


async def test_a_review_is_answered_over_tls_and_counted(served: Any) -> None:
    server, session = served
    async with session.post(server.url + PATH, data=_review({"bad": "1"})) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == "bad data"
    metrics = generate_latest(server.registry).decode()
    total = f'controller_runtime_webhook_requests_total{{code="200",webhook="{PATH}"}} 1.0'
    assert total in metrics
    assert f'controller_runtime_webhook_latency_seconds_count{{webhook="{PATH}"}} 1.0' in metrics
    assert f'controller_runtime_webhook_requests_in_flight{{webhook="{PATH}"}} 0.0' in metrics


@pytest.mark.parametrize(
    ("path", "body", "status", "text"),
    [
        (PATH, b"not json", 400, "not JSON"),
        ("/validate/nothing.here.dev", b"{}", 404, "Not Found"),
        (PATH, b"x" * 5000, 413, "over the limit of 4096 bytes"),
    ],
)
async def test_what_is_not_a_review_gets_an_error_with_a_body(
    served: Any, path: str, body: bytes, status: int, text: str
) -> None:
    server, session = served
    async with session.post(server.url + path, data=body) as resp:
        assert resp.status == status
        assert text in await resp.text()
    if status != 404:
        metrics = generate_latest(server.registry).decode()
        assert f'requests_total{{code="{status}",webhook="{PATH}"}} 1.0' in metrics


async def test_a_manager_runs_the_server_as_a_component(tmp_path: Path) -> None:
    cert = ServingCertificate.self_signed(tmp_path)
    assert cert.ca_bundle is not None
    server = WebhookServer(_hooks(), cert, port=0, host="127.0.0.1")
    manager = Manager(cast(ApiClient, None), metrics_port=None, probe_port=None)
    manager.add_runnable(server)
    assert manager.readiness() == (False, "webhook server not serving")
    run = asyncio.create_task(manager.run())
    connector = aiohttp.TCPConnector(ssl=_client_context(cert.ca_bundle))
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(500):  # until it listens (bounded by a count, not a clock)
            if server.port != 0:
                break
            await asyncio.sleep(0.01)
        async with session.post(server.url + PATH, data=_review({})) as resp:
            assert (await resp.json())["response"]["allowed"] is True
    assert manager.readiness() == (True, "ready")  # serving: /readyz no longer waits for it
    manager.shutdown()
    await run
    assert server._runner is None, "the manager stopped it"


async def _served_name(port: int, context: ssl.SSLContext) -> str:
    """One request on a new connection: the served certificate's common name, after a
    successful answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        peer = writer.get_extra_info("peercert")
        body = _review({})
        writer.write(
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        response = await reader.read()
        assert response.startswith(b"HTTP/1.1 200"), response[:100]
        assert b'"allowed":true' in response
    finally:
        writer.close()
    subject = dict(pair[0] for pair in peer["subject"])
    return str(subject["commonName"])


def _live_pair(
    tmp_path: Path,
) -> tuple[CertificateAuthority, Path, ServingCertificate, ssl.SSLContext]:
    """A CA, a directory holding the serving pair ``old-cert`` as ``tls.crt``/``tls.key``,
    the `ServingCertificate` read from it, and a client context trusting the CA."""
    ca = CertificateAuthority(tmp_path)
    first = ca.issue("old", "old-cert", server_names=["127.0.0.1"])
    live = tmp_path / "live"
    live.mkdir()
    os.replace(first.cert, live / "tls.crt")
    os.replace(first.key, live / "tls.key")
    cert = ServingCertificate.from_files(live / "tls.crt", live / "tls.key")
    return ca, live, cert, _client_context(ca.cert_pem)


async def test_replaced_certificate_files_are_served_without_a_failed_request(
    tmp_path: Path,
) -> None:
    ca, live, cert, context = _live_pair(tmp_path)
    async with WebhookServer(
        _hooks(), cert, port=0, host="127.0.0.1", reload_interval=0.01
    ) as server:
        names = [await _served_name(server.port, context) for _ in range(5)]
        assert set(names) == {"old-cert"}
        second = ca.issue("new", "new-cert", server_names=["127.0.0.1"])
        # As a non-atomic writer would: the certificate first, the key a moment later.
        os.replace(second.cert, live / "tls.crt")
        names.append(await _served_name(server.port, context))
        os.replace(second.key, live / "tls.key")
        for _ in range(2000):  # every call must succeed; stop once the new one serves
            names.append(await _served_name(server.port, context))
            if names[-1] == "new-cert":
                break
    assert names[-1] == "new-cert"
    assert cert.reloads == 1
    assert names == sorted(names, key=lambda n: n == "new-cert"), "never back to the old one"


async def test_past_the_request_timeout_the_answer_is_504_with_a_body(tmp_path: Path) -> None:
    hooks = Webhooks()
    never = asyncio.Event()

    @hooks.validating(CONFIGMAP, name="cm.slow.test.dev", timeout_seconds=30)
    async def slow(request: AdmissionRequest) -> Allow:
        await never.wait()
        return Allow()

    cert = ServingCertificate.self_signed(tmp_path)
    assert cert.ca_bundle is not None
    connector = aiohttp.TCPConnector(ssl=_client_context(cert.ca_bundle))
    async with (
        WebhookServer(hooks, cert, port=0, host="127.0.0.1", request_timeout=0.05) as server,
        aiohttp.ClientSession(connector=connector) as session,
        session.post(server.url + "/validate/cm.slow.test.dev", data=_review({})) as resp,
    ):
        assert resp.status == 504
        assert "no answer within 0.05 s" in await resp.text()


async def test_reviews_in_flight_during_a_rotation_all_get_their_answer(tmp_path: Path) -> None:
    """Concurrent clients, on kept-alive connections and on new ones, keep sending reviews
    while the pair is replaced (certificate first, key later): every review is answered."""
    ca, live, cert, context = _live_pair(tmp_path)
    statuses: list[int] = []
    rotated = asyncio.Event()

    async def worker(session: aiohttp.ClientSession, url: str) -> None:
        for _ in range(5000):  # bounded: stops once the rotation is seen, or here
            async with session.post(url, data=_review({})) as r:
                statuses.append(r.status)
                assert (await r.json())["response"]["allowed"] is True
            if rotated.is_set():
                return

    async with WebhookServer(
        _hooks(), cert, port=0, host="127.0.0.1", reload_interval=0.01
    ) as server:
        url = server.url + PATH
        kept = aiohttp.TCPConnector(ssl=context, limit=4)
        fresh = aiohttp.TCPConnector(ssl=context, force_close=True)
        async with (
            aiohttp.ClientSession(connector=kept) as keep_alive,
            aiohttp.ClientSession(connector=fresh) as new_each_time,
        ):
            workers = [asyncio.create_task(worker(keep_alive, url)) for _ in range(4)]
            workers += [asyncio.create_task(worker(new_each_time, url)) for _ in range(4)]
            await asyncio.sleep(0.05)
            second = ca.issue("new", "new-cert", server_names=["127.0.0.1"])
            os.replace(second.cert, live / "tls.crt")
            await asyncio.sleep(0.05)  # a half-written pair, served around
            os.replace(second.key, live / "tls.key")
            for _ in range(2000):
                if await _served_name(server.port, context) == "new-cert":
                    break
            rotated.set()
            await asyncio.gather(*workers)
    assert cert.reloads == 1
    assert len(statuses) > 8
    assert set(statuses) == {200}
