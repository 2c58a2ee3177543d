"""What tracing costs on the controller path: `controller_path.py` in its three tracing
modes (the ``otel`` extra missing, installed but off, on), in alternating rounds of fresh
processes (missing, off, on, missing, ...) so the machine's load hits each alike.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/tracing_cost.py \\
        --rounds 9 -- 2000 40000

Prints each mode's median CPU per watch event, and the medians of the per-round ratios
off/missing and on/off. The first mode must not import OpenTelemetry, nor the second: the
script stops if either did.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("controller_path.py")
MODES = ("missing", "off", "on")


def _round(mode: str, sizes: list[str]) -> float:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *sizes, mode], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if mode != "on" and result["opentelemetry_imported"]:
        raise SystemExit(f"tracing {mode}: OpenTelemetry was imported")
    return float(result["cpu_per_event_us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("sizes", nargs=argparse.REMAINDER, help="OBJECTS EVENTS")
    args = parser.parse_args()
    sizes = [s for s in args.sizes if s != "--"]
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            cpu[mode].append(_round(mode, sizes))
    for mode in MODES:
        print(f"{mode}: median {statistics.median(cpu[mode]):.2f} us/event "
              f"(min {min(cpu[mode]):.2f}, max {max(cpu[mode]):.2f})")  # fmt: skip
    for a, b in (("missing", "off"), ("off", "on")):
        ratios = [y / x for x, y in zip(cpu[a], cpu[b], strict=True)]
        print(f"{b}/{a}: median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
