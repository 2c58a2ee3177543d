"""load_client: clear errors, and no per-request environment lookups without a proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastctl.kube._client import KubeconfigError, load_client
from fastctl.testing.control_plane import ControlPlane


async def test_no_proxy_means_no_per_request_env_lookups(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    client = await load_client(control_plane.kubeconfig)
    try:
        assert client.rest_client.pool_manager._trust_env is False
    finally:
        await client.close()


async def test_a_proxy_variable_keeps_the_env_lookups(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    client = await load_client(control_plane.kubeconfig)
    try:
        assert client.rest_client.pool_manager._trust_env is True
    finally:
        await client.close()


async def test_an_unreadable_kubeconfig_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=r"cannot read kubeconfig .*nope\.yaml"):
        await load_client(tmp_path / "nope.yaml")
