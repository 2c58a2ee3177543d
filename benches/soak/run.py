"""The soak: two leader-elected demo operators under churn and faults for a long while.

    python benches/soak/run.py --minutes 30            # the full run (README.md)
    python benches/soak/run.py --minutes 3 --objects 500 --fault-every 45   # a short one

It starts a local control plane, installs the Widget CRD, runs the demo operator
(`fastctl.demo.widgets`) as two ``fastctl run --leader-elect`` processes on one Lease,
creates the Widgets, then for the duration creates, changes and deletes Widgets at a steady
rate and injects a fault every few minutes (`faults.py`). After the churn it waits for
quiescence, checks the record and the cluster (`checks.py`), prints a summary and writes a
JSON result. The exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks
from faults import KINDS, inject
from kubernetes_asyncio.client import ApiClient
from operators import LEASE, Operators

from fastctl.demo.widgets import WIDGET, install_crd
from fastctl.kube._client import load_client
from fastctl.kube._objects import create, delete, patch
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import EventKind, watcher
from fastctl.testing.control_plane import ControlPlane

HERE = Path(__file__).resolve().parent
NAMESPACE = "soak"
GROUP_PATH = f"/apis/{WIDGET.api_version}/namespaces/{NAMESPACE}/widgets"


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} soak: {message}", file=sys.stderr, flush=True)


def spec(name: str, version: int) -> dict[str, str]:
    return {"greeting": "Hello from {name} in {namespace}", "version": str(version)}


class Driver:
    """Writes the Widgets: the initial population, then steady churn."""

    def __init__(self, client: ApiClient, seed: int) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.serial = 0
        self.live: list[str] = []
        self.counts = {"create": 0, "update": 0, "delete": 0, "failed": 0, "skipped": 0}
        self._gate = asyncio.Semaphore(16)
        self._tasks: set[asyncio.Task[None]] = set()

    def _new_name(self) -> str:
        self.serial += 1
        return f"w-{self.serial:06d}"

    async def _create(self, name: str) -> None:
        body = {
            "apiVersion": WIDGET.api_version,
            "kind": "Widget",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"data": spec(name, 0)},
        }
        await create(self.client, WIDGET, body)
        self.live.append(name)

    async def populate(self, n: int) -> None:
        async def one(name: str) -> None:
            async with self._gate:
                await self._create(name)

        names = [self._new_name() for _ in range(n)]
        for start in range(0, n, 500):
            await asyncio.gather(*(one(name) for name in names[start : start + 500]))
        self.counts["create"] += n

    async def _op(self) -> None:
        r = self.rng.random()
        coro: Coroutine[Any, Any, object]
        if r < 0.25 or len(self.live) < 2:
            op, name = "create", self._new_name()
            coro = self._create(name)
        elif r < 0.5:
            op = "delete"
            name = self.live.pop(self.rng.randrange(len(self.live)))
            coro = delete(self.client, WIDGET, name, namespace=NAMESPACE)
        else:
            op, name = "update", self.rng.choice(self.live)
            body = {"spec": {"data": spec(name, self.serial + self.counts["update"])}}
            coro = patch(self.client, WIDGET, name, body, namespace=NAMESPACE)
        try:
            await coro
            self.counts[op] += 1
        except Exception:
            self.counts["failed"] += 1  # an outage: the cluster's final state is what counts

    def tick(self) -> None:
        """Start one operation unless 16 are still in flight (then it is skipped)."""
        if self._gate.locked():
            self.counts["skipped"] += 1
            return

        async def run() -> None:
            async with self._gate:
                await self._op()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)


class DeleteObserver:
    """The driver's own watch of the Widgets: when each uid's deletion was seen."""

    def __init__(self, client: ApiClient) -> None:
        self.deleted: dict[str, float] = {}
        self.relists = 0
        self._task = asyncio.get_running_loop().create_task(self._run(client))

    async def _run(self, client: ApiClient) -> None:
        async for event in watcher(client, WIDGET, namespace=NAMESPACE):
            if event.kind is EventKind.INIT:
                self.relists += 1
            elif event.kind is EventKind.DELETE:
                self.deleted.setdefault(event.obj["metadata"]["uid"], time.monotonic())

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def lease_holder(cp: ControlPlane) -> str | None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{LEASE}"
    try:
        status, body = await asyncio.to_thread(cp.api_request, "GET", path, timeout=5)
    except OSError:
        return None
    return body.get("spec", {}).get("holderIdentity") if status == 200 else None


async def list_items(cp: ControlPlane, path: str) -> list[dict[str, Any]]:
    status, body = await asyncio.to_thread(cp.api_request, "GET", path, timeout=120)
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status}")
    items: list[dict[str, Any]] = body["items"]
    return items


async def settled(cp: ControlPlane) -> tuple[bool, int]:
    """Whether every Widget is rendered and reports its generation; how many are not."""
    widgets = await list_items(cp, GROUP_PATH)
    cms = {
        c["metadata"]["name"]: c
        for c in await list_items(cp, f"/api/v1/namespaces/{NAMESPACE}/configmaps")
    }
    pending = 0
    for w in widgets:
        meta = w["metadata"]
        cm = cms.get(f"{meta['name']}-rendered")
        if (
            "deletionTimestamp" in meta
            or cm is None
            or (cm.get("data") or {}) != checks.rendered(w)
            or (w.get("status") or {}).get("observedGeneration") != meta.get("generation")
        ):
            pending += 1
    return pending == 0, pending


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.faults: list[dict[str, Any]] = []
        self.holders: list[tuple[float, str]] = []
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.outdir = Path(args.workdir or HERE / "results" / f"run-{self.stamp}")

    async def run(self) -> dict[str, Any]:
        async with ControlPlane() as cp:
            client = await load_client(str(cp.kubeconfig))
            try:
                return await self._run(cp, client)
            finally:
                await client.close()

    async def _run(self, cp: ControlPlane, client: ApiClient) -> dict[str, Any]:
        args = self.args
        await create(client, Resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}})
        await install_crd(client)
        log(f"control plane up ({cp.server}); records in {self.outdir}")
        extra = [
            f"--lease-duration={args.lease_duration}",
            f"--renew-deadline={args.renew_deadline}",
        ]
        ops = Operators(
            cp.kubeconfig, NAMESPACE, self.outdir, 2, extra, leader_elect=not args.no_leader_elect
        )
        observer = DeleteObserver(client)
        driver = Driver(client, args.seed)
        try:
            t0 = time.monotonic()
            await driver.populate(args.objects)
            log(f"{args.objects} Widgets created in {time.monotonic() - t0:.0f} s")
            churn_start = time.monotonic()
            await self._churn(cp, ops, driver, churn_start)
            await driver.drain()
            churn_end = time.monotonic()
            log(f"churn done: {driver.counts}; waiting for quiescence")
            quiet = await self._quiesce(cp, ops)
            widgets = await list_items(cp, GROUP_PATH)
            cms = {
                c["metadata"]["name"]: c
                for c in await list_items(cp, f"/api/v1/namespaces/{NAMESPACE}/configmaps")
            }
        finally:
            await observer.stop()
            ops.stop()
        return self._verdict(ops, driver, observer, widgets, cms, churn_start, churn_end, quiet)

    async def _churn(self, cp: ControlPlane, ops: Operators, driver: Driver, start: float) -> None:
        args = self.args
        end = start + args.minutes * 60
        period = 1.0 / args.rate
        next_op, next_rss, next_lease = start, start, start
        next_fault = start + args.fault_every
        fault_n = 0
        fault_task: asyncio.Task[dict[str, Any]] | None = None
        while (now := time.monotonic()) < end or fault_task is not None:
            for inst in ops.supervise():
                log(f"{inst.name} ended ({inst.how}); restarted")
            while next_op <= now and now < end:
                driver.tick()
                next_op += period
            if now >= next_rss:
                ops.sample_rss()
                next_rss += args.rss_every
            if now >= next_lease:
                holder = await lease_holder(cp)
                if holder and (not self.holders or self.holders[-1][1] != holder):
                    self.holders.append((time.monotonic(), holder))
                    log(f"lease held by {holder}")
                next_lease = time.monotonic() + 1.0
            if fault_task is None and now >= next_fault and now < end - 60:
                kind = KINDS[fault_n % len(KINDS)]
                fault_n += 1
                log(f"fault {fault_n}: {kind}")
                fault_task = asyncio.create_task(inject(kind, cp, ops))
                next_fault += args.fault_every
            if fault_task is not None and fault_task.done():
                detail = fault_task.result()
                detail["t"] = detail["mono"] - start
                self.faults.append(detail)
                log(f"fault done in {detail['seconds']:.1f} s: {detail}")
                fault_task = None
            await asyncio.sleep(min(0.05, period))

    async def _quiesce(self, cp: ControlPlane, ops: Operators) -> float | None:
        """Wait until the cluster is settled and no reconcile started for `quiet` seconds;
        the seconds it took, or None on timeout."""
        started = time.monotonic()
        while time.monotonic() - started < self.args.quiesce_timeout:
            for inst in ops.supervise():
                log(f"{inst.name} ended ({inst.how}); restarted")
            ops.sample_rss()
            ops.read_records()
            last = max((i.last_start for i in ops.instances), default=0.0)
            idle = time.monotonic() - last
            try:
                ok, pending = await settled(cp)
            except (OSError, RuntimeError) as exc:
                ok, pending = False, -1
                log(f"listing failed: {exc}")
            if ok and idle >= self.args.quiet:
                return time.monotonic() - started
            log(f"quiescence: {pending} Widgets pending, no reconcile for {idle:.0f} s")
            await asyncio.sleep(5)
        return None

    def _verdict(
        self,
        ops: Operators,
        driver: Driver,
        observer: DeleteObserver,
        widgets: list[dict[str, Any]],
        cms: dict[str, dict[str, Any]],
        churn_start: float,
        churn_end: float,
        quiet: float | None,
    ) -> dict[str, Any]:
        args = self.args
        ivs: list[checks.Interval] = []
        for inst in ops.instances:
            records = checks.read_records(inst.record) if inst.record.exists() else []
            ivs.extend(checks.intervals(inst.name, records, inst.ended or time.monotonic()))
        over = checks.overlaps(ivs)
        lost = checks.lost(widgets, cms, ivs)
        late, within_lag = checks.after_delete(observer.deleted, ivs)
        rss = {}
        for inst in ops.instances:
            leading = _leading_since(inst.log)
            segments = checks.role_segments(
                inst.started,
                inst.ended or time.monotonic(),
                leading,
                "follower" if not args.no_leader_elect else "unelected",
            )
            rss[inst.name] = checks.rss_by_role(
                inst.rss, segments, churn_start, args.warmup, args.rss_window
            )
            rss[inst.name]["leading_since"] = leading
        relists = {inst.name: _relists(inst.log) for inst in ops.instances}
        for fault in self.faults:
            fault["relists_after"] = sum(
                1
                for times in relists.values()
                for t in times
                if fault["wall"] <= t <= fault["wall"] + fault["seconds"] + 60
            )
        failed = {
            "quiescence": quiet is None,
            "overlap": bool(over),
            "lost": bool(lost),
            "after-delete": bool(late),
            "rss": any(r.get("judged") and not r["ok"] for r in rss.values()),
        }
        return {
            "command": " ".join(sys.argv),
            "objects": args.objects,
            "minutes": args.minutes,
            "churn_rate_per_s": args.rate,
            "churn": driver.counts,
            "churn_seconds": churn_end - churn_start,
            "final_widgets": len(widgets),
            "faults": self.faults,
            "lease_holders": self.holders,
            "takeovers": max(0, len(self.holders) - 1),
            "reconciles": len(ivs),
            "reconciles_per_process": {i.name: i.reconciles for i in ops.instances},
            "processes": [i.summary() for i in ops.instances],
            "relists_logged": relists,
            "driver_relists": observer.relists,
            "quiescence_seconds": quiet,
            "overlaps": over,
            "lost": lost,
            "reconciled_after_delete": late,
            "reconciled_after_delete_within_lag": within_lag,
            "deleted": observer.deleted,
            "deleted_observed": len(observer.deleted),
            "rss": rss,
            "failed": [name for name, bad in failed.items() if bad],
        }


def _relists(path: Path) -> list[float]:
    """Wall times of the watcher's "listing again" (a 410 Gone) lines in an operator log."""
    return _log_times(path, "listing again")


def _log_times(path: Path, needle: str) -> list[float]:
    """Wall times of the lines of an operator log that contain `needle`."""
    times = []
    with contextlib.suppress(OSError), path.open(errors="replace") as file:
        for line in file:
            if needle in line:
                stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
                times.append(time.mktime(stamp) + int(line[20:23]) / 1000)
    return times


def _leading_since(path: Path) -> float | None:
    """When the process took over the lease (the Manager's "leading (" line), as a
    monotonic time like the RSS samples'; None if it never led."""
    times = _log_times(path, "fastctl.manager object=- leading (")
    return times[0] - (time.time() - time.monotonic()) if times else None


_SHOWN = ("killed", "compacted_at_revision", "skipped", "relists_after")


def _mb(row: dict[str, Any], key: str) -> str:
    return f"{row[key] / 2**20:.1f}" if key in row else "-"


def summary(res: dict[str, Any]) -> str:
    lines = [
        f"objects {res['objects']}, {res['minutes']} min of churn at {res['churn_rate_per_s']}/s: "
        f"{res['churn']}; {res['final_widgets']} Widgets at the end",
        f"reconciles {res['reconciles']}, takeovers {res['takeovers']}, "
        f"overlaps {len(res['overlaps'])}, lost {len(res['lost'])}, "
        f"reconciled after delete {len(res['reconciled_after_delete'])} "
        f"(+{len(res['reconciled_after_delete_within_lag'])} within {checks.DELETE_LAG} s)",
        "faults (relists_after: 410-relists logged by the operators in the minute after):",
        *(
            f"  t={f['t']:7.1f} s  {f['kind']:<18} {f['seconds']:5.1f} s  "
            + ", ".join(f"{k}={v}" for k, v in f.items() if k in _SHOWN)
            for f in res["faults"]
        ),
        f"{'process':<8} {'how it ended':<22} {'reconciles':>10} {'relists':>7} {'role':>9} "
        f"{'RSS first':>9} {'last':>7} {'med 1st':>7} {'med last':>8} {'growth':>7}",
    ]
    for proc in res["processes"]:
        first = True
        for role, r in res["rss"][proc["name"]]["roles"].items():
            growth = f"{r['growth'] * 100:+.1f}%" if r.get("judged") else "n/j"
            head = (
                f"{proc['name']:<8} {proc['how'] or '-':<22} {proc['reconciles']:>10} "
                f"{len(res['relists_logged'][proc['name']]):>7}"
                if first
                else " " * 50
            )
            first = False
            lines.append(
                f"{head} {role:>9} {_mb(r, 'first'):>9} {_mb(r, 'last'):>7} "
                f"{_mb(r, 'median_first'):>7} {_mb(r, 'median_last'):>8} {growth:>7}"
            )
    lines.append("FAILED: " + ", ".join(res["failed"]) if res["failed"] else "all checks passed")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="churn duration (30)")
    parser.add_argument("--objects", type=int, default=5000, help="initial Widgets (5000)")
    parser.add_argument("--rate", type=float, default=10.0, help="churn operations/s (10)")
    parser.add_argument("--fault-every", type=float, default=240.0, help="seconds (240)")
    parser.add_argument("--rss-every", type=float, default=10.0, help="seconds (10)")
    parser.add_argument("--warmup", type=float, default=180.0, help="RSS warm-up, s (180)")
    parser.add_argument("--rss-window", type=float, default=200.0, help="RSS window, s (200)")
    parser.add_argument("--quiet", type=float, default=15.0, help="idle s for quiescence")
    parser.add_argument("--quiesce-timeout", type=float, default=900.0)
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-leader-elect",
        action="store_true",
        help="a deliberate breakage: both replicas reconcile at once (the overlap check fails)",
    )
    parser.add_argument("--workdir", help="records and logs (default: results/run-<time>)")
    parser.add_argument("--out", help="JSON result (default: <workdir>/result.json)")
    args = parser.parse_args()
    soak = Soak(args)
    res = asyncio.run(soak.run())
    out = Path(args.out) if args.out else soak.outdir / "result.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(summary(res))
    print(f"result: {out}")
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
