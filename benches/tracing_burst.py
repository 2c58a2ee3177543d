"""The tracing hooks of a burst: COUNT keys queued before any of them runs, CPU per change.

    .venv/bin/python benches/tracing_burst.py [COUNT] [ROUNDS]

Each round: a watch event per key (each trigger's link joins its key's pending record),
then every key's run with its request span (the status patch) and the patch's echo
queued, then every echo's no-op run: three spans and two links per change, as in
`tracing_hooks.py`, but with COUNT keys waiting at once, as in the Widget benchmark's
update burst, and 200,000 long-lived objects in the heap (an operator's cache). Prints CPU
per change, the cyclic collector's CPU per change (timed by `gc.callbacks`) and its
collections of each generation: what tracing keeps per queued key shows there. Spans go to
fastctl's OTLP export with the sending stubbed. No API server, no event loop: a diagnosis,
not an operator's figure.
"""

from __future__ import annotations

import gc
import sys
import time
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from fastctl import _tracing
from fastctl._otlp import OtlpExport
from fastctl.kube._watcher import EventKind, ObjectEvent
from fastctl.types import ObjectRef


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    heap = [{"k": [i, str(i)]} for i in range(200_000)]
    spent_gc = [0.0]
    runs = [0, 0, 0]
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
            return
        spent_gc[0] += time.thread_time() - started[0]
        runs[info["generation"]] += 1

    provider = TracerProvider()
    provider.add_span_processor(OtlpExport(lambda data: None, lambda: None))
    assert _tracing.enable(provider)
    tracing = _tracing.active()
    assert tracing is not None
    controller = tracing.controller("widgets", "Widget")
    scheduler = SimpleNamespace(failures=lambda key: 0, group_of=lambda key: None)
    refs = [ObjectRef(f"w{i}", "default") for i in range(count)]

    def event(i: int, generation: int) -> ObjectEvent:
        meta = {"name": f"w{i}", "namespace": "default", "resourceVersion": f"{i}-{generation}"}
        obj = {"metadata": meta, "spec": {"data": {"a": "b"}}, "status": {}}
        return ObjectEvent(EventKind.APPLY, obj)

    def burst(generation: int) -> None:
        for i in range(count):
            for trigger in controller.primary(event(i, generation), [refs[i]]):
                controller.queued(trigger)
        for echo in (False, True):
            for i in range(count):
                run = controller.start(refs[i].key, scheduler)
                run.enter()
                if not echo:
                    path = f"/apis/g/v1/namespaces/default/widgets/w{i}/status"
                    _tracing.request_span("PATCH", path).answered(200)
                run.end(None, None, 0.0, again=False)
                if not echo:
                    for trigger in controller.primary(event(i, generation + 1), [refs[i]]):
                        controller.queued(trigger)

    burst(0)  # warm up
    gc.callbacks.append(timed)
    start = time.process_time()
    for r in range(rounds):
        burst(2 * r + 2)
    spent = time.process_time() - start
    gc.callbacks.remove(timed)
    changes = rounds * count
    print(
        f"{spent / changes * 1e6:.1f} µs a change; the collector {spent_gc[0] / changes * 1e6:.1f}"
        f" µs a change; collections {runs[0]} {runs[1]} {runs[2]} (heap {len(heap)})"
    )
    _tracing.disable()


if __name__ == "__main__":
    main()
