"""Behind a backlog of 10,000 initial-list objects, a live change starts
reconciling within 100 ms (p50), on the real API server.

`backlog` ConfigMaps exist before the controller starts. The controller (its own process)
reconciles each with one real request (a GET of the object), `concurrency` at a time, so
working through the initial list takes many seconds. From its first reconcile until it has
reconciled every object once, the driver changes a random ConfigMap every `interval`
seconds (an annotation with a sequence number, one change at a time); the controller
records when a reconcile first sees each sequence number. Latency = that reconcile's start
minus the moment the change was acknowledged by the API server (and, stricter, minus the
moment the driver sent it). Only changes made while the backlog was still being worked
through count.

Run once with the Rust scheduler and once with the pure-Python model, on the same objects.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from pathlib import Path
from typing import Any

from cluster import CONFIGMAP, Cluster, configmap, create_many, fresh_cluster
from common import Child, child_argv, load_average, log, summary_ms

from fastctl.kube._objects import patch

SEQ_ANNOTATION = "e2e.fastctl.dev/seq"


async def run_latency(
    backlog: int,
    concurrency: int,
    interval: float,
    max_changes: int,
    schedulers: tuple[str, ...],
    log_dir: Path,
) -> dict[str, Any]:
    async with fresh_cluster() as cluster:
        names = [f"cm-{i:05d}" for i in range(backlog)]
        started = time.monotonic()
        await create_many(
            cluster.client, CONFIGMAP, [configmap(n, cluster.namespace, 0) for n in names]
        )
        log(f"latency: {backlog} ConfigMaps created in {time.monotonic() - started:.1f} s")
        result: dict[str, Any] = {
            "backlog": backlog,
            "concurrency": concurrency,
            "interval_seconds": interval,
        }
        for scheduler in schedulers:
            result[scheduler] = await _one(
                cluster, names, scheduler, concurrency, interval, max_changes, log_dir
            )
        return result


async def _one(
    cluster: Cluster,
    names: list[str],
    scheduler: str,
    concurrency: int,
    interval: float,
    max_changes: int,
    log_dir: Path,
) -> dict[str, Any]:
    ns = cluster.namespace
    resource = await CONFIGMAP.resolve(cluster.client)
    argv = child_argv(
        "bench_operators.py",
        "cm-latency",
        f"--kubeconfig={cluster.cp.kubeconfig}",
        f"--namespace={ns}",
        f"--concurrency={concurrency}",
        f"--expect={len(names)}",
        *(["--model"] if scheduler == "model" else []),
    )
    load_before = load_average()
    child = await Child(f"latency-{scheduler}", argv, log_dir / f"latency-{scheduler}.log").start()
    changes: list[tuple[str, float, float]] = []  # (seq, sent, acknowledged)
    rng = random.Random(7)
    try:
        first = await child.wait_for(lambda m: "first_reconcile" in m, 120)
        next_at = time.monotonic()
        while len(changes) < max_changes and not any("all_first" in m for m in child.messages):
            seq = f"{scheduler}-{len(changes)}"
            body = {"metadata": {"annotations": {SEQ_ANNOTATION: seq}}}
            sent = time.monotonic()
            await patch(cluster.client, resource, rng.choice(names), body, namespace=ns)
            changes.append((seq, sent, time.monotonic()))
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        done = await child.wait_for(lambda m: "all_first" in m, 600)
        await asyncio.sleep(0.5)
        cpu = child.cpu_seconds()
    finally:
        await child.stop()
    report = next(m["report"] for m in child.messages if "report" in m)
    seen: dict[str, float] = report["seen"]
    firsts = sorted(report["first"].values())
    drained = done["all_first"]
    from_ack: list[float] = []
    from_send: list[float] = []
    remaining: list[int] = []
    missing = 0
    for seq, sent, acked in changes:
        if sent >= drained:
            continue
        if seq not in seen:
            missing += 1
            continue
        from_ack.append(seen[seq] - acked)
        from_send.append(seen[seq] - sent)
        remaining.append(len(names) - bisect.bisect_left(firsts, sent))
    result = {
        "changes_behind_backlog": len(from_ack),
        "changes_not_seen": missing,
        "latency_from_ack": summary_ms(from_ack),
        "latency_from_send": summary_ms(from_send),
        "backlog_remaining_at_change": {
            "max": max(remaining, default=0),
            "min": min(remaining, default=0),
            "median": sorted(remaining)[len(remaining) // 2] if remaining else 0,
        },
        "drain_seconds": drained - first["first_reconcile"],
        "reconciles": len(report["starts"]),
        "controller_cpu_seconds": cpu,
        "load_before": load_before,
        "samples_from_ack_ms": [round(v * 1e3, 3) for v in from_ack],
        "samples_from_send_ms": [round(v * 1e3, 3) for v in from_send],
        "samples_remaining": remaining,
    }
    log(
        f"latency[{scheduler}]: p50 {result['latency_from_ack']['p50_ms']:.1f} ms from ack, "
        f"{len(from_ack)} changes, drain {result['drain_seconds']:.1f} s"
    )
    return result
