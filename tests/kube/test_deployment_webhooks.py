"""The Deployment that ``fastctl manifests`` writes serves the webhooks it is wired to.

The operator (tests/kube/operators/served.py) declares a Dial CRD, a validating and a
mutating webhook, and a controller. The test renders its manifests, then runs the
Deployment's container command line as it is, with two mappings a container would give it:
its mounts (the webhook certificate directory, `CERT_DIR`, is a temporary directory here)
and its ports (each container port is a free local port). Everything else is verbatim.

- cert-manager mode: the test plays cert-manager (a CA, a serving certificate in the mounted
  directory, the CA injected into the generated configurations) and points the generated
  configurations at the process (the API server here cannot reach an in-cluster Service).
  A Dial with a negative value is refused with the handler's message, a good one gets the
  mutating default, and the same process reconciles it.
- managed mode, two replicas: both become ready (readiness waits for the installed
  configurations), share one CA through the Secret, install that CA in the configurations,
  and each answers an admission review with the handler's verdict and a certificate valid
  for the Service's names under that CA.
"""

# Plain blocking I/O in a few async tests is deliberate: short readiness probes and file
# reads of the test's own logs, not the code under test.
# ruff: noqa: ASYNC210, ASYNC240
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_asyncio.client import ApiClient

from fastctl._tls import ServingCertificate
from fastctl.deploy._webhooks import CERT_DIR
from fastctl.errors import ApiError
from fastctl.kube._objects import create, delete, get
from fastctl.testing import ControlPlane
from fastctl.webhook._configuration import MUTATING, VALIDATING

from .operators import served

pytestmark = [pytest.mark.kube, pytest.mark.timeout(240)]

OPERATOR = f"{Path(__file__).parent / 'operators' / 'served.py'}:make"
FASTCTL = str(Path(sys.executable).parent / "fastctl")
PORT_FLAGS = ("--metrics-port", "--probe-port", "--webhook-port")


def render(namespace: str, name: str, mode: str) -> list[dict[str, Any]]:
    """``fastctl manifests`` of the operator, as documents."""
    out = subprocess.run(
        [FASTCTL, "manifests", OPERATOR, "--name", name, "--namespace", namespace,
         "--operator-namespace", namespace, "--webhook-certificates", mode],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def container_args(
    docs: list[dict[str, Any]], cert_dir: Path | None
) -> tuple[list[str], dict[str, int]]:
    """The Deployment's command line with its mount and ports mapped (see the docstring)."""
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["fastctl"]
    args = list(container["args"])
    ports: dict[str, int] = {}
    for flag in PORT_FLAGS:
        i = args.index(flag)
        ports[flag] = free_port()
        args[i + 1] = str(ports[flag])
    if cert_dir is not None:
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        i = args.index("--webhook-cert-dir")
        assert args[i + 1] == mounts["webhook-certs"] == CERT_DIR
        args[i + 1] = str(cert_dir)
    return args, ports


@contextlib.contextmanager
def running(args: list[str], cp: ControlPlane, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    with log.open("wb") as out:
        proc = subprocess.Popen([FASTCTL, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def until_ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the operator exited: {log.read_text()[-3000:]}"
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r,
        ):
            if r.status == 200:
                return
        await asyncio.sleep(0.3)
    raise AssertionError(f"never ready: {log.read_text()[-3000:]}")


def install_crd(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    crd = one(docs, "CustomResourceDefinition")
    status, body = cp.api_request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    assert status in (201, 409), body
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, disc = cp.api_request("GET", f"/apis/{served.GROUP}/v1")
        if status == 200 and any(r.get("kind") == "Dial" for r in disc.get("resources", [])):
            return
        time.sleep(0.2)
    raise AssertionError("the Dial CRD never became discoverable")


def dial(name: str, namespace: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{served.GROUP}/v1",
        "kind": "Dial",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"value": value},
    }


@contextlib.asynccontextmanager
async def configurations(client: ApiClient, docs: list[dict[str, Any]], url: str, ca: bytes) -> Any:
    """The generated configurations, pointed at `url` with `ca` injected (cert-manager's
    part), created for the body of the block and deleted after."""
    made = []
    for kind, resource in (("ValidatingWebhookConfiguration", VALIDATING),
                           ("MutatingWebhookConfiguration", MUTATING)):  # fmt: skip
        config = one(docs, kind)
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"{url}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
        await create(client, resource, config)
        made.append((resource, config["metadata"]["name"]))
    try:
        yield
    finally:
        for resource, name in made:
            with contextlib.suppress(ApiError):
                await delete(client, resource, name)


async def test_the_generated_deployment_serves_its_webhooks_with_cert_manager(
    control_plane: ControlPlane, client: ApiClient, namespace: str, tmp_path: Path
) -> None:
    docs = render(namespace, "served-cm", "cert-manager")
    install_crd(control_plane, docs)
    service = one(docs, "Service")["metadata"]
    names = [f"{service['name']}.{namespace}.svc", "127.0.0.1"]
    certs = tmp_path / "mounted"
    issued = ServingCertificate.self_signed(tmp_path / "issuer", names)
    certs.mkdir()
    (certs / "tls.crt").write_bytes(issued.cert_file.read_bytes())
    (certs / "tls.key").write_bytes(issued.key_file.read_bytes())
    assert issued.ca_bundle is not None
    args, ports = container_args(docs, certs)
    log = tmp_path / "operator.log"
    with running(args, control_plane, log) as proc:
        await until_ready(ports["--probe-port"], proc, log)
        url = f"https://127.0.0.1:{ports['--webhook-port']}"
        async with configurations(client, docs, url, issued.ca_bundle):
            refusal = await _until_refused(client, namespace)
            assert served.NEGATIVE in refusal
            made = await create(client, served.DIAL, dial("good", namespace, 5))
            assert made["spec"]["color"] == "blue"  # the mutating webhook's default
            deadline = time.monotonic() + 60
            while ((await get(client, served.DIAL, "good", namespace=namespace)).get("status")
                   or {}).get("seen") != 5:  # fmt: skip
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.2)


async def _until_refused(client: ApiClient, namespace: str) -> str:
    """Create a bad Dial until the API server has loaded the configurations and refuses it;
    the refusal's text."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await create(client, served.DIAL, dial("bad", namespace, -1))
        except ApiError as exc:
            if served.NEGATIVE in str(exc):
                return str(exc)
            last = str(exc)
        else:  # admitted before the configuration was loaded: try again
            await delete(client, served.DIAL, "bad", namespace=namespace)
            last = "admitted"
        assert time.monotonic() < deadline, last
        await asyncio.sleep(0.2)


def review(port: int, path: str, obj: dict[str, Any], service: str) -> tuple[dict[str, Any], bytes]:
    """POST an AdmissionReview of `obj` to one replica, as the API server would through
    the Service (TLS server name `service`, no certificate check here); the response and
    the certificate the replica served."""
    body = json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "object": obj,
                    "kind": {"group": served.GROUP, "version": "v1", "kind": "Dial"},
                    "resource": {"group": served.GROUP, "version": "v1", "resource": "dials"},
                    "namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"],
                    "userInfo": {"username": "test"}},
    }).encode()  # fmt: skip
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=service) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {service}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        tls.sendall(request)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
    assert der is not None
    return answer["response"], ssl.DER_cert_to_PEM_cert(der).encode()


async def test_the_generated_deployment_serves_its_webhooks_managed_on_two_replicas(
    control_plane: ControlPlane, client: ApiClient, namespace: str, tmp_path: Path
) -> None:
    from cryptography import x509

    docs = render(namespace, "served-mg", "managed")
    install_crd(control_plane, docs)
    service = f"{one(docs, 'Service')['metadata']['name']}.{namespace}.svc"
    validating = one(docs, "ValidatingWebhookConfiguration")
    path = validating["webhooks"][0]["clientConfig"]["service"]["path"]
    replicas = [container_args(docs, None) for _ in range(2)]
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(running(args, control_plane, tmp_path / f"replica-{i}.log"))
            for i, (args, _) in enumerate(replicas)
        ]
        stack.callback(_delete_configurations, control_plane, docs)
        for i, ((_, ports), proc) in enumerate(zip(replicas, procs, strict=True)):
            await until_ready(ports["--probe-port"], proc, tmp_path / f"replica-{i}.log")
        installed = await get(client, VALIDATING, validating["metadata"]["name"])
        bundle = base64.b64decode(installed["webhooks"][0]["clientConfig"]["caBundle"])
        (ca,) = x509.load_pem_x509_certificates(bundle)
        for _, ports in replicas:
            answer, pem = review(ports["--webhook-port"], path, dial("bad", namespace, -2), service)
            assert answer["allowed"] is False
            assert served.NEGATIVE in answer["status"]["message"]
            served_cert = x509.load_pem_x509_certificate(pem)
            assert served_cert.issuer == ca.subject  # the one CA both replicas share
            served_cert.verify_directly_issued_by(ca)
            sans = served_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            assert service in sans.value.get_values_for_type(x509.DNSName)
            answer, _ = review(ports["--webhook-port"], path, dial("good", namespace, 1), service)
            assert answer["allowed"] is True


def _delete_configurations(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    """What managed mode installed is cluster-wide: remove it (configurations pointing at
    a Service nobody serves must not outlive the test)."""
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        plural = kind.lower() + "s"
        name = one(docs, kind)["metadata"]["name"]
        cp.api_request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
