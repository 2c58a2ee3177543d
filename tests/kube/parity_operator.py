"""A small operator and one scenario of a user's test of it, run by `test_fake_parity.py`
on the fake cluster and on the real control plane: the results must be the same.

The operator: a `Parity` renders a ConfigMap it owns, writes ``observedGeneration`` and a
phase to its status, and holds a finalizer that it removes once the Parity is deleted. The
scenario drives it through creation, a spec change, a status write by someone else, the
write errors a test meets (apply conflict, stale resourceVersion, failed JSON patch test,
an object the schema refuses, a missing object), selectors and the deletion, and returns
what it saw with the fields only a server sets (UIDs, versions, times) taken out.
"""

from __future__ import annotations

from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import Controller, CustomResource, KubeModel, Resource
from fastctl.errors import ApiError
from fastctl.kube import (
    add_finalizer,
    apply,
    apply_status,
    create,
    get,
    owner_reference,
    patch,
    remove_finalizer,
)
from fastctl.kube import list as list_objects
from fastctl.testing import Cluster, run_until_quiet

FINALIZER = "parity.fastctl.dev/cleanup"
CM = Resource("v1", "ConfigMap")
QUIET = 1.5
"""Seconds with no reconcile queued, running or ended that end a run (virtual time on the
fake). The operator requeues nothing, so only its own writes' echoes can come late, and
those are milliseconds behind the write on either cluster."""


class ParitySpec(KubeModel):
    size: Literal["small", "large"] = "small"
    replicas: int = Field(default=1, ge=0, le=10)
    data: dict[str, str] = Field(default_factory=dict)


class ParityStatus(KubeModel):
    observed_generation: int = 0
    phase: str = ""


class Parity(CustomResource, group="parity.fastctl.dev", version="v1"):
    """A ConfigMap to render."""

    spec: ParitySpec
    status: ParityStatus | None = None


PARITY = Parity.resource()


async def reconcile(obj: Parity, client: ApiClient) -> None:
    meta = obj.metadata
    name, namespace = str(meta.name), str(meta.namespace)
    raw = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    if meta.deletion_timestamp is not None:
        await remove_finalizer(client, PARITY, raw, FINALIZER)
        return
    await add_finalizer(client, PARITY, raw, FINALIZER)
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "parity", "size": obj.spec.size},
            "ownerReferences": [owner_reference(obj)],
        },
        "data": {**obj.spec.data, "replicas": str(obj.spec.replicas)},
    }
    await apply(client, CM, child, field_manager="parity-operator")
    status = {
        "apiVersion": "parity.fastctl.dev/v1",
        "kind": "Parity",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"observedGeneration": meta.generation, "phase": "Rendered"},
    }
    await apply_status(client, PARITY, status, field_manager="parity-operator")


SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields")


def normal(obj: Any) -> Any:
    """`obj` without what only a server sets (and sets differently each time)."""
    if obj is None:
        return None
    out = {k: v for k, v in obj.items()}
    meta = {k: v for k, v in out["metadata"].items() if k not in SERVER_SET}
    if "deletionTimestamp" in meta:
        meta["deletionTimestamp"] = "<set>"
    if "ownerReferences" in meta:
        meta["ownerReferences"] = [{**r, "uid": "<uid>"} for r in meta["ownerReferences"]]
    out["metadata"] = meta
    return out


async def error_of(call: Any) -> tuple[int, str] | None:
    try:
        await call
    except ApiError as exc:
        return exc.status, exc.reason
    return None


async def scenario(cluster: Cluster) -> dict[str, Any]:
    """The user's test, run on `cluster`; what it saw, normalised."""
    ns = cluster.namespace
    await cluster.install(Parity)
    client = await cluster.client()
    seen: dict[str, Any] = {}

    async def state(key: str) -> None:
        for what, res in (("parity", PARITY), ("configmap", CM)):
            try:
                seen[f"{key}.{what}"] = normal(await get(client, res, "p1", namespace=ns))
            except ApiError as exc:
                seen[f"{key}.{what}"] = exc.status

    def operator() -> Controller:
        return Controller(client, Parity, reconcile, context=client, namespace=ns).owns(CM)

    body = {
        "apiVersion": "parity.fastctl.dev/v1",
        "kind": "Parity",
        "metadata": {"name": "p1", "namespace": ns, "labels": {"tier": "web"}},
        "spec": {"size": "large", "data": {"a": "1"}, "unknown": "pruned"},
    }
    seen["created"] = normal(await create(client, PARITY, body))
    await run_until_quiet(operator(), quiet=QUIET)
    await state("reconciled")

    await patch(client, PARITY, "p1", {"spec": {"replicas": 3}}, namespace=ns)
    await run_until_quiet(operator(), quiet=QUIET)
    await state("respecified")

    labelled = await patch(client, PARITY, "p1", {"metadata": {"labels": {"x": "y"}}}, namespace=ns)
    seen["labelled.generation"] = labelled["metadata"]["generation"]
    status = {"status": {"phase": "Edited"}}
    edited = await patch(client, PARITY, "p1", status, namespace=ns, subresource="status")
    seen["status-edited"] = normal(edited)

    conflicting = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "p1", "namespace": ns},
        "data": {"a": "other"},
    }
    seen["apply-conflict"] = await error_of(
        apply(client, CM, conflicting, field_manager="someone-else", force=False)
    )
    forced = await apply(client, CM, conflicting, field_manager="someone-else")
    seen["apply-forced"] = normal(forced)
    stale = {"metadata": {"resourceVersion": seen_version(seen, edited)}, "spec": {"replicas": 4}}
    await patch(client, PARITY, "p1", {"spec": {"replicas": 5}}, namespace=ns)
    seen["stale-patch"] = await error_of(patch(client, PARITY, "p1", stale, namespace=ns))
    failed_test = [{"op": "test", "path": "/spec/size", "value": "small"}]
    seen["json-patch-test"] = await error_of(
        patch(client, PARITY, "p1", failed_test, namespace=ns, patch_type="json")
    )
    invalid = {**body, "metadata": {"name": "p2", "namespace": ns}, "spec": {"size": "huge"}}
    seen["invalid"] = await error_of(create(client, PARITY, invalid))
    too_many = {**body, "metadata": {"name": "p3", "namespace": ns}, "spec": {"replicas": 11}}
    seen["out-of-range"] = await error_of(create(client, PARITY, too_many))
    seen["missing"] = await error_of(get(client, PARITY, "nope", namespace=ns))

    extra = {**body, "metadata": {"name": "p4", "namespace": ns, "labels": {"tier": "db"}}}
    await create(client, PARITY, extra)
    for selector in ("tier=web", "tier!=web", "tier in (web,db)", "!x"):
        listed = await list_objects(client, PARITY, namespace=ns, label_selector=selector)
        seen[f"selected {selector}"] = [o["metadata"]["name"] for o in listed["items"]]
    by_name = await list_objects(client, PARITY, namespace=ns, field_selector="metadata.name=p4")
    seen["field-selected"] = [o["metadata"]["name"] for o in by_name["items"]]

    from fastctl.kube import delete

    await delete(client, PARITY, "p1", namespace=ns)
    await state("deleting")
    await run_until_quiet(operator(), quiet=QUIET)
    await state("deleted")
    return seen


def seen_version(seen: dict[str, Any], obj: Any) -> str:
    """The resourceVersion `obj` had (a stale one by the time it is used)."""
    del seen
    return str(obj["metadata"]["resourceVersion"])
