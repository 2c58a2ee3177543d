"""Fair groups: what they buy (a small tenant's start delay behind a big tenant's flood) and
what they cost (the scheduler's per-item time with groups against without, same run).

Run (results in docs/benchmarks.md, "Fair groups")::

    flock /tmp/fastctl-heavy.lock .venv/bin/python -m pytest benches/test_bench_fair.py -s -q \\
        -p no:cacheprovider

The start delay is simulated on a virtual clock (no sleeping, no wall time): 32 workers,
every reconcile takes one unit `D`; tenant A adds 10,000 keys at t=0, tenant B adds 10 keys at
t=0.5·D. B's delay is from its add to the start of its reconcile, in reconcile durations and
in pops. Costs are CPU time (`time.process_time`) of alternating rounds, fairness off, on,
off, on, ..., so a change in machine load hits both alike; the figures are medians per item.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from fastctl import Scheduler

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


def unbatched(fair: bool) -> Callable[[], None]:
    s = Scheduler()
    for i in range(0, QUEUED, 1000):
        for g in range(97):
            chunk = KEYS[i : i + 1000][g::97]
            s.add_many(chunk, group=GROUPS[g] if fair else None)
    state = {"i": QUEUED}

    def run() -> None:
        add, pop, done = s.add, s.pop, s.done
        i = state["i"]
        if fair:
            for j in range(i, i + ITEMS):
                add(KEYS[j % len(KEYS)], group=GROUPS[j % 97])
                done(pop())  # type: ignore[arg-type]  # never None: keys are queued
        else:
            for j in range(i, i + ITEMS):
                add(KEYS[j % len(KEYS)])
                done(pop())  # type: ignore[arg-type]
        state["i"] = i + ITEMS

    return run


def batched(fair: bool, batch: int = 1000) -> Callable[[], None]:
    s = Scheduler()
    # One add_many per group (a watch event's namespace is one group).
    per_group = [[k for k in KEYS[:QUEUED] if k.startswith(g + "/")] for g in GROUPS]
    for g, chunk in zip(GROUPS, per_group, strict=True):
        s.add_many(chunk, group=g if fair else None)
    rest = [[k for k in KEYS[QUEUED:] if k.startswith(g + "/")] for g in GROUPS]
    state = {"i": 0}

    def run() -> None:
        add_many, pop_many, done = s.add_many, s.pop_many, s.done
        n = 0
        while n < ITEMS:
            g = state["i"] % 97
            chunk = (rest if state["i"] // 97 % 2 == 0 else per_group)[g][: batch // 10]
            state["i"] += 1
            add_many(chunk, group=GROUPS[g] if fair else None)
            for key in pop_many(len(chunk)):
                done(key)
            n += len(chunk)

    return run


def paired(make: Callable[[bool], Callable[[], None]], rounds: int = 9) -> tuple[float, float]:
    off, on = make(False), make(True)
    off(), on()  # warm up
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for fair, run in ((False, off), (True, on)):
            start = time.process_time()
            run()
            times[fair].append((time.process_time() - start) / ITEMS)
    return statistics.median(times[False]), statistics.median(times[True])


def test_per_item_cost_with_groups_against_without() -> None:
    for name, make in (("add+pop+done", unbatched), ("add_many+pop_many+done", batched)):
        off, on = paired(make)
        print(
            f"\n{name}, {QUEUED // 1000}k queued in 97 groups: off {off * 1e9:.0f} ns, "
            f"on {on * 1e9:.0f} ns per item, on/off = {on / off:.2f}"
        )
