"""The example operator: Widgets rendered into ConfigMaps.

A ``Widget`` (``demo.fastctl.dev/v1``, namespaced) says what a ConfigMap should contain::

    apiVersion: demo.fastctl.dev/v1
    kind: Widget
    metadata: {name: hello, namespace: default}
    spec:
      data: {greeting: "Hello from {name}", size: "3"}

The operator renders ``<widget>-rendered``, a ConfigMap whose values are the spec's values
with ``{name}`` and ``{namespace}`` filled in, owned by the Widget (a controller owner
reference, so a change to the ConfigMap triggers the Widget again and is put right). It
reports ``status.observedGeneration`` and a ``Ready`` condition, publishes an Event, and uses
a finalizer to delete the ConfigMap itself when the Widget is deleted (so it does not rely on
a garbage collector, which a bare API server does not run).

Everything goes through server-side apply with one field manager, so the operator only owns
the fields it sets and a re-render is idempotent. The operator caches its ConfigMaps
(``owns(CONFIGMAP, cache=True)``) and applies one only when the cached copy differs from
the render: a Widget reconciled again (its status written, a resync, a restart) costs no
request for its ConfigMap. The cache may lag the operator's own apply; then it applies
once more, which is harmless. Deleting does not trust the cache (a ConfigMap it has not
seen yet must still go): the cleanup always sends its DELETE.

The Widget is a typed custom resource (`Widget`, a `fastctl.CustomResource`): its CRD
(`CRD`) is generated from the model, and the reconcile gets a validated ``Widget``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import Action, Controller, generation_changed
from fastctl.demo._record import RECORD_ENV, recorded
from fastctl.kube import (
    Condition,
    CustomResource,
    KubeModel,
    PrinterColumn,
    Recorder,
    Resource,
    apply,
    apply_status,
    crd,
    delete,
    finalizer,
    get,
    owner_reference,
    set_condition,
)
from fastctl.runtime import RelatedCache

__all__ = [
    "CONFIGMAP",
    "CRD",
    "FIELD_MANAGER",
    "FINALIZER",
    "WIDGET",
    "Condition",
    "KeyValue",
    "Widget",
    "WidgetContext",
    "WidgetSpec",
    "WidgetSpecV1alpha1",
    "WidgetStatus",
    "WidgetV1alpha1",
    "install_crd",
    "make_controller",
    "reconcile",
    "widget",
]

GROUP = "demo.fastctl.dev"


class WidgetSpec(KubeModel):
    """What the rendered ConfigMap should contain."""

    data: dict[str, str] = Field(
        default_factory=dict,
        description="The ConfigMap's values; {name} and {namespace} are filled in.",
    )
    owner: str | None = Field(
        default=None,
        description="Who asked for it: the creating user, filled in by the defaulting webhook.",
    )


class KeyValue(KubeModel):
    """One value of a v1alpha1 Widget."""

    key: str
    value: str


class WidgetSpecV1alpha1(KubeModel):
    """The old shape: the values as a list of key/value pairs (v1 made it a map)."""

    values: list[KeyValue] = Field(default_factory=list)
    owner: str | None = None


class WidgetStatus(KubeModel):
    """What the operator last did."""

    observed_generation: int | None = None
    config_map: str | None = Field(default=None, description="The rendered ConfigMap.")
    conditions: list[Condition] = Field(default_factory=list)


_COLUMNS = [
    PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    PrinterColumn("ConfigMap", ".status.configMap"),
]


class Widget(CustomResource, group=GROUP, version="v1", storage=True, printer_columns=_COLUMNS):
    """A Widget: a ConfigMap to render, with its name and namespace filled in."""

    spec: WidgetSpec = Field(default_factory=WidgetSpec)
    status: WidgetStatus | None = None


class WidgetV1alpha1(
    CustomResource, group=GROUP, version="v1alpha1", kind="Widget", printer_columns=_COLUMNS
):
    """The Widget as it was first served; still served, converted to and from v1 by the
    conversion webhook (`fastctl.demo.webhooks`)."""

    spec: WidgetSpecV1alpha1 = Field(default_factory=WidgetSpecV1alpha1)
    status: WidgetStatus | None = None


WIDGET = Widget.resource()
CONFIGMAP = Resource("v1", "ConfigMap")
FIELD_MANAGER = "fastctl-widget-operator"
FINALIZER = f"{GROUP}/cleanup"

CRD: dict[str, Any] = crd(WidgetV1alpha1, Widget)
"""The Widget CRD, both versions generated from their models, v1 stored. Its conversion
stanza is the webhook's, written by `fastctl.demo.webhooks` once the server serves."""


@dataclass(frozen=True, slots=True)
class WidgetContext:
    """What every reconcile needs: the client, the Event recorder, and the cache of the
    rendered ConfigMaps (``None``: no cache, apply every time)."""

    client: ApiClient
    recorder: Recorder
    configmaps: RelatedCache | None = None


def widget(name: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    """A Widget object to create."""
    return {
        "apiVersion": WIDGET.api_version,
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"data": dict(data)},
    }


def render(obj: Widget) -> dict[str, str]:
    """The ConfigMap data for a Widget: its values with ``{name}``/``{namespace}`` filled."""
    name, namespace = obj.metadata.name or "", obj.metadata.namespace or ""
    return {
        key: value.replace("{name}", name).replace("{namespace}", namespace)
        for key, value in obj.spec.data.items()
    }


def _is_ready(obj: Widget) -> bool:
    """The status already says this generation is rendered."""
    status = obj.status
    if status is None or status.observed_generation != (obj.metadata.generation or 0):
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions)


async def reconcile(obj: Widget, ctx: WidgetContext) -> Action | None:
    """Render the Widget's ConfigMap and report status; clean up on deletion."""
    return await finalizer(
        ctx.client,
        WIDGET,
        obj,
        FINALIZER,
        apply=lambda w: _render(w, ctx),
        cleanup=lambda w: _cleanup(w, ctx),
    )


async def _render(obj: Widget, ctx: WidgetContext) -> Action | None:
    meta = obj.metadata
    name, namespace = meta.name, meta.namespace
    data = render(obj)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-rendered",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
            "ownerReferences": [owner_reference(obj)],
        },
        "data": data,
    }
    if not _rendered(ctx, obj, data):
        await apply(ctx.client, CONFIGMAP, configmap, field_manager=FIELD_MANAGER)
    if _is_ready(obj):
        return None  # status already says so: writing it again would only trigger us again
    generation = meta.generation or 0
    conditions = list(obj.status.conditions) if obj.status else []  # the cache's list: copied
    ready = Condition(
        type="Ready", status="True", reason="Rendered", message=f"rendered {len(data)} keys"
    )
    set_condition(conditions, ready, generation=generation)
    status = WidgetStatus(
        observed_generation=generation, config_map=f"{name}-rendered", conditions=conditions
    )
    await apply_status(ctx.client, WIDGET, obj, status=status, field_manager=FIELD_MANAGER)
    await ctx.recorder.publish(
        obj, reason="Rendered", note=f"rendered ConfigMap {name}-rendered", action="Apply"
    )
    return None


def _rendered(ctx: WidgetContext, obj: Widget, data: Mapping[str, str]) -> bool:
    """The cache holds this Widget's ConfigMap with exactly `data` (and our label)."""
    if ctx.configmaps is None:
        return False
    want = f"{obj.metadata.name}-rendered"
    for child in ctx.configmaps.owned_by(obj):
        meta = child["metadata"]
        if meta["name"] != want:
            continue
        labels = meta.get("labels") or {}
        return (child.get("data") or {}) == data and labels.get(
            "app.kubernetes.io/managed-by"
        ) == FIELD_MANAGER
    return False


async def _cleanup(obj: Widget, ctx: WidgetContext) -> Action | None:
    meta = obj.metadata
    await delete(ctx.client, CONFIGMAP, f"{meta.name}-rendered", namespace=meta.namespace)
    return None


def make_controller(
    client: ApiClient,
    *,
    namespace: str | None = None,
    concurrency: int = 32,
    cache: bool = True,
) -> Controller:
    """The Widget controller: Widgets primary (typed), their rendered ConfigMaps owned and
    cached (`cache`; without it every reconcile applies its ConfigMap).

    Only the changes that need a reconcile trigger one: a Widget's spec (its generation;
    a status or finalizer write does not), and any change of a ConfigMap but the ones this
    operator's own reconciles write (`ignore_own_writes`: a ConfigMap someone else edits or
    deletes is still put right). So 300 Widgets created and changed once cost about 600
    reconciles, not twice that.

    With ``FASTCTL_DEMO_RECORD=<path>`` set, every reconcile's start and end are appended to
    `path` as JSON lines (`fastctl.demo._record`), for soak runs that check the guarantees
    from outside the process."""
    recorder = Recorder(client, FIELD_MANAGER)
    record_path = os.environ.get(RECORD_ENV)
    ctl = Controller(
        client,
        Widget,
        recorded(reconcile, record_path) if record_path else reconcile,
        namespace=namespace,
        concurrency=concurrency,
        name="widget",
        recorder=recorder,
        event_filter=generation_changed,
        ignore_own_writes=True,
    ).owns(CONFIGMAP, cache=cache)
    configmaps = ctl.cache(CONFIGMAP) if cache else None
    ctl.context = WidgetContext(client, recorder, configmaps)
    return ctl


async def install_crd(
    client: ApiClient, crd: Mapping[str, Any] = CRD, *, timeout: float = 60.0
) -> None:
    """Apply a CRD (the Widget's by default) and wait until it is established (served)."""
    crd_resource = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    await apply(client, crd_resource, crd, field_manager=FIELD_MANAGER)
    deadline = asyncio.timeout(timeout)  # on the loop's clock, as the runtime's own timers
    try:
        async with deadline:
            while True:
                current = await get(client, crd_resource, crd["metadata"]["name"])
                conditions = (current.get("status") or {}).get("conditions") or ()
                if any(
                    c.get("type") == "Established" and c.get("status") == "True" for c in conditions
                ):
                    return
                await asyncio.sleep(0.2)
    except TimeoutError:
        if not deadline.expired():
            raise  # the request's own timeout, not ours
        raise TimeoutError(
            f"CRD {crd['metadata']['name']} not established in {timeout} s"
        ) from None
