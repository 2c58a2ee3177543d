"""The elector's only I/O: GET, POST and PUT of one Lease as raw JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import ApiError, request_json
from fastctl.runtime.leader._rules import LeaseRecord


class LeaseClient:
    """GET/POST/PUT of one Lease as raw JSON (the elector's only I/O; tests may swap it)."""

    def __init__(self, client: ApiClient, namespace: str, name: str, timeout: float) -> None:
        self._client = client
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._path = f"{self._collection}/{name}"
        self._timeout = timeout

    async def get(self) -> dict[str, Any] | None:
        try:
            lease = await request_json(
                self._client, "GET", self._path, request_timeout=self._timeout
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return _as_lease(lease, "GET", self._path)

    async def create(self, record: LeaseRecord) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name},
            "spec": record.to_spec(),
        }
        lease = await request_json(
            self._client,
            "POST",
            self._collection,
            body=orjson.dumps(body),
            request_timeout=self._timeout,
        )
        return _as_lease(lease, "POST", self._collection)

    async def replace(self, lease: Mapping[str, Any], record: LeaseRecord) -> dict[str, Any]:
        """PUT `lease` with `record` as its spec. The body keeps ``metadata.resourceVersion``
        from the copy we read, so the server refuses it (409) if anyone wrote since."""
        spec = {**(lease.get("spec") or {}), **record.to_spec()}
        body = {**lease, "spec": spec}
        updated = await request_json(
            self._client, "PUT", self._path, body=orjson.dumps(body), request_timeout=self._timeout
        )
        return _as_lease(updated, "PUT", self._path)


def _as_lease(value: Any, method: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(0, "BadResponse", "not a JSON object", method=method, path=path)
    return value


TRANSIENT = (ApiError, aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError)
"""Failures of one attempt that the loop survives: it retries, and a leader's tenure runs
out on its own if they go on."""
