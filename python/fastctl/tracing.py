"""OpenTelemetry tracing of controllers and webhooks (docs/tracing.md): the switch.

A `fastctl.Manager` takes it as ``tracing=`` (``fastctl run --tracing``) and holds it on
while it runs; `enable` and `disable` are the same switch for a `Controller` or a
`fastctl.webhook.WebhookServer` run without a Manager. It needs the ``otel`` extra
(``pip install 'fastctl[otel]'``); off, nothing imports OpenTelemetry and no span work is
done.
"""

from __future__ import annotations

from fastctl._tracing import disable, enable, is_enabled

__all__ = ["disable", "enable", "is_enabled"]
