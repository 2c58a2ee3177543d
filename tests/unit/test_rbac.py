"""The RBAC derivation of `fastctl.deploy` and ``fastctl manifests``, without a cluster.

tests/kube/test_rbac.py proves the demo operator's rules sufficient and minimal on the real
server; here: each source of a rule, where each rule is granted (Role or ClusterRole), the
offline plurals, what a module declares, and the manifests the command prints (its
Deployment runs a command line that ``fastctl run`` accepts).
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import ApplierConfig
from fastctl.cli import build_parser, main
from fastctl.demo import widgets
from fastctl.deploy import Permissions, PolicyRule, derive, needs
from fastctl.deploy._manifests import collect_crds
from fastctl.deploy._operator import describe, resolve_resources
from fastctl.deploy._rbac import LEASE_RULE, migration_rules, resolve_offline
from fastctl.kube import Resource
from fastctl.runtime import Controller, LeaderElection, Manager, StorageMigration
from fastctl.types import ObjectRef

SECRET = Resource("v1", "Secret")
NODE = Resource("v1", "Node")


@pytest.fixture
async def offline() -> AsyncIterator[ApiClient]:
    """A client that is never connected, as ``fastctl manifests`` builds controllers with."""
    async with ApiClient(Configuration(host="")) as api:
        yield api


async def _noop(obj: Any, ctx: Any) -> None:
    return None


def _mapper(obj: Any) -> list[ObjectRef]:
    return []


async def permissions_of(built: Any, module: Any = None, **kw: Any) -> Permissions:
    operator = describe(built, module)
    resolved = await resolve_resources(operator)
    return derive(operator.controllers, resolved, extra=operator.rules, **kw)


def by_resource(rules: tuple[PolicyRule, ...]) -> dict[tuple[str, str], tuple[str, ...]]:
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for rule in rules:
        for resource in rule.resources:
            out[(rule.api_group, resource)] = rule.verbs
    return out


DEMO = {
    ("", "configmaps"): ("create", "delete", "list", "patch", "watch"),
    ("demo.fastctl.dev", "widgets"): ("get", "list", "patch", "watch"),
    ("demo.fastctl.dev", "widgets/status"): ("patch",),
    ("events.k8s.io", "events"): ("create", "patch"),
}


async def test_a_namespaced_operator_gets_one_role_in_its_namespace(offline: ApiClient) -> None:
    ctl = widgets.make_controller(offline, namespace="demo")
    perms = await permissions_of(ctl, widgets, lease_namespace="demo")
    assert perms.cluster == ()
    assert set(perms.namespaced) == {"demo"}
    assert by_resource(perms.namespaced["demo"]) == {
        **DEMO,
        ("coordination.k8s.io", "leases"): ("create", "get", "update"),
    }


async def test_an_operator_of_all_namespaces_gets_a_cluster_role_and_the_lease_a_role(
    offline: ApiClient,
) -> None:
    perms = await permissions_of(widgets.make_controller(offline), widgets, lease_namespace="ops")
    assert by_resource(perms.cluster) == DEMO
    assert perms.namespaced == {"ops": (LEASE_RULE,)}


async def test_no_leader_election_no_lease_rule(offline: ApiClient) -> None:
    perms = await permissions_of(widgets.make_controller(offline, namespace="demo"), widgets)
    assert ("coordination.k8s.io", "leases") not in by_resource(perms.namespaced["demo"])


async def test_needs_narrows_and_extends_what_a_controller_gets(offline: ApiClient) -> None:
    quiet = ApplierConfig(failure_events=False)
    ctl = Controller(offline, widgets.WIDGET, _noop, namespace="n", config=quiet)
    ctl.owns(widgets.CONFIGMAP)
    needs(
        ctl,
        status=False,
        finalizer=False,
        events=False,
        owned=("patch",),
        rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    )
    perms = await permissions_of(ctl, widgets)
    assert by_resource(perms.namespaced["n"]) == {
        ("", "configmaps"): ("list", "patch", "watch"),
        ("", "secrets"): ("get",),
        ("demo.fastctl.dev", "widgets"): ("list", "watch"),
    }


async def test_failure_events_keep_the_events_rule_a_reconcile_does_not_need(
    offline: ApiClient,
) -> None:
    """A controller records a Warning Event per failed reconcile by default: its Role lets
    it, even when its reconcile publishes none (else each failure logs a 403)."""
    ctl = needs(Controller(offline, widgets.WIDGET, _noop, namespace="n"), events=False)
    perms = await permissions_of(ctl, widgets)
    assert by_resource(perms.namespaced["n"])[("events.k8s.io", "events")] == (
        "create",
        "patch",
    )


async def test_watched_resources_are_only_listed_and_watched(offline: ApiClient) -> None:
    ctl = needs(Controller(offline, widgets.WIDGET, _noop).watches(SECRET, _mapper))
    assert by_resource((await permissions_of(ctl, widgets)).cluster)[("", "secrets")] == (
        "list",
        "watch",
    )


async def test_a_cluster_scoped_resource_goes_in_the_cluster_role(offline: ApiClient) -> None:
    ctl = Controller(offline, widgets.WIDGET, _noop, namespace="n").watches(NODE, _mapper)
    perms = await permissions_of(ctl, widgets)
    assert by_resource(perms.cluster) == {("", "nodes"): ("list", "watch")}
    assert ("", "nodes") not in by_resource(perms.namespaced["n"])


async def test_two_controllers_merge_verbs_per_resource(offline: ApiClient) -> None:
    a = needs(Controller(offline, SECRET, _noop, namespace="n", name="a"), status=False)
    b = needs(
        Controller(offline, widgets.WIDGET, _noop, namespace="n", name="b").owns(SECRET),
        owned=("get",),
    )
    rules = (await permissions_of([a, b], widgets)).namespaced["n"]
    assert by_resource(rules)[("", "secrets")] == ("get", "list", "patch", "watch")
    assert len([r for r in rules if r.resources == ("secrets",)]) == 1


async def test_the_module_level_rbac_list_is_granted_where_the_controllers_are(
    offline: ApiClient,
) -> None:
    module = types.ModuleType("op")
    module.RBAC = [PolicyRule("apps", ("deployments",), ("get",))]  # type: ignore[attr-defined]
    module.CRD = widgets.CRD  # type: ignore[attr-defined]
    operator = describe(widgets.make_controller(offline, namespace="n"), module)
    resolved = await resolve_resources(operator)
    perms = derive(operator.controllers, resolved, extra=operator.rules, extra_namespace="n")
    assert by_resource(perms.namespaced["n"])[("apps", "deployments")] == ("get",)


def test_plurals_come_from_the_resource_the_crds_or_the_built_in_kinds() -> None:
    assert resolve_offline(Resource("apps/v1", "Deployment")).plural == "deployments"
    assert resolve_offline(widgets.WIDGET, [widgets.CRD]).plural == "widgets"
    explicit = Resource("x.dev/v1", "Goose", plural="geese", namespaced=False)
    assert (resolve_offline(explicit).plural, resolve_offline(explicit).namespaced) == (
        "geese",
        False,
    )
    unknown = Resource("demo.fastctl.dev/v1", "Widget")  # no plural given, no CRD passed
    with pytest.raises(LookupError, match=r"Widget\.demo\.fastctl\.dev/v1.*--kubeconfig"):
        resolve_offline(unknown)


class Model:
    """A typed resource as the typed models are: a classmethod ``crd()``."""

    @classmethod
    def crd(cls) -> dict[str, Any]:
        return {**widgets.CRD, "metadata": {"name": "models.x.dev"}}


def test_crds_are_dicts_or_anything_with_a_crd_method() -> None:
    names = [c["metadata"]["name"] for c in collect_crds([widgets.CRD, Model, widgets.CRD, 3])]
    assert names == ["widgets.demo.fastctl.dev", "models.x.dev"]


async def test_a_rule_limited_to_names_stays_limited_when_merged(offline: ApiClient) -> None:
    token = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    ctl = Controller(offline, widgets.WIDGET, _noop, namespace="n").owns(widgets.CONFIGMAP)
    needs(
        ctl,
        rules=[
            {**token, "resourceNames": ["token"]},
            PolicyRule("", ("secrets",), ("get", "update"), resource_names=("token",)),
            PolicyRule("", ("configmaps",), ("get",), resource_names=("settings",)),
        ],
    )
    rules = (await permissions_of(ctl, widgets)).namespaced["n"]
    policy = [r.as_policy_rule() for r in rules if r.resource_names]
    # Merged with each other, never into the resource's rule for every object (which would
    # grant them on every Secret); configmaps "get" by name is kept apart from the owned
    # resource's verbs, as it is not among them.
    assert policy == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
         "resourceNames": ["settings"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
         "resourceNames": ["token"]},
    ]  # fmt: skip
    assert ("", "secrets") not in by_resource(tuple(r for r in rules if not r.resource_names))
    assert PolicyRule.of({**token, "resourceNames": ["token"]})[0].grants() == set()
    # A verb the resource's own rule grants on every object is not repeated by name.
    owner = Controller(offline, widgets.WIDGET, _noop, namespace="n").owns(widgets.CONFIGMAP)
    named = PolicyRule("", ("configmaps",), ("get",), resource_names=("settings",))
    needs(owner, owned=("create", "patch", "delete", "get"), rules=[named])
    again = (await permissions_of(owner, widgets)).namespaced["n"]
    assert [r for r in again if r.resource_names] == []


def test_a_rule_limited_to_names_refuses_what_rbac_cannot_limit() -> None:
    for verb in ("create", "deletecollection", "*"):
        with pytest.raises(ValueError, match=f"cannot grant {re.escape(verb)}: RBAC"):
            PolicyRule("", ("secrets",), ("get", verb), resource_names=("a",))
    with pytest.raises(TypeError, match="tuple of names, got the string 'abc'"):
        PolicyRule("", ("secrets",), ("get",), resource_names="abc")  # type: ignore[arg-type]


def test_policy_rules_need_groups_resources_and_verbs() -> None:
    with pytest.raises(ValueError, match="apiGroups"):
        PolicyRule.of({"resources": ["secrets"], "verbs": ["get"]})
    with pytest.raises(ValueError, match="resources and verbs"):
        PolicyRule("", ("secrets",), ())


# -- the command ----------------------------------------------------------------------


def run_manifests(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main(["manifests", *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_the_command_prints_every_object_in_apply_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = run_manifests(
        capsys, "fastctl.demo.widgets:make_controller", "--namespace", "demo", "--create-namespace"
    )
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRole",
        "Deployment",
    ]
    sa, role, binding = docs[2:5]
    auth, auth_binding, reader = docs[5:8]
    assert auth["metadata"]["name"] == auth_binding["roleRef"]["name"] == "widgets-metrics-auth"
    assert {(r["apiGroups"][0], r["resources"][0], *r["verbs"]) for r in auth["rules"]} == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    assert auth_binding["subjects"] == binding["subjects"]
    assert reader["metadata"]["name"] == "widgets-metrics-reader"
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "widgets"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "widgets", "namespace": "demo"}
    ]
    assert sa["metadata"]["namespace"] == role["metadata"]["namespace"] == "demo"


def test_the_deployment_runs_what_fastctl_run_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = run_manifests(capsys, "fastctl.demo.widgets:make_controller", "--namespace", "demo")
    deployment = docs[-1]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["fastctl"]
    args = build_parser().parse_args(container["args"])
    assert args.target == "fastctl.demo.widgets:make_controller"
    assert (args.namespace, args.leader_elect, args.lease_namespace) == ("demo", "widgets", "demo")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": args.metrics_port, "probes": args.probe_port}
    assert (args.metrics_port, args.probe_port, args.metrics_insecure) == (8443, 8081, False)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["serviceAccountName"] == "widgets"
    assert deployment["spec"]["replicas"] == 2
    assert set(container["resources"]) == {"requests", "limits"}


def test_all_namespaces_means_a_cluster_role(capsys: pytest.CaptureFixture[str]) -> None:
    docs = run_manifests(capsys, "fastctl.demo.widgets:make_controller", "--name", "w")
    kinds = [(d["kind"], d["metadata"].get("namespace")) for d in docs[1:]]
    assert kinds == [
        ("ServiceAccount", "w"),
        ("ClusterRole", None),
        ("ClusterRoleBinding", None),
        ("Role", "w"),
        ("RoleBinding", "w"),
        ("ClusterRole", None),
        ("ClusterRoleBinding", None),
        ("ClusterRole", None),
        ("Deployment", "w"),
    ]
    assert "--namespace" not in docs[-1]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_insecure_metrics_need_no_review_rules(capsys: pytest.CaptureFixture[str]) -> None:
    docs = run_manifests(
        capsys, "fastctl.demo.widgets:make_controller", "--name", "w", "--metrics-insecure"
    )
    assert not any("metrics" in d["metadata"]["name"] for d in docs)
    args = build_parser().parse_args(docs[-1]["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.metrics_insecure


def write_module(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    sys.modules.pop(name, None)
    return str(path)


def test_an_unknown_plural_fails_naming_the_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_module(
        tmp_path,
        "gadget_op",
        "from fastctl import Controller, Resource\n"
        "async def r(obj, ctx): return None\n"
        "def make(client): return Controller(client, Resource('x.dev/v1', 'Gadget'), r)\n",
    )
    assert main(["manifests", f"{path}:make"]) == 1
    assert "Gadget.x.dev/v1: plural and scope unknown offline" in capsys.readouterr().err


def test_a_typed_controller_brings_its_crd_without_crds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`Controller(client, Model)`: the model is the CRD's source, as `fastctl crd` reads
    it; the manifests install it before the operator that watches it."""
    path = write_module(
        tmp_path,
        "typed_op",
        "from fastctl import Controller, CustomResource, KubeModel\n"
        "class GizmoSpec(KubeModel):\n"
        "    size: int = 1\n"
        "class Gizmo(CustomResource, group='gizmos.fastctl.dev', version='v1'):\n"
        "    spec: GizmoSpec\n"
        "async def r(obj, ctx): return None\n"
        "def make(client): return Controller(client, Gizmo, r)\n",
    )
    docs = run_manifests(capsys, f"{path}:make", "--name", "op")
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert [c["metadata"]["name"] for c in crds] == ["gizmos.gizmos.fastctl.dev"]
    assert crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    kinds = [d["kind"] for d in docs]
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment")
    rules = [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    assert any("gizmos" in r["resources"] for r in rules)


def test_a_manager_runs_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_module(
        tmp_path,
        "managed_op",
        "from fastctl import Manager, LeaderElection\n"
        "from fastctl.demo import widgets\n"
        "CRDS = [widgets.CRD]\n"
        "def make(client):\n"
        "    election = LeaderElection('lease', namespace='elsewhere')\n"
        "    manager = Manager(client, leader_election=election)\n"
        "    return manager.add(widgets.make_controller(client))\n"
        "def single(client):\n"
        "    return Manager(client).add(widgets.make_controller(client))\n",
    )
    docs = run_manifests(capsys, f"{path}:make", "--name", "op")
    assert [
        (d["kind"], d["metadata"].get("namespace"))
        for d in docs
        if "Role" in d["kind"] and d["metadata"]["name"] == "op"
    ][2:] == [("Role", "elsewhere"), ("RoleBinding", "elsewhere")]
    assert "--leader-elect" not in docs[-1]["spec"]["template"]["spec"]["containers"][0]["args"]
    # A Manager without leader election of its own gets fastctl run's flag, which now
    # applies to it: two replicas, one leading, and the Lease rules in its namespace.
    docs = run_manifests(capsys, f"{path}:single", "--name", "op")
    args = docs[-1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--leader-elect") + 1] == "op"
    assert docs[-1]["spec"]["replicas"] == 2
    assert any(d["kind"] == "Role" and d["metadata"]["namespace"] == "op" for d in docs)


async def test_a_manager_is_described_with_its_controllers(offline: ApiClient) -> None:
    manager = Manager(offline).add(widgets.make_controller(offline))
    operator = describe(manager, widgets)
    assert operator.manager
    assert operator.election is None
    assert operator.resources == (widgets.WIDGET, widgets.CONFIGMAP)
    assert [c["metadata"]["name"] for c in operator.crds] == ["widgets.demo.fastctl.dev"]
    with pytest.raises(TypeError, match="Controllers or a Manager"):
        describe(LeaderElection("x", namespace="y"))


async def test_a_storage_migration_gets_its_crd_and_every_object_cluster_wide(
    offline: ApiClient,
) -> None:
    """A Manager running a `StorageMigration` needs to read its CRD, patch the CRD's
    status and list and patch every object of the resource, in every namespace even when
    the controllers watch one: the manifests must grant it, or the run fails with 403s
    once the operator is deployed."""
    crd = "widgets.demo.fastctl.dev"
    manager = Manager(offline).add(widgets.make_controller(offline, namespace="n"))
    manager.add_runnable(StorageMigration(offline, crd))
    operator = describe(manager, widgets)
    resolved = await resolve_resources(operator)
    permissions = derive(
        operator.controllers,
        resolved,
        extra=operator.rules,
        extra_namespace="n",
        cluster_extra=operator.cluster_rules,
    )
    cluster = set(permissions.cluster)
    crds = "apiextensions.k8s.io"
    assert PolicyRule(crds, ("customresourcedefinitions",), ("get",), (crd,)) in cluster
    assert PolicyRule(crds, ("customresourcedefinitions/status",), ("patch",), (crd,)) in cluster
    assert PolicyRule("demo.fastctl.dev", ("widgets",), ("list", "patch")) in cluster
    # The controllers' own rules stay in their namespace's Role.
    assert ("demo.fastctl.dev", "widgets", "watch") in permissions.grants("n")
    assert ("demo.fastctl.dev", "widgets", "watch") not in permissions.grants()
    # Without the runnable: no cluster-wide rule at all.
    plain = describe(Manager(offline).add(widgets.make_controller(offline, namespace="n")))
    assert plain.cluster_rules == ()
    with pytest.raises(ValueError, match=r"<plural>\.<group>"):
        migration_rules("widgets")
