"""CPU per call on a `fastctl.testing.FakeCluster`, through `fastctl.kube`, on virtual time.

`OBJECTS` ConfigMaps created, read and applied one at a time, then a Controller over them
(a reconcile that patches each object, run until quiet). Prints one JSON line: microseconds
of CPU per create, get and apply, and the controller run's CPU seconds, reconciles and
virtual seconds.

    .venv/bin/python benches/fake_cluster.py [OBJECTS]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Resource
from fastctl.kube import apply, create, get, patch
from fastctl.testing import FakeCluster, run_until_quiet, run_virtual

CM = Resource("v1", "ConfigMap")


def configmap(i: int, value: str) -> dict[str, Any]:
    meta = {"name": f"c{i}", "namespace": "default"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": value}}


async def main(objects: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with FakeCluster() as cluster:
        client = cluster.client()
        start = time.process_time()
        for i in range(objects):
            await create(client, CM, configmap(i, str(i)))
        out["create_us"] = (time.process_time() - start) / objects * 1e6
        start = time.process_time()
        for i in range(objects):
            await get(client, CM, f"c{i}", namespace="default")
        out["get_us"] = (time.process_time() - start) / objects * 1e6
        start = time.process_time()
        for i in range(objects):
            await apply(client, CM, configmap(i, "x"), field_manager="bench")
        out["apply_us"] = (time.process_time() - start) / objects * 1e6
        reconciles = 0

        async def reconcile(obj: dict[str, Any], ctx: ApiClient) -> None:
            nonlocal reconciles
            reconciles += 1
            name = obj["metadata"]["name"]
            await patch(ctx, CM, name, {"data": {"b": "1"}}, namespace="default")

        start = time.process_time()
        await run_until_quiet(Controller(client, CM, reconcile, context=client))
        out["controller_cpu_s"] = time.process_time() - start
        out["reconciles"] = reconciles
        out["virtual_s"] = asyncio.get_running_loop().time()
    return out


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(json.dumps({k: round(v, 2) for k, v in run_virtual(main(count)).items()}))
