"""The environment the Manager builds for each of its controllers (`Environment`).

A controller run by a Manager does not open its own watches or decide on its own whether it
may reconcile: the Manager hands it the shared watches of its resources, the leader gate
when it is elected, and a shard assignment (a `ShardGate` on the Manager's member) when it
is sharded. Built once per run, before any controller starts, so every controller of one
process sees the same member and the same leadership.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from fastctl.runtime.controller import Controller
from fastctl.runtime.controller._environment import Environment, ShardAssignment
from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._rules import Sharding


def build_environments(
    controllers: Iterable[Controller],
    shared: Mapping[str, Mapping[int | None, object]],
    *,
    sharded: Callable[[Controller], bool],
    elected: Callable[[Controller], bool],
    leading: asyncio.Event,
    member: ShardMember | None,
    sharding: Sharding | None,
    gates: dict[str, ShardGate],
) -> dict[str, Environment]:
    """The environment of each controller, by name: its shared watches (`shared`), the
    leader gate (`leading`) if it is elected, and a shard gate on `member` if it is sharded
    (put into `gates` too: the sharding metrics report each one)."""
    envs: dict[str, Environment] = {}
    for ctl in controllers:
        assignment = None
        if sharded(ctl):
            assert member is not None
            assert sharding is not None
            gate = ShardGate(member, sharding.key, sharding.slots)
            gates[ctl.name] = gate
            assignment = ShardAssignment(gate, member)
        envs[ctl.name] = Environment(
            ctl.client,
            sources=shared.get(ctl.name, {}),  # type: ignore[arg-type]
            leader_gate=leading if elected(ctl) else None,
            shard=assignment,
        )
    return envs
