"""A test operator for sharded subprocess runs (``fastctl run .../sharded.py:make
--shard-group NAME``).

Every reconcile of a ConfigMap is recorded by `fastctl.demo._record` (a JSON line at its
start and one at its end: uid, resourceVersion, pid, monotonic time) to ``$RECORD_FILE``,
one file per process; ``$RECONCILE_SECONDS`` is how long each reconcile works.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Resource
from fastctl.demo._record import recorded

WORK = float(os.environ.get("RECONCILE_SECONDS", "0.05"))


async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
    await asyncio.sleep(WORK)


def make(client: ApiClient, *, namespace: str | None = None, concurrency: int = 16) -> Controller:
    return Controller(
        client,
        Resource("v1", "ConfigMap"),
        recorded(reconcile, os.environ["RECORD_FILE"]),
        namespace=namespace,
        concurrency=concurrency,
        name="sharded",
    )
