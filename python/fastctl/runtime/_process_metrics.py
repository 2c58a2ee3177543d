"""The process's own metrics, which controller-runtime registers by default: what it costs
(``process_*``) and what it asks of the API server (``rest_client_*``).

- ``process_resident_memory_bytes``, ``process_cpu_seconds_total``, ``process_open_fds``,
  ``process_max_fds``, ``process_start_time_seconds``, ``process_virtual_memory_bytes``:
  prometheus_client's `ProcessCollector`, the same names as Go's. It reads ``/proc``, so it
  reports nothing on a system without one (macOS, Windows): the series are then absent,
  not zero.
- ``python_info`` and ``python_gc_*``: the interpreter, in place of Go's ``go_*``.
- ``rest_client_requests_total{code,method,host}`` and
  ``rest_client_request_duration_seconds{verb,host}``: every request fastctl sent,
  ``rest_client_request_retries_total{code,verb,host}``: the object calls sent again
  after a 429, a 503 or a reset, and ``rest_client_rate_limiter_duration_seconds{verb,host}``:
  what a rate-limited client's requests waited for their token; read from
  `fastctl.kube._request_metrics` when Prometheus scrapes.

prometheus_client puts the first two in its global ``REGISTRY`` at import; a Manager has a
registry of its own, so it registers them there, and leaves out what the registry it is
given already has (the global one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from fastctl.kube._request_metrics import BUCKETS, REQUESTS, LatencyTotals, RequestTotals

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["ClientRequestCollector", "register_process_metrics"]


class ClientRequestCollector(Collector):
    """client-go's request metrics over `totals` (the process's, by default)."""

    def __init__(self, totals: RequestTotals = REQUESTS) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            labels=["code", "method", "host"],
        )
        for (code, method, host), count in sorted(self._totals.counts().items()):
            requests.add_metric([code, method, host], count)
        latency = HistogramMetricFamily(
            "rest_client_request_duration_seconds",
            "Request latency in seconds (until the response headers), by verb and host.",
            labels=["verb", "host"],
        )
        for (verb, host), histogram in sorted(self._totals.latencies().items()):
            latency.add_metric([verb, host], _cumulative(histogram), histogram.total)
        retries = CounterMetricFamily(
            "rest_client_request_retries",
            "Number of request retries, partitioned by status code, verb, and host.",
            labels=["code", "verb", "host"],
        )
        for (code, verb, host), count in sorted(self._totals.retries().items()):
            retries.add_metric([code, verb, host], count)
        throttled = HistogramMetricFamily(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds, by verb and host.",
            labels=["verb", "host"],
        )
        for (verb, host), histogram in sorted(self._totals.throttled().items()):
            throttled.add_metric([verb, host], _cumulative(histogram), histogram.total)
        yield requests
        yield latency
        yield retries
        yield throttled


def _cumulative(histogram: LatencyTotals) -> list[tuple[str, float]]:
    """`histogram`'s buckets as Prometheus wants them: cumulative, ``+Inf`` last."""
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, count in zip((*BUCKETS, float("inf")), histogram.counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return buckets


def register_process_metrics(registry: CollectorRegistry) -> None:
    """Register the process and client request collectors in `registry`, leaving out the
    process ones it has already (prometheus_client's global registry has them)."""
    # prometheus_client's whole package makes these: imported when a Manager is made, not
    # with fastctl (`fastctl.kube._lazy_import`).
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        with contextlib.suppress(ValueError):  # its names are taken: the registry has it
            registry.register(collector)
    registry.register(ClientRequestCollector())
