"""A shard member's only I/O: list its group's Leases, write its own, delete a dead one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError, request_json
from fastctl.runtime.leader._rules import micro_time
from fastctl.runtime.sharding._rules import GROUP_LABEL, SLOTS_ANNOTATION, format_slots

__all__ = ["GroupLeases", "ShardLeaseClient", "member_lease"]


class GroupLeases(Protocol):
    """What `ShardMember` needs from the API server (tests put a model behind it)."""

    async def list(self) -> list[dict[str, Any]]: ...

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def delete(self, lease: Mapping[str, Any]) -> None: ...


def member_lease(
    name: str, group: str, identity: str, duration_seconds: int, slots: frozenset[int]
) -> dict[str, Any]:
    """The Lease a member writes: its identity as the holder, a fresh ``renewTime`` (so the
    record changes at every renewal and observers restart their expiry clocks), and the
    slots it publishes in an annotation."""
    now = micro_time()
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "labels": {GROUP_LABEL: group},
            "annotations": {SLOTS_ANNOTATION: format_slots(slots)},
        },
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": now,
        },
    }


class ShardLeaseClient:
    """The group's Leases over REST. The list is a quorum read (no ``resourceVersion``):
    rule 3 needs it to see every write that completed before it was sent."""

    def __init__(self, client: ApiClient, namespace: str, group: str, timeout: float) -> None:
        self._client = client
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._group = group
        self._timeout = timeout

    async def list(self) -> list[dict[str, Any]]:
        answer = await request_json(
            self._client,
            "GET",
            self._collection,
            query={"labelSelector": f"{GROUP_LABEL}={self._group}"},
            request_timeout=self._timeout,
        )
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise ApiError(0, "BadResponse", "not a LeaseList", method="GET")
        return [item for item in items if isinstance(item, dict)]

    async def write(
        self, current: Mapping[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Create the Lease (`current` None) or replace `current`, preconditioned on its
        ``resourceVersion`` (409 if anyone else wrote since)."""
        name = body["metadata"]["name"]
        if current is None:
            method, path = "POST", self._collection
        else:
            method, path = "PUT", f"{self._collection}/{name}"
            version = (current.get("metadata") or {}).get("resourceVersion")
            body = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        answer = await request_json(
            self._client, method, path, body=orjson.dumps(body), request_timeout=self._timeout
        )
        if not isinstance(answer, dict):
            raise ApiError(0, "BadResponse", "not a Lease", method=method, path=path)
        return answer

    async def delete(self, lease: Mapping[str, Any]) -> None:
        """Delete a dead member's Lease, only if nobody wrote it since we read it."""
        metadata = lease.get("metadata") or {}
        body = {"preconditions": {"resourceVersion": metadata.get("resourceVersion")}}
        try:
            await request_json(
                self._client,
                "DELETE",
                f"{self._collection}/{metadata.get('name')}",
                body=orjson.dumps(body),
                request_timeout=self._timeout,
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
