"""One Scheduler driven from 8 threads at once. The invariants: a key is never handed out
twice without a `done` in between, the concurrency limit holds, and afterwards every
counter adds up, the keys left come out exactly once, and the internal state is consistent.

What this can and cannot show. The binding takes its Rust mutex while holding the GIL and
never releases the GIL inside a call, so on a GIL build each call is atomic and the mutex is
never contended: threads interleave *between* calls (the switch interval is set to 1 µs, and
the test checks that they did), never inside one. So it shows that the API has no
check-then-act race across calls (``pop_many`` is one step, counters add up however calls
interleave) and that a scheduler without that atomicity fails it (the pure-Python model,
which has no lock, does). It cannot show that the mutex itself is right under real
parallelism: only a free-threaded build (``python3.13t``), where the same test runs the
threads in parallel, exercises that.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from fastctl import Scheduler

THREADS = 8
ROUNDS = 3_000
KEYS = [f"ns/obj-{i}" for i in range(40)]
LIMIT = 6


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_eight_threads_keep_the_invariants() -> None:
    s = Scheduler(concurrency=LIMIT, backoff_base=0.0001, backoff_max=0.001, seed=3)
    guard = threading.Lock()
    held: set[str] = set()
    errors: list[str] = []
    totals = {"adds": 0, "pops": 0, "done": 0, "failed": 0}
    start = threading.Barrier(THREADS)
    ticket = itertools.count()  # next() is atomic: a global order of the calls
    order: list[tuple[int, int]] = []  # (ticket, thread)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[str] = []
        adds = pops = dones = failed = 0
        start.wait()
        for _ in range(ROUNDS):
            order.append((next(ticket), seed))
            op = rng.random()
            if op < 0.1:
                time.sleep(0)  # hand the GIL over: more interleavings between calls
            if op < 0.4:
                batch = rng.sample(KEYS, rng.randint(1, 3))
                if len(batch) == 1:
                    s.add(batch[0], priority=rng.choice((0, 1, -100)))
                else:
                    s.add_many(batch, after=rng.choice((0.0, 0.0, 0.0005)))
                adds += len(batch)
            elif op < 0.7 or not mine:
                got = s.pop_many(2) if op < 0.55 else [k for k in [s.pop()] if k]
                in_flight = s.in_flight
                with guard:
                    # `held` drops a key just before its `done`: it never counts a key
                    # twice or one that is not in flight, so both checks are sound.
                    for k in got:
                        if k in held:
                            errors.append(f"{k} handed out twice")
                        held.add(k)
                    if len(held) > LIMIT or in_flight > LIMIT:
                        errors.append(f"{len(held)}/{in_flight} keys in flight, limit {LIMIT}")
                mine.extend(got)
                pops += len(got)
            else:
                k = mine.pop(rng.randrange(len(mine)))
                with guard:
                    held.discard(k)
                fail = rng.random() < 0.2
                s.done(k, failed=fail, requeue_after=rng.choice((None, None, 0.0)))
                dones += 1
                failed += fail
        for k in mine:
            with guard:
                held.discard(k)
            s.done(k)
            dones += 1
        with guard:
            for name, n in (("adds", adds), ("pops", pops), ("done", dones), ("failed", failed)):
                totals[name] += n

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    # The threads really interleaved: control changed hands between calls many times.
    switches = sum(a != b for (_, a), (_, b) in itertools.pairwise(sorted(order)))
    assert switches > THREADS * ROUNDS // 100, f"only {switches} switches between threads"
    s._check_consistency()

    st = s.stats()
    assert st["in_flight"] == 0
    assert st["adds_total"] == totals["adds"]
    assert st["pops_total"] == totals["pops"]
    assert st["done_total"] == totals["done"] == totals["pops"]
    assert st["failures_total"] == totals["failed"]
    assert st["queue_duration"]["count"] == totals["pops"]
    assert st["work_duration"]["count"] == totals["done"]
    assert st["len"] == len(s) == st["depth"] + st["waiting"]

    # Drain what is left: each remaining key comes out exactly once.
    queued = {k for k in KEYS if k in s}
    assert len(queued) == len(s)
    left = set()
    now = time.monotonic() + 10.0  # past every short delay and backoff
    while len(s):
        for k in s.pop_many(100, now=now):
            assert k not in left
            left.add(k)
            s.done(k, now=now)
    assert left == queued
    s._check_consistency()
