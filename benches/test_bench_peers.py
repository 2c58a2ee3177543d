"""Smoke test of the scheduler peer comparison (benches/peers/run_scheduler_peers.py): a
`--quick` run builds the Go program, runs every workload on every queue at small sizes,
and writes the results, the table and the plots. The real run is the script itself; its
numbers are in docs/benchmarks.md.

    .venv/bin/python -m pytest benches/test_bench_peers.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "peers" / "run_scheduler_peers.py"


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")
def test_quick_run_covers_every_queue_and_workload(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--out",
            str(tmp_path),
            "--img-dir",
            str(tmp_path),
        ],
        check=True,
        timeout=900,
    )
    results = json.loads((tmp_path / "scheduler-peers.json").read_text())["results"]
    seen = {(r["impl"], r["workload"]) for r in results}
    impls = ["client-go", "controller-runtime", "fastctl", "fastctl-model"]
    for workload in ["cycle", "merge-sequential", "merge-random", "delayed", "contended"]:
        for impl in impls:
            assert (impl, workload) in seen
    assert all(r["ns_per_item"] > 0 and r["reps"] == len(r["samples"]) for r in results)
    assert "Rust / c-r" in (tmp_path / "scheduler-peers.md").read_text()
    for name in ["peers-cycle.png", "peers-merge-delayed.png", "peers-contended.png"]:
        assert (tmp_path / name).stat().st_size > 10_000
