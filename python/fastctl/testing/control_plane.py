"""`ControlPlane`: a real etcd and kube-apiserver on loopback, for tests, benchmarks, demos.

It runs them the way envtest (controller-runtime ``pkg/internal/testing/controlplane``) does,
with the flags a machine without a default route needs. In short::

    async with ControlPlane() as cp:          # or: cp = ControlPlane().start(); ...; cp.stop()
        client = await kubernetes_asyncio.config.new_client_from_config(str(cp.kubeconfig))
        ...
        await cp.restart_apiserver()          # etcd (and so every object) is kept

Start-up and shutdown are written once, as generators of "steps" (a float: sleep that long;
a callable: run it and send back the result), and driven either by a blocking loop (`start`,
`stop`, usable from sync pytest fixtures with no event loop) or by an asyncio loop
(``async with``, `restart_apiserver`), which runs the blocking HTTP probes in a worker thread.
Processes themselves are always spawned on the calling thread, because the kernel ties the
"kill the child when the parent dies" signal to the thread that forked it.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import functools
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, TypeVar

from fastctl.testing import _process
from fastctl.testing.binaries import Binaries, ControlPlaneError, ensure_binaries, find_binaries

if TYPE_CHECKING:
    from typing import Self

    from fastctl._pki import CertificateAuthority, KeyPair

__all__ = ["ControlPlane", "StartupError"]

_T = TypeVar("_T")
_Step = float | Callable[[], object]
_Steps = Generator[_Step, object, _T]

_HOST = "127.0.0.1"
_TEMP_PREFIX = "fastctl-cp-"
_OWNER_FILE = ".fastctl-owner"
_PORT_ATTEMPTS = 4
_LOG_TAIL_LINES = 30

_running: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_ports_handed_out: set[int] = set()
_ports_lock = threading.Lock()


class StartupError(ControlPlaneError):
    """etcd or kube-apiserver did not start; the message ends with the tail of its log."""


def _run_blocking(steps: _Steps[_T]) -> _T:
    value: object = None
    while True:
        try:
            step = steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value = None
        if callable(step):
            value = step()
        else:
            time.sleep(step)


async def _run_async(steps: _Steps[_T]) -> _T:
    value: object = None
    while True:
        try:
            step = steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value = None
        if callable(step):
            value = await asyncio.to_thread(step)
        else:
            await asyncio.sleep(step)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
    return True


def _pick_port(preferred: int | None = None) -> int:
    """`preferred` when it is free, else a port the kernel says is free now (and that this
    process has not handed out before: a fresh port per server avoids racing ourselves).
    Someone else may still take it before the server binds: callers retry on "address in
    use"."""
    with _ports_lock:
        if preferred is not None and preferred not in _ports_handed_out and _port_free(preferred):
            _ports_handed_out.add(preferred)
            return preferred
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((_HOST, 0))
                port: int = sock.getsockname()[1]
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise ControlPlaneError("no free loopback port found")


def _tail(path: Path, lines: int = _LOG_TAIL_LINES, start: int = 0) -> str:
    try:
        with path.open("rb") as file:
            file.seek(start)
            text = file.read().decode(errors="replace")
    except OSError:
        return f"    (no log at {path})"
    kept = text.splitlines()[-lines:]
    return "\n".join("    " + line[:500] for line in kept) or "    (the log is empty)"


def _yaml_str(value: str) -> str:
    """A JSON string is a valid YAML double-quoted scalar: safe for any path or name."""
    return json.dumps(value)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig_text(server: str, ca: Path, user: str, pair: KeyPair) -> str:
    return "\n".join(
        [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            "- name: fastctl",
            "  cluster:",
            f"    server: {_yaml_str(server)}",
            f"    certificate-authority-data: {_b64(ca)}",
            "users:",
            f"- name: {_yaml_str(user)}",
            "  user:",
            f"    client-certificate-data: {_b64(pair.cert)}",
            f"    client-key-data: {_b64(pair.key)}",
            "contexts:",
            f"- name: {_yaml_str(f'fastctl-{user}')}",
            "  context:",
            "    cluster: fastctl",
            f"    user: {_yaml_str(user)}",
            f"current-context: {_yaml_str(f'fastctl-{user}')}",
            "",
        ]
    )


def _owner_text() -> str:
    """``<pid> <start ticks>`` of this process, for `_remove_stale_directories`."""
    me = _process.this_process()
    return f"{me.pid} {'' if me.start_ticks is None else me.start_ticks}\n"


def _owner_alive(directory: Path) -> bool:
    try:
        pid_text, _, ticks_text = (directory / _OWNER_FILE).read_text().strip().partition(" ")
        record = _process.ProcessRecord(
            int(pid_text), "owner", int(ticks_text) if ticks_text else None
        )
    except (OSError, ValueError):
        return True  # not ours to judge: leave it alone
    return record.alive()


def _remove_stale_directories() -> None:
    """Delete the temp directories of control planes whose Python process died without
    cleaning up (SIGKILL): the kernel killed their servers, but nobody removed the files."""
    for candidate in Path(tempfile.gettempdir()).glob(f"{_TEMP_PREFIX}*"):
        if (candidate / _OWNER_FILE).exists() and not _owner_alive(candidate):
            shutil.rmtree(candidate, ignore_errors=True)


class ControlPlane:
    """A local etcd + kube-apiserver with RBAC on, an admin kubeconfig, and generated TLS.

    Arguments (all optional):

    - `binaries`: a directory with ``etcd`` and ``kube-apiserver``; default: found by
      `fastctl.testing.binaries.find_binaries` (``KUBEBUILDER_ASSETS``, then the fastctl
      cache), and built from the Go module proxy when missing and `build` is true and Go is
      installed.
    - `directory`: where certificates, logs and etcd data go; default: a fresh temporary
      directory, deleted by `stop` (a given directory is left in place).
    - `apiserver_port` / `etcd_port`: preferred ports; a port in use is replaced by a free one.
    - `start_timeout`: seconds to wait for each server to be ready (a start takes ~3 s on
      an idle 2-core machine; the generous default covers a machine busy compiling).
    - `apiserver_args` / `etcd_args`: extra flags, appended (so they override the defaults).
    - `feature_gates`: kube-apiserver feature gates to set, e.g.
      ``{"ShardedListAndWatch": True}`` for server-side sharded lists and watches (one
      ``--feature-gates`` flag; alpha gates also need no other switch).
    """

    def __init__(
        self,
        *,
        binaries: str | os.PathLike[str] | Binaries | None = None,
        directory: str | os.PathLike[str] | None = None,
        apiserver_port: int | None = None,
        etcd_port: int | None = None,
        start_timeout: float = 120.0,
        build: bool = True,
        apiserver_args: Sequence[str] = (),
        etcd_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        self._binaries_arg = binaries
        self._directory_arg = Path(directory) if directory is not None else None
        self._apiserver_port_hint = apiserver_port
        self._etcd_port_hint = etcd_port
        self.start_timeout = start_timeout
        self._build = build
        self._apiserver_args = list(apiserver_args)
        self._etcd_args = list(etcd_args)
        self.feature_gates: dict[str, bool] = dict(feature_gates or {})

        self._binaries: Binaries | None = None
        self._directory: Path | None = None
        self._temporary = False
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._logs: dict[str, IO[bytes]] = {}
        self._etcd_port = 0
        self._apiserver_port = 0
        self._ca: CertificateAuthority | None = None
        self._admin: KeyPair | None = None
        self._serving: KeyPair | None = None
        self._service_account: KeyPair | None = None
        self._ssl: ssl.SSLContext | None = None
        self._kubeconfig: Path | None = None
        self._started = False
        self.startup_seconds: float | None = None
        """How long the last start (or restart) of kube-apiserver took until it was ready."""

    # -- public attributes -------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True from the end of a successful start until `stop`."""
        return self._kubeconfig is not None

    @property
    def directory(self) -> Path:
        """Certificates, kubeconfigs, logs and etcd data live here."""
        return self._need(self._directory, "directory")

    @property
    def binaries(self) -> Binaries:
        return self._need(self._binaries, "binaries")

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig (user ``fastctl-admin`` in group ``system:masters``), with the
        certificates embedded, so it can be copied or read without the other files."""
        return self._need(self._kubeconfig, "kubeconfig")

    @property
    def server(self) -> str:
        """``https://127.0.0.1:<port>``."""
        self._need(self._kubeconfig, "server")
        return f"https://{_HOST}:{self._apiserver_port}"

    @property
    def port(self) -> int:
        self._need(self._kubeconfig, "port")
        return self._apiserver_port

    @property
    def ca_file(self) -> Path:
        """PEM of the CA that signed the serving and client certificates."""
        return self._need(self._ca, "ca_file").cert_file

    @property
    def admin_cert_file(self) -> Path:
        return self._need(self._admin, "admin_cert_file").cert

    @property
    def admin_key_file(self) -> Path:
        return self._need(self._admin, "admin_key_file").key

    @property
    def etcd_url(self) -> str:
        self._need(self._etcd, "etcd_url")
        return f"http://{_HOST}:{self._etcd_port}"

    @property
    def apiserver_log(self) -> Path:
        return self.directory / "kube-apiserver.log"

    @property
    def etcd_log(self) -> Path:
        return self.directory / "etcd.log"

    @property
    def pids(self) -> dict[str, int]:
        """The pids of the running servers (``etcd``, ``kube-apiserver``)."""
        out = {}
        if self._etcd is not None and self._etcd.poll() is None:
            out["etcd"] = self._etcd.pid
        if self._apiserver is not None and self._apiserver.poll() is None:
            out["kube-apiserver"] = self._apiserver.pid
        return out

    def _need(self, value: _T | None, what: str) -> _T:
        if value is None:
            raise ControlPlaneError(f"ControlPlane.{what}: the control plane is not started")
        return value

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        """Start etcd and kube-apiserver and wait until the API serves (blocking)."""
        try:
            _run_blocking(self._start_steps())
        except BaseException as exc:
            self._kill(keep_logs=isinstance(exc, StartupError))
            raise
        return self

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd, and delete the temporary directory. Idempotent."""
        _run_blocking(self._stop_steps())

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        try:
            await _run_async(self._start_steps())
        except BaseException as exc:  # includes cancellation (Ctrl-C under asyncio.run)
            self._kill(keep_logs=isinstance(exc, StartupError))
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await _run_async(self._stop_steps())
        except BaseException:
            self._kill()
            raise

    async def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same
        certificates, keeping etcd (so every object and resourceVersion survives). Clients
        see their connections drop and must reconnect: that is the point of the exercise."""
        await self.stop_apiserver()
        await self.start_apiserver()

    async def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd keeps running); `start_apiserver` brings it back."""
        await _run_async(self._stop_apiserver_steps())

    async def start_apiserver(self) -> None:
        """Start kube-apiserver again after `stop_apiserver`, on the same port."""
        self._need(self._etcd, "start_apiserver")
        if self._apiserver is not None and self._apiserver.poll() is None:
            raise ControlPlaneError("kube-apiserver is already running")
        try:
            await _run_async(self._apiserver_steps(same_port=True))
        except BaseException:
            self._kill()
            raise

    # -- users and requests ------------------------------------------------------------

    def user_kubeconfig(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for user `name` in `groups`, authenticated by a client certificate
        from the control plane's CA. The user is not in ``system:masters``, so with RBAC on
        it may do nothing until a (Cluster)RoleBinding grants it something (bind to the user
        `name` or to one of the `groups`)."""
        if "system:masters" in groups:
            raise ValueError("use cp.kubeconfig for an admin; user_kubeconfig is for RBAC tests")
        ca = self._need(self._ca, "user_kubeconfig")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        pair = ca.issue(f"user-{safe}", name, organizations=groups)
        path = self.directory / f"user-{safe}.kubeconfig"
        path.write_text(_kubeconfig_text(self.server, ca.cert_file, name, pair))
        path.chmod(0o600)
        return path

    def api_request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """One blocking HTTPS request as the admin: ``(status, parsed JSON body or text)``.
        For fixtures and set-up code that has no event loop (``namespace`` uses it); tests
        should talk to the API through their client."""
        context = self._need(self._ssl, "api_request")
        connection = http.client.HTTPSConnection(
            _HOST, self._apiserver_port, context=context, timeout=timeout
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        text = raw.decode(errors="replace")
        try:
            return response.status, json.loads(text) if text else None
        except ValueError:
            return response.status, text

    # -- the steps ---------------------------------------------------------------------

    def _start_steps(self) -> _Steps[None]:
        if self._started:
            raise ControlPlaneError("this ControlPlane is already started")
        self._started = True
        if isinstance(self._binaries_arg, Binaries):
            self._binaries = self._binaries_arg
        elif self._binaries_arg is not None:
            self._binaries = find_binaries(self._binaries_arg)
        else:
            build = self._build
            binaries = yield lambda: ensure_binaries(build=build)
            assert isinstance(binaries, Binaries)
            self._binaries = binaries
        self._make_directory()
        self._make_certificates()
        yield from self._etcd_steps()
        yield from self._apiserver_steps(same_port=False)
        self._write_admin_kubeconfig()
        _running.add(self)

    def _make_directory(self) -> None:
        if self._directory_arg is not None:
            self._directory = self._directory_arg
            self._directory.mkdir(parents=True, exist_ok=True)
        else:
            _remove_stale_directories()
            self._directory = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
            self._temporary = True
        (self._directory / _OWNER_FILE).write_text(_owner_text())

    def _make_certificates(self) -> None:
        import fastctl._pki as _pki  # cryptography is needed from here on only

        directory = self.directory / "pki"
        directory.mkdir(exist_ok=True)
        self._ca = _pki.CertificateAuthority(directory)
        self._serving = self._ca.issue(
            "apiserver",
            "kube-apiserver",
            server_names=[
                _HOST,
                "localhost",
                "10.0.0.1",  # the first service IP: the in-cluster address of `kubernetes`
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )
        self._admin = self._ca.issue("admin", "fastctl-admin", organizations=["system:masters"])
        self._service_account = _pki.service_account_keys(directory)
        context = ssl.create_default_context(cafile=str(self._ca.cert_file))
        context.load_cert_chain(str(self._admin.cert), str(self._admin.key))
        self._ssl = context

    def _open_log(self, name: str) -> tuple[IO[bytes], int]:
        log = self._logs.get(name)
        if log is None:
            log = (self.directory / f"{name}.log").open("ab")
            self._logs[name] = log
        log.write(f"\n=== fastctl: starting {name} at {time.strftime('%H:%M:%S')}\n".encode())
        log.flush()
        return log, log.tell()

    def _etcd_steps(self) -> _Steps[None]:
        binaries = self.binaries
        data = self.directory / "etcd-data"
        for attempt in range(_PORT_ATTEMPTS):
            port = _pick_port(self._etcd_port_hint if attempt == 0 else None)
            url = f"http://{_HOST}:{port}"
            argv = [
                str(binaries.etcd),
                f"--data-dir={data}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                # Port 0: the peer port is never used by a single member, and a fixed default
                # (2380) would make a second control plane on this machine fail.
                f"--listen-peer-urls=http://{_HOST}:0",
                "--unsafe-no-fsync=true",  # throw-away data: durability buys nothing here
                *self._etcd_args,
            ]
            log, offset = self._open_log("etcd")
            self._etcd = _process.spawn("etcd", argv, log)
            self._etcd_port = port
            outcome = yield from self._wait(
                "etcd", self._etcd, self.etcd_log, offset, functools.partial(_etcd_healthy, url)
            )
            if outcome == "ready":
                return
        raise StartupError(f"etcd: every port tried was in use; log:\n{_tail(self.etcd_log)}")

    def _apiserver_argv(self, port: int) -> list[str]:
        pki = self.directory / "pki"
        serving = self._need(self._serving, "serving certificate")
        service_account = self._need(self._service_account, "service account keys")
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://{_HOST}:{self._etcd_port}",
            f"--secure-port={port}",
            f"--bind-address={_HOST}",
            # With no default route kube-apiserver cannot pick an address to advertise, and
            # the endpoint reconciler would publish one: both are pinned/disabled (offline).
            f"--advertise-address={_HOST}",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self._ca_file_path()}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            # No controller-manager runs to create service account tokens, so the admission
            # plugin that requires them would reject every pod.
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer=https://{_HOST}:{port}",
            f"--service-account-key-file={service_account.cert}",
            f"--service-account-signing-key-file={service_account.key}",
            "--allow-privileged=true",
            *self._feature_gate_args(),
            *self._apiserver_args,
        ]

    def _feature_gate_args(self) -> list[str]:
        if not self.feature_gates:
            return []
        gates = ",".join(f"{name}={str(on).lower()}" for name, on in self.feature_gates.items())
        return [f"--feature-gates={gates}"]

    def _ca_file_path(self) -> Path:
        return self._need(self._ca, "ca_file").cert_file

    def _apiserver_steps(self, *, same_port: bool) -> _Steps[None]:
        started = time.monotonic()
        for attempt in range(1 if same_port else _PORT_ATTEMPTS):
            if same_port:
                port = self._apiserver_port
            else:
                port = _pick_port(self._apiserver_port_hint if attempt == 0 else None)
            log, offset = self._open_log("kube-apiserver")
            self._apiserver = _process.spawn("kube-apiserver", self._apiserver_argv(port), log)
            self._apiserver_port = port
            outcome = yield from self._wait(
                "kube-apiserver", self._apiserver, self.apiserver_log, offset, self._api_ready
            )
            if outcome == "ready":
                self.startup_seconds = time.monotonic() - started
                return
        where = f"port {self._apiserver_port} is" if same_port else "every port tried was"
        raise StartupError(f"kube-apiserver: {where} in use; log:\n{_tail(self.apiserver_log)}")

    def _api_ready(self) -> bool:
        """``/readyz`` is OK and the ``default`` namespace exists (the bootstrap controller
        creates it a moment after readiness; most tests need it at once)."""
        try:
            status, _ = self.api_request("GET", "/readyz", timeout=5)
            if status != 200:
                return False
            status, _ = self.api_request("GET", "/api/v1/namespaces/default", timeout=5)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def _wait(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        log: Path,
        offset: int,
        ready: Callable[[], bool],
    ) -> _Steps[str]:
        """Wait for `ready`; ``"port-in-use"`` when the process died of a taken port (the
        caller retries with another), `StartupError` with the log tail on any other death
        or on timeout."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                if "address already in use" in _tail(log, 200, offset):
                    return "port-in-use"
                raise StartupError(
                    f"{name} exited with code {proc.returncode} during start-up; "
                    f"the end of {log}:\n{_tail(log, start=offset)}"
                )
            if (yield ready):
                return "ready"
            if time.monotonic() > deadline:
                _process.kill_now(proc)
                raise StartupError(
                    f"{name} was not ready after {self.start_timeout:.0f} s (start_timeout); "
                    f"the end of {log}:\n{_tail(log, start=offset)}"
                )
            yield 0.1

    def _write_admin_kubeconfig(self) -> None:
        path = self.directory / "kubeconfig"
        path.write_text(
            _kubeconfig_text(
                f"https://{_HOST}:{self._apiserver_port}",
                self._ca_file_path(),
                "fastctl-admin",
                self._need(self._admin, "kubeconfig"),
            )
        )
        path.chmod(0o600)
        self._kubeconfig = path

    def _stop_process_steps(
        self, proc: subprocess.Popen[bytes] | None, grace: float
    ) -> _Steps[None]:
        if proc is None or proc.poll() is not None:
            return
        _process.signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            yield 0.05
        if proc.poll() is None:
            _process.kill_now(proc)

    def _stop_apiserver_steps(self) -> _Steps[None]:
        yield from self._stop_process_steps(self._apiserver, grace=15)

    def _stop_steps(self) -> _Steps[None]:
        if not self._started:
            return
        try:
            yield from self._stop_apiserver_steps()
            yield from self._stop_process_steps(self._etcd, grace=10)
        finally:
            self._kill()

    def _kill(self, *, keep_logs: bool = False) -> None:
        """Make sure nothing runs and nothing is left: SIGKILL whatever still runs, close
        the logs, delete a temporary directory (all but the logs when `keep_logs`: a
        start-up error names them). Safe to call at any point, repeatedly."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None and proc.poll() is None:
                _process.kill_now(proc)
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        _running.discard(self)
        if self._started and self._temporary and self._directory is not None:
            if keep_logs:
                for child in self._directory.iterdir():
                    if child.suffix != ".log":
                        shutil.rmtree(
                            child, ignore_errors=True
                        ) if child.is_dir() else child.unlink()
            else:
                shutil.rmtree(self._directory, ignore_errors=True)
        self._started = False
        self._kubeconfig = None
        self._ssl = None

    def __repr__(self) -> str:
        state = self.server if self._kubeconfig is not None else "not running"
        return f"<ControlPlane {state}>"


def _etcd_healthy(url: str) -> bool:
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=2)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    with contextlib.suppress(ValueError):
        return response.status == 200 and json.loads(body).get("health") == "true"
    return False


def running_control_planes() -> list[ControlPlane]:
    """The control planes this process started and has not stopped."""
    return list(_running)


@atexit.register
def _stop_all_at_exit() -> None:
    """Last line of defence for scripts that forget `stop` (or raise past it)."""
    for control_plane in list(_running):
        with contextlib.suppress(Exception):
            control_plane.stop()
