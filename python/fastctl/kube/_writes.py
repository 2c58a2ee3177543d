"""Who hears of the writes a reconcile makes (the own-writes filter of the runtime), and
how a write proves that it changed its object.

The object API (`fastctl.kube._objects`) tells the `WriteObserver` in `WRITE_OBSERVER`, if
one is set in the current context, when a write of an object starts and what the API
server returned when it ends. The runtime sets an observer around each reconcile, so a
controller can recognise the watch event its own write causes, even one that arrives
before the answer does. A ContextVar, so that concurrent reconciles (tasks) each report to
their own.

An answer alone does not say that the write changed anything: a write that changes nothing
(the usual "write the status I computed") is answered with the object as it is, whose
``resourceVersion`` may be another writer's. So a write is reported as *made* (its answer's
version is the state this write produced) only with a proof from the server:

- it created the object (HTTP 201: a POST, or a server-side apply of a missing object); or
- it carried a ``resourceVersion`` precondition (the observer's latest known version of the
  object, added here; or the caller's own) that the server accepted, so it was applied to
  exactly that version, and the answer has another version: the change is this write's.

A precondition added here that the server refuses (409: the object changed meanwhile) is
dropped and the write sent again as the caller wrote it, unproven: the caller sees the
unconditional write it asked for, at the cost of one more request.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from fastctl.errors import ApiError
from fastctl.kube._resource import ResolvedResource

__all__ = ["WRITE_OBSERVER", "WriteObserver", "observed", "observed_write"]


class WriteObserver(Protocol):
    """Told of each write of one object (`namespace`, `name`) of `resource`: `started`
    and `finished` (a create by ``generateName`` starts with the name ``""``: it is not
    known until the answer, which `finished` is given)."""

    def started(self, resource: ResolvedResource, namespace: str | None, name: str) -> str | None:
        """A write begins; returns the object's latest ``resourceVersion`` the observer
        knows (the write is made conditional on it), or ``None``."""
        ...

    def finished(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str,
        answer: Mapping[str, Any] | None,
        *,
        made: bool,
        based_on: str | None,
        deleted: bool = False,
    ) -> None:
        """The write ended: `answer` is the object (``None``: it failed). `made`: the answer's
        version is proven this write's change, applied to version `based_on` (``None``: it
        created the object). `deleted`: the write was a DELETE (its answer is the object
        still there while finalizers run, or gone: the object as it was, or a Status)."""
        ...


WRITE_OBSERVER: ContextVar[WriteObserver | None] = ContextVar(
    "fastctl_write_observer", default=None
)

Attempt = Callable[[str | None], Awaitable[tuple[int, Any]]]
"""Send the write once, with that ``resourceVersion`` precondition added (``None``: as the
caller wrote it); returns the HTTP status and the parsed answer."""


def version_of(obj: object) -> str | None:
    """``metadata.resourceVersion`` of a parsed object (``None`` if it has none)."""
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return str(version) if version else None


class observed_write:
    """Frame one write: ``with observed_write(...) as write: answer = await write.send(f)``.

    `name` ``None`` (a create by ``generateName``): the name is not known until the
    answer, so the observer hears it start with the name ``""`` and learns the name from
    the answer. `deleting`: a DELETE, told to the observer as ``deleted``. A `dry_run` is
    not reported at all: it makes no event, and its answer may carry the current version,
    whose event has come already.
    `given` is a precondition the caller's body carries itself; `conditional` says whether
    one may be added (the body has room for it).

    A class rather than a generator-based context manager: every write passes here, and
    with no observer set (outside reconciles, or no own-write filter) it costs a few calls."""

    __slots__ = (
        "_answer",
        "_based_on",
        "_conditional",
        "_created",
        "_deleting",
        "_given",
        "_name",
        "_namespace",
        "_observer",
        "_resource",
    )

    def __init__(
        self,
        resource: ResolvedResource,
        namespace: str | None,
        name: str | None,
        *,
        dry_run: bool = False,
        given: str | None = None,
        conditional: bool = False,
        deleting: bool = False,
    ):
        self._observer = None if dry_run else WRITE_OBSERVER.get()
        self._deleting = deleting
        self._resource, self._namespace, self._name = resource, namespace, name or ""
        self._given, self._conditional = given, conditional and given is None
        self._answer: Mapping[str, Any] | None = None
        self._created = False
        self._based_on: str | None = None

    def __enter__(self) -> observed_write:
        observer = self._observer
        if observer is not None:
            known = observer.started(self._resource, self._namespace, self._name)
            if not self._conditional or not self._name:
                known = None
            self._based_on = known
        return self

    async def send(self, attempt: Attempt) -> Any:
        """Send the write (`attempt`), conditional on the observer's known version when
        there is one; again as written if that condition is refused. Returns the answer."""
        condition = self._based_on if self._observer is not None else None
        try:
            status, answer = await attempt(condition)
        except ApiError as exc:
            if condition is None or exc.status != 409:
                raise
            condition = self._based_on = None  # changed since: as asked, and unproven
            status, answer = await attempt(None)
        if condition is None:
            self._based_on = self._given
        self._created = status == 201
        self._answer = answer if isinstance(answer, Mapping) else None
        return answer

    def __exit__(self, *exc: object) -> None:
        observer = self._observer
        if observer is None:
            return
        answer = self._answer
        if self._created:  # it made the object: nothing came before it
            made, based_on = True, None
        else:  # applied to a known version: made if the answer has another
            based_on = self._based_on
            made = based_on is not None and version_of(answer) not in (None, based_on)
        observer.finished(
            self._resource,
            self._namespace,
            self._name,
            answer,
            made=made,
            based_on=based_on,
            deleted=self._deleting,
        )


F = TypeVar("F", bound=Callable[..., Any])


def observed(
    reconcile: F,
    begin: Callable[[Any], WriteObserver],
    end: Callable[[WriteObserver], None] | None = None,
) -> F:
    """`reconcile`, with the observer ``begin(obj)`` set for each call (in its own context:
    concurrent reconciles each report to theirs), and ``end(observer)`` once the call is
    over, however it ended. An async reconcile stays async, a plain one plain (it runs in a
    thread, where the observer is set too)."""
    if inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
        getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
    ):

        @functools.wraps(reconcile)
        async def run_async(obj: Any, ctx: Any) -> Any:
            observer = begin(obj)
            token = WRITE_OBSERVER.set(observer)
            try:
                return await reconcile(obj, ctx)
            finally:
                WRITE_OBSERVER.reset(token)
                if end is not None:
                    end(observer)

        return run_async  # type: ignore[return-value]

    @functools.wraps(reconcile)
    def run(obj: Any, ctx: Any) -> Any:
        observer = begin(obj)
        token = WRITE_OBSERVER.set(observer)
        try:
            return reconcile(obj, ctx)
        finally:
            WRITE_OBSERVER.reset(token)
            if end is not None:
                end(observer)

    return run  # type: ignore[return-value]
