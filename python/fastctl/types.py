"""The small value types every layer shares: object references, actions, triggers, results.

They are plain frozen dataclasses so they hash, compare and print predictably; the
scheduler itself only ever sees `ObjectRef.key` strings.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from fastctl._redact import redact, scrub

__all__ = [
    "Action",
    "ErrorPolicy",
    "Mapper",
    "ObjectRef",
    "Reconcile",
    "ReconcileResult",
    "Trigger",
]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Names one object of a controller's primary resource: `name`, and `namespace` unless
    the resource is cluster-scoped.

    `key` is the scheduler key: ``"namespace/name"``, or ``"name"`` when cluster-scoped
    (the same form client-go's ``MetaNamespaceKeyFunc`` produces).
    """

    name: str
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"ObjectRef name must be a non-empty str, got {self.name!r}")
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not self.namespace
        ):
            raise TypeError(
                f"ObjectRef namespace must be a non-empty str or None, got {self.namespace!r}"
            )

    @property
    def key(self) -> str:
        """The scheduler key: ``"namespace/name"`` or ``"name"``."""
        return self.name if self.namespace is None else f"{self.namespace}/{self.name}"

    @classmethod
    def from_key(cls, key: str) -> ObjectRef:
        """The inverse of `key`."""
        namespace, sep, name = key.rpartition("/")
        return cls(name, namespace) if sep else cls(key)

    @classmethod
    def _from_trusted_key(cls, key: str) -> ObjectRef:
        """`from_key` without validation, for keys that came from `key` (the applier turns
        every popped key back into a ref: this is on its hot path)."""
        namespace, sep, name = key.rpartition("/")
        return cls._trusted(name if sep else key, namespace if sep else None)

    @classmethod
    def _trusted(cls, name: str, namespace: str | None) -> ObjectRef:
        """The reference without validation, for a name and namespace that came from a
        served object or request (on the hot path of every write a reconcile makes, and of
        every watch event). Filled as a `_BuildingRef` (the same slots, writable) and then
        made an `ObjectRef`: half the time of two ``object.__setattr__`` calls past the
        frozen dataclass's guard."""
        if cls is not ObjectRef:  # a subclass may have fields of its own
            ref = object.__new__(cls)
            _set(ref, "name", name)
            _set(ref, "namespace", namespace)
            return ref
        building = _BuildingRef()
        building.name = name
        building.namespace = namespace
        building.__class__ = ObjectRef  # type: ignore[assignment]
        return building  # type: ignore[return-value]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ObjectRef:
        """The reference of a parsed Kubernetes object (its ``metadata.name``/``namespace``).

        On the path of every watch event (the cache and the trigger each take one): a served
        object's name and namespace are plain non-empty strings, so they are checked by
        type here and the dataclass's own validation runs only for anything else, to raise
        its error."""
        try:
            meta = obj["metadata"]
            name = meta["name"]
            namespace = meta.get("namespace") or None
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a Kubernetes object with metadata.name: {obj!r:.200}") from exc
        if type(name) is str and name and (namespace is None or type(namespace) is str):
            return cls._trusted(name, namespace)
        try:
            return cls(name, namespace)
        except TypeError as exc:
            raise ValueError(f"not a Kubernetes object with metadata.name: {obj!r:.200}") from exc

    def __str__(self) -> str:
        return self.key


_set = object.__setattr__


class _BuildingRef:
    """An `ObjectRef` being filled in (`ObjectRef._trusted`): its slots, writable."""

    __slots__ = ("name", "namespace")

    name: str
    namespace: str | None


@dataclass(frozen=True, slots=True)
class Action:
    """What a reconcile asks for next: `requeue_after` seconds from now, or nothing until the
    object (or something mapped to it) changes (`requeue_after is None`)."""

    requeue_after: float | None = None

    def __post_init__(self) -> None:
        after = self.requeue_after
        if after is not None and (
            isinstance(after, bool)
            or not isinstance(after, int | float)
            or math.isnan(after)
            or after < 0
        ):
            raise ValueError(f"requeue delay must be a number >= 0 seconds, got {after!r}")

    @classmethod
    def requeue(cls, after: float) -> Action:
        """Reconcile this object again `after` seconds from now (even if nothing changes)."""
        return cls(float(after) if isinstance(after, int | float) else after)

    @classmethod
    def await_change(cls) -> Action:
        """Do nothing until the object or one of its watched relations changes."""
        return _AWAIT_CHANGE


_AWAIT_CHANGE = Action(None)


@dataclass(frozen=True, slots=True)
class Trigger:
    """A request to reconcile `ref`, with a scheduling `priority` (higher first; the initial
    list uses -100; a signed 64-bit integer) and a human-readable `reason` kept for logs."""

    ref: ObjectRef
    priority: int = 0
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.ref, ObjectRef):
            raise TypeError(f"Trigger.ref must be an ObjectRef, got {type(self.ref).__name__}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"Trigger.priority must be an int, got {self.priority!r}")
        if not _I64_MIN <= self.priority <= _I64_MAX:
            # Refused here, where the caller can see it: the scheduler keeps priorities in
            # 64 bits, and an OverflowError there would stop the whole applier.
            raise ValueError(
                f"Trigger.priority must fit in a signed 64-bit integer, got {self.priority}"
            )


_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


class ReconcileResult(NamedTuple):
    """The outcome of one reconcile: the `action` it (or the error policy) chose, the `error`
    it raised (``None`` on success), how long it ran in seconds, and the `obj` it was given.

    A NamedTuple rather than a frozen dataclass: one is built per reconcile, and a frozen
    dataclass's ``__init__`` costs three times as much on this hot path.
    """

    ref: ObjectRef
    action: Action
    error: BaseException | None = None
    duration: float = 0.0
    obj: Any = None

    @property
    def ok(self) -> bool:
        """True when the reconcile returned normally."""
        return self.error is None

    def __repr__(self) -> str:
        # The object may be a Secret, the error may quote it: neither is printed as is.
        error = scrub(repr(self.error))
        obj = scrub(repr(redact(self.obj)))
        return (
            f"ReconcileResult(ref={self.ref!r}, action={self.action!r}, error={error}, "
            f"duration={self.duration!r}, obj={obj})"
        )


Reconcile = Callable[[Any, Any], "Awaitable[Action | None] | Action | None"]
"""``async def reconcile(obj, ctx) -> Action | None`` (or a plain function, run in a thread)."""

ErrorPolicy = Callable[[Any, BaseException, Any], Action | Awaitable[Action]]
"""``error_policy(obj, exc, ctx) -> Action``: how long to wait before retrying after an error.
It may be a coroutine function (``async def``), to publish an Event or read the API first:
it is awaited in the failed reconcile's slot, before the object's next reconcile can start."""

Mapper = Callable[[dict[str, Any]], Iterable[ObjectRef]]
"""``mapper(obj) -> Iterable[ObjectRef]``: which primary objects a related object affects."""
