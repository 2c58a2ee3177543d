"""The compact cache read while it is written: no read holds the table while Python runs.

A plain-function reconcile reads the cache on its own thread while the loop thread puts
watch events in. A read that builds a list, tuple or dict can run the garbage collector,
and with it a finalizer's Python code, which can hand the GIL to the other thread; if the
read still held the table then, the loop thread's ``put`` failed with "Already borrowed"
and the event was lost. A finalizer that writes stands in for that other thread here, at
the exact moment the collector runs inside each read."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from fastctl._core import CompactMap, Item, decode_object


def _item(name: str, version: int = 1) -> Item:
    return decode_object(
        orjson.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "uid": f"uid-{name}",
                    "resourceVersion": str(version),
                    "labels": {"app": "a"},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Owner",
                            "name": "o",
                            "uid": "owner",
                            "controller": True,
                        }
                    ],
                },
            }
        )
    )


class _Writes:
    """Garbage whose finalizer puts an object into the map: run by the collector, it writes
    while whatever read triggered the collection is under way."""

    def __init__(self, table: CompactMap, failures: list[str], item: Item) -> None:
        self.table, self.failures, self.item = table, failures, item
        self.cycle = self  # collected by the garbage collector only, not on the last reference

    def __del__(self) -> None:
        try:
            self.table.put(self.item)
        except RuntimeError as exc:
            self.failures.append(repr(exc))


@pytest.fixture
def collect_on_every_allocation() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


READS: dict[str, Callable[[CompactMap, CompactMap], Any]] = {
    "keys": lambda table, _: table.keys(),
    "keys of a namespace": lambda table, _: table.keys("ns"),
    "values": lambda table, _: table.values(),
    "owned_by": lambda table, _: table.owned_by("owner"),
    "missing_from": lambda table, other: table.missing_from(other),
    "label_values": lambda table, _: table.label_values("app"),
}
"""Every read that makes a collected object per entry (`labels` and `version` make one
dict or pair, which CPython takes from a free list without collecting: they copy out first
all the same)."""


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
@pytest.mark.usefixtures("collect_on_every_allocation")
def test_a_write_during_a_read_is_not_refused(
    read: Callable[[CompactMap, CompactMap], Any],
) -> None:
    table, other = CompactMap(), CompactMap()
    for i in range(50):
        table.put(_item(f"cm-{i}"))
    failures: list[str] = []
    wrote = 0
    for round_ in range(20):
        item = _item(f"new-{round_}")
        gc.disable()  # the garbage stays young, and the read's first allocation collects it
        _Writes(table, failures, item)
        young: list[list[int]] = [
            [] for _ in range(10)
        ]  # over the threshold whatever was freed since
        before = len(table)
        gc.enable()
        read(table, other)
        wrote += len(table) - before
        del young
    assert failures == []
    assert wrote > 0  # finalizers did run inside the reads (a free list can spare one)
