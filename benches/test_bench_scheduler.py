"""Scheduler core benchmarks: the Rust `fastctl.Scheduler` beside the pure-Python model
(`fastctl.testing.model.ModelScheduler`) on the same workloads, plus resident memory per queued key.

Run (results in docs/benchmarks.md, "Scheduler core")::

    .venv/bin/python -m pytest benches/test_bench_scheduler.py --benchmark-only \\
        --benchmark-timer=time.process_time --benchmark-json=/tmp/bench-scheduler.json
    .venv/bin/python benches/test_bench_scheduler.py /tmp/bench-scheduler.json

`time.process_time` (CPU time of this process) keeps the figures meaningful on a shared,
loaded machine, where wall time mostly measures the other processes; the paired test uses it
too.

Each benchmark round runs a batch of operations and `extra_info["items"]` says how many, so
the summary (the second command) reports medians per item and the Rust/model ratio. Memory is
measured in a fresh subprocess per case, as the growth of resident memory (VmRSS) while 1M
keys are queued, and printed and kept in `extra_info`.
"""

from __future__ import annotations

import heapq
import importlib.machinery
import importlib.util
import json
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest

from fastctl import Scheduler
from fastctl.testing.model import ModelScheduler

IMPLS: dict[str, Callable[..., Any]] = {"rust": Scheduler, "model": ModelScheduler}
BATCH = 10_000  # operations per benchmark round


def keys(n: int) -> list[str]:
    """Realistic keys: "namespace/name", 20-30 characters."""
    return [f"namespace-{i % 97:02d}/object-{i:08d}" for i in range(n)]


def rounds_for(impl: str, size: int) -> int:
    if impl == "model":
        return 3 if size >= 1_000_000 else 5
    return 10


@pytest.fixture(params=list(IMPLS))
def impl(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def load_scheduler(path: str) -> Any:
    """The `Scheduler` class of another build of the extension, loaded from `path` beside
    the installed one (to compare two builds in one run)."""
    loader = importlib.machinery.ExtensionFileLoader("fastctl._core", path)
    spec = importlib.util.spec_from_file_location("fastctl._core", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.Scheduler


def cycle_runner(impl: str | Callable[..., Any], size: int) -> Callable[[], None]:
    """The `test_cycle` workload as a callable running BATCH cycles per call, on the
    implementation named `impl` or on the scheduler class `impl`."""
    s = IMPLS[impl]() if isinstance(impl, str) else impl()
    pool = keys(2 * size)
    s.add_many(pool[:size])
    state = {"i": 0}

    def run() -> None:
        add, pop, done = s.add, s.pop, s.done
        i = state["i"]
        for j in range(i, i + BATCH):
            add(pool[(size + j) % (2 * size)])
            done(pop())
        state["i"] = i + BATCH

    return run


@pytest.mark.parametrize("size", [1_000, 100_000, 1_000_000], ids=lambda n: f"{n}keys")
def test_cycle(benchmark: Any, impl: str, size: int) -> None:
    """add + pop + done, one key at a time, with `size` keys queued throughout (a new key is
    added as the oldest is popped and finished). Default clock, as the applier calls it."""
    benchmark.group = f"cycle {size} keys"
    benchmark.extra_info["items"] = BATCH
    run = cycle_runner(impl, size)
    benchmark.pedantic(run, rounds=rounds_for(impl, size), iterations=1, warmup_rounds=1)


MERGE_KEYS = 100_000


def merge_runner(impl: str | Callable[..., Any], order: str) -> Callable[[], None]:
    """The `test_merge_add` workload as a callable running BATCH adds per call (`impl` as
    for `cycle_runner`)."""
    s = IMPLS[impl]() if isinstance(impl, str) else impl()
    pool = keys(MERGE_KEYS)
    s.add_many(pool)
    stride = 1 if order == "sequential" else 7919
    touched = [pool[(j * stride) % MERGE_KEYS] for j in range(MERGE_KEYS)]
    state = {"i": 0}

    def run() -> None:
        add = s.add
        i = state["i"]
        for key in touched[i : i + BATCH]:
            add(key)
        state["i"] = (i + BATCH) % MERGE_KEYS
        assert len(s) == MERGE_KEYS

    return run


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_merge_add(benchmark: Any, impl: str, order: str) -> None:
    """add of a key that is already queued (the de-duplication path), 100k keys queued,
    touched in key order or in a scattered order (which is cache-miss bound)."""
    benchmark.group = f"merge add, {order} (100k queued)"
    benchmark.extra_info["items"] = BATCH
    run = merge_runner(impl, order)
    benchmark.pedantic(run, rounds=rounds_for(impl, MERGE_KEYS), iterations=1, warmup_rounds=1)


def test_delayed_cycle(benchmark: Any, impl: str) -> None:
    """add with a delay + pop + done with explicit times: ~100k keys waiting, and every pop
    first promotes the one that has become due."""
    size = 100_000
    s = IMPLS[impl]()
    pool = keys(2 * size)
    step = 2.0**-10  # dyadic: every time and ready time is exact
    delay = size * step
    for i in range(size):
        s.add(pool[i], after=delay, now=i * step)
    state = {"i": size}

    def run() -> None:
        add, pop, done = s.add, s.pop, s.done
        i = state["i"]
        for j in range(i, i + BATCH):
            now = j * step
            add(pool[j % (2 * size)], after=delay, now=now)
            key = pop(now=now)
            done(key, now=now)
        state["i"] = i + BATCH

    benchmark.group = "delayed add+pop+done (100k waiting)"
    benchmark.extra_info["items"] = BATCH
    benchmark.pedantic(run, rounds=rounds_for(impl, size), iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("batch", [100, 1_000], ids=lambda n: f"batch{n}")
def test_batch_cycle(benchmark: Any, impl: str, batch: int) -> None:
    """add_many + pop_many + done per key, in batches, with 100k keys queued."""
    size = 100_000
    s = IMPLS[impl]()
    run = batch_runner(s, batch, batched_done=False)

    benchmark.group = f"batched cycle, {batch} per batch (100k queued)"
    benchmark.extra_info["items"] = BATCH
    benchmark.pedantic(run, rounds=rounds_for(impl, size), iterations=1, warmup_rounds=1)
    assert len(s) == size


class DictHeapFloor:
    """The cheapest pure-Python loop doing the batched cycle's steps: a dict of queued keys
    (de-duplication), a heap of ``(priority, seq, key)`` (the ready order), a set of keys in
    flight. No delays, no follow-ups, no statistics: a floor, not a scheduler."""

    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.heap: list[tuple[int, int, str]] = []
        self.running: set[str] = set()
        self.seq = 0

    def add_many(self, keys: list[str]) -> None:
        records, heap, seq = self.records, self.heap, self.seq
        for key in keys:
            if key not in records:
                seq += 1
                records[key] = seq
                heapq.heappush(heap, (0, seq, key))
        self.seq = seq

    def pop_many(self, n: int) -> list[str]:
        heap, out = self.heap, list[str]()
        while heap and len(out) < n:
            out.append(heapq.heappop(heap)[2])
        self.running.update(out)
        return out

    def done(self, key: str) -> None:
        self.running.remove(key)
        del self.records[key]


def batch_runner(s: Any, batch: int, batched_done: bool) -> Callable[[], None]:
    """`test_batch_cycle`'s workload on `s`, ending keys one `done` at a time or with one
    `done_many` per batch."""
    size = 100_000
    pool = keys(2 * size)
    s.add_many(pool[:size])
    chunks = [pool[i : i + batch] for i in range(0, 2 * size, batch)]
    state = {"i": size // batch}

    def run() -> None:
        add_many, pop_many, done = s.add_many, s.pop_many, s.done
        i = state["i"]
        for j in range(i, i + BATCH // batch):
            add_many(chunks[j % len(chunks)])
            if batched_done:
                s.done_many(pop_many(batch))
            else:
                for key in pop_many(batch):
                    done(key)
        state["i"] = i + BATCH // batch

    return run


@pytest.mark.parametrize("batch", [100, 1_000], ids=lambda n: f"batch{n}")
def test_paired_batch_floor_ratio(benchmark: Any, batch: int) -> None:
    """The batched cycle (100k queued) of the Rust scheduler, with `done` per key and with
    `done_many`, against `DictHeapFloor`, in alternating rounds: the Rust share of the floor's
    time (lower is better)."""
    runners = {
        "rust": batch_runner(Scheduler(), batch, batched_done=False),
        "rust_done_many": batch_runner(Scheduler(), batch, batched_done=True),
        "floor": batch_runner(DictHeapFloor(), batch, batched_done=False),
    }
    for run in runners.values():
        run()  # warm up
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(9):
        for name, run in runners.items():
            start = time.process_time()
            run()
            times[name].append((time.process_time() - start) / BATCH)
    ns = {name: statistics.median(t) * 1e9 for name, t in times.items()}
    benchmark.group = "paired batched cycle against a dict+heap floor"
    benchmark.extra_info.update(paired_floor=True, **{f"{k}_ns": v for k, v in ns.items()})
    print(
        f"\nbatch {batch}: rust {ns['rust']:.0f} ns ({ns['rust'] / ns['floor']:.3f} of floor), "
        f"done_many {ns['rust_done_many']:.0f} ns ({ns['rust_done_many'] / ns['floor']:.3f}), "
        f"floor {ns['floor']:.0f} ns"
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


@pytest.mark.parametrize("size", [1_000, 100_000, 1_000_000], ids=lambda n: f"{n}keys")
def test_paired_cycle_ratio(benchmark: Any, size: int) -> None:
    """The model/Rust ratio of `test_cycle` measured with alternating rounds (Rust, model,
    Rust, model, ...), so that a change in machine load hits both sides alike."""
    rust, model = cycle_runner("rust", size), cycle_runner("model", size)
    rust(), model()  # warm up
    times: dict[str, list[float]] = {"rust": [], "model": []}
    for _ in range(7):
        for name, run in (("rust", rust), ("model", model)):
            start = time.process_time()
            run()
            times[name].append((time.process_time() - start) / BATCH)
    medians = {name: statistics.median(t) for name, t in times.items()}
    benchmark.group = "paired model/Rust ratio, add+pop+done"
    benchmark.extra_info.update(
        paired=True,
        rust_ns=medians["rust"] * 1e9,
        model_ns=medians["model"] * 1e9,
        ratio=medians["model"] / medians["rust"],
    )
    print(f"\n{size} keys: model/Rust = {medians['model'] / medians['rust']:.1f}x")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import gc, json, sys
    from fastctl import Scheduler
    from fastctl.testing.model import ModelScheduler

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    impl, n, delayed, width = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
    pad = "x" * max(0, width - 28)
    keys = [f"namespace-{i % 97:02d}/object-{pad}{i:08d}" for i in range(n)]
    s = {"rust": Scheduler, "model": ModelScheduler}[impl]()
    gc.collect()
    before = rss()
    for i in range(0, n, 10_000):  # chunks: no large temporary argument lists
        s.add_many(keys[i : i + 10_000], after=60.0 if delayed else 0.0, now=0.0)
    gc.collect()
    after = rss()
    assert len(s) == n
    print(json.dumps({"bytes_per_key": (after - before) / n, "key_chars": len(keys[-1])}))
    """
)


def measure_memory(impl: str, n: int, delayed: bool, width: int = 28) -> dict[str, float]:
    """RSS growth per key of `n` keys of `width` characters (28: the realistic keys of every
    other workload here; wider keys are padded in the middle)."""
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, impl, str(n), "1" if delayed else "0", str(width)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("state", ["ready", "waiting"])
def test_memory_per_key_1m(benchmark: Any, impl: str, state: str) -> None:
    """Resident memory per queued key with 1M keys (the keys' own Python strings excluded:
    they exist before the measurement starts)."""
    result = measure_memory(impl, 1_000_000, delayed=state == "waiting")
    benchmark.group = "memory per key (1M keys)"
    benchmark.extra_info.update(result)
    benchmark.extra_info["memory"] = True
    print(f"\n{impl} {state}: {result['bytes_per_key']:.0f} bytes/key")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    if impl == "rust":
        assert result["bytes_per_key"] <= 200


@pytest.mark.parametrize("width", [50, 70])
@pytest.mark.parametrize("state", ["ready", "waiting"])
def test_memory_per_key_by_key_length(benchmark: Any, state: str, width: int) -> None:
    """As `test_memory_per_key_1m`, Rust only, with longer keys: a text of up to 76 bytes
    lives inside its record, so the figure should barely move with the key's length."""
    result = measure_memory("rust", 1_000_000, delayed=state == "waiting", width=width)
    benchmark.group = "memory per key by key length (1M keys)"
    benchmark.extra_info.update(result)
    benchmark.extra_info["memory"] = True
    print(f"\nrust {state}, {width}-char keys: {result['bytes_per_key']:.0f} bytes/key")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    assert result["key_chars"] == width
    assert result["bytes_per_key"] <= 200


def summarize(path: str) -> str:
    """A markdown table of per-item medians and Rust/model ratios from a --benchmark-json."""
    with open(path) as f:
        data = json.load(f)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    paired = []
    for b in data["benchmarks"]:
        name = b["name"].split("[")[0].removeprefix("test_")
        if b["extra_info"].get("paired_floor"):
            e = b["extra_info"]
            for impl in ("rust", "rust_done_many"):
                paired.append(
                    f"| batched cycle {b['params']['batch']} per batch, {impl} against the "
                    f"dict+heap floor | {e[impl + '_ns']:.0f} ns/item | {e['floor_ns']:.0f} "
                    f"ns/item (floor) | {e[impl + '_ns'] / e['floor_ns']:.2f} of the floor |"
                )
            continue
        if b["extra_info"].get("paired"):
            e = b["extra_info"]
            paired.append(
                f"| cycle {b['params']['size']} keys, alternating rounds | "
                f"{e['rust_ns']:.0f} ns/item | {e['model_ns']:.0f} ns/item | {e['ratio']:.1f}x |"
            )
            continue
        params = {k: v for k, v in b["params"].items() if k != "impl"}
        case = name + "".join(f" {v}" for v in params.values())
        rows.setdefault(case, {})[b["params"].get("impl", "rust")] = b
    lines = [
        "| case | Rust median | model median | model / Rust |",
        "| --- | ---: | ---: | ---: |",
    ]
    for case, by_impl in rows.items():
        cells = []
        values = {}
        for impl in ("rust", "model"):
            b = by_impl.get(impl)
            if b is None:
                cells.append("—")
                continue
            if b["extra_info"].get("memory"):
                values[impl] = b["extra_info"]["bytes_per_key"]
                cells.append(f"{values[impl]:.0f} B/key")
            else:
                per_item = statistics.median(b["stats"]["data"]) / b["extra_info"]["items"]
                values[impl] = per_item
                cells.append(f"{per_item * 1e9:.0f} ns/item")
        ratio = f"{values['model'] / values['rust']:.1f}x" if len(values) == 2 else "—"
        lines.append(f"| {case} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines + paired)


if __name__ == "__main__":
    print(summarize(sys.argv[1]))
