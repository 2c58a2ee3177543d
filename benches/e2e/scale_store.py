"""RSS per object of a `fastctl.Store` holding N ConfigMaps, no API server
(``python scale_store.py N``; `run_scale.py` runs it in a fresh process per N).

The objects are the scale benchmark's ConfigMaps as the API server serves them
(`scale.as_served`): built one at a time as JSON bytes, parsed with orjson (as the watcher
parses what it receives) and applied to the store as one list (``INIT``, an ``INIT_APPLY``
each, ``INIT_DONE``), through the public API only, so the figure follows whatever the
Store keeps inside. RSS before and after (each after a full collection), divided by N.
Prints one JSON line.
"""

from __future__ import annotations

import gc
import json
import sys

import orjson
from common import proc_memory
from scale import as_served


def measure(n: int) -> dict[str, float]:
    from fastctl import EventKind, ListFrame, ObjectEvent, Store

    store = Store()
    json_bytes = len(orjson.dumps(as_served(0, "scale")))
    gc.collect()
    before = proc_memory("self")["VmRSS"]
    store.apply(ListFrame(EventKind.INIT))
    for i in range(n):
        received = orjson.dumps(as_served(i, "scale"))
        store.apply(ObjectEvent(EventKind.INIT_APPLY, orjson.loads(received)))
    store.apply(ListFrame(EventKind.INIT_DONE))
    gc.collect()
    after = proc_memory("self")
    if len(store) != n:
        raise RuntimeError(f"the store holds {len(store)} objects, not {n}")
    return {
        "objects": n,
        "json_bytes_per_object": json_bytes,
        "rss_bytes": after["VmRSS"] - before,
        "rss_bytes_per_object": (after["VmRSS"] - before) / n,
        "peak_rss_bytes": after["VmHWM"],
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
