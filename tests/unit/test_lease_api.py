"""The Lease client (`runtime/leader/_lease_api.py`) without an API server: a real
`ApiClient` sends real HTTP to an in-process fake of the coordination.k8s.io/v1 Lease
endpoints, which keeps resourceVersions as the API server does and records every request.
The tests check what goes on the wire (method, path, body) and how answers are read
(404, 409, 422, bodies that are not a Lease)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._http import ApiError
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.leader._lease_api import TRANSIENT, LeaseClient
from fastctl.runtime.leader._rules import LeaseRecord

COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"
PATH = f"{COLLECTION}/op"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    content_type: str
    body: Any


def _status(code: int, reason: str, message: str) -> web.Response:
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    status |= {"code": code, "reason": reason, "message": message}
    return web.json_response(status, status=code)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LeaseServer:
    """The Lease endpoints of one namespace, in memory. `script` holds answers served
    before the store is consulted (a stall, a body that is not a Lease, ...)."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.seen: list[Seen] = []
        self.script: list[Handler] = []
        self.url = ""
        self._arrived = asyncio.Event()
        self.app = web.Application()
        base = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        self.app.router.add_post(base, self._create)
        self.app.router.add_get(base + "/{name}", self._get)
        self.app.router.add_put(base + "/{name}", self._replace)

    def store(self, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"} | orjson.loads(
            orjson.dumps(lease)
        )
        lease["metadata"] = {**lease.get("metadata", {}), "name": name}
        lease["metadata"]["resourceVersion"] = str(self.version)
        self.leases[name] = lease
        return lease

    async def _seen(self, request: web.Request) -> web.StreamResponse | None:
        data = await request.read()
        body = orjson.loads(data) if data else None
        self.seen.append(Seen(request.method, request.path, request.content_type, body))
        self._arrived.set()
        return await self.script.pop(0)(request) if self.script else None

    async def requests(self, count: int) -> None:
        """Wait until `count` requests have arrived."""
        while len(self.seen) < count:
            self._arrived.clear()
            await self._arrived.wait()

    async def _get(self, request: web.Request) -> web.StreamResponse:
        if (scripted := await self._seen(request)) is not None:
            return scripted
        lease = self.leases.get(request.match_info["name"])
        if lease is None:
            return _status(404, "NotFound", "leases.coordination.k8s.io not found")
        return web.json_response(lease)

    async def _create(self, request: web.Request) -> web.StreamResponse:
        if (scripted := await self._seen(request)) is not None:
            return scripted
        body = orjson.loads(await request.read())
        name = body["metadata"]["name"]
        if name in self.leases:
            return _status(409, "AlreadyExists", f'leases "{name}" already exists')
        if body["spec"].get("leaseDurationSeconds", 1) <= 0:
            return _status(422, "Invalid", "spec.leaseDurationSeconds: must be greater than 0")
        return web.json_response(self.store(name, body), status=201)

    async def _replace(self, request: web.Request) -> web.StreamResponse:
        if (scripted := await self._seen(request)) is not None:
            return scripted
        name = request.match_info["name"]
        body = orjson.loads(await request.read())
        current = self.leases.get(name)
        if current is None:
            return _status(404, "NotFound", f'leases "{name}" not found')
        version = body.get("metadata", {}).get("resourceVersion")
        if version != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        return web.json_response(self.store(name, body))


@pytest.fixture
async def server() -> AsyncIterator[LeaseServer]:
    fake = LeaseServer()
    async with TestServer(fake.app) as test_server:
        fake.url = str(test_server.make_url("")).rstrip("/")
        yield fake


@pytest.fixture
async def api(server: LeaseServer) -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host=server.url)) as client:
        yield client


def _leases(api: ApiClient, timeout: float = 5.0) -> LeaseClient:
    return LeaseClient(api, "ops", "op", timeout)


RECORD = LeaseRecord("a", 15, "2026-12-02T13:45:00.123456Z", "2026-12-02T13:45:01.000001Z", 2)
SPEC = {
    "holderIdentity": "a",
    "leaseDurationSeconds": 15,
    "acquireTime": "2026-12-02T13:45:00.123456Z",
    "renewTime": "2026-12-02T13:45:01.000001Z",
    "leaseTransitions": 2,
}


# -- requests on the wire ----------------------------------------------------------------


async def test_create_posts_a_whole_lease_to_the_collection(
    server: LeaseServer, api: ApiClient
) -> None:
    created = await _leases(api).create(RECORD)
    assert server.seen == [
        Seen(
            "POST",
            COLLECTION,
            "application/json",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "op"},
                "spec": SPEC,
            },
        )
    ]
    assert created == server.leases["op"]
    assert created["metadata"]["resourceVersion"] == "1"


async def test_get_reads_the_lease_by_name_and_a_404_is_no_lease(
    server: LeaseServer, api: ApiClient
) -> None:
    leases = _leases(api)
    assert await leases.get() is None
    server.store("op", {"spec": SPEC})
    server.store("other", {"spec": {**SPEC, "holderIdentity": "z"}})
    lease = await leases.get()
    assert lease == server.leases["op"]
    assert server.seen == [Seen("GET", PATH, "application/octet-stream", None)] * 2


async def test_replace_puts_the_copy_read_with_its_resource_version_and_the_new_record(
    server: LeaseServer, api: ApiClient
) -> None:
    """The body is the lease as read (metadata, resourceVersion, spec fields that are not
    the elector's), with the record's fields written over its spec."""
    leases = _leases(api)
    labels = {"app": "op"}
    stored = server.store(
        "op",
        {
            "metadata": {"labels": labels},
            "spec": {**SPEC, "holderIdentity": "z", "strategy": "OldestEmulationVersion"},
        },
    )
    read = await leases.get()
    assert read is not None
    renewed = LeaseRecord("a", 7, "2026-12-02T13:45:00.123456Z", "2026-12-02T13:46:00.5Z", 3)
    written = await leases.replace(read, renewed)
    put = server.seen[-1]
    assert (put.method, put.path, put.content_type) == ("PUT", PATH, "application/json")
    assert put.body == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"labels": labels, "name": "op", "resourceVersion": "1"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 7,
            "acquireTime": "2026-12-02T13:45:00.123456Z",
            "renewTime": "2026-12-02T13:46:00.5Z",
            "leaseTransitions": 3,
            "strategy": "OldestEmulationVersion",
        },
    }
    assert written == server.leases["op"]
    assert written["metadata"]["resourceVersion"] == "2"
    assert stored["metadata"]["resourceVersion"] == "1"


async def test_a_released_record_writes_an_empty_holder_and_no_times_are_dropped(
    server: LeaseServer, api: ApiClient
) -> None:
    """A record without times leaves the lease's times as they were (the spec is merged);
    an empty holder is written as ``""``, not left out."""
    leases = _leases(api)
    server.store("op", {"spec": SPEC})
    read = await leases.get()
    assert read is not None
    await leases.replace(read, LeaseRecord("", 1, None, None, 2))
    assert server.seen[-1].body["spec"] == {**SPEC, "holderIdentity": "", "leaseDurationSeconds": 1}


# -- answers -------------------------------------------------------------------------------


async def test_a_stale_resource_version_is_a_409_and_a_deleted_lease_a_404(
    server: LeaseServer, api: ApiClient
) -> None:
    leases = _leases(api)
    server.store("op", {"spec": SPEC})
    stale = await leases.get()
    assert stale is not None
    server.store("op", {"spec": SPEC})  # somebody else wrote: resourceVersion 2
    with pytest.raises(ApiError) as conflict:
        await leases.replace(stale, RECORD)
    assert (conflict.value.status, conflict.value.reason) == (409, "Conflict")
    assert (conflict.value.method, conflict.value.path) == ("PUT", PATH)
    del server.leases["op"]
    with pytest.raises(ApiError) as gone:
        await leases.replace(stale, RECORD)
    assert (gone.value.status, gone.value.reason) == (404, "NotFound")


async def test_create_over_an_existing_lease_is_a_409_and_an_invalid_one_a_422(
    server: LeaseServer, api: ApiClient
) -> None:
    leases = _leases(api)
    with pytest.raises(ApiError) as invalid:
        await leases.create(LeaseRecord("a", 0))
    assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
    assert (invalid.value.method, invalid.value.path) == ("POST", COLLECTION)
    await leases.create(RECORD)
    with pytest.raises(ApiError) as exists:
        await leases.create(RECORD)
    assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")


@pytest.mark.parametrize(
    ("code", "reason"), [(403, "Forbidden"), (405, "MethodNotAllowed"), (500, "InternalError")]
)
async def test_get_raises_every_failure_but_404(
    server: LeaseServer, api: ApiClient, code: int, reason: str
) -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        return _status(code, reason, "no")

    server.script.append(refuse)
    with pytest.raises(ApiError) as failed:
        await _leases(api).get()
    assert (failed.value.status, failed.value.reason) == (code, reason)
    assert (failed.value.method, failed.value.path) == ("GET", PATH)


def _answer(body: bytes) -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="application/json")

    return answer


@pytest.mark.parametrize("body", [b"[1, 2]", b'"a lease"', b"null", b""])
@pytest.mark.parametrize("call", ["get", "create", "replace"])
async def test_an_answer_that_is_not_a_json_object_is_a_bad_response(
    server: LeaseServer, api: ApiClient, body: bytes, call: str
) -> None:
    """A proxy or a broken server must not hand the elector a list or nothing as a lease:
    that is an `ApiError` (transient, so the elector retries), naming the request."""
    leases = _leases(api)
    server.script.append(_answer(body))
    calls: dict[str, tuple[str, str, Callable[[], Awaitable[Any]]]] = {
        "get": ("GET", PATH, leases.get),
        "create": ("POST", COLLECTION, lambda: leases.create(RECORD)),
        "replace": ("PUT", PATH, lambda: leases.replace({"metadata": {"name": "op"}}, RECORD)),
    }
    method, path, request = calls[call]
    with pytest.raises(ApiError) as bad:
        await request()
    assert isinstance(bad.value, TRANSIENT)
    assert str(bad.value) == f"{method} {path}: 0 BadResponse: not a JSON object"


async def test_an_answer_that_is_not_json_is_transient(server: LeaseServer, api: ApiClient) -> None:
    server.script.append(_answer(b"<html>proxy</html>"))
    with pytest.raises(TRANSIENT):
        await _leases(api).get()


async def test_a_lease_with_timestamps_that_do_not_parse_is_still_read(
    server: LeaseServer, api: ApiClient
) -> None:
    """The elector never trusts the remote times (it times the lease on its own clock),
    so a lease written by a client with odd timestamps reads like any other."""
    odd = {**SPEC, "acquireTime": "yesterday", "renewTime": 12, "leaseDurationSeconds": "15"}
    server.store("op", {"spec": odd})
    lease = await _leases(api).get()
    assert lease is not None
    assert LeaseRecord.from_lease(lease) == LeaseRecord("a", 0, "yesterday", 12, 2)  # type: ignore[arg-type]


async def test_each_request_gives_up_after_the_client_s_timeout(
    server: LeaseServer, api: ApiClient
) -> None:
    """The timeout is the client's own (the elector passes its renew deadline): a request
    the server never answers fails with `TimeoutError` instead of hanging."""
    answer = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        await answer.wait()
        return _status(500, "InternalError", "too late")

    leases = _leases(api, timeout=0.05)
    calls: list[Callable[[], Awaitable[Any]]] = [
        leases.get,
        lambda: leases.create(RECORD),
        lambda: leases.replace({"metadata": {"name": "op"}}, RECORD),
    ]
    for call in calls:
        server.script.append(stall)
        task = asyncio.ensure_future(call())
        done, _ = await asyncio.wait({task}, timeout=5.0)  # a cap for a broken client
        answer.set()
        assert task in done
        assert isinstance(task.exception(), TimeoutError)
        assert isinstance(task.exception(), TRANSIENT)
        answer.clear()


async def test_aiohttp_errors_are_transient() -> None:
    assert issubclass(aiohttp.ClientConnectionError, TRANSIENT)


# -- the elector through the client ----------------------------------------------------------


async def _leading_over_http(
    api: ApiClient, *, lease_duration: float, renew_deadline: float
) -> tuple[LeaderElector, asyncio.Task[None]]:
    """An elector for lease ops/op as "me" (retry period 0.05 s), running and leading."""
    config = LeaderElection(
        "op",
        namespace="ops",
        identity="me",
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=0.05,
    )
    elector = LeaderElector(api, config)
    run = asyncio.create_task(elector.run())
    assert await asyncio.wait_for(elector.wait_leading(), 5) == 1
    return elector, run


async def test_an_elector_creates_renews_and_releases_the_lease_over_http(
    server: LeaseServer, api: ApiClient
) -> None:
    elector, run = await _leading_over_http(api, lease_duration=2.1, renew_deadline=1.5)
    await asyncio.wait_for(server.requests(3), 5)  # GET (404), POST, then a renewal
    assert await elector.release()
    await asyncio.wait_for(run, 5)
    methods = [(s.method, s.path) for s in server.seen]
    assert methods[:3] == [("GET", PATH), ("POST", COLLECTION), ("PUT", PATH)]
    assert methods[-1] == ("PUT", PATH)
    created, renewed, released = server.seen[1].body, server.seen[2].body, server.seen[-1].body
    spec = created["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (
        "me",
        3,  # 2.1 s rounded up
        0,
    )
    assert MICRO_TIME.match(spec["acquireTime"])
    assert spec["renewTime"] == spec["acquireTime"]
    assert renewed["metadata"]["resourceVersion"] == "1"
    assert renewed["spec"]["acquireTime"] == spec["acquireTime"]
    assert MICRO_TIME.match(renewed["spec"]["renewTime"])
    assert renewed["spec"]["renewTime"] >= spec["renewTime"]
    assert released["spec"]["holderIdentity"] == ""
    assert released["spec"]["leaseDurationSeconds"] == 1
    assert released["spec"]["leaseTransitions"] == 0
    assert server.leases["op"]["spec"]["holderIdentity"] == ""


async def test_an_elector_s_requests_give_up_at_its_renew_deadline_even_in_a_long_release(
    server: LeaseServer, api: ApiClient
) -> None:
    """The elector's client times each request out at the renew deadline: a release given
    a whole minute still gives up on a PUT the server never answers once the renew
    deadline has passed (its longer budget is for retries after conflicts)."""
    elector, run = await _leading_over_http(api, lease_duration=0.8, renew_deadline=0.3)
    answer = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        await answer.wait()
        return _status(500, "InternalError", "too late")

    server.script += [stall] * 100  # from now on the server answers nothing
    try:
        # 0.3 s by the request's own timeout; a client without one would wait the minute.
        assert not await asyncio.wait_for(elector.release(timeout=60.0), 10)
    finally:
        answer.set()
    await asyncio.wait_for(run, 5)
    assert server.seen[-1].method == "PUT"
    assert server.seen[-1].body["spec"]["holderIdentity"] == ""
