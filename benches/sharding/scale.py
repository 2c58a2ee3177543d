"""What sharding saves per replica: CPU, peak RSS and watch events received by each
replica at 1, 2, 3 and 4 replicas on many objects under continuous changes, with the server
sharding the watches (``ShardedListAndWatch`` on) and with the client-side filter (off);
and the time to rebalance after one of 3 replicas is killed.

    python benches/sharding/scale.py --objects 10000 --out benches/sharding/results/scale.json

One control plane for the whole sweep (the objects are created once): first with the
feature gate on, then the API server is restarted with it off (etcd keeps the objects).
For each replica count, ``fastctl run --shard-group`` replicas of the recording operator
(``tests/kube/operators/sharded.py``) start, settle, and are measured over a quiet
``--window`` while a writer changes random objects at ``--rate`` per second:

- **CPU**: user + system seconds of each replica process in the window (``/proc``), per
  second of window;
- **peak RSS**: ``VmHWM`` of each replica when it stops (its initial list included);
- **events**: what the server sent each replica in the window: the watch events its
  sharded primary watch delivered plus those the client-side filter dropped
  (``fastctl_shard_events_received_total`` + ``fastctl_shard_filtered_total``).

Then, at 3 replicas, one is SIGKILLed: **rebalance** is the time until the survivors serve
every slot again, and until every object of the dead replica has been reconciled again.
A PNG plot goes next to the JSON with ``--plot``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run import harness, log  # benches/sharding/run.py

from fastctl.kube._client import load_client
from fastctl.runtime.sharding._slots import fnv1a_64, slot_of
from fastctl.testing import ControlPlane

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def sent(replica: Any) -> float:
    received = await replica.metric("fastctl_shard_events_received_total")
    filtered = await replica.metric("fastctl_shard_filtered_total")
    return float(received + filtered)


async def measure(cluster: Any, count: int, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    names = [f"{tag}{count}-{i}" for i in range(count)]
    for name in names:
        cluster.start(name)
    began = time.monotonic()
    await cluster.settled(args.settle)
    settle = time.monotonic() - began
    await asyncio.sleep(2)  # the relists' reconciles end
    live = [cluster.replicas[n] for n in names]
    cpu0 = {r.name: cpu_seconds(r.proc.pid) for r in live}
    ev0 = {r.name: await sent(r) for r in live}
    since = time.monotonic()
    await asyncio.sleep(args.window)
    elapsed = time.monotonic() - since
    cpu = {r.name: (cpu_seconds(r.proc.pid) - cpu0[r.name]) / elapsed for r in live}
    events = {r.name: await sent(r) - ev0[r.name] for r in live}
    row: dict[str, Any] = {
        "replicas": count,
        "settle_seconds": settle,
        "cpu_per_replica": sorted(cpu.values()),
        "events_per_replica": sorted(events.values()),
        "window_seconds": elapsed,
    }
    if count == 3:
        row["rebalance"] = await rebalance(cluster, live, args)
        live = [r for r in live if r.proc.poll() is None]
    row["peak_rss_mb"] = sorted(peak_rss_mb(r.proc.pid) for r in live)
    for r in live:
        cluster.stop(r.name, signal.SIGTERM)
    await asyncio.sleep(1)
    log(f"{tag} x{count}: {json.dumps(row, default=lambda v: round(v, 3))}")
    return row


async def rebalance(cluster: Any, live: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL one of the replicas; how long until its slots and its objects are served."""
    victim = live[0]
    published = await cluster.published()
    dead_slots = published.get(victim.identity or "", frozenset())
    uids = [
        o["metadata"]["uid"]
        for o in await cluster.objects()
        if slot_of(fnv1a_64(o["metadata"]["uid"]), cluster.slots) in dead_slots
    ]
    killed = time.monotonic()
    cluster.stop(victim.name, signal.SIGKILL)
    survivors = live[1:]
    while True:
        served = sum([await r.metric("fastctl_shard_slots_served") for r in survivors])
        if served == cluster.slots:
            break
        if time.monotonic() - killed > args.settle:
            raise AssertionError("slots not served again")
        await asyncio.sleep(0.1)
    slots_back = time.monotonic() - killed
    deadline = killed + args.settle
    while time.monotonic() < deadline:
        first = cluster.first_reconciles(killed)
        if all(uid in first for uid in uids):
            break
        await asyncio.sleep(0.2)
    first = cluster.first_reconciles(killed)
    missing = sum(1 for uid in uids if uid not in first)
    delays = sorted(first[uid] - killed for uid in uids if uid in first)
    return {
        "slots_served_again_seconds": slots_back,
        "objects_reconciled_again_seconds": delays[-1] if delays else None,
        "objects_of_the_dead_replica": len(uids),
        "not_reconciled_again": missing,
    }


async def sweep(cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    e2e = harness()
    status, answer = cp.api_request("POST", "/api/v1/namespaces", {"metadata": {"name": "shard"}})
    assert status == 201, answer
    result: dict[str, Any] = {"args": vars(args), "modes": {}}
    client = await load_client(cp.kubeconfig)
    cluster = e2e.Cluster(cp, client, "shard", workdir, slots=args.slots, work=args.work)
    try:
        began = time.monotonic()
        await cluster.create(args.objects)
        log(f"created {args.objects} objects in {time.monotonic() - began:.0f} s")
        for gate in args.gates:
            if gate == "off":
                cp.feature_gates["ShardedListAndWatch"] = False
                await client.close()
                await cp.restart_apiserver()
                client = await load_client(cp.kubeconfig)
                cluster.client = client
            stop = asyncio.Event()
            writer = asyncio.create_task(cluster.write(args.objects, args.rate, stop))
            rows = []
            try:
                for count in args.counts:
                    rows.append(await measure(cluster, count, args, f"{gate}-"))
            finally:
                stop.set()
                await writer
            result["modes"][gate] = rows
    finally:
        cluster.kill_all()
        await client.close()
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cpu_ax, ev_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for gate, rows in result["modes"].items():
        label = "server-side (gate on)" if gate == "on" else "client-side (gate off)"
        counts = [r["replicas"] for r in rows]
        cpu = [sum(r["cpu_per_replica"]) / len(r["cpu_per_replica"]) * 100 for r in rows]
        events = [sum(r["events_per_replica"]) / len(r["events_per_replica"]) for r in rows]
        cpu_ax.plot(counts, cpu, marker="o", label=label)
        ev_ax.plot(counts, events, marker="o", label=label)
    cpu_ax.set(xlabel="replicas", ylabel="CPU per replica (% of a core)", title="CPU")
    ev_ax.set(xlabel="replicas", ylabel="watch events per replica", title="Events received")
    for ax in (cpu_ax, ev_ax):
        ax.set_xticks(result["args"]["counts"])
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle(f"{result['args']['objects']:,} ConfigMaps, {result['args']['rate']:g} changes/s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20.0, help="writes per second")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--gates", nargs="+", choices=("on", "off"), default=["on", "off"])
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--work", type=float, default=0.01, help="seconds per reconcile")
    parser.add_argument("--window", type=float, default=20.0, help="measured window, seconds")
    parser.add_argument("--settle", type=float, default=120.0, help="settle limit, seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file")
    parser.add_argument("--plot", type=Path, default=None, help="PNG plot file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fastctl-sharding-scale-"))
    log(f"records and logs in {workdir}")
    with ControlPlane(feature_gates={"ShardedListAndWatch": True}) as cp:
        result = asyncio.run(sweep(cp, args, workdir))
    text = json.dumps(result, indent=2, default=str)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.plot is not None:
        plot(result, args.plot)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
