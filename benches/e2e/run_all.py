"""Every end-to-end benchmark, against the real local API server, in one
command::

    .venv/bin/python benches/e2e/run_all.py            # the full run (~11 min on 2 cores)
    .venv/bin/python benches/e2e/run_all.py --quick    # a smoke run (~6 min)

Needs the benchmark extras (``.venv/bin/pip install -r benches/requirements.txt``) and the
control-plane binaries (``scripts/dev-install``). Each scenario runs on its own fresh
etcd + kube-apiserver; every operator and watch consumer is its own process. Writes the raw
results to ``benches/e2e/results/e2e.json`` (``--out``), the tables to
``benches/e2e/results/e2e.md`` and the plots to ``docs/img/e2e-*.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_operators import WIDGET_MODES
from common import ROOT, load_average, log, median
from plots import make_plots
from report import render
from scenario_configmaps import run_configmaps
from scenario_latency import run_latency
from scenario_operators import run_operator

RESULTS = ROOT / "benches" / "e2e" / "results"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version

    from fastctl.testing.binaries import find_binaries

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    binaries = find_binaries(None)
    apiserver = subprocess.run(
        [str(binaries.kube_apiserver), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kopf": version("kopf"),
        "kubernetes_asyncio": version("kubernetes_asyncio"),
        "kube_apiserver": apiserver,
        "fastctl_commit": commit,
        "load_at_start": load_average(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result whose timing, memory and CPU figures are the medians over `runs`
    (the request counts are the first run's: they do not vary)."""
    out: dict[str, Any] = json.loads(json.dumps(runs[0]))
    out["runs"] = len(runs)
    for phase in ("initial", "burst"):
        if all(phase in r for r in runs):
            for key in ("seconds", "first_seconds", "cpu_seconds", "write_seconds"):
                values = [r[phase].get(key) for r in runs]
                if all(isinstance(v, int | float) for v in values):
                    out[phase][key] = median(values)
            out[phase]["all_seconds"] = [r[phase]["seconds"] for r in runs]
            out[phase]["all_cpu_seconds"] = [r[phase].get("cpu_seconds") for r in runs]
            out[phase]["finished"] = all(r[phase]["finished"] for r in runs)
            others = [r[phase].get("others_cpu_seconds", {}) for r in runs]
            out[phase]["others_cpu_seconds"] = {
                name: median(o.get(name, math.nan) for o in others) for name in others[0]
            }
    for key in ("peak_rss_bytes", "cpu_seconds", "load_before"):
        out[key] = median(r[key] for r in runs)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    log_dir = Path(args.log_dir)
    results: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    started = time.monotonic()
    if "configmaps" in args.only:
        log(f"== {args.configmaps} ConfigMaps")
        results["configmaps"] = await run_configmaps(
            args.configmaps, args.payload, args.concurrency, log_dir
        )
    if "latency" in args.only:
        log(f"== live-change latency behind {args.backlog} initial-list objects")
        results["latency"] = await run_latency(
            args.backlog, args.concurrency, 0.05, 400, ("rust", "model"), log_dir
        )
    if "operators" in args.only:
        rows: list[dict[str, Any]] = []
        for count in args.counts:
            large = count > 1000
            modes = args.modes_large if large else args.modes
            repeats = {
                m: args.repeat_large if large and m in ("fastctl", "kopf") else args.repeat
                for m in modes
            }
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            # Rounds interleave the modes (A B A B ...), so that a burst of load from the
            # other users of the machine is shared between the frameworks compared.
            for round_ in range(max(repeats.values())):
                for mode in modes:
                    if round_ >= repeats[mode]:
                        continue
                    log(f"== {mode} on {count} Widgets (run {round_ + 1}/{repeats[mode]})")
                    runs[mode].append(
                        await run_operator(
                            mode,
                            count,
                            concurrency=args.concurrency,
                            timeout=args.timeout,
                            log_dir=log_dir,
                        )
                    )
            rows += [median_of_runs(runs[mode]) for mode in modes]
        results["operators"] = rows
    if "sweep" in args.only:
        rows = []
        for concurrency in args.sweep:
            log(f"== concurrency sweep: fastctl, {args.sweep_count} Widgets, c={concurrency}")
            rows.append(
                await run_operator(
                    "fastctl",
                    args.sweep_count,
                    concurrency=concurrency,
                    timeout=args.timeout,
                    log_dir=log_dir,
                )
            )
        # The main table's fastctl run at the default concurrency is one more point.
        rows += [
            r
            for r in results.get("operators", [])
            if r["mode"] == "fastctl" and r["count"] == args.sweep_count
        ]
        results["sweep"] = sorted(rows, key=lambda r: int(r["concurrency"]))
    results["machine"]["load_at_end"] = load_average()
    results["seconds"] = time.monotonic() - started
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument(
        "--only",
        nargs="+",
        default=["configmaps", "latency", "operators", "sweep"],
        choices=["configmaps", "latency", "operators", "sweep"],
    )
    parser.add_argument("--configmaps", type=int, default=5000)
    parser.add_argument("--payload", type=int, default=1024, help="bytes of data a ConfigMap")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument(
        "--modes",
        nargs="+",
        # kopf-limited stalls (see docs); the guard's and tracing's modes are runs of their own
        default=[
            m
            for m in WIDGET_MODES
            if m
            not in (
                "kopf-limited",
                "fastctl-no-ryw",
                "fastctl-no-otel",
                "fastctl-traced",
                "fastctl-otlp",
                "fastctl-sampled",
            )
        ],
        help="modes for counts up to 1,000 (see bench_operators.py)",
    )
    parser.add_argument(
        "--modes-large",
        nargs="+",
        default=["fastctl", "fastctl-model", "fastctl-no-trust-env", "kopf"],
        help="modes for counts above 1,000",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sweep", type=int, nargs="+", default=[4, 16, 128])
    parser.add_argument("--sweep-count", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each operator scenario")
    parser.add_argument(
        "--repeat-large",
        type=int,
        default=3,
        help="runs of fastctl and kopf above 1,000 objects (the target's comparison)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase, seconds")
    parser.add_argument("--out", default=str(RESULTS / "e2e.json"))
    parser.add_argument("--log-dir", default="/tmp/fastctl-e2e-logs")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.configmaps, args.backlog, args.counts = 1000, 3000, [300, 1000]
        args.modes_large = args.modes
        args.sweep, args.sweep_count = [8, 64], 300
        args.repeat_large = 1
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    results = asyncio.run(main_async(args))
    save(results, Path(args.out), render, None if args.no_plots else make_plots)


def save(
    results: dict[str, Any],
    out: Path,
    render: Callable[[dict[str, Any]], str],
    plots: Callable[[dict[str, Any], Path], object] | None,
) -> None:
    """Write `results` as JSON to `out`, its tables beside it (``.md``, also printed) and
    its plots (unless None) to ``docs/img``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    markdown = render(results)
    out.with_suffix(".md").write_text(markdown)
    if plots is not None:
        plots(results, ROOT / "docs" / "img")
    print(markdown)
    log(f"done in {results['seconds']:.0f} s: {out}, {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
