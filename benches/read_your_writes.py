"""CPU per reconcile that writes, with the read-your-writes guard on and off, in one run.

A Controller over `OBJECTS` ConfigMaps, with no API server: a fake watcher lists them and
then streams `EVENTS` changes (round robin); each reconcile writes its object through
`fastctl.kube.patch`, answered at once by a fake server whose echo goes back into the
watch, so every write is followed, fenced, and caught up by its echo, as on a healthy
server. The guard's cost is the write observer per reconcile, the following of each
written object, the fence and the check at the next start. Rounds alternate on and off;
the medians are printed as one JSON line.

    .venv/bin/python benches/read_your_writes.py [OBJECTS] [EVENTS] [ROUNDS]
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import Controller, ReadYourWrites, Resource
from fastctl.kube import _http, patch
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent
from fastctl.runtime.controller import _environment

RESOURCE = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)


def _obj(i: int, version: int) -> dict[str, Any]:
    meta = {"name": f"cm-{i}", "namespace": "bench", "uid": f"uid-{i}"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "resourceVersion": str(version)},
        "data": {"v": str(version)},
    }


class _Answer:
    status = 200

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self) -> bytes:
        return self._body

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _measure(objects: int, events: int, guard: bool) -> float:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    version = [10_000_000]
    writes = [0]

    async def feed() -> AsyncIterator[Any]:
        while True:
            yield await queue.get()

    async def request(client: Any, method: str, path: str, **kw: Any) -> _Answer:
        name = path.rsplit("/", 1)[1]
        version[0] += 1
        obj = _obj(int(name[3:]), version[0])
        obj["data"]["written"] = "yes"
        queue.put_nowait(ObjectEvent(EventKind.APPLY, obj))  # the echo
        writes[0] += 1
        return _Answer(orjson.dumps(obj))

    _environment.watcher = lambda *a, **k: feed()  # type: ignore[attr-defined]
    _http.request = request  # type: ignore[assignment]
    client = ApiClient(Configuration(host="http://bench.invalid"))

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        if obj["data"].get("written") != "yes":
            name = obj["metadata"]["name"]
            await patch(client, RESOURCE, name, {"data": {"written": "yes"}}, namespace="bench")

    options = ReadYourWrites(enabled=guard)
    ctl = Controller(client, RESOURCE, reconcile, concurrency=32, read_your_writes=options)
    queue.put_nowait(ListFrame(EventKind.INIT))
    for i in range(objects):
        queue.put_nowait(ObjectEvent(EventKind.INIT_APPLY, _obj(i, i + 1)))
    queue.put_nowait(ListFrame(EventKind.INIT_DONE))
    gc.collect()
    gc.disable()
    start = time.process_time()
    task = asyncio.create_task(ctl.run(handle_signals=False))
    for n in range(events):
        queue.put_nowait(ObjectEvent(EventKind.APPLY, _obj(n % objects, 1_000_000 + n)))
        if n % 64 == 0:
            await asyncio.sleep(0)
    while queue.qsize() or len(ctl.scheduler) or ctl.scheduler.in_flight:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    cpu = time.process_time() - start
    gc.enable()
    ctl.shutdown()
    await task
    await client.close()
    return cpu / max(writes[0], 1) * 1e6


def main() -> None:
    objects = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    on: list[float] = []
    off: list[float] = []
    for _ in range(rounds):
        off.append(asyncio.run(_measure(objects, events, guard=False)))
        on.append(asyncio.run(_measure(objects, events, guard=True)))
    result = {
        "cpu_per_written_reconcile_us_off": round(statistics.median(off), 1),
        "cpu_per_written_reconcile_us_on": round(statistics.median(on), 1),
        "overhead_percent": round((statistics.median(on) / statistics.median(off) - 1) * 100, 1),
        "rounds": rounds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
