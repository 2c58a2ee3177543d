"""A Widget-like operator on `fastctl.testing.FakeCluster`, tracing off or on: CPU per change.

    .venv/bin/python benches/tracing_fake.py MODE [COUNT] [--no-gc] [--profile FILE]

COUNT ConfigMaps (the Widgets), a Controller whose reconcile writes an annotation saying
the data it saw (one patch per change; the patch's echo reconciled as a no-op), all
reconciled once; then every ConfigMap's data updated (the burst), and the CPU of the burst
per change printed with the collector's CPU per change and its collections. MODE is
``off`` or ``otlp`` (tracing on, fastctl's OTLP export, the sending stubbed). The fake
cluster's own CPU is in the figure (it answers in the same process), on virtual time.
``--no-gc`` turns the collector off for the burst; ``--profile`` writes cProfile's stats of
the burst. A diagnosis of what tracing costs an operator beside its hooks, not under the
event loop's real network.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from typing import Any

from fastctl import Controller, Resource
from fastctl.kube import create, patch
from fastctl.testing import FakeCluster, run_virtual

CM = Resource("v1", "ConfigMap")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    collected = {"cpu": 0.0, "at": 0.0}
    runs = [0, 0, 0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected["at"] = time.thread_time()
            return
        collected["cpu"] += time.thread_time() - collected["at"]
        runs[info["generation"]] += 1

    async with FakeCluster() as cluster:
        client = cluster.client()
        for i in range(args.count):
            meta = {"name": f"c{i}", "namespace": "default"}
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"gen": "1"}}
            await create(client, CM, obj)

        async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
            want = obj["data"]["gen"]
            meta = obj["metadata"]
            if (meta.get("annotations") or {}).get("seen") != want:
                body = {"metadata": {"annotations": {"seen": want}}}
                await patch(ctx, CM, meta["name"], body, namespace="default")

        ctl = Controller(client, CM, reconcile, context=client, concurrency=32)
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(30)  # virtual: every ConfigMap reconciled once
        gc.callbacks.append(timed)
        if args.no_gc:
            gc.disable()
        profile = None
        if args.profile:
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        start = time.process_time()
        for i in range(args.count):
            await patch(client, CM, f"c{i}", {"data": {"gen": "2"}}, namespace="default")
        await asyncio.sleep(60)  # virtual: the burst and its echoes reconciled
        spent = time.process_time() - start
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)
        gc.enable()
        gc.callbacks.remove(timed)
        task.cancel()
    return {
        "mode": args.mode,
        "us_per_change": round(spent / args.count * 1e6, 1),
        "collector_us_per_change": round(collected["cpu"] / args.count * 1e6, 1),
        "collections": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["off", "otlp"])
    parser.add_argument("count", type=int, nargs="?", default=2000)
    parser.add_argument("--no-gc", action="store_true")
    parser.add_argument("--profile")
    args = parser.parse_args()
    if args.mode == "otlp":
        from opentelemetry.sdk.trace import TracerProvider

        from fastctl import _tracing
        from fastctl._otlp import OtlpExport

        provider = TracerProvider()
        provider.add_span_processor(OtlpExport(lambda data: None, lambda: None))
        assert _tracing.enable(provider)
    print(json.dumps(run_virtual(main(args))))
