"""SIGTERM and SIGINT for `Controller.run` and `Manager.run`, the same way for both.

The first signal asks for a graceful stop (no new reconciles, the running ones finish);
the second cuts the drain short (the running reconciles are cancelled at once), which is
what someone pressing Ctrl-C twice, or a supervisor sending SIGTERM again, means. Where the
loop cannot take signal handlers (not the main thread, Windows), nothing is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator

__all__ = ["stop_on_signals"]

log = logging.getLogger("fastctl.signals")


@contextlib.contextmanager
def stop_on_signals(
    what: str, *, graceful: Callable[[], None], at_once: Callable[[], None]
) -> Iterator[None]:
    """While inside, the first SIGTERM/SIGINT calls `graceful`, any later one `at_once`.
    `what` names the stopping thing in the log lines."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    seen = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            log.info("%s: %s: stopping gracefully; again to cancel at once", what, sig.name)
            graceful()
        else:
            log.warning("%s: %s again: cancelling the running reconciles", what, sig.name)
            at_once()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
