"""The Manager's own metrics: whether this replica leads."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fastctl.runtime.leader import LeaderElection, LeaderElector

__all__ = ["LeaderCollector"]


class LeaderCollector(Collector):
    """``leader_election_master_status{name}``: 1 while this replica leads (the gauge
    client-go's leader election exports); nothing without leader election."""

    def __init__(
        self,
        election: Callable[[], LeaderElection | None],
        elector: Callable[[], LeaderElector | None],
    ) -> None:
        self._election = election
        self._elector = elector

    def collect(self) -> Iterator[Metric]:
        config = self._election()
        if config is None:
            return
        gauge = GaugeMetricFamily(
            "leader_election_master_status",
            "1 if this replica is the leader of the lease, else 0",
            labels=["name"],
        )
        elector = self._elector()
        gauge.add_metric([config.name], 1.0 if elector is not None and elector.is_leader else 0.0)
        yield gauge
