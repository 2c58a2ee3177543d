"""A test operator whose webhooks the generated Deployment must serve (tests/kube/
test_deployment_webhooks.py): Dials are refused with a negative ``spec.value``, get
``spec.color`` defaulted to ``blue`` on create, and are reconciled by writing
``status.seen``, all in the one process that ``fastctl run`` starts."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, CustomResource, KubeModel
from fastctl.kube import apply_status, crd
from fastctl.webhook import AdmissionRequest, Allow, Deny, Webhooks

GROUP = "served.fastctl.dev"
NEGATIVE = "spec.value must not be negative"


class DialSpec(KubeModel):
    value: int = 0
    color: str | None = None


class DialStatus(KubeModel):
    seen: int | None = None


class Dial(CustomResource, group=GROUP, version="v1", kind="Dial", storage=True):
    spec: DialSpec
    status: DialStatus | None = None


CRDS = [crd(Dial)]
DIAL = Dial.resource()

WEBHOOKS = Webhooks()


@WEBHOOKS.validating(DIAL, name=f"dials.validate.{GROUP}")
def validate(request: AdmissionRequest) -> Allow | Deny:
    value = ((request.object or {}).get("spec") or {}).get("value", 0)
    return Deny(f"{NEGATIVE} (got {value})") if value < 0 else Allow()


@WEBHOOKS.mutating(DIAL, name=f"dials.default.{GROUP}", operations=["CREATE"])
def default(request: AdmissionRequest) -> dict[str, Any]:
    obj = dict(request.object or {})
    obj["spec"] = {"color": "blue", **(obj.get("spec") or {})}
    return obj


async def reconcile(obj: dict[str, Any], client: ApiClient) -> None:
    meta = obj["metadata"]
    status = {"seen": obj["spec"].get("value", 0)}
    await apply_status(
        client,
        DIAL,
        {
            "apiVersion": obj["apiVersion"],
            "kind": "Dial",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        },
        field_manager="served",
    )


def make(client: ApiClient, namespace: str | None = None) -> Controller:
    return Controller(client, DIAL, reconcile, namespace=namespace, context=client, name="dials")
