"""Modes of the Widget operator scenario run in pairs, alternating, one JSON line per run.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/paired_modes.py \\
        --modes fastctl fastctl-no-ryw --rounds 8 --count 1000 --abba --out runs.jsonl

Each run is `scenario_operators.run_operator` (a fresh control plane, COUNT Widgets
created, all handled, then all updated once), as `run_all.py` runs it; this script keeps
every run rather than medians, so that a comparison can be made run by run (the ratio of
each round's pair) and with the order of the modes reversed every other round
(``--abba``: a mode that always ran first or last would carry any drift of the machine's
load). Each line: the operator's CPU of the initial phase and of the burst, the burst's
seconds, the requests of each phase, the load average, and, with ``FASTCTL_BENCH_STATS=1``
in the environment, the operator's own counts (see ``bench_operators.py``).
``--summary`` prints the medians and the per-round ratios of a file written before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from scenario_operators import run_operator


def _stats(logs: Path, mode: str, count: int) -> Any:
    """The operator's last stderr line, when it is the JSON of ``FASTCTL_BENCH_STATS``."""
    path = logs / f"operator-{mode.replace('/', '_')}-{count}.log"
    try:
        last = path.read_text().strip().splitlines()[-1]
        return json.loads(last) if last.startswith("{") else None
    except (OSError, IndexError, ValueError):
        return None


def _append(path: str, row: dict[str, Any]) -> None:
    with open(path, "a") as out:
        out.write(json.dumps(row) + "\n")


async def run(args: argparse.Namespace) -> None:
    logs = Path(args.logs)
    for round_ in range(args.rounds):
        modes = list(args.modes)
        if args.abba and round_ % 2:
            modes.reverse()
        for mode in modes:
            result = await run_operator(
                mode, args.count, concurrency=args.concurrency, timeout=300, log_dir=logs
            )
            initial, burst = result.get("initial", {}), result.get("burst", {})
            row = {
                "round": round_,
                "mode": mode,
                "count": args.count,
                "initial_cpu": initial.get("cpu_seconds"),
                "burst_cpu": burst.get("cpu_seconds"),
                "burst_seconds": burst.get("seconds"),
                "initial_requests": initial.get("requests"),
                "burst_requests": burst.get("requests"),
                "load": result.get("load_before"),
                "stats": _stats(logs, mode, args.count),
            }
            _append(args.out, row)
            print(mode, round_, row["initial_cpu"], row["burst_cpu"], flush=True)


def summary(path: str, base: str) -> None:
    """Medians per mode and phase, and each mode's per-round ratios against `base`."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["mode"], {})[row["round"]] = row
    for phase in ("initial_cpu", "burst_cpu"):
        print(f"## {phase}")
        for mode, runs in by.items():
            values = [r[phase] for r in runs.values() if r[phase] is not None]
            line = f"{mode}: median {statistics.median(values):.3f} s of {len(values)}"
            if mode != base and base in by:
                ratios = [
                    r[phase] / by[base][n][phase]
                    for n, r in sorted(runs.items())
                    if n in by[base] and by[base][n][phase]
                ]
                line += f"; against {base}: median of ratios {statistics.median(ratios):.3f} "
                line += "(" + " ".join(f"{x:.2f}" for x in ratios) + ")"
            print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["fastctl", "fastctl-no-ryw"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--abba", action="store_true", help="reverse the order every other round")
    parser.add_argument("--out", default="/tmp/fastctl-paired.jsonl")
    parser.add_argument("--logs", default="/tmp/fastctl-paired-logs")
    parser.add_argument("--summary", metavar="BASE", help="summarise --out against mode BASE")
    args = parser.parse_args()
    if args.summary:
        summary(args.out, args.summary)
        return 0
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
