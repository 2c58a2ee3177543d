"""fastctl without Kubernetes: the applier reconciling 2,000 in-memory objects.

Run it with ``.venv/bin/python examples/quickstart.py``. Each object is triggered several
times while it is queued or running; the output shows the triggers collapsing into one
queue slot per object and the reconciles running in parallel, never two of one object.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import fastctl
from fastctl import Action, ObjectRef, Trigger

OBJECTS = 2_000
TRIGGERS = 10_000


async def main() -> None:
    refs = [ObjectRef(f"widget-{i}", "default") for i in range(OBJECTS)]
    store = {ref: {"metadata": {"name": ref.name}, "generation": 1} for ref in refs}
    running: set[str] = set()
    peak = 0
    done = asyncio.Event()
    results = 0

    async def reconcile(obj: dict[str, object], ctx: None) -> Action | None:
        nonlocal peak
        name = str(obj["metadata"]["name"])  # type: ignore[index]
        assert name not in running, "two reconciles of one object at once"
        running.add(name)
        peak = max(peak, len(running))
        await asyncio.sleep(random.uniform(0.0005, 0.003))  # pretend to call the API
        running.discard(name)
        return None

    async def triggers() -> AsyncIterator[ObjectRef | Trigger]:
        for ref in refs:  # an initial list: low priority
            yield Trigger(ref, priority=-100, reason="initial list")
        for _ in range(TRIGGERS):  # live changes, many to the same objects
            yield random.choice(refs)
            if random.random() < 0.01:
                await asyncio.sleep(0)
        await done.wait()

    started = time.perf_counter()
    stream = fastctl.applier(reconcile, None, None, store, triggers(), concurrency=64)
    async for _ in stream:
        results += 1
        if results >= OBJECTS and not running and not done.is_set():
            done.set()
    elapsed = time.perf_counter() - started
    print(f"{OBJECTS} objects, {OBJECTS + TRIGGERS} triggers -> {results} reconciles")
    print(f"peak parallel reconciles: {peak} (limit 64), never two of one object")
    print(f"took {elapsed:.2f} s ({results / elapsed:,.0f} reconciles/s)")


if __name__ == "__main__":
    asyncio.run(main())
