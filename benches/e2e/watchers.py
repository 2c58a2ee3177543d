"""Watch consumers for the ConfigMap benchmark, each run as its own process by the driver.

- ``fastctl``: `fastctl.watcher` through `fastctl.reflector` into a `fastctl.Store`
  (what a fastctl Controller does with its primary resource).
- ``typed``: kubernetes-asyncio's ``Watch().stream(CoreV1Api.list_namespaced_config_map)``,
  each event's typed ``V1ConfigMap`` kept in a dict by name (the same cache, typed).

Both watch the same namespace from "now": the server first sends every existing ConfigMap
(the fastctl watcher asks for the streaming list, ``sendInitialEvents``; a watch without a
resourceVersion gets the same objects as ADDED events), then the live changes. Phase 0 is
those `--initial` objects, phase 1 the `--updates` MODIFIED events of the driver's burst.
At the end of each phase the consumer prints one JSON line: event count, first and last
arrival, its CPU time and RSS; phase 1 adds each event's arrival time keyed by
``name/round`` (the ``round`` value the driver wrote), for the delivery lag.

``memory``: not a consumer but a tracemalloc measurement of the caches themselves (see
`measure_memory`), run separately because tracing slows everything it watches.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from typing import Any

from common import emit, proc_memory

CM_API_VERSION = "v1"


class Phases:
    """Counts events into phases and reports each phase when it is complete."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.phase = 0
        self.count = 0
        self.first = 0.0
        self.cpu_at_start = time.process_time()
        self.arrivals: dict[str, float] = {}

    def event(self, key: str | None = None) -> bool:
        """Count one event of the current phase; True when all phases are complete."""
        now = time.monotonic()
        if self.count == 0:
            self.first = now
        self.count += 1
        if key is not None and self.phase > 0:
            self.arrivals.setdefault(key, now)
        if self.count >= self.sizes[self.phase]:
            cpu = time.process_time()
            emit(
                {
                    "phase": self.phase,
                    "events": self.count,
                    "t_first": self.first,
                    "t_last": now,
                    "cpu_seconds": cpu - self.cpu_at_start,
                    "rss_bytes": proc_memory()["VmRSS"],
                    "arrivals": self.arrivals if self.phase > 0 else None,
                }
            )
            self.phase += 1
            self.count = 0
            self.cpu_at_start = cpu
            self.arrivals = {}
        return self.phase >= len(self.sizes)


async def consume_fastctl(kubeconfig: str, namespace: str, phases: Phases) -> None:
    from fastctl import Resource
    from fastctl.kube._client import load_client
    from fastctl.kube._store import Store, reflector
    from fastctl.kube._watcher import EventKind, watcher

    client = await load_client(kubeconfig)
    store = Store()
    emit({"ready": time.monotonic(), "rss_bytes": proc_memory()["VmRSS"]})
    phases.cpu_at_start = time.process_time()
    events = reflector(
        store, watcher(client, Resource(CM_API_VERSION, "ConfigMap"), namespace=namespace)
    )
    async for event in events:
        if event.kind is EventKind.INIT_APPLY:
            done = phases.event()
        elif event.kind is EventKind.APPLY:
            obj = event.obj
            key = f"{obj['metadata']['name']}/{(obj.get('data') or {}).get('round')}"
            done = phases.event(key)
        else:
            continue
        if done:
            break
    emit({"cached": len(store)})
    await client.close()


async def consume_typed(kubeconfig: str, namespace: str, phases: Phases) -> None:
    import aiohttp
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio import config, watch

    api_client = await config.new_client_from_config(config_file=kubeconfig)
    v1 = k8s.CoreV1Api(api_client)
    cache: dict[str, Any] = {}
    emit({"ready": time.monotonic(), "rss_bytes": proc_memory()["VmRSS"]})
    phases.cpu_at_start = time.process_time()
    stream = watch.Watch().stream(
        v1.list_namespaced_config_map,
        namespace,
        allow_watch_bookmarks=True,
        timeout_seconds=3600,
        _request_timeout=aiohttp.ClientTimeout(sock_read=90),
    )
    async with stream:
        async for event in stream:
            kind = event["type"]
            if kind not in ("ADDED", "MODIFIED"):
                continue
            cm = event["object"]
            cache[cm.metadata.name] = cm
            if kind == "ADDED":
                done = phases.event()
            else:
                done = phases.event(f"{cm.metadata.name}/{(cm.data or {}).get('round')}")
            if done:
                break
    emit({"cached": len(cache)})
    await api_client.close()


async def measure_memory(kubeconfig: str, namespace: str) -> None:
    """Bytes per cached object, by tracemalloc: a Store filled by fastctl's watcher (as the
    Controller keeps it, and with ``strip_managed_fields``), typed V1ConfigMaps from
    kubernetes-asyncio's list, and the size of the objects' JSON."""
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio import config

    from fastctl import Resource
    from fastctl.kube._client import load_client
    from fastctl.kube._http import request
    from fastctl.kube._store import Store, reflector
    from fastctl.kube._watcher import EventKind, WatchConfig, watcher

    client = await load_client(kubeconfig)
    resource = await Resource(CM_API_VERSION, "ConfigMap").resolve(client)
    async with await request(client, "GET", resource.collection_path(namespace)) as resp:
        body = await resp.read()
    api_client = await config.new_client_from_config(config_file=kubeconfig)
    v1 = k8s.CoreV1Api(api_client)
    # One warm-up round of each path, so that lazily created module state is not counted.
    await v1.list_namespaced_config_map(namespace, limit=1)
    result: dict[str, Any] = {"list_json_bytes": len(body)}
    tracemalloc.start()

    async def fill_store(strip: bool) -> Store:
        store = Store()
        stripped = WatchConfig(strip_managed_fields=strip)
        source = watcher(client, resource, namespace=namespace, config=stripped)
        events = reflector(store, source)
        async for event in events:
            if event.kind is EventKind.INIT_DONE:
                break
        # Close both generators now: left to the loop's finaliser, they would keep the store
        # (and its objects) alive into the next measurement.
        await events.aclose()  # type: ignore[attr-defined]  # async generators
        await source.aclose()  # type: ignore[attr-defined]
        return store

    async def traced() -> int:
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    for strip in (False, True):
        base = await traced()
        store = await fill_store(strip)
        key = "fastctl_store_stripped" if strip else "fastctl_store"
        result[key] = {"objects": len(store), "bytes": await traced() - base}
        del store
    base = await traced()
    listed = await v1.list_namespaced_config_map(namespace)
    typed = {cm.metadata.name: cm for cm in listed.items}
    del listed
    result["typed_models"] = {"objects": len(typed), "bytes": await traced() - base}
    del typed
    tracemalloc.stop()
    emit({"memory": result})
    await api_client.close()
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("fastctl", "typed", "memory"))
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--initial", type=int, default=0)
    parser.add_argument("--updates", type=int, default=0)
    args = parser.parse_args()
    if args.mode == "memory":
        asyncio.run(measure_memory(args.kubeconfig, args.namespace))
        return
    phases = Phases([args.initial, args.updates])
    consume = consume_fastctl if args.mode == "fastctl" else consume_typed
    asyncio.run(consume(args.kubeconfig, args.namespace, phases))


if __name__ == "__main__":
    main()
