"""The scale benchmark's ConfigMap operator in fastctl: a `fastctl.Controller` with its
defaults (concurrency 32, managedFields dropped, copy on read) that caches every
ConfigMap of one namespace and reconciles each once, doing nothing but reading it. Only
the public API (``--json``: its watch as JSON, not protobuf, ``WatchConfig.protobuf``);
the same work and the same report lines as the compiled peers
(``peers/go/configmaps``, ``peers/rust/src/bin/configmap-operator-kube.rs``).

JSON lines on stdout, times as wall-clock seconds since the epoch (``time.time()``: the
compiled peers cannot read ``CLOCK_MONOTONIC``'s value, so the scale driver compares wall
clocks, one machine):

- ``{"cached": t}``: the controller holds its initial list (`Controller.is_ready`, polled
  every 5 ms, as the Go peer polls its informer);
- ``{"first_reconcile": t}``: the first reconcile started;
- ``{"all_first": t, "cpu_seconds": c}``: ``--expect`` reconciles done (CPU of the process);
- ``{"settled": t}``: after a full garbage collection;
- ``{"seen": seq, "t": t, "reconciles": n}``: a reconcile saw a new value of the seq
  annotation.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from common import emit, proc_cpu_seconds

SEQ_ANNOTATION = "e2e.fastctl.dev/seq"
POLL = 0.005


class _State:
    """Counts reconciles (no per-object record: the operator's memory is its cache)."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.reconciles = 0
        self.last_seq: str | None = None
        self.settled = False

    def settle(self) -> None:
        if self.settled:
            return
        self.settled = True
        emit({"all_first": time.time(), "cpu_seconds": proc_cpu_seconds("self")})
        gc.collect()
        emit({"settled": time.time()})


async def main_async(args: argparse.Namespace) -> None:
    from fastctl import Controller, Resource, WatchConfig, load_client

    client = await load_client(args.kubeconfig)
    state = _State(args.expect)

    async def reconcile(obj: dict[str, Any], ctx: object) -> None:
        now = time.time()
        state.reconciles += 1
        n = state.reconciles
        if n == 1:
            emit({"first_reconcile": now})
        seq = (obj["metadata"].get("annotations") or {}).get(SEQ_ANNOTATION)
        if seq is not None and seq != state.last_seq:
            state.last_seq = seq
            emit({"seen": seq, "t": now, "reconciles": n})
        if n == state.expect:
            state.settle()

    ctl = Controller(
        client,
        Resource("v1", "ConfigMap"),
        reconcile,
        namespace=args.namespace,
        concurrency=args.concurrency,
        watch_config=WatchConfig(protobuf=not args.json),
    )

    async def report_cached() -> None:
        # The public API has a readiness flag, no event to await: poll it.
        while not ctl.is_ready:  # noqa: ASYNC110
            await asyncio.sleep(POLL)
        emit({"cached": time.time()})
        if state.expect == 0:
            state.settle()

    cached = asyncio.get_running_loop().create_task(report_cached())
    try:
        await ctl.run()
    finally:
        cached.cancel()
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="watch as JSON, not protobuf")
    args = parser.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
