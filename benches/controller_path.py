"""CPU per watch event through a whole Controller, with no API server: a fake watcher lists
`OBJECTS` objects and then streams `EVENTS` updates (round robin), the reconcile does
nothing, and the process CPU time from the first event to the controller being idle is
divided by the events. It measures fastctl's own path (watch event -> store -> trigger ->
scheduler -> reconcile task -> done), the part a runtime restructuring can change.

It runs against whichever fastctl is imported (``PYTHONPATH=<tree>/python``), so two source
trees can be compared in one run with ``benches/compare_trees.py``. Prints one JSON line.

    .venv/bin/python benches/controller_path.py [OBJECTS] [EVENTS] [TRACING] [FEED]

`TRACING` (``benches/tracing_cost.py`` runs the three in alternating rounds): ``off``, the
default (tracing off, whether or not the ``otel`` extra is installed); ``missing`` (the
extra hidden, as if not installed: any import of it fails); ``on`` (tracing on, every span
made and handed to a batch processor whose exporter drops it: the span work without the
network; the processor's thread is flushed before the CPU time is read, so its work is
counted).

`FEED`: ``frames``, the default: every event starts as the JSON line a watch sends and is
decoded as the imported build's watcher decodes it (an orjson parse and the metadata check
in builds before the frames were decoded in the extension; the extension's decoder after),
so the parse is counted in both; ``dicts``: events made from parsed dicts, as before (a
build that decodes frames then encodes each dict once, which a watcher never does).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient

import fastctl
from fastctl import Controller, Resource
from fastctl.kube import _watcher
from fastctl.kube._watcher import EventKind

RESOURCE = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)

# Where the controller looks its watcher up: the module differs between builds.
_WATCHER_HOMES = (
    "fastctl.runtime.controller._environment",
    "fastctl.runtime.controller._run",
    "fastctl.runtime._controller",
)


def _event(kind: EventKind, obj: dict[str, Any] | None = None) -> Any:
    """A watch event in the spelling of the imported build: `ObjectEvent` and `ListFrame`,
    or, in builds before them, the one `WatchEvent` class."""
    if not hasattr(_watcher, "ObjectEvent"):
        return _watcher.WatchEvent(kind, obj)  # type: ignore[operator]
    return _watcher.ListFrame(kind) if obj is None else _watcher.ObjectEvent(kind, obj)  # type: ignore[arg-type]


@functools.cache
def _decoder() -> Any:
    """How the imported build's watcher turns a watch line into an event's object."""
    from fastctl.kube import _wire

    if hasattr(_wire, "decode_watch_line"):

        def decode(kind: Any, line: bytes) -> Any:
            _, item = _wire.decode_watch_line(line, strip_managed_fields=True)
            assert not isinstance(item, bytes)
            return _watcher.ObjectEvent._of_item(kind, item)

        return decode

    def parse(kind: EventKind, line: bytes) -> Any:
        _, obj = _wire.watch_frame(line)
        obj["metadata"].pop("managedFields", None)  # as the watcher's strip
        return _event(kind, obj)

    return parse


def _line(etype: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": etype, "object": obj}) + b"\n"


class _HideOpenTelemetry:
    """A finder that refuses every ``opentelemetry`` module: the extra not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _tracing(mode: str) -> Any:
    """Set tracing up as `mode` says; returns what flushes its spans (or None)."""
    if mode == "missing":
        sys.meta_path.insert(0, _HideOpenTelemetry())
        return None
    if mode == "off":
        return None
    if mode != "on":
        raise SystemExit(f"TRACING is off, missing or on, not {mode!r}")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    import fastctl.tracing

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    assert fastctl.tracing.enable(provider)
    return provider.force_flush


def _obj(i: int, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i}",
            "namespace": "bench",
            "uid": f"uid-{i}",
            "resourceVersion": str(version),
            "labels": {"app": "bench"},
        },
        "data": {"v": str(version)},
    }


async def _measure(
    objects: int, events: int, flush: Any = None, feed_mode: str = "frames"
) -> dict[str, float]:
    drained = asyncio.Event()
    if feed_mode not in ("frames", "dicts"):
        raise SystemExit(f"FEED is frames or dicts, not {feed_mode!r}")
    if feed_mode == "frames":  # the lines made before the clock starts, as a server would
        decode = _decoder()
        listed = [_line("ADDED", _obj(i, 1)) for i in range(objects)]
        changes = [_line("MODIFIED", _obj(n % objects, 2 + n)) for n in range(events)]

        def init(i: int) -> Any:
            return decode(EventKind.INIT_APPLY, listed[i])

        def change(n: int) -> Any:
            return decode(EventKind.APPLY, changes[n])
    else:

        def init(i: int) -> Any:
            return _event(EventKind.INIT_APPLY, _obj(i, 1))

        def change(n: int) -> Any:
            return _event(EventKind.APPLY, _obj(n % objects, 2 + n))

    async def feed() -> AsyncIterator[Any]:
        yield _event(EventKind.INIT)
        for i in range(objects):
            yield init(i)
        yield _event(EventKind.INIT_DONE)
        for n in range(events):
            yield change(n)
            if n % 256 == 0:
                await asyncio.sleep(0)  # a real watch yields to the loop between frames
        drained.set()
        await asyncio.Event().wait()

    def fake_watcher(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return feed()

    for home in _WATCHER_HOMES:
        try:
            module = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(module, "watcher"):
            module.watcher = fake_watcher  # type: ignore[attr-defined]

    reconciles = 0

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        nonlocal reconciles
        reconciles += 1

    client = ApiClient.__new__(ApiClient)
    ctl = Controller(client, RESOURCE, reconcile, name="bench", concurrency=32)
    gc.collect()
    gc.disable()
    start = time.process_time()
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await drained.wait()
    while len(ctl.scheduler) or ctl.scheduler.in_flight:  # noqa: ASYNC110 - no idle event
        await asyncio.sleep(0.001)
    if flush is not None:
        flush()
    cpu = time.process_time() - start
    gc.enable()
    ctl.shutdown()
    await task
    return {
        "cpu_per_event_us": cpu / (objects + events) * 1e6,
        "reconciles": reconciles,
        "events": objects + events,
    }


def main() -> None:
    objects = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 40_000
    mode = sys.argv[3] if len(sys.argv) > 3 else "off"
    feed_mode = sys.argv[4] if len(sys.argv) > 4 else "frames"
    flush = _tracing(mode)
    result: dict[str, Any] = asyncio.run(_measure(objects, events, flush, feed_mode))
    result["feed"] = feed_mode
    result["fastctl"] = fastctl.__file__
    result["tracing"] = mode
    result["opentelemetry_imported"] = any(m.startswith("opentelemetry") for m in sys.modules)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
