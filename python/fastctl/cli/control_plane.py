"""``fastctl control-plane build|up|down|env|kubeconfig``: the local etcd + kube-apiserver
by hand.

``up`` starts a control plane that outlives the command, for the demo, benchmarks and
poking around with kubectl. It cannot simply leave etcd and kube-apiserver running: nothing
would stop them if something went wrong. Instead it starts a small detached supervisor
(``python -m fastctl.cli._supervisor``) that runs a `fastctl.testing.ControlPlane` exactly as
the tests do (so the servers die with the supervisor, even on SIGKILL) and records its state
under ``~/.cache/fastctl/run/<name>/``; ``down`` signals the supervisor, which stops them,
and then removes that directory (etcd's data, the logs, the certificates: tens of MB per
control plane, which nothing else would ever delete), unless told to ``--keep`` it.

``up --apiserver-arg=--FLAG=VALUE`` (repeatable) passes a flag to kube-apiserver, after
the defaults so that it overrides them (audit logging, a feature gate, an admission plugin),
as ``ControlPlane(apiserver_args=...)`` does in Python.

``up`` and ``env`` print ``export KUBECONFIG=...`` on stdout (everything else goes to
stderr), so ``eval "$(fastctl control-plane up)"`` works; so does ``kubeconfig
--service-account NS/NAME``, whose kubeconfig acts as that ServiceAccount
(`fastctl.cli._service_account`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastctl.cli import CliError, Subcommands

__all__ = ["RunState", "read_state", "register", "run_dir"]

_STATE = "state.json"
_ERROR = "error.txt"
_SUPERVISOR_LOG = "supervisor.log"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_root() -> Path:
    """``$FASTCTL_RUN_DIR``, else ``~/.cache/fastctl/run`` (beside the binary cache)."""
    explicit = os.environ.get("FASTCTL_RUN_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "fastctl" / "run"


def run_dir(name: str) -> Path:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise CliError(f"invalid control plane name {name!r}: use letters, digits, - _ .", 2)
    return run_root() / name


@dataclass(frozen=True)
class RunState:
    """What a running supervisor recorded: its identity and how to reach the API."""

    name: str
    pid: int
    start_ticks: int | None
    server: str
    kubeconfig: Path
    directory: Path

    def alive(self) -> bool:
        from fastctl.testing._process import ProcessRecord

        return ProcessRecord(self.pid, "supervisor", self.start_ticks).alive()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "directory": str(self.directory),
        }


def write_state(state: RunState) -> None:
    path = run_dir(state.name) / _STATE
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    partial.replace(path)  # readers never see half a file


def read_state(name: str) -> RunState | None:
    """The recorded state of a supervisor that is still alive, else None."""
    try:
        raw = json.loads((run_dir(name) / _STATE).read_text())
        state = RunState(
            name=raw["name"],
            pid=int(raw["pid"]),
            start_ticks=raw.get("start_ticks"),
            server=raw["server"],
            kubeconfig=Path(raw["kubeconfig"]),
            directory=Path(raw["directory"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if state.alive() else None


def _export_line(kubeconfig: Path) -> str:
    import shlex

    return f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"


def _one_line(exc: BaseException) -> str:
    """The first line of an error: our messages put the log path there, details after."""
    return str(exc).strip().splitlines()[0].rstrip(":") if str(exc).strip() else repr(exc)


# -- handlers ------------------------------------------------------------------------------


def _build(args: argparse.Namespace) -> int:
    from fastctl.testing.binaries import ControlPlaneError, build_binaries, find_binaries

    assets = os.environ.get("KUBEBUILDER_ASSETS")
    try:
        if assets and not args.force:
            binaries = find_binaries()
            _say(f"fastctl: using KUBEBUILDER_ASSETS={assets}")
        else:
            binaries = build_binaries(force=args.force)
    except ControlPlaneError as exc:
        raise CliError(_one_line(exc)) from None
    print(binaries.directory)
    return 0


def _up(args: argparse.Namespace) -> int:
    from fastctl.testing.binaries import ControlPlaneError, ensure_binaries

    directory = run_dir(args.name)
    running = read_state(args.name)
    for flag in args.apiserver_arg:
        if not flag.startswith("--") or flag == "--":
            raise CliError(
                f"--apiserver-arg {flag!r}: a kube-apiserver flag, written "
                "--apiserver-arg=--name=value"
            )
    if running is not None:
        _say(f"fastctl: control plane {args.name!r} is already up: {running.server}")
        if args.apiserver_arg:
            _say("fastctl: its kube-apiserver flags are kept: `down` it first to change them")
        print(_export_line(running.kubeconfig))
        return 0
    try:  # in the foreground, so a build shows its progress and fails here, not in a log
        binaries = ensure_binaries(build=not args.no_build, progress=_say)
    except ControlPlaneError as exc:
        raise CliError(_one_line(exc)) from None

    directory.mkdir(parents=True, exist_ok=True)
    for stale in (_STATE, _ERROR):
        (directory / stale).unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "fastctl.cli._supervisor",
        f"--name={args.name}",
        f"--binaries={binaries.directory}",
        f"--timeout={args.timeout}",
    ]
    if args.port:
        argv.append(f"--port={args.port}")
    argv += [f"--apiserver-arg={flag}" for flag in args.apiserver_arg]
    with (directory / _SUPERVISOR_LOG).open("ab") as log:
        supervisor = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # detached: no terminal signals, outlives this command
        )
    _say(f"fastctl: starting control plane {args.name!r} (logs in {directory})")
    try:
        state = _wait_for_supervisor(args.name, supervisor, args.timeout + 30)
    except BaseException:
        supervisor.terminate()
        raise
    _say(f"fastctl: control plane {args.name!r} is up: {state.server}")
    print(_export_line(state.kubeconfig))
    return 0


def _wait_for_supervisor(
    name: str, supervisor: subprocess.Popen[bytes], timeout: float
) -> RunState:
    directory = run_dir(name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(name)
        if state is not None and state.pid == supervisor.pid:
            return state
        code = supervisor.poll()
        if code is not None:
            error = directory / _ERROR
            reason = error.read_text().strip() if error.exists() else f"exit code {code}"
            raise CliError(f"control plane {name!r} did not start: {reason} (see {directory})")
        time.sleep(0.1)
    supervisor.terminate()
    raise CliError(f"control plane {name!r} did not start within {timeout:.0f} s (see {directory})")


def _down(args: argparse.Namespace) -> int:
    from fastctl.testing._process import ProcessRecord

    state = read_state(args.name)
    if state is None:
        (run_dir(args.name) / _STATE).unlink(missing_ok=True)
        _say(f"fastctl: control plane {args.name!r} is not running")
        _remove(args)
        return 0
    record = ProcessRecord(state.pid, "supervisor", state.start_ticks)
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while record.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if record.alive():
        # The kernel kills the servers with their supervisor (PR_SET_PDEATHSIG).
        os.kill(state.pid, signal.SIGKILL)
        _say(f"fastctl: control plane {args.name!r} did not stop in time: killed")
    (run_dir(args.name) / _STATE).unlink(missing_ok=True)
    _say(f"fastctl: control plane {args.name!r} stopped")
    _remove(args)
    return 0


def _remove(args: argparse.Namespace) -> None:
    """Delete what `up` made for this control plane (etcd data, logs, certificates,
    kubeconfigs), once nothing runs from it; ``--keep`` leaves it to be read."""
    import shutil

    directory = run_dir(args.name)
    if not directory.exists():
        return
    if args.keep:
        _say(f"fastctl: kept its files in {directory}")
        return
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    shutil.rmtree(directory, ignore_errors=True)
    if directory.exists():  # a file still written by a server that is being killed
        time.sleep(0.5)
        shutil.rmtree(directory, ignore_errors=True)
    if directory.exists():
        _say(f"fastctl: could not remove all of {directory}")
    else:
        _say(f"fastctl: removed {directory} ({size / 1e6:.1f} MB)")


def _env(args: argparse.Namespace) -> int:
    state = read_state(args.name)
    if state is None:
        raise CliError(
            f"control plane {args.name!r} is not running; start it with `fastctl control-plane up`"
        )
    print(_export_line(state.kubeconfig))
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    from fastctl.cli._service_account import (
        parse_service_account,
        write_service_account_kubeconfig,
    )

    namespace, name = parse_service_account(args.service_account)
    if args.expiration < 600:
        raise CliError(
            f"--expiration is at least 600 s (the API server's minimum), got {args.expiration}", 2
        )
    admin: Path | None = args.kubeconfig
    if admin is None:
        state = read_state(args.name)
        if state is None:
            raise CliError(
                f"control plane {args.name!r} is not running; start it with "
                "`fastctl control-plane up`, or give --kubeconfig"
            )
        admin = state.kubeconfig
    out = args.out or run_dir(args.name) / f"sa-{namespace}-{name}.kubeconfig"
    write_service_account_kubeconfig(admin, args.service_account, out, args.expiration)
    print(_export_line(out))
    return 0


# -- parser ------------------------------------------------------------------------------


def register(subcommands: Subcommands) -> None:
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "control-plane",
        help="build, start and stop a local etcd + kube-apiserver",
        description="A real local Kubernetes control plane (etcd + kube-apiserver) for "
        "tests, benchmarks and the demo. See docs/control-plane.md.",
    )
    parser.set_defaults(handler=lambda _args: _print_help(parser))
    actions = parser.add_subparsers(title="actions", metavar="ACTION")

    build = actions.add_parser(
        "build",
        help="build etcd, kube-apiserver and kubectl from the Go module proxy (cached)",
        description="Build the binaries into ~/.cache/fastctl/control-plane/<version>/ "
        "(nothing to do when cached). Prints their directory.",
    )
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    build.set_defaults(handler=_build)

    def named(action: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(action, help=help_text)
        sub.add_argument(
            "--name", default="default", help="which control plane (default: %(default)s)"
        )
        return sub

    up = named("up", "start a control plane in the background; prints `export KUBECONFIG=...`")
    up.add_argument("--port", type=int, help="preferred kube-apiserver port (else any free one)")
    up.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for start-up (default 120)"
    )
    up.add_argument(
        "--no-build", action="store_true", help="fail instead of building missing binaries"
    )
    up.add_argument(
        "--apiserver-arg",
        action="append",
        default=[],
        metavar="--FLAG=VALUE",
        help="a kube-apiserver flag, after the defaults (repeatable; write it "
        "--apiserver-arg=--audit-log-path=/tmp/audit.log)",
    )
    up.set_defaults(handler=_up)

    down = named("down", "stop a control plane started with `up`")
    down.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait before killing it"
    )
    down.add_argument(
        "--keep",
        action="store_true",
        help="keep its files (etcd data, logs, certificates) instead of removing them",
    )
    down.set_defaults(handler=_down)

    env = named("env", "print `export KUBECONFIG=...` for a running control plane")
    env.set_defaults(handler=_env)

    kubeconfig = named(
        "kubeconfig", "write a kubeconfig that acts as a ServiceAccount; prints `export ...`"
    )
    kubeconfig.add_argument(
        "--service-account",
        required=True,
        metavar="NAMESPACE/NAME",
        help="the ServiceAccount (from `fastctl manifests`, applied) whose token is minted",
    )
    kubeconfig.add_argument(
        "--out",
        type=Path,
        help="where to write it (default: sa-NAMESPACE-NAME.kubeconfig in the run directory)",
    )
    kubeconfig.add_argument(
        "--expiration",
        type=int,
        default=3600,
        help="seconds the token is valid (default %(default)s, at least 600)",
    )
    kubeconfig.add_argument(
        "--kubeconfig",
        type=Path,
        help="mint the token with this kubeconfig's credentials instead of the control "
        "plane's (any cluster)",
    )
    kubeconfig.set_defaults(handler=_kubeconfig)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
