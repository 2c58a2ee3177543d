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
the fields it sets and a re-render is idempotent.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Action, Controller
from fastctl.demo._record import RECORD_ENV, recorded
from fastctl.kube import Recorder, Resource, apply, apply_status, delete, finalizer, get

__all__ = [
    "CONFIGMAP",
    "CRD",
    "FIELD_MANAGER",
    "FINALIZER",
    "WIDGET",
    "WidgetContext",
    "install_crd",
    "make_controller",
    "reconcile",
    "widget",
]

GROUP = "demo.fastctl.dev"
WIDGET = Resource(f"{GROUP}/v1", "Widget")
CONFIGMAP = Resource("v1", "ConfigMap")
FIELD_MANAGER = "fastctl-widget-operator"
FINALIZER = f"{GROUP}/cleanup"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "data": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    }
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
                "additionalPrinterColumns": [
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "ConfigMap", "type": "string", "jsonPath": ".status.configMap"},
                ],
            }
        ],
    },
}


@dataclass(frozen=True, slots=True)
class WidgetContext:
    """What every reconcile needs: the client and the Event recorder."""

    client: ApiClient
    recorder: Recorder


def widget(name: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    """A Widget object to create."""
    return {
        "apiVersion": WIDGET.api_version,
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"data": dict(data)},
    }


def render(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ConfigMap data for a Widget: its values with ``{name}``/``{namespace}`` filled."""
    meta = obj["metadata"]
    data = (obj.get("spec") or {}).get("data") or {}
    return {
        key: value.replace("{name}", meta["name"]).replace("{namespace}", meta["namespace"])
        for key, value in data.items()
    }


def _ready_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return dict(cond)
    return None


async def reconcile(obj: dict[str, Any], ctx: WidgetContext) -> Action | None:
    """Render the Widget's ConfigMap and report status; clean up on deletion."""
    return await finalizer(
        ctx.client,
        WIDGET,
        obj,
        FINALIZER,
        apply=lambda w: _render(w, ctx),
        cleanup=lambda w: _cleanup(w, ctx),
    )


async def _render(obj: dict[str, Any], ctx: WidgetContext) -> Action | None:
    meta = obj["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-rendered",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
            "ownerReferences": [
                {
                    "apiVersion": WIDGET.api_version,
                    "kind": "Widget",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": render(obj),
    }
    await apply(ctx.client, CONFIGMAP, configmap, field_manager=FIELD_MANAGER)
    generation = meta.get("generation", 0)
    status = obj.get("status") or {}
    ready = _ready_condition(obj)
    if status.get("observedGeneration") == generation and ready and ready["status"] == "True":
        return None  # status already says so: writing it again would only trigger us again
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await apply_status(
        ctx.client,
        WIDGET,
        {
            "apiVersion": WIDGET.api_version,
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "status": {
                "observedGeneration": generation,
                "configMap": f"{name}-rendered",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Rendered",
                        "message": f"rendered {len(configmap['data'])} keys",
                        "observedGeneration": generation,
                        "lastTransitionTime": now,
                    }
                ],
            },
        },
        field_manager=FIELD_MANAGER,
    )
    await ctx.recorder.publish(
        obj, reason="Rendered", note=f"rendered ConfigMap {name}-rendered", action="Apply"
    )
    return None


async def _cleanup(obj: dict[str, Any], ctx: WidgetContext) -> Action | None:
    meta = obj["metadata"]
    await delete(ctx.client, CONFIGMAP, f"{meta['name']}-rendered", namespace=meta["namespace"])
    return None


def make_controller(
    client: ApiClient, *, namespace: str | None = None, concurrency: int = 32
) -> Controller:
    """The Widget controller: Widgets primary, their rendered ConfigMaps owned.

    With ``FASTCTL_DEMO_RECORD=<path>`` set, every reconcile's start and end are appended to
    `path` as JSON lines (`fastctl.demo._record`), for soak runs that check the guarantees
    from outside the process."""
    ctx = WidgetContext(client, Recorder(client, FIELD_MANAGER))
    record_path = os.environ.get(RECORD_ENV)
    return Controller(
        client,
        WIDGET,
        recorded(reconcile, record_path) if record_path else reconcile,
        context=ctx,
        namespace=namespace,
        concurrency=concurrency,
        name="widget",
    ).owns(CONFIGMAP)


async def install_crd(client: ApiClient, *, timeout: float = 60.0) -> None:
    """Apply the Widget CRD and wait until it is established (served)."""
    crd_resource = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    await apply(client, crd_resource, CRD, field_manager=FIELD_MANAGER)
    deadline = time.monotonic() + timeout
    while True:
        current = await get(client, crd_resource, CRD["metadata"]["name"])
        conditions = (current.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {CRD['metadata']['name']} not established in {timeout} s")
        await asyncio.sleep(0.2)
