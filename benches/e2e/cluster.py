"""Driver-side helpers that talk to the API server: a fresh control plane with an admin
client, bulk creates and patches, and the `Observer` that tells when objects are handled.

The driver uses fastctl's own raw client functions (orjson bodies, no typed models) to write
objects and to observe them, for every framework alike: they are the cheapest way to load
the API server and cost the operators under test nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from common import log, proc_cpu_seconds, run_bounded
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._client import load_client
from fastctl.kube._objects import create, patch
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._watcher import EventKind, watcher
from fastctl.testing.control_plane import ControlPlane

CONFIGMAP = Resource("v1", "ConfigMap")
NAMESPACE = Resource("v1", "Namespace")
WRITE_CONCURRENCY = 64
"""In-flight requests of the driver's bursts (creates, updates): enough to keep the API
server saturated on 2 cores."""


@dataclass
class Cluster:
    """A running control plane, its admin client and the benchmark namespace."""

    cp: ControlPlane
    client: ApiClient
    namespace: str

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time so far of etcd, kube-apiserver and this driver process."""
        out = {name: proc_cpu_seconds(pid) for name, pid in self.cp.pids.items()}
        out["driver"] = proc_cpu_seconds("self")
        return out

    def kopf_args(self) -> list[str]:
        """What a kopf child needs to log in (kopf does not read our kubeconfig loader)."""
        cp = self.cp
        return [
            f"--server={cp.server}",
            f"--ca={cp.ca_file}",
            f"--cert={cp.admin_cert_file}",
            f"--key={cp.admin_key_file}",
        ]


@contextlib.asynccontextmanager
async def fresh_cluster(namespace: str = "bench") -> AsyncIterator[Cluster]:
    """A new etcd + kube-apiserver (nothing left over from another scenario) with
    `namespace` created."""
    started = time.monotonic()
    async with ControlPlane() as cp:
        client = await load_client(str(cp.kubeconfig))
        try:
            await create(client, NAMESPACE, {"metadata": {"name": namespace}})
            log(f"control plane up in {time.monotonic() - started:.1f} s ({cp.server})")
            yield Cluster(cp, client, namespace)
        finally:
            await client.close()


def configmap(name: str, namespace: str, payload: int) -> dict[str, Any]:
    """A ConfigMap with one `payload`-byte value (none for 0)."""
    data = {"payload": "x" * payload} if payload else {}
    return {"metadata": {"name": name, "namespace": namespace}, "data": data}


async def create_many(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    objects: list[dict[str, Any]],
    concurrency: int = WRITE_CONCURRENCY,
) -> list[float]:
    """POST every object, `concurrency` at a time; the time each was acknowledged."""
    res = await resource.resolve(client) if isinstance(resource, Resource) else resource

    async def one(i: int) -> None:
        await create(client, res, objects[i])

    return await run_bounded(len(objects), concurrency, one)


async def patch_many(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    names: list[str],
    namespace: str,
    body: dict[str, Any],
    concurrency: int = WRITE_CONCURRENCY,
) -> list[float]:
    """Merge-patch `body` into every named object; the time each was acknowledged."""
    res = await resource.resolve(client) if isinstance(resource, Resource) else resource

    async def one(i: int) -> None:
        await patch(client, res, names[i], body, namespace=namespace)

    return await run_bounded(len(names), concurrency, one)


@dataclass
class Observer:
    """Watches the Widgets and records when each one's status first reports a generation:
    the framework-neutral meaning of "handled" (the operator's status patch has landed)."""

    client: ApiClient
    resource: Resource
    namespace: str
    expected: int
    target: int = 1
    handled: dict[str, float] = field(default_factory=dict)
    listed: asyncio.Event = field(default_factory=asyncio.Event)
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def expect_generation(self, target: int) -> None:
        """From now on, an object counts as handled when ``observedGeneration >= target``."""
        self.target = target
        self.handled = {}
        self._done.clear()

    async def wait(self, timeout: float) -> bool:
        """True once every expected object is handled; False on timeout."""
        try:
            await asyncio.wait_for(self._done.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        async for event in watcher(self.client, self.resource, namespace=self.namespace):
            if event.kind is EventKind.INIT_DONE:
                self.listed.set()
                continue
            if event.kind is EventKind.INIT or event.kind is EventKind.DELETE:
                continue
            obj = event.obj
            observed = (obj.get("status") or {}).get("observedGeneration")
            if isinstance(observed, int) and observed >= self.target:
                name = obj["metadata"]["name"]
                if name not in self.handled:
                    self.handled[name] = time.monotonic()
                    if len(self.handled) >= self.expected:
                        self._done.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
