"""``fastctl control-plane kubeconfig --service-account``, without a cluster: the arguments it
refuses, and that the kubeconfig it writes is read back as the token on the same server
(tests/kube/test_service_account.py mints a real token and uses it)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from kubernetes_asyncio.client import Configuration

from fastctl._pki import CertificateAuthority
from fastctl.cli import CliError, main
from fastctl.cli._service_account import _kubeconfig_text, parse_service_account
from fastctl.kube._client import load_client


def test_the_service_account_is_namespace_slash_name() -> None:
    assert parse_service_account("shop/my-operator") == ("shop", "my-operator")
    for bad in ("my-operator", "/x", "shop/", "a/b/c"):
        with pytest.raises(CliError, match="NAMESPACE/NAME"):
            parse_service_account(bad)


def test_a_token_shorter_than_the_servers_minimum_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "control-plane",
            "kubeconfig",
            "--service-account",
            "a/b",
            "--expiration",
            "60",
            "--kubeconfig",
            str(tmp_path / "unused"),
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "fastctl: error: --expiration is at least 600 s (the API server's minimum), got 60"
    )


async def _configuration(path: Path) -> Configuration:
    async with await load_client(path) as api:
        cfg: Configuration = api.configuration
    return cfg


def test_the_written_kubeconfig_is_the_token_on_the_same_server(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki").cert_file
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": str(ca)}
    text = _kubeconfig_text("shop", "op", "the-token", cluster)
    path = tmp_path / "sa.kubeconfig"
    path.write_text(text)
    cfg = asyncio.run(_configuration(path))
    assert cfg.host == "https://127.0.0.1:6443"
    assert cfg.api_key["BearerToken"].removeprefix("Bearer ") == "the-token"
    assert cfg.ssl_ca_cert is not None
    assert Path(cfg.ssl_ca_cert).read_bytes() == ca.read_bytes()
    assert base64.b64encode(ca.read_bytes()).decode() in text  # inlined, not a path
    assert str(ca) not in text
