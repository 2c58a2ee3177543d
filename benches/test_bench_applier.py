"""Applier benchmarks: no-op reconcile throughput beside a bare asyncio baseline, trigger-to-start
latency behind a backlog and beside a blocked key, and memory per queued key.

Run: ``.venv/bin/python -m pytest benches/test_bench_applier.py --benchmark-only``
(add ``--benchmark-json=out.json`` to keep the numbers). Latency and memory are reported
through ``benchmark.extra_info`` and printed, since they are distributions, not timings of a
callable.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

import fastctl
from fastctl import ObjectRef, Trigger

ITEMS = 20_000


async def _noop(obj: Any, ctx: Any) -> None:
    return None


async def _bare_asyncio(items: int, concurrency: int) -> None:
    """The floor: one task created and awaited per item, `concurrency` at a time."""

    async def work() -> None:
        return None

    for start in range(0, items, concurrency):
        batch = min(concurrency, items - start)
        await asyncio.gather(*[asyncio.create_task(work()) for _ in range(batch)])


async def _applier_noop(refs: list[ObjectRef], store: Mapping[ObjectRef, Any], c: int) -> None:
    stop = asyncio.Event()

    async def triggers() -> AsyncIterator[ObjectRef]:
        for ref in refs:
            yield ref
        await stop.wait()

    seen = 0
    async for _ in fastctl.applier(_noop, None, None, store, triggers(), concurrency=c):
        seen += 1
        if seen == len(refs):
            stop.set()


@pytest.fixture(scope="module")
def objects() -> tuple[list[ObjectRef], dict[ObjectRef, Any]]:
    refs = [ObjectRef(f"obj-{i}", "bench") for i in range(ITEMS)]
    return refs, {ref: {"metadata": {"name": ref.name}} for ref in refs}


@pytest.mark.parametrize("concurrency", [1, 64, 1024])
def test_throughput_bare_asyncio(benchmark: Any, concurrency: int) -> None:
    benchmark.group = f"no-op throughput, concurrency {concurrency}"
    benchmark.extra_info["items"] = ITEMS
    benchmark.pedantic(
        lambda: asyncio.run(_bare_asyncio(ITEMS, concurrency)), rounds=5, warmup_rounds=1
    )


@pytest.mark.parametrize("concurrency", [1, 64, 1024])
def test_throughput_applier(
    benchmark: Any, concurrency: int, objects: tuple[list[ObjectRef], dict[ObjectRef, Any]]
) -> None:
    refs, store = objects
    benchmark.group = f"no-op throughput, concurrency {concurrency}"
    benchmark.extra_info["items"] = ITEMS
    benchmark.pedantic(
        lambda: asyncio.run(_applier_noop(refs, store, concurrency)), rounds=5, warmup_rounds=1
    )


async def _applier_noop_channel(
    refs: list[ObjectRef], store: Mapping[ObjectRef, Any], c: int
) -> None:
    """`_applier_noop` fed as a `Controller`'s watches feed it: through its `Channel`, one
    put per trigger, from a producer task."""
    from fastctl._channel import Channel

    channel: Channel[ObjectRef] = Channel(maxsize=1024)

    async def produce() -> None:
        for ref in refs:
            await channel.put(ref)

    producer = asyncio.create_task(produce())
    seen = 0
    async for _ in fastctl.applier(_noop, None, None, store, channel, concurrency=c):
        seen += 1
        if seen == len(refs):
            channel.close()
    await producer


@pytest.mark.parametrize("concurrency", [1, 64, 1024])
def test_throughput_applier_channel(
    benchmark: Any, concurrency: int, objects: tuple[list[ObjectRef], dict[ObjectRef, Any]]
) -> None:
    refs, store = objects
    benchmark.group = f"no-op throughput, concurrency {concurrency}"
    benchmark.extra_info["items"] = ITEMS
    benchmark.pedantic(
        lambda: asyncio.run(_applier_noop_channel(refs, store, concurrency)),
        rounds=5,
        warmup_rounds=1,
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50_ms": statistics.median(samples) * 1e3,
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3,
        "samples": len(samples),
    }


async def _latency_behind_backlog(backlog: int, probes: int) -> dict[str, float]:
    """A backlog of initial-list triggers (priority -100) being worked through at concurrency
    64; live triggers (priority 0) arrive every 2 ms: how long until each starts?"""
    old = [ObjectRef(f"old-{i}", "bench") for i in range(backlog)]
    live = [ObjectRef(f"live-{i}", "bench") for i in range(probes)]
    store = {ref: {"metadata": {"name": ref.name}} for ref in [*old, *live]}
    sent: dict[str, float] = {}
    latencies: list[float] = []
    finished = asyncio.Event()

    async def reconcile(obj: Any, ctx: Any) -> None:
        name = obj["metadata"]["name"]
        if name in sent:
            latencies.append(time.perf_counter() - sent[name])
            if len(latencies) == probes:
                finished.set()
        await asyncio.sleep(0.0005)  # a little work, so the backlog lasts

    async def triggers() -> AsyncIterator[Trigger | ObjectRef]:
        for ref in old:
            yield Trigger(ref, priority=-100)
        for ref in live:
            await asyncio.sleep(0.002)
            sent[ref.name] = time.perf_counter()
            yield ref
        await finished.wait()

    async for _ in fastctl.applier(reconcile, None, None, store, triggers(), concurrency=64):
        pass
    return _percentiles(latencies)


async def _latency_beside_blocked_key(probes: int) -> dict[str, float]:
    """Concurrency 4, one key blocked for the whole run and re-triggered constantly: how
    long until fresh triggers of other keys start?"""
    blocked = ObjectRef("blocked", "bench")
    live = [ObjectRef(f"live-{i}", "bench") for i in range(probes)]
    store = {ref: {"metadata": {"name": ref.name}} for ref in [blocked, *live]}
    sent: dict[str, float] = {}
    latencies: list[float] = []
    finished = asyncio.Event()

    async def reconcile(obj: Any, ctx: Any) -> None:
        name = obj["metadata"]["name"]
        if name == "blocked":
            await finished.wait()
            return
        latencies.append(time.perf_counter() - sent[name])
        if len(latencies) == probes:
            finished.set()
        await asyncio.sleep(0.001)

    async def triggers() -> AsyncIterator[ObjectRef]:
        yield blocked
        for ref in live:
            yield blocked
            await asyncio.sleep(0.0005)
            sent[ref.name] = time.perf_counter()
            yield ref
        await finished.wait()

    async for _ in fastctl.applier(reconcile, None, None, store, triggers(), concurrency=4):
        pass
    return _percentiles(latencies)


def test_latency_behind_100k_backlog(benchmark: Any) -> None:
    benchmark.group = "trigger-to-start latency"
    result: dict[str, float] = {}

    def run() -> None:
        result.update(asyncio.run(_latency_behind_backlog(100_000, 500)))

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(f"\nbehind a 100k backlog: {result}")
    assert result["samples"] == 500


def test_latency_beside_blocked_key(benchmark: Any) -> None:
    benchmark.group = "trigger-to-start latency"
    result: dict[str, float] = {}

    def run() -> None:
        result.update(asyncio.run(_latency_beside_blocked_key(2_000)))

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(f"\nbeside a blocked key: {result}")
    assert result["samples"] == 2_000


_MEMORY_PROBE = r"""
import asyncio, json, resource, sys
from collections.abc import Mapping
import fastctl
from fastctl import ObjectRef

N = int(sys.argv[1])

class NotReady(Mapping):
    # An empty store that never becomes ready: every trigger stays queued.
    is_ready = False
    async def wait_ready(self):
        await asyncio.Event().wait()
    def __getitem__(self, key): raise KeyError(key)
    def __iter__(self): return iter(())
    def __len__(self): return 0

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

async def main():
    sched = fastctl.Scheduler()
    done = asyncio.Event()
    async def triggers():
        for i in range(N):
            yield ObjectRef(f"object-{i:07d}", "namespace-a")
        done.set()
        await asyncio.Event().wait()
    async def watch():
        await done.wait()
        while len(sched) < N:
            await asyncio.sleep(0.01)
        after = rss()
        print(json.dumps({"keys": len(sched), "bytes": after - before}))
        task.cancel()
    async def reconcile(obj, ctx):
        return None
    before = rss()
    it = fastctl.applier(reconcile, None, None, NotReady(), triggers(), scheduler=sched)
    async def consume():
        async for _ in it:
            pass
    task = asyncio.ensure_future(consume())
    await asyncio.gather(watch(), return_exceptions=True)
    try:
        await task
    except asyncio.CancelledError:
        pass

asyncio.run(main())
"""


def test_memory_per_queued_key_1m(benchmark: Any) -> None:
    benchmark.group = "memory per queued key"
    keys = 1_000_000
    out: dict[str, Any] = {}

    def run() -> None:
        proc = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, str(keys)],
            capture_output=True,
            text=True,
            check=True,
        )
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))

    benchmark.pedantic(run, rounds=1, iterations=1)
    per_key = out["bytes"] / out["keys"]
    benchmark.extra_info["bytes_per_key"] = per_key
    print(f"\n{out['keys']} queued keys: {per_key:.0f} bytes per key (RSS delta)")
    assert out["keys"] == keys
