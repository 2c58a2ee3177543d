"""`fastctl.testing.VirtualTimeLoop` and its helpers: the clock jumps to the next timer when
every task waits, a loop that can never move again raises `Deadlock`, one that goes round at
one instant forever raises `Spin`, `on_step` sees every turn, threads take no virtual time,
and ``@virtual_time`` runs an async test (fixtures included) on a loop of its own."""

from __future__ import annotations

import asyncio
import selectors
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from fastctl.testing import Deadlock, Spin, VirtualTimeLoop, run_virtual, virtual_time


def test_the_clock_jumps_to_each_timer_in_turn() -> None:
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        woke.append((name, VirtualTimeLoop.current().time()))

    async def main() -> float:
        await asyncio.gather(sleeper("day", 86400.0), sleeper("soon", 0.25), sleeper("mid", 5.0))
        return VirtualTimeLoop.current().time()

    assert run_virtual(main(), start=100.0) == 100.0 + 86400.0
    assert woke == [("soon", 100.25), ("mid", 105.0), ("day", 86500.0)]


def test_a_loop_that_can_never_move_again_raises_deadlock_naming_who_waits() -> None:
    async def stuck_forever() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        await asyncio.sleep(12.0)
        await asyncio.create_task(stuck_forever(), name="stuck")

    with pytest.raises(Deadlock, match=r"virtual time 12\.000.*stuck \(stuck_forever at"):
        run_virtual(main())


def test_a_busy_loop_raises_spin_and_work_that_lets_time_move_does_not() -> None:
    async def busy() -> None:
        await asyncio.sleep(3.0)
        while True:  # noqa: ASYNC110 - the busy loop under test
            await asyncio.sleep(0)

    with pytest.raises(Spin, match=r"100 times at virtual time 3\.000"):
        run_virtual(busy(), spin_limit=100)

    async def bursts() -> float:
        for _ in range(20):  # 20 x 60 turns: more than the limit, but never at one instant
            for _ in range(60):
                await asyncio.sleep(0)
            await asyncio.sleep(1.0)
        return VirtualTimeLoop.current().time()

    assert run_virtual(bursts(), spin_limit=100) == 20.0


def test_on_step_sees_every_state_at_its_instant() -> None:
    state = "start"
    seen: list[tuple[float, str]] = []

    async def main() -> None:
        nonlocal state
        loop = VirtualTimeLoop.current()
        loop.on_step.append(lambda: seen.append((loop.time(), state)))
        for value in ("a", "b", "c"):
            state = value
            await asyncio.sleep(0)
        state = "before"
        await asyncio.sleep(10.0)
        state = "after"
        await asyncio.sleep(0)

    run_virtual(main())
    distinct = [pair for i, pair in enumerate(seen) if i == 0 or seen[i - 1] != pair]
    # At 10 s the timer's turn comes first: the task has not run yet, the state is as it was.
    assert distinct == [
        (0.0, "a"),
        (0.0, "b"),
        (0.0, "c"),
        (0.0, "before"),
        (10.0, "before"),
        (10.0, "after"),
    ]


def test_work_a_step_schedules_runs_before_the_clock_moves() -> None:
    ran_at: list[float] = []

    async def main() -> None:
        loop = VirtualTimeLoop.current()

        def step() -> None:
            loop.on_step.remove(step)
            loop.call_soon(lambda: ran_at.append(loop.time()))

        loop.on_step.append(step)
        await asyncio.sleep(5.0)

    run_virtual(main())
    assert ran_at == [0.0]


def test_advance_moves_the_clock_at_once_and_due_timers_run_after() -> None:
    async def main() -> list[float]:
        loop = VirtualTimeLoop.current()
        fired: list[float] = []
        loop.call_later(1.0, lambda: fired.append(loop.time()))
        loop.advance(5.0)  # as if this callback had blocked the loop for 5 s
        assert fired == []
        assert loop.time() == 5.0
        await asyncio.sleep(0)
        with pytest.raises(ValueError, match="only goes forward"):
            loop.advance(-1.0)
        return fired

    assert run_virtual(main()) == [5.0]


def test_a_thread_takes_no_virtual_time() -> None:
    """A timer is due in 10 s while a thread works: the loop waits for the thread (within
    the grace) instead of jumping past it."""

    async def main() -> tuple[float, float]:
        loop = VirtualTimeLoop.current()
        timer = asyncio.create_task(asyncio.sleep(10.0))
        await asyncio.to_thread(time.sleep, 0.05)
        ended = loop.time()
        await timer
        return ended, loop.time()

    assert run_virtual(main(), thread_grace=600.0) == (0.0, 10.0)


def test_with_no_timer_the_loop_waits_for_a_thread_instead_of_a_deadlock() -> None:
    def work() -> str:
        time.sleep(0.05)
        return "done"

    async def main() -> str:
        return await asyncio.to_thread(work)

    assert run_virtual(main()) == "done"


def test_a_hung_thread_holds_the_clock_for_one_grace_only() -> None:
    """A thread that does not end within the grace is waited for once; the timers after
    it run without waiting for it again."""
    release = threading.Event()
    real_waits: list[float] = []
    select = selectors.DefaultSelector.select

    def counting(self: selectors.BaseSelector, timeout: float | None = None) -> object:
        if timeout:
            real_waits.append(timeout)
        return select(self, timeout)  # type: ignore[arg-type]

    async def main() -> list[float]:
        loop = VirtualTimeLoop.current()
        hung = asyncio.ensure_future(asyncio.to_thread(release.wait))
        ticks = []
        for _ in range(5):
            await asyncio.sleep(1.0)
            ticks.append(loop.time())
        release.set()
        await hung
        return ticks

    with mock.patch.object(selectors.DefaultSelector, "select", counting):
        assert run_virtual(main(), thread_grace=0.01) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert real_waits[:1] == [0.01]  # the grace, once; then only the wait for the end
    assert real_waits.count(0.01) == 1


def test_closing_a_loop_whose_default_executor_ran_does_not_deadlock() -> None:
    """`run_virtual` shuts the default thread pool down at the end, in a thread of its own
    that no timer waits for."""

    async def main() -> int:
        return await asyncio.to_thread(lambda: 42)

    assert run_virtual(main()) == 42


def test_current_refuses_a_loop_that_is_not_virtual() -> None:
    async def main() -> None:
        VirtualTimeLoop.current()

    with pytest.raises(RuntimeError, match="not virtual"):
        asyncio.run(main())


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="spin_limit"):
        VirtualTimeLoop(spin_limit=0)
    with pytest.raises(ValueError, match="thread_grace"):
        VirtualTimeLoop(thread_grace=-1.0)


@virtual_time(start=1000.0)
async def test_the_decorator_runs_an_async_test_on_its_own_loop(tmp_path: Path) -> None:
    """A pytest test, its fixture (``tmp_path``) included: a day passes in no time."""
    loop = VirtualTimeLoop.current()
    assert loop.time() == 1000.0
    await asyncio.sleep(86400.0)
    assert loop.time() == 87400.0
    assert isinstance(tmp_path, Path)


def test_the_decorator_without_options_returns_the_result() -> None:
    @virtual_time
    async def waited(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return VirtualTimeLoop.current().time()

    assert waited(3.0) == 3.0


def test_the_example_in_the_docs_passes() -> None:
    """docs/testing.md's "Testing with virtual time" example, run as the test it is."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
    section = docs.read_text().split("## Testing with virtual time", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, str(docs), "exec"), namespace)
    tests = [test for name, test in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    for test in tests:
        assert callable(test)
        test()
