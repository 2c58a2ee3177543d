"""Sharding under a slow API server: three members on short leases, and a burst of creates.

    python benches/sharding/burst.py --runs 3 --out benches/sharding/results/burst.json

Each run starts ``--replicas`` replicas of the demo operator
(``fastctl run fastctl.demo.widgets:make_controller --shard-group``: each Widget's reconcile
adds a finalizer, applies a ConfigMap, writes the status and publishes an Event) with member
Leases of ``--lease`` seconds (duration, renew deadline, retry period: 6/4/1 by default, the
timings a new user picks to see handovers quickly), waits until they have split the slots,
then creates ``--objects`` Widgets at once (every POST in flight together) on the local
control plane: the creates and the four writes each reconcile makes keep its API server
busy for a while. ``--operator configmaps`` runs the recording ConfigMap operator of the
other sharding runs instead (``--work`` seconds of sleep per reconcile, no writes). It
waits until every object has been reconciled and nothing has started for ``--quiet``
seconds, and reports:

- **reconciles per object**: reconcile starts since the burst, over the objects created
  (1.0 is the floor: each new object once);
- **tenures lost**: the members' ``stopped serving N slots: renewals failed`` log lines
  since the burst (each one an urgent drain, a primary watch listed twice, and a relist's
  worth of reconciles), and the renewals that timed out;
- **cancelled**: reconciles that ended cancelled (an urgent drain cancels them);
- **load**: ``--load`` background clients, in a process of their own, stand for the
  other tenants of a busy API server, from ``--warmup`` seconds before the burst to the
  end of the run: each replaces a ConfigMap of its own (``--load-kb``) in a loop and lists
  them all every fourth time (``--load 0``: the burst alone, which this machine's control
  plane absorbs without trouble);
- **Lease write latency**: a probe in this process replaces a Lease of its own every
  0.2 s during the run, on its own connection, as a member renews: its median, 99th
  percentile and largest latency say how slow the API server was for Lease writes.

Every run has its own namespace, group and processes on one control plane. The records
and logs stay in the directory it prints; ``--out`` gets the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient
from run import harness, log  # benches/sharding/run.py

from fastctl.demo.widgets import install_crd
from fastctl.kube._client import load_client
from fastctl.kube._http import ApiError, request, request_json
from fastctl.testing import ControlPlane

LOST = "renewals failed for the renew deadline"
TIMED_OUT = "writing the member Lease: request timed out"


WIDGETS = "/apis/demo.fastctl.dev/v1/namespaces/{}/widgets"
CONFIGMAPS = "/api/v1/namespaces/{}/configmaps"


def new_object(kind: str, i: int) -> dict[str, Any]:
    if kind == "configmaps":
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}}
    greeting = {"greeting": "Hello from {name} in {namespace}", "version": "0"}
    return {
        "apiVersion": "demo.fastctl.dev/v1",
        "kind": "Widget",
        "metadata": {"name": f"w-{i}"},
        "spec": {"data": greeting},
    }


async def create_at_once(client: ApiClient, namespace: str, kind: str, count: int) -> None:
    """`count` objects, every POST in flight together (a connection each)."""
    config = copy.deepcopy(client.configuration)
    config.connection_pool_maxsize = count
    burst = ApiClient(config)
    path = (WIDGETS if kind == "widgets" else CONFIGMAPS).format(namespace)
    try:

        async def one(i: int) -> None:
            await request_json(burst, "POST", path, body=orjson.dumps(new_object(kind, i)))

        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await burst.close()


async def probe_lease_writes(
    client: ApiClient, namespace: str, stop: asyncio.Event, latencies: list[float]
) -> None:
    """Replace a Lease every 0.2 s until `stop`, on a client of its own, recording each
    write's latency (a failed write counts as its time to fail)."""
    own = ApiClient(copy.deepcopy(client.configuration))
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    body = {"metadata": {"name": "latency-probe"}, "spec": {"holderIdentity": "probe"}}
    try:
        await request_json(own, "POST", path, body=orjson.dumps(body))
        while not stop.is_set():
            began = time.monotonic()
            with contextlib.suppress(ApiError, TimeoutError):  # no resourceVersion: no 409
                await request_json(own, "PUT", f"{path}/latency-probe", body=orjson.dumps(body))
            latencies.append(time.monotonic() - began)
            await asyncio.sleep(0.2)
    finally:
        await own.close()


async def load_process(kubeconfig: str, namespace: str, workers: int, size_kb: int) -> None:
    """Other tenants of the API server, in a process of their own (so that their client
    work does not slow the latency probe's loop), until SIGTERM: `workers` clients, each
    replacing a ConfigMap of its own (`size_kb` KB) and listing the namespace every
    fourth time (a list costs the server a serialisation of every object; the client
    reads it without parsing it). Prints the number of requests made."""
    base = await load_client(kubeconfig)
    config = copy.deepcopy(base.configuration)
    config.connection_pool_maxsize = workers  # one connection each
    await base.close()
    client = ApiClient(config)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    path = CONFIGMAPS.format(namespace)
    blob = "x" * (size_kb * 1024)
    made = 0

    async def worker(i: int) -> None:
        nonlocal made
        n = 0
        while not stop.is_set():
            n += 1
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"load-{i}"},
                "data": {"blob": blob, "n": str(n)},
            }
            with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
                if n == 1:
                    await request_json(client, "POST", path, body=orjson.dumps(body))
                elif n % 4 == 0:
                    async with await request(client, "GET", path) as resp:
                        await resp.read()
                else:
                    await request_json(client, "PUT", f"{path}/load-{i}", body=orjson.dumps(body))
                made += 1

    try:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    finally:
        await client.close()
    print(made, flush=True)


def log_since(replica: Any, offset: int) -> str:
    return str(replica.log.read_bytes()[offset:].decode(errors="replace"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def one_run(
    args: argparse.Namespace, cp: ControlPlane, client: ApiClient, workdir: Path, index: int
) -> dict[str, Any]:
    e2e = harness()
    namespace = f"burst-{index}"
    status, answer = cp.api_request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    assert status == 201, answer
    directory = workdir / namespace
    directory.mkdir()
    lease = tuple(args.lease)
    operator = "fastctl.demo.widgets:make_controller" if args.operator == "widgets" else None
    cluster = e2e.Cluster(
        cp,
        client,
        namespace,
        directory,
        work=args.work,
        lease=lease,
        operator=operator or e2e.OPERATOR,
    )
    latencies: list[float] = []
    stop = asyncio.Event()
    load_namespace = f"load-{index}"
    status, answer = cp.api_request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": load_namespace}}
    )
    assert status == 201, answer
    try:
        for i in range(args.replicas):
            cluster.start(f"r{i}")
        await cluster.settled(args.settle)
        offsets = {r.name: r.log.stat().st_size for r in cluster.live()}
        load = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            LOAD_PROCESS,
            str(cp.kubeconfig),
            load_namespace,
            str(args.load),
            str(args.load_kb),
            stdout=asyncio.subprocess.PIPE,
        )
        loaded_since = time.monotonic()
        probe = asyncio.create_task(probe_lease_writes(client, namespace, stop, latencies))
        await asyncio.sleep(args.warmup)  # the load reaches the server before the burst
        began = time.monotonic()
        await create_at_once(client, namespace, args.operator, args.objects)
        created = time.monotonic() - began
        path = (WIDGETS if args.operator == "widgets" else CONFIGMAPS).format(namespace)
        objects = (await request_json(client, "GET", path))["items"]
        uids = {o["metadata"]["uid"] for o in objects}
        deadline = time.monotonic() + args.settle
        while not uids <= cluster.first_reconciles(began).keys():
            if time.monotonic() > deadline:
                raise AssertionError(f"not every object reconciled after {args.settle} s")
            await asyncio.sleep(0.5)
        while True:  # quiet: nothing started for --quiet seconds
            starts = [
                r["mono"]
                for recs in cluster.records().values()
                for r in recs
                if r["ev"] == "start" and r["mono"] >= began
            ]
            if time.monotonic() - max(starts) >= args.quiet:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"reconciles still starting after {args.settle} s")
            await asyncio.sleep(0.5)
        stop.set()
        await probe
        load.send_signal(signal.SIGTERM)
        out, _ = await load.communicate()
        loaded = int(out.decode().strip() or 0) / (time.monotonic() - loaded_since)
        overlaps = cluster.overlaps()
    finally:
        stop.set()
        cluster.kill_all()
    records = [r for recs in cluster.records().values() for r in recs if r["mono"] >= began]
    logs = {name: log_since(cluster.replicas[name], offset) for name, offset in offsets.items()}
    lost = {name: text.count(LOST) for name, text in logs.items()}
    timed_out = {name: text.count(TIMED_OUT) for name, text in logs.items()}
    started = sum(1 for r in records if r["ev"] == "start")
    result = {
        "objects": len(objects),
        "create_seconds": round(created, 2),
        "reconciles": started,
        "reconciles_per_object": round(started / len(objects), 2),
        "cancelled": sum(1 for r in records if r.get("outcome") == "CancelledError"),
        "tenures_lost": sum(lost.values()),
        "tenures_lost_per_member": lost,
        "renewals_timed_out": sum(timed_out.values()),
        "lease_write_seconds": {
            "count": len(latencies),
            "median": round(percentile(latencies, 0.5), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "max": round(max(latencies, default=float("nan")), 3),
        },
        "load_requests_per_second": round(loaded, 1),
        "overlaps": len(overlaps),
    }
    log(f"run {index}: {json.dumps(result)}")
    return result


async def main_async(args: argparse.Namespace, cp: ControlPlane, workdir: Path) -> dict[str, Any]:
    client = await load_client(cp.kubeconfig)
    try:
        if args.operator == "widgets":
            await install_crd(client)
        runs = [await one_run(args, cp, client, workdir, i) for i in range(args.runs)]
    finally:
        await client.close()
    return {"args": vars(args), "runs": runs}


LOAD_PROCESS = "--load-process"


def main() -> int:
    if sys.argv[1:2] == [LOAD_PROCESS]:
        kubeconfig, namespace, workers, size_kb = sys.argv[2:6]
        asyncio.run(load_process(kubeconfig, namespace, int(workers), int(size_kb)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument(
        "--lease",
        type=float,
        nargs=3,
        default=[6.0, 4.0, 1.0],
        metavar=("DURATION", "RENEW_DEADLINE", "RETRY_PERIOD"),
    )
    parser.add_argument("--operator", choices=("widgets", "configmaps"), default="widgets")
    parser.add_argument(
        "--work", type=float, default=0.5, help="seconds per reconcile (--operator configmaps)"
    )
    parser.add_argument(
        "--load",
        type=int,
        default=128,
        help="background clients keeping the API server busy (0: none)",
    )
    parser.add_argument("--load-kb", type=int, default=64, help="size of a load object")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load first")
    parser.add_argument("--quiet", type=float, default=10.0, help="seconds with no start")
    parser.add_argument("--settle", type=float, default=180.0, help="limit, seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fastctl-burst-"))
    log(f"records and logs in {workdir}")
    with ControlPlane(feature_gates={"ShardedListAndWatch": True}) as cp:
        result = asyncio.run(main_async(args, cp, workdir))
    result["workdir"] = str(workdir)
    runs = result["runs"]
    summary = {
        "reconciles_per_object": [r["reconciles_per_object"] for r in runs],
        "tenures_lost": [r["tenures_lost"] for r in runs],
        "cancelled": [r["cancelled"] for r in runs],
        "renewals_timed_out": [r["renewals_timed_out"] for r in runs],
        "lease_write_p99": [r["lease_write_seconds"]["p99"] for r in runs],
        "lease_write_max": [r["lease_write_seconds"]["max"] for r in runs],
        "overlaps": [r["overlaps"] for r in runs],
    }
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 1 if any(r["overlaps"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
