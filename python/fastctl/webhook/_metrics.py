"""The webhook server's metrics, under controller-runtime's names so its dashboards work:

- ``controller_runtime_webhook_requests_total{webhook, code}``: requests by path and HTTP code;
- ``controller_runtime_webhook_latency_seconds{webhook}``: how long answering took;
- ``controller_runtime_webhook_requests_in_flight{webhook}``: requests being answered.

``webhook`` is the path (``/validate/<name>``), as in controller-runtime.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["WebhookMetrics"]

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class WebhookMetrics:
    """The three families, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code",
            ["webhook", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served",
            ["webhook"],
            registry=registry,
        )
