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
With both, ``--unsharded NAME`` (repeatable) names the controllers that are leader-elected
instead of sharded; the others are sharded. A Manager returned by `attr` is run as it is.

Exit status: 0 after a graceful stop, 3 when the leader lease was lost (the process is meant
to be restarted as a follower, as controller-runtime does), 1 for other errors. An API
server that does not answer yet is waited for (discovery and the watches retry, with
backoff; ``/readyz`` says not ready meanwhile); a resource it does not serve, or credentials
or RBAC that it refuses for discovery, end the run with one line saying so. If
plain-function reconciles are still running in threads when the Manager has stopped (a
thread cannot be cancelled), the process exits at once with that status instead of waiting
for them: they may still write, and only ending the process stops them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastctl.cli import CliError, Subcommands

__all__ = ["load_target", "register"]


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
        default="uid",
        help="what puts an object in a shard: its uid, or its namespace (default: uid)",
    )
    parser.add_argument(
        "--shard-slots", type=int, default=256, help="slots of the hash space (default: 256)"
    )
    parser.add_argument(
        "--lease-namespace", default="default", help="namespace of the Lease (default: default)"
    )
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds (15)")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (10)")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds (2)")
    parser.add_argument("--metrics-port", type=int, default=8443, help="/metrics (8443; 0: off)")
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
    parser.add_argument(
        "--probe-port", type=int, default=8081, help="/healthz, /readyz (8081; 0: off)"
    )
    parser.add_argument(
        "--debug-queue",
        type=int,
        nargs="?",
        const=8082,
        metavar="PORT",
        help="serve /debug/queue on 127.0.0.1:PORT (8082) for fastctl inspect (default: off)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument(
        "--log-format", choices=("text", "json"), default="text", help="text or JSON lines"
    )
    parser.set_defaults(handler=handle)


def configure_logging(level: str, fmt: str = "text") -> None:
    """Structured one-line logs naming the object being reconciled, Secrets redacted."""
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
            "%(asctime)s %(levelname)s %(name)s object=%(fastctl_object)s %(message)s"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)


def load_target(spec: str) -> Any:
    """Import ``module:attr`` (``module`` may also be a path to a .py file)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected module:attr, got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.exists():
            raise CliError(f"cannot import {module_name}: no such file")
        sys.path.insert(0, str(path.parent.resolve()))
        module_name = path.stem
    else:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"{module_name} has no attribute {attr!r}") from None
    return target


def handle(args: argparse.Namespace) -> int:
    both = bool(args.shard_group) and args.leader_elect is not None
    if args.unsharded and not both:
        raise CliError("--unsharded needs --shard-group and --leader-elect")
    if both and not args.unsharded:
        raise CliError(
            "--leader-elect with --shard-group: name the leader-elected controllers with "
            "--unsharded CONTROLLER (the others are sharded)"
        )
    configure_logging(args.log_level, args.log_format)
    target = load_target(args.target)
    for flag in ("metrics_port", "probe_port"):
        port = getattr(args, flag)
        if port is not None and not 0 <= port <= 65535:
            raise CliError(f"--{flag.replace('_', '-')} {port} is not a port number")
    if args.metrics_insecure and args.metrics_cert_dir:
        raise CliError("--metrics-cert-dir and --metrics-insecure exclude each other")
    return asyncio.run(_run(target, args))


def _metrics_certificate(args: argparse.Namespace) -> Any:
    """The ServingCertificate of ``--metrics-cert-dir``, or None (self-signed)."""
    from fastctl._tls import ServingCertificate

    if not args.metrics_cert_dir:
        return None
    where = Path(args.metrics_cert_dir)
    try:
        return ServingCertificate.from_files(where / "tls.crt", where / "tls.key")
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise CliError(f"--metrics-cert-dir {where}: {exc}") from None


async def _run(target: Any, args: argparse.Namespace) -> int:
    from fastctl.errors import DiscoveryError, LeadershipLost, ResourceNotFound
    from fastctl.kube._client import KubeconfigError, load_client
    from fastctl.runtime._health import HealthServerError
    from fastctl.runtime.controller import Controller
    from fastctl.runtime.leader import LeaderElection
    from fastctl.runtime.manager import Manager, ServerOptions

    try:
        client = await load_client(args.kubeconfig)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None
    lost: LeadershipLost | None = None
    try:
        built = await _build(target, client, args)
        if isinstance(built, Manager):
            manager = built
        else:
            controllers = [built] if isinstance(built, Controller) else _controllers(built)
            lease = args.leader_elect
            election = None
            if lease is not None:
                name = lease or args.target.partition(":")[0].replace(".", "-").replace("_", "-")
                try:
                    election = LeaderElection(name, **_lease_options(args))
                except ValueError as exc:
                    raise CliError(f"--leader-elect: {exc}") from None
            manager = Manager(
                client,
                leader_election=election,
                sharding=_sharding(args),
                servers=ServerOptions(
                    metrics_port=args.metrics_port or None,
                    metrics_secure=not args.metrics_insecure,
                    metrics_certificate=_metrics_certificate(args),
                    probe_port=args.probe_port or None,
                ),
            )
            unknown = set(args.unsharded) - {ctl.name for ctl in controllers}
            if unknown:
                names = ", ".join(sorted(ctl.name for ctl in controllers))
                raise CliError(
                    f"--unsharded {', '.join(sorted(unknown))}: no such controller ({names})"
                )
            for ctl in controllers:
                manager.add(ctl, sharded=ctl.name not in args.unsharded)
        if args.debug_queue is not None:
            manager.servers = replace(manager.servers, debug_queue_port=args.debug_queue)
        try:
            await manager.run()
        except (HealthServerError, ResourceNotFound, DiscoveryError) as exc:
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


def _lease_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Lease options, shared by leader election and shard membership."""
    return {
        "namespace": args.lease_namespace,
        "lease_duration": args.lease_duration,
        "renew_deadline": args.renew_deadline,
        "retry_period": args.retry_period,
    }


def _sharding(args: argparse.Namespace) -> Any:
    """The `Sharding` of ``--shard-group`` (None without it)."""
    from fastctl.runtime.sharding import Sharding

    if not args.shard_group:
        return None
    try:
        return Sharding(
            args.shard_group, key=args.shard_key, slots=args.shard_slots, **_lease_options(args)
        )
    except ValueError as exc:
        raise CliError(f"--shard-group: {exc}") from None


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


async def _build(target: Any, client: Any, args: argparse.Namespace) -> Any:
    from fastctl.runtime.controller import Controller
    from fastctl.runtime.manager import Manager

    if isinstance(target, Controller | Manager):
        return target
    if callable(target):
        options: dict[str, Any] = {}
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        for name in ("namespace", "concurrency"):
            value = getattr(args, name)
            if value is not None and name in params:
                options[name] = value
        result = target(client, **options)
        if inspect.isawaitable(result):
            result = await result
        return result
    if isinstance(target, Iterable):
        return target
    raise CliError(
        f"{args.target} is a {type(target).__name__}: expected a Controller, Controllers, "
        "a Manager, or a function of the client that returns one"
    )


def _controllers(built: Any) -> list[Any]:
    from fastctl.runtime.controller import Controller

    items = list(built) if isinstance(built, Iterable) else [built]
    if not items or not all(isinstance(c, Controller) for c in items):
        raise CliError(
            f"expected Controllers or a Manager, got {type(built).__name__}: {built!r:.80}"
        )
    return items
