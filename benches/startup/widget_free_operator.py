"""The smallest operator `fastctl run` can start, for `run.py` beside it: one Controller of
ConfigMaps whose reconcile prints when it is first called (the parent reads that line)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Resource

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)

_said = False


async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
    global _said
    if not _said:
        _said = True
        print(f"first-reconcile {time.monotonic()}", flush=True)


def make(client: ApiClient, namespace: str | None = None) -> Controller:
    return Controller(client, CONFIGMAP, reconcile, namespace=namespace, name="startup")
