"""Loop iterations and callbacks per change of a Widget-like operator on
`fastctl.testing.FakeCluster`: how many hops a watch event takes to its reconcile.

    PYTHONPATH=TREE/python .venv/bin/python benches/hops_fake.py [COUNT]

The operator of ``tracing_fake.py`` (COUNT ConfigMaps, a Controller whose reconcile patches
an annotation once per change, the patch's echo reconciled as a no-op), on virtual time:
all reconciled once, then every ConfigMap's data updated. Printed: for the burst, the event
loop's iterations (``_run_once``) and the callbacks it ran (task steps, future callbacks:
``Handle._run``) per change, and the process's CPU per change (the counting included, and
the fake cluster's own work). The counts, unlike the time, are the same on a loaded
machine and run to run; one tree against another (``PYTHONPATH``) shows what a change of
the path buys in hops. The fake cluster answers in the same process, so its own callbacks
are in the figures (the same in both trees).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import json
import sys
import time
from typing import Any

from fastctl import Controller, Resource
from fastctl.kube import create, patch
from fastctl.testing import FakeCluster, run_virtual
from fastctl.testing._virtual_time import VirtualTimeLoop

CM = Resource("v1", "ConfigMap")
COUNTS = {"iterations": 0, "callbacks": 0}


def _count() -> None:
    run_once = VirtualTimeLoop._run_once  # type: ignore[attr-defined]
    handle_run = asyncio.events.Handle._run

    def counted_run_once(self: Any) -> None:
        COUNTS["iterations"] += 1
        run_once(self)

    def counted_run(self: asyncio.events.Handle) -> None:
        COUNTS["callbacks"] += 1
        handle_run(self)

    VirtualTimeLoop._run_once = counted_run_once  # type: ignore[attr-defined]
    asyncio.events.Handle._run = counted_run  # type: ignore[method-assign]


async def main(count: int) -> dict[str, Any]:
    async with FakeCluster() as cluster:
        client = cluster.client()
        for i in range(count):
            meta = {"name": f"c{i}", "namespace": "default"}
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"gen": "1"}}
            await create(client, CM, obj)
        runs = {"patch": 0, "noop": 0}

        async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
            want = obj["data"]["gen"]
            meta = obj["metadata"]
            if (meta.get("annotations") or {}).get("seen") != want:
                runs["patch"] += 1
                body = {"metadata": {"annotations": {"seen": want}}}
                await patch(ctx, CM, meta["name"], body, namespace="default")
            else:
                runs["noop"] += 1

        ctl = Controller(client, CM, reconcile, context=client, concurrency=32)
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(30)  # virtual: every ConfigMap reconciled once
        before = dict(COUNTS)
        cpu = time.process_time()
        runs.update(patch=0, noop=0)
        for i in range(count):
            await patch(client, CM, f"c{i}", {"data": {"gen": "2"}}, namespace="default")
            await asyncio.sleep(0.001)  # changes arrive apart, as a driver's patches do
        await asyncio.sleep(60)  # virtual: the burst and its echoes reconciled
        cpu = time.process_time() - cpu
        spent = {k: COUNTS[k] - before[k] for k in COUNTS}
        task.cancel()
    return {
        "count": count,
        "reconciles": runs,
        "iterations_per_change": round(spent["iterations"] / count, 2),
        "callbacks_per_change": round(spent["callbacks"] / count, 2),
        "cpu_us_per_change": round(cpu / count * 1e6, 1),
    }


if __name__ == "__main__":
    _count()
    print(json.dumps(run_virtual(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))))
