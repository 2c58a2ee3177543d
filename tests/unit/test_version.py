"""One version, written once in Cargo.toml: the installed metadata, ``fastctl.__version__``,
``fastctl --version`` and the version compiled into the extension all say the same, and the
fallback for an uninstalled source tree is the extension's."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import fastctl
import fastctl._version
from fastctl import _core
from fastctl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def cargo_version() -> str:
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert isinstance(version, str)
    return version


def test_the_package_and_the_extension_have_cargo_tomls_version() -> None:
    assert fastctl.__version__ == cargo_version()
    assert _core.__version__ == cargo_version()


def test_fastctl_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastctl {cargo_version()}"


def test_the_installed_metadata_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: f"{name}-from-metadata")
    assert fastctl._version.version() == "fastctl-from-metadata"


def test_without_metadata_the_extensions_version_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert fastctl._version.version() == cargo_version()
