"""Fair groups: what they buy (a small tenant's start delay behind a big tenant's flood) and
what they cost (the scheduler's per-item time with groups against without, same run).

Run (results in docs/benchmarks.md, "Fair groups")::

    flock /tmp/fastctl-heavy.lock .venv/bin/python -m pytest benches/test_bench_fair.py -s -q \\
        -p no:cacheprovider

With ``FASTCTL_BASELINE_CORE=/path/to/_core.abi3.so`` (another build, e.g. main's) the cost
test also runs the no-groups workload on that build, in the same alternating rounds.

The start delay is simulated on a virtual clock (no sleeping, no wall time): 32 workers,
every reconcile takes one unit `D`; tenant A adds 10,000 keys at t=0, tenant B adds 10 keys at
t=0.5·D. B's delay is from its add to the start of its reconcile, in reconcile durations and
in pops. Costs are CPU time (`time.process_time`) of alternating rounds, fairness off, on,
off, on, ..., so a change in machine load hits both alike, after a warm-up to the steady
state and with the GC off; the figures are medians per item, the ratios medians of the
ratios of adjacent rounds.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from fastctl import Scheduler
from test_bench_scheduler import load_scheduler

WORKERS = 32
FLOOD = 10_000
SMALL = 10


def simulate(fair: bool) -> tuple[list[float], list[int]]:
    """B's start delays, in reconcile durations and in pops after its add."""
    s = Scheduler(concurrency=WORKERS, max_wait=float("inf"))
    group_a, group_b = ("a", "b") if fair else (None, None)
    s.add_many([f"a/{i}" for i in range(FLOOD)], group=group_a, now=0.0)
    running: list[tuple[float, str]] = []  # (ends at, key)
    added_at = 0.5
    b_added, pops_since = False, 0
    delays: list[float] = []
    pops: list[int] = []
    now = 0.0
    while len(s) or running:
        if not b_added and now >= added_at:
            s.add_many([f"b/{i}" for i in range(SMALL)], group=group_b, now=added_at)
            b_added = True
        for key in s.pop_many(WORKERS - len(running), now=now):
            if b_added:
                pops_since += 1
            if key.startswith("b/"):
                delays.append(now - added_at)
                pops.append(pops_since)
            running.append((now + 1.0, key))
        # Advance to the next event: a reconcile ending, or B's add.
        ends = min(at for at, _ in running)
        now = ends if b_added else min(ends, added_at)
        for at, key in [r for r in running if r[0] <= now]:
            s.done(key, now=now)
            running.remove((at, key))
    return delays, pops


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def test_small_tenant_start_delay_behind_a_flood() -> None:
    on, on_pops = simulate(fair=True)
    off, off_pops = simulate(fair=False)
    assert len(on) == len(off) == SMALL
    print(
        f"\nB start delay p99: fair {p99(on):.2f} D ({p99([float(p) for p in on_pops]):.0f} pops)"
        f", FIFO {p99(off):.2f} D ({p99([float(p) for p in off_pops]):.0f} pops)"
    )
    assert p99(on) <= 2.0, "B starts within a couple of reconcile durations"
    assert p99(off) > 100 * max(p99(on), 0.5), "FIFO makes B wait behind the flood"


KEYS = [f"namespace-{i % 97:02d}/object-{i:08d}" for i in range(200_000)]
GROUPS = [f"namespace-{i:02d}" for i in range(97)]
QUEUED = 100_000
ITEMS = 10_000


def _baseline() -> Any | None:
    """The `Scheduler` of another build of the extension, to compare the no-groups path
    against (``FASTCTL_BASELINE_CORE=/path/to/_core.abi3.so``, e.g. main's), or None."""
    path = os.environ.get("FASTCTL_BASELINE_CORE")
    return load_scheduler(path) if path else None


NO_GROUPS: list[str | None] = [None] * 97
"""The "off, same call" variant passes ``group=`` exactly as "on" does, with None."""


def unbatched(cls: Any, mode: str) -> Callable[[], None]:
    """`mode`: "off" (no group argument), "same-call" (``group=None``, computed as "on"
    computes its group), "on" (the key's namespace)."""
    s = cls()
    fair = mode == "on"
    for i in range(0, QUEUED, 1000):
        for g in range(97):
            chunk = KEYS[i : i + 1000][g::97]
            if fair:
                s.add_many(chunk, group=GROUPS[g])
            else:
                s.add_many(chunk)
    state = {"i": QUEUED}

    def run() -> None:
        add, pop, done = s.add, s.pop, s.done
        i = state["i"]
        if mode != "off":
            groups = GROUPS if fair else NO_GROUPS
            for j in range(i, i + ITEMS):
                add(KEYS[j % len(KEYS)], group=groups[j % 97])
                done(pop())
        else:
            for j in range(i, i + ITEMS):
                add(KEYS[j % len(KEYS)])
                done(pop())
        state["i"] = i + ITEMS

    return run


CHUNK = 100
FRESH = [
    [f"{GROUPS[c % 97]}/fresh-{c:06d}-{k:03d}" for k in range(CHUNK)]
    for c in range(16 * ITEMS // CHUNK)
]
"""Bursts of new keys, one group each, for every round of `batched` (warm-up included):
keys none of the schedulers has seen, so each add makes a record and the queue stays at
`QUEUED` keys in every variant."""


def batched(cls: Any, mode: str) -> Callable[[], None]:
    """`mode` as for `unbatched`. The queue is filled one ``add_many`` per group (a watch
    event's namespace is one group), then each step adds a burst of `CHUNK` new keys of one
    group and pops and finishes as many: with groups on, the pops take turns over all 97
    groups, so they leave the order the keys arrived in (the reordering fairness is for)."""
    s = cls()
    fair = mode == "on"
    for g in GROUPS:
        chunk = [k for k in KEYS[:QUEUED] if k.startswith(g + "/")]
        if fair:
            s.add_many(chunk, group=g)
        else:
            s.add_many(chunk)
    state = {"chunk": 0}

    def run() -> None:
        add_many, pop_many, done_many = s.add_many, s.pop_many, s.done_many
        first = state["chunk"]
        for c in range(first, first + ITEMS // CHUNK):
            chunk = FRESH[c % len(FRESH)]
            if mode != "off":
                add_many(chunk, group=GROUPS[c % 97] if fair else None)
            else:
                add_many(chunk)
            done_many(pop_many(CHUNK))
        state["chunk"] = first + ITEMS // CHUNK
        assert len(s) == QUEUED, "every variant keeps the same queue depth"

    return run


WARMUP = 12
"""Rounds each variant runs before timing: 120,000 items, more than the queue holds, so the
figures are of the steady state (every initial key replaced), not of the initial fill's
memory layout."""
ROUNDS = 21


def paired(make: Callable[[Any, str], Callable[[], None]]) -> dict[str, float]:
    """Seconds per item of each variant (medians over alternating rounds, so a change in
    the machine's load hits all alike) and their ratios (medians of the ratios of adjacent
    rounds, "a/b"): groups off (plain calls, and the same calls as "on" with
    ``group=None``), groups on, and the baseline build if any (plain calls). The garbage
    collector is off while timing, as `timeit` does: a collection costs what the heap holds,
    not what the variant does."""
    variants = {mode: make(Scheduler, mode) for mode in ("off", "same-call", "on")}
    baseline = _baseline()
    if baseline is not None:
        variants["baseline"] = make(baseline, "off")
    for run in variants.values():
        for _ in range(WARMUP):
            run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    gc.collect()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for name, run in variants.items():
                start = time.process_time()
                run()
                times[name].append((time.process_time() - start) / ITEMS)
    finally:
        gc.enable()
    out = {name: statistics.median(t) for name, t in times.items()}
    pairs = [("on", "same-call"), ("on", "off"), ("off", "baseline")]
    for a, b in pairs:
        if a in times and b in times:
            ratios = [x / y for x, y in zip(times[a], times[b], strict=True)]
            out[f"{a}/{b}"] = statistics.median(ratios)
    return out


def test_per_item_cost_with_groups_against_without() -> None:
    for name, make in (("add+pop+done", unbatched), ("add_many+pop_many+done_many", batched)):
        t = paired(make)
        line = (
            f"\n{name}, {QUEUED // 1000}k queued in 97 groups: off {t['off'] * 1e9:.0f} ns, "
            f"off with group=None {t['same-call'] * 1e9:.0f} ns, on {t['on'] * 1e9:.0f} ns "
            f"per item; on/off = {t['on/off']:.2f}, on/off with the same call = "
            f"{t['on/same-call']:.2f}"
        )
        if "baseline" in t:
            line += (
                f"; baseline {t['baseline'] * 1e9:.0f} ns, off/baseline = {t['off/baseline']:.2f}"
            )
        print(line)
