"""``fastctl control-plane`` without servers: ``down`` removes what ``up`` left (or keeps it
with ``--keep``), and ``up`` refuses an API server flag that is not one. Starting one for
real, with flags that reach kube-apiserver, is in tests/kube/test_control_plane.py."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from fastctl.cli import main


def _run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit:
            code = int(exit.code or 0)
    return code, err.getvalue()


@pytest.fixture
def leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What a control plane whose supervisor is gone left: etcd data, logs, a stale state."""
    monkeypatch.setenv("FASTCTL_RUN_DIR", str(tmp_path / "run"))
    directory = tmp_path / "run" / "dev"
    (directory / "data" / "etcd-data" / "member").mkdir(parents=True)
    (directory / "data" / "etcd-data" / "member" / "wal").write_bytes(b"w" * 100_000)
    (directory / "data" / "kube-apiserver.log").write_text("log\n")
    (directory / "supervisor.log").write_text("log\n")
    (directory / "state.json").write_text('{"name": "dev", "pid": 999999999, "start_ticks": 0}')
    return directory


def test_down_removes_what_up_left(leftovers: Path) -> None:
    code, err = _run("control-plane", "down", "--name", "dev")
    assert code == 0
    assert not leftovers.exists()
    assert f"removed {leftovers} (0.1 MB)" in err


def test_down_keep_leaves_the_files(leftovers: Path) -> None:
    code, err = _run("control-plane", "down", "--name", "dev", "--keep")
    assert code == 0
    assert (leftovers / "data" / "kube-apiserver.log").exists()
    assert f"kept its files in {leftovers}" in err


def test_up_refuses_an_apiserver_arg_that_is_not_a_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTCTL_RUN_DIR", str(tmp_path / "run"))
    code, err = _run("control-plane", "up", "--apiserver-arg", "audit-log-path=/tmp/a")
    assert code == 1
    assert "--apiserver-arg 'audit-log-path=/tmp/a': a kube-apiserver flag" in err
