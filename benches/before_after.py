"""Two source trees of fastctl on the scheduler, applier, controller-path and end-to-end
benchmarks, in one run: what a change did, everywhere it could show.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/before_after.py OLD_TREE NEW_TREE

Each tree is used with its own package and extension (``PYTHONPATH=<tree>/python``), and
every step alternates the trees (A B A B), so the machine's load hits both alike:

1. the scheduler core: `compare_builds.py` on the two extensions;
2. the applier: `test_bench_applier.py` (no-op throughput at concurrency 1, 64 and 1,024;
   the latency of live triggers behind a backlog and beside a blocked key) under
   pytest-benchmark, `--applier-rounds` alternating runs per tree, medians of medians;
3. the whole Controller on a fake watcher: `compare_trees.py` on `controller_path.py`;
4. end to end: `e2e/run_peers.py` with the modes ``fastctl`` (NEW) and ``fastctl@OLD`` on
   a fresh local control plane per scenario.

Writes the report (Markdown) to ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
APPLIER_TESTS = "throughput_applier or latency_behind or latency_beside"


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "python")}


def _check_import(tree: Path) -> None:
    """Refuse to measure a tree whose package is not the one imported."""
    where = subprocess.run(
        [sys.executable, "-c", "import fastctl; print(fastctl.__file__)"],
        env=_env(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"{tree}: fastctl was imported from {where}")


def _run(command: list[str], env: dict[str, str] | None = None) -> str:
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, env=env, cwd=HERE, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{command[1]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def _applier_medians(tree: Path) -> dict[str, float]:
    """One pytest-benchmark run of the applier benchmarks: test name -> median seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        _run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "test_bench_applier.py",
                "-k",
                APPLIER_TESTS,
                f"--benchmark-json={out}",
            ],
            env=_env(tree),
        )
        data = json.loads(out.read_text())
    return {b["name"]: float(b["stats"]["median"]) for b in data["benchmarks"]}


def applier(old: Path, new: Path, rounds: int) -> list[str]:
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(rounds):
        runs["old"].append(_applier_medians(old))
        runs["new"].append(_applier_medians(new))
    lines = [
        "| benchmark | old median | new median | new/old |",
        "|---|---|---|---|",
    ]
    for name in sorted(runs["new"][0]):
        o = statistics.median(r[name] for r in runs["old"])
        n = statistics.median(r[name] for r in runs["new"])
        lines.append(f"| `{name}` | {o * 1e3:.1f} ms | {n * 1e3:.1f} ms | {n / o:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--applier-rounds", type=int, default=3)
    parser.add_argument("--path-rounds", type=int, default=9)
    parser.add_argument("--e2e-counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--e2e-repeat", type=int, default=3)
    parser.add_argument(
        "--no-e2e", action="store_true", help="skip step 4 (run_peers.py measures it apart)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "e2e" / "results" / "before_after.md")
    args = parser.parse_args()
    old, new = args.old.resolve(), args.new.resolve()
    for tree in (old, new):
        _check_import(tree)
    extension = "python/fastctl/_core.abi3.so"
    report = [f"Old tree: `{old}`; new tree: `{new}`.", "", "### The scheduler core", "", "```"]
    report.append(
        _run([sys.executable, "compare_builds.py", str(old / extension), str(new / extension)])
    )
    report += ["```", "", "### The applier", ""]
    report += applier(old, new, args.applier_rounds)
    report += ["", "### A whole Controller on a fake watcher", "", "```"]
    report.append(
        _run(
            [
                sys.executable,
                "compare_trees.py",
                "--metric",
                "cpu_per_event_us",
                "--rounds",
                str(args.path_rounds),
                str(old),
                str(new),
                "--",
                "controller_path.py",
                "2000",
                "40000",
            ]
        )
    )
    report += ["```"]
    if not args.no_e2e:
        report += e2e(old, new, args)
    text = "\n".join(report)
    args.out.write_text(text)
    print(text)


def e2e(old: Path, new: Path, args: argparse.Namespace) -> list[str]:
    """Step 4: `run_peers.py` with the two trees."""
    report = ["", "### End to end (Widget operator)", ""]
    e2e_out = args.out.with_name(args.out.stem + "_e2e.json")
    _run(
        [
            sys.executable,
            "e2e/run_peers.py",
            "--modes",
            "fastctl",
            f"fastctl@{old}",
            "--counts",
            *map(str, args.e2e_counts),
            "--repeat",
            str(args.e2e_repeat),
            "--no-plots",
            "--out",
            str(e2e_out),
        ],
        env=_env(new),
    )
    report.append(e2e_out.with_suffix(".md").read_text())
    return report


if __name__ == "__main__":
    main()
