"""The operator replicas of the soak: child processes kept running like a Deployment would.

Each of `Operators`' slots runs one ``fastctl run fastctl.demo.widgets:make_controller
--leader-elect`` process, all on the same Lease. A process that exits (a lost lease: status
3) or is killed is started again at once, as a new *instance* with its own record file
(``FASTCTL_DEMO_RECORD``), its own log and its own RSS series: what the checks need to tell
the lives of the processes apart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastctl.demo._record import RECORD_ENV
from fastctl.testing import _process

LEASE = "soak-widgets"


@dataclass
class Instance:
    """One life of one slot: a process from its start to its end."""

    slot: int
    serial: int
    proc: subprocess.Popen[bytes]
    record: Path
    log: Path
    started: float
    ended: float | None = None
    how: str | None = None  # "kill -9", "exit N", "stopped"
    rss: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, bytes)
    last_start: float = 0.0  # monotonic time of the last reconcile start read so far
    reconciles: int = 0
    _offset: int = 0
    _partial: bytes = b""

    @property
    def name(self) -> str:
        return f"op{self.slot}.{self.serial}"

    def read_new_records(self) -> None:
        """Take in the record lines written since the last call (for leader guessing and
        the quiescence test; the checks read the whole files at the end)."""
        try:
            with self.record.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if b'"ev":"start"' in line:
                self.reconciles += 1
                self.last_start = json.loads(line)["mono"]

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.proc.pid,
            "started": self.started,
            "ended": self.ended,
            "how": self.how,
            "reconciles": self.reconciles,
            "record": str(self.record),
            "log": str(self.log),
            "rss": self.rss,
        }


class Operators:
    """`slots` replicas of the demo operator against `kubeconfig`, records under `outdir`."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        outdir: Path,
        slots: int,
        extra: list[str],
        *,
        leader_elect: bool = True,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.outdir = outdir
        self.extra = [f"--leader-elect={LEASE}", *extra] if leader_elect else []
        self.instances: list[Instance] = []
        self.current: list[Instance] = []
        outdir.mkdir(parents=True, exist_ok=True)
        for slot in range(slots):
            self.current.append(self._start(slot, 0))

    def _start(self, slot: int, serial: int) -> Instance:
        name = f"op{slot}.{serial}"
        record = self.outdir / f"{name}.jsonl"
        log = self.outdir / f"{name}.log"
        argv = [
            sys.executable,
            "-m",
            "fastctl.cli",
            "run",
            "fastctl.demo.widgets:make_controller",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespace={self.namespace}",
            "--metrics-port=0",
            "--probe-port=0",
            "--log-level=INFO",
            *self.extra,
        ]
        env = {**os.environ, RECORD_ENV: str(record)}
        with log.open("ab") as out:
            proc = _process.spawn(name, argv, out, env=env)
        inst = Instance(slot, serial, proc, record, log, time.monotonic())
        self.instances.append(inst)
        return inst

    def supervise(self) -> list[Instance]:
        """Restart every slot whose process has ended; the instances that ended."""
        ended = []
        for i, inst in enumerate(self.current):
            code = inst.proc.poll()
            if code is not None:
                inst.ended = time.monotonic() if inst.ended is None else inst.ended
                inst.how = inst.how or f"exit {code}"
                inst.read_new_records()
                ended.append(inst)
                self.current[i] = self._start(inst.slot, inst.serial + 1)
        return ended

    def read_records(self) -> None:
        for inst in self.current:
            inst.read_new_records()

    def leader(self) -> Instance | None:
        """The live instance that started a reconcile last: only the leader reconciles."""
        self.read_records()
        live = [inst for inst in self.current if inst.proc.poll() is None and inst.last_start]
        return max(live, key=lambda inst: inst.last_start, default=None)

    def kill(self, inst: Instance) -> None:
        """SIGKILL `inst` and reap it; `supervise` starts its successor."""
        os.kill(inst.proc.pid, signal.SIGKILL)
        inst.proc.wait()
        inst.ended = time.monotonic()
        inst.how = "kill -9"

    def sample_rss(self) -> None:
        now = time.monotonic()
        for inst in self.current:
            rss = _rss_bytes(inst.proc.pid)
            if rss is not None and inst.proc.poll() is None:
                inst.rss.append((now, rss))

    def stop(self, grace: float = 20.0) -> None:
        for inst in self.current:
            if inst.proc.poll() is None:
                _process.stop_blocking(inst.proc, grace)
            inst.ended = time.monotonic()
            inst.how = inst.how or f"stopped (exit {inst.proc.returncode})"
            inst.read_new_records()


def _rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None
