"""The Controller builder: its defaults, and each refusal with the exact message a user reads
(what was wrong, and what to do instead)."""

from __future__ import annotations

from typing import Any

import pytest

from fastctl import ObjectRef
from fastctl.kube._resource import Resource
from fastctl.runtime.controller import Controller

from .test_controller_relist import CHILD, NS, WIDGET, client


async def _nothing(obj: Any, ctx: Any) -> None:
    return None


def _mapper(obj: Any) -> list[ObjectRef]:
    return [ObjectRef("a", NS)]


def _ctl() -> Controller:
    return Controller(client(), WIDGET, _nothing, name="widgets")


def _message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value.args[0])


def test_a_plain_controller_has_no_model_and_does_not_ignore_its_own_writes() -> None:
    ctl = _ctl()
    assert ctl.model is None
    assert ctl.ignore_own_writes is False
    assert ctl.spec.ignore_own_writes is False


def test_what_is_not_a_resource_or_not_callable_is_refused_by_type() -> None:
    with pytest.raises(TypeError) as resource:
        Controller(client(), "widgets", _nothing)  # type: ignore[arg-type]
    assert _message(resource) == (
        "resource must be a fastctl.Resource or a CustomResource model, got str"
    )
    with pytest.raises(TypeError) as reconcile:
        Controller(client(), WIDGET, 42)  # type: ignore[arg-type]
    assert _message(reconcile) == "reconcile must be callable, got int"
    with pytest.raises(TypeError) as related:
        _ctl().owns("configmaps")  # type: ignore[arg-type]
    assert _message(related) == "resource must be a fastctl.Resource, got str"
    with pytest.raises(TypeError) as mapper:
        _ctl().watches(CHILD, "by-owner")  # type: ignore[arg-type]
    assert _message(mapper) == "mapper must be callable, got str"
    with pytest.raises(TypeError) as event_filter:
        _ctl().watches(CHILD, _mapper, event_filter=1)  # type: ignore[arg-type]
    assert _message(event_filter) == (
        "watches: event_filter must be callable (old, new) -> bool, got int"
    )


def test_a_resource_is_watched_one_way() -> None:
    with pytest.raises(ValueError, match="primary resource") as primary:
        _ctl().owns(WIDGET, metadata_only=True)
    assert _message(primary) == (
        f"{WIDGET} is the primary resource, watched with full objects: "
        "metadata_only applies to related resources only"
    )
    ctl = _ctl().owns(CHILD)
    with pytest.raises(ValueError, match="one way") as twice:
        ctl.watches(CHILD, _mapper, metadata_only=True)
    assert _message(twice) == (
        f"{CHILD} is already watched with metadata_only=False: "
        "one controller watches a resource one way"
    )


def test_a_cached_resource_may_also_be_watched_uncached() -> None:
    """Two relations on one resource, the first cached: the second adds no cache, and the
    controller's cache of it is the first's."""
    ctl = _ctl().owns(CHILD, cache=True)
    cache = ctl.cache(CHILD)
    ctl.watches(CHILD, _mapper)
    assert ctl.cache(CHILD) is cache
    assert cache.resource == CHILD


@pytest.mark.parametrize("relation", ["owns", "watches"])
def test_a_relation_keeps_no_cache_unless_asked(relation: str) -> None:
    ctl = _ctl()
    if relation == "owns":
        ctl.owns(CHILD)
    else:
        ctl.watches(CHILD, _mapper)
    assert ctl.spec.caches == []
    with pytest.raises(KeyError) as missing:
        ctl.cache(CHILD)
    assert _message(missing) == (
        f"controller widgets does not cache {CHILD}: "
        "add it with owns(..., cache=True) or watches(..., cache=True)"
    )


def test_a_cache_of_another_resource_is_not_found() -> None:
    ctl = _ctl().owns(CHILD, cache=True)
    with pytest.raises(KeyError):
        ctl.cache(Resource("v1", "Secret"))
