"""``fastctl manifests module:attr``: the YAML that deploys an operator.

It builds the operator as ``fastctl run`` does (the factory gets a client that is never
connected, and ``namespace=`` when ``--namespace`` is given), derives the RBAC rules its
controllers need, and prints, as one multi-document YAML stream: the CRDs it ships (the
module's ``CRDS`` and ``CRD``, a typed controller's model, and resources with a
``crd()``), the Namespace (with
``--create-namespace``), a ServiceAccount, a Role and RoleBinding (``--namespace``: the
operator watches one namespace) or a ClusterRole and ClusterRoleBinding (all namespaces),
and a Deployment running ``fastctl run module:attr --leader-elect NAME``.

With a module-level ``WEBHOOKS`` (a ``fastctl.webhook.Webhooks``) it also writes the
webhook Service, the webhook configurations and the CRDs' conversion stanza pointing at it,
the container's webhook port, and cert-manager's Issuer and Certificate
(``--webhook-certificates cert-manager``, the default) or nothing for the certificate
(``managed``: the operator patches the caBundle at start, and may).

Extra rules for what the reconciles touch come from the module's ``RBAC`` list and from
``fastctl.deploy.needs``. Plurals come from the resources, the CRDs and the built-in
kinds; ``--kubeconfig`` asks the cluster's discovery for the others.

``--only crds``, ``--only rbac``, ``--only operator`` (or several, ``--only crds,rbac``)
print a part of that stream, for teams that install CRDs and permissions apart from the
operator (``fastctl.deploy._parts``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fastctl.cli import CliError, Subcommands

if TYPE_CHECKING:
    from fastctl.cli._target import Target

__all__ = ["register"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "manifests",
        help="print the YAML that deploys an operator (module:attr)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="module:attr", help="what fastctl run would run")
    parser.add_argument("--namespace", help="the one namespace the operator watches")
    parser.add_argument(
        "--operator-namespace",
        help="where the Deployment, ServiceAccount and Lease live (default: --namespace, "
        "else the name)",
    )
    parser.add_argument("--name", help="name of every object (default: the module's name)")
    parser.add_argument("--image", default="fastctl-operator:latest", help="container image")
    parser.add_argument("--replicas", type=int, default=2, help="replicas (2: one leads)")
    parser.add_argument("--metrics-port", type=int, default=8443, help="/metrics (HTTPS)")
    parser.add_argument("--probe-port", type=int, default=8081, help="/healthz, /readyz")
    parser.add_argument(
        "--metrics-insecure", action="store_true", help="plain-HTTP /metrics, no review rules"
    )
    parser.add_argument(
        "--create-namespace", action="store_true", help="also write the operator's Namespace"
    )
    parser.add_argument(
        "--webhook-port", type=int, default=9443, help="the webhook server's port (WEBHOOKS)"
    )
    parser.add_argument(
        "--webhook-certificates",
        choices=("cert-manager", "managed"),
        default="cert-manager",
        help="who certifies the webhooks: cert-manager (an Issuer and a Certificate, CA "
        "injected) or managed (the operator makes its CA and patches the caBundle at start)",
    )
    parser.add_argument("--kubeconfig", help="use this cluster's discovery for plurals")
    parser.add_argument(
        "--only",
        metavar="PARTS",
        help="print only these parts, comma-separated: crds, rbac (the ServiceAccount and "
        "every role and binding), operator (the rest); e.g. --only crds,rbac",
    )
    parser.set_defaults(handler=handle, concurrency=None)


def default_name(target: str) -> str:
    """``pkg.my_operator:make`` -> ``my-operator`` (a DNS label)."""
    module = target.partition(":")[0]
    stem = Path(module).stem if module.endswith(".py") else module.rpartition(".")[2]
    return stem.replace("_", "-").lower()


def handle(args: argparse.Namespace) -> int:
    from fastctl.cli._target import load

    text = asyncio.run(_render(load(args.target), args))
    sys.stdout.write(text)
    return 0


async def _render(target: Target, args: argparse.Namespace) -> str:
    from kubernetes_asyncio.client import ApiClient, Configuration

    from fastctl.cli._target import build
    from fastctl.deploy import DeployOptions, derive, manifests, to_yaml
    from fastctl.deploy._operator import describe, resolve_resources
    from fastctl.deploy._parts import PARTS, parse_parts, select_parts
    from fastctl.kube._client import KubeconfigError, load_client
    from fastctl.kube._resource import Discovery

    try:  # before the operator is built: a typo fails at once
        parts = parse_parts(args.only) if args.only is not None else frozenset(PARTS)
    except ValueError as exc:
        raise CliError(f"--only: {exc}") from None
    if args.kubeconfig:
        try:
            client = await load_client(args.kubeconfig)
        except KubeconfigError as exc:
            raise CliError(str(exc)) from None
    else:
        client = ApiClient(Configuration(host=""))  # never connected: requests fail at once
    try:
        try:
            operator = describe(await build(target, client, args), target.module)
        except TypeError as exc:
            raise CliError(f"{args.target}: {exc}") from None
        discovery = Discovery.for_client(client) if args.kubeconfig else None
        try:
            resolved = await resolve_resources(operator, discovery)
        except LookupError as exc:
            raise CliError(str(exc)) from None
    finally:
        await client.close()
    name = args.name or default_name(args.target)
    operator_namespace = args.operator_namespace or args.namespace or name
    # `fastctl run --leader-elect` applies to a Manager the target builds as well, unless
    # it has leader election or sharding of its own (then the flag would be refused).
    leader_election = operator.election is None and not operator.sharded
    lease_namespace: str | None = operator_namespace if leader_election else None
    replicas = args.replicas
    if operator.election is not None:
        lease_namespace = operator.election.namespace
    options = DeployOptions(
        target=args.target,
        name=name,
        image=args.image,
        operator_namespace=operator_namespace,
        watch_namespace=args.namespace,
        replicas=replicas,
        leader_election=leader_election,
        metrics_port=args.metrics_port,
        probe_port=args.probe_port,
        metrics_secure=not args.metrics_insecure,
        create_namespace=args.create_namespace,
        webhook_port=args.webhook_port,
        webhook_certificates=args.webhook_certificates,
    )
    try:
        permissions = derive(
            operator.controllers,
            resolved,
            lease_namespace=lease_namespace,
            extra=operator.rules,
            extra_namespace=args.namespace,
            cluster_extra=operator.cluster_rules,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        objects = manifests(options, permissions, operator.crds, operator.webhooks)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.only is not None:
        objects = select_parts(objects, parts)
    return to_yaml(objects)
