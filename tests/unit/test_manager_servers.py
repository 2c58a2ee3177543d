"""The servers of a running Manager, over real sockets: the probes on their own port, the
metrics over HTTPS to allowed readers only (a certificate made at start, or one given and
reloaded), the debug queue and who it answers, and ``/healthz`` once something failed.
The API server's reviews are faked; each test reads what a client or an operator sees."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from fastctl._tls import ServingCertificate
from fastctl.kube._watcher import WatchEvent
from fastctl.runtime import _metrics_auth
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.manager import Manager, ServerOptions

from .test_controller_relist import CHILD, NS, WIDGET, Feed, client, listing, widget
from .test_manager_options import Component


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _until(check: Any, what: str) -> None:
    """Wait in short sleeps (the servers need real I/O), a bounded number of them."""
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def running(mgr: Manager) -> AsyncIterator[asyncio.Task[None]]:
    """Run `mgr` (its first runnable a `Component`) until its servers and runnables have
    started."""
    started = mgr.runnables[0]
    assert isinstance(started, Component)
    task = asyncio.create_task(mgr.run())
    try:
        await _until(lambda: started.started or task.done(), "the manager started")
        yield task
    finally:
        mgr.shutdown()
        with contextlib.suppress(Exception):
            await task


async def _get(url: str, **kw: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, ssl=False, **kw) as resp:
        return resp.status, await resp.text()


def _messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


# -- probes --------------------------------------------------------------------------------


async def test_the_probe_server_serves_the_probes_only_on_its_host_and_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    port = _free_port()
    options = ServerOptions(metrics_port=None, probe_port=port, probe_host="127.0.0.1")
    mgr = Manager(client(), servers=options)
    mgr.add_runnable(Component())
    async with running(mgr):
        assert mgr.health is not None
        assert (mgr.health.host, mgr.health.port) == ("127.0.0.1", port)
        base = f"http://127.0.0.1:{port}"
        assert (await _get(f"{base}/healthz"))[0] == 200
        assert (await _get(f"{base}/readyz"))[0] == 200
        assert (await _get(f"{base}/metrics"))[0] == 404
    assert f"serving /healthz, /readyz on port {port}" in _messages(caplog, "fastctl.manager")


# -- metrics -------------------------------------------------------------------------------


class Reviews:
    """The API server's TokenReview and SubjectAccessReview, faked: the token "reader" is
    allowed; notes the client each review was sent with."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clients: list[Any] = []
        monkeypatch.setattr(_metrics_auth, "request_json", self.request_json)

    async def request_json(self, api: Any, method: str, path: str, **kw: Any) -> Any:
        self.clients.append(api)
        body = orjson.loads(kw["body"])
        if body["kind"] == "TokenReview":
            ok = body["spec"]["token"] == "reader"
            status = {"authenticated": True, "user": {"username": "prom"}} if ok else {}
            return {**body, "status": status}
        return {**body, "status": {"allowed": True}}


def _served_certificate(port: int) -> x509.Certificate:
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode())


async def test_metrics_are_served_over_https_to_allowed_readers_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """By default: a certificate made at start for this pod's names, issued by a CA named
    for metrics; no token is 401, an allowed reader's token is 200 (reviewed through the
    Manager's own client); plain HTTP is refused; no probes on this port."""
    caplog.set_level(logging.INFO, "fastctl.manager")
    keys_before = _metrics_directories()
    reviews = Reviews(monkeypatch)
    api = client()
    mgr = Manager(
        api, servers=ServerOptions(metrics_port=0, metrics_host="127.0.0.1", probe_port=None)
    )
    mgr.add_runnable(Component())
    async with running(mgr):
        server = mgr.metrics_server
        assert server is not None
        assert server.host == "127.0.0.1"
        port = server.port
        cert = await asyncio.to_thread(_served_certificate, port)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {"localhost", socket.gethostname()} <= set(names.get_values_for_type(x509.DNSName))
        assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        issuer = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        assert issuer == "fastctl-metrics-ca"
        base = f"https://127.0.0.1:{port}"
        assert (await _get(f"{base}/metrics"))[0] == 401
        headers = {"Authorization": "Bearer reader"}
        assert (await _get(f"{base}/metrics", headers=headers))[0] == 200
        assert reviews.clients
        assert all(c is api for c in reviews.clients)
        assert (await _get(f"{base}/healthz", headers=headers))[0] == 404
        with pytest.raises(aiohttp.ClientError):
            await _get(f"http://127.0.0.1:{port}/metrics", headers=headers)
    assert (
        f"serving /metrics on port {port} (HTTPS, TokenReview and SubjectAccessReview)"
        in _messages(caplog, "fastctl.manager")
    )
    assert _metrics_directories() == keys_before  # no private key left on disk


def _metrics_directories() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("fastctl-metrics-*")}


async def test_plain_metrics_are_served_to_anyone_and_say_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastctl.manager")
    mgr = Manager(
        client(), servers=ServerOptions(metrics_port=0, metrics_secure=False, probe_port=None)
    )
    mgr.add_runnable(Component())
    async with running(mgr):
        assert mgr.metrics_server is not None
        port = mgr.metrics_server.port
        assert (await _get(f"http://127.0.0.1:{port}/metrics"))[0] == 200
    assert f"serving /metrics on port {port} (plain HTTP, no auth)" in _messages(
        caplog, "fastctl.manager"
    )


async def test_a_given_metrics_certificate_is_served_and_reloaded_when_its_files_change(
    tmp_path: Path,
) -> None:
    given = ServingCertificate.self_signed(tmp_path / "given", ("127.0.0.1",), purpose="given")
    renewed = ServingCertificate.self_signed(tmp_path / "renewed", ("127.0.0.1",), purpose="new")
    options = ServerOptions(metrics_port=0, probe_port=None, metrics_certificate=given)
    mgr = Manager(client(), servers=options)
    mgr.add_runnable(Component())

    def issuer(port: int) -> str:
        cert = _served_certificate(port)
        return str(cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)

    async with running(mgr):
        assert mgr.metrics_server is not None
        port = mgr.metrics_server.port
        assert await asyncio.to_thread(issuer, port) == "fastctl-given-ca"
        assert "metrics certificate reload" in {t.get_name() for t in asyncio.all_tasks()}
        shutil.copy(renewed.key_file, given.key_file)
        shutil.copy(renewed.cert_file, given.cert_file)
        await _until(lambda: given.reloads > 0, "the reload")
        assert await asyncio.to_thread(issuer, port) == "fastctl-new-ca"
    assert "metrics certificate reload" not in {t.get_name() for t in asyncio.all_tasks()}


# -- the debug queue -------------------------------------------------------------------------


class Blocked:
    """Reconciles that wait until `release` is set, noting which were cancelled."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def reconcile(self, obj: dict[str, Any], ctx: Any) -> None:
        self.started.append(obj["metadata"]["name"])
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(obj["metadata"]["name"])
            raise


@pytest.fixture
def feed(monkeypatch: pytest.MonkeyPatch) -> Feed:
    """Every watch reads this feed."""
    events = Feed()
    monkeypatch.setattr(_environment, "watcher", lambda *a, **kw: events.events())
    monkeypatch.setattr(_run, "watcher", lambda *a, **kw: events.events())
    return events


@pytest.mark.parametrize("debug_queue", [True, False])
async def test_the_debug_queue_lists_the_controllers_and_turns_on_their_reasons(
    feed: Feed, debug_queue: bool
) -> None:
    port = _free_port()
    work = Blocked()
    ctl = Controller(client(), WIDGET, work.reconcile, name="widgets", concurrency=1)
    options = ServerOptions(
        metrics_port=None, probe_port=None, debug_queue_port=port if debug_queue else None
    )
    mgr = Manager(client(), servers=options).add(ctl).add_runnable(Component())
    feed.push(*listing(widget("a", 0), widget("b", 0)))
    async with running(mgr):
        await _until(lambda: len(work.started) == 1, "one reconcile running")
        queued = "b" if work.started == ["a"] else "a"
        reasons = [r.reason for r in ctl.inspect(NS, queued).reasons]
        if debug_queue:
            assert reasons == ["list"]
            assert mgr.debug_queue is not None
            assert (mgr.debug_queue.host, mgr.debug_queue.allow_remote) == ("127.0.0.1", False)
            status, body = await _get(f"http://127.0.0.1:{port}/debug/queue")
            assert status == 200
            assert [c["controller"] for c in orjson.loads(body)["controllers"]] == ["widgets"]
        else:
            assert reasons == []
            assert mgr.debug_queue is None
        work.release.set()


@pytest.mark.parametrize(
    ("host", "remote"), [("localhost", False), ("127.0.0.1", False), ("0.0.0.0", True)]
)
async def test_the_debug_queue_answers_remote_clients_only_on_a_non_loopback_host(
    host: str, remote: bool
) -> None:
    options = ServerOptions(
        metrics_port=None, probe_port=None, debug_queue_port=0, debug_queue_host=host
    )
    mgr = Manager(client(), servers=options)
    mgr.add_runnable(Component())
    async with running(mgr):
        assert mgr.debug_queue is not None
        assert mgr.debug_queue.host == host
        assert mgr.debug_queue.allow_remote is remote


# -- /healthz once something failed ------------------------------------------------------------


class FailingFeed(Feed):
    """A feed that raises what `fail` is given, when the watch reaches it."""

    def fail(self, exc: BaseException) -> None:
        self.queue.put_nowait(exc)  # type: ignore[arg-type]

    async def events(self) -> AsyncIterator[WatchEvent]:
        while True:
            item: Any = await self.queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item


async def test_a_failed_controller_fails_healthz_while_the_others_drain_then_run_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A controller's failure is not a lost lease: the others drain gracefully (the running
    reconcile finishes), ``/healthz`` answers 503 meanwhile, and `run()` raises the error."""
    feeds = {"Widget": FailingFeed(), "ConfigMap": FailingFeed()}

    def watcher(api: Any, resource: Any, **_: Any) -> AsyncIterator[WatchEvent]:
        return feeds[resource.kind].events()

    monkeypatch.setattr(_environment, "watcher", watcher)
    work = Blocked()
    busy = Controller(client(), WIDGET, work.reconcile, name="busy")
    broken = Controller(client(), CHILD, work.reconcile, name="broken")
    port = _free_port()
    mgr = Manager(client(), metrics_port=None, probe_port=port).add(busy).add(broken)
    feeds["Widget"].push(*listing(widget("a", 0)))
    feeds["ConfigMap"].push(*listing())
    task = asyncio.create_task(mgr.run())
    try:
        await _until(lambda: work.started == ["a"], "the busy reconcile")
        assert (await _get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
        feeds["ConfigMap"].fail(RuntimeError("boom"))
        for _ in range(2000):
            if (await _get(f"http://127.0.0.1:{port}/healthz"))[0] == 503:
                break
            await asyncio.sleep(0.005)
        else:
            raise AssertionError("/healthz never failed")
        assert not task.done()  # draining the busy reconcile
    finally:
        work.release.set()
    with pytest.raises(RuntimeError, match=r"^boom$"):
        await task
    assert work.cancelled == []
