"""Who hears of the writes a reconcile makes (the own-writes filter of the runtime).

The object API (`fastctl.kube._objects`) tells the `WriteObserver` in `WRITE_OBSERVER`, if
one is set in the current context, when a write of an object starts and what the API
server returned when it ends (the object with its new ``resourceVersion``, or nothing if
it failed). The runtime sets an observer around each reconcile, so a controller can
recognise the watch event its own write causes, even one that arrives before the answer
does. A ContextVar, so that concurrent reconciles (tasks) each report to their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from fastctl.kube._resource import ResolvedResource

__all__ = ["WRITE_OBSERVER", "WriteObserver", "observed_write"]


class WriteObserver(Protocol):
    """Told of each write of one object (`namespace`, `name`) of `resource`."""

    def started(self, resource: ResolvedResource, namespace: str | None, name: str) -> None: ...

    def finished(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
    ) -> None: ...


WRITE_OBSERVER: ContextVar[WriteObserver | None] = ContextVar(
    "fastctl_write_observer", default=None
)


def _ignore(answer: Any) -> None:
    return None


@contextlib.contextmanager
def observed_write(
    resource: ResolvedResource, namespace: str | None, name: str | None
) -> Iterator[Callable[[Any], None]]:
    """Frame one write: the block calls the yielded function with the server's answer."""
    observer = WRITE_OBSERVER.get()
    if observer is None or not name:
        yield _ignore
        return
    answer: Mapping[str, Any] | None = None

    def seen(value: Any) -> None:
        nonlocal answer
        answer = value if isinstance(value, Mapping) else None

    observer.started(resource, namespace, name)
    try:
        yield seen
    finally:
        observer.finished(resource, namespace, name, answer)
