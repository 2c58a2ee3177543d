"""Copy on read: a reconcile gets its own copy of the cached object, so it may change it.

The cache holds one parsed object per watched object, shared by everything that reads it:
the triggers, the event filters' memory, the indexes, every controller of a Manager that
shares the watch. A reconcile that set ``obj["status"]`` before writing it used to change
that shared object: the cache then showed a state the API server never had, until the next
event replaced it, and the filters compared against it. controller-runtime deep-copies what
its cache hands out for this reason.

A copy costs CPU per reconcile, so it is made the cheapest way measured: ``orjson.loads(
orjson.dumps(obj))`` (the objects are parsed JSON, so the round trip is exact), about a
fifth of ``copy.deepcopy``'s time (docs/benchmarks.md, "Copy on read"); an object that is
not plain JSON (a store a test filled with other types, a transform that put a tuple in)
falls back to `copy.deepcopy`. Freezing the cached objects instead would cost as much to
build (a frozen copy of each) and would break every reconcile that passes its object to
code expecting a dict.

The `Store` now keeps each object as its JSON bytes and parses it anew on every read
(`fastctl.kube._store`): its reads are the copies, so a controller reconciling from a
`Store` skips this wrapper (``reconcile_view(..., fresh_reads=True)``) and the object is
parsed once per reconcile, not parsed, encoded and parsed again. The wrapper stays for a
store that hands out shared objects (any other ``Mapping`` given to the runtime).
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, TypeVar

import orjson

from fastctl.types import Reconcile

__all__ = ["copied", "copy_object"]

T = TypeVar("T")


def copy_object(obj: T) -> T:
    """A deep copy of `obj`, a parsed JSON object (see the module docstring)."""
    try:
        return orjson.loads(orjson.dumps(obj))  # type: ignore[no-any-return]
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(obj)


def copied(reconcile: Reconcile) -> Reconcile:
    """`reconcile`, called with its own copy of the object (the kind of callable kept: a
    coroutine function stays one, a plain function plain, to run in a thread)."""
    if inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(
        getattr(reconcile, "__call__", None)  # noqa: B004 - async callable objects
    ):

        @functools.wraps(reconcile)
        async def run_async(obj: Any, ctx: Any) -> Any:
            return await reconcile(copy_object(obj), ctx)  # type: ignore[misc]

        return run_async

    @functools.wraps(reconcile)
    def run(obj: Any, ctx: Any) -> Any:
        return reconcile(copy_object(obj), ctx)

    return run
