"""One Manager, two clusters: a controller per cluster on the same kind with the same
options reconciles only its own cluster's objects, each on its own watch and cache.

The second cluster is the session's second local control plane (the one the sharding
tests use). Before watch sharing was keyed by the client, the second cluster's controller
subscribed to the first cluster's watch and reconciled its objects instead of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Manager, Resource
from fastctl.kube._objects import create
from fastctl.testing import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

CM = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
LABEL = "fastctl.dev/cluster-test"


async def test_a_controller_per_cluster_reconciles_only_its_own_cluster(
    client: ApiClient,
    sharded_client: ApiClient,
    sharded_control_plane: ControlPlane,
    namespace: str,
) -> None:
    status, body = sharded_control_plane.api_request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}
    )
    assert status in (201, 409), body
    seen: dict[str, set[str]] = {"here": set(), "there": set()}

    def reconciler(name: str) -> Any:
        async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
            seen[name].add(obj["metadata"]["name"])

        return reconcile

    for api, prefix in ((client, "here"), (sharded_client, "there")):
        for i in range(3):
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{prefix}-{i}",
                    "namespace": namespace,
                    "labels": {LABEL: "1"},
                },
            }
            await create(api, CM, cm)
    options: dict[str, Any] = {"namespace": namespace, "label_selector": LABEL}
    manager = Manager(client, metrics_port=None, probe_port=None)
    manager.add(Controller(client, CM, reconciler("here"), name="here", **options))
    manager.add(Controller(sharded_client, CM, reconciler("there"), name="there", **options))
    run = asyncio.create_task(manager.run())
    try:
        async with asyncio.timeout(60):
            while len(seen["here"]) < 3 or len(seen["there"]) < 3:
                assert not run.done(), run
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # time for a wrong reconcile to show up, if there is one
    finally:
        manager.shutdown()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(run, 30)
    assert seen == {
        "here": {"here-0", "here-1", "here-2"},
        "there": {"there-0", "there-1", "there-2"},
    }
    here, there = manager.controllers
    assert here.store is not there.store
