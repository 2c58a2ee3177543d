"""A kubeconfig or server URL that cannot be valid is fatal at once, naming the file and the
field (`fastctl.kube._kubeconfig_check`), never retried as if the API server were down;
a good kubeconfig, and a stale cluster the current context does not use, still load."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.errors import KubeconfigError
from fastctl.kube._client import load_client
from fastctl.kube._resource import Resource
from fastctl.kube._retry import Backoff, is_transient, resolve_patiently
from fastctl.kube._watcher import watcher

SERVER = "https://127.0.0.1:6443"


def kubeconfig(server: str = SERVER, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "s3cr3t-t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    config.update(changes)
    return config


def write(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_a_good_kubeconfig_loads(tmp_path: Path) -> None:
    client = await load_client(write(tmp_path, kubeconfig()))
    try:
        assert client.configuration.host == SERVER
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("https://127.0.0.1:3999937505", "Port out of range"),
        ("https://", "has no host"),
        ("127.0.0.1:6443", "not an http:// or https:// URL"),
        ("https://10.0.0.1:0", "has port 0"),
        (6443, "missing or not a string"),
    ],
)
async def test_a_server_url_that_cannot_be_valid_is_named_with_its_field(
    tmp_path: Path, server: object, problem: str
) -> None:
    path = write(tmp_path, kubeconfig(server))  # type: ignore[arg-type]
    with pytest.raises(KubeconfigError) as caught:
        await load_client(path)
    message = str(caught.value)
    assert f"invalid kubeconfig {path}: clusters[0].cluster.server" in message
    assert problem in message


async def test_the_password_of_a_server_url_is_not_shown(tmp_path: Path) -> None:
    path = write(tmp_path, kubeconfig("https://admin:hunter22@10.0.0.1:99999"))
    with pytest.raises(KubeconfigError) as caught:
        await load_client(path)
    assert "hunter22" not in str(caught.value)
    assert "10.0.0.1:99999" in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"clusters": 5}, "clusters is a number, not a list"),
        ({"users": [{"name": "u", "user": 7}]}, "users[0].user is a number, not a mapping"),
        ({"contexts": ["x"]}, "contexts[0] is a string, not a mapping"),
        ({"clusters": [{"cluster": {"server": SERVER}}]}, "clusters[0].name is missing"),
        ({"current-context": "nope"}, "current-context names 'nope', which is not among"),
        ({"current-context": None}, "current-context is missing"),
        (
            {"contexts": [{"name": "x", "context": {"cluster": "gone"}}]},
            "contexts[0].context.cluster names 'gone', which is not among clusters (c)",
        ),
    ],
)
async def test_a_broken_kubeconfig_names_the_field(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    path = write(tmp_path, kubeconfig(**changes))
    with pytest.raises(KubeconfigError) as caught:
        await load_client(path)
    assert str(caught.value).startswith(f"invalid kubeconfig {path}: {field}"), caught.value
    assert "not iterable" not in str(caught.value)


async def test_a_file_that_is_not_a_mapping_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, ["a", "list"])
    with pytest.raises(KubeconfigError, match="the file is a list, not a mapping"):
        await load_client(path)


async def test_a_stale_cluster_the_context_does_not_use_is_not_checked(tmp_path: Path) -> None:
    config = kubeconfig()
    config["clusters"].append({"name": "old", "cluster": {"server": "https://:99999999"}})
    client = await load_client(write(tmp_path, config))
    await client.close()


# -- a client configured by hand: discovery and the watcher do not wait for ever ------------


async def test_discovery_with_an_impossible_url_fails_at_once() -> None:
    client = ApiClient(Configuration(host="https://127.0.0.1:3999937505"))
    retried: list[BaseException] = []
    try:
        with pytest.raises(KubeconfigError, match=r"'https://127\.0\.0\.1:3999937505'"):
            await asyncio.wait_for(
                resolve_patiently(
                    client,
                    Resource("v1", "ConfigMap"),
                    backoff=Backoff(initial=0.001, maximum=0.001),
                    on_error=retried.append,
                ),
                timeout=60,  # a hang guard: a retried failure would never end
            )
    finally:
        await client.close()
    assert retried == [], "retried as if the API server were down"


async def test_a_watcher_with_an_impossible_url_fails_at_once() -> None:
    client = ApiClient(Configuration(host="https://127.0.0.1:3999937505"))
    retried: list[BaseException] = []
    resource = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
    try:
        events = watcher(client, resource, on_error=retried.append)
        with pytest.raises(KubeconfigError, match="Port out of range"):
            await asyncio.wait_for(anext(events), timeout=60)  # a hang guard
    finally:
        await client.close()
    assert retried == []


def test_an_invalid_url_is_not_transient() -> None:
    import aiohttp

    assert not is_transient(aiohttp.InvalidUrlClientError("https://:1"))
    assert is_transient(aiohttp.ClientConnectionError("refused"))
