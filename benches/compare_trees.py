"""Two source trees of fastctl side by side on one benchmark script, in alternating rounds
(A B A B ..., so the machine's load hits both alike): what a change to the Python runtime
did. Each round runs the script in a fresh process with ``PYTHONPATH=<tree>/python`` (the
tree's own package and extension) and reads the JSON line it prints last.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/compare_trees.py \\
        --metric cpu_per_event_us --rounds 11 OLD_TREE NEW_TREE -- \\
        benches/controller_path.py 2000 40000

Prints each tree's median, and the median of the adjacent rounds' ratios NEW/OLD.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def _round(tree: Path, command: list[str], metric: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    out = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    where = str(result.get("fastctl", ""))
    if where and not where.startswith(str(tree)):
        raise SystemExit(f"{tree}: the script imported fastctl from {where}")
    return float(result[metric])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--metric", required=True)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    old: list[float] = []
    new: list[float] = []
    for _ in range(args.rounds):
        old.append(_round(args.old.resolve(), command, args.metric))
        new.append(_round(args.new.resolve(), command, args.metric))
    ratios = [n / o for o, n in zip(old, new, strict=True)]
    print(f"{args.metric}: old median {statistics.median(old):.3f} (min {min(old):.3f}), "
          f"new median {statistics.median(new):.3f} (min {min(new):.3f}), "
          f"new/old median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
