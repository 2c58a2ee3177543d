"""The release pipeline, checked without running it: the workflows are valid GitHub Actions
workflows (the schema check-jsonschema vendors, so no network), the release workflow builds
the Linux wheels exactly as scripts/build-wheels does (same targets, tags and maturin
flags), smoke-tests every one of them, pins the same maturin as requirements-dev.txt, and
publishes only from a version tag with trusted publishing."""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"


def load_release() -> dict[str, Any]:
    yaml = importlib.import_module("yaml")
    data: dict[Any, Any] = yaml.safe_load(RELEASE.read_text())
    if True in data:  # YAML 1.1 reads the bare key `on` as true
        data["on"] = data.pop(True)
    return data


def script_wheels() -> set[tuple[str, str]]:
    """The (Rust target, platform tag) pairs of scripts/build-wheels' WHEELS array."""
    text = (ROOT / "scripts" / "build-wheels").read_text()
    block = re.search(r"^WHEELS=\(\n(.*?)^\)", text, re.M | re.S)
    assert block is not None, "scripts/build-wheels has no WHEELS=( ... ) array"
    pairs = {tuple(shlex.split(line)[0].split()) for line in block[1].strip().splitlines()}
    assert all(len(pair) == 2 for pair in pairs), pairs
    return {(a, b) for a, b in pairs}


def script_maturin_flags() -> list[str]:
    """The flags of the ``maturin build`` line of scripts/build-wheels (values dropped)."""
    text = (ROOT / "scripts" / "build-wheels").read_text()
    line = next(li for li in text.splitlines() if li.strip().startswith("maturin build "))
    return sorted(word for word in shlex.split(line) if word.startswith("--"))


def linux_build_step(release: dict[str, Any]) -> dict[str, Any]:
    steps = release["jobs"]["linux"]["steps"]
    [step] = [s for s in steps if str(s.get("uses", "")).startswith("PyO3/maturin-action@")]
    return step["with"]  # type: ignore[no-any-return]


@pytest.mark.skipif(shutil.which("check-jsonschema") is None, reason="check-jsonschema missing")
@pytest.mark.parametrize("workflow", sorted(WORKFLOWS.glob("*.yml")), ids=lambda p: p.name)
def test_the_workflow_is_valid_against_githubs_schema(workflow: Path) -> None:
    check = subprocess.run(
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_release_builds_the_linux_wheels_the_script_builds() -> None:
    release = load_release()
    matrix = release["jobs"]["linux"]["strategy"]["matrix"]["include"]
    assert {(m["target"], m["compatibility"]) for m in matrix} == script_wheels()
    build = linux_build_step(release)
    assert build["target"] == "${{ matrix.target }}"
    assert build["container"] == "off", "a container would build differently from the script"
    args = shlex.split(build["args"].replace("${{ matrix.compatibility }}", "TAG"))
    flags = sorted([*(a for a in args if a.startswith("--")), "--target"])
    assert flags == script_maturin_flags()
    assert args[args.index("--compatibility") + 1] == "TAG"


def test_every_linux_wheel_is_smoke_tested() -> None:
    release = load_release()
    smoked = {m["target"] for m in release["jobs"]["linux-smoke"]["strategy"]["matrix"]["include"]}
    assert smoked == {target for target, _ in script_wheels()}
    for job in ("macos", "windows", "sdist"):
        runs = " ".join(str(step.get("run", "")) for step in release["jobs"][job]["steps"])
        assert "scripts/smoke-test-wheel" in runs, f"{job} does not smoke-test what it built"


def test_the_release_uses_the_pinned_maturin() -> None:
    pins = (ROOT / "requirements-dev.txt").read_text()
    pinned = re.search(r"^maturin==(\S+)$", pins, re.M)
    assert pinned is not None
    assert load_release()["env"]["MATURIN_VERSION"] == f"v{pinned[1]}"
    assert re.search(r"^ziglang==\S+$", pins, re.M), "the --zig builds need ziglang pinned"


def test_only_a_version_tag_publishes_with_trusted_publishing() -> None:
    release = load_release()
    assert release["on"]["push"] == {"tags": ["v*"]}
    publish = release["jobs"]["publish"]
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"]["id-token"] == "write"
    builds = {name for name in release["jobs"] if name not in ("publish",)}
    assert set(publish["needs"]) == builds, "publish must wait for every build and check"
    steps = " ".join(str(step.get("uses", "")) for step in publish["steps"])
    assert "pypa/gh-action-pypi-publish@" in steps
    assert "password" not in str(publish), "trusted publishing needs no token"
