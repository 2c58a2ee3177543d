"""The detached process behind ``fastctl control-plane up``.

It owns one `ControlPlane` for as long as it lives: the servers are its children, tied to it
by ``PR_SET_PDEATHSIG``, so whatever ends the supervisor (``down``, SIGKILL, a reboot of the
session) ends them too. It stops them on SIGTERM/SIGINT/SIGHUP, and stops everything if one
of them dies on its own (a half-running control plane is worse than none).

Run as ``python -m fastctl.cli._supervisor --name NAME --binaries DIR [--port P]
[--apiserver-arg=--FLAG=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from fastctl.cli.control_plane import RunState, run_dir, write_state


class _Stop(Exception):
    """Raised by the signal handler to unwind into the `finally` that stops the servers."""


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fastctl-control-plane-supervisor")
    parser.add_argument("--name", required=True)
    parser.add_argument("--binaries", required=True)
    parser.add_argument("--port", type=int)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--apiserver-arg", action="append", default=[])
    args = parser.parse_args(argv)

    from fastctl.testing import ControlPlane, ControlPlaneError
    from fastctl.testing._process import this_process

    directory = run_dir(args.name)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    data = directory / "data"
    shutil.rmtree(data, ignore_errors=True)  # a fresh cluster per `up`
    cp = ControlPlane(
        binaries=args.binaries,
        directory=data,
        apiserver_port=args.port,
        start_timeout=args.timeout,
        apiserver_args=args.apiserver_arg,
    )
    try:
        cp.start()
        me = this_process()
        write_state(
            RunState(args.name, me.pid, me.start_ticks, cp.server, cp.kubeconfig, cp.directory)
        )
        print(f"supervisor {me.pid}: control plane up at {cp.server}", flush=True)
        while set(cp.pids) == {"etcd", "kube-apiserver"}:
            time.sleep(1)
        print(f"supervisor: a server exited on its own (running: {cp.pids}); stopping", flush=True)
        return 1
    except ControlPlaneError as exc:
        (directory / "error.txt").write_text(str(exc).splitlines()[0].rstrip(":") + "\n")
        print(f"supervisor: {exc}", file=sys.stderr, flush=True)
        return 1
    except _Stop as stop:
        print(f"supervisor: {stop}: stopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the stop itself finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        cp.stop()
        (directory / "state.json").unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
