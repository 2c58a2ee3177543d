"""The local control plane (etcd + kube-apiserver) against kubernetes-asyncio: real objects,
a CRD with a status subresource, restarts, two control planes at once, port conflicts,
clear errors, and no orphan processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from fastctl.testing import (
    BinariesNotFoundError,
    BuildError,
    ControlPlane,
    StartupError,
    build_binaries,
)
from fastctl.testing import control_plane as control_plane_module
from fastctl.testing._process import ProcessRecord, leftover_processes

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]
MERGE = "application/merge-patch+json"


async def _client(kubeconfig: Path) -> ApiClient:
    return await config.new_client_from_config(str(kubeconfig), persist_config=False)


def _configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Any:
    return k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, labels=labels or {}), data=data)


# -- the API through kubernetes-asyncio --------------------------------------------------


async def test_configmap_create_list_patch_delete(client: ApiClient, namespace: str) -> None:
    v1 = k8s.CoreV1Api(client)
    created = await v1.create_namespaced_config_map(
        namespace, _configmap("one", {"a": "1"}, {"app": "demo"})
    )
    assert created.metadata.uid
    await v1.create_namespaced_config_map(namespace, _configmap("two", {"a": "2"}))

    listed = await v1.list_namespaced_config_map(namespace, label_selector="app=demo")
    assert [cm.metadata.name for cm in listed.items] == ["one"]

    patched = await v1.patch_namespaced_config_map("one", namespace, {"data": {"b": "2"}})
    assert patched.data == {"a": "1", "b": "2"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)

    await v1.delete_namespaced_config_map("one", namespace)
    with pytest.raises(ApiException) as missing:
        await v1.read_namespaced_config_map("one", namespace)
    assert missing.value.status == 404
    names = {cm.metadata.name for cm in (await v1.list_namespaced_config_map(namespace)).items}
    assert "one" not in names
    assert "two" in names


async def test_watch_sees_add_modify_delete(client: ApiClient, namespace: str) -> None:
    v1 = k8s.CoreV1Api(client)
    start = (await v1.list_namespaced_config_map(namespace)).metadata.resource_version
    events: list[tuple[str, str]] = []

    async def collect() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                v1.list_namespaced_config_map,
                namespace,
                resource_version=start,
                timeout_seconds=30,
                _request_timeout=40,
            ):
                events.append((event["type"], event["object"].metadata.name))
                if event["type"] == "DELETED":
                    return

    watcher = asyncio.create_task(collect())
    await v1.create_namespaced_config_map(namespace, _configmap("w", {"a": "1"}))
    await v1.patch_namespaced_config_map("w", namespace, {"data": {"a": "2"}})
    await v1.delete_namespaced_config_map("w", namespace)
    await asyncio.wait_for(watcher, 30)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.fastctl.dev"},
    "spec": {
        "group": "test.fastctl.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {"ready": {"type": "boolean"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def _install_crd(client: ApiClient, crd: dict[str, Any]) -> None:
    """Create (or keep) the CRD and wait until it is Established and served."""
    ext = k8s.ApiextensionsV1Api(client)
    try:
        await ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while True:
        got = await ext.read_custom_resource_definition(crd["metadata"]["name"])
        conditions = {c.type: c.status for c in (got.status.conditions or [])}
        if conditions.get("Established") == "True":
            return
        assert time.monotonic() < deadline, f"CRD not established: {conditions}"
        await asyncio.sleep(0.1)


async def test_crd_with_status_subresource(client: ApiClient, namespace: str) -> None:
    await _install_crd(client, WIDGET_CRD)
    custom = k8s.CustomObjectsApi(client)
    group, version, plural = "test.fastctl.dev", "v1", "widgets"
    widget = {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
        "status": {"ready": True},  # ignored on create: status is a subresource
    }
    # A CRD is served a moment after Established; retry 404s briefly.
    for _ in range(50):
        try:
            created = await custom.create_namespaced_custom_object(
                group, version, namespace, plural, widget
            )
            break
        except ApiException as exc:
            if exc.status != 404:
                raise
            await asyncio.sleep(0.1)
    assert "status" not in created or not created["status"]

    patched = await custom.patch_namespaced_custom_object_status(
        group,
        version,
        namespace,
        plural,
        "w1",
        {"status": {"ready": True}},
        _content_type=MERGE,  # type: ignore[call-arg]
    )
    assert patched["status"] == {"ready": True}
    assert patched["spec"] == {"size": 3}

    # Through the main resource the status cannot change, and the spec can.
    after = await custom.patch_namespaced_custom_object(
        group,
        version,
        namespace,
        plural,
        "w1",
        {"spec": {"size": 4}, "status": {"ready": False}},
        _content_type=MERGE,  # type: ignore[call-arg]
    )
    assert after["spec"] == {"size": 4}
    assert after["status"] == {"ready": True}
    assert after["metadata"]["generation"] == 2

    listed = await custom.list_namespaced_custom_object(group, version, namespace, plural)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]
    await custom.delete_namespaced_custom_object(group, version, namespace, plural, "w1")


async def _once_allowed(alice: k8s.CoreV1Api, namespace: str) -> Any:
    """Alice's ConfigMap list once her new binding is in force.

    The RBAC authorizer reads Roles and bindings from an informer cache, so a binding
    takes effect a moment after it is created: a 403 in that moment is expected, one
    that lasts 30 s is not.
    """
    deadline = time.monotonic() + 30.0
    while True:
        try:
            return await alice.list_namespaced_config_map(namespace)
        except ApiException as denied:
            if denied.status != 403 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


async def test_restricted_user_is_denied_until_bound(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    kubeconfig = control_plane.user_kubeconfig("alice", groups=["test-devs"])
    async with await _client(kubeconfig) as alice:
        with pytest.raises(ApiException) as denied:
            await k8s.CoreV1Api(alice).list_namespaced_config_map(namespace)
        assert denied.value.status == 403

        rbac = k8s.RbacAuthorizationV1Api(client)
        await rbac.create_namespaced_role(
            namespace,
            {  # type: ignore[arg-type]
                "metadata": {"name": "read-configmaps"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
                ],
            },
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            {  # type: ignore[arg-type]
                "metadata": {"name": "devs-read-configmaps"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-configmaps",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "test-devs"}
                ],
            },
        )
        listed = await _once_allowed(k8s.CoreV1Api(alice), namespace)
        assert listed.items == []
        with pytest.raises(ApiException) as still_denied:
            await k8s.CoreV1Api(alice).create_namespaced_config_map(
                namespace, _configmap("nope", {})
            )
        assert still_denied.value.status == 403


# -- faults: restarts ---------------------------------------------------------------------


async def _watch_events(v1: k8s.CoreV1Api, namespace: str, resource_version: str) -> list[Any]:
    """The events of a short ConfigMap watch from `resource_version`."""
    async with watch.Watch() as w:
        return [
            event
            async for event in w.stream(
                v1.list_namespaced_config_map,
                namespace,
                resource_version=resource_version,
                timeout_seconds=2,
                _request_timeout=10,
            )
        ]


async def test_restart_apiserver_keeps_objects_and_clients_reconnect(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    v1 = k8s.CoreV1Api(client)
    before = await v1.create_namespaced_config_map(namespace, _configmap("kept", {"a": "1"}))
    etcd_pid = control_plane.pids["etcd"]
    apiserver_pid = control_plane.pids["kube-apiserver"]

    await control_plane.restart_apiserver()

    assert control_plane.pids["etcd"] == etcd_pid
    assert control_plane.pids["kube-apiserver"] != apiserver_pid
    # The same client (its pooled connections died with the old server) just works again.
    got = await v1.read_namespaced_config_map("kept", namespace)
    assert got.metadata.uid == before.metadata.uid
    assert got.data == {"a": "1"}
    # The new server's watch cache starts at the current resourceVersion: a watch from an
    # older one is answered 410 Gone, and the client must list again (what watchers do).
    with pytest.raises(ApiException) as gone:
        await _watch_events(v1, namespace, before.metadata.resource_version)
    assert gone.value.status == 410
    relisted = await v1.list_namespaced_config_map(namespace)
    assert [cm.metadata.uid for cm in relisted.items] == [before.metadata.uid]
    await v1.patch_namespaced_config_map("kept", namespace, {"data": {"a": "2"}})
    events = await _watch_events(v1, namespace, relisted.metadata.resource_version)
    assert [(e["type"], e["object"].data) for e in events] == [("MODIFIED", {"a": "2"})]


async def test_stop_and_start_apiserver(control_plane: ControlPlane, client: ApiClient) -> None:
    await control_plane.stop_apiserver()
    try:
        assert "kube-apiserver" not in control_plane.pids
        with pytest.raises(ConnectionRefusedError):
            await asyncio.to_thread(control_plane.api_request, "GET", "/readyz", timeout=2)
    finally:
        await control_plane.start_apiserver()
    assert (await k8s.VersionApi(client).get_code()).git_version.startswith("v1.")


# -- several control planes, ports ---------------------------------------------------------


async def test_two_control_planes_at_once(control_plane: ControlPlane, namespace: str) -> None:
    async with ControlPlane() as other:
        assert other.server != control_plane.server
        assert other.etcd_url != control_plane.etcd_url
        assert other.directory != control_plane.directory
        async with await _client(other.kubeconfig) as api_other:
            v1_other = k8s.CoreV1Api(api_other)
            await v1_other.create_namespaced_config_map("default", _configmap("only-here", {}))
            async with await _client(control_plane.kubeconfig) as api_main:
                with pytest.raises(ApiException) as missing:
                    await k8s.CoreV1Api(api_main).read_namespaced_config_map("only-here", "default")
                assert missing.value.status == 404
    assert not other.running
    assert not other.pids


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_preferred_ports_in_use_are_replaced() -> None:
    with _listening_socket() as busy_api, _listening_socket() as busy_etcd:
        taken = {busy_api.getsockname()[1], busy_etcd.getsockname()[1]}
        with ControlPlane(
            apiserver_port=busy_api.getsockname()[1], etcd_port=busy_etcd.getsockname()[1]
        ) as cp:
            assert cp.port not in taken
            assert int(cp.etcd_url.rsplit(":", 1)[1]) not in taken
            assert cp.api_request("GET", "/readyz")[0] == 200


def test_port_taken_between_pick_and_bind_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race no port picker can exclude: another process binds the port after we chose
    it. The server dies of "address already in use" and the start retries another port."""
    real_pick = control_plane_module._pick_port
    calls = 0
    with _listening_socket() as busy:
        busy_port = busy.getsockname()[1]

        def pick(preferred: int | None = None) -> int:
            nonlocal calls
            calls += 1
            # 1st: etcd's first try, 3rd: kube-apiserver's first try.
            return busy_port if calls in (1, 3) else real_pick(preferred)

        monkeypatch.setattr(control_plane_module, "_pick_port", pick)
        with ControlPlane() as cp:
            assert calls == 4
            assert cp.port != busy_port
            assert "address already in use" in cp.etcd_log.read_text()
            assert "address already in use" in cp.apiserver_log.read_text()
            assert cp.api_request("GET", "/api/v1/namespaces/default")[0] == 200


# -- clear errors ----------------------------------------------------------------------------


@pytest.fixture
def no_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no binaries anywhere and no Go: an empty cache, no
    KUBEBUILDER_ASSETS, and a PATH with nothing on it."""
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("FASTCTL_CACHE_DIR", str(tmp_path / "cache"))
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    return empty_bin


def test_no_go_and_no_binaries_says_how_to_get_them(no_binaries: Path) -> None:
    with pytest.raises(BinariesNotFoundError) as error:
        ControlPlane().start()
    message = str(error.value)
    assert "fastctl control-plane build" in message
    assert "KUBEBUILDER_ASSETS" in message
    assert "Go is not on PATH" in message


def test_incomplete_kubebuilder_assets_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "etcd").write_text("#!/bin/sh\n")
    (assets / "etcd").chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    with pytest.raises(BinariesNotFoundError, match=r"KUBEBUILDER_ASSETS=.* has no kube-apiserver"):
        ControlPlane().start()


def test_kubebuilder_assets_are_used(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(control_plane.binaries.directory))
    monkeypatch.setenv("FASTCTL_CACHE_DIR", str(tmp_path / "empty-cache"))
    with ControlPlane() as cp:
        assert cp.binaries.source == "KUBEBUILDER_ASSETS"


FAKE_GO = """#!/bin/sh
# A `go` that answers what the build asks before compiling, then fails to compile.
case "$1 $2" in
  "env GOCACHE") echo "{work}/gocache" ;;
  "mod download") echo '{{"GoMod": "{work}/kubernetes.mod"}}' ;;
  "version ") echo "go version go1.26.0 fake" ;;
  build*) echo "compile: fake-go: undefined: something" >&2; exit 2 ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

KUBERNETES_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
)

replace k8s.io/api => ./staging/src/k8s.io/api
"""


def test_failing_build_points_to_the_log(no_binaries: Path, tmp_path: Path) -> None:
    (tmp_path / "kubernetes.mod").write_text(KUBERNETES_MOD)
    go = no_binaries / "go"
    go.write_text(FAKE_GO.format(work=tmp_path))
    go.chmod(0o755)
    with pytest.raises(BuildError) as error:
        build_binaries(progress=None)
    assert error.value.log is not None
    assert str(error.value.log) in str(error.value)
    assert "fake-go: undefined: something" in error.value.log.read_text()
    assert "fake-go: undefined: something" in str(error.value)  # the tail is in the message
    wrapper = (error.value.log.parent / "build-v1.36.3-v3.6.8" / "k8s" / "go.mod").read_text()
    assert "replace k8s.io/api => k8s.io/api v0.36.3" in wrapper
    # The same through ControlPlane: Go is there, so it tries to build, and says where it failed.
    with pytest.raises(BuildError, match="see the build log"):
        ControlPlane().start()


def test_startup_failure_shows_the_log_tail(control_plane: ControlPlane) -> None:
    before = set(leftover_processes())
    with pytest.raises(StartupError) as error:
        ControlPlane(apiserver_args=["--no-such-flag=1"]).start()
    message = str(error.value)
    assert "kube-apiserver exited" in message
    assert "unknown flag: --no-such-flag" in message
    assert set(leftover_processes()) == before  # its etcd was stopped too


def _inner_session(tmp_path: Path, source: str, *pytest_args: str) -> list[str]:
    """Write `source` as a test module in `tmp_path`; the argv of a pytest session on it."""
    (tmp_path / "test_inner.py").write_text(source)
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args, str(tmp_path)]


def test_plugin_fails_not_skips_without_binaries(no_binaries: Path, tmp_path: Path) -> None:
    source = "def test_needs_api(namespace):\n    pass\n\n\ndef test_plain():\n    pass\n"
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    result = subprocess.run(
        _inner_session(tmp_path, source, "-rA"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed, 1 error" in result.stdout, result.stdout
    assert "skipped" not in result.stdout
    assert "fastctl control-plane build" in result.stdout


def test_pytest_works_without_cryptography(tmp_path: Path) -> None:
    """Without the ``testing`` extra the plugin still loads; only a control plane fails."""
    (tmp_path / "test_inner.py").write_text(
        "def test_needs_api(control_plane):\n    pass\n\n\ndef test_plain():\n    pass\n"
    )
    code = (
        "import sys; sys.modules['cryptography'] = None; import pytest; "
        f"sys.exit(pytest.main(['-p', 'no:cacheprovider', '-rA', {str(tmp_path)!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed, 1 error" in result.stdout, result.stdout
    assert "pip install 'fastctl[testing]'" in result.stdout


# -- no orphans ------------------------------------------------------------------------------


CHILD = """
import asyncio, json, sys, time
from fastctl.testing import ControlPlane
from fastctl.testing._process import started_processes

def report(cp):
    records = [[r.pid, r.name, r.start_ticks] for r in started_processes()]
    print(json.dumps({"records": records, "directory": str(cp.directory)}), flush=True)

async def run_async():
    async with ControlPlane() as cp:
        report(cp)
        await asyncio.sleep(600)

def run_blocking():
    cp = ControlPlane().start()
    report(cp)
    time.sleep(600)

asyncio.run(run_async()) if sys.argv[1] == "async" else run_blocking()
"""


def _start_child(mode: str) -> tuple[subprocess.Popen[str], list[ProcessRecord], Path]:
    """A Python process that starts a control plane (``async with`` or blocking `start`),
    reports the server processes, and sleeps."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the child exited before its control plane was up"
    state = json.loads(line)
    records = [ProcessRecord(pid, name, ticks) for pid, name, ticks in state["records"]]
    assert [record.name for record in records] == ["etcd", "kube-apiserver"]
    assert all(record.alive() for record in records)
    return proc, records, Path(state["directory"])


def _wait_gone(records: list[ProcessRecord], timeout: float = 20) -> list[ProcessRecord]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [record for record in records if record.alive()]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
@pytest.mark.timeout(180)  # a regression here would hang on a pipe
def test_sigkill_of_the_owner_kills_the_servers() -> None:
    proc, records, directory = _start_child("async")
    proc.kill()
    proc.wait()
    assert _wait_gone(records) == []
    # The directory cannot be cleaned by a dead process; the next start removes it.
    assert directory.exists()
    with ControlPlane():
        assert not directory.exists()


@pytest.mark.timeout(180)  # a regression here would hang on a pipe
def test_ctrl_c_stops_the_servers_and_cleans_up() -> None:
    proc, records, directory = _start_child("async")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) != 0
    assert _wait_gone(records, timeout=1) == []  # stopped before the owner exited
    assert not directory.exists()


@pytest.mark.timeout(180)  # a regression here would hang on a pipe
def test_sigterm_of_a_blocking_owner_kills_the_servers() -> None:
    proc, records, _ = _start_child("blocking")
    proc.terminate()
    proc.wait()
    assert _wait_gone(records) == []


def test_plugin_kills_and_reports_a_control_plane_left_running(tmp_path: Path) -> None:
    source = (
        "from fastctl.testing import ControlPlane\n"
        "LEAKED = []\n\n\n"
        "def test_forgets_to_stop():\n"
        "    LEAKED.append(ControlPlane().start())\n"
        "    print('PIDS', sorted(LEAKED[0].pids.values()))\n"
    )
    result = subprocess.run(
        _inner_session(tmp_path, source, "-s"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "control plane processes outlived the session" in result.stdout
    pids = json.loads(result.stdout.split("PIDS ", 1)[1].splitlines()[0])
    assert len(pids) == 2
    assert _wait_gone([ProcessRecord(pid, "leaked", None) for pid in pids], timeout=5) == []


@pytest.mark.timeout(180)  # a regression here would hang on a pipe
def test_ctrl_c_of_a_pytest_session_after_a_failure_stops_the_servers(tmp_path: Path) -> None:
    source = (
        "import json, time\n"
        "from fastctl.testing._process import started_processes\n\n\n"
        "def test_fails(control_plane):\n"
        "    assert False\n\n\n"
        "def test_waits(control_plane):\n"
        "    records = [[r.pid, r.name, r.start_ticks] for r in started_processes()]\n"
        "    print('STATE', json.dumps([records, str(control_plane.directory)]), flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        _inner_session(tmp_path, source, "-s"), cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # "STATE" follows pytest's "test_inner.py F" on its line
        if "STATE " in line:
            break
    else:
        raise AssertionError("the inner session never reached its sleeping test")
    raw, directory = json.loads(line.partition("STATE ")[2])
    records = [ProcessRecord(pid, name, ticks) for pid, name, ticks in raw]
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert _wait_gone(records, timeout=1) == []  # stopped by the fixture, not by the kernel
    assert not Path(directory).exists()


def test_check_no_orphans_script_sees_running_servers(control_plane: ControlPlane) -> None:
    result = subprocess.run(
        [str(REPO / "scripts" / "check-no-orphans")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    for pid in control_plane.pids.values():
        assert f"pid {pid} " in result.stderr


# -- the command line ------------------------------------------------------------------------


def _fastctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastctl.cli", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cli_up_env_down(tmp_path: Path, control_plane: ControlPlane) -> None:
    """`up` passes its --apiserver-arg flags to kube-apiserver (here: audit logging, seen
    working in the audit log), and `down` removes everything `up` made."""
    env = {"FASTCTL_RUN_DIR": str(tmp_path / "run")}
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
    audit = tmp_path / "audit.log"
    up = _fastctl(
        "control-plane",
        "up",
        "--name",
        "cli-test",
        f"--apiserver-arg=--audit-policy-file={policy}",
        f"--apiserver-arg=--audit-log-path={audit}",
        env=env,
    )
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith("export KUBECONFIG=")
    kubeconfig = up.stdout.strip().removeprefix("export KUBECONFIG=")
    try:
        assert _fastctl("control-plane", "env", "--name", "cli-test", env=env).stdout == up.stdout
        again = _fastctl("control-plane", "up", "--name", "cli-test", env=env)
        assert again.returncode == 0
        assert "already up" in again.stderr
        kubectl = control_plane.binaries.kubectl
        assert kubectl is not None
        got = subprocess.run(
            [str(kubectl), "--kubeconfig", kubeconfig, "get", "namespace", "default", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.stdout.strip() == "namespace/default", got.stderr
        assert '"/api/v1/namespaces/default"' in audit.read_text(), "the audit flags applied"
        state = json.loads((tmp_path / "run" / "cli-test" / "state.json").read_text())
        supervisor = ProcessRecord(state["pid"], "supervisor", state["start_ticks"])
    finally:
        down = _fastctl("control-plane", "down", "--name", "cli-test", env=env)
    assert down.returncode == 0, down.stderr
    assert not supervisor.alive()
    assert not (tmp_path / "run" / "cli-test").exists(), "etcd data and logs left behind"
    assert "fastctl: removed " in down.stderr
    gone = _fastctl("control-plane", "env", "--name", "cli-test", env=env)
    assert gone.returncode == 1
    assert gone.stderr.strip() == (
        "fastctl: error: control plane 'cli-test' is not running; "
        "start it with `fastctl control-plane up`"
    )


def test_cli_errors_are_one_line(no_binaries: Path, tmp_path: Path) -> None:
    env = {"FASTCTL_RUN_DIR": str(tmp_path / "run"), "PATH": str(no_binaries)}
    for args in (("control-plane", "up"), ("control-plane", "build")):
        result = _fastctl(*args, env=env)
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("fastctl: error: ")
        assert "KUBEBUILDER_ASSETS" in lines[0]
        assert "Traceback" not in result.stderr


def test_cli_up_reports_a_failed_start(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "etcd").symlink_to(control_plane.binaries.etcd)
    fake = assets / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'E0101 fake-apiserver: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    env = {"FASTCTL_RUN_DIR": str(tmp_path / "run"), "KUBEBUILDER_ASSETS": str(assets)}
    result = _fastctl("control-plane", "up", "--name", "broken", env=env)
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("fastctl: error: control plane 'broken' did not start: ")
    assert "kube-apiserver exited with code 3" in error
    log = tmp_path / "run" / "broken" / "data" / "kube-apiserver.log"
    assert "fake-apiserver: cannot start" in log.read_text()
    assert not (tmp_path / "run" / "broken" / "state.json").exists()
