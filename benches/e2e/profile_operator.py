"""Where a Python Widget operator's CPU goes, per phase: py-spy on the operator scenario.

One command::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/profile_operator.py \\
        --modes fastctl raw-asyncio --count 5000

runs `scenario_operators.run_operator` for each mode (a fresh control plane each) with
``py-spy record --pid`` attached to the operator for the initial phase and for the update
burst (``--nonblocking``, so the operator is never paused; ``--rate`` samples a second),
and writes, into ``--out``:

- ``MODE-COUNT-PHASE.txt``: py-spy's collapsed stacks (``flamegraph.pl`` or speedscope read
  them), one line per distinct stack with its sample count;
- ``summary.json`` and ``summary.md``: the samples of each phase by **path** (`PATHS`:
  request, watch, reconcile and queue, start-up, the event loop), by **owner** (the innermost
  frame of fastctl's or the bench's own code on the stack, so aiohttp's time under
  ``kube/_http.py`` counts as the request path) and by **leaf** (what ran: aiohttp, ssl,
  asyncio, ...; a fastctl module by name, so its rows add up to fastctl's own code), in
  percent of the phase's samples;
- with ``--plot PNG``, the CPU per Widget of each phase by path, one bar each.

``--summarise FILE...`` (with ``--rate``, ``--count`` and ``--plot``) renders collapsed
stacks recorded before, without running anything.

py-spy samples Python frames only (C code counts for the Python frame that called it), and
an idle thread (waiting in ``epoll`` or on a lock) is not sampled, so the percentages are of
the time the process was on a CPU. The run's timing figures are not reported: the sampling
itself costs the operator some CPU (see `run_peers.py` for the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from common import log
from scenario_operators import run_operator

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
OWN_CODE = re.compile(r"(?:fastctl/(?P<mod>[\w/]+)\.py|(?:^|/)(?P<bench>bench_\w+)\.py)$")
SITE = re.compile(r"(?:site-packages|dist-packages|/lib/python3\.\d+)/(?P<pkg>\w)")


_ENTRY_POINTS = frozenset({"<module>", "main", "main_async"})


def owner(frames: list[str]) -> str:
    """The innermost frame of fastctl's or the bench's own code, as ``kube/_http``,
    ``bench_raw_asyncio``; ``(no own frame)`` when only libraries are on the stack (the
    event loop's own work, a worker thread)."""
    for frame in reversed(frames):
        match = FRAME.match(frame)
        if match and match.group("func") in _ENTRY_POINTS:
            continue  # under every stack of the process: owns nothing
        path = match.group("file") if match else frame
        own = OWN_CODE.search(path)
        if own:
            return own.group("mod") or own.group("bench")
    return "(no own frame)"


def leaf_package(frames: list[str]) -> str:
    """The package of the innermost frame (``aiohttp``, ``asyncio``, ``ssl``; fastctl's module,
    ``fastctl/kube/_wire``):
        py-spy names a file by its path below ``sys.path`` (``aiohttp/client.py``)."""
    if not frames:
        return "?"
    match = FRAME.match(frames[-1])
    path = match.group("file") if match else frames[-1]
    own = OWN_CODE.search(path)
    if own:
        return f"fastctl/{own.group('mod')}" if own.group("mod") else own.group("bench")
    site = SITE.search(path)
    if site:
        path = path[site.start("pkg") :]
    head = path.split("/", 1)[0] if "/" in path else path
    return head.removesuffix(".py") or "?"


PATHS: dict[str, tuple[str, ...]] = {
    "request": ("fastctl/kube/_http.py", "RawOperator.handle"),
    "watch": (
        "fastctl/kube/_watcher.py",
        "fastctl/kube/_store.py",
        "_watch_primary",
        "RawOperator.watch",
        "RawOperator.list",
    ),
    "reconcile and queue": (
        "fastctl/_applier.py",
        "fastctl/runtime/_controller.py",
        "fastctl/_channel.py",
        "RawOperator.worker",
        "RawOperator.run",
    ),
    "start-up": ("importlib", "<module> ("),
}
"""Where a stack belongs, by the first of these names found on it (in this order): the
request path (building the request, aiohttp sending it and reading the answer), the watch
path (reading, decoding and checking the stream, the store, the triggers), the reconcile
path (the applier, the queue, the reconcile itself), the import; anything else is the
event loop's own work (``select``, callbacks, TLS records of any connection)."""

OTHER = "event loop, TLS, other"


def path_of(stack: str) -> str:
    """The path (`PATHS`) a collapsed stack belongs to."""
    for name, keys in PATHS.items():
        if name == "start-up":
            leaf = stack.rsplit(";", 1)[-1]
            if "importlib" in stack or leaf.startswith("<module> ("):
                return name
        elif any(k in stack for k in keys):
            return name
    return OTHER


def summarise(lines: Iterable[str]) -> dict[str, Any]:
    """Samples by path, by owner and by leaf, in percent, from py-spy's collapsed stacks."""
    owners: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames and frames[0].startswith(("process ", "thread ")):
            frames = frames[1:]
        n = int(count)
        total += n
        owners[owner(frames)] += n
        leaves[leaf_package(frames)] += n
        paths[path_of(stack)] += n

    def pct(counter: Counter[str]) -> dict[str, float]:
        return {k: round(100 * v / total, 1) for k, v in counter.most_common()} if total else {}

    return {
        "samples": total,
        "path_samples": dict(paths.most_common()),
        "by_path": pct(paths),
        "by_owner": pct(owners),
        "by_leaf": pct(leaves),
    }


@asynccontextmanager
async def py_spy(out: Path, rate: int, phase: str, pid: int) -> AsyncIterator[None]:
    """py-spy attached to `pid` while the block runs; its samples in ``out-PHASE.txt``."""
    path = out.with_name(f"{out.name}-{phase}.txt")
    argv = ["py-spy", "record", "--pid", str(pid), "--nonblocking", "--rate", str(rate)]
    argv += ["--format", "raw", "--output", str(path)]
    proc = None
    for _ in range(50):  # the operator's interpreter may not be up yet: try again
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        try:
            await asyncio.wait_for(proc.wait(), 0.3)
        except TimeoutError:
            break  # still running: attached
        await asyncio.sleep(0.05)
    try:
        yield
    finally:
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on ^C
            await asyncio.wait_for(proc.wait(), 60)
        if not path.exists():
            err = b"" if proc is None or proc.stderr is None else await proc.stderr.read()
            log(f"py-spy wrote no {path.name}: {err.decode(errors='replace')[-500:]}")


def render(summary: dict[str, Any], top: int) -> str:
    """The summary as Markdown: one table of owners and one of leaf packages per phase."""
    out = ["# Where the operators' CPU goes (py-spy samples, % of on-CPU samples)", ""]
    for name, phase in summary.items():
        out += [f"## {name} ({phase['samples']} samples)", ""]
        for title, key in (
            ("path", "by_path"),
            ("owner (innermost own frame)", "by_owner"),
            ("leaf", "by_leaf"),
        ):
            out += [f"| {title} | % |", "|---|---:|"]
            out += [f"| {k} | {v} |" for k, v in list(phase[key].items())[:top]]
            out.append("")
    return "\n".join(out)


def plot(summary: dict[str, Any], rate: int, count: int, path: Path) -> None:
    """One bar per profile (mode and phase): its CPU per Widget by path, so two operators'
    bars differ by what one spends and the other does not. The length is the CPU the
    scenario measured (``/proc``) when the summary has it, split in py-spy's proportions;
    else the samples over the rate (py-spy's idle detection is approximate: longer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    order = [*PATHS, OTHER]
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:gray", "tab:olive")
    colors = dict(zip(order, palette, strict=True))
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.6))
    measured = all(summary[n].get("cpu_seconds") for n in names)
    for i, name in enumerate(names):
        row, left = summary[name], 0.0
        seconds = row["cpu_seconds"] if measured else row["samples"] / rate
        for part in order:
            ms = seconds * row["path_samples"].get(part, 0) / row["samples"] / count * 1e3
            ax.barh(i, ms, left=left, color=colors[part], label=part if i == 0 else None)
            left += ms
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    what = "operator CPU (/proc)" if measured else f"py-spy samples ({rate}/s)"
    ax.set_xlabel(f"{what} per Widget, ms, split by path in py-spy's proportions")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out_dir = Path(args.out)
    summary: dict[str, Any] = {}
    for mode in args.modes:
        base = out_dir / f"{mode}-{args.count}"

        def hook(phase: str, pid: int, base: Path = base) -> Any:
            return py_spy(base, args.rate, phase, pid)

        log(f"== profiling {mode} on {args.count} Widgets")
        result = await run_operator(
            mode,
            args.count,
            concurrency=args.concurrency,
            timeout=args.timeout,
            log_dir=out_dir,
            phase_hook=hook,
        )
        for phase in ("initial", "burst"):
            path = base.with_name(f"{base.name}-{phase}.txt")
            if path.exists():
                row = summarise(path.read_text().splitlines())
                row["cpu_seconds"] = (result.get(phase) or {}).get("cpu_seconds")
                summary[f"{mode} x{args.count} {phase}"] = row
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["fastctl", "raw-asyncio"])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase, seconds")
    parser.add_argument("--top", type=int, default=15, help="rows per table in summary.md")
    parser.add_argument("--out", default="/tmp/fastctl-e2e-profile")
    parser.add_argument("--summarise", nargs="*", metavar="FILE", help="only summarise FILEs")
    parser.add_argument("--plot", metavar="PNG", help="also draw CPU per Widget by path")
    args = parser.parse_args()
    if args.summarise:
        files = [Path(f) for f in args.summarise]
        summary = {f.stem: summarise(f.read_text().splitlines()) for f in files}
        print(render(summary, args.top))
        if args.plot:
            plot(summary, args.rate, args.count, Path(args.plot))
        return 0
    if shutil.which("py-spy") is None:
        parser.error("needs py-spy on PATH (pip install py-spy)")
    if args.count < 1 or args.rate < 1:
        parser.error("--count and --rate must be at least 1")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = asyncio.run(main_async(args))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    (out_dir / "summary.md").write_text(render(summary, args.top))
    if args.plot:
        plot(summary, args.rate, args.count, Path(args.plot))
    print(render(summary, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
