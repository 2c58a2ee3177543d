"""An opt-in record of every reconcile of the demo operator, for soak runs.

With ``FASTCTL_DEMO_RECORD=<path>`` in its environment, the demo operator appends one JSON
line to `path` when each reconcile starts and one when it ends (returns, raises or is
cancelled): the object's key, uid and resourceVersion as the reconcile saw them, the pid, and
monotonic and wall time. A soak driver reads the files of several processes to check that no
two reconciles of one object ever ran at once across processes (``CLOCK_MONOTONIC`` is the
same clock for every process on a host), that every object's last reconcile saw its final
version, and that deleted objects were not reconciled after their deletion.

Each line is written with a single ``write`` on a file opened with ``O_APPEND``, so a line is
never torn, and it is in the kernel before the reconcile goes on: a process killed with
SIGKILL leaves every line it wrote, and a start without an end means "killed while running".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

__all__ = ["RECORD_ENV", "recorded"]

RECORD_ENV = "FASTCTL_DEMO_RECORD"

_Obj = TypeVar("_Obj")
_Ctx = TypeVar("_Ctx")
_R = TypeVar("_R")


class _Record:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()

    def write(self, event: str, obj: object, **extra: object) -> None:
        # A typed reconcile gets a model: record what it was validated from.
        data = obj if isinstance(obj, Mapping) else getattr(obj, "to_json", dict)()
        meta = data.get("metadata") or {}
        line = {
            "ev": event,
            "key": f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            "uid": meta.get("uid"),
            "rv": meta.get("resourceVersion"),
            "gen": meta.get("generation"),
            "deleting": "deletionTimestamp" in meta,
            "pid": self._pid,
            "mono": time.monotonic(),
            "wall": time.time(),
            **extra,
        }
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


def recorded(
    reconcile: Callable[[_Obj, _Ctx], Awaitable[_R]], path: str
) -> Callable[[_Obj, _Ctx], Awaitable[_R]]:
    """`reconcile`, recording its start and end to `path` (see the module docstring)."""
    record = _Record(path)

    async def recording(obj: _Obj, ctx: _Ctx) -> _R:
        record.write("start", obj)
        outcome = "error"
        try:
            result = await reconcile(obj, ctx)
            outcome = "ok"
            return result
        except BaseException as exc:
            outcome = type(exc).__name__
            raise
        finally:
            record.write("end", obj, outcome=outcome)

    return recording
