"""A pytest plugin for the Python mutation runs (`scripts/mutants_py.py` loads it).

mutmut runs each mutant's tests in a process forked from its fork server, which ignores
SIGINT and exits with status 0 on SIGTERM. A test that sends the process a signal, to check
that the code under test handles it, would then pass under every mutant that removes the
handling: the signal ends the test run "successfully". Before each test this plugin gives
both signals a handler that fails the run (exit status 1) instead: a signal the code does
not handle is a killed mutant, as it fails a plain pytest run.

It also turns Hypothesis' shrinking off: a mutant is killed by the first failing example,
and shrinking it to the smallest one (minutes, for the simulated sharding protocol) changes
nothing in the verdict. Generation and the replay of examples that failed before stay.

With `FASTCTL_MUTANTS_TEST_SECONDS` set (N), a test that has used more than N seconds of
CPU plus `FASTCTL_MUTANTS_TEST_FACTOR` (5) times as long as it took in mutmut's stats run
ends the run as a timeout (status 36, which mutmut counts as one): a mutant that keeps a
member from settling spins its virtual clock on, and then costs seconds instead of mutmut's
limit for all its tests together. CPU time, not the wall clock: a run paused by SIGSTOP or
starved by a busy machine is not timed out for the pause. A test that hangs idle (on a real
clock) is timed out after four times that limit plus a minute of the process's running
time: a watchdog thread adds up its own wake-ups, each counted as at most a second, so a
pause is not counted either. With `FASTCTL_MUTANTS_LOG` set, each run appends when it
started and ended, its mutant and its status to that file.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import Phase, settings

settings.register_profile("mutants", phases=(Phase.explicit, Phase.reuse, Phase.generate))
settings.load_profile("mutants")


def _unhandled(signum: int, frame: FrameType | None) -> None:
    os._exit(1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _unhandled)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _WATCHDOG.start_test(nodeid)  # before its set-up: a fixture can hang too


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _WATCHDOG.start_test(None)


def pytest_sessionstart(session: pytest.Session) -> None:
    _log("start")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _log(f"end {int(exitstatus)}")


TIMEOUT_STATUS = 36
"""mutmut's exit status for a timeout."""


def _log(what: str) -> None:
    path = os.environ.get("FASTCTL_MUTANTS_LOG")
    if path:
        mutant = os.environ.get("MUTANT_UNDER_TEST", "")
        with open(path, "a") as out:
            out.write(f"{time.time():.1f} {os.getpid()} {mutant} {what}\n")


def _stats_durations() -> dict[str, float]:
    """Each test's duration in mutmut's stats run (`mutants/mutmut-stats.json`, beside the
    directory this plugin is copied to)."""
    path = Path(__file__).resolve().parent.parent / "mutmut-stats.json"
    try:
        durations: dict[str, float] = json.loads(path.read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return {}
    return durations


class _Watchdog:
    """Ends the process when one test has run longer than its limit."""

    TICK = 0.2
    MAX_STEP = 1.0
    """A wake-up later than this counts as this: the process was paused or starved."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._test: str | None = None
        self._cpu_limit = 0.0
        self._cpu_start = 0.0
        self._ran = 0.0
        self._pid = 0
        self._durations: dict[str, float] | None = None

    def start_test(self, nodeid: str | None) -> None:
        seconds = os.environ.get("FASTCTL_MUTANTS_TEST_SECONDS")
        if not seconds or "." not in os.environ.get("MUTANT_UNDER_TEST", ""):
            return  # only a mutant's run: not mutmut's stats, clean or forced-fail runs
        if self._durations is None:
            self._durations = _stats_durations()
        factor = float(os.environ.get("FASTCTL_MUTANTS_TEST_FACTOR", "5"))
        limit = float(seconds) + factor * self._durations.get(nodeid or "", 0.0)
        with self._lock:
            self._test, self._ran = nodeid, 0.0
            self._cpu_limit, self._cpu_start = limit, time.process_time()
        if self._pid != os.getpid():  # first test of this (forked) process
            self._pid = os.getpid()
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(self.TICK)
            now = time.monotonic()
            step, last = min(now - last, self.MAX_STEP), now
            with self._lock:
                if self._test is None:
                    continue
                self._ran += step
                cpu = time.process_time() - self._cpu_start
                if cpu < self._cpu_limit and self._ran < 4 * self._cpu_limit + 60:
                    continue
                test, limit = self._test, self._cpu_limit
            what = f"{cpu:.1f} s of CPU, {self._ran:.0f} s running (limit {limit:.1f} s of CPU)"
            print(f"\n{test}: {what}: a timeout", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(all_threads=True)
            _log(f"timeout {test} {what}")
            os._exit(TIMEOUT_STATUS)


_WATCHDOG = _Watchdog()
