"""The scale benchmark: many ConfigMaps cached by fastctl, controller-runtime (Go) and
kube-runtime (Rust), then live changes behind them, in one command::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/run_scale.py --objects 10000 100000

One control plane (etcd with an 8 GiB quota) for the whole run. For each count, in
ascending order, the driver creates ConfigMaps (`scale.configmap`, ~668 bytes of JSON as
served: created, then their managedFields cleared) up to that count in namespace
``scale``; then, round after round, each operator in turn (A B C A B C) runs twice, each
time a fresh process:

1. on the empty namespace ``empty``: its RSS, CPU and time to a synced cache with nothing
   in it (its runtime, libraries, start-up);
2. on ``scale``: the time until its initial list is cached and its first reconcile, the
   time and its CPU until every object was reconciled once (each reconcile only reads its
   object), its RSS after a full collection (Go: ``runtime.GC`` and ``FreeOSMemory``;
   Python: ``gc.collect``; Rust: none needed) and its peak RSS; then `--changes` live
   changes, one at a time (an annotation on a random ConfigMap): the time from the API
   server's acknowledgement until the operator's reconcile sees it.

Per object: (run 2 - run 1) / objects, per round, then the median over rounds. Then
fastctl's `Store` alone (`scale_store.py`, no API server) at `--store-objects`.

Writes ``benches/e2e/results/scale.json`` and ``scale.md`` and the plot
``docs/img/e2e-scale.png``; exits 1, after writing them, if an operator did not reconcile
every object or missed a live change. Needs Go and cargo on PATH (the two peers are built
as the Widget peers are: `compiled_peers`), unless ``--no-build`` says to run the peers'
binaries as they are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import compiled_peers
from common import PYTHON, Child, child_argv, load_average, log, run_bounded
from run_all import RESULTS, machine, save
from scale import OPERATORS, SEQ_ANNOTATION, combine, configmap, median, summarize_run
from scale_report import make_plots, render

from fastctl import Resource, load_client
from fastctl.kube import ApiError, create, patch
from fastctl.testing import ControlPlane

GO_BINARY = compiled_peers.GO_DIR / "target" / "configmap-operator"
RUST_BINARY = compiled_peers.RUST_DIR / "target" / "release" / "configmap-operator-kube"
NAMESPACE = "scale"
EMPTY = "empty"
ETCD_QUOTA = 8 * 1024**3
"""etcd's default backend quota (2 GiB) would fill with a million objects' revisions."""
CREATE_CONCURRENCY = 64
NO_MANAGED_FIELDS = {"metadata": {"managedFields": [{}]}}
"""A patch that clears an object's managedFields (the API server's documented way)."""
SETTLE = 1.0
"""Seconds between an operator's ``settled`` and the RSS reading (its last work lands)."""


def build() -> None:
    """The two peers, beside the Widget peers (same module and crate, same pins)."""
    go_sources = [*(compiled_peers.GO_DIR / "configmaps").glob("*.go")]
    go_sources += [compiled_peers.GO_DIR / "go.mod", compiled_peers.GO_DIR / "go.sum"]
    newest = max(p.stat().st_mtime for p in go_sources)
    if not GO_BINARY.exists() or GO_BINARY.stat().st_mtime < newest:
        log(f"building {GO_BINARY} (go build) ...")
        compiled_peers._run(
            ["nice", "go", "build", "-trimpath", "-o", str(GO_BINARY), "./configmaps"],
            compiled_peers.GO_DIR,
        )
    compiled_peers.build_rust()


def operator_argv(mode: str, kubeconfig: str, namespace: str, expect: int) -> list[str]:
    args = [f"--kubeconfig={kubeconfig}", f"--namespace={namespace}", f"--expect={expect}"]
    if mode == "fastctl":
        return child_argv("scale_fastctl.py", *args)
    if mode == "fastctl-json":
        return child_argv("scale_fastctl.py", *args, "--json")
    if mode == "controller-runtime":
        return [str(GO_BINARY), *args]
    if mode == "kube-rs":
        return [str(RUST_BINARY), *args]
    raise ValueError(f"unknown operator {mode!r}")


class Run:
    """The cluster of one benchmark run and what the operators need from it."""

    def __init__(self, cp: ControlPlane, client: Any, args: argparse.Namespace) -> None:
        self.cp, self.client, self.args = cp, client, args
        self.created = 0
        self.rng = random.Random(35)
        self.changes_made = 0
        self.configmaps: Any = CONFIGMAP

    async def resolve(self) -> None:
        self.configmaps = await CONFIGMAP.resolve(self.client)

    async def create_up_to(self, count: int) -> None:
        start, t0 = self.created, time.monotonic()

        async def one(i: int) -> None:
            obj = configmap(start + i, NAMESPACE)
            await create(self.client, self.configmaps, obj)
            # The API server records the create in managedFields (~460 bytes here), which
            # fastctl drops by default and the peers keep: cleared, every operator caches
            # the same ~668 bytes.
            name = obj["metadata"]["name"]
            await patch(self.client, self.configmaps, name, NO_MANAGED_FIELDS, namespace=NAMESPACE)

        await run_bounded(count - start, CREATE_CONCURRENCY, one)
        self.created = count
        seconds = time.monotonic() - t0
        log(f"created {count - start:,} ConfigMaps in {seconds:.0f} s (now {count:,})")

    async def operator(self, mode: str, objects: int, label: str) -> dict[str, Any]:
        """One process of `mode` on `objects` ConfigMaps (0: the empty namespace)."""
        namespace = NAMESPACE if objects else EMPTY
        argv = operator_argv(mode, str(self.cp.kubeconfig), namespace, objects)
        log_path = Path(self.args.log_dir) / f"scale-{label}.log"
        child = Child(label, argv, log_path)
        started = time.time()
        await child.start()
        changes: list[tuple[str, float, float]] = []
        try:
            await child.wait_for(lambda m: "settled" in m, self.args.timeout)
            await asyncio.sleep(SETTLE)
            memory = child.memory()
            for _ in range(self.args.changes if objects else 0):
                changes.append(await self._live_change(child, objects))
        finally:
            await child.stop()
        row = summarize_run(
            child.messages, started=started, objects=objects, memory=memory, changes=changes
        )
        log(
            f"{label}: cached {row['cached_seconds']:.2f} s, all reconciled "
            f"{row['all_reconciled_seconds']:.2f} s, CPU {row['cpu_seconds']:.2f} s, RSS "
            f"{row['rss_bytes'] / 2**20:.1f} MiB, live {row['live_from_ack_ms']}"
        )
        return row

    async def _live_change(self, child: Child, objects: int) -> tuple[str, float, float]:
        self.changes_made += 1
        seq = f"live-{self.changes_made}"
        name = configmap(self.rng.randrange(objects), NAMESPACE)["metadata"]["name"]
        body = {"metadata": {"annotations": {SEQ_ANNOTATION: seq}}}
        sent = time.time()
        await patch(self.client, self.configmaps, name, body, namespace=NAMESPACE)
        acked = time.time()
        try:
            await child.wait_for(lambda m: m.get("seen") == seq, 30)
        except TimeoutError:
            log(f"{child.name}: live change {seq} not reconciled within 30 s")
        await asyncio.sleep(self.args.change_interval)
        return seq, sent, acked


CONFIGMAP = Resource("v1", "ConfigMap")


async def run_operators(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    etcd_args = [f"--quota-backend-bytes={ETCD_QUOTA}"]
    async with ControlPlane(etcd_args=etcd_args) as cp:
        client = await load_client(str(cp.kubeconfig))
        try:
            for namespace in (NAMESPACE, EMPTY):
                await create(client, Resource("v1", "Namespace"), {"metadata": {"name": namespace}})
            run = Run(cp, client, args)
            await run.resolve()
            for count in sorted(args.objects):
                await run.create_up_to(count)
                pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
                    m: [] for m in args.modes
                }
                for round_ in range(args.rounds):
                    for mode in args.modes:
                        label = f"{mode}-{count}-r{round_ + 1}"
                        empty = await run.operator(mode, 0, f"{label}-empty")
                        full = await run.operator(mode, count, label)
                        pairs[mode].append((full, empty))
                for mode in args.modes:
                    row = {"mode": mode, **combine(pairs[mode])}
                    row["problems"] = problems(pairs[mode])
                    rows.append(row)
        except ApiError as err:
            raise RuntimeError(f"the API server refused a driver request: {err}") from err
        finally:
            await client.close()
    return rows


def problems(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """Live changes an operator never reconciled (every object it reconciled once, or it
    would not have reported ``all_first``)."""
    missed = sum(run["live_changes_not_seen"] for run, _ in pairs)
    return [f"{missed} live changes not reconciled"] if missed else []


def run_store(counts: list[int], rounds: int) -> list[dict[str, Any]]:
    rows = []
    for n in counts:
        runs = []
        for _ in range(rounds):
            out = subprocess.run(
                [PYTHON, str(Path(__file__).with_name("scale_store.py")), str(n)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs.append(json.loads(out))
        per = median(r["rss_bytes_per_object"] for r in runs)
        row = {**runs[0], "mode": "fastctl-store", "rss_bytes_per_object": per}
        row["rounds"] = [r["rss_bytes_per_object"] for r in runs]
        log(f"Store alone, {n:,} objects: {row['rss_bytes_per_object']:.0f} B per object")
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", default=list(OPERATORS[:3]), choices=OPERATORS)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each operator")
    parser.add_argument("--changes", type=int, default=10, help="live changes per run")
    parser.add_argument("--change-interval", type=float, default=0.1, help="seconds")
    parser.add_argument(
        "--store-objects", type=int, nargs="*", default=[10_000, 100_000, 1_000_000]
    )
    parser.add_argument("--store-rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="per operator run, s")
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    parser.add_argument("--log-dir", default="/tmp/fastctl-e2e-logs")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="use the peers' binaries as they are (built beforehand; never rebuilt)",
    )
    args = parser.parse_args()
    if args.rounds < 1 or min(args.objects) < 1:
        parser.error("--rounds and every --objects value must be at least 1")
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.no_build:
        for binary in (GO_BINARY, RUST_BINARY):
            if not binary.exists():
                parser.error(f"--no-build: {binary} is not built")
    else:
        build()
    results: dict[str, Any] = {
        "machine": {**machine(), **compiled_peers.versions()},
        "args": vars(args),
        "load_before": load_average(),
    }
    results["operators"] = asyncio.run(run_operators(args))
    results["store"] = run_store(args.store_objects, args.store_rounds)
    results["load_after"] = load_average()
    results["seconds"] = time.monotonic() - started
    save(results, Path(args.out), render, None if args.no_plots else make_plots)
    bad = [r for r in results["operators"] if r["problems"]]
    for r in bad:
        log(f"{r['mode']} x{r['objects']}: " + "; ".join(r["problems"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
