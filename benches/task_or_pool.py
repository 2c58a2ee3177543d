"""A task per item, or a pool of workers that each take the next item themselves: the CPU
per item on asyncio's loop and on uvloop, for items that suspend once (as a reconcile
awaiting its request does). What a worker pool could save the applier, which starts a task
per reconcile and is woken when it ends (docs/benchmarks.md)::

    .venv/bin/python benches/task_or_pool.py [ITEMS] [CONCURRENCY]
"""

from __future__ import annotations

import asyncio
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any


async def _work(item: int) -> None:
    await asyncio.sleep(0)  # one suspension


async def task_per_item(items: int, concurrency: int) -> None:
    """The applier's shape: a driver starts a task per item up to `concurrency` and sleeps
    on a future that an ending task wakes."""
    loop = asyncio.get_running_loop()
    queue = collections.deque(range(items))
    running = 0
    wake: asyncio.Future[None] | None = None

    def ended(task: asyncio.Task[None]) -> None:
        nonlocal running
        running -= 1
        if wake is not None and not wake.done():
            wake.set_result(None)

    while queue or running:
        while queue and running < concurrency:
            running += 1
            loop.create_task(_work(queue.popleft())).add_done_callback(ended)
        wake = loop.create_future()
        await wake


async def pool(items: int, concurrency: int) -> None:
    """`concurrency` workers, each taking the next item when it is done with one."""
    queue = collections.deque(range(items))

    async def worker() -> None:
        while queue:
            await _work(queue.popleft())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def _per_item(
    run: Callable[[int, int], Coroutine[Any, Any, None]],
    factory: Callable[[], asyncio.AbstractEventLoop],
    items: int,
    concurrency: int,
) -> float:
    with asyncio.Runner(loop_factory=factory) as runner:
        start = time.process_time()
        runner.run(run(items, concurrency))
        return (time.process_time() - start) / items * 1e6


def main() -> None:
    import uvloop

    items = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.DefaultEventLoopPolicy().new_event_loop,
        "uvloop": uvloop.new_event_loop,
    }
    for name, factory in loops.items():
        a: list[float] = []
        b: list[float] = []
        for _ in range(5):  # alternating
            a.append(_per_item(task_per_item, factory, items, concurrency))
            b.append(_per_item(pool, factory, items, concurrency))
        print(
            json.dumps(
                {
                    "loop": name,
                    "task_per_item_us": round(statistics.median(a), 2),
                    "pool_us": round(statistics.median(b), 2),
                }
            )
        )


if __name__ == "__main__":
    main()
