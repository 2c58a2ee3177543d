"""A test operator whose kinds need different verbs: it applies a Secret per labelled
ConfigMap (owned, so garbage collection deletes it) and never deletes anything, so its Role
must grant ``create`` and ``patch`` of Secrets and no ``delete``
(``needs(verbs=...)``)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Resource
from fastctl.deploy import needs
from fastctl.kube import apply

CONFIGMAP = Resource("v1", "ConfigMap")
SECRET = Resource("v1", "Secret")
LABEL = "app.fastctl.dev/scoped"


async def reconcile(obj: dict[str, Any], client: ApiClient) -> None:
    meta = obj["metadata"]
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{meta['name']}-credentials",
            "namespace": meta["namespace"],
            "ownerReferences": [owner],
        },
        "stringData": {"user": meta["name"]},
    }
    await apply(client, SECRET, secret, field_manager="scoped")


def make(client: ApiClient, namespace: str | None = None) -> Controller:
    ctl = Controller(
        client, CONFIGMAP, reconcile, context=client, namespace=namespace, label_selector=LABEL
    ).owns(SECRET)
    return needs(
        ctl, status=False, finalizer=False, events=False, verbs={SECRET: ("create", "patch")}
    )
