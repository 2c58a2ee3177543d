"""The fake cluster against the real control plane: one user's test of an operator
(`parity_operator.scenario`) ends the same on both, field by field with what only a server
sets taken out. Run on both through the ``cluster`` fixture too, as a user would."""

from __future__ import annotations

from typing import Any

from fastctl.testing import Cluster, ControlPlane, FakeCluster
from fastctl.testing.pytest_plugin import namespace_name

from .parity_operator import scenario


def test_the_fake_cluster_ends_a_test_as_the_control_plane_does(
    control_plane: ControlPlane, namespace: str
) -> None:
    real = Cluster(namespace, control_plane=control_plane).run
    on_real = real(scenario(Cluster(namespace, control_plane=control_plane)))
    # No controller-manager beside the control plane: no garbage collector on the fake.
    fake = FakeCluster(garbage_collection=False)
    fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    on_fake_cluster = Cluster(namespace, fake=fake)
    try:
        on_fake = on_fake_cluster.run(scenario(on_fake_cluster))
    finally:
        fake.forget()
    differences = {
        key: (on_fake.get(key), on_real.get(key))
        for key in sorted(set(on_fake) | set(on_real))
        if on_fake.get(key) != on_real.get(key)
    }
    assert differences == {}, _explain(differences)


def _explain(differences: dict[str, tuple[Any, Any]]) -> str:
    lines = ["the fake cluster and the control plane differ (fake, then real):"]
    for key, (fake, real) in differences.items():
        lines += [f"{key}:", f"  fake: {fake}", f"  real: {real}"]
    return "\n".join(lines)


def test_a_user_test_on_either_cluster(cluster: Cluster) -> None:
    seen = cluster.run(scenario(cluster))
    reconciled = seen["reconciled.parity"]
    assert reconciled["metadata"]["finalizers"] == ["parity.fastctl.dev/cleanup"]
    assert reconciled["status"] == {"observedGeneration": 1, "phase": "Rendered"}
    assert "unknown" not in reconciled["spec"]
    assert seen["reconciled.configmap"]["data"] == {"a": "1", "replicas": "1"}
    assert seen["respecified.parity"]["status"]["observedGeneration"] == 2
    assert seen["apply-conflict"] == (409, "Conflict")
    assert seen["deleted.parity"] == 404
    assert namespace_name("x").startswith("t-x-")
