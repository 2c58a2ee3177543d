"""What importing fastctl costs a fresh interpreter, for source trees side by side::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/startup/import_cost.py \\
        OLD_TREE NEW_TREE --runs 15

For each tree (its package first on the path), and for aiohttp and orjson alone and the bare
interpreter as floors, runs ``python -c "import ..."`` `--runs` times, alternating, and
prints the medians of the process's CPU seconds (interpreter start included) and peak RSS.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CODE = (
    "import resource; import {modules}; "
    "r = resource.getrusage(resource.RUSAGE_SELF); "
    "print(r.ru_utime + r.ru_stime, r.ru_maxrss)"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cases = {str(tree): (tree.resolve() / "python", "fastctl") for tree in args.trees}
    for path, _ in cases.values():
        # The bytecode an installed wheel has (this machine sets PYTHONDONTWRITEBYTECODE).
        compileall.compile_dir(path / "fastctl", quiet=1)
    floor = args.trees[-1].resolve() / "python"
    cases["aiohttp+orjson"] = (floor, "aiohttp, orjson")
    cases["python"] = (floor, "sys")
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    rss: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (path, modules) in cases.items():
            out = subprocess.run(
                [sys.executable, "-c", CODE.format(modules=modules)],
                env={**os.environ, "PYTHONPATH": str(path)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            cpu[name].append(float(out[0]))
            rss[name].append(int(out[1]) / 1024)
    for name in cases:
        print(
            json.dumps(
                {
                    "case": name,
                    "cpu_s": round(statistics.median(cpu[name]), 3),
                    "rss_mb": round(statistics.median(rss[name]), 1),
                    "runs": args.runs,
                }
            )
        )


if __name__ == "__main__":
    main()
