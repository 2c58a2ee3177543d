"""``fastctl run module:attr``: run an operator's controllers (like ``kopf run``).

`attr` names one of:

- a callable ``attr(client, **options)`` (sync or async) that returns a `Controller`, an
  iterable of them, or a `Manager`; it receives the `ApiClient` built from ``--kubeconfig``,
  and ``namespace=``/``concurrency=`` when the options are given and its signature takes
  them (``fastctl.demo.widgets:make_controller`` is such a factory);
- a `Controller`, an iterable of Controllers, or a `Manager`, already built.

Controllers are run in a `Manager`, so every operator gets ``/metrics`` (HTTPS on 8443,
only for callers allowed to ``get`` ``/metrics``; ``--metrics-insecure`` for plain HTTP),
``/healthz`` and ``/readyz`` (plain HTTP on 8081), graceful shutdown on SIGTERM/SIGINT
and, with ``--leader-elect``, leader election, or with ``--shard-group``, active-active
sharding: the replicas of the group split the objects, each reconciling its share
(``--shard-key uid`` or ``namespace``; the Lease options apply to the member Leases).
It runs on uvloop when that is installed (``--loop asyncio`` or ``FASTCTL_LOOP=asyncio``
for asyncio's own loop).
With both, ``--unsharded NAME`` (repeatable) names the controllers that are leader-elected
instead of sharded; the others are sharded. A Manager returned by `attr` is run as it is.

Exit status: 0 after a graceful stop, 3 when the leader lease was lost (the process is meant
to be restarted as a follower, as controller-runtime does), 1 for other errors. An API
server that does not answer yet is waited for (discovery and the watches retry, with
backoff; ``/readyz`` says not ready meanwhile); a resource it does not serve, credentials
or RBAC that it refuses for discovery, or a kubeconfig or server URL that cannot be valid
(naming the file and the field), end the run at once with one line saying so. If
plain-function reconciles are still running in threads when the Manager has stopped (a
thread cannot be cancelled), the process exits at once with that status instead of waiting
for them: they may still write, and only ending the process stops them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Coroutine
from typing import Any

from fastctl.cli import CliError, Subcommands
from fastctl.cli._run_options import configure
from fastctl.cli._run_webhooks import serve_webhooks
from fastctl.cli._target import Target, build, load

__all__ = ["add_loop_option", "exit_now_if_threads_run", "register", "run_on_chosen_loop"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "run",
        help="run an operator's controllers (module:attr)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="module:attr", help="what to run (see above)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    parser.add_argument("--namespace", help="watch one namespace (default: all)")
    parser.add_argument("--concurrency", type=int, help="reconciles at once per controller")
    parser.add_argument(
        "--leader-elect",
        nargs="?",
        const="",
        metavar="LEASE",
        help="leader election on a Lease (name default: the module name)",
    )
    parser.add_argument(
        "--shard-group",
        metavar="NAME",
        help="share the objects with the other replicas of this group",
    )
    parser.add_argument(
        "--unsharded",
        action="append",
        default=[],
        metavar="CONTROLLER",
        help="with --shard-group and --leader-elect: this controller (by name) is "
        "leader-elected, not sharded (repeatable)",
    )
    parser.add_argument(
        "--shard-key",
        choices=("uid", "namespace"),
        help="what puts an object in a shard: its uid, or its namespace (default: uid)",
    )
    parser.add_argument("--shard-slots", type=int, help="slots of the hash space (default: 256)")
    parser.add_argument("--lease-namespace", help="namespace of the Lease (default: default)")
    parser.add_argument("--lease-duration", type=float, help="seconds (15)")
    parser.add_argument("--renew-deadline", type=float, help="seconds (10)")
    parser.add_argument("--retry-period", type=float, help="seconds (2)")
    parser.add_argument(
        "--qps",
        type=float,
        help="requests a second the operator's client may send (with --burst; default: no limit)",
    )
    parser.add_argument(
        "--burst", type=int, help="requests at once after a quiet spell (with --qps)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds running reconciles get to finish on SIGTERM (default: 30)",
    )
    parser.add_argument("--metrics-port", type=int, help="/metrics (8443; 0: off)")
    parser.add_argument(
        "--metrics-insecure",
        action="store_true",
        help="serve /metrics in plain HTTP to anyone (default: HTTPS, TokenReview + RBAC)",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        metavar="DIR",
        help="tls.crt and tls.key for /metrics, reloaded on change (default: self-signed)",
    )
    parser.add_argument("--probe-port", type=int, help="/healthz, /readyz (8081; 0: off)")
    parser.add_argument(
        "--debug-queue",
        type=int,
        nargs="?",
        const=8082,
        metavar="PORT",
        help="serve /debug/queue on 127.0.0.1:PORT (8082) for fastctl inspect (default: off)",
    )
    webhooks = parser.add_argument_group("webhooks (the module's WEBHOOKS)")
    webhooks.add_argument(
        "--webhook-cert-dir",
        metavar="DIR",
        help="serve them with DIR/tls.crt and DIR/tls.key, reloaded on change (cert-manager)",
    )
    webhooks.add_argument(
        "--webhook-managed",
        metavar="NAME",
        help="fastctl certifies them and installs the configurations named NAME, pointing "
        "at --webhook-service, or at this process (local development)",
    )
    webhooks.add_argument(
        "--webhook-service",
        metavar="NAME.NAMESPACE",
        help="with --webhook-managed: the Service in front of the replicas",
    )
    webhooks.add_argument("--webhook-port", type=int, help="port (default: 9443)")
    webhooks.add_argument("--webhook-host", help="listen address (default: 0.0.0.0)")
    webhooks.add_argument(
        "--no-webhooks", action="store_true", help="do not serve the module's WEBHOOKS"
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="OpenTelemetry spans per reconcile, exported by OTLP as the OTEL_* variables "
        "say (needs fastctl[otel]; default: off)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument(
        "--log-format", choices=("text", "json"), default="text", help="text or JSON lines"
    )
    add_loop_option(parser)
    parser.set_defaults(handler=handle)


def add_loop_option(parser: argparse.ArgumentParser) -> None:
    """``--loop``: the event loop the command runs on (`fastctl._loop`)."""
    from fastctl._loop import CHOICES, ENV

    parser.add_argument(
        "--loop",
        choices=CHOICES,
        help=f"event loop: uvloop when installed (auto), uvloop, or asyncio's own "
        f"(default: ${ENV}, else auto)",
    )


def run_on_chosen_loop(main: Coroutine[Any, Any, int], choice: str | None) -> int:
    """Run `main` on the loop `choice` (``--loop``) or ``$FASTCTL_LOOP`` asks for; a choice
    that cannot be honoured is a `CliError`."""
    from fastctl._loop import LoopChoiceError, run

    try:
        return run(main, loop=choice)
    except LoopChoiceError as exc:
        raise CliError(str(exc)) from None


def configure_logging(level: str, fmt: str = "text", *, tracing: bool = False) -> None:
    """Structured one-line logs naming the object being reconciled, Secrets redacted; with
    `tracing`, the text lines name the trace and span too (JSON lines always do in a
    span)."""
    from fastctl.log import JsonFormatter, ObjectContextFilter, RedactingFilter

    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise CliError(f"--log-level {level!r} is not one of DEBUG, INFO, WARNING, ERROR")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ObjectContextFilter())
    handler.addFilter(RedactingFilter())  # what the operator's own code logs, too
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s object=%(fastctl_object)s "
            + ("trace_id=%(trace_id)s span_id=%(span_id)s " if tracing else "")
            + "%(message)s"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)


def handle(args: argparse.Namespace) -> int:
    both = bool(args.shard_group) and args.leader_elect is not None
    if args.unsharded and not both:
        raise CliError("--unsharded needs --shard-group and --leader-elect")
    if both and not args.unsharded:
        raise CliError(
            "--leader-elect with --shard-group: name the leader-elected controllers with "
            "--unsharded CONTROLLER (the others are sharded)"
        )
    if args.tracing:
        from fastctl._tracing import EXTRA_HINT, available

        if not available():
            raise CliError(f"--tracing: {EXTRA_HINT}")
    configure_logging(args.log_level, args.log_format, tracing=args.tracing)
    target = load(args.target)
    for flag in ("metrics_port", "probe_port", "webhook_port"):
        port = getattr(args, flag)
        if port is not None and not 0 <= port <= 65535:
            raise CliError(f"--{flag.replace('_', '-')} {port} is not a port number")
    return run_on_chosen_loop(_run(target, args), args.loop)


async def _run(target: Target, args: argparse.Namespace) -> int:
    from fastctl.errors import DiscoveryError, LeadershipLost, ResourceNotFound
    from fastctl.kube._client import KubeconfigError, load_client
    from fastctl.runtime._health import HealthServerError

    try:
        client = await load_client(args.kubeconfig)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None
    lost: LeadershipLost | None = None
    try:
        manager = await _manager(target, client, args)
        try:
            await manager.run()
        except (HealthServerError, ResourceNotFound, DiscoveryError, KubeconfigError) as exc:
            raise CliError(str(exc)) from None
        except LeadershipLost as exc:
            lost = exc
    finally:
        await client.close()
    code = 0 if lost is None else 3
    exit_now_if_threads_run(code, "" if lost is None else f"fastctl: error: {lost}")
    if lost is not None:
        raise CliError(str(lost), code=3)
    return code


async def _manager(target: Target, client: Any, args: argparse.Namespace) -> Any:
    """The Manager that runs `target`: the one it builds, or one made for its
    Controllers; every flag applied to it (`configure`), the module's webhooks served."""
    from fastctl.deploy._operator import describe
    from fastctl.runtime.manager import Manager

    built = await build(target, client, args)
    try:
        operator = describe(built, target.module)
    except TypeError as exc:
        raise CliError(f"{args.target}: {exc}") from None
    if isinstance(built, Manager):
        manager = built
        configure(manager, args, built_by=args.target)
    else:
        manager = Manager(client)
        configure(manager, args, built_by=None)
        names = {ctl.name for ctl in operator.controllers}
        unknown = set(args.unsharded) - names
        if unknown:
            raise CliError(
                f"--unsharded {', '.join(sorted(unknown))}: no such controller "
                f"({', '.join(sorted(names))})"
            )
        for ctl in operator.controllers:
            manager.add(ctl, sharded=ctl.name not in args.unsharded)
    serve_webhooks(manager, operator.webhooks, args, client)
    return manager


def exit_now_if_threads_run(code: int, message: str) -> None:
    """End the process with `code` at once if plain-function reconciles still run in
    threads: ``asyncio.run`` and the interpreter would otherwise wait for them (for ever,
    if one hangs), while they go on writing without a lease. `message` is printed first."""
    from fastctl._threads import live_threads

    alive = live_threads()
    if not alive:
        return
    if message:
        print(message, file=sys.stderr)
    print(
        f"fastctl: {alive} plain-function reconcile(s) still running in threads: "
        "exiting without waiting for them",
        file=sys.stderr,
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
