"""An in-memory Lease with resourceVersions, as the API server keeps it: the tests of the
elector loop put their fake Lease clients in front of it."""

from __future__ import annotations

from typing import Any

import orjson

from fastctl.kube._http import ApiError
from fastctl.runtime.leader._rules import LeaseRecord


class LeaseStore:
    """One Lease with resourceVersions, as the API server keeps it, and the three requests
    the elector makes, with the server's answers (404 and 409 included)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def put(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy_lease(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy_lease(self.lease)

    def get(self) -> dict[str, Any] | None:
        return None if self.lease is None else copy_lease(self.lease)

    def create(self, record: LeaseRecord) -> dict[str, Any]:
        if self.lease is not None:
            raise ApiError(409, "AlreadyExists", "exists")
        return self.put({"metadata": {"name": "l"}, "spec": record.to_spec()})

    def replace(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        current = self.lease
        if current is None:
            raise ApiError(404, "NotFound", "gone")
        if lease["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "modified")
        return self.put({**lease, "spec": record.to_spec()})


def copy_lease(lease: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(lease))
    return copied
