"""The objects that deploy an operator: CRDs, ServiceAccount, RBAC, Deployment (and, for an
operator with webhooks, what `fastctl.deploy._webhooks.webhook_objects` adds).

Everything here is a pure function of what the operator declares (its controllers, its
CRDs, its extra rules) and of `DeployOptions`: no cluster is needed, and the output is plain
dicts, ready for ``kubectl apply`` once written as YAML (`to_yaml`).

The Deployment runs ``fastctl run module:attr --leader-elect NAME`` with 2 replicas (one
leads, the other keeps its caches warm, docs/leader-election.md), the Lease in the
operator's namespace, ``/healthz`` as the liveness and ``/readyz`` as the readiness probe on
the plain-HTTP probe port (8081), ``/metrics`` over HTTPS on 8443, a non-root user and a
read-only root filesystem (``/tmp`` is an ``emptyDir``; ``PYTHONDONTWRITEBYTECODE`` keeps
Python from writing beside the code).

With secure metrics (the default) the RBAC also holds what guards ``/metrics``
(`metrics_rbac`): a ClusterRole that lets the operator create TokenReviews and
SubjectAccessReviews, bound to its ServiceAccount, and a ``<name>-metrics-reader``
ClusterRole (``get`` on the non-resource URL ``/metrics``) for whoever scrapes: bind it to
Prometheus's ServiceAccount.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastctl.deploy._operator import collect_crds
from fastctl.deploy._rules import Permissions, PolicyRule
from fastctl.deploy._webhooks import (
    CERT_DIR,
    CertificateMode,
    shared_secret_rules,
    webhook_objects,
    webhook_rules,
    webhook_secret,
    webhook_service,
)
from fastctl.webhook._registry import Webhooks

__all__ = [
    "DeployOptions",
    "collect_crds",
    "deployment",
    "manifests",
    "metrics_rbac",
    "rbac_objects",
    "service_account",
    "to_yaml",
]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeployOptions:
    """How the operator is deployed.

    - `target`: what ``fastctl run`` runs in the container (``module:attr``, importable
      from the image's working directory).
    - `name`: the ServiceAccount, (Cluster)Role, binding, Deployment and Lease name.
    - `operator_namespace`: where the Deployment, ServiceAccount and Lease live.
    - `watch_namespace`: the one namespace the controllers watch (``None``: all).
    - `leader_election`: run with ``--leader-elect`` (needs the Lease rule).
    - `webhook_port`: the port the operator's `WebhookServer` listens on (its default,
      9443), when it has webhooks.
    - `webhook_certificates`: ``"cert-manager"`` (an Issuer and a Certificate, the CA
      injected by cert-manager) or ``"managed"`` (the operator patches the ``caBundle`` at
      start); see `fastctl.deploy._webhooks.webhook_objects`.
    - `metrics_port`, `probe_port`: ``/metrics`` and ``/healthz``/``/readyz``.
    - `metrics_secure`: ``/metrics`` over HTTPS for callers RBAC allows (False: plain HTTP
      for anyone, ``--metrics-insecure``, and no review rules).
    """

    target: str
    name: str
    image: str
    operator_namespace: str
    watch_namespace: str | None = None
    replicas: int = 2
    leader_election: bool = True
    metrics_port: int = 8443
    probe_port: int = 8081
    metrics_secure: bool = True
    create_namespace: bool = False
    requests: Mapping[str, str] = field(default_factory=lambda: {"cpu": "100m", "memory": "128Mi"})
    limits: Mapping[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "512Mi"})
    run_as_user: int = 65532
    webhook_port: int = 9443
    webhook_certificates: CertificateMode = "cert-manager"

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.name, "app.kubernetes.io/managed-by": "fastctl"}


def _meta(name: str, namespace: str | None, labels: Mapping[str, str]) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def service_account(options: DeployOptions) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(options.name, options.operator_namespace, options.labels),
    }


def rbac_objects(options: DeployOptions, permissions: Permissions) -> list[Obj]:
    """A ClusterRole and ClusterRoleBinding for the cluster-wide rules, a Role and
    RoleBinding in each namespace for the namespaced ones, all bound to the
    ServiceAccount."""
    subject = {
        "kind": "ServiceAccount",
        "name": options.name,
        "namespace": options.operator_namespace,
    }
    out: list[Obj] = []
    scopes: list[tuple[str | None, Sequence[PolicyRule]]] = []
    if permissions.cluster:
        scopes.append((None, permissions.cluster))
    scopes.extend(sorted(permissions.namespaced.items()))
    for namespace, rules in scopes:
        kind = "ClusterRole" if namespace is None else "Role"
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": kind,
                "metadata": _meta(options.name, namespace, options.labels),
                "rules": [rule.as_policy_rule() for rule in rules],
            }
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": f"{kind}Binding",
                "metadata": _meta(options.name, namespace, options.labels),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": kind,
                    "name": options.name,
                },
                "subjects": [subject],
            }
        )
    return out


_REVIEW_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]


def metrics_rbac(options: DeployOptions) -> list[Obj]:
    """What secure metrics need (see the module docstring); nothing when insecure."""
    if not options.metrics_secure:
        return []
    auth = f"{options.name}-metrics-auth"
    reader = f"{options.name}-metrics-reader"
    group = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": f"{group}/v1",
            "kind": "ClusterRole",
            "metadata": _meta(auth, None, options.labels),
            "rules": [dict(rule) for rule in _REVIEW_RULES],
        },
        {
            "apiVersion": f"{group}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(auth, None, options.labels),
            "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": auth},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": options.name,
                    "namespace": options.operator_namespace,
                }
            ],
        },
        {
            "apiVersion": f"{group}/v1",
            "kind": "ClusterRole",
            "metadata": _meta(reader, None, options.labels),
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    ]


def run_args(options: DeployOptions, *, webhooks: bool = False) -> list[str]:
    """The ``fastctl`` arguments of the container; with `webhooks`, those that make
    ``fastctl run`` serve them where the Service and the configurations expect: on the
    ``webhook`` port, with the certificate mounted at `CERT_DIR` (cert-manager) or made
    and installed by the operator through the Service (managed)."""
    args = ["run", options.target, "--metrics-port", str(options.metrics_port)]
    args += ["--probe-port", str(options.probe_port)]
    if not options.metrics_secure:
        args.append("--metrics-insecure")
    args += ["--log-format", "json"]
    if options.watch_namespace is not None:
        args += ["--namespace", options.watch_namespace]
    if options.leader_election:
        args += ["--leader-elect", options.name]
        args += ["--lease-namespace", options.operator_namespace]
    if webhooks:
        args += ["--webhook-port", str(options.webhook_port)]
        if options.webhook_certificates == "cert-manager":
            args += ["--webhook-cert-dir", CERT_DIR]
        else:
            service = webhook_service(options)
            args += ["--webhook-managed", options.name]
            args += ["--webhook-service", f"{service.name}.{service.namespace}"]
    return args


def deployment(options: DeployOptions, *, webhooks: bool = False) -> Obj:
    """The operator's Deployment; with `webhooks`, its container also has the ``webhook``
    port and, in cert-manager mode, the serving certificate's Secret at `CERT_DIR`."""
    probe = {"httpGet": {"path": "/healthz", "port": "probes"}, "periodSeconds": 10}
    container: Obj = {
        "name": "operator",
        "image": options.image,
        "command": ["fastctl"],
        "args": run_args(options, webhooks=webhooks),
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "ports": [
            {"name": "metrics", "containerPort": options.metrics_port},
            {"name": "probes", "containerPort": options.probe_port},
        ],
        "livenessProbe": {**probe, "initialDelaySeconds": 5, "failureThreshold": 3},
        "readinessProbe": {**probe, "httpGet": {"path": "/readyz", "port": "probes"}},
        "resources": {"requests": dict(options.requests), "limits": dict(options.limits)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    volumes: list[Obj] = [{"name": "tmp", "emptyDir": {}}]
    if webhooks:
        container["ports"].append({"name": "webhook", "containerPort": options.webhook_port})
        if options.webhook_certificates == "cert-manager":
            container["volumeMounts"].append(
                {"name": "webhook-certs", "mountPath": CERT_DIR, "readOnly": True}
            )
            volumes.append(
                {"name": "webhook-certs", "secret": {"secretName": webhook_secret(options)}}
            )
    selector = {"app.kubernetes.io/name": options.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(options.name, options.operator_namespace, options.labels),
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": options.labels},
                "spec": {
                    "serviceAccountName": options.name,
                    # The Manager drains for up to 30 s after SIGTERM.
                    "terminationGracePeriodSeconds": 40,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": options.run_as_user,
                        "runAsGroup": options.run_as_user,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def manifests(
    options: DeployOptions,
    permissions: Permissions,
    crds: Iterable[Mapping[str, Any]] = (),
    webhooks: Webhooks | None = None,
) -> list[Obj]:
    """Every object, in the order ``kubectl apply`` needs: CRDs, the Namespace (with
    `DeployOptions.create_namespace`), ServiceAccount, RBAC (the metrics' too), then, with
    `webhooks` that register anything, the webhook Service and certificate objects, the
    Deployment, and the webhook configurations last (`fastctl.deploy._webhooks.webhook_objects`)."""
    before: list[Obj] = []
    after: list[Obj] = []
    served = webhooks is not None and bool(webhooks.admission or webhooks.converters)
    if served:
        assert webhooks is not None
        crds, before, after = webhook_objects(options, webhooks, crds)
        extra = webhook_rules(options, webhooks)
        if extra:
            permissions = replace(permissions, cluster=(*permissions.cluster, *extra))
        if options.webhook_certificates == "managed":
            ns = options.operator_namespace
            namespaced = dict(permissions.namespaced)
            namespaced[ns] = (*namespaced.get(ns, ()), *shared_secret_rules(options))
            permissions = replace(permissions, namespaced=namespaced)
    out: list[Obj] = [dict(crd) for crd in crds]
    if options.create_namespace:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": _meta(options.operator_namespace, None, options.labels),
            }
        )
    out.append(service_account(options))
    out.extend(rbac_objects(options, permissions))
    out.extend(metrics_rbac(options))
    out.extend(before)
    out.append(deployment(options, webhooks=served))
    out.extend(after)
    return out


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream (needs PyYAML: the ``manifests`` extra)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError("writing YAML needs PyYAML: pip install 'fastctl[manifests]'") from exc
    return str(
        yaml.safe_dump_all(
            [dict(obj) for obj in objects], sort_keys=False, default_flow_style=False
        )
    )
