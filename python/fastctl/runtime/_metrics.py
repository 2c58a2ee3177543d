"""Prometheus metrics with the names dashboards already use (client-go's ``workqueue_*`` and
controller-runtime's ``controller_runtime_*`` families).

Nothing here runs per event. The scheduler keeps its own counters and duration histograms in
Rust; `ReconcileCounters` is a few plain integer fields the controller bumps per result; and
`FastctlCollector` reads both only when Prometheus scrapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from fastctl._core import Histogram, SchedulerStats

__all__ = ["FastctlCollector", "MetricsSource", "ReconcileCounters"]

RESULTS = ("success", "error", "requeue", "requeue_after")
"""The ``result`` label values of ``controller_runtime_reconcile_total``, as in
controller-runtime (``requeue`` is an error-free retry decided by an error policy, which
fastctl does not have, so it stays 0; it is exported so dashboards find every series)."""


@dataclass(slots=True)
class ReconcileCounters:
    """Per-controller reconcile outcomes, bumped once per result (plain ints: no locks, no
    calls into prometheus_client on the hot path)."""

    success: int = 0
    error: int = 0
    requeue: int = 0
    requeue_after: int = 0
    watch_errors: int = 0
    event_filter_errors: int = 0
    cache_waits: int = 0
    """Reconciles that started late, held until their caches showed their object's last
    writes (`fastctl.runtime._read_your_writes`), or until the bound."""
    cache_wait_expired: int = 0
    """Reconciles that started once the bound had passed, on caches that did not show
    their object's last writes yet."""
    cache_wait_seconds: float = 0.0
    """The time those reconciles were held, in all."""
    requeue_holds: int = 0
    """Requeues and retries held back by the controller's overall bound
    (`ApplierConfig.requeue_limit`, `fastctl._requeue_limit`)."""
    requeue_hold_seconds: float = 0.0
    """The time they were held, in all."""

    def requeue_held(self, seconds: float) -> None:
        """One requeue or retry held back `seconds` by the overall bound."""
        self.requeue_holds += 1
        self.requeue_hold_seconds += seconds

    def count(self, *, error: bool, requeue_after: float | None) -> None:
        if error:
            self.error += 1
        elif requeue_after is not None:
            self.requeue_after += 1
        else:
            self.success += 1


class MetricsSource(Protocol):
    """What a controller offers the collector."""

    @property
    def name(self) -> str: ...
    @property
    def concurrency(self) -> int: ...

    @property
    def counters(self) -> ReconcileCounters: ...

    def scheduler_stats(self) -> SchedulerStats: ...


def _buckets(hist: Histogram) -> list[tuple[str, float]]:
    return [("+Inf" if math.isinf(le) else repr(le), float(n)) for le, n in hist["buckets"]]


class FastctlCollector(Collector):
    """A prometheus_client collector over the controllers `sources()` returns at scrape time."""

    def __init__(self, sources: Callable[[], Iterable[MetricsSource]]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        queue_labels = ["name", "controller"]
        depth = GaugeMetricFamily(
            "workqueue_depth", "Current depth of workqueue (ready keys)", labels=queue_labels
        )
        delayed = GaugeMetricFamily(
            "workqueue_delayed_items",
            "Keys waiting for a delay (requeue-after, backoff, debounce) to pass",
            labels=queue_labels,
        )
        adds = CounterMetricFamily(
            "workqueue_adds", "Total number of adds handled by workqueue", labels=queue_labels
        )
        retries = CounterMetricFamily(
            "workqueue_retries", "Total number of retries handled by workqueue", labels=queue_labels
        )
        queue_duration = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long in seconds a key stays ready in workqueue before being requested",
            labels=queue_labels,
        )
        work_duration = HistogramMetricFamily(
            "workqueue_work_duration_seconds",
            "How long in seconds processing a key from workqueue takes",
            labels=queue_labels,
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress that has not been observed by work_duration",
            labels=queue_labels,
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest running processor for workqueue has been running",
            labels=queue_labels,
        )
        reconcile_total = CounterMetricFamily(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            labels=["controller", "result"],
        )
        reconcile_errors = CounterMetricFamily(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            labels=["controller"],
        )
        reconcile_time = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            labels=["controller"],
        )
        max_concurrent = GaugeMetricFamily(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller (0: unbounded)",
            labels=["controller"],
        )
        watch_errors = CounterMetricFamily(
            "fastctl_watch_errors",
            "List/watch errors the controller's watches retried (connection, 5xx, 403, 410)",
            labels=["controller"],
        )
        filter_errors = CounterMetricFamily(
            "fastctl_event_filter_errors",
            "Event filter predicates that raised or returned a non-bool (the event passed)",
            labels=["controller"],
        )
        cache_waits = CounterMetricFamily(
            "fastctl_cache_waits",
            "Reconciles held back until the cache showed their object's last writes",
            labels=["controller"],
        )
        cache_wait_expired = CounterMetricFamily(
            "fastctl_cache_wait_expired",
            "Reconciles started after the bound on a cache without their object's last writes",
            labels=["controller"],
        )
        cache_wait_seconds = CounterMetricFamily(
            "fastctl_cache_wait_seconds",
            "Seconds reconciles were held back for their cache, in all",
            labels=["controller"],
        )
        requeue_holds = CounterMetricFamily(
            "fastctl_requeue_limit_holds",
            "Requeues and retries held back by the controller's overall rate bound",
            labels=["controller"],
        )
        requeue_hold_seconds = CounterMetricFamily(
            "fastctl_requeue_limit_hold_seconds",
            "Seconds requeues and retries were held back by the overall bound, in all",
            labels=["controller"],
        )
        active = GaugeMetricFamily(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            labels=["controller"],
        )
        for source in self._sources():
            name = source.name
            stats = source.scheduler_stats()
            labels = [name, name]
            depth.add_metric(labels, stats["depth"])  # client-go: in flight is not queued
            delayed.add_metric(labels, stats["waiting"])
            adds.add_metric(labels, stats["adds_total"])
            retries.add_metric(labels, stats["retries_total"])
            queue_duration.add_metric(
                labels, _buckets(stats["queue_duration"]), stats["queue_duration"]["sum"]
            )
            work_duration.add_metric(
                labels, _buckets(stats["work_duration"]), stats["work_duration"]["sum"]
            )
            unfinished.add_metric(labels, stats["unfinished_work"])
            longest.add_metric(labels, stats["longest_running"])
            counters = source.counters
            for result in RESULTS:
                reconcile_total.add_metric([name, result], getattr(counters, result))
            reconcile_errors.add_metric([name], counters.error)
            reconcile_time.add_metric(
                [name], _buckets(stats["work_duration"]), stats["work_duration"]["sum"]
            )
            max_concurrent.add_metric([name], source.concurrency)
            active.add_metric([name], stats["in_flight"])
            watch_errors.add_metric([name], counters.watch_errors)
            filter_errors.add_metric([name], counters.event_filter_errors)
            cache_waits.add_metric([name], counters.cache_waits)
            cache_wait_expired.add_metric([name], counters.cache_wait_expired)
            cache_wait_seconds.add_metric([name], counters.cache_wait_seconds)
            requeue_holds.add_metric([name], counters.requeue_holds)
            requeue_hold_seconds.add_metric([name], counters.requeue_hold_seconds)
        yield from (
            depth,
            delayed,
            adds,
            retries,
            queue_duration,
            work_duration,
            unfinished,
            longest,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            max_concurrent,
            active,
            watch_errors,
            filter_errors,
            cache_waits,
            cache_wait_expired,
            cache_wait_seconds,
            requeue_holds,
            requeue_hold_seconds,
        )
