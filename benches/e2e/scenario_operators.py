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
import contextlib
import copy
import shutil
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import compiled_peers
from cluster import Cluster, Observer, create_many, fresh_cluster, patch_many
from common import (
    Child,
    child_argv,
    load_average,
    log,
    request_counts,
    request_delta,
    terminated_watchers,
)

from fastctl.demo.widgets import CRD, WIDGET, install_crd, widget


def bench_crd() -> dict[str, Any]:
    """The demo's Widget CRD with two status fields the bench operators write: ``items``
    (every operator's status patch) and ``kopf`` (kopf's status storages: its progress and
    its diff base, ``status.kopf.last-handled-configuration``). The demo's structural schema
    prunes both; without ``status.kopf`` kopf's diff base never persists, so the echo of its
    own patch looks like a new object to it: the handler runs again and kopf patches once
    more (a no-op the server prunes), two status patches per change."""
    crd = copy.deepcopy(CRD)
    for version in crd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        status["items"] = {"type": "integer"}
        status["kopf"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


PhaseHook = Callable[[str, int], AbstractAsyncContextManager[None]]
"""Wraps each phase: called with the phase's name and the operator's pid (a profiler)."""

SETTLE = 2.0
"""Seconds to wait after the last object is handled before counting requests: follow-up
work (the no-op reconcile of the operator's own status change, kopf's bookkeeping) lands."""


async def run_operator(
    mode: str,
    count: int,
    *,
    concurrency: int,
    timeout: float,
    log_dir: Any,
    phase_hook: PhaseHook | None = None,
) -> dict[str, Any]:
    async with fresh_cluster() as cluster:
        return await _measure(cluster, mode, count, concurrency, timeout, log_dir, phase_hook)


def _no_hook(phase: str, pid: int) -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


async def _measure(
    cluster: Cluster,
    mode: str,
    count: int,
    concurrency: int,
    timeout: float,
    log_dir: Any,
    phase_hook: PhaseHook | None,
) -> dict[str, Any]:
    hook = phase_hook or _no_hook
    client, ns = cluster.client, cluster.namespace
    await install_crd(client, bench_crd())
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
    # `fastctl@TREE` (an absolute path): the fastctl operator from another source tree (its
    # own package and extension first on the path), to compare a change end to end in one run;
    # any fastctl mode may name one (`fastctl-otlp@TREE`).
    tree_env = None
    if mode.startswith("fastctl") and "@" in mode:
        argv = child_argv("bench_operators.py", mode.split("@", 1)[0], *argv[3:])
        tree_env = {"PYTHONPATH": f"{mode.split('@', 1)[1]}/python"}
    label = mode.replace("/", "_")
    child = Child(f"{label}-{count}", argv, log_dir / f"operator-{label}-{count}.log", env=tree_env)
    m0 = await request_counts(client)
    closed0 = await terminated_watchers(client)
    cpu0 = cluster.cpu_seconds()
    await child.start()
    try:
        # -- initial: every object handled once ---------------------------------------
        async with hook("initial", child.pid):
            result["initial"] = await _phase(observer, timeout, child.started_at)
        finished = result["initial"]["finished"]
        log(f"{mode} x{count}: initial {result['initial']}")
        await asyncio.sleep(SETTLE)
        m1 = await request_counts(client)
        result["initial"]["requests"] = request_delta(m0, m1, None)
        closed1 = await terminated_watchers(client)
        result["initial"]["terminated_watchers"] = closed1 - closed0
        result["initial"]["cpu_seconds"] = child.cpu_seconds()
        cpu1 = cluster.cpu_seconds()
        result["initial"]["others_cpu_seconds"] = _delta(cpu0, cpu1)

        # -- update burst: every object changed once ------------------------------------
        if finished:
            observer.expect_generation(2)
            t2 = time.monotonic()
            async with hook("burst", child.pid):
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
            result["burst"]["terminated_watchers"] = await terminated_watchers(client) - closed1
            result["burst"]["cpu_seconds"] = child.cpu_seconds() - result["initial"]["cpu_seconds"]
            result["burst"]["others_cpu_seconds"] = _delta(cpu1, cluster.cpu_seconds())
        memory = child.memory()
        result["peak_rss_bytes"] = memory["VmHWM"]
        result["rss_bytes"] = memory["VmRSS"]
        result["cpu_seconds"] = child.cpu_seconds()
    finally:
        result["exit_code"] = await child.stop()
        await observer.stop()
        # The API server's log goes with the operator's (why a watch ended, a slow client).
        with contextlib.suppress(OSError):
            shutil.copy(cluster.cp.apiserver_log, log_dir / f"apiserver-{label}-{count}.log")
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
