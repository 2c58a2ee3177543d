"""Two builds of the extension side by side on the scheduler-core workloads, in alternating
rounds (so the machine's load hits both alike): what a change to the Rust core did to the
plain, no-groups paths.

Run (CPU time per item, medians of 15 rounds of 10,000 items, and the median of the
adjacent rounds' ratios)::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/compare_builds.py \\
        OLD/_core.abi3.so NEW/_core.abi3.so
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from test_bench_scheduler import BATCH as ITEMS
from test_bench_scheduler import cycle_runner, keys, load_scheduler, merge_runner

ROUNDS = 15
WARMUP = 3


def batched(cls: Any, size: int = 100_000, batch: int = 100) -> Callable[[], None]:
    """add_many + pop_many + done, in batches, `size` keys queued."""
    s = cls()
    pool = keys(2 * size)
    s.add_many(pool[:size])
    state = {"i": size}

    def run() -> None:
        i = state["i"]
        for j in range(i, i + ITEMS, batch):
            s.add_many([pool[k % (2 * size)] for k in range(j, j + batch)])
            for key in s.pop_many(batch):
                s.done(key)
        state["i"] = i + ITEMS

    return run


CASES: list[tuple[str, Callable[[Any], Callable[[], None]]]] = [
    ("cycle, 1k keys", lambda cls: cycle_runner(cls, 1_000)),
    ("cycle, 100k keys", lambda cls: cycle_runner(cls, 100_000)),
    ("cycle, 1M keys", lambda cls: cycle_runner(cls, 1_000_000)),
    ("merge-path add, scattered, 100k", lambda cls: merge_runner(cls, "random")),
    ("batched cycle, 100 per batch, 100k", batched),
]


def main(old_path: str, new_path: str) -> None:
    old_cls, new_cls = load_scheduler(old_path), load_scheduler(new_path)
    for name, make in CASES:
        old, new = make(old_cls), make(new_cls)
        for _ in range(WARMUP):
            old()
            new()
        times: tuple[list[float], list[float]] = ([], [])
        gc.collect()
        gc.disable()
        try:
            for _ in range(ROUNDS):
                for run, out in ((old, times[0]), (new, times[1])):
                    start = time.process_time()
                    run()
                    out.append((time.process_time() - start) / ITEMS)
        finally:
            gc.enable()
        ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
        print(
            f"{name}: old {statistics.median(times[0]) * 1e9:.0f} ns, "
            f"new {statistics.median(times[1]) * 1e9:.0f} ns per item, new/old {ratio:.2f}",
            flush=True,
        )
        del old, new
        gc.collect()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare_builds.py OLD/_core.abi3.so NEW/_core.abi3.so")
    main(sys.argv[1], sys.argv[2])
