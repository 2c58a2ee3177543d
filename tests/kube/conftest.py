"""Fixtures for the Kubernetes-layer tests against the real local control plane.

`control_plane` and `namespace` come from fastctl's pytest plugin. Here: an admin
`client`, clients for restricted users, a `proxy` (a `FaultProxy` in front of the real
server) with a client that goes through it, the test CRDs, and `Collector`, which runs an
event stream in the background so a test can wait for what it expects with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._objects import create
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.testing import ControlPlane

from .faultproxy import FaultProxy, admin_ssl_context

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
GROUP = "kubelayer.fastctl.dev"


async def make_client(kubeconfig: Path) -> ApiClient:
    cfg = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return ApiClient(cfg)


@pytest.fixture
async def client(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """An admin client (kubeconfig with a ``system:masters`` certificate)."""
    async with await make_client(control_plane.kubeconfig) as api:
        yield api


@pytest.fixture
async def user_client(
    control_plane: ControlPlane,
) -> AsyncIterator[Callable[[str], Awaitable[ApiClient]]]:
    """``await user_client("name")``: a client for a user with no permissions at all."""
    made: list[ApiClient] = []

    async def make(name: str) -> ApiClient:
        api = await make_client(control_plane.user_kubeconfig(name))
        made.append(api)
        return api

    yield make
    for api in made:
        await api.close()


@pytest.fixture
async def proxy(control_plane: ControlPlane) -> AsyncIterator[FaultProxy]:
    context = admin_ssl_context(
        str(control_plane.ca_file),
        str(control_plane.admin_cert_file),
        str(control_plane.admin_key_file),
    )
    fp = FaultProxy(control_plane.server, context)
    await fp.start()
    yield fp
    await fp.close()


@pytest.fixture
async def proxied(proxy: FaultProxy) -> AsyncIterator[ApiClient]:
    """A client whose every request goes through `proxy` (plain HTTP; the proxy is admin)."""
    cfg = Configuration(host=proxy.url)
    async with ApiClient(cfg) as api:
        yield api


# -- CRDs ----------------------------------------------------------------------------------


def _crd(plural: str, kind: str, scope: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def install_crd(cp: ControlPlane, crd: dict[str, Any], timeout: float = 60.0) -> None:
    """Create `crd` (if missing) and wait until it is Established and in discovery."""
    name = crd["metadata"]["name"]
    status, body = cp.api_request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    if status not in (201, 409):
        raise AssertionError(f"creating CRD {name}: HTTP {status}: {body}")
    deadline = time.monotonic() + timeout
    kind = crd["spec"]["names"]["kind"]
    while True:
        _, got = cp.api_request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )
        established = any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        )
        if established:
            status, disc = cp.api_request("GET", f"/apis/{GROUP}/v1")
            if status == 200 and any(r.get("kind") == kind for r in disc.get("resources", [])):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD {name} not established/discoverable in {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> str:
    """Installs Widget (namespaced) and Gadget (cluster-scoped), both with a status
    subresource, in group `GROUP`; returns the group."""
    install_crd(control_plane, _crd("widgets", "Widget", "Namespaced"))
    install_crd(control_plane, _crd("gadgets", "Gadget", "Cluster"))
    return GROUP


# -- helpers -------------------------------------------------------------------------------


async def make_configmap(
    api: ApiClient,
    namespace: str,
    name: str,
    data: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return await create(api, CM, {"metadata": meta, "data": data or {}})


def name_of(event: WatchEvent) -> str | None:
    return event.obj["metadata"]["name"] if isinstance(event, ObjectEvent) else None


class Collector:
    """Runs an event stream in a task and records every event, for waiting with deadlines."""

    def __init__(self, events: AsyncIterable[WatchEvent]) -> None:
        self.events: list[WatchEvent] = []
        self._changed = asyncio.Event()
        self._source = events
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for event in self._source:
            self.events.append(event)
            self._changed.set()

    async def wait_for(
        self, predicate: Callable[[list[WatchEvent]], object], timeout: float = 30.0
    ) -> None:
        """Wait until `predicate(events)` is true; fail (with the events seen) after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate(self.events):
            if self._task.done():
                self._task.result()  # re-raise the stream's error
                raise AssertionError("the event stream ended")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                seen = [(e.kind.name, name_of(e)) for e in self.events[-30:]]
                raise AssertionError(f"timed out after {timeout} s; last events: {seen}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    def count(self, kind: EventKind, name: str | None = None) -> int:
        return sum(
            1 for e in self.events if e.kind is kind and (name is None or name_of(e) == name)
        )

    def names(self, kind: EventKind) -> list[str]:
        return [n for e in self.events if e.kind is kind and (n := name_of(e)) is not None]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def collect() -> AsyncIterator[Callable[[AsyncIterable[WatchEvent]], Collector]]:
    """``collect(events)`` starts a `Collector`; all are stopped after the test."""
    made: list[Collector] = []

    def start(events: AsyncIterable[WatchEvent]) -> Collector:
        c = Collector(events)
        made.append(c)
        return c

    yield start
    for c in made:
        await c.close()


# -- sharding --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sharded_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A second control plane, with the ``ShardedListAndWatch`` feature gate on (the
    session's `control_plane` keeps it off, so the client-side fallback runs there)."""
    from fastctl.testing.binaries import ensure_binaries

    cp = ControlPlane(
        binaries=ensure_binaries(build=False),
        start_timeout=request.config.getoption("control_plane_timeout"),
        feature_gates={"ShardedListAndWatch": True},
    )
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
async def sharded_client(sharded_control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """An admin client of `sharded_control_plane`."""
    async with await make_client(sharded_control_plane.kubeconfig) as api:
        yield api
