"""The Widget operator in fastctl, kopf, controller-runtime (Go), kube-runtime (Rust) and a
raw asyncio loop, on the same Widgets, in one command::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/run_peers.py

Needs what ``run_all.py`` needs, plus Go and cargo on PATH (the compiled operators are built
from the module proxy and the crate registry on first use: see `compiled_peers`). Each
scenario is `scenario_operators.run_operator` on its own fresh control plane; rounds
interleave the operators. Writes ``benches/e2e/results/peers.json`` and ``peers.md`` and
the plots ``docs/img/e2e-peers-*.png``; exits 1, after writing them, if any operator did
not do the same work as the others (`compiled_peers.same_work`). The Python operators
(fastctl, kopf, the raw asyncio loop) all run on the loop ``--loop`` names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import compiled_peers
from common import load_average, log
from peers_report import make_plots, render
from run_all import RESULTS, machine, median_of_runs, save
from scenario_operators import run_operator

MODES = ["fastctl", "kopf", *compiled_peers.PEER_MODES]


def _mode(text: str) -> str:
    """A mode; `fastctl@TREE` with TREE made absolute (the child runs from another cwd)."""
    name, at, tree = text.partition("@")
    return f"{name}@{Path(tree).resolve()}" if at else text


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    log_dir = Path(args.log_dir)
    if args.no_build:  # as they are: each must exist
        compiled_peers.require_built(args.modes)
    else:
        compiled_peers.build(args.modes)
    results: dict[str, Any] = {
        "machine": {**machine(), **compiled_peers.versions()},
        "args": vars(args),
    }
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for count in args.counts:
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
        for round_ in range(args.repeat):
            for mode in args.modes:
                log(f"== {mode} on {count} Widgets (run {round_ + 1}/{args.repeat})")
                runs[mode].append(
                    await run_operator(
                        mode,
                        count,
                        concurrency=args.concurrency,
                        timeout=args.timeout,
                        log_dir=log_dir,
                    )
                )
        for mode in args.modes:
            row = median_of_runs(runs[mode])
            row["problems"] = sorted({p for r in runs[mode] for p in compiled_peers.same_work(r)})
            rows.append(row)
    results["operators"] = rows
    results["machine"]["load_at_end"] = load_average()
    results["seconds"] = time.monotonic() - started
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument(
        "--modes",
        nargs="+",
        default=MODES,
        type=_mode,
        help="operators to run; fastctl@TREE runs fastctl from another source tree",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario")
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase, seconds")
    parser.add_argument("--out", default=str(RESULTS / "peers.json"))
    parser.add_argument("--log-dir", default="/tmp/fastctl-e2e-logs")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="run the compiled peers as built before (say, by another worktree whose target "
        "folders these are linked to), without checking their sources",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the event loop of every Python operator (FASTCTL_LOOP in their environment): "
        "uvloop when installed (auto, fastctl run's default), uvloop, or asyncio's own",
    )
    args = parser.parse_args()
    os.environ["FASTCTL_LOOP"] = args.loop  # the children inherit it
    if args.repeat < 1 or any(c < 1 for c in args.counts):
        parser.error("--repeat and every --counts value must be at least 1")
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    results = asyncio.run(main_async(args))
    save(results, Path(args.out), render, None if args.no_plots else make_plots)
    bad = [r for r in results["operators"] if r["problems"]]
    for r in bad:
        log(f"NOT THE SAME WORK: {r['mode']} x{r['count']}: " + "; ".join(r["problems"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
