"""Making an `ApiClient`: from a kubeconfig, or in-cluster, with errors that say what failed.

kubernetes-asyncio reports a missing or malformed kubeconfig with exceptions of several
kinds (``ConfigException``, ``FileNotFoundError``, YAML errors) whose messages rarely name
the file. `load_client` turns all of them into one `KubeconfigError` that names the file
and the cause, which is what a CLI user or an operator's logs need; never a credential:
the values of the file's tokens, passwords and keys are replaced by ``<redacted>`` in the
message (a YAML error may quote the line it stopped at).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.errors import KubeconfigError
from fastctl.kube._kubeconfig_check import check_kubeconfig, check_server
from fastctl.kube._lazy_import import stand_ins_for
from fastctl.kube._lazy_rest import LazyRest, new_client
from fastctl.kube._stand_ins import import_with_stand_ins

__all__ = ["KubeconfigError", "load_client"]


async def load_client(kubeconfig: str | os.PathLike[str] | None = None) -> ApiClient:
    """An ApiClient for `kubeconfig`; without one, ``$KUBECONFIG``, ``~/.kube/config``, or
    the in-cluster service account, in that order."""
    # Imported here, not with fastctl: the loaders bring PyYAML and importlib.metadata,
    # which only loading a configuration needs; their OpenID token refresher (and the
    # aiohttp it loads) only a kubeconfig with an OIDC user (`_lazy_import.STAND_INS`).
    name = "kubernetes_asyncio.config"
    kube_config: Any = import_with_stand_ins(name, stand_ins_for(name))

    cfg = Configuration()
    path = kubeconfig if kubeconfig is not None else _default_kubeconfig()
    if path is None:
        try:
            kube_config.load_incluster_config(client_configuration=cfg)
        except Exception as exc:
            raise KubeconfigError(
                f"no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster ({exc})"
            ) from None
        check_server(cfg.host, "in-cluster configuration ($KUBERNETES_SERVICE_HOST/PORT)")
        return _without_env_lookups(new_client(cfg))
    file = _readable(path)
    _check_shape(file)
    try:
        await kube_config.load_kube_config(config_file=str(file), client_configuration=cfg)
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        detail = _without_credentials(detail, file)
        raise KubeconfigError(f"invalid kubeconfig {file}: {detail}") from None
    return _without_env_lookups(new_client(cfg))


def _check_shape(file: Path) -> None:
    """Fail naming the field when the file parses but cannot be a kubeconfig, or when its
    server URL can never be reached (`check_kubeconfig`); a file that does not parse is
    left to the loader, whose YAML error says where."""
    import yaml  # type: ignore[import-untyped]

    try:
        parsed = yaml.safe_load(file.read_text(errors="replace"))
    except (OSError, yaml.YAMLError):
        return
    try:
        check_kubeconfig(parsed, file)
    except KubeconfigError as exc:  # it quotes names and URLs: a token pasted there, too
        raise KubeconfigError(_without_credentials(str(exc), file)) from None


_CREDENTIAL = re.compile(
    r"""(?:token|password|secret|key-data|certificate-data|authority-data|credential)
    [\w-]*["']?\s*[:=]\s*["']?([^\s"',}]+)""",
    re.IGNORECASE | re.VERBOSE,
)


def _without_credentials(text: str, file: Path) -> str:
    """`text` with every credential value of the kubeconfig `file` replaced by
    ``<redacted>`` (any ``token: ...``, ``password: ...``, ``*-data: ...`` in it, and in
    `text` itself, since the file may be too broken to read)."""
    try:
        source = file.read_text(errors="replace")
    except OSError:
        source = ""
    values = {m.group(1) for m in _CREDENTIAL.finditer(source + "\n" + text)}
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text


_PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy")


def _without_env_lookups(client: ApiClient) -> ApiClient:
    """Skip aiohttp's per-request proxy and ``~/.netrc`` lookups when there is no proxy.

    kubernetes-asyncio opens its session with ``trust_env=True``, so every request looks up
    proxy variables and reads ``~/.netrc`` in a worker thread: about 30 % of an operator's
    CPU in the end-to-end benchmark (a GET went from ~370 to ~850 µs of client CPU). With no
    proxy variable set there is nothing to find, and the API server's credentials never
    come from netrc, so the lookups are switched off. With a proxy variable set, or a proxy
    in the kubeconfig, nothing changes.
    """
    if client.configuration.proxy or any(os.environ.get(v) for v in _PROXY_VARIABLES):
        return client
    if isinstance(client.rest_client, LazyRest):  # its session, when made, will not look
        client.rest_client.trust_env = False
        return client
    session = client.rest_client.pool_manager
    if hasattr(session, "_trust_env"):
        session._trust_env = False
    return client


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
