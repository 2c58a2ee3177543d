"""The shard members' Leases on the in-memory API server, with faults per member.

A `ShardMember` does three things over HTTP (`fastctl.runtime.sharding._member_api`): list
its group's Leases by label, create or replace its own (a replace preconditioned on the
``resourceVersion`` it last read: 409 if anyone wrote since) and delete a dead member's
(preconditioned the same way). `MemberLeases` answers those from memory, on the server's
resourceVersion counter and behind its outages, and tells the members apart by their API
client (each Manager's client has its own host, and the member's client copies its
configuration), so a fault can hit one member only:

- a partition: the member's requests fail before they reach the server;
- slow requests: the server applies a write half-way through the latency and answers at
  its end, so a member whose own timeout ends first does not know its write was applied;
- failed writes: refused before they are applied, or applied with the answer lost (the
  member sees a failure, the others see the write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from fastctl.errors import ApiError
from fastctl.kube._http import error_from_response
from fastctl.runtime.sharding._rules import SLOTS_ANNOTATION

from .apiserver import ApiServer
from .record import Record

__all__ = ["Faults", "MemberLeases", "member_of"]


@dataclass
class Faults:
    """The faults of one member's Lease requests, each until a virtual time."""

    partition_until: float = 0.0
    slow_until: float = 0.0
    slow_latency: float = 0.0
    fail_until: float = 0.0
    fail_after_apply: bool = False


def member_of(client: Any) -> str:
    """The member a request comes from: its client's host, ``http://<member>.sim``."""
    host = str(client.configuration.host)
    return host.removeprefix("http://").split(".", 1)[0]


def _refuse(code: int, reason: str, method: str, path: str) -> ApiError:
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason}
    return error_from_response(code, orjson.dumps(body), method=method, path=path)


class MemberLeases:
    """The Leases of the shard group (see the module docstring)."""

    def __init__(self, server: ApiServer, record: Record) -> None:
        self.server = server
        self.record = record
        self.leases: dict[str, dict[str, Any]] = {}
        self.faults: dict[str, Faults] = {}
        self.applied: dict[str, float] = {}  # per member: when its last write was applied
        self._failing: set[str] = set()

    def of(self, member: str) -> Faults:
        return self.faults.setdefault(member, Faults())

    async def request_json(
        self,
        client: object,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool | None] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        request_timeout: float = 60.0,
    ) -> Any:
        """`fastctl.kube._http.request_json` for `ShardLeaseClient`."""
        server = self.server
        member = member_of(client)
        faults = self.of(member)
        latency = server.config.request_latency
        if server.now < faults.slow_until:
            latency = max(latency, faults.slow_latency)
        await asyncio.sleep(latency / 2)
        writes = method != "GET"
        try:
            server.check_up()
            if server.now < faults.partition_until:
                raise aiohttp.ClientConnectionError(f"simulated partition of {member}")
            failing = writes and server.now < faults.fail_until
            if failing and not faults.fail_after_apply:
                raise _refuse(500, "InternalError", method, path)
        except (aiohttp.ClientError, ApiError):
            self._failed(member)
            raise
        answer = self._apply(member, method, path, query or {}, body)
        if writes:
            self.applied[member] = server.now
        if failing:
            raise aiohttp.ServerDisconnectedError()  # applied, but the answer is lost
        await asyncio.sleep(latency / 2)
        if member in self._failing:
            self._failing.discard(member)
            self.record.log.append(f"{server.now:.2f} {member}'s Lease requests succeed again")
        return answer

    def _failed(self, member: str) -> None:
        """Log the first failure of a run of them, with the member's last applied write."""
        if member not in self._failing:
            self._failing.add(member)
            last = self.applied.get(member)
            since = f" (its last write was applied at {last:.2f})" if last is not None else ""
            self.record.log.append(f"{self.server.now:.2f} {member}'s Lease requests fail{since}")

    def _apply(
        self,
        member: str,
        method: str,
        path: str,
        query: Mapping[str, Any],
        body: bytes | None,
    ) -> Any:
        _, _, name = path.partition("/leases")
        name = name.strip("/")
        if method == "GET" and not name:
            selector = str(query.get("labelSelector") or "")
            label, _, value = selector.partition("=")
            items = [
                lease
                for _, lease in sorted(self.leases.items())
                if (lease["metadata"].get("labels") or {}).get(label) == value
            ]
            return {"kind": "LeaseList", "metadata": {}, "items": items}
        doc = orjson.loads(body or b"{}")
        if method == "POST":
            name = doc["metadata"]["name"]
            if name in self.leases:
                raise _refuse(409, "AlreadyExists", method, path)
            return self._write(member, name, doc)
        current = self.leases.get(name)
        if current is None:
            raise _refuse(404, "NotFound", method, path)
        version = current["metadata"]["resourceVersion"]
        if method == "PUT":
            if (doc.get("metadata") or {}).get("resourceVersion") != version:
                raise _refuse(409, "Conflict", method, path)
            return self._write(member, name, doc)
        if method == "DELETE":
            wanted = (doc.get("preconditions") or {}).get("resourceVersion")
            if wanted is not None and wanted != version:
                raise _refuse(409, "Conflict", method, path)
            del self.leases[name]
            self.record.log.append(f"{self.server.now:.2f} {member} deleted Lease {name}")
            return {"kind": "Status", "status": "Success"}
        raise _refuse(405, "MethodNotAllowed", method, path)

    def _write(self, member: str, name: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Store a Lease; the log says when its holder or slots changed (not each renewal)."""
        server = self.server
        server.rv += 1
        lease = {**doc, "metadata": {**doc["metadata"], "resourceVersion": str(server.rv)}}
        before = _published(self.leases.get(name))
        self.leases[name] = lease
        if _published(lease) != before:
            holder, slots = _published(lease)
            self.record.log.append(
                f"{server.now:.2f} {member} wrote Lease {name}: holder {holder!r}, slots {slots!r}"
            )
        return lease


def _published(lease: Mapping[str, Any] | None) -> tuple[str, str]:
    """A Lease's holder and the slots it publishes (``("", "")`` for none)."""
    if lease is None:
        return "", ""
    meta = lease.get("metadata") or {}
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    return holder, str((meta.get("annotations") or {}).get(SLOTS_ANNOTATION, ""))
