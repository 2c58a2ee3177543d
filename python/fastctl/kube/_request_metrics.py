"""Counts of the requests fastctl sends to API servers, for ``rest_client_*`` metrics.

client-go counts every request its REST client sends (``rest_client_requests_total`` by
code, method and host, and a latency histogram by verb and host), and controller-runtime
exports them by default: dashboards and alerts for operators are written against those
names. fastctl sends every request through one function (`fastctl.kube._http.request`),
which reports each one here; the runtime's collector reads the totals when Prometheus
scrapes.

The totals are per process, as client-go's are: every client, every cluster, the watches,
the Lease clients and the reconciles' own calls. Recording is a lock and two dict updates,
so it costs nothing next to the request; it stays out of prometheus_client, whose metric
objects would add label lookups per request for the same result.

What is timed is what a caller waits for before it can read the answer: from sending the
request until its status line and headers arrive. A watch is timed to its opening, not for
as long as it streams. A request that gets no answer (connection refused, timeout,
cancelled) counts with the code ``<error>``, as client-go counts it.

Beside them, as client-go counts them: each retry of an object call (`record_retry`, by the
code of the failure it retries and the verb: ``rest_client_request_retries_total``), and the
time requests of a rate-limited client waited for their token (`record_throttle`:
``rest_client_rate_limiter_duration_seconds``). A retried call counts once per attempt in
``rest_client_requests_total`` and once per retry in the retries.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

__all__ = ["BUCKETS", "ERROR_CODE", "REQUESTS", "LatencyTotals", "RequestTotals"]

BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""Upper bounds of the latency histogram, in seconds: client-go's, so a dashboard's
quantiles over ``rest_client_request_duration_seconds`` mean the same for both."""

ERROR_CODE = "<error>"
"""The ``code`` of a request that got no HTTP answer (client-go's spelling)."""


@dataclass(slots=True)
class LatencyTotals:
    """One histogram: a count per bucket of `BUCKETS` (not cumulative) and one past the
    last, with their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds


class RequestTotals:
    """What every request sent so far added up to; shared by the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # several event loops (threads) may send requests
        self._counts: dict[tuple[str, str, str], int] = {}
        self._latency: dict[tuple[str, str], LatencyTotals] = {}
        self._retries: dict[tuple[str, str, str], int] = {}
        self._throttled: dict[tuple[str, str], LatencyTotals] = {}

    def record(self, method: str, server: str, code: int | str, seconds: float) -> None:
        """One request to the API server at `server` (a base URL; its ``host:port`` is the
        label) answered with `code` (an HTTP status, or `ERROR_CODE`) after `seconds`."""
        host = _host(server)
        key = (str(code), method, host)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            latency = self._latency.get((method, host))
            if latency is None:
                latency = self._latency[(method, host)] = LatencyTotals()
            latency.observe(seconds)

    def record_retry(self, method: str, server: str, code: int | str) -> None:
        """One call to `server` sent again after a failure with `code` (an HTTP status, or
        `ERROR_CODE` for a connection that gave no answer)."""
        key = (str(code), method, _host(server))
        with self._lock:
            self._retries[key] = self._retries.get(key, 0) + 1

    def record_throttle(self, method: str, server: str, seconds: float) -> None:
        """One request to `server` waited `seconds` for its client's rate limit."""
        key = (method, _host(server))
        with self._lock:
            waits = self._throttled.get(key)
            if waits is None:
                waits = self._throttled[key] = LatencyTotals()
            waits.observe(seconds)

    def retries(self) -> dict[tuple[str, str, str], int]:
        """(code, verb, host) -> retries, a copy."""
        with self._lock:
            return dict(self._retries)

    def throttled(self) -> dict[tuple[str, str], LatencyTotals]:
        """(verb, host) -> histogram of the rate limiter's waits, copies."""
        with self._lock:
            return {
                key: LatencyTotals(list(value.counts), value.total)
                for key, value in self._throttled.items()
            }

    def counts(self) -> dict[tuple[str, str, str], int]:
        """(code, method, host) -> requests, a copy."""
        with self._lock:
            return dict(self._counts)

    def latencies(self) -> dict[tuple[str, str], LatencyTotals]:
        """(verb, host) -> histogram, copies."""
        with self._lock:
            return {
                key: LatencyTotals(list(value.counts), value.total)
                for key, value in self._latency.items()
            }


@lru_cache(maxsize=64)
def _host(server: str) -> str:
    """``host:port`` of `server`, the ``host`` label (client-go's ``URL.Host``)."""
    return urlsplit(server).netloc


REQUESTS = RequestTotals()
"""The process's totals: `fastctl.kube._http.request` records into it."""
