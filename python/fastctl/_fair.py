"""Fair shares between tenants: which fair group a triggered object's key joins.

With ``fair_by`` set, an applier passes each key's group to the scheduler, which serves the
groups with ready keys at one priority in turn (docs/scheduler.md, "Fair groups"), so one
namespace creating 10,000 objects no longer makes every other namespace's changes wait
behind them. ``"namespace"`` groups by the object's namespace; a function gets the cached
object and returns its group (``None`` or ``""``: no group), e.g. a tenant label.

``group_concurrency`` caps the reconciles of one group running at once (the scheduler's
``group_concurrency``): turns share the order of service, the cap shares the slots, so a
group whose reconciles are slow cannot hold every one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from fastctl._core import Scheduler
from fastctl.types import ObjectRef

__all__ = ["FairBy", "check_group_concurrency", "group_function"]

FairBy: TypeAlias = Literal["namespace"] | Callable[[Any], str | None]
"""``"namespace"``, or a function of the cached object returning its fair group."""

GroupOf: TypeAlias = Callable[[ObjectRef, Mapping[ObjectRef, Any]], str | None]


def _by_namespace(ref: ObjectRef, store: Mapping[ObjectRef, Any]) -> str | None:
    return ref.namespace or None


def check_group_concurrency(group_concurrency: int, fair_by: FairBy | None) -> None:
    """Refuse a cap the scheduler refuses (not an int in [0, 2**32), or a bool), and a cap
    set without `fair_by`: with no groups nothing would be capped, and silently ignoring the
    setting would leave the one slow tenant it was meant for free to take every slot."""
    # The scheduler's own check (a scheduler costs a few empty allocations), so the rule and
    # its message are written once, in Rust.
    Scheduler(group_concurrency=group_concurrency)
    if group_concurrency and fair_by is None:
        raise ValueError(
            f"group_concurrency={group_concurrency} needs fair_by: it caps the reconciles of "
            'one fair group (fair_by="namespace", or a function of the object)'
        )


def group_function(fair_by: FairBy | None) -> GroupOf | None:
    """How to find a key's group from its `ObjectRef` and the store, or ``None`` (fairness
    off: keys are added with no group, at no cost). Refuses anything but the two forms."""
    if fair_by is None:
        return None
    if fair_by == "namespace":
        return _by_namespace
    if isinstance(fair_by, str) or not callable(fair_by):
        raise ValueError(
            f'fair_by must be "namespace", a function of the object, or None, got {fair_by!r}'
        )
    by_object = fair_by

    def of_object(ref: ObjectRef, store: Mapping[ObjectRef, Any]) -> str | None:
        # Not cached (yet): no group. The group is fixed when the key is first queued.
        obj = store.get(ref)
        if obj is None:
            return None
        group = by_object(obj)
        if group is not None and not isinstance(group, str):
            raise TypeError(
                f"fair_by must return a str or None, got {type(group).__name__} for {ref.key}"
            )
        return group or None

    return of_object
