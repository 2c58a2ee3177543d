"""Child processes that cannot outlive the Python process that started them.

Three layers, because each one alone leaves a gap:

- the owner stops its children itself (context manager exit, fixture teardown, ``atexit``);
- each child runs in its own session and process group: Ctrl-C in a terminal reaches only
  Python (which then stops the children in order), and stopping signals the whole group;
- on Linux each child asks the kernel for ``PR_SET_PDEATHSIG``/``SIGKILL``: if the Python
  process dies without cleaning up (SIGKILL, a crash, OOM), the kernel kills the child.
  The signal is tied to the *thread* that forked the child, so children must be started from
  a long-lived thread (the main thread or the event loop's), never from a worker thread.

Every started process is recorded with its kernel start time, so a later check
(`leftover_processes`) can tell "still running" from "the pid was reused".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1
_LINUX = sys.platform.startswith("linux")
# Loaded before any fork: the child of a threaded parent must not run the dynamic loader.
_libc = ctypes.CDLL(None, use_errno=True) if _LINUX else None


@dataclass(frozen=True)
class ProcessRecord:
    """One started child: enough to find it again without trusting a bare pid."""

    pid: int
    name: str
    start_ticks: int | None

    def alive(self) -> bool:
        """True while this very process (not a reuse of its pid) exists and is no zombie."""
        if _LINUX:
            stat = _read_stat(self.pid)
            if stat is None:
                return False
            state, ticks = stat
            return state != "Z" and (self.start_ticks is None or ticks == self.start_ticks)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


_started: list[ProcessRecord] = []
_started_lock = threading.Lock()


def _read_stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def _death_signal_preexec(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died before prctl took effect: then nobody would ever signal us.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(
    name: str,
    argv: Sequence[str],
    log: IO[bytes],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    tie_to_parent: bool = True,
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr into `log`, in a new session, and (when
    `tie_to_parent`) killed by the kernel if this process dies."""
    preexec = _death_signal_preexec(os.getpid()) if tie_to_parent and _LINUX else None
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=preexec,  # only ctypes prctl: takes no Python-level locks
    )
    stat = _read_stat(proc.pid) if _LINUX else None
    with _started_lock:
        _started.append(ProcessRecord(proc.pid, name, stat[1] if stat else None))
    return proc


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the child's process group (it is the group leader), ignoring a gone child."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def kill_now(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL and reap: for emergencies (an interrupted start-up), never blocks long."""
    signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def stop_blocking(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL."""
    signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        kill_now(proc)


def this_process() -> ProcessRecord:
    """The record of the calling process itself."""
    stat = _read_stat(os.getpid()) if _LINUX else None
    return ProcessRecord(os.getpid(), "self", stat[1] if stat else None)


def started_processes() -> list[ProcessRecord]:
    """Every child `spawn` started in this process, dead or alive."""
    with _started_lock:
        return list(_started)


def leftover_processes() -> list[ProcessRecord]:
    """The children `spawn` started that are still running."""
    return [record for record in started_processes() if record.alive()]
