"""Status conditions: `set_condition`, controller-runtime's ``meta.SetStatusCondition``.

A condition's ``lastTransitionTime`` says when its *status* last changed, not when a
reconcile last wrote it: a controller that stamps the time on every write makes
``kubectl describe`` and alerting on "Ready=False for 10 minutes" lie. So the time is kept
while the status stays, and set when the status changes or the condition is new; reason,
message and ``observedGeneration`` (which generation the condition speaks of) are always
the new ones.

Conditions may be `fastctl.kube.Condition` models (a typed status) or dicts (camelCase, as
on the wire). This module does not import pydantic: a model is recognised by its methods,
so dict statuses work without the ``typed`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["set_condition"]

_STATUSES = ("True", "False", "Unknown")


def set_condition(
    conditions: MutableSequence[Any],
    condition: Any,
    *,
    generation: int | None = None,
    now: datetime | None = None,
) -> bool:
    """Put `condition` into `conditions` (in place), replacing the one of the same type;
    returns whether anything changed (so a reconcile can skip a status write that would
    change nothing).

    `condition` is a `Condition` or a mapping with ``type``, ``status`` (``"True"``,
    ``"False"``, ``"Unknown"``), ``reason`` and optionally ``message``. Its
    ``lastTransitionTime`` is the one already in `conditions` if the status is the same,
    otherwise `now` (default: the current time, UTC, whole seconds). Its
    ``observedGeneration`` is `generation` (the object's ``metadata.generation``) unless it
    gives its own.

    The entry written is a new value of `condition`'s type (a model or a dict): the items
    already in `conditions` are never changed, only replaced, so a list copied from a cached
    object (``list(obj.status.conditions)``) can be passed without touching the cache."""
    new = _as_json(condition)
    kind = new.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a condition needs a type, got {condition!r}")
    if new.get("status") not in _STATUSES:
        raise ValueError(f"condition {kind}: status must be one of {_STATUSES}, got {condition!r}")
    if not isinstance(new.get("reason"), str) or not new["reason"]:
        raise ValueError(f"condition {kind}: a reason is required (CamelCase, like Rendered)")
    new.setdefault("message", "")
    if new.get("observedGeneration") is None:
        new.pop("observedGeneration", None)
        if generation is not None:
            new["observedGeneration"] = generation
    index = next(
        (i for i, item in enumerate(conditions) if _as_json(item).get("type") == kind), None
    )
    old = _as_json(conditions[index]) if index is not None else None
    if old is not None and old.get("status") == new["status"] and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    elif not new.get("lastTransitionTime"):
        new["lastTransitionTime"] = _timestamp(now or datetime.now(UTC))
    if old is not None and {**old, "message": old.get("message") or ""} == new:
        return False
    entry = _like(condition, new)
    if index is None:
        conditions.append(entry)
    else:
        conditions[index] = entry
    return True


def _as_json(condition: Any) -> dict[str, Any]:
    """A condition as a new dict in wire spelling (a model dumped by alias)."""
    if isinstance(condition, Mapping):
        return {k: v for k, v in condition.items() if v is not None}
    dump = getattr(condition, "model_dump", None)
    if dump is None:
        raise TypeError(f"a condition is a Condition or a mapping, got {type(condition).__name__}")
    dumped: dict[str, Any] = dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _like(condition: Any, value: dict[str, Any]) -> Any:
    """`value` as the type of `condition`: a dict, or a model validated from it."""
    if isinstance(condition, Mapping):
        return value
    return type(condition).model_validate(value)


def _timestamp(when: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as metav1.Time writes it."""
    if when.tzinfo is None:
        raise ValueError("now must be an aware datetime (datetime.now(UTC))")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
