"""Hypothesis strategies for simulation schedules.

Each test picks which operations and reconcile outcomes its schedules may contain; the rest
(timings, objects, list mode and pauses, concurrency) is drawn here. Delays, durations and
outages are drawn from small sets of values so that interesting coincidences (a reconcile
that starts while a list is half-way, a lease lost during a drain) are common and shrink
to readable numbers.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from .apiserver import ServerConfig
from .world import MAX_DURATION, Op, Outcome, Schedule

MAX_OBJECTS = 4

DELAYS = st.sampled_from([0.0, 0.05, 0.3, 1.0, 5.0, 20.0])
DURATIONS = st.sampled_from([0.0, 0.1, 0.5, 2.0, 4.0, MAX_DURATION])
STOP_DELAYS = st.sampled_from([0.0, 0.2, 0.5, 1.0, 3.0, 8.0])


def sim_settings(examples: int) -> settings:
    """Deterministic settings: `examples` schedules (``FASTCTL_SIM_EXAMPLES`` overrides it
    for a long run), no example database, no deadline (the clock is virtual anyway).

    Shrinking a failure costs hundreds of runs, so it happens only with
    ``FASTCTL_SIM_SHRINK=1``; without, a failure is reported as first found."""
    override = os.environ.get("FASTCTL_SIM_EXAMPLES")
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("FASTCTL_SIM_SHRINK") == "1":
        phases.append(Phase.shrink)
    return settings(
        max_examples=int(override) if override else examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=False,
        phases=phases,
    )


def _op(kind: str, indexes: int) -> st.SearchStrategy[Op]:
    index = st.integers(0, indexes - 1)
    if kind in ("put", "delete", "put_child", "delete_child"):
        return st.builds(Op, DELAYS, st.just(kind), index)
    if kind == "outage":
        return st.builds(
            Op, DELAYS, st.just(kind), st.just(0), st.sampled_from([1.0, 5.0, 30.0]), st.booleans()
        )
    if kind == "burst":
        # 300 re-triggers of up to 4 objects: more than the trigger channel holds (1,024)
        sizes = st.sampled_from([1.0, 3.0, 300.0])
        return st.builds(Op, DELAYS, st.just(kind), st.just(0), sizes)
    if kind == "partition":
        return st.builds(
            Op, DELAYS, st.just(kind), st.just(0), st.sampled_from([3.0, 8.0, 12.0, 30.0])
        )
    if kind == "relist":  # flag: of the children, else of the primary
        return st.builds(Op, DELAYS, st.just(kind), st.just(0), st.just(0.0), st.booleans())
    return st.builds(Op, DELAYS, st.just(kind))


@st.composite
def schedules(
    draw: st.DrawFn,
    *,
    ops: tuple[str, ...],
    outcomes: tuple[str, ...] = ("ok", "requeue", "error"),
    threads: bool | None = None,
    manager: bool | None = False,
    scheduler_below: bool = False,
    min_ops: int = 0,
    max_ops: int = 12,
    indexes: int = MAX_OBJECTS,
) -> Schedule:
    """A schedule whose operations are of the kinds `ops` (on objects ``0..indexes-1``;
    fewer indexes make operations on one object meet more often), and whose reconciles end
    in `outcomes`."""
    if manager is None:
        manager = draw(st.booleans())
    kinds = [k for k in ops if k != "sigterm" and (manager or k != "partition")]
    op_list = draw(
        st.lists(st.one_of(*[_op(k, indexes) for k in kinds]), min_size=min_ops, max_size=max_ops)
    )
    if "sigterm" in ops and draw(st.booleans()):  # one stop, at any point
        at = draw(st.integers(0, len(op_list)))
        op_list = [*op_list[:at], Op(draw(STOP_DELAYS), "sigterm"), *op_list[at:]]
    outcome = st.builds(Outcome, st.sampled_from(outcomes), DURATIONS)
    scripts = draw(
        st.lists(st.lists(outcome, max_size=4).map(tuple), max_size=MAX_OBJECTS).map(tuple)
    )
    concurrency = draw(st.integers(1, 3))
    below = draw(st.integers(1, concurrency - 1)) if scheduler_below and concurrency > 1 else None
    server = ServerConfig(
        streaming=draw(st.booleans()),
        page_size=draw(st.integers(1, 3)),
        item_delay=draw(st.sampled_from([0.0, 0.1, 1.0])),
        rival_hold=draw(st.sampled_from([0.0, 10.0])) if manager else 0.0,
    )
    return Schedule(
        objects=draw(st.integers(0 if indexes == MAX_OBJECTS else 1, MAX_OBJECTS)),
        ops=tuple(op_list),
        scripts=scripts,
        threads=draw(st.booleans()) if threads is None else threads,
        concurrency=concurrency if not scheduler_below else max(concurrency, 2),
        scheduler_concurrency=below if not scheduler_below else (below or 1),
        server=server,
        manager=manager,
        controllers=draw(st.integers(1, 2)) if manager else 1,
        drain_timeout=draw(st.sampled_from([3.0, 10.0])) if manager else 10.0,
        timeout=draw(st.sampled_from([5.0, 30.0])),
    )
