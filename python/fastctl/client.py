"""Making an `ApiClient`: from a kubeconfig, or in-cluster, with errors that say what failed.

kubernetes-asyncio reports a missing or malformed kubeconfig with exceptions of several
kinds (``ConfigException``, ``FileNotFoundError``, YAML errors) whose messages rarely name
the file. `load_client` turns all of them into one `KubeconfigError` that names the file
and the cause, which is what a CLI user or an operator's logs need.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

__all__ = ["KubeconfigError", "load_client"]


class KubeconfigError(Exception):
    """No usable cluster configuration (unreadable kubeconfig, and not in a cluster)."""


async def load_client(kubeconfig: str | os.PathLike[str] | None = None) -> ApiClient:
    """An ApiClient for `kubeconfig`; without one, ``$KUBECONFIG``, ``~/.kube/config``, or
    the in-cluster service account, in that order."""
    cfg = Configuration()
    path = kubeconfig if kubeconfig is not None else _default_kubeconfig()
    if path is None:
        try:
            kube_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise KubeconfigError(
                f"no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster ({exc})"
            ) from None
        return ApiClient(cfg)
    file = _readable(path)
    try:
        await kube_config.load_kube_config(config_file=str(file), client_configuration=cfg)
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KubeconfigError(f"invalid kubeconfig {file}: {detail}") from None
    return ApiClient(cfg)


def _readable(path: str | os.PathLike[str]) -> Path:
    """The kubeconfig's path, once it is known to be readable (a small sync read at start)."""
    file = Path(path).expanduser()
    try:
        with file.open("rb"):
            pass
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {file}: {exc.strerror or exc}") from None
    return file


def _default_kubeconfig() -> str | None:
    env = os.environ.get("KUBECONFIG")
    if env:
        return env.split(os.pathsep)[0]
    home = Path("~/.kube/config").expanduser()
    return str(home) if home.exists() else None
