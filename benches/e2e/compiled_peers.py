"""The peers of the Widget operator outside Python's frameworks: how to build and run them,
and the check that each one did the same work.

- ``controller-runtime``: Go, ``benches/e2e/peers/go`` (controller-runtime and client-go from
  the Go module proxy, as ``go.mod`` pins them).
- ``kube-rs``: Rust, ``benches/e2e/peers/rust`` (kube-runtime's ``Controller`` from the crate
  registry, as ``Cargo.lock`` pins it).
- ``raw-asyncio``: ``bench_raw_asyncio.py``, a list/watch/queue/patch loop on aiohttp with
  no framework (the floor for a Python process).

The compiled binaries are built on first use into each peer's ``target/`` (gitignored):
``go build`` when a source is newer than the binary, ``cargo build --release`` always (a
no-op when nothing changed), both under ``nice``. The first Rust build takes minutes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from common import HERE, PYTHON, log

PEERS = HERE / "peers"
GO_DIR = PEERS / "go"
RUST_DIR = PEERS / "rust"
GO_BINARY = GO_DIR / "target" / "widget-operator"
RUST_BINARY = RUST_DIR / "target" / "release" / "widget-operator-kube"

COMPILED_MODES = ("controller-runtime", "kube-rs")
PEER_MODES = (*COMPILED_MODES, "raw-asyncio")
LABELS = {
    "controller-runtime": "controller-runtime (Go)",
    "kube-rs": "kube-runtime (Rust)",
    "raw-asyncio": "raw asyncio loop (no framework)",
}

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
STATUS_PATCH = "PATCH widgets/status"
READ_TOLERANCE = 10
"""Read requests (LIST, WATCH, GET) an operator may make in one phase beyond the others:
watches are counted when they end, so a restarted watch, a paginated list, or a discovery
GET at start-up shows here. Writes get no such slack (see `same_work`)."""


def _run(argv: list[str], cwd: Path) -> str:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed in {cwd}:\n{out.stderr[-3000:]}")
    return out.stdout.strip()


def _need(tool: str, what: str) -> None:
    if shutil.which(tool) is None:
        raise RuntimeError(f"the {what} peer needs `{tool}` on PATH")


def build_go() -> Path:
    """The controller-runtime operator, rebuilt when a source is newer than the binary."""
    _need("go", "controller-runtime")
    sources = [p for p in GO_DIR.iterdir() if p.suffix in (".go", ".mod", ".sum")]
    newest = max(p.stat().st_mtime for p in sources)
    if not GO_BINARY.exists() or GO_BINARY.stat().st_mtime < newest:
        log(f"building {GO_BINARY.relative_to(HERE)} (go build) ...")
        _run(["nice", "go", "build", "-trimpath", "-o", str(GO_BINARY), "."], GO_DIR)
    return GO_BINARY


def build_rust() -> Path:
    """The kube-runtime operator (cargo rebuilds only what changed)."""
    _need("cargo", "kube-rs")
    log(f"building {RUST_BINARY.relative_to(HERE)} (cargo build --release) ...")
    _run(["nice", "cargo", "build", "--release", "--locked", "--quiet"], RUST_DIR)
    return RUST_BINARY


def build(modes: list[str]) -> None:
    """Build the compiled peers among `modes` before any scenario starts (so a build's CPU
    is not in anyone's figures)."""
    if "controller-runtime" in modes:
        build_go()
    if "kube-rs" in modes:
        build_rust()


def require_built(modes: list[str]) -> None:
    """Fail unless the compiled peers among `modes` are built (``run_peers.py --no-build``)."""
    for mode, binary in (("controller-runtime", GO_BINARY), ("kube-rs", RUST_BINARY)):
        if mode in modes and not binary.exists():
            raise SystemExit(f"{mode}: {binary} is not built (run without --no-build)")


def argv(
    mode: str, *, kubeconfig: str, namespace: str, concurrency: int, login: list[str]
) -> list[str] | None:
    """The command line of a peer operator, or None for a mode of `bench_operators.py`.
    `login` is the cluster's ``--server/--ca/--cert/--key`` (the raw loop reads no
    kubeconfig)."""
    common = [f"--namespace={namespace}", f"--concurrency={concurrency}"]
    if mode == "controller-runtime":
        binary = GO_BINARY if GO_BINARY.exists() else build_go()  # built by `build` before
        return [str(binary), f"--kubeconfig={kubeconfig}", *common]
    if mode == "kube-rs":
        return [
            str(RUST_BINARY if RUST_BINARY.exists() else build_rust()),
            f"--kubeconfig={kubeconfig}",
            *common,
        ]
    if mode == "raw-asyncio":
        return [PYTHON, str(HERE / "bench_raw_asyncio.py"), *common, *login]
    return None


def versions() -> dict[str, str | None]:
    """The toolchains and the framework versions the peers were built with."""
    out: dict[str, str | None] = {}
    out["go"] = _run(["go", "version"], GO_DIR) if shutil.which("go") else None
    gomod = (GO_DIR / "go.mod").read_text()
    for module, key in (
        ("sigs.k8s.io/controller-runtime", "controller_runtime"),
        ("k8s.io/client-go", "client_go"),
    ):
        match = re.search(rf"^\s*{re.escape(module)} (v\S+)", gomod, re.M)
        out[key] = match.group(1) if match else None
    lock = (RUST_DIR / "Cargo.lock").read_text()
    for crate, key in (
        ("kube", "kube"),
        ("kube-runtime", "kube_runtime"),
        ("k8s-openapi", "k8s_openapi"),
        ("tokio", "tokio"),
    ):
        match = re.search(rf'name = "{re.escape(crate)}"\nversion = "([^"]+)"', lock)
        out[key] = match.group(1) if match else None
    out["rustc"] = _run(["rustc", "--version"], RUST_DIR) if shutil.which("rustc") else None
    from importlib.metadata import version

    out["aiohttp"] = version("aiohttp")
    return out


def same_work(row: dict[str, Any]) -> list[str]:
    """What is wrong with a scenario's row, as sentences (empty: it did the same work).

    Every Widget handled in both phases; per phase, exactly one ``PATCH widgets/status`` per
    Widget (a framework that patched twice, or wrote anything else, did more work) and at
    most `READ_TOLERANCE` read requests (LIST, WATCH, GET: list and watch restarts) beyond
    the watches the API server closed as unresponsive (``terminated_watchers``: the watch
    cache ends a watch whose client, the operator or the driver's observer, falls behind,
    and the resumed watch is one more WATCH)."""
    count, problems = row["count"], []
    for phase in ("initial", "burst"):
        data = row.get(phase)
        if data is None:
            problems.append(f"{phase}: not run")
            continue
        if not data.get("finished"):
            problems.append(f"{phase}: only {data.get('handled')} of {count} Widgets handled")
        requests = {k: n for k, n in data.get("requests", {}).items() if k != "total"}
        patches = requests.pop(STATUS_PATCH, 0)
        if patches != count:
            problems.append(f"{phase}: {patches} status patches for {count} Widgets")
        writes = {k: n for k, n in requests.items() if k.split()[0] in WRITE_VERBS}
        if writes:
            problems.append(f"{phase}: other writes {writes}")
        reads = sum(n for k, n in requests.items() if k not in writes)
        closed = data.get("terminated_watchers", 0)  # the server's choice, not the client's
        if reads - closed > READ_TOLERANCE:
            problems.append(
                f"{phase}: {reads} read requests ({closed} watches closed by the API server; "
                f"> {READ_TOLERANCE} more): {requests}"
            )
    return problems
