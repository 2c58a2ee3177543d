"""Does a relist leave memory behind? RSS and traced Python memory after each of a few relists.

    flock /tmp/fastctl-heavy.lock python benches/soak/relist_memory.py --objects 5000 --relists 6

The soak showed each operator's RSS stepping up by 13-15 MB at the first relist of its life
and by 0-2 MB at later ones. This tells a leak (every relist keeps what it listed: traced
memory grows at each) from a high-water mark (the store holds the old objects and the new
list at once during a relist, so the heap grows to twice the store once; the freed half is
reused by the next relist, so RSS settles). It starts a control plane, creates `--objects`
Widgets, and fills one `Store` through `reflector`: the first list, then `--relists` full
lists of the same objects into the same store (each one a fresh watcher, which lists first,
as a watcher does after 410 Gone). After each, with the objects unchanged, it prints the RSS,
the memory `tracemalloc` traces (current, and the peak during that list) and the number of
objects in the store; with `--trim` it also calls glibc's ``malloc_trim(0)`` and prints the
RSS after it, to see how much of the step is freed heap that glibc kept.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from operators import _rss_bytes
from run import NAMESPACE, Driver

from fastctl.demo.widgets import WIDGET, install_crd
from fastctl.kube._client import load_client
from fastctl.kube._objects import create
from fastctl.kube._resource import Resource
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, watcher
from fastctl.testing.control_plane import ControlPlane

MB = 2**20


async def list_into(store: Store, client: Any) -> None:
    """One full list of the Widgets into `store`, as a relist: INIT ... INIT_DONE."""
    async for event in reflector(store, watcher(client, WIDGET, namespace=NAMESPACE)):
        if event.kind is EventKind.INIT_DONE:
            return


def rss() -> int:
    value = _rss_bytes(os.getpid())
    assert value is not None
    return value


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with ControlPlane() as cp:
        client = await load_client(str(cp.kubeconfig))
        try:
            await create(client, Resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}})
            await install_crd(client)
            t0 = time.monotonic()
            await Driver(client, seed=1).populate(args.objects)
            print(f"{args.objects} Widgets in {time.monotonic() - t0:.0f} s", file=sys.stderr)
            gc.collect()
            rows.append({"list": "before", "rss_mb": rss() / MB})
            if args.trace:
                tracemalloc.start()
            store = Store()
            libc = ctypes.CDLL("libc.so.6") if args.trim else None
            for n in range(args.relists + 1):
                if args.trace:
                    tracemalloc.reset_peak()
                await list_into(store, client)
                gc.collect()
                row: dict[str, Any] = {
                    "list": "first" if n == 0 else f"relist {n}",
                    "objects": len(store),
                    "rss_mb": rss() / MB,
                }
                if args.trace:
                    current, peak = tracemalloc.get_traced_memory()
                    row.update(traced_mb=current / MB, traced_peak_mb=peak / MB)
                if libc is not None:
                    libc.malloc_trim(0)
                    row["rss_after_trim_mb"] = rss() / MB
                rows.append(row)
                print(
                    json.dumps(
                        {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
                    ),
                    file=sys.stderr,
                )
        finally:
            await client.close()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--relists", type=int, default=6)
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) after each list")
    parser.add_argument(
        "--no-trace",
        dest="trace",
        action="store_false",
        help="RSS only (tracemalloc's own bookkeeping is in the RSS otherwise)",
    )
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=1))
