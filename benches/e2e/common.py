"""Shared pieces of the end-to-end benchmarks: child processes, /proc, API server metrics.

Everything here is measurement plumbing, neutral between the frameworks measured: the
operators run as child processes (`Child`), their peak memory is read from ``/proc/<pid>``
and their CPU time from their CPU-time clock by the driver, and API requests are counted by
the API server itself (``apiserver_request_total`` from ``/metrics``).

Times are ``time.monotonic()`` everywhere, in the driver and in the children alike: on Linux
it is ``CLOCK_MONOTONIC``, one clock for the whole machine, so a time recorded in a child can
be compared with one recorded in the driver.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

# Only the standard library at import time: the operator children import this module, and
# kopf's memory must not include fastctl's (or orjson's) modules.

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")

RequestKey = tuple[str, str, str]  # (verb, resource, subresource)


def log(message: str) -> None:
    """Progress on stderr (stdout of the driver is left for the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- /proc ---------------------------------------------------------------------------------


def proc_memory(pid: int | str = "self") -> dict[str, int]:
    """``VmHWM`` (peak resident set) and ``VmRSS`` of a process, in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    return out


def proc_cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time of a process (not its children), in seconds.

    Read from the process's CPU-time clock (nanoseconds, its exited threads included), not
    from ``/proc/<pid>/stat``, whose ticks of 10 ms are a few percent of a short burst; the
    ticks only where the clock cannot be read."""
    try:
        if pid == "self":
            return time.process_time()
        return time.clock_gettime(_process_cpu_clock(int(pid)))
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as file:
        stat = file.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _process_cpu_clock(pid: int) -> int:
    """The clock id of `pid`'s CPU time (Linux: ``clock_getcpuclockid``, CPUCLOCK_SCHED)."""
    return ((~pid) << 3) | 2


def load_average() -> float:
    return os.getloadavg()[0]


# -- API server metrics --------------------------------------------------------------------

_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def request_counts(client: ApiClient) -> Counter[RequestKey]:
    """``apiserver_request_total`` summed by (verb, resource, subresource)."""
    from fastctl.kube._http import request

    async with await request(client, "GET", "/metrics") as resp:
        text = (await resp.read()).decode()
    counts: Counter[RequestKey] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if labels.get("component") != "apiserver" or labels.get("resource") == "leases":
            continue  # /readyz, /metrics, /openapi; the API server's own identity lease
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] += int(float(value))
    return counts


async def terminated_watchers(client: ApiClient) -> int:
    """``apiserver_terminated_watchers_total``, all resources: the watches the API server's
    watch cache closed because their client did not read its events fast enough (it logs
    nothing at its default verbosity; the client then resumes with a new WATCH)."""
    from fastctl.kube._http import request

    async with await request(client, "GET", "/metrics") as resp:
        text = (await resp.read()).decode()
    return sum(
        int(float(line.rpartition(" ")[2]))
        for line in text.splitlines()
        if line.startswith("apiserver_terminated_watchers_total{")
    )


def request_delta(
    before: Counter[RequestKey], after: Counter[RequestKey], minus: Counter[RequestKey] | None
) -> dict[str, int]:
    """Requests made between two scrapes, less `minus` (the driver's own), as
    ``{"VERB resource[/sub]": n}`` without zero rows, plus ``"total"``."""
    delta = after.copy()
    delta.subtract(before)
    if minus:
        delta.subtract(minus)
    rows = {
        f"{verb} {res}{'/' + sub if sub else ''}": n for (verb, res, sub), n in delta.items() if n
    }
    rows = dict(sorted(rows.items(), key=lambda kv: -kv[1]))
    rows["total"] = sum(rows.values())
    return rows


# -- statistics ----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of durations in seconds, as milliseconds."""
    return {
        "n": len(values),
        "p50_ms": percentile(values, 0.5) * 1e3,
        "p90_ms": percentile(values, 0.9) * 1e3,
        "p99_ms": percentile(values, 0.99) * 1e3,
        "max_ms": max(values) * 1e3 if values else math.nan,
    }


def median(values: Iterable[float]) -> float:
    data = [v for v in values if not math.isnan(v)]
    return statistics.median(data) if data else math.nan


# -- running many requests -----------------------------------------------------------------


async def run_bounded(
    count: int, concurrency: int, make: Callable[[int], Awaitable[object]]
) -> list[float]:
    """Run ``make(0) .. make(count - 1)`` with at most `concurrency` in flight; returns the
    ``time.monotonic()`` at which each finished (index order)."""
    done = [0.0] * count
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            await make(i)
            done[i] = time.monotonic()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    return done


# -- child processes -----------------------------------------------------------------------


_COMPILED: set[Path] = set()


def compile_bytecode(env: dict[str, str] | None = None) -> None:
    """Compile to bytecode, once, the fastctl package a child will import (its
    ``PYTHONPATH`` first, else where this process finds it) and these scripts.

    An installed wheel comes with its bytecode (pip compiles at install), and a source
    checkout writes it at its first import; on a machine with ``PYTHONDONTWRITEBYTECODE=1``
    (the benchmark machine) a source checkout would compile every module at every start
    instead, about 0.2 s of CPU per start that no user pays. The peers' Python packages are
    installed, so compiled already."""
    paths = (env or {}).get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")
    packages = [Path(p) / "fastctl" for p in paths.split(os.pathsep) if p]
    packages = [p for p in packages if p.is_dir()]
    if not packages:
        spec = importlib.util.find_spec("fastctl")
        if spec is not None and spec.submodule_search_locations:
            packages = [Path(next(iter(spec.submodule_search_locations)))]
    for directory in (*packages, HERE):
        if directory not in _COMPILED:
            compileall.compile_dir(directory, quiet=1)
            _COMPILED.add(directory)


@dataclass
class Child:
    """A child Python process that reports JSON lines on stdout.

    Its stderr goes to a log file (shown when it fails). `messages` collects every JSON
    line; `wait_for` waits for one matching a predicate.
    """

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    started_at: float = 0.0
    messages: list[dict[str, Any]] = field(default_factory=list)
    _proc: asyncio.subprocess.Process | None = None
    _reader: asyncio.Task[None] | None = None
    _new_message: asyncio.Event = field(default_factory=asyncio.Event)
    _log: Any = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    async def start(self) -> Child:
        compile_bytecode(self.env)
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        self.started_at = time.monotonic()
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=ROOT,
            limit=64 * 1024 * 1024,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        while True:
            line = await self._proc.stdout.readline()
            if not line:
                break
            if line.startswith(b"{"):
                self.messages.append(json.loads(line))
                self._new_message.set()
        self._new_message.set()

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """The first message matching `predicate` (raises if the child exits or time is up)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for message in self.messages[seen:]:
                if predicate(message):
                    return message
            seen = len(self.messages)
            if self._reader is not None and self._reader.done():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name}: no matching message in {timeout} s")
            self._new_message.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_message.wait(), remaining)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def memory(self) -> dict[str, int]:
        return proc_memory(self.pid)

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    async def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; waits for the exit and the last lines."""
        proc = self._proc
        if proc is None:
            return 0
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                log(f"{self.name}: no exit {timeout} s after SIGTERM; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._reader is not None:
            await self._reader
        if self._log is not None:
            self._log.close()
        return proc.returncode if proc.returncode is not None else 0

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def child_argv(script: str, *args: str) -> list[str]:
    return [PYTHON, str(HERE / script), *args]


def emit(message: dict[str, Any]) -> None:
    """A child's report line (stdout, one JSON object a line)."""
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop a Python operator of the benches runs on, as ``FASTCTL_LOOP`` says
    (``run_peers.py --loop`` sets it for all of them): ``uvloop``, ``auto`` (uvloop when
    installed: ``fastctl run``'s default) or ``asyncio``; unset, asyncio's own. Read here,
    not through fastctl, so that the raw loop and kopf (which do not import fastctl) and
    an older fastctl tree (``fastctl@TREE``) choose the same way."""
    choice = os.environ.get("FASTCTL_LOOP") or "asyncio"
    if choice in ("uvloop", "auto"):
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise
        else:
            return uvloop.new_event_loop
    return asyncio.DefaultEventLoopPolicy().new_event_loop


def run_on_chosen_loop(main: Awaitable[Any]) -> Any:
    """``asyncio.run(main)`` on `loop_factory`'s loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)  # type: ignore[arg-type]
