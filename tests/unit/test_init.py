"""``fastctl init``: the project it writes passes its own tests on the fake cluster (its
reconcile, its webhooks called by the fake, a conflict retried, its manifests), and
``fastctl crd`` and ``fastctl manifests`` take its operator as it is, webhooks included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastctl
from fastctl.cli import CliError, main
from fastctl.cli.crd import render
from fastctl.cli.init import write_project

PYTHONPATH = str(Path(fastctl.__file__).resolve().parents[1])


def _env(project: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(project), PYTHONPATH])
    return env


def test_the_new_project_passes_its_own_tests_on_the_fake_cluster(tmp_path: Path) -> None:
    project = tmp_path / "demo-op"
    assert main(["init", "demo-op", "--directory", str(project)]) == 0
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == [
        ".gitignore",
        "Dockerfile",
        "README.md",
        "demo_op/__init__.py",
        "demo_op/operator.py",
        "pyproject.toml",
        "tests/test_operator.py",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not kube"],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed, 1 deselected" in result.stdout


def test_its_operator_has_a_crd_and_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_project(tmp_path / "p", "shop-op", group="shop.example.org", kind="Shop")
    monkeypatch.syspath_prepend(str(tmp_path / "p"))
    crd = render(["shop_op.operator:Shop"])
    assert "name: shops.shop.example.org" in crd
    assert main(["manifests", "shop_op.operator:make", "--image", "shop:1"]) == 0
    manifests = capsys.readouterr().out
    assert "kind: CustomResourceDefinition" in manifests
    assert "kind: Deployment" in manifests
    assert "kind: MutatingWebhookConfiguration" in manifests
    assert "kind: ValidatingWebhookConfiguration" in manifests
    assert "validate.shop.example.org" in manifests
    readme = (tmp_path / "p" / "README.md").read_text()
    assert "python -m pip install -e '.[test]'\npython -m pytest\n" in readme
    assert "fastctl run shop_op.operator:make --webhook-managed shop-op" in readme
    assert "PIP_FIND_LINKS" in readme
    # One namespace, as `fastctl run --namespace` and `fastctl manifests --namespace` ask:
    # the factory takes it, and the rules land in that namespace's Role.
    args = ["manifests", "shop_op.operator:make", "--image", "shop:1", "--namespace", "shop"]
    assert main(args) == 0
    scoped = capsys.readouterr().out
    assert "kind: Role\nmetadata:\n  name: operator\n  namespace: shop\n" in scoped


def test_it_refuses_a_bad_name_and_a_used_directory(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="invalid project name"):
        write_project(tmp_path / "x", "Bad_Name")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("")
    with pytest.raises(CliError, match="not empty"):
        write_project(tmp_path / "used", "fine")
