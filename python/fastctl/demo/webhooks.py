"""The Widget's webhooks: validation, defaulting and conversion between its two versions.

- **validate** (``widgets.validate.demo.fastctl.dev``): a Widget whose ``spec.data`` has a
  key a ConfigMap cannot have, or more than `MAX_KEYS` keys, is refused with a message that
  says which; the reconcile would otherwise fail on every retry, long after the user left.
  An empty ``spec.data`` is admitted with a warning (it renders an empty ConfigMap).
- **default** (``widgets.default.demo.fastctl.dev``, CREATE): fills ``spec.owner`` with the
  creating user's name, which no schema default can know.
- **convert** (``widgets.demo.fastctl.dev``, hub ``v1``): v1alpha1 keeps the values as a
  list of key/value pairs, v1 (stored) as a map. Both are served; the API server converts
  through this webhook whenever a client reads or writes the version not stored. A
  v1alpha1 list that names a key twice has no v1 form: its conversion fails, and the API
  server refuses the write with the message.

The handlers are typed: each validates the object into its model (`fastctl.demo.widgets`)
and dumps the model it builds. `serve` is the managed server the demo runs in its process:
a self-signed CA, the configurations and the CRD's conversion stanza installed with that
CA once it serves.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl.demo.widgets import (
    GROUP,
    WIDGET,
    Widget,
    WidgetSpec,
    WidgetSpecV1alpha1,
)
from fastctl.webhook import (
    AdmissionRequest,
    Allow,
    Deny,
    ManagedWebhookServer,
    Webhooks,
)

__all__ = [
    "CONFIGURATION",
    "DEFAULT",
    "MAX_KEYS",
    "VALIDATE",
    "make_webhooks",
    "serve",
    "to_v1",
    "to_v1alpha1",
]

MAX_KEYS = 64
"""The most values one Widget renders."""
VALIDATE = f"widgets.validate.{GROUP}"
DEFAULT = f"widgets.default.{GROUP}"
CONFIGURATION = "fastctl-demo-widgets"
"""The name of the Validating- and MutatingWebhookConfiguration."""

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def validate(request: AdmissionRequest) -> Allow | Deny:
    """Refuse what the reconcile could never render; warn about an empty Widget."""
    widget = Widget.model_validate(request.object)
    data = widget.spec.data
    bad = sorted(key for key in data if not _CONFIGMAP_KEY.match(key))
    if bad:
        return Deny(
            f"spec.data key {bad[0]!r} is not a valid ConfigMap key (letters, digits, "
            "'-', '_' and '.', at most 253)"
        )
    if len(data) > MAX_KEYS:
        return Deny(f"spec.data has {len(data)} keys; a Widget renders at most {MAX_KEYS}")
    if not data:
        return Allow(warnings=["spec.data is empty: the rendered ConfigMap will have no keys"])
    return Allow()


def default(request: AdmissionRequest) -> dict[str, Any]:
    """Fill ``spec.owner`` with the creating user, when the Widget does not say."""
    obj = request.object
    assert obj is not None  # CREATE only
    spec = obj.setdefault("spec", {})
    if not spec.get("owner"):
        spec["owner"] = str(request.user_info.get("username") or "unknown")
    return obj


def _dump(model: WidgetSpec | WidgetSpecV1alpha1) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return dumped


def to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """v1alpha1 → v1: the list of pairs becomes the map (a key named twice has no v1 form)."""
    old = WidgetSpecV1alpha1.model_validate(obj.get("spec") or {})
    data: dict[str, str] = {}
    for pair in old.values:
        if pair.key in data:
            raise ValueError(f"spec.values names the key {pair.key!r} twice")
        data[pair.key] = pair.value
    obj["spec"] = _dump(WidgetSpec(data=data, owner=old.owner))
    return obj


def to_v1alpha1(obj: dict[str, Any]) -> dict[str, Any]:
    """v1 → v1alpha1: the map becomes the list of pairs, sorted by key."""
    new = WidgetSpec.model_validate(obj.get("spec") or {})
    values = [{"key": key, "value": new.data[key]} for key in sorted(new.data)]
    obj["spec"] = _dump(WidgetSpecV1alpha1.model_validate({"values": values, "owner": new.owner}))
    return obj


def make_webhooks(*, namespace: str | None = None) -> Webhooks:
    """The Widget's webhooks; with `namespace`, the admission ones only for that namespace
    (tests on a shared API server)."""
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}} if namespace else None
    hooks = Webhooks()
    hooks.validating(WIDGET, name=VALIDATE, namespace_selector=selector)(validate)
    hooks.mutating(WIDGET, name=DEFAULT, operations=["CREATE"], namespace_selector=selector)(
        default
    )
    converter = hooks.conversion(f"{WIDGET.plural}.{GROUP}", hub="v1")
    converter.add("v1alpha1", "v1", to_v1)
    converter.add("v1", "v1alpha1", to_v1alpha1)
    return hooks


def serve(
    client: ApiClient,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    namespace: str | None = None,
    name: str = CONFIGURATION,
) -> ManagedWebhookServer:
    """The managed server of the Widget's webhooks (start it; it installs itself), called
    by the API server at ``https://<host>:<port>``."""
    return ManagedWebhookServer(
        make_webhooks(namespace=namespace), client, name, host=host, port=port
    )
