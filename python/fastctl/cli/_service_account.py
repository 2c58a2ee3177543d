"""``fastctl control-plane kubeconfig --service-account NS/NAME``: a kubeconfig that acts as
an operator's ServiceAccount, to run the operator locally under the Role its manifests grant.

An operator runs in its cluster as a ServiceAccount; run from a laptop with the admin
kubeconfig, it can do anything, so a rule missing from its Role shows up only once it is
deployed. Running it locally as its ServiceAccount shows the 403 at once. The admin
credentials of the control plane (or of ``--kubeconfig``) ask the TokenRequest API for a
token of the ServiceAccount, which expires (``--expiration``), so nothing long-lived is
written: the kubeconfig holds the server, its CA and that token, and is readable by its
owner only.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

from fastctl.cli import CliError

__all__ = ["parse_service_account", "write_service_account_kubeconfig"]


def parse_service_account(value: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` -> (namespace, name), or `CliError` saying the expected form."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise CliError(f"--service-account takes NAMESPACE/NAME, got {value!r}", 2)
    return namespace, name


def write_service_account_kubeconfig(
    admin: Path, service_account: str, out: Path, expiration: int
) -> Path:
    """Mint a token for `service_account` with the credentials of the kubeconfig `admin`
    and write a kubeconfig using it to `out` (mode 0600); returns `out`."""
    namespace, name = parse_service_account(service_account)
    token, expires, cluster = asyncio.run(_mint(admin, namespace, name, expiration))
    text = _kubeconfig_text(namespace, name, token, cluster)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.touch(mode=0o600)
    partial.chmod(0o600)  # before the token is in it
    partial.write_text(text)
    partial.replace(out)
    print(
        f"fastctl: {out}: ServiceAccount {namespace}/{name}, token expires {expires}",
        file=sys.stderr,
    )
    return out


async def _mint(
    admin: Path, namespace: str, name: str, expiration: int
) -> tuple[str, str, dict[str, Any]]:
    """(token, its expiry, the kubeconfig's ``cluster``), minted with `admin`'s credentials."""
    import orjson

    from fastctl.errors import ApiError, KubeconfigError
    from fastctl.kube._client import load_client
    from fastctl.kube._http import request_json

    try:
        client = await load_client(admin)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None
    async with client:
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration},
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        try:
            minted = await request_json(client, "POST", path, body=orjson.dumps(request))
        except ApiError as exc:
            if exc.status == 404:
                raise CliError(
                    f"ServiceAccount {namespace}/{name} does not exist: apply the "
                    "ServiceAccount, Role and RoleBinding of `fastctl manifests` first"
                ) from None
            raise CliError(f"cannot mint a token for {namespace}/{name}: {exc}") from None
        config = client.configuration
        cluster: dict[str, Any] = {"server": config.host}
        if not config.verify_ssl:
            cluster["insecure-skip-tls-verify"] = True
        elif config.ssl_ca_cert:
            cluster["certificate-authority"] = config.ssl_ca_cert  # read in `_kubeconfig_text`
    status = minted["status"]
    return str(status["token"]), str(status.get("expirationTimestamp", "?")), cluster


def _kubeconfig_text(namespace: str, name: str, token: str, cluster: dict[str, Any]) -> str:
    """The kubeconfig: `cluster` with its CA inlined (the admin's may be a temporary file),
    the token as the user, a context in `namespace`."""
    import yaml  # type: ignore[import-untyped]

    ca = cluster.pop("certificate-authority", None)
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(Path(ca).read_bytes()).decode()
    user = f"system:serviceaccount:{namespace}:{name}"
    context = f"{namespace}-{name}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fastctl", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": "fastctl", "user": user, "namespace": namespace},
            }
        ],
        "current-context": context,
    }
    text: str = yaml.safe_dump(document, sort_keys=False)
    return text
