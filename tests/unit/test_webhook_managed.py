"""`ManagedWebhookServer` with a stand-in for `install`: it installs only once the server
answers reviews (the stand-in calls it over TLS before it returns), with the server's URL
and CA; ``/readyz`` of a Manager running it is 503, with the reason, until the install has
succeeded; a failing install is retried and its error is the reason meanwhile."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl.kube import Resource
from fastctl.runtime import Manager
from fastctl.webhook import Allow, ManagedWebhookServer, Webhooks

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
PATH = "/validate/cm.managed.test.dev"


def _hooks() -> Webhooks:
    hooks = Webhooks()
    hooks.validating(CONFIGMAP, name="cm.managed.test.dev")(lambda request: Allow())
    return hooks


def _review() -> bytes:
    request = {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": {"kind": "ConfigMap"}}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


class FakeInstall:
    """Stands in for `fastctl.webhook.install`: calls the server (as the API server will)
    when it is asked to install, then waits for `gate`; fails `failures` times first."""

    def __init__(self, failures: int = 0) -> None:
        self.gate = asyncio.Event()
        self.failures = failures
        self.calls: list[dict[str, Any]] = []
        self.answered: list[bool] = []

    async def __call__(self, client: Any, webhooks: Webhooks, name: str, **kw: Any) -> None:
        self.calls.append({"name": name, **kw})
        context = ssl.create_default_context(cadata=kw["ca_bundle"].decode())
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(kw["url"] + PATH, data=_review()) as resp,
        ):
            self.answered.append((await resp.json())["response"]["allowed"])
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the API server is not there yet")
        await self.gate.wait()


async def _readyz(port: int) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as resp,
    ):
        return resp.status, await resp.text()


async def _until(check: Any, what: str) -> None:
    for _ in range(1000):  # bounded by a count, not a clock
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what}: never happened")


async def test_installs_once_serving_and_readyz_waits_for_it(tmp_path: Path) -> None:
    fake = FakeInstall()
    server = ManagedWebhookServer(
        _hooks(), cast(ApiClient, None), "demo-hooks", directory=tmp_path, port=0,
        host="127.0.0.1", install=fake,
    )  # fmt: skip
    assert server.is_ready() == (False, "webhook server not serving")
    manager = Manager(cast(ApiClient, None), metrics_port=0)
    manager.add_runnable(server)
    run = asyncio.create_task(manager.run())

    async def installing() -> bool:
        return bool(fake.answered) and manager.health is not None and manager.health.port != 0

    await _until(installing, "install called, the server answering")
    assert len(fake.calls) == 1, "installed once, at the first try: the server was serving"
    assert fake.answered == [True]
    assert fake.calls[0]["url"] == server.url
    assert fake.calls[0]["ca_bundle"] == server.certificate.ca_bundle  # type: ignore[union-attr]
    assert manager.health is not None
    port = manager.health.port
    status, text = await _readyz(port)
    assert status == 503
    assert "demo-hooks not installed" in text
    fake.gate.set()
    await server.installed()
    status, text = await _readyz(port)
    assert status == 200, text
    manager.shutdown()
    await run


async def test_a_failing_install_is_retried_and_is_the_reason(tmp_path: Path) -> None:
    fake = FakeInstall(failures=2)
    fake.gate.set()
    async with ManagedWebhookServer(
        _hooks(), cast(ApiClient, None), "retried", directory=tmp_path, port=0,
        host="127.0.0.1", install=fake, retry=(0.01, 0.02),
    ) as server:  # fmt: skip

        async def failed_once() -> bool:
            return server.install_error is not None

        await _until(failed_once, "a failed install")
        ready, reason = server.is_ready()
        assert not ready
        assert "not there yet" in reason
        await server.installed()
        assert server.is_ready()[0]
        assert server.install_error is None
        assert len(fake.calls) == 3
