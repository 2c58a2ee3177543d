"""The sharding metrics of a Manager, read only when Prometheus scrapes:

- ``fastctl_shard_slots_served{group}``: the slots this replica serves now;
- ``fastctl_shard_members{group}``: the live members it counts (itself included);
- ``fastctl_shard_handovers_total{group,direction}``: slots gained (``in``) and lost
  (``out``), the moves a join, a leave or an expiry causes;
- ``fastctl_shard_handover_duration_seconds{group,direction}``: how long each of those
  took: ``out`` from stopping to serve a slot to a write that no longer publishes it
  (drained, then unpublished), ``in`` from the assignment wanting a slot to serving it;
- ``fastctl_shard_events_received_total{controller}``: watch events (changes, deletions)
  the sharded primary watch delivered: about ``1/N`` of all with N replicas, whether the
  server or the client filters;
- ``fastctl_shard_objects_listed_total{controller}``: objects its lists delivered;
- ``fastctl_shard_filtered_total{controller}``: objects and events the client-side filter
  dropped (0 while the server shards; with the two above, what the server sent);
- ``fastctl_shard_relists_total{controller}``: primary watches started with a new set of
  slots.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fastctl.runtime.sharding._gate import ShardGate
from fastctl.runtime.sharding._member import ShardMember

__all__ = ["ShardingCollector"]


class ShardingCollector(Collector):
    """Reads the member and each controller's gate at scrape time."""

    def __init__(
        self,
        member: Callable[[], ShardMember | None],
        gates: Callable[[], Iterable[tuple[str, ShardGate]]],
    ) -> None:
        self._member = member
        self._gates = gates

    def collect(self) -> Iterator[Metric]:
        member = self._member()
        if member is None:
            return
        group = member.config.group
        served = GaugeMetricFamily(
            "fastctl_shard_slots_served", "Slots this replica serves", labels=["group"]
        )
        served.add_metric([group], float(len(member.serving)))
        members = GaugeMetricFamily(
            "fastctl_shard_members", "Live members of the shard group", labels=["group"]
        )
        members.add_metric([group], float(len(member.members)))
        handovers = CounterMetricFamily(
            "fastctl_shard_handovers",
            "Slots this replica started (in) or stopped (out) serving",
            labels=["group", "direction"],
        )
        handovers.add_metric([group, "in"], float(member.gained))
        handovers.add_metric([group, "out"], float(member.lost))
        durations = HistogramMetricFamily(
            "fastctl_shard_handover_duration_seconds",
            "How long handovers took: out, slot stopped to unpublished; in, wanted to served",
            labels=["group", "direction"],
        )
        times = member.handovers
        for direction, histogram in (("in", times.incoming), ("out", times.outgoing)):
            durations.add_metric(
                [group, direction], histogram.cumulative(), sum_value=histogram.total
            )
        received = CounterMetricFamily(
            "fastctl_shard_events_received",
            "Watch events the sharded primary watch delivered",
            labels=["controller"],
        )
        listed = CounterMetricFamily(
            "fastctl_shard_objects_listed",
            "Objects the sharded primary watch's lists delivered",
            labels=["controller"],
        )
        filtered = CounterMetricFamily(
            "fastctl_shard_filtered",
            "Objects and events the client-side shard filter dropped",
            labels=["controller"],
        )
        relists = CounterMetricFamily(
            "fastctl_shard_relists",
            "Primary watches started over with a new set of slots",
            labels=["controller"],
        )
        for name, gate in self._gates():
            received.add_metric([name], float(gate.received))
            listed.add_metric([name], float(gate.listed))
            relists.add_metric([name], float(gate.relists))
            filtered.add_metric([name], float(gate.filtered))
        yield from (served, members, handovers, durations, received, listed, filtered, relists)
