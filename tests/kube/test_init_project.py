"""``fastctl init``'s project passes all its tests, the real control plane's half too, in a
process of its own (which starts its own control plane, as the project's CI would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fastctl
from fastctl.cli import main
from fastctl.testing import ControlPlane


def test_the_new_project_passes_all_its_tests(tmp_path: Path, control_plane: ControlPlane) -> None:
    del control_plane  # only for the marker and the binaries: the project starts its own
    project = tmp_path / "demo-op"
    assert main(["init", "demo-op", "--directory", str(project)]) == 0
    env = dict(os.environ)
    fastctl_path = str(Path(fastctl.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([str(project), fastctl_path])
    env["FASTCTL_NO_BUILD"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout
