"""Find, or build from the Go module proxy, the etcd / kube-apiserver / kubectl binaries.

Lookup order (`find_binaries`): an explicit directory, then ``KUBEBUILDER_ASSETS`` (the envtest
convention, so users of setup-envtest need no Go), then the version-keyed cache
``~/.cache/fastctl/control-plane/k8s-<v>-etcd-<v>/``.

Building (`build_binaries`): this machine class has no Docker and no release downloads but
reaches the Go module proxy. ``go install k8s.io/kubernetes/cmd/kube-apiserver@v1.X.Y`` fails
because k8s.io/kubernetes requires its staging modules (k8s.io/api, ...) at v0.0.0 with
``replace => ./staging/...``; the maintainers' workaround (kubernetes #79384) is a wrapper
module of our own that requires k8s.io/kubernetes and replaces every staging module with its
published v0.X.Y. etcd's server module has local replaces too, so it gets a tiny wrapper as
well. Everything is built with ``CGO_ENABLED=0`` (static, no C toolchain needed).

This module uses the standard library only and runs as a script
(``python3 python/fastctl/testing/binaries.py``; that is what ``scripts/control-plane-build``
does), so the build works before the Rust extension of fastctl exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "Binaries",
    "BinariesNotFoundError",
    "BuildError",
    "ControlPlaneError",
    "build_binaries",
    "ensure_binaries",
    "find_binaries",
]

K8S_VERSION = "v1.36.3"
"""The Kubernetes release fastctl tests against (kube-apiserver and kubectl)."""
ETCD_VERSION = "v3.6.8"
"""The etcd release envtest pairs with Kubernetes v1.36."""

_RECIPE = 2
"""Bumped whenever the way binaries are built changes, so stale caches are rebuilt
(2: kube-apiserver and kubectl report their real version instead of v0.0.0-master)."""
_STAMP = "fastctl-build.json"

_REQUIRED = ("etcd", "kube-apiserver")
_ALL = (*_REQUIRED, "kubectl")

HOW_TO_GET = (
    "two ways to get them: install Go >= 1.26 and run `fastctl control-plane build` (it builds "
    "them from the Go module proxy into the cache, 4-15 minutes on 2 cores; "
    "scripts/control-plane-build in a checkout), or set KUBEBUILDER_ASSETS to a directory "
    "with etcd and kube-apiserver (e.g. envtest's, from `setup-envtest use -p path`)"
)
"""What every "binaries not found" message ends with: the two ways to get them. A user who
installed the wheel has no checkout and maybe no Go, so both are named, Go's first."""


class ControlPlaneError(RuntimeError):
    """Base class of every error of the local control plane (binaries, build, start-up)."""


class BinariesNotFoundError(ControlPlaneError):
    """No etcd/kube-apiserver binaries were found, and none could be built."""


class BuildError(ControlPlaneError):
    """Building the binaries failed; `log` is the build log to read."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Binaries:
    """Where the control plane binaries are, and how they were found."""

    directory: Path
    source: str
    """``"explicit"``, ``"KUBEBUILDER_ASSETS"``, ``"cache"`` or ``"built"``."""

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def kubectl(self) -> Path | None:
        """kubectl is optional: nothing in `ControlPlane` needs it, people do."""
        path = self.directory / "kubectl"
        return path if _is_executable(path) else None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _missing(directory: Path, names: Sequence[str] = _REQUIRED) -> list[str]:
    return [name for name in names if not _is_executable(directory / name)]


def _cache_current(directory: Path) -> bool:
    """The cache holds all binaries, built by the current recipe."""
    try:
        stamp = json.loads((directory / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == _RECIPE and not _missing(directory, _ALL)


def cache_root() -> Path:
    """``$FASTCTL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fastctl/control-plane``, else
    ``~/.cache/fastctl/control-plane``: outside any repository, shared by all checkouts."""
    explicit = os.environ.get("FASTCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "fastctl" / "control-plane"


def cache_dir(k8s_version: str = K8S_VERSION, etcd_version: str = ETCD_VERSION) -> Path:
    """The cache directory of one version pair (keyed by version, so upgrades never mix)."""
    return cache_root() / f"k8s-{k8s_version}-etcd-{etcd_version}"


def build_log(k8s_version: str = K8S_VERSION, etcd_version: str = ETCD_VERSION) -> Path:
    return cache_root() / f"build-{k8s_version}-{etcd_version}.log"


def find_binaries(directory: str | os.PathLike[str] | None = None) -> Binaries:
    """The binaries to run, or `BinariesNotFoundError` with a message that says how to get
    them. A set but incomplete ``KUBEBUILDER_ASSETS`` is an error, not a silent fallback:
    whoever set it meant those binaries."""
    if directory is not None:
        path = Path(directory)
        missing = _missing(path)
        if missing:
            raise BinariesNotFoundError(f"{', '.join(missing)} not found in {path}; {HOW_TO_GET}")
        return Binaries(path, "explicit")
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        path = Path(assets)
        missing = _missing(path)
        if missing:
            raise BinariesNotFoundError(
                f"KUBEBUILDER_ASSETS={assets} has no {', '.join(missing)}; point it at a "
                f"directory with etcd and kube-apiserver, or unset it to use the fastctl "
                f"cache ({cache_dir()})"
            )
        return Binaries(path, "KUBEBUILDER_ASSETS")
    path = cache_dir()
    if _cache_current(path):
        return Binaries(path, "cache")
    state = "was built by an older fastctl" if not _missing(path) else "is empty"
    raise BinariesNotFoundError(
        f"no etcd/kube-apiserver binaries: KUBEBUILDER_ASSETS is not set and {path} {state}; "
        f"{HOW_TO_GET}"
    )


def go_available() -> bool:
    return shutil.which("go") is not None


def ensure_binaries(
    *, build: bool = True, progress: Callable[[str], None] | None = None
) -> Binaries:
    """`find_binaries`, else (when `build` and Go is on PATH) `build_binaries`, reporting
    progress to `progress` (default: stderr; a silent multi-minute build looks like a hang)."""
    try:
        return find_binaries()
    except BinariesNotFoundError as exc:
        if os.environ.get("KUBEBUILDER_ASSETS") or not build:
            raise  # whoever set KUBEBUILDER_ASSETS meant those binaries: do not build others
        if not go_available():
            raise BinariesNotFoundError(
                f"{exc} (Go is not on PATH, so none can be built)"
            ) from None
    return build_binaries(progress=progress or _stderr)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _MemorySampler(threading.Thread):
    """Samples the resident memory of a process tree, because the number that decides
    whether a build fits a CI runner is the peak of the whole tree (``go build`` runs
    compilers and the linker in parallel), not the largest single process."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.peak_tree_kib = 0
        self.peak_process_kib = 0
        self._stop_event = threading.Event()
        self._page_kib = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        rss: dict[int, int] = {}
        try:
            entries = os.listdir("/proc")
        except OSError:
            return
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                statm = Path(f"/proc/{entry}/statm").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            pid = int(entry)
            parents[pid] = int(fields[1])
            rss[pid] = int(statm.split()[1]) * self._page_kib
        tree = {self.root}
        changed = True
        while changed:
            changed = False
            for pid, ppid in parents.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    changed = True
        total = sum(rss.get(pid, 0) for pid in tree)
        self.peak_tree_kib = max(self.peak_tree_kib, total)
        self.peak_process_kib = max([self.peak_process_kib, *(rss.get(pid, 0) for pid in tree)])


@dataclass(frozen=True)
class _StepTime:
    name: str
    seconds: float
    peak_tree_kib: int
    peak_process_kib: int

    def line(self) -> str:
        return (
            f"{self.name}: {self.seconds:.1f} s wall, peak RSS {self.peak_tree_kib // 1024} MiB "
            f"(whole build tree), {self.peak_process_kib // 1024} MiB (largest process)"
        )


def _run_logged(
    name: str, argv: Sequence[str], cwd: Path, env: dict[str, str], log: Path
) -> _StepTime:
    with log.open("ab") as out:
        out.write(f"\n$ (cd {cwd} && {' '.join(argv)})\n".encode())
        out.flush()
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise BuildError(f"{name}: cannot run {argv[0]}: {exc}; log: {log}", log) from exc
        sampler = _MemorySampler(proc.pid)
        sampler.start()
        try:
            code = proc.wait()
        finally:
            sampler.stop()
        seconds = time.monotonic() - started
    if code != 0:
        raise BuildError(
            f"{name} failed (exit code {code}); see the build log {log}:\n{_tail(log, 25)}", log
        )
    return _StepTime(name, seconds, sampler.peak_tree_kib, sampler.peak_process_kib)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line[:400] for line in text.splitlines()[-lines:])


def _go_output(argv: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> str:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    with log.open("a") as out:
        out.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise BuildError(
            f"`{' '.join(argv)}` failed (exit code {proc.returncode}); see the build log "
            f"{log}:\n{_tail(log, 25)}",
            log,
        )
    return proc.stdout


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The modules k8s.io/kubernetes requires at v0.0.0 and replaces with ./staging/...:
    exactly those the wrapper module must redirect to their published versions."""
    at_zero = set(
        re.findall(r"^\s*(?:require\s+)?(k8s\.io/\S+)\s+v0\.0\.0\b", kubernetes_go_mod, re.M)
    )
    replaced = set(
        re.findall(r"^\s*(?:replace\s+)?(k8s\.io/\S+)\s*=>\s*\./staging/", kubernetes_go_mod, re.M)
    )
    return sorted(at_zero & replaced)


def _go_directive(go_mod: str) -> str:
    match = re.search(r"^go\s+(\S+)", go_mod, re.M)
    return match.group(1) if match else "1.26"


def build_binaries(
    *,
    force: bool = False,
    k8s_version: str = K8S_VERSION,
    etcd_version: str = ETCD_VERSION,
    progress: Callable[[str], None] | None = _stderr,
) -> Binaries:
    """Build etcd, kube-apiserver and kubectl into `cache_dir` (nothing to do when they are
    there, unless `force`). Progress lines go to `progress`; the full output goes to the build
    log; the times and peak memory go to ``build-times.txt`` beside the binaries."""
    say = progress or (lambda _message: None)
    dest = cache_dir(k8s_version, etcd_version)
    if not force and _cache_current(dest):
        say(f"control-plane-build: cached in {dest}")
        return Binaries(dest, "cache")
    with _build_lock(say):
        # Another process may have finished the same build while we waited for the lock.
        if not force and _cache_current(dest):
            say(f"control-plane-build: cached in {dest}")
            return Binaries(dest, "cache")
        return _build_locked(dest, k8s_version, etcd_version, say)


@contextlib.contextmanager
def _build_lock(say: Callable[[str], None]) -> Iterator[None]:
    """One build at a time per cache: two test sessions starting at once must not write the
    same wrapper modules and binaries concurrently (and 2 cores cannot afford two builds)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / "build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("control-plane-build: another build is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_locked(
    dest: Path, k8s_version: str, etcd_version: str, say: Callable[[str], None]
) -> Binaries:
    go = shutil.which("go")
    if go is None:
        raise BinariesNotFoundError(
            "Go is not installed (no `go` on PATH) and no binaries were found. Install Go "
            ">= 1.26 (the build uses the Go module proxy), or set KUBEBUILDER_ASSETS to a "
            "directory with etcd, kube-apiserver and kubectl (e.g. from setup-envtest)"
        )
    root = cache_root()
    work = root / f"build-{k8s_version}-{etcd_version}"
    log = build_log(k8s_version, etcd_version)
    (work / "k8s").mkdir(parents=True, exist_ok=True)
    (work / "etcd").mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    say(f"control-plane-build: building kubernetes {k8s_version} and etcd {etcd_version}")
    say(f"control-plane-build: into {dest}")
    say(f"control-plane-build: log in {log} (a cold build takes 4-15 minutes on 2 cores)")

    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local")
    env["GOFLAGS"] = " ".join(
        flag for flag in (env.get("GOFLAGS", ""), "-mod=mod", "-buildvcs=false") if flag
    )
    gocache = _go_output([go, "env", "GOCACHE"], env, work, log).strip()
    cache_before = _du_mib(Path(gocache)) if gocache else 0

    # `go mod download -json` honours the user's GOPROXY/GONOSUMDB/auth, unlike a bare fetch.
    info = json.loads(
        _go_output(
            [go, "mod", "download", "-json", f"k8s.io/kubernetes@{k8s_version}"], env, work, log
        )
    )
    kubernetes_mod = Path(info["GoMod"]).read_text()
    minor = "v0." + k8s_version.removeprefix("v1.")
    lines = [
        "module fastctl.local/control-plane-k8s",
        "",
        f"go {_go_directive(kubernetes_mod)}",
        "",
        f"require k8s.io/kubernetes {k8s_version}",
        "",
        *(f"replace {module} => {module} {minor}" for module in staging_modules(kubernetes_mod)),
    ]
    # Never `go mod tidy` here: it would try to resolve the whole of kubernetes' test graph.
    (work / "k8s" / "go.mod").write_text("\n".join(lines) + "\n")
    (work / "k8s" / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        '\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n'
    )
    (work / "etcd" / "go.mod").write_text(
        "module fastctl.local/control-plane-etcd\n\ngo 1.24\n\n"
        f"require go.etcd.io/etcd/server/v3 {etcd_version}\n"
    )

    build = [go, "build", "-trimpath", _ldflags(k8s_version, info.get("Info")), "-o"]
    steps = [
        (f"etcd {etcd_version}", work / "etcd", "etcd", "go.etcd.io/etcd/server/v3"),
        (
            f"kube-apiserver {k8s_version}",
            work / "k8s",
            "kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-apiserver",
        ),
        (f"kubectl {k8s_version}", work / "k8s", "kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ]
    started = time.monotonic()
    times: list[_StepTime] = []
    for name, cwd, binary, package in steps:
        say(f"control-plane-build: {name} ...")
        # Build to a temporary name: an interrupted build never leaves a half-written binary
        # that a later lookup would take for a good one.
        partial = dest / f".{binary}.partial"
        times.append(_run_logged(name, [*build, str(partial), package], cwd, env, log))
        partial.replace(dest / binary)
    total = time.monotonic() - started
    report = [
        *(step.line() for step in times),
        f"total: {total:.0f} s wall, peak RSS {max(s.peak_tree_kib for s in times) // 1024} MiB",
        f"machine: {os.cpu_count()} CPUs, {_mem_total_mib()} MiB RAM, {_go_version(go)}",
        f"Go build cache before the build: {cache_before} MiB "
        f"({'cold' if cache_before < 200 else 'warm'} build)",
        f"built: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
    ]
    (dest / "build-times.txt").write_text("\n".join(report) + "\n")
    for line in report:
        say(line)
    (dest / _STAMP).write_text(
        json.dumps({"recipe": _RECIPE, "kubernetes": k8s_version, "etcd": etcd_version}) + "\n"
    )
    missing = _missing(dest, _ALL)
    if missing:
        raise BuildError(f"the build left no {', '.join(missing)} in {dest}; log: {log}", log)
    say(f"control-plane-build: done in {total:.0f} s: {dest}")
    return Binaries(dest, "built")


def _ldflags(k8s_version: str, info_file: str | None) -> str:
    """Strip symbols, and stamp the version the release build scripts would (hack/lib/
    version.sh): without it the server reports ``v0.0.0-master+$Format:%H$`` and clients that
    check the server version (kubectl's skew warning, feature detection) are misled."""
    release_time = "1970-01-01T00:00:00Z"
    with contextlib.suppress(OSError, ValueError, TypeError):
        release_time = json.loads(Path(info_file or "").read_text())["Time"]
    major, minor = k8s_version.removeprefix("v").split(".")[:2]
    values = {
        "gitVersion": k8s_version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": release_time,
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in values.items()]
    return "-ldflags=" + " ".join(flags)


def _du_mib(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total // (1024 * 1024)


def _mem_total_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _go_version(go: str) -> str:
    proc = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/control-plane-build`` and ``fastctl control-plane build``."""
    parser = argparse.ArgumentParser(
        prog="control-plane-build",
        description="Build etcd, kube-apiserver and kubectl from the Go module proxy into "
        f"{cache_root()}/<version>/ (nothing to do when they are cached).",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and not args.force and not _missing(Path(assets)):
        _stderr(f"control-plane-build: using KUBEBUILDER_ASSETS={assets}")
        return 0
    if assets:
        _stderr(
            f"control-plane-build: warning: KUBEBUILDER_ASSETS={assets} lacks "
            f"{', '.join(_missing(Path(assets)))}; the cache is used only when it is unset"
        )
    try:
        build_binaries(force=args.force)
    except ControlPlaneError as exc:
        _stderr(f"control-plane-build: error: {exc}")
        return 3 if isinstance(exc, BinariesNotFoundError) else 4
    except KeyboardInterrupt:
        _stderr("control-plane-build: interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
