"""Scheduler peers: `fastctl.Scheduler` (Rust) and its pure-Python model beside client-go's
workqueue and controller-runtime's priority queue, on the same workloads, in one run.

Run from the repository root (results in docs/benchmarks.md, "Peers: scheduler vs ...")::

    .venv/bin/pip install -r benches/requirements.txt
    .venv/bin/python benches/peers/run_scheduler_peers.py

It builds the Go program in benches/peers/go (cached outside the repository, under
~/.cache/fastctl/peers/, keyed by a hash of its sources and the Go version), runs it, runs
the same workloads here, and writes benches/peers/results/scheduler-peers.{json,md} and
docs/img/peers-*.png. `--quick` is a smoke run on small sizes into a temporary directory.

Workloads (keys are "namespace-NN/object-NNNNNNNN" strings everywhere; every figure is the
median over repetitions, each on a fresh queue, after one warm-up repetition; the Go program
forces a GC before each repetition so that none pays for the previous one's garbage, which
reference counting frees at once here):

- cycle: add N distinct keys, then get (pop) and done each one; wall ns per key, N = 1k,
  100k, 1M.
- merge-sequential / merge-random: with 100k keys queued, add each of them again (the
  de-duplication path), in key order or with a stride of 7919 (cache-miss bound); wall ns
  per add. The Go queues' figure includes the final `Len()`, which applies controller-
  runtime's buffered adds.
- delayed: add 100k keys with delays uniform in [0, 1 s) on the real clock, sleep until
  all are due, get and done each; process CPU ns per key over the whole repetition (the Go
  queues move due keys in background goroutines while the caller sleeps, so wall time
  would leave that work out; fastctl does it inside `pop`).
- contended: W workers drain W x 1000 queued keys, each getting a key, sleeping 1 ms and
  finishing it (W = 10, 100, 1000; the headline case is 1M keys and 1000 workers); wall
  time and keys/s against the ideal of 1 s. Go uses W goroutines. fastctl is driven by W
  asyncio tasks (`await asyncio.sleep(0.001)`) and, separately, by 10 and 100 OS threads
  (`time.sleep(0.001)`, which releases the GIL; `--thread-workers` sets the counts); the
  model is not thread-safe, so it runs the asyncio variant only. Python's per-item cost
  here is the event loop's (or the GIL hand-offs'), not the scheduler's: these rows compare
  what a Python controller can do with what a Go one can, not the queues' locks.

Rows "fastctl" call `add`/`pop`/`done` once per key from Python, so they include the cost
of a Python call into the extension; "fastctl batched" uses `add_many`/`pop_many(1000)`.
The Go queues run without their Prometheus metrics (an unnamed queue, as in their own
benchmarks); a second Go run with metrics on is reported beside them, because
fastctl.Scheduler always keeps its counters and duration histograms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fastctl import Scheduler
from fastctl.testing.model import ModelScheduler

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = Path(__file__).resolve().parent / "go"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
IMG_DIR = ROOT / "docs" / "img"

SIZES = (1_000, 100_000, 1_000_000)
MERGE_N = 100_000
DELAYED_N = 100_000
MAX_DELAY = 1.0
WORKERS = (10, 100, 1000)
# OS threads driving fastctl in the contended case. 1000 threads work, but CPython's GIL
# hand-offs make that case take ~40 s (about 24k keys/s) and flood the machine's run queue.
THREAD_WORKERS = (10, 100)
PER_WORKER = 1000
WORK = 0.001
MERGE_STRIDE = 7919  # a prime that does not divide MERGE_N: a scattered permutation


class Queue(Protocol):
    """What the workloads use of `fastctl.Scheduler` and `ModelScheduler`."""

    def add(self, key: str, *, after: float = ..., priority: int = ...) -> None: ...
    def add_many(self, keys: Sequence[str]) -> None: ...
    def pop(self) -> str | None: ...
    def pop_many(self, max: int) -> list[str]: ...
    def done(self, key: str) -> None: ...
    def __len__(self) -> int: ...


IMPLS: dict[str, Callable[[], Queue]] = {
    "fastctl": Scheduler,
    "fastctl batched": Scheduler,
    "fastctl-model": ModelScheduler,
}


@dataclass
class Sample:
    wall_ns: int
    cpu_ns: int
    phases: dict[str, int] = field(default_factory=dict)


@dataclass
class Case:
    workload: str
    n: int
    reps: int
    metric: str  # what ns_per_item measures: "wall" or "cpu"
    run: Callable[[], Sample]
    params: dict[str, Any] = field(default_factory=dict)
    warmup: bool = True


def make_keys(n: int) -> list[str]:
    return [f"namespace-{i % 97:02d}/object-{i:08d}" for i in range(n)]


def reps_for(n: int, override: int) -> int:
    if override:
        return override
    return 51 if n <= 10_000 else 7 if n <= 100_000 else 5


# --- workloads (one repetition each, on a fresh queue) ---------------------------------------


def add_all(q: Queue, keys: list[str], batched: bool) -> None:
    if batched:
        q.add_many(keys)
    else:
        add = q.add
        for k in keys:
            add(k)


def cycle(q: Queue, keys: list[str], batched: bool) -> Sample:
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    add_all(q, keys, batched)
    t1 = time.perf_counter_ns()
    done = q.done
    if batched:
        pop_many = q.pop_many
        while batch := pop_many(1000):
            for k in batch:
                done(k)
    else:
        pop = q.pop
        for _ in range(len(keys)):
            done(pop())  # type: ignore[arg-type]  # never None: keys are ready
    t2, cpu = time.perf_counter_ns(), time.process_time_ns() - c0
    assert len(q) == 0
    return Sample(t2 - t0, cpu, {"add": t1 - t0, "get_done": t2 - t1})


def merge(q: Queue, keys: list[str], touched: list[str], batched: bool) -> Sample:
    q.add_many(keys)
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    add_all(q, touched, batched)
    t1, cpu = time.perf_counter_ns(), time.process_time_ns() - c0
    assert len(q) == len(keys)
    return Sample(t1 - t0, cpu)


def delayed(q: Queue, keys: list[str], delays: list[float], max_delay: float) -> Sample:
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    add = q.add
    for k, d in zip(keys, delays, strict=True):
        add(k, after=d)
    t1 = time.perf_counter_ns()
    time.sleep(max(0.0, t1 / 1e9 + max_delay + 0.01 - time.perf_counter()))  # all due
    t2 = time.perf_counter_ns()
    pop, done = q.pop, q.done
    for _ in range(len(keys)):
        done(pop())  # type: ignore[arg-type]  # never None: every key is due
    t3, cpu = time.perf_counter_ns(), time.process_time_ns() - c0
    assert len(q) == 0
    return Sample((t1 - t0) + (t3 - t2), cpu, {"add": t1 - t0, "get_done": t3 - t2})


def contended_asyncio(q: Queue, keys: list[str], workers: int) -> Sample:
    q.add_many(keys)

    async def worker() -> None:
        pop, done, sleep = q.pop, q.done, asyncio.sleep
        while (k := pop()) is not None:
            await sleep(WORK)
            done(k)

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(workers)))

    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    asyncio.run(main())
    t1, cpu = time.perf_counter_ns(), time.process_time_ns() - c0
    assert len(q) == 0
    return Sample(t1 - t0, cpu)


def contended_threads(q: Queue, keys: list[str], workers: int) -> Sample:
    q.add_many(keys)
    start = threading.Barrier(workers + 1)

    def worker() -> None:
        pop, done, sleep = q.pop, q.done, time.sleep
        start.wait()
        while (k := pop()) is not None:
            sleep(WORK)
            done(k)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    start.wait()
    for t in threads:
        t.join()
    t1, cpu = time.perf_counter_ns(), time.process_time_ns() - c0
    assert len(q) == 0
    return Sample(t1 - t0, cpu)


def on_fresh(
    new: Callable[[], Queue], fn: Callable[..., Sample], *args: Any
) -> Callable[[], Sample]:
    """One repetition of `fn` on a fresh queue."""
    return lambda: fn(new(), *args)


def python_cases(impl: str, opts: argparse.Namespace) -> list[Case]:
    new = IMPLS[impl]
    batched = impl == "fastctl batched"
    cases: list[Case] = []
    for n in opts.sizes:
        keys = make_keys(n)
        reps = min(reps_for(n, opts.reps), 3) if impl == "fastctl-model" else reps_for(n, opts.reps)
        cases.append(Case("cycle", n, reps, "wall", on_fresh(new, cycle, keys, batched)))
    keys = make_keys(opts.merge_n)
    for order, stride in (("sequential", 1), ("random", MERGE_STRIDE)):
        touched = [keys[(j * stride) % len(keys)] for j in range(len(keys))]
        cases.append(
            Case(
                f"merge-{order}",
                opts.merge_n,
                reps_for(opts.merge_n, opts.reps),
                "wall",
                on_fresh(new, merge, keys, touched, batched),
            )
        )
    if not batched:  # add_many takes one delay for all its keys
        dkeys = make_keys(opts.delayed_n)
        rng = random.Random(7)
        delays = [rng.random() * opts.max_delay for _ in dkeys]
        cases.append(
            Case(
                "delayed",
                opts.delayed_n,
                reps_for(opts.delayed_n, opts.reps),
                "cpu",
                on_fresh(new, delayed, dkeys, delays, opts.max_delay),
                {"max_delay_s": opts.max_delay},
            )
        )
        modes = ["asyncio"] if impl == "fastctl-model" else ["asyncio", "threads"]
        for mode in modes:
            drive = contended_asyncio if mode == "asyncio" else contended_threads
            for w in opts.workers if mode == "asyncio" else opts.thread_workers:
                ckeys = make_keys(w * opts.per_worker)
                cases.append(
                    Case(
                        "contended",
                        len(ckeys),
                        opts.reps or 3,
                        "wall",
                        on_fresh(new, drive, ckeys, w),
                        {
                            "workers": w,
                            "work_s": WORK,
                            "mode": mode,
                            "ideal_s": WORK * opts.per_worker,
                        },
                        warmup=False,
                    )
                )
    return cases


def machine_busy() -> float:
    """CPU seconds all processes have used since boot ("cpu" line of /proc/stat, less idle
    and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def start_others() -> Callable[[], float]:
    """Start measuring the share of the machine's CPU time other processes use; the function
    returned gives that share (0 to 1) since the start. It tells which figures were taken on
    a busy machine."""
    busy0, own0, t0 = machine_busy(), time.process_time(), time.perf_counter()
    ncpu = os.cpu_count() or 1

    def others() -> float:
        used = (machine_busy() - busy0) - (time.process_time() - own0)
        return max(0.0, used / ((time.perf_counter() - t0) * ncpu))

    return others


def measure(impl: str, case: Case) -> dict[str, Any]:
    print(f"{impl} {case.workload} n={case.n} {case.params} ...", file=sys.stderr, flush=True)
    # One full collection per case, before the warm-up: a repetition leaves no garbage
    # (reference counting frees its queue), and a collection before every repetition would
    # walk every key of every case and start each one with cold caches.
    gc.collect()
    if case.warmup:
        case.run()
    samples: list[Sample] = []
    others = start_others()
    for _ in range(case.reps):
        samples.append(case.run())
    walls = [s.wall_ns / case.n for s in samples]
    cpus = [s.cpu_ns / case.n for s in samples]
    chosen = cpus if case.metric == "cpu" else walls
    wall_s = statistics.median(walls) * case.n / 1e9
    result: dict[str, Any] = {
        "impl": impl,
        "workload": case.workload,
        "n": case.n,
        "ns_per_item": statistics.median(chosen),
        "cpu_ns_per_item": statistics.median(cpus),
        "wall_s": wall_s,
        "items_per_s": case.n / wall_s,
        "reps": case.reps,
        "samples": chosen,
        "metric": case.metric,
        "metrics": True,  # fastctl.Scheduler always keeps its counters and histograms
        "params": case.params,
        "others_cpu": others(),
    }
    if samples[0].phases:
        result["phase_ns_per_item"] = {
            k: statistics.median(s.phases[k] / case.n for s in samples) for k in samples[0].phases
        }
    return result


# --- the Go program ------------------------------------------------------------------------


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "fastctl" / "peers"


def go_binary() -> Path:
    """The Go program, built into the cache if no binary of these sources exists yet."""
    if shutil.which("go") is None:
        sys.exit("run_scheduler_peers: needs Go 1.26 on PATH to build benches/peers/go")
    go_version = subprocess.run(
        ["go", "version"], capture_output=True, text=True, check=True
    ).stdout
    digest = hashlib.sha256(go_version.encode())
    for path in sorted(GO_DIR.iterdir()):
        if path.suffix in (".go", ".mod", ".sum"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    binary = cache_dir() / f"schedpeers-{digest.hexdigest()[:12]}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {binary} ...", file=sys.stderr, flush=True)
        tmp = binary.with_suffix(".tmp")
        subprocess.run(["go", "build", "-trimpath", "-o", str(tmp), "."], cwd=GO_DIR, check=True)
        tmp.replace(binary)
    return binary


def run_go(binary: Path, opts: argparse.Namespace, *args: str) -> list[dict[str, Any]]:
    cmd = [
        str(binary),
        f"-sizes={','.join(map(str, opts.sizes))}",
        f"-merge-n={opts.merge_n}",
        f"-delayed-n={opts.delayed_n}",
        f"-max-delay={opts.max_delay}s",
        f"-workers={','.join(map(str, opts.workers))}",
        f"-items-per-worker={opts.per_worker}",
        f"-reps={opts.reps}",
        *args,
    ]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# --- report --------------------------------------------------------------------------------

LABELS = {
    "client-go": "client-go workqueue",
    "controller-runtime": "controller-runtime PQ",
    "fastctl": "fastctl (Rust)",
    "fastctl batched": "fastctl batched",
    "fastctl-model": "Python model",
}
WORKLOAD_ORDER = ["cycle", "merge-sequential", "merge-random", "delayed", "contended"]


GO_IMPLS = ("client-go", "controller-runtime")
TABLE_IMPLS = ["client-go", "controller-runtime", "fastctl", "fastctl batched", "fastctl-model"]


def find(
    results: list[dict[str, Any]],
    impl: str,
    workload: str,
    n: int | None = None,
    *,
    go_metrics: bool = False,
) -> dict[str, Any] | None:
    """The result of `impl` on `workload` (at `n` keys); for a Go queue, from the run with
    its metrics on or off."""
    for r in results:
        same = r["impl"] == impl and r["workload"] == workload and n in (None, r["n"])
        if same and (impl not in GO_IMPLS or r["metrics"] == go_metrics):
            return r
    return None


BUSY = 0.25  # other processes' share of the CPU above which a figure is marked
BUSY_MARK = "°"


def busy_mark(r: dict[str, Any]) -> str:
    return BUSY_MARK if r["others_cpu"] > BUSY else ""


def fmt_ns(ns: float) -> str:
    return f"{ns / 1000:.2f} µs" if ns >= 10_000 else f"{ns:,.0f} ns"


def fmt_n(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k" if n >= 1000 else str(n)


def per_item_table(results: list[dict[str, Any]], impls: list[str], go_metrics: bool) -> list[str]:
    rows = sorted(
        {(r["workload"], r["n"]) for r in results if r["workload"] != "contended"},
        key=lambda wn: (WORKLOAD_ORDER.index(wn[0]), wn[1]),
    )
    lines = [
        "| workload | keys | " + " | ".join(LABELS[i] for i in impls) + " | Rust / c-r |",
        "|---|---:|" + "---:|" * (len(impls) + 1),
    ]
    for workload, n in rows:
        cr = find(results, "controller-runtime", workload, n, go_metrics=go_metrics)
        if cr is None:
            continue
        cells = []
        for impl in impls:
            r = find(results, impl, workload, n, go_metrics=go_metrics)
            cells.append(fmt_ns(r["ns_per_item"]) + busy_mark(r) if r else "—")
        rust = find(results, "fastctl", workload, n)
        ratio = f"{rust['ns_per_item'] / cr['ns_per_item']:.2f}" if rust else "—"
        name = workload + (" (CPU)" if workload == "delayed" else "")
        lines.append(f"| {name} | {fmt_n(n)} | " + " | ".join(cells) + f" | {ratio} |")
    return lines


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "Per key, median (lower is better). The ratio is fastctl (Rust, one Python call per "
        "operation) over controller-runtime's priority queue (c-r): below 1 means fastctl is "
        "faster.",
        "",
        *per_item_table(results, TABLE_IMPLS, go_metrics=False),
    ]
    if any(r["impl"] in GO_IMPLS and r["metrics"] for r in results):
        lines += [
            "",
            "With the Go queues' Prometheus metrics on (a named queue, as in a controller; "
            "fastctl always keeps its counters and histograms):",
            "",
            *per_item_table(results, ["client-go", "controller-runtime", "fastctl"], True),
        ]
    lines += [
        "",
        "Lock-contended drain (each worker: get, sleep 1 ms, done; ideal = keys x 1 ms / workers):",
        "",
        "| queue | driven by | workers | keys | wall | keys/s | ideal | wall / ideal |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    contended = [r for r in results if r["workload"] == "contended"]
    contended.sort(key=lambda r: (r["params"]["workers"], TABLE_IMPLS.index(r["impl"])))
    for r in contended:
        p = r["params"]
        lines.append(
            f"| {LABELS[r['impl']]} | {p['mode']} | {p['workers']:,} | {fmt_n(r['n'])} "
            f"| {r['wall_s']:.2f} s{busy_mark(r)} | {r['items_per_s']:,.0f} | {p['ideal_s']:.2f} s "
            f"| {r['wall_s'] / p['ideal_s']:.2f} |"
        )
    others = sorted(r["others_cpu"] for r in results)
    lines += [
        "",
        f"Other processes used a median {statistics.median(others):.0%} and at most "
        f"{others[-1]:.0%} of the machine's CPU time during a case; {BUSY_MARK} marks the "
        f"figures taken while they used more than {BUSY:.0%}.",
    ]
    lines += [
        "",
        f"Machine: {meta['machine']}; load average {meta['loadavg_start']} at the start, "
        f"{meta['loadavg_end']} at the end. {meta['versions']}.",
    ]
    return "\n".join(lines) + "\n"


def plots(results: list[dict[str, Any]], img_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig: Any, ax: Any, path: Path, grid: str = "both", **axes: Any) -> Path:
        ax.set(yscale="log", **axes)
        ax.grid(True, axis=grid, which="both", alpha=0.3)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    img_dir.mkdir(parents=True, exist_ok=True)
    impls = TABLE_IMPLS
    colors = dict(zip(impls, ["#4c72b0", "#dd8452", "#c44e52", "#e377c2", "#8c8c8c"], strict=True))
    written = []

    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    for impl in impls:
        pts = sorted(
            (r["n"], r["ns_per_item"])
            for r in results
            if r["impl"] == impl
            and r["workload"] == "cycle"
            and (impl not in GO_IMPLS or not r["metrics"])
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=LABELS[impl], color=colors[impl])
    written.append(
        save(
            fig,
            ax,
            img_dir / "peers-cycle.png",
            xscale="log",
            xlabel="keys added, then got and done",
            ylabel="ns per key (add + get + done)",
            title="Scheduler cycle cost per key (lower is better)",
        )
    )

    workloads = ["merge-sequential", "merge-random", "delayed"]
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        vals = []
        for w in workloads:
            r = find(results, impl, w)
            vals.append(r["ns_per_item"] if r else 0.0)
        xs = [j + (i - (len(impls) - 1) / 2) * width for j in range(len(workloads))]
        ax.bar(xs, vals, width, label=LABELS[impl], color=colors[impl])
    ax.set_xticks(
        range(len(workloads)),
        ["merge add, key order", "merge add, scattered", "delayed add+get+done (CPU)"],
    )
    title = "Merge-path and delayed adds (lower is better)"
    written.append(
        save(fig, ax, img_dir / "peers-merge-delayed.png", "y", ylabel="ns per key", title=title)
    )

    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    series = [
        ("client-go", "goroutines", "-"),
        ("controller-runtime", "goroutines", "-"),
        ("fastctl", "asyncio", "-"),
        ("fastctl", "threads", "--"),
        ("fastctl-model", "asyncio", "-"),
    ]
    contended = [r for r in results if r["workload"] == "contended"]
    for impl, mode, style in series:
        pts = sorted(
            (r["params"]["workers"], r["items_per_s"])
            for r in contended
            if r["impl"] == impl and r["params"]["mode"] == mode
        )
        if pts:
            ax.plot(
                *zip(*pts, strict=True),
                style,
                marker="o",
                color=colors[impl],
                label=f"{LABELS[impl]} ({mode})",
            )
    ideal = {r["params"]["workers"]: r["n"] / r["params"]["ideal_s"] for r in contended}
    ax.plot(*zip(*sorted(ideal.items()), strict=True), ":", color="black", label="ideal")
    per_worker = contended[0]["n"] // contended[0]["params"]["workers"]
    written.append(
        save(
            fig,
            ax,
            img_dir / "peers-contended.png",
            xscale="log",
            xlabel="workers (each: get, 1 ms of work, done)",
            ylabel="keys per second",
            title=f"Draining {per_worker:,} keys per worker (higher is better)",
        )
    )
    return written


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, into a temporary directory")
    p.add_argument("--out", type=Path, help=f"results directory (default {RESULTS_DIR})")
    p.add_argument("--img-dir", type=Path, help=f"plot directory (default {IMG_DIR})")
    p.add_argument("--reps", type=int, default=0, help="repetitions per case (0: defaults)")
    p.add_argument("--no-go-metrics", action="store_true", help="skip the metrics-on Go run")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--thread-workers",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=THREAD_WORKERS,
        help="thread counts for the threaded contended case (default %(default)s)",
    )
    opts = p.parse_args(argv)
    opts.sizes, opts.merge_n, opts.delayed_n = SIZES, MERGE_N, DELAYED_N
    opts.max_delay, opts.workers, opts.per_worker = MAX_DELAY, WORKERS, PER_WORKER
    if opts.quick:
        opts.sizes, opts.merge_n, opts.delayed_n = (1000, 10_000), 10_000, 10_000
        opts.max_delay, opts.workers, opts.per_worker = 0.1, (10, 100), 100
        opts.thread_workers = (10,)
        opts.reps = opts.reps or 3
        tmp = Path(tempfile.mkdtemp(prefix="fastctl-peers-"))
        opts.out, opts.img_dir = opts.out or tmp, opts.img_dir or tmp
    out_dir: Path = opts.out or RESULTS_DIR
    img_dir: Path = opts.img_dir or IMG_DIR

    meta: dict[str, Any] = {"loadavg_start": loadavg(), "started": time.time()}
    binary = go_binary()
    results = run_go(binary, opts)
    if not opts.no_go_metrics:
        results += run_go(binary, opts, "-metrics", "-workloads=cycle,merge")
    for impl in IMPLS:
        results += [measure(impl, case) for case in python_cases(impl, opts)]
    go_versions = {r["impl"]: r["version"] for r in results if "version" in r}
    meta |= {
        "loadavg_end": loadavg(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} "
        f"{platform.release()}",
        "python": sys.version.split()[0],
        "go": next((r["go"] for r in results if "go" in r), None),
        "go_versions": go_versions,
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
    }
    meta["versions"] = (
        f"Python {meta['python']}, {meta['go']}, "
        f"k8s.io/client-go {go_versions.get('client-go')}, "
        f"sigs.k8s.io/controller-runtime {go_versions.get('controller-runtime')}, "
        f"fastctl at {meta['commit']}"
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scheduler-peers.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1) + "\n"
    )
    table = markdown(results, meta)
    (out_dir / "scheduler-peers.md").write_text(table)
    print(table)
    if not opts.no_plots:
        for path in plots(results, img_dir):
            print(f"wrote {path}", file=sys.stderr)
    print(f"wrote {out_dir / 'scheduler-peers.json'} and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
