"""A user who installed the wheel, with no Go and no cached binaries, gets from ``fastctl
demo`` and from the ``control_plane`` fixture one clear message naming the two ways to get
the binaries (``fastctl control-plane build`` with Go, or ``KUBEBUILDER_ASSETS``), never a
traceback. Each runs in a child process whose PATH has no ``go`` and whose cache is empty,
as that user's machine would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def no_go_env(tmp_path: Path) -> dict[str, str]:
    """PATH with only this Python (no go), an empty cache, no KUBEBUILDER_ASSETS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "GOROOT")}
    env.update(PATH=str(bin_dir), FASTCTL_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path))
    return env


def assert_says_both_ways(output: str) -> None:
    assert "Traceback" not in output, output
    assert "fastctl control-plane build" in output, output
    assert "set KUBEBUILDER_ASSETS to a directory" in output, output
    assert "Go is not on PATH" in output, output


def test_fastctl_demo_without_go_says_how_to_get_the_binaries(
    no_go_env: dict[str, str],
) -> None:
    demo = subprocess.run(
        [sys.executable, "-m", "fastctl.cli", "demo", "--objects", "1"],
        env=no_go_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert demo.returncode == 1
    lines = demo.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("fastctl: error: control plane: "), lines
    assert_says_both_ways(demo.stderr)


def test_the_control_plane_fixture_without_go_fails_with_the_message(
    no_go_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "test_operator.py").write_text(
        "def test_needs_a_cluster(control_plane):\n    pass\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        env=no_go_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 error" in run.stdout, run.stdout
    assert "fastctl control plane: no etcd/kube-apiserver binaries" in run.stdout
    assert_says_both_ways(run.stdout)
