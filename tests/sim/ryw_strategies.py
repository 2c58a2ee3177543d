"""Hypothesis strategies for `ryw_world` schedules: watch delays, reconciles that requeue at
once or fail after writing, other writers."""

from __future__ import annotations

from hypothesis import strategies as st

from .apiserver import ServerConfig
from .ryw_world import REQUEUE, ROp, RywSchedule
from .world import Outcome

MAX_OBJECTS = 3
DELAYS = st.sampled_from([0.0, 0.05, 0.3, 1.0, 5.0, 20.0])
WATCH_DELAYS = st.sampled_from([0.0, REQUEUE * 2, 0.5, 1.0, 2.0, 8.0])
"""How late watches show writes: from not at all to past every bound drawn."""
DURATIONS = st.sampled_from([0.0, 0.1, 1.0])


def _op(kind: str) -> st.SearchStrategy[ROp]:
    index = st.integers(0, MAX_OBJECTS - 1)
    if kind in ("put", "delete", "delete_child"):
        return st.builds(ROp, DELAYS, st.just(kind), index)
    if kind == "watch_delay":
        return st.builds(ROp, DELAYS, st.just(kind), arg=WATCH_DELAYS)
    if kind == "relist":
        plural = st.sampled_from(["widgets", "children"])
        return st.builds(ROp, DELAYS, st.just(kind), plural=plural)
    if kind == "outage":
        return st.builds(ROp, DELAYS, st.just(kind), arg=st.sampled_from([1.0, 5.0]))
    raise ValueError(kind)  # pragma: no cover


@st.composite
def ryw_schedules(draw: st.DrawFn, *, ops: tuple[str, ...], max_ops: int = 10) -> RywSchedule:
    """Operations of the kinds `ops`; reconciles that mostly requeue at once (the follow-up
    a stale cache misleads); watches late by a delay drawn, changed by ``watch_delay`` ops."""
    objects = draw(st.integers(1, MAX_OBJECTS))
    kinds = st.sampled_from(["requeue", "requeue", "ok", "error"])
    outcome = st.builds(Outcome, kinds, DURATIONS)
    scripts = draw(
        st.lists(st.lists(outcome, max_size=6).map(tuple), max_size=MAX_OBJECTS).map(tuple)
    )
    return RywSchedule(
        objects=objects,
        ops=tuple(draw(st.lists(st.one_of(*[_op(k) for k in ops]), max_size=max_ops))),
        scripts=scripts,
        concurrency=draw(st.integers(1, 3)),
        max_wait=draw(st.sampled_from([1.0, 3.0, 5.0])),
        server=ServerConfig(
            streaming=draw(st.booleans()),
            page_size=draw(st.integers(1, 3)),
            item_delay=draw(st.sampled_from([0.0, 0.1])),
            write_latency=draw(st.sampled_from([0.0, 0.05])),
            watch_delay=draw(WATCH_DELAYS),
        ),
    )
