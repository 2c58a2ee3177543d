"""Fuzzed API error bodies, review answers, kubeconfigs and command lines: each gets one
clear error (an `ApiError`, a `KubeconfigError`, a ``fastctl: error:`` line and an exit
status), never another exception, and never echoes a credential."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import example, given
from hypothesis import strategies as st

from fastctl.cli import main
from fastctl.errors import ApiError, KubeconfigError
from fastctl.kube._client import load_client
from fastctl.kube._http import error_from_response
from fastctl.runtime import _metrics_auth
from fastctl.runtime._metrics_auth import MetricsAuthorizer
from fastctl.runtime.manager import Manager

from .fuzzing import SCALARS, fuzz_settings, shaped

TOKEN = "Fuzz-Token-0123456789abcdef"
NAME = st.just("u")

STATUS = shaped(
    {
        "kind": st.just("Status"),
        "apiVersion": st.just("v1"),
        "code": st.integers(0, 999) | SCALARS,
        "reason": st.text(max_size=10),
        "message": st.text(max_size=40),
        "details": {
            "retryAfterSeconds": st.integers(-5, 5) | SCALARS,
            "causes": st.lists(shaped({"message": st.text(max_size=10)}), max_size=2),
        },
    }
)


@fuzz_settings(300)
@given(
    status=st.integers(100, 599),
    data=STATUS.map(orjson.dumps) | st.binary(max_size=400),
)
@example(status=502, data=b"<html>" + b"bad gateway " * 100 + b"</html>")
@example(status=500, data=b'{"kind":"Status","details":[1]}')
@example(status=429, data=b'{"kind":"Status","code":true,"details":{"retryAfterSeconds":true}}')
def test_fuzzed_error_bodies(status: int, data: bytes) -> None:
    err = error_from_response(status, data, method="GET", path="/api/v1/x")
    assert isinstance(err, ApiError)
    assert err.status == status  # the HTTP code is authoritative, whatever the body says
    assert str(err).startswith(f"GET /api/v1/x: {status} ")
    retry = err.retry_after
    assert retry is None or (isinstance(retry, float) and retry > 0)
    if not data.lstrip().startswith(b"{"):
        assert len(err.message) <= 300  # a proxy's HTML page is cut, not logged whole


KUBECONFIG = shaped(
    {
        "apiVersion": st.just("v1"),
        "kind": st.just("Config"),
        "current-context": st.just("c"),
        "contexts": st.lists(
            shaped(
                {"name": st.just("c"), "context": {"cluster": st.just("k"), "user": st.just("u")}}
            ),
            max_size=2,
        ),
        "clusters": st.lists(
            shaped(
                {
                    "name": st.just("k"),
                    "cluster": {
                        "server": st.sampled_from(["https://127.0.0.1:6443", "", "not a url"]),
                        "certificate-authority-data": st.sampled_from(["", "bm90IGEgY2VydA=="]),
                    },
                }
            ),
            max_size=2,
        ),
        "users": st.lists(
            shaped(
                {
                    "name": st.just("u"),
                    "user": {
                        "token": st.just(TOKEN),
                        "password": st.just(TOKEN),
                        "username": st.just("admin"),
                        "client-key-data": st.just(TOKEN),
                    },
                }
            ),
            max_size=2,
        ),
    }
)


@contextlib.contextmanager
def kubeconfig_file(text: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "kubeconfig"
        path.write_text(text, errors="surrogateescape")
        yield path


async def load(path: Path) -> None:
    try:
        client = await load_client(path)
    except KubeconfigError as exc:
        text = str(exc)
        assert str(path) in text
        assert TOKEN not in text, text
        assert "\n" not in text
        return
    await client.close()


@fuzz_settings(100)
@given(
    text=st.one_of(
        KUBECONFIG.map(lambda doc: yaml.safe_dump(doc, default_flow_style=False)),
        KUBECONFIG.map(lambda doc: yaml.safe_dump(doc, default_flow_style=True)),
        KUBECONFIG.map(lambda doc: yaml.safe_dump(doc)).flatmap(
            lambda text: st.integers(0, len(text)).map(lambda n: text[:n] + "\t" + text[n:])
        ),
        st.text(max_size=200),
    )
)
@example(text=f"users:\n- name: u\n  user:\n\ttoken: {TOKEN}\n")
@example(text=f"users: [{{name: u, user: {{token: {TOKEN}}}")
@example(  # the token pasted as the context's name too: "no such context" quotes it
    text=f"current-context: {TOKEN}\ncontexts: []\nusers: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
)
def test_fuzzed_kubeconfigs(text: str) -> None:
    with kubeconfig_file(text) as path:
        asyncio.run(load(path))


FLAGS = {
    "--namespace": st.text(max_size=6),
    "--concurrency": st.integers(-2, 3).map(str) | st.text(max_size=3),
    "--leader-elect": st.text("ab-", max_size=4),
    "--lease-duration": st.sampled_from(["15", "0", "-1", "nan", "inf", "x", "1e308"]),
    "--renew-deadline": st.sampled_from(["10", "0", "nan", "20"]),
    "--retry-period": st.sampled_from(["2", "0", "-inf"]),
    "--metrics-port": st.sampled_from(["0", "8443", "-1", "65536", "99999999999", "x"]),
    "--probe-port": st.sampled_from(["0", "8081", "-5", "70000"]),
    "--metrics-cert-dir": st.sampled_from(["/nonexistent", "", "."]),
    "--log-level": st.sampled_from(["INFO", "debug", "LOUD", ""]),
    "--log-format": st.sampled_from(["text", "json", "xml"]),
}
SWITCHES = ["--metrics-insecure", "--leader-elect"]
TARGETS = st.sampled_from(
    [
        "fastctl.demo.widgets:make_controller",
        "fastctl.demo.widgets",
        ":x",
        "fastctl.nope:x",
        "fastctl.demo.widgets:nope",
        "missing.py:x",
        "fastctl.demo.widgets:make_controller.__name__",
    ]
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    argv = ["run", draw(TARGETS)]
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=4, unique=True)):
        argv += [flag, draw(FLAGS[flag])]
    argv += draw(st.lists(st.sampled_from(SWITCHES), max_size=2, unique=True))
    return argv


DEMO = ["run", "fastctl.demo.widgets:make_controller"]


@fuzz_settings(100)
@given(argv=command_lines() | st.lists(st.text(max_size=8), max_size=4))
@example(argv=["run", "fastctl.demo.widgets:make_controller", "--lease-duration", "nan"])
@example(argv=[*DEMO, "--leader-elect", "", "--lease-duration", "0", "--log-level", "debug"])
def test_fuzzed_command_lines(argv: list[str]) -> None:
    """``fastctl run`` with any arguments exits with a status and a one-line reason; the
    cluster is replaced by a client that answers nothing and a Manager that stops at once,
    so what is fuzzed is the arguments' handling up to the run."""

    async def stopped(self: Manager) -> None:
        return None

    client = mock.AsyncMock()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stderr = io.StringIO()
    try:
        with (
            mock.patch("fastctl.kube._client.load_client", mock.AsyncMock(return_value=client)),
            mock.patch.object(Manager, "run", stopped),
            contextlib.redirect_stderr(stderr),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            try:
                code: Any = main(argv)
            except SystemExit as exc:  # argparse: usage error or --help
                code = exc.code
    finally:
        root.handlers[:], root.level = handlers, level
    assert code in (0, 1, 2, 3), code
    assert "Traceback" not in stderr.getvalue()
    if code == 1:  # the last line: with --log-level debug, log lines come first
        last = stderr.getvalue().rstrip("\n").rpartition("\n")[2]
        assert last.startswith("fastctl: error: "), stderr.getvalue()


def test_the_command_line_fuzz_reaches_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stubs above do let a valid command line through to `Manager.run` (else the fuzz
    would only ever test argparse)."""
    ran: list[Manager] = []

    async def record(self: Manager) -> None:
        ran.append(self)

    monkeypatch.setattr("fastctl.kube._client.load_client", mock.AsyncMock())
    monkeypatch.setattr(Manager, "run", record)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        assert main(["run", "fastctl.demo.widgets:make_controller", "--metrics-port", "0"]) == 0
    finally:
        root.handlers[:], root.level = handlers, level
    assert len(ran) == 1


REVIEW_STATUS = shaped(
    {
        "authenticated": st.booleans() | SCALARS,
        "allowed": st.booleans() | SCALARS,
        "user": {
            "username": st.text(max_size=6) | SCALARS,
            "groups": st.lists(st.text(max_size=4), max_size=2) | SCALARS,
        },
    }
)


@fuzz_settings(200)
@given(
    token_review=shaped({"status": REVIEW_STATUS}),
    access_review=shaped({"status": REVIEW_STATUS}),
)
@example(token_review={"status": {"authenticated": True, "user": "x"}}, access_review={})
@example(token_review={"status": []}, access_review={})
@example(  # truthy, but not a yes
    token_review={"status": {"authenticated": "false", "user": {"username": "x"}}},
    access_review={"status": {"allowed": "no"}},
)
def test_fuzzed_review_answers(token_review: Any, access_review: Any) -> None:
    """Whatever the API server answers to the metrics reviews, the scrape gets 200, 401,
    403 or 500, and 200 only when both reviews said yes in so many words."""
    answers = {"TokenReview": token_review, "SubjectAccessReview": access_review}

    async def answer(client: Any, method: str, path: str, **kw: Any) -> Any:
        return answers[orjson.loads(kw["body"])["kind"]]

    with mock.patch.object(_metrics_auth, "request_json", answer):
        verdict = asyncio.run(MetricsAuthorizer(mock.Mock()).check("Bearer t"))
    assert verdict.status in (200, 401, 403, 500)
    if verdict.allowed:
        assert token_review["status"]["authenticated"] is True
        assert access_review["status"]["allowed"] is True
