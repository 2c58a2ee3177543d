"""The long sharding run: ``fastctl run --shard-group`` replicas under churn and membership
changes, for as many rounds as asked.

    python benches/sharding/run.py --rounds 5                # about 5 minutes
    python benches/sharding/run.py --rounds 2 --gate off     # the client-side filter

It starts its own control plane (``ShardedListAndWatch`` on unless ``--gate off``), creates
``--objects`` ConfigMaps and starts ``--replicas`` replicas of the recording operator
(``tests/kube/operators/sharded.py``) while a writer changes random objects at ``--rate``
per second. Each round: a replica joins, the oldest leaves on SIGTERM, the next dies on
SIGKILL (each followed by a wait for the group to settle and a quiet ``--window``
measuring placement and shares). At the end it checks the whole record: no overlap, every
final version reconciled, no reconcile outside its replica's published slots in a quiet
window, and after each membership change every object reconciled again within ``--within``
seconds (the lease duration, 3 s, plus a few: the slots move, and every replica whose slots
changed lists again and reconciles what it now holds; the first start, which includes
starting the processes, is reported but not checked). The harness is the one the kube test
uses (``tests/kube/sharding_e2e.py``); the JSON result goes to ``--out``. Exit status 1 when
a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastctl.kube._client import load_client
from fastctl.testing import ControlPlane

ROOT = Path(__file__).resolve().parents[2]


def harness() -> Any:
    """``tests/kube/sharding_e2e.py``, loaded by path (tests are not a package here)."""
    path = ROOT / "tests" / "kube" / "sharding_e2e.py"
    spec = importlib.util.spec_from_file_location("fastctl_sharding_e2e", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} sharding: {message}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace, cp: ControlPlane, workdir: Path) -> dict[str, Any]:
    e2e = harness()
    status, answer = cp.api_request("POST", "/api/v1/namespaces", {"metadata": {"name": "shard"}})
    assert status == 201, answer
    client = await load_client(cp.kubeconfig)
    cluster = e2e.Cluster(cp, client, "shard", workdir, slots=args.slots, work=args.work)
    windows: list[dict[str, Any]] = []
    changes: list[tuple[str, float]] = []  # (what, monotonic time of the change)
    stop = asyncio.Event()
    names = iter(f"r{i}" for i in range(1000))

    async def settle_and_measure(what: str) -> None:
        began = time.monotonic()
        await cluster.settled(args.settle)
        settled = time.monotonic() - began
        window = await e2e.steady_window(cluster, args.window)
        window["after"] = what
        window["settle_seconds"] = settled
        windows.append(window)
        share = {k: round(v, 3) for k, v in window["share"].items()}
        log(f"{what}: settled in {settled:.1f} s; share of events {share}")

    try:
        await cluster.create(args.objects)
        writer = asyncio.create_task(cluster.write(args.objects, args.rate, stop))
        order = [next(names) for _ in range(args.replicas)]
        for name in order:
            cluster.start(name)
        changes.append(("start", time.monotonic()))
        await settle_and_measure("start")
        for round_ in range(args.rounds):
            joined = next(names)
            changes.append((f"round {round_}: {joined} joined", time.monotonic()))
            cluster.start(joined)
            order.append(joined)
            await settle_and_measure(f"round {round_}: {joined} joined")
            leaving = order.pop(0)
            changes.append((f"round {round_}: {leaving} SIGTERM", time.monotonic()))
            code = cluster.stop(leaving, signal.SIGTERM)
            await settle_and_measure(f"round {round_}: {leaving} left (exit {code})")
            joined = next(names)
            cluster.start(joined)
            order.append(joined)
            killed = order.pop(0)
            changes.append((f"round {round_}: {joined} joined, {killed} SIGKILL", time.monotonic()))
            cluster.stop(killed, signal.SIGKILL)
            await settle_and_measure(f"round {round_}: {joined} joined, {killed} killed")
        stop.set()
        await writer
        objects = await cluster.wait_all_seen(args.settle)
        unseen = cluster.unseen(objects)
        overlaps = cluster.overlaps()
    finally:
        cluster.kill_all()
        await client.close()
    misplaced = [m for w in windows for m in w["misplaced"]]
    records = cluster.records()
    uids = [o["metadata"]["uid"] for o in objects]
    again = []
    for what, at in changes:
        first = cluster.first_reconciles(at)
        delays = sorted(first.get(uid, float("inf")) - at for uid in uids)
        # The first start is not a handover: it includes starting the processes.
        late = sum(1 for d in delays if d > args.within) if what != "start" else 0
        again.append(
            {
                "after": what,
                "median_seconds": delays[len(delays) // 2],
                "max_seconds": delays[-1],
                "late": late,
            }
        )
        log(f"{what}: every object reconciled again after {delays[-1]:.1f} s ({late} late)")
    return {
        "args": vars(args),
        "writes": cluster.writes,
        "reconciles": sum(1 for recs in records.values() for r in recs if r["ev"] == "start"),
        "overlaps": overlaps,
        "unseen": unseen,
        "misplaced": misplaced,
        "windows": windows,
        "reconciled_again": again,
        "ok": not overlaps and not unseen and not misplaced and not any(a["late"] for a in again),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="join/leave/kill rounds")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0, help="writes per second")
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--work", type=float, default=0.2, help="seconds per reconcile")
    parser.add_argument("--window", type=float, default=10.0, help="quiet window, seconds")
    parser.add_argument("--settle", type=float, default=60.0, help="settle limit, seconds")
    parser.add_argument(
        "--within",
        type=float,
        default=10.0,
        help="after each change, every object reconciled again within this (default: 10 s)",
    )
    parser.add_argument("--gate", choices=("on", "off"), default="on")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file")
    args = parser.parse_args()
    gates = {"ShardedListAndWatch": True} if args.gate == "on" else {}
    workdir = Path(tempfile.mkdtemp(prefix="fastctl-sharding-"))
    log(f"records and logs in {workdir}")
    with ControlPlane(feature_gates=gates) as cp:
        result = asyncio.run(run(args, cp, workdir))
    result["workdir"] = str(workdir)
    text = json.dumps(result, indent=2, default=str)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    summary = {k: result[k] for k in ("writes", "reconciles", "ok")}
    log(
        f"{summary}; overlaps {len(result['overlaps'])}, unseen {len(result['unseen'])}, "
        f"misplaced {len(result['misplaced'])}"
    )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
