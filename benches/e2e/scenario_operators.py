"""fastctl, fastctl with the pure-Python scheduler, and kopf, on the same Widgets.

One scenario = one operator on one object count, on a fresh control plane:

1. Create `count` Widgets (the operator is not running yet).
2. Start the operator's process; **initial**: time from its start until the status of every
   Widget reports generation 1 (every object handled once).
3. **Update burst**: the driver changes every Widget's spec once (generation 2), as fast as
   the API server takes it; time from the start of the burst until every status reports
   generation 2.
4. Peak RSS (``VmHWM``) and CPU time of the operator's process, from ``/proc``; API requests
   from the API server's ``apiserver_request_total``, less the driver's own.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import compiled_peers
from cluster import Cluster, Observer, create_many, fresh_cluster, patch_many
from common import Child, child_argv, load_average, log, request_counts, request_delta

from fastctl.demo.widgets import WIDGET, install_crd, widget

SETTLE = 2.0
"""Seconds to wait after the last object is handled before counting requests: follow-up
work (the no-op reconcile of the operator's own status change, kopf's bookkeeping) lands."""


async def run_operator(
    mode: str, count: int, *, concurrency: int, timeout: float, log_dir: Any
) -> dict[str, Any]:
    async with fresh_cluster() as cluster:
        return await _measure(cluster, mode, count, concurrency, timeout, log_dir)


async def _measure(
    cluster: Cluster, mode: str, count: int, concurrency: int, timeout: float, log_dir: Any
) -> dict[str, Any]:
    client, ns = cluster.client, cluster.namespace
    await install_crd(client)
    names = [f"w-{i:05d}" for i in range(count)]
    started = time.monotonic()
    await create_many(client, WIDGET, [widget(n, ns, {"a": "1", "b": "2"}) for n in names])
    log(f"{mode} x{count}: {count} Widgets created in {time.monotonic() - started:.1f} s")

    observer = Observer(client, WIDGET, ns, expected=count)
    observer.start()
    await asyncio.wait_for(observer.listed.wait(), 60)
    result: dict[str, Any] = {
        "mode": mode,
        "count": count,
        "concurrency": concurrency,
        "load_before": load_average(),
    }
    argv = compiled_peers.argv(
        mode,
        kubeconfig=str(cluster.cp.kubeconfig),
        namespace=ns,
        concurrency=concurrency,
        login=cluster.kopf_args(),
    ) or child_argv(
        "bench_operators.py",
        mode,
        f"--kubeconfig={cluster.cp.kubeconfig}",
        f"--namespace={ns}",
        f"--concurrency={concurrency}",
        *(cluster.kopf_args() if mode.startswith("kopf") else []),
    )
    child = Child(f"{mode}-{count}", argv, log_dir / f"operator-{mode}-{count}.log")
    m0 = await request_counts(client)
    cpu0 = cluster.cpu_seconds()
    await child.start()
    try:
        # -- initial: every object handled once ---------------------------------------
        result["initial"] = await _phase(observer, timeout, child.started_at)
        finished = result["initial"]["finished"]
        log(f"{mode} x{count}: initial {result['initial']}")
        await asyncio.sleep(SETTLE)
        m1 = await request_counts(client)
        result["initial"]["requests"] = request_delta(m0, m1, None)
        result["initial"]["cpu_seconds"] = child.cpu_seconds()
        cpu1 = cluster.cpu_seconds()
        result["initial"]["others_cpu_seconds"] = _delta(cpu0, cpu1)

        # -- update burst: every object changed once ------------------------------------
        if finished:
            observer.expect_generation(2)
            t2 = time.monotonic()
            acks = await patch_many(
                client, WIDGET, names, ns, {"spec": {"data": {"a": "1", "b": "2", "c": "3"}}}
            )
            written = max(acks)
            burst = result["burst"] = await _phase(observer, timeout, t2)
            burst["write_seconds"] = written - t2
            burst["lag_after_writes_seconds"] = burst["seconds"] - burst["write_seconds"]
            log(f"{mode} x{count}: burst {result['burst']}")
            await asyncio.sleep(SETTLE)
            m2 = await request_counts(client)
            driver = Counter({("PATCH", "widgets", ""): count})
            result["burst"]["requests"] = request_delta(m1, m2, driver)
            result["burst"]["cpu_seconds"] = child.cpu_seconds() - result["initial"]["cpu_seconds"]
            result["burst"]["others_cpu_seconds"] = _delta(cpu1, cluster.cpu_seconds())
        memory = child.memory()
        result["peak_rss_bytes"] = memory["VmHWM"]
        result["rss_bytes"] = memory["VmRSS"]
        result["cpu_seconds"] = child.cpu_seconds()
    finally:
        result["exit_code"] = await child.stop()
        await observer.stop()
    result["load_after"] = load_average()
    return result


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


async def _phase(observer: Observer, timeout: float, start: float) -> dict[str, Any]:
    """Wait until every object is handled (or `timeout`): when, counted from `start`."""
    finished = await observer.wait(timeout)
    end = time.monotonic()
    handled = sorted(observer.handled.values())
    return {
        "finished": finished,
        "handled": len(handled),
        "seconds": (handled[-1] if finished else end) - start,
        "first_seconds": handled[0] - start if handled else None,
    }
