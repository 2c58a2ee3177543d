"""Typed reconciles: the cache stays JSON, the reconcile gets a validated model instance.

``Controller(client, Widget, reconcile)`` with a `CustomResource` subclass watches
``Widget.resource()`` and wraps `reconcile` so that each run starts by validating the cached
object as a ``Widget``. Validating when the reconcile starts, not when the watch event
arrives, keeps the cache (and everything that shares it: other controllers, the store's
readers, mappers) plain JSON, costs nothing for objects that are never reconciled, and
makes a bad object one failed reconcile: `InvalidObject`, logged, sent to the error policy
(and a Warning Event), while every other object reconciles on.

A plain-function reconcile stays a plain function (the applier runs it in a thread), a
coroutine function stays one: the wrapper has the same kind as what it wraps.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fastctl.types import Reconcile

if TYPE_CHECKING:
    from fastctl.kube._model import CustomResource

__all__ = ["is_model", "typed_reconcile"]


def is_model(resource: object) -> bool:
    """True for a `CustomResource` subclass (checked without importing pydantic unless
    `resource` is a class at all)."""
    if not isinstance(resource, type):
        return False
    from fastctl.kube._model import CustomResource

    return issubclass(resource, CustomResource)


def typed_reconcile(model: type[CustomResource], reconcile: Reconcile) -> Reconcile:
    """`reconcile` taking ``model`` instances, as a reconcile of cached JSON objects."""
    from fastctl.kube._model import parse

    is_async = inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
        getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
    )
    if is_async:

        @functools.wraps(reconcile)
        async def run_async(obj: Mapping[str, Any], ctx: Any) -> Any:
            return await reconcile(parse(model, obj), ctx)  # type: ignore[misc]

        return run_async

    @functools.wraps(reconcile)
    def run(obj: Mapping[str, Any], ctx: Any) -> Any:
        return reconcile(parse(model, obj), ctx)

    return run
