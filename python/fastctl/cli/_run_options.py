"""``fastctl run``'s flags, applied to the Manager that runs the operator.

The same rules hold whether the CLI made the Manager (for a target that builds Controllers)
or the target built it itself: every flag given takes effect, or the command stops with an
error naming it. None is dropped in silence.

- Server flags (``--metrics-port``, ``--metrics-insecure``, ``--metrics-cert-dir``,
  ``--probe-port``, ``--debug-queue``) and ``--drain-timeout`` replace what the Manager set.
- ``--leader-elect`` and ``--shard-group`` give the Manager leader election or sharding; on
  a Manager that has its own they are refused (one place decides, or the two would
  disagree about the Lease). The Lease flags apply to what these two create: given
  without either, they are refused.
- ``--qps`` and ``--burst`` (given together) set the Manager's client-side rate limit; on a
  Manager built with its own ``rate_limit`` they are refused.
- ``--unsharded`` chooses controllers the CLI adds; a Manager built by the target chooses
  with ``add(controller, sharded=False)``, so there it is refused.
- ``--tracing`` turns the Manager's tracing on (exporting by OTLP, as the ``OTEL_*``
  variables say); a Manager that sends its spans to a provider of its own keeps it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastctl.cli import CliError

__all__ = ["LEASE_DEFAULTS", "configure"]

LEASE_DEFAULTS = {
    "lease_namespace": "default",
    "lease_duration": 15.0,
    "renew_deadline": 10.0,
    "retry_period": 2.0,
}
"""The Lease flags' defaults (the flags themselves default to None: given or not)."""

SHARD_FLAGS = ("shard_key", "shard_slots")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def configure(manager: Any, args: argparse.Namespace, *, built_by: str | None) -> None:
    """Apply the flags to `manager` (see the module docstring). `built_by` names the target
    that built the Manager, or is None when the CLI made it."""
    _servers(manager, args)
    if getattr(args, "tracing", False) and manager.tracing in (False, None):
        manager.tracing = True
    if args.drain_timeout is not None:
        if not args.drain_timeout >= 0:  # NaN too
            raise CliError(f"--drain-timeout {args.drain_timeout}: seconds, 0 or more")
        manager.drain_timeout = args.drain_timeout
    _rate_limit(manager, args, built_by)
    lease_given = [n for n in LEASE_DEFAULTS if getattr(args, n) is not None]
    shard_given = [n for n in SHARD_FLAGS if getattr(args, n) is not None]
    if lease_given and args.leader_elect is None and not args.shard_group:
        raise CliError(
            f"{_flag(lease_given[0])} applies to --leader-elect or --shard-group; neither is given"
        )
    if shard_given and not args.shard_group:
        raise CliError(f"{_flag(shard_given[0])} applies to --shard-group, which is not given")
    lease = {n: v if (v := getattr(args, n)) is not None else d for n, d in LEASE_DEFAULTS.items()}
    if args.leader_elect is not None:
        if manager.leader_election is not None:
            raise CliError(
                f"--leader-elect: {built_by} builds a Manager with its own leader election "
                f"(Lease {manager.leader_election.name}): set it in one place"
            )
        manager.leader_election = _election(args, lease)
    if args.shard_group:
        if manager.sharding is not None:
            raise CliError(
                f"--shard-group: {built_by} builds a Manager with its own sharding "
                f"(group {manager.sharding.group}): set it in one place"
            )
        manager.sharding = _sharding(args, lease)
    if args.unsharded and built_by is not None:
        raise CliError(
            f"--unsharded: {built_by} builds its own Manager, which chooses its "
            "leader-elected controllers with add(controller, sharded=False)"
        )


def _rate_limit(manager: Any, args: argparse.Namespace, built_by: str | None) -> None:
    qps, burst = getattr(args, "qps", None), getattr(args, "burst", None)
    if qps is None and burst is None:
        return
    if qps is None or burst is None:
        raise CliError("--qps and --burst go together: give both")
    if manager.rate_limit is not None:
        raise CliError(
            f"--qps/--burst: {built_by} builds a Manager with its own rate limit "
            f"({manager.rate_limit.qps:g} qps, burst {manager.rate_limit.burst}): "
            "set it in one place"
        )
    from fastctl._rate import RateLimit

    try:
        manager.rate_limit = RateLimit(qps, burst)
    except ValueError as exc:
        raise CliError(f"--qps/--burst: {exc}") from None


def _servers(manager: Any, args: argparse.Namespace) -> None:
    changes: dict[str, Any] = {}
    if args.metrics_port is not None:
        changes["metrics_port"] = args.metrics_port or None
    if args.probe_port is not None:
        changes["probe_port"] = args.probe_port or None
    if args.metrics_insecure and args.metrics_cert_dir:
        raise CliError("--metrics-cert-dir and --metrics-insecure exclude each other")
    if args.metrics_insecure:
        changes["metrics_secure"] = False
        changes["metrics_certificate"] = None
    if args.metrics_cert_dir:
        changes["metrics_secure"] = True
        changes["metrics_certificate"] = _metrics_certificate(args.metrics_cert_dir)
    if args.debug_queue is not None:
        changes["debug_queue_port"] = args.debug_queue
    try:
        manager.servers = replace(manager.servers, **changes)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _metrics_certificate(directory: str) -> Any:
    """The ServingCertificate of ``--metrics-cert-dir``."""
    from fastctl._tls import ServingCertificate

    where = Path(directory)
    try:
        return ServingCertificate.from_files(where / "tls.crt", where / "tls.key")
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise CliError(f"--metrics-cert-dir {where}: {exc}") from None


def _election(args: argparse.Namespace, lease: dict[str, Any]) -> Any:
    from fastctl.runtime.leader import LeaderElection

    name = args.leader_elect or args.target.partition(":")[0].replace(".", "-").replace("_", "-")
    name = name.rpartition("/")[2].removesuffix("-py")
    try:
        return LeaderElection(
            name,
            namespace=lease["lease_namespace"],
            lease_duration=lease["lease_duration"],
            renew_deadline=lease["renew_deadline"],
            retry_period=lease["retry_period"],
        )
    except ValueError as exc:
        raise CliError(f"--leader-elect: {exc}") from None


def _sharding(args: argparse.Namespace, lease: dict[str, Any]) -> Any:
    from fastctl.runtime.sharding import Sharding

    try:
        return Sharding(
            args.shard_group,
            key=args.shard_key or "uid",
            slots=args.shard_slots if args.shard_slots is not None else 256,
            namespace=lease["lease_namespace"],
            lease_duration=lease["lease_duration"],
            renew_deadline=lease["renew_deadline"],
            retry_period=lease["retry_period"],
        )
    except ValueError as exc:
        raise CliError(f"--shard-group: {exc}") from None
