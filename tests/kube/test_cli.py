"""The ``fastctl`` command line as a user runs it: a subprocess, exit codes, one-line errors."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fastctl.testing.control_plane import ControlPlane

FASTCTL = [sys.executable, "-m", "fastctl.cli"]


def fastctl(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FASTCTL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fastctl: error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_unimportable_target() -> None:
    proc = fastctl("run", "no_such_module_xyz:controllers")
    assert_one_line_error(proc, "cannot import no_such_module_xyz", "ModuleNotFoundError")


def test_missing_attribute() -> None:
    proc = fastctl("run", "fastctl.demo.widgets:nope")
    assert_one_line_error(proc, "has no attribute 'nope'")


def test_target_without_attr() -> None:
    proc = fastctl("run", "fastctl.demo.widgets")
    assert_one_line_error(proc, "expected module:attr")


def test_unreadable_kubeconfig(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    proc = fastctl("run", "fastctl.demo.widgets:make_controller", "--kubeconfig", str(missing))
    assert_one_line_error(proc, "cannot read kubeconfig", str(missing))


def test_invalid_kubeconfig(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("this: is: not: a kubeconfig")
    proc = fastctl("run", "fastctl.demo.widgets:make_controller", "--kubeconfig", str(bad))
    assert_one_line_error(proc, "invalid kubeconfig", str(bad))


IMPOSSIBLE = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:3999937505", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abcdefgh}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def test_an_impossible_server_url_ends_the_run_at_once_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "impossible.yaml"
    bad.write_text(IMPOSSIBLE)
    # The generous timeout only guards against a hang: a retried URL never ends.
    proc = fastctl("run", "fastctl.demo.widgets:make_controller", "--kubeconfig", str(bad))
    assert_one_line_error(
        proc, str(bad), "clusters[0].cluster.server", "https://127.0.0.1:3999937505"
    )
    assert "attempt" not in proc.stderr, "retried as if the server were down"


def test_a_broken_kubeconfig_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(IMPOSSIBLE.replace("users:\n- name: u\n  user: {token: abcdefgh}", "users: 7"))
    proc = fastctl("run", "fastctl.demo.widgets:make_controller", "--kubeconfig", str(bad))
    assert_one_line_error(proc, str(bad), "users is a number, not a list")
    assert "not iterable" not in proc.stderr


@pytest.mark.kube
def test_metrics_port_in_use(control_plane: ControlPlane) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = fastctl(
            "run",
            "fastctl.demo.widgets:make_controller",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--metrics-port",
            str(port),
            "--probe-port",
            "0",
        )
    assert_one_line_error(proc, str(port), "in use")


@pytest.mark.kube
def test_demo_runs_to_completion_with_small_n() -> None:
    proc = fastctl("demo", "--objects", "20", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "summary: 20 Widgets ready" in proc.stdout
    assert "0 errors" in proc.stdout
    # Two changes per Widget need 40 reconciles; the generation filter and ignore_own_writes
    # keep the echoes of the operator's own status and ConfigMap writes from adding more
    # (without them it is about 3.7 per Widget). The bound is the demo's target, 620 for 300.
    reconciles = int(re.search(r"(\d+) reconciles, ", proc.stdout).group(1))  # type: ignore[union-attr]
    assert reconciles <= 41, proc.stdout
    # The demo's webhook end checks, each a call the API server made to the demo's process.
    assert "validating webhook refused a Widget" in proc.stderr
    assert "admitted with a warning: " in proc.stderr
    assert "defaulting webhook set spec.owner" in proc.stderr
    assert "as v1alpha1 through the conversion webhook" in proc.stderr
