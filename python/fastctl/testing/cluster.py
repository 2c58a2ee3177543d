"""`Cluster`: one test, run on a fake cluster or on a real control plane.

The pytest fixture ``cluster`` (`fastctl.testing.pytest_plugin`) runs a test twice: on a
`FakeCluster` (in memory, on virtual time) and on the session's `ControlPlane` (a real
etcd and kube-apiserver, marked ``kube``). The test sees one interface:

```python
def test_a_widget_gets_its_configmap(cluster: fastctl.testing.Cluster) -> None:
    async def main() -> None:
        client = await cluster.client()
        await cluster.install(Widget)
        ...                                   # fastctl.kube calls, Controllers, Managers
    cluster.run(main())
```

`run` runs the coroutine on a `VirtualTimeLoop` for the fake (requeues and backoffs take no
real time) and on an ordinary event loop for the real one (which talks over sockets), and
closes the clients made by `client` when it ends. `namespace` is a namespace made for the
test on either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastctl.testing._virtual_time import run_virtual

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from fastctl.kube._model import CustomResource
    from fastctl.testing.control_plane import ControlPlane
    from fastctl.testing.fake import FakeCluster

__all__ = ["Cluster"]

T = TypeVar("T")

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Cluster:
    """A fake cluster or a real control plane, behind one interface (see the module
    docstring). Exactly one of `fake` and `control_plane` is set."""

    def __init__(
        self,
        namespace: str,
        *,
        fake: FakeCluster | None = None,
        control_plane: ControlPlane | None = None,
    ) -> None:
        if (fake is None) == (control_plane is None):
            raise ValueError("a Cluster is either a fake cluster or a control plane")
        self.namespace = namespace
        self.fake = fake
        self.control_plane = control_plane
        self._clients: list[ApiClient] = []

    @property
    def kind(self) -> Literal["fake", "control-plane"]:
        return "fake" if self.fake is not None else "control-plane"

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run `main` to its end: on virtual time for the fake, on a fresh event loop for the
        control plane; the clients it made are closed after it."""

        async def closing() -> T:
            try:
                return await main
            finally:
                clients, self._clients = self._clients, []
                for client in clients:
                    await client.close()

        if self.fake is not None:
            return run_virtual(closing())
        return asyncio.run(closing())

    async def client(self) -> ApiClient:
        """A new client of this cluster (closed when `run` ends)."""
        if self.fake is not None:
            client = self.fake.client()
        else:
            from fastctl.kube._client import load_client

            assert self.control_plane is not None
            client = await load_client(self.control_plane.kubeconfig)
        self._clients.append(client)
        return client

    async def install(self, *crds: type[CustomResource] | Mapping[str, Any]) -> None:
        """Install CRDs (objects, or models' generated CRDs) and wait until they are
        established (at once on the fake)."""
        if self.fake is not None:
            self.fake.install(*crds)
            return
        from fastctl.kube._http import ApiError, request_json

        client = await self.client()
        for crd in crds:
            doc = dict(crd) if isinstance(crd, Mapping) else crd.crd()
            name = doc["metadata"]["name"]
            try:
                await request_json(client, "POST", CRD_PATH, body=_dumps(doc))
            except ApiError as exc:
                if exc.status != 409:
                    raise
            for _ in range(1200):  # a minute at most, at the real server's own pace
                if _established(await request_json(client, "GET", f"{CRD_PATH}/{name}")):
                    break
                await asyncio.sleep(0.05)
            else:
                raise TimeoutError(f"CRD {name} not established within a minute")


def _dumps(doc: Mapping[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(doc)


def _established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
