"""Copy on read: a reconcile that changes the object it got, or a child it read from a
related cache, leaves the cache as the API server sent it.

The cache's objects are shared by the triggers, the filters' memory, the indexes and every
controller of a shared watch; a reconcile that set ``obj["status"]`` before writing it
used to change all of those."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import ObjectRef
from fastctl.runtime import Controller
from fastctl.runtime._copy_on_read import copy_object

from .test_controller_relist import CHILD, WIDGET, Sources, child, listing, running, until, widget


def _mutate(obj: dict[str, Any]) -> None:
    obj["status"] = {"ready": True}
    obj["metadata"]["labels"] = {"touched": "yes"}
    obj["v"] = -1


@pytest.mark.parametrize("kind", ["async", "plain"])
async def test_a_reconcile_that_mutates_its_object_leaves_the_cache_unchanged(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = Sources(False, monkeypatch)
    seen: list[dict[str, Any]] = []
    children_read: list[dict[str, Any]] = []

    def body(obj: dict[str, Any], ctx: Controller) -> None:
        _mutate(obj)
        for c in ctx.cache(CHILD).owned_by(obj):  # a child read from the related cache
            c["data"]["owner"] = "someone else"
            children_read.append(c)
        seen.append(obj)

    async def reconcile_async(obj: dict[str, Any], ctx: Controller) -> None:
        body(obj, ctx)

    reconcile: Any = reconcile_async if kind == "async" else body
    ctl = Controller(ApiClient.__new__(ApiClient), WIDGET, reconcile)
    ctl.owns(CHILD, cache=True)
    ctl.context = ctl
    cached = widget("a", 1)
    before = copy.deepcopy(cached)
    cached_child = child("c", "a")
    child_before = copy.deepcopy(cached_child)
    sources.feeds[WIDGET].push(*listing(cached))
    sources.feeds[CHILD].push(*listing(cached_child))
    async with running(ctl):
        await until(lambda: len(seen) == 1 and len(children_read) == 1, "the reconcile")
        held = ctl.store[ObjectRef("a", "default")]
        assert held == before, "the reconcile's change reached the cache"
        assert ctl.cache(CHILD).get("c", "default") == child_before
        assert seen[0]["status"] == {"ready": True}  # the reconcile did change its copy
        assert children_read[0]["data"]["owner"] == "someone else"
    await asyncio.sleep(0)


def test_the_copy_is_deep_and_falls_back_for_what_is_not_json() -> None:
    obj: dict[str, Any] = {"metadata": {"labels": {"a": "b"}}, "spec": {"items": [{"x": 1}]}}
    copied = copy_object(obj)
    assert copied == obj
    assert copied["spec"]["items"][0] is not obj["spec"]["items"][0]
    odd: dict[str, Any] = {
        "t": (1, 2),
        "s": {1, 2},
    }  # not JSON: deep-copied the slow way, types kept
    assert copy_object(odd) == odd
    assert copy_object(odd)["s"] is not odd["s"]
