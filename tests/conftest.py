"""The event loop the suite runs on: asyncio's own (the default) or uvloop.

``--event-loop uvloop`` (or ``FASTCTL_TEST_LOOP=uvloop``) runs every test on uvloop: the
async tests (pytest-asyncio makes their loops through the policy), the ``asyncio.run``
calls of synchronous tests, and, through ``FASTCTL_LOOP``, the operators the tests start
with ``fastctl run`` in this process or in a subprocess. Tests on a `VirtualTimeLoop` run on
it either way: it is a loop of its own. CI runs the suite once on each loop
(docs/testing.md).
"""

from __future__ import annotations

import asyncio
import os

import pytest

LOOPS = ("asyncio", "uvloop")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("fastctl").addoption(
        "--event-loop",
        choices=LOOPS,
        default=os.environ.get("FASTCTL_TEST_LOOP") or "asyncio",
        help="the event loop the tests run on (default: $FASTCTL_TEST_LOOP, else asyncio)",
    )


def pytest_configure(config: pytest.Config) -> None:
    loop: str = config.getoption("event_loop")
    # What `fastctl run` and `fastctl demo` choose, in this process and in its children.
    os.environ["FASTCTL_LOOP"] = loop
    if loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def pytest_report_header(config: pytest.Config) -> str:
    return f"event loop: {config.getoption('event_loop')}"
