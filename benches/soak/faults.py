"""The faults the soak injects, on the control plane and on the operator processes.

- ``apiserver-restart``: kube-apiserver stopped and started again, etcd kept. Every watch
  and request of the operators breaks; the new server's watch cache starts at etcd's current
  revision.
- ``forced-relist``: the same, but etcd is compacted to its current revision while
  kube-apiserver is down. No watch can then be resumed from any resourceVersion a client
  holds, neither from the new watch cache (it starts after them) nor from etcd (compacted),
  so every watch gets 410 Gone and lists again. (A compaction while kube-apiserver runs
  does nothing a client can see: its watch cache keeps serving the open watches.)
- ``kill-leader``: SIGKILL of the replica that holds the Lease, restarted at once as a
  follower, as a Deployment would; the other replica takes over when the Lease expires.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from typing import Any

from operators import Operators

from fastctl.testing.control_plane import ControlPlane

KINDS = ("apiserver-restart", "forced-relist", "kill-leader")


def _etcd_post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def compact_etcd(url: str) -> int:
    """Compact etcd (through its HTTP gateway) to its current revision; that revision."""
    key = base64.b64encode(b"/registry/").decode()
    revision = int(_etcd_post(url, "/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
    _etcd_post(url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


async def inject(kind: str, cp: ControlPlane, operators: Operators) -> dict[str, Any]:
    """Inject one fault; what was done (for the result file)."""
    started = time.monotonic()
    detail: dict[str, Any] = {"kind": kind, "mono": started, "wall": time.time()}
    if kind in ("apiserver-restart", "forced-relist"):
        await cp.stop_apiserver()
        if kind == "forced-relist":
            detail["compacted_at_revision"] = await asyncio.to_thread(compact_etcd, cp.etcd_url)
        await cp.start_apiserver()
        detail["apiserver_start_seconds"] = cp.startup_seconds
    elif kind == "kill-leader":
        leader = operators.leader()
        if leader is None:
            detail["skipped"] = "no replica has reconciled yet"
        else:
            operators.kill(leader)
            detail["killed"] = leader.name
            detail["pid"] = leader.proc.pid
            operators.supervise()
    else:
        raise ValueError(f"unknown fault {kind!r}")
    detail["seconds"] = time.monotonic() - started
    return detail
