"""The event loop fastctl's own entry points run on: uvloop where it is installed.

An operator's CPU goes mostly to the event loop, TLS and the HTTP client, not to its own
code; uvloop (libuv under the asyncio API) does that part for less than asyncio's own loop
(a sixth less operator CPU per change at 5,000 Widgets, nothing measurable at 1,000:
docs/benchmarks.md). fastctl depends on it where it has wheels
(CPython, not Windows), and ``fastctl run`` and ``fastctl demo`` run on it by default. Where
it is missing they run on asyncio's own loop, as they would with the choice ``asyncio``.

The choice: ``auto`` (uvloop if it can be imported, else asyncio), ``uvloop`` (refused when
it cannot be imported: asked for by name, it must not be replaced silently) or ``asyncio``;
given on the command line (``--loop``), else by ``FASTCTL_LOOP``, else ``auto``.

A library user who runs a `Manager` or a `Controller` from their own ``main`` picks the
loop themselves: ``uvloop.run(main())``, or
``asyncio.Runner(loop_factory=uvloop.new_event_loop)`` (docs/authoring.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["CHOICES", "ENV", "LoopChoiceError", "choose", "loop_factory", "run"]

ENV = "FASTCTL_LOOP"
"""The environment variable that chooses the loop when the command line does not."""

CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


class LoopChoiceError(ValueError):
    """A loop choice that cannot be honoured: an unknown name, or uvloop not installed."""


def choose(choice: str | None = None) -> str:
    """The loop that `choice` (``None``: ``$FASTCTL_LOOP``, else ``auto``) means here:
    ``"uvloop"`` or ``"asyncio"``."""
    source = "--loop"
    if choice is None:
        choice = os.environ.get(ENV, "") or "auto"
        source = ENV
    if choice not in CHOICES:
        raise LoopChoiceError(f"{source} {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise LoopChoiceError(
                f"{source} uvloop: uvloop is not installed (pip install uvloop; it has no "
                "wheels for Windows or PyPy)"
            ) from None
        return "asyncio"
    return "uvloop"


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of the kind `choice` means (see `choose`)."""
    if choose(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return _asyncio_loop


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    """A new loop of asyncio's own, whatever loop policy is installed (uvloop installs one;
    ``asyncio.new_event_loop()`` follows it)."""
    return asyncio.DefaultEventLoopPolicy().new_event_loop()


def run(main: Coroutine[Any, Any, T], *, loop: str | None = None) -> T:
    """``asyncio.run(main)`` on the loop `loop` chooses (see `choose`)."""
    try:
        factory = loop_factory(loop)
    except LoopChoiceError:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
