"""The RBAC rules `fastctl.deploy` derives are sufficient and minimal, on the real server.

The local control plane authorizes with RBAC and signs service account tokens. Each test
creates the demo operator's ServiceAccount and the Role and RoleBinding that
``fastctl manifests`` writes for it, mints a token for the ServiceAccount (TokenRequest),
and runs the operator under that token, with leader election, through a Widget's life:
created (finalizer, ConfigMap, status, Event), changed (a repeated Event), deleted (cleanup).

Every run meets a conflict on the finalizer's path (`conflicts`): just before the
operator's first JSON patch that adds its finalizer, another writer adds its own, so the
patch's ``test`` fails (422) and the operator reads the Widget again (the ``get`` of the
primary) and retries.

- With the whole Role it meets no 403, and the (group, resource, verb) of the requests it
  sent are exactly the ones the Role grants: no rule is unused.
- With any one verb of any one rule removed, SubjectAccessReview denies exactly that verb,
  and the operator, run again, receives a 403 for a request needing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.demo import widgets
from fastctl.deploy import DeployOptions, derive
from fastctl.deploy._manifests import rbac_objects
from fastctl.deploy._operator import describe, resolve_resources
from fastctl.kube._transport import Pool
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.manager import Manager
from fastctl.testing import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

NAME = "widgets"
Grant = tuple[str, str, str]  # (API group, resource[/subresource], verb)


async def derived_rbac(namespace: str) -> list[dict[str, Any]]:
    """The ServiceAccount's Role and RoleBinding as ``fastctl manifests`` derives them."""
    offline = ApiClient(Configuration(host=""))
    try:
        operator = describe(widgets.make_controller(offline, namespace=namespace), widgets)
        resolved = await resolve_resources(operator)
    finally:
        await offline.close()
    permissions = derive(operator.controllers, resolved, lease_namespace=namespace)
    options = DeployOptions(
        "fastctl.demo.widgets:make_controller", NAME, "unused", namespace, namespace
    )
    return rbac_objects(options, permissions)


def grants_of(role: dict[str, Any]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def without(role: dict[str, Any], grant: Grant) -> dict[str, Any]:
    """`role` less one verb of one resource."""
    group, resource, verb = grant
    rules = []
    for rule in role["rules"]:
        if rule["apiGroups"] == [group] and rule["resources"] == [resource]:
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
        if rule["verbs"]:
            rules.append(rule)
    return {**role, "rules": rules}


def grant_of(method: str, path: str, params: dict[str, Any]) -> Grant | None:
    """The (group, resource, verb) RBAC checks for a request; ``None`` for discovery."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return None
    resource = "/".join([rest[0], *rest[2:3]])
    one = len(rest) > 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        watch = str(params.get("watch", "")).lower() in ("1", "true")
        verb = "watch" if watch else "get" if one else "list"
    return group, resource, verb


FORBIDDEN = re.compile(r'cannot (\w+) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)')
"""The authorizer's message in a 403's Status: the verb, resource and group it refused."""


@dataclass
class Sent:
    grant: Grant
    status: int
    method: str
    path: str


@pytest.fixture
def sent() -> Iterator[tuple[set[str], list[Sent]]]:
    """Every request this process sends with one of the bearer tokens put in the set, on
    either transport (object calls on the lean one, `fastctl.kube._transport`; watches on
    aiohttp's session)."""
    tokens: set[str] = set()
    log: list[Sent] = []

    async def note(
        method: str, path: str, params: Any, headers: Any, status: int, read: Any
    ) -> None:
        if (headers or {}).get("authorization", "").removeprefix("Bearer ") not in tokens:
            return
        grant = grant_of(method, path, dict(params or {}))
        if status == 403:  # the server names what it refused
            refused = FORBIDDEN.search((await read()).decode(errors="replace"))
            grant = None if refused is None else (refused[3], refused[2], refused[1])
        elif method == "PATCH" and status == 201 and grant is not None:
            # A server-side apply that created the object was authorized as a create too.
            log.append(Sent((grant[0], grant[1], "create"), 201, method, path))
        if grant is not None:
            log.append(Sent(grant, status, method, path))

    original = aiohttp.ClientSession._request
    lean = Pool.request

    async def recording(self: aiohttp.ClientSession, method: str, url: Any, **kw: Any) -> Any:
        response = await original(self, method, url, **kw)
        path, status = urlsplit(str(url)).path, response.status
        await note(method, path, kw.get("params"), kw.get("headers"), status, response.read)
        return response

    async def lean_recording(
        self: Pool, method: str, path: str, params: Any, headers: Any, *rest: Any
    ) -> Any:
        answer, head_at = await lean(self, method, path, params, headers, *rest)
        await note(method, path, params, headers, answer.status, answer.read)
        return answer, head_at

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aiohttp.ClientSession, "_request", recording)
        mp.setattr(Pool, "request", lean_recording)
        yield tokens, log


HOLD = "test.fastctl.dev/hold"
"""The other writer's finalizer, added while the operator is about to add its own."""


@pytest.fixture(autouse=True)
def conflicts(
    control_plane: ControlPlane, sent: tuple[set[str], list[Sent]]
) -> Iterator[list[str]]:
    """Before the operator's first JSON patch of a Widget's finalizers, the admin adds
    `HOLD` to them: the patch's ``test`` of the list then fails and the operator must read
    the Widget again. Yields the paths where that happened."""
    tokens, _ = sent
    done: list[str] = []

    async def interfere(method: str, path: str, headers: Any, body: Any) -> None:
        auth = (headers or {}).get("authorization", "")
        if (
            not done
            and method == "PATCH"
            and auth.removeprefix("Bearer ") in tokens
            and isinstance(body, bytes)
            and b'"path":"/metadata/finalizers' in body
        ):
            hold = {"metadata": {"finalizers": [HOLD]}}
            status, answer = await asyncio.to_thread(
                control_plane.api_request,
                "PATCH",
                path,
                hold,
                content_type="application/merge-patch+json",
            )
            assert status == 200, answer
            done.append(path)

    recording = aiohttp.ClientSession._request
    lean = Pool.request

    async def interfering(self: aiohttp.ClientSession, method: str, url: Any, **kw: Any) -> Any:
        await interfere(method, urlsplit(str(url)).path, kw.get("headers"), kw.get("data"))
        return await recording(self, method, url, **kw)

    async def lean_interfering(
        self: Pool, method: str, path: str, params: Any, headers: Any, body: Any, *rest: Any
    ) -> Any:
        await interfere(method, path, headers, body)
        return await lean(self, method, path, params, headers, body, *rest)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aiohttp.ClientSession, "_request", interfering)
        mp.setattr(Pool, "request", lean_interfering)
        yield done


async def admin(cp: ControlPlane, method: str, path: str, body: Any = None) -> Any:
    status, answer = await asyncio.to_thread(cp.api_request, method, path, body)
    if status >= 300 and not (method == "GET" and status == 404):
        raise AssertionError(f"{method} {path}: HTTP {status}: {answer}")
    return answer if status < 300 else None


async def install(cp: ControlPlane, namespace: str, role: dict[str, Any], binding: Any) -> str:
    """The ServiceAccount, `role` and its binding; returns a token for the ServiceAccount
    once the authorizer allows all that `role` grants."""
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME}}
    await admin(cp, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    await admin(cp, "POST", f"{rbac}/roles", role)
    await admin(cp, "POST", f"{rbac}/rolebindings", binding)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    minted = await admin(
        cp, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{NAME}/token", request
    )
    await all_allowed(cp, namespace, grants_of(role))
    return str(minted["status"]["token"])


async def allowed(cp: ControlPlane, namespace: str, grant: Grant) -> bool:
    """SubjectAccessReview: may the ServiceAccount do `grant` in `namespace`?"""
    group, resource, verb = grant
    plural, _, sub = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{NAME}",
            "resourceAttributes": {
                "namespace": namespace,
                "group": group,
                "resource": plural,
                "subresource": sub,
                "verb": verb,
            },
        },
    }
    answer = await admin(cp, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


async def all_allowed(cp: ControlPlane, namespace: str, grants: set[Grant]) -> None:
    """Wait until SubjectAccessReview allows every one of `grants` (the authorizer's cache
    has the Role), so that the operator's first requests meet the Role."""
    for grant in grants:

        async def check(grant: Grant = grant) -> bool:
            return await allowed(cp, namespace, grant)

        await wait_for(check, f"{grant} allowed")


async def wait_for(check: Callable[[], Any], what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def operator(
    cp: ControlPlane, namespace: str, token: str, *, streaming: bool = False
) -> AsyncIterator[None]:
    """The demo operator, as the ServiceAccount, with leader election on a Lease. Without
    `streaming` its watches start with a paginated list (what a server without streaming
    lists gets, and the only way the ``list`` verb is used); with it, a streaming list
    (a watch with ``sendInitialEvents``), as this server allows."""
    cfg = Configuration(host=cp.server, api_key={"BearerToken": token})
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    cfg.ssl_ca_cert = str(cp.ca_file)
    async with ApiClient(cfg) as api:
        election = LeaderElection(
            NAME, namespace=namespace, lease_duration=3.0, renew_deadline=2.0, retry_period=0.2
        )
        manager = Manager(api, leader_election=election, metrics_port=None, probe_port=None)
        ctl = widgets.make_controller(api, namespace=namespace)
        ctl.watch_config = replace(ctl.watch_config, streaming_list=streaming)
        manager.add(ctl)
        task = asyncio.create_task(manager.run())
        try:
            yield
        finally:
            manager.shutdown()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)


class Widget:
    """Drives one Widget through its life as the admin, step by step; each step waits for
    the operator to have done its part, or for `stop()` (the 403 a test waits for)."""

    def __init__(self, cp: ControlPlane, namespace: str, stop: Callable[[], bool]) -> None:
        self.cp, self.stop = cp, stop
        self.path = f"/apis/{widgets.WIDGET.api_version}/namespaces/{namespace}/widgets/w"
        self.cm = f"/api/v1/namespaces/{namespace}/configmaps/w-rendered"
        self.collection = self.path.rpartition("/")[0]
        self.namespace = namespace

    async def _until(self, check: Callable[[], Any], what: str) -> None:
        async def done() -> bool:
            return self.stop() or bool(await check())

        await wait_for(done, what)

    async def _ready(self, generation: int) -> bool:
        obj = await admin(self.cp, "GET", self.path)
        status = (obj or {}).get("status") or {}
        return status.get("observedGeneration") == generation

    async def _events(self, count: int) -> bool:
        path = f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events"
        items = (await admin(self.cp, "GET", path))["items"]
        return sum(((e.get("series") or {}).get("count") or 1) for e in items) >= count

    async def live(self) -> None:
        body = widgets.widget("w", self.namespace, {"greeting": "hi {name}"})
        await admin(self.cp, "POST", self.collection, body)
        await self._until(lambda: admin(self.cp, "GET", self.cm), "the ConfigMap")
        await self._until(lambda: self._ready(1), "the status")
        await self._until(lambda: self._events(1), "the Event")
        if self.stop():
            return
        change = [{"op": "replace", "path": "/spec/data/greeting", "value": "hello"}]
        status, answer = await asyncio.to_thread(
            self.cp.api_request,
            "PATCH",
            self.path,
            change,
            content_type="application/json-patch+json",
        )
        assert status == 200, answer
        await self._until(lambda: self._ready(2), "the status of generation 2")
        await self._until(lambda: self._events(2), "the repeated Event")
        if self.stop():
            return
        await admin(self.cp, "DELETE", self.path)

        async def released() -> bool:
            obj = await admin(self.cp, "GET", self.path)
            return obj is None or widgets.FINALIZER not in obj["metadata"].get("finalizers", [])

        await self._until(released, "the finalizer's cleanup")
        if self.stop():
            return
        # The other writer lets go too (a merge patch drops HOLD if `conflicts` added it).
        status, answer = await asyncio.to_thread(
            self.cp.api_request,
            "PATCH",
            self.path,
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
        assert status in (200, 404), answer

        async def gone() -> bool:
            return await admin(self.cp, "GET", self.path) is None

        await self._until(gone, "the Widget's deletion")


@pytest.fixture(autouse=True)
async def widget_crd(client: ApiClient) -> None:
    await widgets.install_crd(client)


@pytest.mark.parametrize("streaming", [False, True], ids=["paginated", "streaming"])
async def test_the_derived_role_is_sufficient_and_every_rule_is_used(
    control_plane: ControlPlane,
    namespace: str,
    sent: tuple[set[str], list[Sent]],
    conflicts: list[str],
    streaming: bool,
) -> None:
    tokens, log = sent
    role, binding = await derived_rbac(namespace)
    granted = grants_of(role)
    tokens.add(token := await install(control_plane, namespace, role, binding))
    async with operator(control_plane, namespace, token, streaming=streaming):
        await Widget(control_plane, namespace, lambda: any(s.status == 403 for s in log)).live()
        await asyncio.sleep(0.5)  # a renewal of the Lease (retry period 0.2 s)
    forbidden = [s for s in log if s.status == 403]
    assert not forbidden, forbidden
    used = {s.grant for s in log}
    assert conflicts, "no conflict was forced on the finalizer's path"
    refused_patches = [s for s in log if s.status == 422 and s.path in conflicts]
    assert refused_patches, "the finalizer's patch did not meet the conflict"
    if streaming:  # no list request: the watches list by streaming
        granted = {g for g in granted if g[2] != "list"}
    assert used == granted, (
        f"granted, never used: {sorted(granted - used)}; used, not granted: "
        f"{sorted(used - granted)}"
    )


ROLE_GRANTS = sorted(
    [
        ("", "configmaps", "create"),
        ("", "configmaps", "delete"),
        ("", "configmaps", "list"),
        ("", "configmaps", "patch"),
        ("", "configmaps", "watch"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "update"),
        ("demo.fastctl.dev", "widgets", "get"),
        ("demo.fastctl.dev", "widgets", "list"),
        ("demo.fastctl.dev", "widgets", "patch"),
        ("demo.fastctl.dev", "widgets", "watch"),
        ("demo.fastctl.dev", "widgets/status", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
    ]
)
"""What the derivation must give the demo operator (also checked against the derivation).
The ``get`` of widgets is used only when the finalizer's patch meets a concurrent change of
the finalizers: `conflicts` makes every run meet one."""


async def test_the_removal_cases_are_the_derived_rules(namespace: str) -> None:
    role, _ = await derived_rbac(namespace)
    assert sorted(grants_of(role)) == ROLE_GRANTS


@pytest.mark.parametrize("removed", ROLE_GRANTS, ids=lambda g: f"{g[1]}-{g[2]}")
async def test_without_any_one_rule_the_operator_is_forbidden(
    control_plane: ControlPlane,
    namespace: str,
    sent: tuple[set[str], list[Sent]],
    removed: Grant,
) -> None:
    tokens, log = sent
    role, binding = await derived_rbac(namespace)
    smaller = without(role, removed)
    tokens.add(token := await install(control_plane, namespace, smaller, binding))
    assert not await allowed(control_plane, namespace, removed)

    def hit() -> bool:
        return any(s.status == 403 and s.grant == removed for s in log)

    async with operator(control_plane, namespace, token):
        await Widget(control_plane, namespace, hit).live()
        if removed[1] == "leases":
            await wait_for(lambda: asyncio.sleep(0, hit()), f"a 403 for {removed}", 10)
    assert hit(), f"no 403 for {removed}; sent: {sorted({(s.grant, s.status) for s in log})}"
    others = {s.grant for s in log if s.status == 403} - {removed}
    assert not others, f"403s for rules still granted: {others}"
