"""``fastctl run`` serves the module's ``WEBHOOKS`` in the operator's own process.

The webhook configurations that ``fastctl manifests`` writes point at the operator's pods,
so the process that reconciles also answers admission and conversion reviews, on every
replica (webhooks are not leader-elected or sharded: a follower and every shard member
answer too) and before the controllers start (a Manager runnable; a managed server holds
``/readyz`` until its configurations are installed). The certificate comes from one of:

- ``--webhook-cert-dir DIR``: ``tls.crt`` and ``tls.key`` issued elsewhere (the Secret
  cert-manager fills, mounted where the generated Deployment mounts it), reloaded when
  they change;
- ``--webhook-managed NAME``: fastctl makes the CA and the certificate and installs the
  configurations named NAME with its ``caBundle``: through ``--webhook-service
  NAME.NAMESPACE`` (in a cluster; the replicas share the CA in a Secret), or, without a
  Service, at this process's own address (``https://127.0.0.1:PORT``), which is how an
  operator is developed against ``fastctl control-plane up``.

A module with ``WEBHOOKS`` and neither flag is refused (``--no-webhooks`` runs it without
serving them): configurations installed with ``failurePolicy: Fail`` and nobody serving
them make every write of the resource fail. A Manager that already serves webhooks (its
own server added with ``add_runnable``) keeps its server, and the flags are refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fastctl.cli import CliError

__all__ = ["serve_webhooks"]

DEFAULT_PORT = 9443


def _given(args: argparse.Namespace) -> list[str]:
    flags = {
        "--webhook-cert-dir": args.webhook_cert_dir,
        "--webhook-managed": args.webhook_managed,
        "--webhook-service": args.webhook_service,
        "--webhook-port": args.webhook_port,
        "--webhook-host": args.webhook_host,
    }
    return [flag for flag, value in flags.items() if value is not None]


def serve_webhooks(manager: Any, webhooks: Any, args: argparse.Namespace, client: Any) -> None:
    """Add the server of `webhooks` (the module's ``WEBHOOKS``, or None) to `manager` as the
    flags say (see the module docstring)."""
    given = _given(args)
    if args.no_webhooks:
        if given:
            raise CliError(f"{given[0]} and --no-webhooks exclude each other")
        return
    if webhooks is None or not (webhooks.admission or webhooks.converters):
        if given:
            raise CliError(f"{given[0]}: {args.target}'s module declares no WEBHOOKS")
        return
    from fastctl.webhook import WebhookServer

    if any(isinstance(r, WebhookServer) for r in manager.runnables):
        if given:
            raise CliError(
                f"{given[0]}: the Manager {args.target} builds already serves webhooks "
                "(its own server, added with add_runnable)"
            )
        return
    if args.webhook_cert_dir and args.webhook_managed:
        raise CliError("--webhook-cert-dir and --webhook-managed exclude each other")
    if args.webhook_service and not args.webhook_managed:
        raise CliError("--webhook-service applies to --webhook-managed, which is not given")
    port = args.webhook_port if args.webhook_port is not None else DEFAULT_PORT
    host = args.webhook_host or "0.0.0.0"
    if args.webhook_cert_dir:
        server = _from_files(webhooks, Path(args.webhook_cert_dir), port, host)
    elif args.webhook_managed:
        server = _managed(webhooks, client, args, port, host)
    else:
        raise CliError(
            f"{args.target}'s module declares WEBHOOKS: serve them with --webhook-cert-dir "
            "DIR (tls.crt and tls.key issued elsewhere, e.g. by cert-manager) or "
            "--webhook-managed NAME (fastctl certifies them and installs the configurations "
            "named NAME), or run without them with --no-webhooks"
        )
    manager.add_runnable(server)


def _from_files(webhooks: Any, where: Path, port: int, host: str) -> Any:
    from fastctl.webhook import ServingCertificate, WebhookServer

    try:
        certificate = ServingCertificate.from_files(where / "tls.crt", where / "tls.key")
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise CliError(f"--webhook-cert-dir {where}: {exc}") from None
    return WebhookServer(webhooks, certificate, port=port, host=host)


def _managed(webhooks: Any, client: Any, args: argparse.Namespace, port: int, host: str) -> Any:
    try:
        from fastctl.webhook import ManagedWebhookServer, Service
    except ImportError as exc:  # the self-signed CA needs cryptography
        raise CliError(
            f"--webhook-managed needs the webhook extra: pip install 'fastctl[webhook]' ({exc})"
        ) from None
    service = None
    if args.webhook_service:
        name, dot, namespace = args.webhook_service.partition(".")
        if not dot or not name or not namespace or "." in namespace:
            raise CliError(f"--webhook-service {args.webhook_service!r}: expected NAME.NAMESPACE")
        service = Service(name, namespace)
    return ManagedWebhookServer(
        webhooks, client, args.webhook_managed, service=service, port=port, host=host
    )
