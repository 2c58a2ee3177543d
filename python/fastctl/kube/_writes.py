"""Who hears of the writes a reconcile makes (the own-writes filter of the runtime).

The object API (`fastctl.kube._objects`) tells the `WriteObserver` in `WRITE_OBSERVER`, if
one is set in the current context, when a write of an object starts and what the API
server returned when it ends (the object with its new ``resourceVersion``, or nothing if
it failed). The runtime sets an observer around each reconcile, so a controller can
recognise the watch event its own write causes, even one that arrives before the answer
does. A ContextVar, so that concurrent reconciles (tasks) each report to their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from fastctl.kube._resource import ResolvedResource

__all__ = ["WRITE_OBSERVER", "WriteObserver", "observed_write"]


class WriteObserver(Protocol):
    """Told of each write of one object (`namespace`, `name`) of `resource`: `started`
    and `finished`, or (a create by ``generateName``, name ``""``) only `finished`."""

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


class observed_write:
    """Frame one write: the block calls the yielded function with the server's answer.

    `name` ``None`` (a create by ``generateName``): the name is not known until the
    answer, so the observer hears of the write only when it ends (an echo that comes
    before the answer cannot be told then). A `dry_run` is not reported at all: it makes
    no event, and its answer may carry the current version, whose event has come already.

    A class rather than a generator-based context manager: every write passes here, and
    with no observer set (outside reconciles, or no own-write filter) it costs two calls."""

    __slots__ = ("_answer", "_name", "_namespace", "_observer", "_resource")

    def __init__(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str | None,
        *,
        dry_run: bool = False,
    ):
        self._observer = None if dry_run else WRITE_OBSERVER.get()
        self._resource, self._namespace, self._name = resource, namespace, name or ""
        self._answer: Mapping[str, Any] | None = None

    def __enter__(self) -> Callable[[Any], None]:
        if self._observer is None:
            return _ignore
        if self._name:
            self._observer.started(self._resource, self._namespace, self._name)
        return self._seen

    def _seen(self, value: Any) -> None:
        self._answer = value if isinstance(value, Mapping) else None

    def __exit__(self, *exc: object) -> None:
        if self._observer is not None:  # name "" (generateName): matches no write in flight
            self._observer.finished(self._resource, self._namespace, self._name, self._answer)
