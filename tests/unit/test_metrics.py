"""The Prometheus collector over a real scheduler in a known state: every workqueue and
controller series it exports, with its value (no API server; the scrape over HTTP of a
running Manager is in tests/kube/test_manager.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from fastctl import Scheduler
from fastctl.runtime._metrics import FastctlCollector, ReconcileCounters

if TYPE_CHECKING:
    from fastctl._core import SchedulerStats

NOW = 4.0


class _Source:
    """A controller as the collector sees it, its scheduler's stats taken at `NOW`."""

    name = "cm"
    concurrency = 8

    def __init__(self, scheduler: Scheduler, counters: ReconcileCounters) -> None:
        self._scheduler = scheduler
        self.counters = counters

    def scheduler_stats(self) -> SchedulerStats:
        return self._scheduler.stats(now=NOW)


def _scrape() -> CollectorRegistry:
    s = Scheduler(concurrency=0, backoff_base=10.0)  # c backs off past NOW
    for key in ("a", "b", "c", "d", "e"):
        s.add(key, now=0.0)
    s.add("w", after=50.0, now=0.0)  # waiting
    assert s.pop_many(3, now=1.0) == ["a", "b", "c"]  # each ready for 1 s
    s.add("a", now=1.5)  # in flight and dirty
    s.done("c", now=2.0, failed=True)  # one retry through the backoff, 1 s of work
    # Now: d, e ready; w (and c, backing off) waiting; a (dirty) and b in flight since 1.
    counters = ReconcileCounters(
        success=5,
        error=2,
        requeue_after=1,
        watch_errors=4,
        cache_waits=3,
        cache_wait_expired=1,
        cache_wait_seconds=2.5,
    )
    registry = CollectorRegistry()
    registry.register(FastctlCollector(lambda: [_Source(s, counters)]))
    return registry


def test_workqueue_depth_counts_ready_keys_only_as_client_go_does() -> None:
    """client-go's depth is the queue's length: keys in flight (dirty or not) and keys
    waiting for a delay are not in it."""
    registry = _scrape()
    queue = {"name": "cm", "controller": "cm"}
    assert registry.get_sample_value("workqueue_depth", queue) == 2
    assert registry.get_sample_value("workqueue_delayed_items", queue) == 2


def test_every_series_has_its_known_value() -> None:
    registry = _scrape()
    queue = {"name": "cm", "controller": "cm"}
    ctl = {"controller": "cm"}
    expected: list[tuple[str, dict[str, str], float]] = [
        ("workqueue_adds_total", queue, 7),
        ("workqueue_retries_total", queue, 1),
        ("workqueue_queue_duration_seconds_count", queue, 3),
        ("workqueue_queue_duration_seconds_sum", queue, 3.0),
        ("workqueue_work_duration_seconds_count", queue, 1),
        ("workqueue_work_duration_seconds_sum", queue, 1.0),
        ("workqueue_unfinished_work_seconds", queue, 6.0),  # a and b, 3 s each
        ("workqueue_longest_running_processor_seconds", queue, 3.0),
        ("controller_runtime_active_workers", ctl, 2),
        ("controller_runtime_max_concurrent_reconciles", ctl, 8),
        ("controller_runtime_reconcile_errors_total", ctl, 2),
        ("controller_runtime_reconcile_time_seconds_count", ctl, 1),
        ("fastctl_watch_errors_total", ctl, 4),
        ("fastctl_cache_waits_total", ctl, 3),
        ("fastctl_cache_wait_expired_total", ctl, 1),
        ("fastctl_cache_wait_seconds_total", ctl, 2.5),
        ("controller_runtime_reconcile_total", {**ctl, "result": "success"}, 5),
        ("controller_runtime_reconcile_total", {**ctl, "result": "error"}, 2),
        ("controller_runtime_reconcile_total", {**ctl, "result": "requeue"}, 0),
        ("controller_runtime_reconcile_total", {**ctl, "result": "requeue_after"}, 1),
    ]
    got = [(name, labels, registry.get_sample_value(name, labels)) for name, labels, _ in expected]
    assert got == expected
