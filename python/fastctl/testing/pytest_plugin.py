"""pytest plugin for fastctl (registered through the ``pytest11`` entry point).

Fixtures:

- ``control_plane`` (session): a running `fastctl.testing.ControlPlane`. One per session,
  because a start costs seconds; tests isolate themselves with ``namespace``.
- ``namespace`` (function): the name of a fresh namespace, created before the test and
  deleted after it (without a controller-manager a deleted namespace stays ``Terminating``
  with its objects, which is harmless: names are never reused).
- ``fake_cluster`` (function): a `fastctl.testing.FakeCluster` of the test's own, in memory
  (no binaries, no ``kube`` marker).
- ``cluster`` (function, two parameters): a `fastctl.testing.Cluster`, once on a fake
  cluster (``[fake]``) and once on the session's control plane (``[control-plane]``,
  marked ``kube``), each with a fresh namespace: one test, run on both.

Every test that uses ``control_plane`` (directly or through ``namespace``) is marked ``kube``,
so ``-m "not kube"`` deselects the real-API tests. When the binaries are missing and cannot
be built, those tests *fail* with a message that says how to get them: a silent skip would
let CI pass without ever talking to a real API server.

At the end of the session the plugin checks that no etcd or kube-apiserver it started is
still running; a leftover is killed and fails the session.

Nothing here imports `cryptography` (or starts anything) unless a test asks for a fixture,
so installing fastctl without the ``testing`` extra never breaks pytest.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fastctl.testing.cluster import Cluster
    from fastctl.testing.control_plane import ControlPlane
    from fastctl.testing.fake import FakeCluster

_KUBE_MARKER = "kube: needs the real local control plane (etcd + kube-apiserver)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastctl")
    group.addoption(
        "--control-plane-timeout",
        type=float,
        default=float(os.environ.get("FASTCTL_START_TIMEOUT", "120")),
        help="seconds to wait for etcd and kube-apiserver to be ready (default 120, or "
        "$FASTCTL_START_TIMEOUT)",
    )
    group.addoption(
        "--control-plane-no-build",
        action="store_true",
        default=os.environ.get("FASTCTL_NO_BUILD", "") not in ("", "0"),
        help="never build missing control plane binaries, even when Go is installed "
        "(or set FASTCTL_NO_BUILD=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker so ``--strict-markers`` accepts it in any project."""
    config.addinivalue_line("markers", _KUBE_MARKER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kube)


def _say(config: pytest.Config, message: str) -> None:
    """Print past output capture: a build takes minutes and must not look like a hang."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(message)
    else:
        print(message, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A running local control plane for the whole session (see `ControlPlane`)."""
    from fastctl.testing.binaries import ControlPlaneError, ensure_binaries
    from fastctl.testing.control_plane import ControlPlane

    config = request.config
    try:
        binaries = ensure_binaries(
            build=not config.getoption("control_plane_no_build"),
            progress=lambda message: _say(config, message),
        )
        cp = ControlPlane(
            binaries=binaries, start_timeout=config.getoption("control_plane_timeout")
        )
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"fastctl control plane: {exc}", pytrace=False)
    except ImportError as exc:  # cryptography missing: say which extra to install
        pytest.fail(f"fastctl control plane: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def namespace_name(test_name: str) -> str:
    """A unique, valid namespace name (a DNS-1123 label) that still says which test made it."""
    stem = _NOT_DNS.sub("-", test_name.lower()).strip("-")[:40].strip("-") or "test"
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """The name of a namespace created for this test and deleted after it."""
    name = namespace_name(request.node.name)
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"fastctl.dev/test": "true"}},
    }
    status, response = control_plane.api_request("POST", "/api/v1/namespaces", body)
    if status != 201:
        pytest.fail(f"creating namespace {name}: HTTP {status}: {response}", pytrace=False)
    yield name
    try:
        status, response = control_plane.api_request("DELETE", f"/api/v1/namespaces/{name}")
    except OSError as exc:  # the test left the API server stopped: nothing to clean up with
        request.node.warn(pytest.PytestWarning(f"could not delete namespace {name}: {exc}"))
        return
    if status not in (200, 202, 404):
        request.node.warn(
            pytest.PytestWarning(f"deleting namespace {name}: HTTP {status}: {response}")
        )


@pytest.fixture
def fake_cluster() -> Iterator[FakeCluster]:
    """A fake cluster for this test (its clients are the test's to close)."""
    from fastctl.testing.fake import FakeCluster

    cluster = FakeCluster()
    try:
        yield cluster
    finally:
        cluster.forget()


@pytest.fixture(params=["fake", pytest.param("control-plane", marks=pytest.mark.kube)])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The test's `Cluster`: a fake one, then the control plane, each with a namespace."""
    from fastctl.testing.cluster import Cluster

    if request.param == "fake":
        fake = request.getfixturevalue("fake_cluster")
        name = namespace_name(request.node.name)
        fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield Cluster(name, fake=fake)
    else:
        name = request.getfixturevalue("namespace")
        yield Cluster(name, control_plane=request.getfixturevalue("control_plane"))


@pytest.hookimpl(trylast=True)  # after the runner's own sessionfinish has torn fixtures down
def pytest_sessionfinish(session: pytest.Session) -> None:
    """No etcd or kube-apiserver started in this session may outlive it."""
    process = sys.modules.get("fastctl.testing._process")
    if process is None:  # no control plane was ever started in this process
        return
    leftovers = process.leftover_processes()
    if not leftovers:
        return
    for record in leftovers:
        with contextlib.suppress(OSError):
            os.killpg(record.pid, signal.SIGKILL)
    names = ", ".join(f"{record.name} (pid {record.pid})" for record in leftovers)
    _say(session.config, f"fastctl: control plane processes outlived the session: {names}")
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
