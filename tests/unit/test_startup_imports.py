"""A controller's path to its first reconcile loads neither aiohttp's client, urllib3 nor
prometheus_client's exposition (nor dateutil's parser, multiprocessing's pool or
kubernetes-asyncio's OpenID refresher): `import fastctl`, a client from `load_client`, a Manager
made with it, and that client's object calls (on fastctl's own transport) leave them for
their first use (`fastctl.kube._lazy_import`, `fastctl.kube._lazy_rest`); and that first
use still gets the whole package.

Each check runs in a fresh interpreter: this test process imported all of them long ago.
"""

from __future__ import annotations

from pathlib import Path

from .test_import_cost import _run

HEAVY = (
    "aiohttp.client",
    "aiohttp.connector",
    "aiohttp.web",
    "urllib3.poolmanager",
    "urllib3.util",
    "prometheus_client.exposition",
    "prometheus_client.process_collector",
    "dateutil.parser",
    "multiprocessing.pool",
    "kubernetes_asyncio.config.openid",
)
"""What each loads when it is imported for real (aiohttp's, urllib3's and prometheus_client's
``__init__``), or when its server starts; and what kubernetes-asyncio's ``ApiClient`` and
kubeconfig loaders import for names they call only on paths fastctl does not take."""


def _kubeconfig(tmp_path: Path, server: str, name: str = "kubeconfig") -> Path:
    path = tmp_path / name
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


LOADED = f"""
import sys
def loaded():
    return sorted(n for n in {HEAVY!r} if n in sys.modules)
"""


def test_import_a_client_and_a_manager_leave_the_client_libraries_for_later(
    tmp_path: Path,
) -> None:
    """A Manager registers prometheus_client's process collectors in its registry: the
    package loads then (its exposition with it), and nothing else."""
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:6443")
    got = _run(
        LOADED
        + f"""
import asyncio, json
import fastctl
steps = {{"import": loaded()}}

async def main():
    client = await fastctl.load_client({str(kubeconfig)!r})
    steps["client"] = loaded()
    fastctl.Manager(client, metrics_port=0, probe_port=0)
    steps["manager"] = loaded()
    await client.close()

asyncio.run(main())
print(json.dumps(steps))
"""
    )
    assert got == {
        "import": [],
        "client": [],
        "manager": ["prometheus_client.exposition", "prometheus_client.process_collector"],
    }


SERVER = """
import asyncio

async def answer(reader, writer):
    while True:
        head = await reader.readuntil(b"\\r\\n\\r\\n")
        path = head.split(b" ", 2)[1]
        body = b'{"kind": "ConfigMap", "path": "' + path + b'"}'
        writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                     b"Content-Length: %d\\r\\n\\r\\n%s" % (len(body), body))
        await writer.drain()
"""


def test_object_calls_go_without_aiohttp_which_loads_whole_at_its_first_use(
    tmp_path: Path,
) -> None:
    """Object calls on the lean transport, then a request with a read timeout (as a list
    read page by page is sent): that one goes on kubernetes-asyncio's aiohttp session,
    which is made then, with all of aiohttp. The transport's pool stays; a session
    assigned from outside (an instrumented one) is looked at as before: it has trace
    configs, so requests go on it."""
    got = _run(
        LOADED
        + SERVER
        + f"""
import json, fastctl
from fastctl.kube._http import Timeout, request, request_json
steps = {{}}

async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with open({str(tmp_path / "kubeconfig")!r}, "w") as f:
        f.write(open({str(_kubeconfig(tmp_path, "http://127.0.0.1:1", "template"))!r}).read()
                .replace("http://127.0.0.1:1", f"http://127.0.0.1:{{port}}"))
    client = await fastctl.load_client({str(tmp_path / "kubeconfig")!r})
    path = "/api/v1/namespaces/a/configmaps/b"
    steps["lean"] = [await request_json(client, "GET", path) for _ in range(2)]
    steps["lean loaded"] = loaded()
    timeout = Timeout(sock_connect=5, sock_read=5)
    async with await request(client, "GET", path, client_timeout=timeout) as resp:
        steps["aiohttp"] = [type(resp).__module__, json.loads(await resp.read())]
    steps["aiohttp loaded"] = [n for n in loaded() if n.startswith("aiohttp.")]
    import aiohttp
    from fastctl.kube._transport import pool_for
    steps["pool kept"] = pool_for(client) is not None  # the session made since changes nothing
    real = client.rest_client.pool_manager
    client.rest_client.pool_manager = aiohttp.ClientSession(trace_configs=[aiohttp.TraceConfig()])
    steps["pool once a session is assigned"] = pool_for(client) is not None
    await client.rest_client.pool_manager.close()
    client.rest_client.pool_manager = real
    await client.close()
    server.close()

asyncio.run(main())
print(json.dumps(steps))
"""
    )
    answer = {"kind": "ConfigMap", "path": "/api/v1/namespaces/a/configmaps/b"}
    assert got == {
        "lean": [answer, answer],
        "lean loaded": [],
        "aiohttp": ["aiohttp.client_reqrep", answer],
        "aiohttp loaded": ["aiohttp.client", "aiohttp.connector"],
        "pool kept": True,
        "pool once a session is assigned": False,
    }
