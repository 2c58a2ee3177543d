"""A test operator for subprocess runs (``fastctl run tests/operators/recording.py:make``).

Every reconcile of a ConfigMap appends ``S <identity> <key> <time>`` when it starts and
``E <identity> <key> <time>`` when it ends to the file ``$RECORD_FILE``, so a test can check
on the record which process reconciled what, and when (wall-clock time, shared by the
processes). ``$RECONCILE_SECONDS`` is how long each reconcile works; ``$REQUEUE_AFTER``,
if set, keeps every object busy with periodic requeues.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Action, Controller, Resource

IDENTITY = os.environ.get("RECORD_IDENTITY", str(os.getpid()))
RECORD = os.environ["RECORD_FILE"]
WORK = float(os.environ.get("RECONCILE_SECONDS", "0"))
REQUEUE = os.environ.get("REQUEUE_AFTER")


def _write(kind: str, key: str) -> None:
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(f"{kind} {IDENTITY} {key} {time.time():.6f}\n")


async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    _write("S", key)
    try:
        if WORK:
            await asyncio.sleep(WORK)
    finally:
        _write("E", key)
    return Action.requeue(float(REQUEUE)) if REQUEUE else None


def make(client: ApiClient, *, namespace: str | None = None, concurrency: int = 8) -> Controller:
    return Controller(
        client,
        Resource("v1", "ConfigMap"),
        reconcile,
        namespace=namespace,
        concurrency=concurrency,
        name="recording",
    )
