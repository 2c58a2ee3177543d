"""Admission and conversion webhooks, served and certified by fastctl.

Register handlers on a `Webhooks` (validating, mutating, CRD conversion), serve them with
a `WebhookServer` (TLS on aiohttp, in the operator's process or alone), certify it with a
`ServingCertificate` (made by fastctl, or files that are reloaded on change), and tell the
API server about them with `configurations` / `conversion`, or `install` them; a
`ManagedWebhookServer` does all of it itself, installing once it serves.
See docs/webhooks.md.
"""

from fastctl._tls import ServingCertificate
from fastctl.webhook._admission import AdmissionWebhook
from fastctl.webhook._configuration import (
    Service,
    configurations,
    conversion,
    install,
    uninstall,
)
from fastctl.webhook._conversion import Converter
from fastctl.webhook._jsonpatch import diff as json_patch
from fastctl.webhook._managed import ManagedWebhookServer, shared_secret_of
from fastctl.webhook._registry import Webhooks
from fastctl.webhook._review import AdmissionRequest, Allow, Deny
from fastctl.webhook._server import MAX_BODY_BYTES, WebhookServer
from fastctl.webhook._shared_certificate import SharedSecret

__all__ = [
    "MAX_BODY_BYTES",
    "AdmissionRequest",
    "AdmissionWebhook",
    "Allow",
    "Converter",
    "Deny",
    "ManagedWebhookServer",
    "Service",
    "ServingCertificate",
    "SharedSecret",
    "WebhookServer",
    "Webhooks",
    "configurations",
    "conversion",
    "install",
    "json_patch",
    "shared_secret_of",
    "uninstall",
]
