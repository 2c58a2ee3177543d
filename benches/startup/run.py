"""``fastctl run`` from process start to its first reconcile, for source trees and loops
side by side::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/startup/run.py \\
        --variant old=/work/before --variant new=. --variant new-asyncio=.:asyncio --rounds 7

Starts one local control plane with one ConfigMap in a namespace, then, in rounds that
alternate the variants, runs ``python -m fastctl.cli run`` on
``benches/startup/widget_free_operator.py:make``
(``NAME=TREE[:LOOP]``: that tree's package first on the path, ``--loop LOOP`` when given,
else the tree's default) with its metrics (HTTPS, a certificate made at start) and probe
servers on, as an operator runs, and measures until the reconcile's first line: the
seconds since the process was spawned, its CPU seconds and its peak RSS at that moment.
Each tree's package is compiled to bytecode first, as an installed wheel is.
Prints one JSON line per variant (medians) and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAMESPACE = "startup"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_and_rss(pid: int) -> tuple[float, float]:
    """The process's CPU seconds (user + system) and peak RSS (MiB), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    hwm = next(
        line
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    return cpu, int(hwm.split()[1]) / 1024


def one(tree: Path, loop: str | None, kubeconfig: Path, port: int) -> dict[str, float]:
    argv = [
        sys.executable,
        "-m",
        "fastctl.cli",
        "run",
        f"{HERE / 'widget_free_operator.py'}:make",
        f"--kubeconfig={kubeconfig}",
        f"--namespace={NAMESPACE}",
        "--no-webhooks",
        f"--metrics-port={port}",
        f"--probe-port={port + 1}",
        "--log-level=WARNING",
    ]
    if loop is not None:
        argv.append(f"--loop={loop}")
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    env.pop("FASTCTL_LOOP", None)
    started = time.monotonic()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("first-reconcile"):
                seconds = time.monotonic() - started
                cpu, rss = _cpu_and_rss(child.pid)
                return {"seconds": seconds, "cpu_seconds": cpu, "rss_mib": rss}
        raise SystemExit(f"{argv}: ended without reconciling (exit {child.wait()})")
    finally:
        child.terminate()
        child.wait(30)


async def _prepare(kubeconfig: Path) -> None:
    from fastctl.kube import apply, load_client
    from fastctl.kube._resource import Resource

    client = await load_client(kubeconfig)
    try:
        for resource, obj in (
            (Resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}}),
            (
                Resource("v1", "ConfigMap"),
                {"metadata": {"name": "one", "namespace": NAMESPACE}, "data": {"a": "b"}},
            ),
        ):
            body: dict[str, Any] = {"apiVersion": "v1", "kind": resource.kind, **obj}
            await apply(client, resource, body, field_manager="startup-bench")
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=TREE[:LOOP]")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--port", type=int, default=28443, help="metrics; probes on port + 1")
    args = parser.parse_args()
    variants: dict[str, tuple[Path, str | None]] = {}
    for text in args.variant:
        name, _, rest = text.partition("=")
        tree, _, loop = rest.partition(":")
        variants[name] = (Path(tree).resolve(), loop or None)
    for tree, _ in variants.values():
        # The bytecode an installed wheel has: this machine sets PYTHONDONTWRITEBYTECODE,
        # so a source tree would otherwise compile every module at every start.
        compileall.compile_dir(tree / "python" / "fastctl", quiet=1)

    from fastctl.testing import ControlPlane

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with ControlPlane() as cp:
        asyncio.run(_prepare(cp.kubeconfig))
        for _ in range(args.rounds):
            for name, (tree, loop) in variants.items():
                runs[name].append(one(tree, loop, cp.kubeconfig, args.port))
    print("| variant | to first reconcile | CPU | peak RSS |\n|---|---:|---:|---:|")
    for name, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"| {name} | {med['seconds']:.2f} s | {med['cpu_seconds']:.2f} s "
            f"| {med['rss_mib']:.1f} MiB |"
        )
        print(json.dumps({"variant": name, "rounds": len(rows), **med}), file=sys.stderr)


if __name__ == "__main__":
    main()
