"""Typed reconciles beside dict reconciles: the applier over an in-process store of 5,000
Widget objects (no server), the same render in both, the typed one through the wrapper a
`Controller` uses (each reconcile validates the cached JSON as a ``Widget``).

Run: ``.venv/bin/python -m pytest benches/test_bench_typed.py --benchmark-only``.

Memory is reported through ``benchmark.extra_info`` (and printed): the peak a whole run
allocates (tracemalloc), and what 5,000 parsed ``Widget`` instances would hold beside
the 5,000 JSON objects they come from, the cost a cache of instances would add, which
fastctl does not pay because its cache stays JSON.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

import fastctl
from fastctl import ObjectRef
from fastctl.demo.widgets import Widget, render
from fastctl.runtime._typed import typed_reconcile

ITEMS = 5_000
CONCURRENCY = 64


def widget_json(i: int) -> dict[str, Any]:
    """A Widget as the cache holds it: metadata, a spec of 5 values, a Ready status."""
    name = f"widget-{i:05d}"
    return {
        "apiVersion": "demo.fastctl.dev/v1",
        "kind": "Widget",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "generation": 2,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench", "tier": "web"},
            "finalizers": ["demo.fastctl.dev/cleanup"],
        },
        "spec": {"data": {f"key{k}": f"value {k} of {{name}}" for k in range(5)}},
        "status": {
            "observedGeneration": 2,
            "configMap": f"{name}-rendered",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Rendered",
                    "message": "rendered 5 keys",
                    "observedGeneration": 2,
                    "lastTransitionTime": "2026-01-01T00:00:01Z",
                }
            ],
        },
    }


def render_dict(obj: Mapping[str, Any]) -> dict[str, str]:
    """`render` on the JSON object, as the dict version of the demo did."""
    meta = obj["metadata"]
    data = (obj.get("spec") or {}).get("data") or {}
    return {
        k: v.replace("{name}", meta["name"]).replace("{namespace}", meta["namespace"])
        for k, v in data.items()
    }


async def reconcile_dict(obj: dict[str, Any], ctx: Any) -> None:
    render_dict(obj)


async def reconcile_typed(obj: Widget, ctx: Any) -> None:
    render(obj)


RECONCILES: dict[str, Callable[..., Any]] = {
    "dict": reconcile_dict,
    "typed": typed_reconcile(Widget, reconcile_typed),
}


@pytest.fixture(scope="module")
def store() -> dict[ObjectRef, Any]:
    return {ObjectRef(f"widget-{i:05d}", "bench"): widget_json(i) for i in range(ITEMS)}


async def run_all(reconcile: Callable[..., Any], store: Mapping[ObjectRef, Any]) -> int:
    stop = asyncio.Event()

    async def triggers() -> AsyncIterator[ObjectRef]:
        for ref in store:
            yield ref
        await stop.wait()

    seen = errors = 0
    async for result in fastctl.applier(
        reconcile, None, None, store, triggers(), concurrency=CONCURRENCY
    ):
        seen += 1
        errors += result.error is not None
        if seen == len(store):
            stop.set()
    return errors


@pytest.mark.parametrize("kind", ["dict", "typed"])
def test_reconcile_throughput(benchmark: Any, kind: str, store: dict[ObjectRef, Any]) -> None:
    benchmark.group = f"reconcile {ITEMS} Widgets, concurrency {CONCURRENCY}"
    benchmark.extra_info["items"] = ITEMS
    reconcile = RECONCILES[kind]
    errors = benchmark.pedantic(
        lambda: asyncio.run(run_all(reconcile, store)), rounds=5, warmup_rounds=1
    )
    assert errors == 0
    gc.collect()
    tracemalloc.start()
    asyncio.run(run_all(reconcile, store))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    benchmark.extra_info["peak_bytes_per_run"] = peak
    print(f"\n{kind}: peak {peak / 1e6:.1f} MB allocated during one run of {ITEMS}")


def test_memory_of_instances_beside_json(benchmark: Any, store: dict[ObjectRef, Any]) -> None:
    """What a cache of parsed instances would cost on top of the JSON (not what fastctl
    keeps: its cache is the JSON, an instance lives for one reconcile)."""
    benchmark.group = "memory"
    objects = list(store.values())
    gc.collect()
    tracemalloc.start()
    copies = [widget_json(i) for i in range(ITEMS)]
    json_held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del copies
    gc.collect()
    tracemalloc.start()
    instances = [Widget.model_validate(obj) for obj in objects]
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    benchmark.extra_info["instance_bytes_each"] = held / ITEMS
    benchmark.extra_info["json_bytes_each"] = json_held / ITEMS
    print(
        f"\n{ITEMS} Widgets: JSON dicts {json_held / 1e6:.1f} MB ({json_held / ITEMS:.0f} B "
        f"each); Widget instances {held / 1e6:.1f} MB ({held / ITEMS:.0f} B each)"
    )
    del instances
    benchmark.pedantic(lambda: [Widget.model_validate(o) for o in objects], rounds=3)
