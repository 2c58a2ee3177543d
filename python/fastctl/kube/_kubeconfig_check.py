"""Checking a kubeconfig before kubernetes-asyncio reads it, so a broken one is named.

kubernetes-asyncio reads a kubeconfig as it goes and fails wherever a value has the wrong
shape, with the error of the line that tripped: ``'int' object is not iterable`` for a
``clusters: 5``, a bare ``AssertionError`` for a ``current-context`` that names no context.
Worse, it takes any string as the server, so a URL that can never be reached (port
3999937505, no host, no scheme) only fails at the first request, as a client error that
looks like a network failure, and an operator would wait for that "API server" for ever.

`check_kubeconfig` reads the parsed file first and raises `KubeconfigError` naming the file
and the field (``clusters[0].cluster.server``) for the shapes the loader cannot take and for
the server URL of the context in use; `check_server` is the URL check alone, for a
configuration made some other way (in-cluster, or a `Configuration` built by hand). Entries
the current context does not use are only checked for shape, never for their values: a
kubeconfig with a stale cluster beside the live one keeps working.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yarl
from kubernetes_asyncio.client import ApiClient

from fastctl.errors import KubeconfigError

__all__ = ["check_kubeconfig", "check_server", "invalid_url_error"]

_SECTIONS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))


def check_server(server: object, where: str) -> None:
    """Raise `KubeconfigError` unless `server` is an ``http``/``https`` URL with a host
    and a port in 1-65535; `where` names the file and field it came from."""
    if not isinstance(server, str) or not server.strip():
        raise KubeconfigError(f"{where}: the API server URL is missing or not a string")
    shown = repr(_USERINFO.sub("//<redacted>@", server))
    try:
        url = yarl.URL(server)
        port = url.port
    except ValueError as exc:
        raise KubeconfigError(f"{where}: {shown} is not a valid URL ({exc})") from None
    if url.scheme not in ("http", "https"):
        raise KubeconfigError(
            f"{where}: {shown} is not an http:// or https:// URL (an API server URL looks "
            "like https://host:6443)"
        )
    if not url.host:
        raise KubeconfigError(f"{where}: {shown} has no host")
    if port is None or not 1 <= port <= 65535:
        raise KubeconfigError(f"{where}: {shown} has port {port}, not one in 1-65535")


_USERINFO = re.compile(r"//[^/@]*@")
"""The ``user:password@`` of a URL, never shown in an error."""


def invalid_url_error(client: ApiClient, exc: aiohttp.InvalidURL) -> KubeconfigError:
    """The error for a request whose URL aiohttp refused: `check_server`'s reason about the
    client's server URL when it finds one, else aiohttp's. Discovery and the watcher raise
    it instead of retrying: no wait makes such a URL usable."""
    host = client.configuration.host
    try:
        check_server(host, "the client's API server URL")
    except KubeconfigError as invalid:
        return invalid
    return KubeconfigError(f"the client's API server URL is not usable: {exc!r}")


def check_kubeconfig(config: object, file: Path) -> None:
    """Raise `KubeconfigError` naming `file` and the field if `config` (the parsed YAML)
    cannot be a usable kubeconfig (see the module docstring)."""

    def fail(field: str, problem: str) -> KubeconfigError:
        return KubeconfigError(f"invalid kubeconfig {file}: {field} {problem}")

    if not isinstance(config, Mapping):
        raise fail("the file", f"is a {_kind(config)}, not a mapping of kubeconfig fields")
    named: dict[str, dict[str, tuple[str, Mapping[str, Any]]]] = {}
    for section, inner in _SECTIONS:
        entries = config.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise fail(section, f"is a {_kind(entries)}, not a list")
        named[section] = {}
        for i, entry in enumerate(entries):
            field = f"{section}[{i}]"
            if not isinstance(entry, Mapping):
                raise fail(field, f"is a {_kind(entry)}, not a mapping")
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise fail(f"{field}.name", "is missing or not a string")
            body = entry.get(inner)
            if body is None and inner == "user":
                body = {}  # a user without credentials (a proxy that authenticates)
            if not isinstance(body, Mapping):
                raise fail(f"{field}.{inner}", f"is a {_kind(body)}, not a mapping")
            named[section].setdefault(name, (f"{field}.{inner}", body))
    current = config.get("current-context")
    if not isinstance(current, str) or not current:
        raise fail("current-context", "is missing or not a string")
    if current not in named["contexts"]:
        known = ", ".join(sorted(named["contexts"])) or "none"
        raise fail("current-context", f"names {current!r}, which is not among contexts ({known})")
    field, context = named["contexts"][current]
    cluster = context.get("cluster")
    if not isinstance(cluster, str) or cluster not in named["clusters"]:
        known = ", ".join(sorted(named["clusters"])) or "none"
        raise fail(f"{field}.cluster", f"names {cluster!r}, which is not among clusters ({known})")
    field, body = named["clusters"][cluster]
    check_server(body.get("server"), f"invalid kubeconfig {file}: {field}.server")


def _kind(value: object) -> str:
    """What a YAML value is, in the file's own terms."""
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
    }.get(type(value), type(value).__name__)
