"""A test operator with webhooks (``fastctl manifests tests/kube/operators/webhooked.py:make``).

A typed Gear in two versions (v1alpha1, v1 stored) that a controller reconciles, and one
webhook of each kind in its module's ``WEBHOOKS``: a validating one on Gears, a mutating one
on ConfigMaps, and the Gear's conversion between the two versions. The handlers are trivial:
the manifests tests read what the module declares, they never call the handlers.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, CustomResource, KubeModel, Resource
from fastctl.kube import crd
from fastctl.webhook import AdmissionRequest, Allow, Webhooks

GROUP = "hooked.fastctl.dev"


class GearSpec(KubeModel):
    teeth: int = 12


class GearV1alpha1(CustomResource, group=GROUP, version="v1alpha1", kind="Gear"):
    spec: GearSpec


class GearV1(CustomResource, group=GROUP, version="v1", kind="Gear", storage=True):
    spec: GearSpec


CRDS = [crd(GearV1alpha1, GearV1)]
GEAR = GearV1.resource()
CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)

WEBHOOKS = Webhooks()


@WEBHOOKS.validating(GEAR, name="gears.validate.hooked.fastctl.dev")
def validate(request: AdmissionRequest) -> Allow:
    return Allow()


@WEBHOOKS.mutating(CONFIGMAP, name="configmaps.default.hooked.fastctl.dev", operations=["CREATE"])
def default(request: AdmissionRequest) -> dict[str, Any]:
    return dict(request.object or {})


gears = WEBHOOKS.conversion(f"gears.{GROUP}", hub="v1")


@gears.converts("v1alpha1", "v1")
def up(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


@gears.converts("v1", "v1alpha1")
def down(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


async def _reconcile(gear: GearV1, ctx: Any) -> None:
    return None


def make(client: ApiClient, namespace: str | None = None) -> Controller:
    return Controller(client, GearV1, _reconcile, namespace=namespace)
