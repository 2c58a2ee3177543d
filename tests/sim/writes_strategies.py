"""Hypothesis strategies for `writes_world` schedules (own writes, related objects)."""

from __future__ import annotations

from hypothesis import strategies as st

from .apiserver import ServerConfig
from .world import Outcome
from .writes_world import NAMESPACES, WOp, WritesSchedule

MAX_OBJECTS = 3
DELAYS = st.sampled_from([0.0, 0.05, 0.3, 1.0, 5.0, 20.0])
DURATIONS = st.sampled_from([0.0, 0.1, 1.0, 4.0])
RELATED = ("children", "pointers")


def _op(kind: str, namespaces: int, objects: int) -> st.SearchStrategy[list[WOp]]:
    """Operations of one kind (a list: a move across a relist is three)."""
    ns = st.integers(0, namespaces - 1)
    index = st.integers(0, MAX_OBJECTS - 1)
    target = st.integers(-1, objects)  # -1: none; `objects`: a widget that does not exist
    if kind in ("put", "delete", "race", "delete_child", "delete_pointer"):
        op = st.builds(WOp, DELAYS, st.just(kind), ns, index)
    elif kind in ("put_child", "put_pointer"):
        op = st.builds(WOp, DELAYS, st.just(kind), ns, index, target)
    elif kind == "burst":
        op = st.builds(WOp, DELAYS, st.just(kind))
    elif kind == "relist":
        plural = st.sampled_from(["widgets", *RELATED])
        op = st.builds(WOp, DELAYS, st.just(kind), plural=plural)
    elif kind == "outage":
        op = st.builds(
            WOp, DELAYS, st.just(kind), arg=st.sampled_from([1.0, 5.0]), flag=st.booleans()
        )
    elif kind == "move":
        # a related object at one widget, then at another (or none), its watch up
        return st.tuples(st.sampled_from(RELATED), DELAYS, ns, index, target, target, DELAYS).map(
            lambda t: _move((*t[:6], -1.0, t[6]))
        )
    elif kind == "move_across_relist":
        # a related object at one widget; its watch breaks; it moves before the watch is back
        return st.tuples(
            st.sampled_from(RELATED), DELAYS, ns, index, target, target, SHORT, SHORT
        ).map(_move)
    else:  # pragma: no cover
        raise ValueError(kind)
    return op.map(lambda o: [o])


SHORT = st.sampled_from([0.0, 0.05, 0.3, 1.0])
"""Delays between a watch's break and a move: before the history is compacted (0.3 s) or
after, and before the watch comes back (its backoff)."""


def _move(t: tuple[str, float, int, int, int, int, float, float]) -> list[WOp]:
    """A related object put at widget `first`, then at `second` `moved` s later; with
    `down` >= 0, its watch breaks `down` s after the first put."""
    plural, delay, ns, index, first, second, down, moved = t
    kind = "put_child" if plural == "children" else "put_pointer"
    relist = [WOp(down, "relist", plural=plural)] if down >= 0 else []
    return [WOp(delay, kind, ns, index, first), *relist, WOp(moved, kind, ns, index, second)]


@st.composite
def writes_schedules(
    draw: st.DrawFn,
    *,
    ops: tuple[str, ...],
    ignore_own_writes: bool | None = True,
    latencies: tuple[float, ...] = (0.0,),
    max_ops: int = 10,
    min_ops: int = 0,
) -> WritesSchedule:
    """A schedule of operations of the kinds `ops`, on widgets of the same names in one to
    three namespaces."""
    namespaces = draw(st.integers(1, len(NAMESPACES)))
    objects = draw(st.integers(1, MAX_OBJECTS))
    groups = draw(
        st.lists(
            st.one_of(*[_op(k, namespaces, objects) for k in ops]),
            min_size=min_ops,
            max_size=max_ops,
        )
    )
    kinds = st.sampled_from(["ok", "ok", "requeue", "error", "skip"])
    outcome = st.builds(Outcome, kinds, DURATIONS)
    scripts = draw(
        st.lists(st.lists(outcome, max_size=3).map(tuple), max_size=MAX_OBJECTS).map(tuple)
    )
    return WritesSchedule(
        namespaces=namespaces,
        objects=objects,
        ops=tuple(op for group in groups for op in group),
        scripts=scripts,
        ignore_own_writes=draw(st.booleans()) if ignore_own_writes is None else ignore_own_writes,
        concurrency=draw(st.integers(1, 3)),
        server=ServerConfig(
            streaming=draw(st.booleans()),
            page_size=draw(st.integers(1, 3)),
            item_delay=draw(st.sampled_from([0.0, 0.1, 1.0])),
            write_latency=draw(st.sampled_from(latencies)),
        ),
    )
