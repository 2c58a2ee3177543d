"""``fastctl manifests --only``: the parts, put together, are the whole stream in its order."""

from __future__ import annotations

from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from fastctl.cli import main

TARGET = "fastctl.demo.widgets:make_controller"


def manifests(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main(["manifests", TARGET, "--create-namespace", *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_each_part_holds_its_kinds_and_together_they_are_the_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    whole = manifests(capsys)
    crds = manifests(capsys, "--only", "crds")
    rbac = manifests(capsys, "--only", "rbac")
    operator = manifests(capsys, "--only", "operator")
    assert kinds(crds) == ["CustomResourceDefinition"]
    assert kinds(rbac)[0] == "ServiceAccount"
    assert set(kinds(rbac)) == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    assert kinds(operator) == ["Namespace", "Deployment"]
    assert crds + rbac + operator != whole  # the Namespace comes before the RBAC
    assert sorted(map(str, crds + rbac + operator)) == sorted(map(str, whole))
    # Several parts keep the order of the whole stream.
    both = manifests(capsys, "--only", "operator, crds")
    assert both == [d for d in whole if d in crds or d in operator]
    assert kinds(both) == ["CustomResourceDefinition", "Namespace", "Deployment"]


@pytest.mark.parametrize("only", ["crd", "crds,deployment", ",", ""])
def test_an_unknown_part_is_named(only: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifests", TARGET, "--only", only]) == 1
    err = capsys.readouterr().err
    assert "--only: unknown part" in err
    assert "choose from crds, rbac, operator" in err
    if only.startswith("crd"):
        assert err.split("unknown part ")[1].startswith("crd" if only == "crd" else "deployment")
