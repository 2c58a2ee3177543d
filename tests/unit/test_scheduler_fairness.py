"""Fair groups, as a property of the Rust scheduler on its own (the model comparison checks
the exact order; this checks what the order is for).

Among ready keys of one priority, a group with ready keys waits at most for the groups
ahead of it in the ring, each taking at most its weight: from the moment a group has a ready
key (or was last served), it is served again before other groups take more than the sum of
the weights of the groups that had ready keys meanwhile. With weight 1 everywhere, that is
fewer pops than there are active groups. A flood in one group therefore cannot hold up the
others, whatever the order keys were added in.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fastctl import Scheduler

GROUPS = ["a", "b", "c", "d"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(GROUPS), st.integers(1, 30)),
        st.tuples(st.just("pop"), st.just(""), st.integers(1, 12)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, weights=st.dictionaries(st.sampled_from(GROUPS), st.integers(1, 4)))
def test_no_group_waits_longer_than_the_others_weights(
    ops: list[tuple[str, str, int]], weights: dict[str, int]
) -> None:
    s = Scheduler(max_wait=float("inf"), group_weights=weights)
    weight = {g: weights.get(g, 1) for g in GROUPS}
    ready: dict[str, int] = dict.fromkeys(GROUPS, 0)  # the test's own count of ready keys
    waited: dict[str, int] = dict.fromkeys(GROUPS, 0)  # pops by others since served/active
    seen: dict[str, set[str]] = {g: set() for g in GROUPS}  # others active meanwhile
    serial = 0
    for op, group, n in ops:
        if op == "add":
            keys = [f"{group}/{serial + i}" for i in range(n)]
            serial += n
            if ready[group] == 0:
                waited[group], seen[group] = 0, set()
            s.add_many(keys, group=group, now=0.0)
            ready[group] += n
            continue
        for key in s.pop_many(n, now=0.0):
            served = key.split("/")[0]
            ready[served] -= 1
            waited[served], seen[served] = 0, set()
            for g in GROUPS:
                if g != served and ready[g]:
                    waited[g] += 1
                    seen[g] |= {h for h in GROUPS if h != g and ready[h]} | {served}
                    bound = sum(weight[h] for h in seen[g])
                    assert waited[g] <= bound, (g, waited[g], bound, seen[g])
    assert len(s) == sum(ready.values())


def test_a_small_tenant_is_served_within_the_active_groups_while_a_big_one_floods() -> None:
    s = Scheduler(max_wait=float("inf"))
    s.add_many([f"big/{i}" for i in range(10_000)], group="big", now=0.0)
    s.add_many([f"mid/{i}" for i in range(100)], group="mid", now=0.0)
    s.add_many([f"small/{i}" for i in range(10)], group="small", now=0.0)
    order = s.pop_many(60, now=0.0)
    small = [i for i, k in enumerate(order) if k.startswith("small/")]
    # Three active groups: a small key every third pop, from the first round on.
    assert small == list(range(2, 30, 3)), small
    # Unfair (no groups): the same keys wait behind the whole flood.
    plain = Scheduler(max_wait=float("inf"))
    plain.add_many([f"big/{i}" for i in range(10_000)], now=0.0)
    plain.add_many([f"small/{i}" for i in range(10)], now=0.0)
    assert not any(k.startswith("small/") for k in plain.pop_many(9_000, now=0.0))
