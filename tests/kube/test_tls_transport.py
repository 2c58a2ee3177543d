"""The lean transport's TLS in the extension (rustls) against the real API server: a
client certificate (the admin's kubeconfig) and a bearer token (a ServiceAccount's, in a
kubeconfig of its own) each authenticate over it, a watch streams over it, and a server
name the serving certificate lacks is refused saying so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube import load_client
from fastctl.kube._http import request, request_json
from fastctl.kube._lazy_rest import new_client
from fastctl.kube._tls_connection import TlsConnection
from fastctl.kube._transport import pool_for
from fastctl.kube._watch_stream import LeanStream
from fastctl.testing import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

REVIEW = orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})


async def whoami(client: ApiClient) -> str:
    answer = await request_json(
        client, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=REVIEW
    )
    name: str = answer["status"]["userInfo"]["username"]
    return name


def on_rustls(client: ApiClient) -> None:
    pool = pool_for(client)
    assert pool is not None
    assert pool.tls is not None, "rustls's TLS, not Python's"
    assert pool.idle
    assert all(isinstance(conn, TlsConnection) for conn in pool.idle)


def token_kubeconfig(cp: ControlPlane, namespace: str, path: Path) -> Path:
    def admin(method: str, url: str, body: Any) -> Any:
        status, answer = cp.api_request(method, url, body)
        assert status < 300, f"{method} {url}: HTTP {status}: {answer}"
        return answer

    base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    admin("POST", base, {"metadata": {"name": "tls-reader"}})
    minted = admin("POST", f"{base}/tls-reader/token", {"spec": {"expirationSeconds": 3600}})
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)},
            }
        ],
        "users": [{"name": "u", "user": {"token": minted["status"]["token"]}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_bytes(orjson.dumps(config))
    return path


async def test_a_client_certificate_and_a_token_over_rustls(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Broken once: the client certificate left out of rustls's config (red: the admin
    is system:anonymous, refused)."""
    async with await load_client(control_plane.kubeconfig) as admin:
        assert await whoami(admin) not in ("", "system:anonymous")
        on_rustls(admin)
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=30)
        stream = await request(
            admin, "GET", path, query={"watch": "true", "timeoutSeconds": "2"},
            client_timeout=timeout, stream=True,
        )  # fmt: skip
        assert isinstance(stream, LeanStream)
        async with stream.decode(
            strip=False, identity=None, replace=False, max_line=1 << 20, protobuf=False
        ):
            body = {"metadata": {"name": "over-rustls"}, "data": {"a": "b"}}
            await request_json(admin, "POST", path, body=orjson.dumps(body))
            seen: list[str] = []
            while not seen:
                batch = await asyncio.wait_for(stream.read(), 10)
                assert batch is not None
                seen += [frame[0] for frame in batch.frames]
            assert seen[0] == "ADDED"
    kubeconfig = token_kubeconfig(control_plane, namespace, tmp_path / "token.kubeconfig")
    async with await load_client(kubeconfig) as reader:
        assert await whoami(reader) == f"system:serviceaccount:{namespace}:tls-reader"
        on_rustls(reader)


async def test_a_name_the_serving_certificate_lacks_is_refused(
    control_plane: ControlPlane,
) -> None:
    cfg = Configuration()
    await config.load_kube_config(
        config_file=str(control_plane.kubeconfig), client_configuration=cfg
    )
    cfg.tls_server_name = "not-the-api-server.example"
    async with new_client(cfg) as admin:
        with pytest.raises(aiohttp.ClientConnectorCertificateError) as caught:
            await whoami(admin)
        assert "not valid for 'not-the-api-server.example'" in str(caught.value)
