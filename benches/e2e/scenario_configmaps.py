"""5,000 ConfigMaps through fastctl, beside kubernetes-asyncio's typed Watch.

On one fresh control plane:

1. **Create → reconciled.** A fastctl Controller (its own process, no-op reconcile) is
   running with an empty cache; the driver creates `count` ConfigMaps of `payload` bytes
   each as fast as the API server takes them. Time from the start of the create burst until
   every ConfigMap has been reconciled, and each object's lag from its create's
   acknowledgement to its first reconcile.
2. **Watch throughput.** Two consumer processes watch the namespace: fastctl's watcher into
   a Store, and kubernetes-asyncio's typed ``Watch``. Each first receives the `count`
   existing objects (the initial stream: the server sends them as fast as the client reads,
   so this is the consumer's own ceiling), then the driver updates every object once (a
   live burst both consume side by side: events/s sustained, delivery lag, CPU per event).
3. **Cache memory per object**: tracemalloc of the caches (`watchers.measure_memory`),
   and the RSS growth of the two consumers while they cache the objects.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster import CONFIGMAP, Cluster, configmap, create_many, fresh_cluster, patch_many
from common import Child, child_argv, load_average, log, summary_ms


async def run_configmaps(
    count: int, payload: int, concurrency: int, log_dir: Path
) -> dict[str, Any]:
    async with fresh_cluster() as cluster:
        result: dict[str, Any] = {
            "count": count,
            "payload_bytes": payload,
            "load_before": load_average(),
        }
        result["create_to_reconciled"] = await _create_to_reconciled(
            cluster, count, payload, concurrency, log_dir
        )
        result["watch"] = await _watch_throughput(cluster, count, log_dir)
        result["memory"] = await _cache_memory(cluster, log_dir)
        result["load_after"] = load_average()
        return result


async def _create_to_reconciled(
    cluster: Cluster, count: int, payload: int, concurrency: int, log_dir: Path
) -> dict[str, Any]:
    ns = cluster.namespace
    argv = child_argv(
        "bench_operators.py",
        "cm-record",
        f"--kubeconfig={cluster.cp.kubeconfig}",
        f"--namespace={ns}",
        f"--concurrency={concurrency}",
        f"--expect={count}",
    )
    child = await Child("cm-record", argv, log_dir / "controller-cm-record.log").start()
    try:
        await child.wait_for(lambda m: "ready" in m, 60)
        names = [f"cm-{i:05d}" for i in range(count)]
        objects = [configmap(name, ns, payload) for name in names]
        t0 = time.monotonic()
        acks = await create_many(cluster.client, CONFIGMAP, objects)
        done = await child.wait_for(lambda m: "all_first" in m, 300)
        memory = child.memory()
        cpu = child.cpu_seconds()
    finally:
        await child.stop()
    report = next(m["report"] for m in child.messages if "report" in m)
    first: dict[str, float] = report["first"]
    lags = [first[name] - ack for name, ack in zip(names, acks, strict=True)]
    result = {
        "seconds": done["all_first"] - t0,
        "create_seconds": max(acks) - t0,
        "after_last_create_seconds": done["all_first"] - max(acks),
        "objects_per_second": count / (done["all_first"] - t0),
        "lag_create_ack_to_reconcile": summary_ms(lags),
        "controller_peak_rss_bytes": memory["VmHWM"],
        "controller_cpu_seconds": cpu,
        "concurrency": concurrency,
    }
    log(f"configmaps: create->reconciled {result}")
    return result


async def _watch_throughput(cluster: Cluster, count: int, log_dir: Path) -> dict[str, Any]:
    ns = cluster.namespace
    consumers: dict[str, Child] = {}
    try:
        for mode in ("fastctl", "typed"):
            argv = child_argv(
                "watchers.py",
                mode,
                f"--kubeconfig={cluster.cp.kubeconfig}",
                f"--namespace={ns}",
                f"--initial={count}",
                f"--updates={count}",
            )
            child = await Child(f"watch-{mode}", argv, log_dir / f"watch-{mode}.log").start()
            consumers[mode] = child
            # One at a time through the initial stream: each gets the machine to itself.
            await child.wait_for(lambda m: m.get("phase") == 0, 300)
        names = [f"cm-{i:05d}" for i in range(count)]
        t0 = time.monotonic()
        acks = await patch_many(cluster.client, CONFIGMAP, names, ns, {"data": {"round": "1"}})
        written = max(acks)
        for child in consumers.values():
            await child.wait_for(lambda m: m.get("phase") == 1, 300)
    finally:
        for child in consumers.values():
            await child.stop()
    result: dict[str, Any] = {"updates": count, "update_write_seconds": written - t0}
    for mode, child in consumers.items():
        ready = next(m for m in child.messages if "ready" in m)
        initial = next(m for m in child.messages if m.get("phase") == 0)
        live = next(m for m in child.messages if m.get("phase") == 1)
        arrivals: dict[str, float] = live["arrivals"]
        lags = [
            arrivals[f"{n}/1"] - ack
            for n, ack in zip(names, acks, strict=True)
            if f"{n}/1" in arrivals
        ]
        result[mode] = {
            "initial": {
                "events": initial["events"],
                "seconds": initial["t_last"] - ready["ready"],
                "events_per_second": initial["events"] / (initial["t_last"] - initial["t_first"]),
                "cpu_us_per_event": initial["cpu_seconds"] / initial["events"] * 1e6,
                "rss_growth_bytes_per_object": (initial["rss_bytes"] - ready["rss_bytes"])
                / initial["events"],
            },
            "live": {
                "events": live["events"],
                "events_per_second": live["events"] / (live["t_last"] - live["t_first"]),
                "cpu_us_per_event": live["cpu_seconds"] / live["events"] * 1e6,
                "lag_after_last_write_seconds": live["t_last"] - written,
                "delivery_lag": summary_ms(lags),
            },
            "rss_bytes_at_start": ready["rss_bytes"],
        }
    log(f"configmaps: watch {result}")
    return result


async def _cache_memory(cluster: Cluster, log_dir: Path) -> dict[str, Any]:
    argv = child_argv(
        "watchers.py",
        "memory",
        f"--kubeconfig={cluster.cp.kubeconfig}",
        f"--namespace={cluster.namespace}",
    )
    child = await Child("memory", argv, log_dir / "memory.log").start()
    try:
        message = await child.wait_for(lambda m: "memory" in m, 300)
    finally:
        await child.stop()
    memory: dict[str, Any] = message["memory"]
    objects = memory["fastctl_store"]["objects"]
    memory["json_bytes_per_object"] = memory["list_json_bytes"] / max(objects, 1)
    for key in ("fastctl_store", "fastctl_store_stripped", "typed_models"):
        entry = memory[key]
        entry["bytes_per_object"] = entry["bytes"] / max(entry["objects"], 1)
    log(f"configmaps: memory {memory}")
    return memory
