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
"""

from __future__ import annotations

import os
import signal
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
