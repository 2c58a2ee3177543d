"""Secrets stay out of what fastctl prints: objects redacted, remembered values scrubbed from
texts (ApiError, Event notes, log records, ReconcileResult reprs, kubeconfig errors)."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from fastctl import _redact
from fastctl.errors import ApiError, InvalidObject, KubeconfigError
from fastctl.kube._client import load_client
from fastctl.kube._http import error_from_response
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.log import JsonFormatter, RedactingFilter, mark_sensitive, redact
from fastctl.types import Action, ObjectRef, ReconcileResult
from fastctl.webhook import AdmissionRequest, Allow, Webhooks
from fastctl.webhook._review import parse_admission_review

PASSWORD = "hunter2-very-secret"
TOKEN = "s3cr3t-token-value"


def secret(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "ns", "uid": "u1"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        "stringData": {"token": TOKEN},
    }


@pytest.fixture(autouse=True)
def forget() -> Iterator[None]:
    _redact._forget_all()
    yield
    _redact._forget_all()
    _redact._FIELDS.pop("Widget", None)


def assert_clean(text: str, *values: str) -> None:
    for value in values:
        assert value not in text
        assert base64.b64encode(value.encode()).decode() not in text


def test_redact_replaces_data_and_string_data_and_keeps_the_rest() -> None:
    obj = secret(password=PASSWORD)
    out = redact(obj)
    assert out["data"] == {"password": "<redacted>"}
    assert out["stringData"] == {"token": "<redacted>"}
    assert out["metadata"] == obj["metadata"]
    assert obj["data"]["password"] != "<redacted>"  # a copy: the cache is untouched
    config_map = {"kind": "ConfigMap", "data": {"a": "b"}}
    assert redact(config_map) is config_map


def test_marked_fields_are_redacted_and_remembered() -> None:
    mark_sensitive("Widget", "spec.password", "spec.auth.key")
    widget = {
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"password": PASSWORD, "auth": {"key": "key-material-1"}, "size": "small"},
    }
    assert redact(widget)["spec"] == {
        "password": "<redacted>",
        "auth": {"key": "<redacted>"},
        "size": "small",
    }
    _redact.remember(widget)
    assert _redact.scrub(f"bad {PASSWORD} and key-material-1, small") == (
        "bad <redacted> and <redacted>, small"
    )
    with pytest.raises(ValueError, match="at least one"):
        mark_sensitive("Widget")


def test_scrub_removes_base64_decoded_and_escaped_spellings() -> None:
    multi = 'line one\nline "two"'
    _redact.remember(secret(password=PASSWORD, multi=multi))
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    text = f"{PASSWORD} {encoded} {TOKEN} {multi!r} {multi.encode()!r}"
    clean = _redact.scrub(text)
    assert_clean(clean, PASSWORD, TOKEN)
    assert "line one" not in clean
    assert _redact.scrub("nothing secret here") == "nothing secret here"


def test_short_values_are_not_scrubbed_from_text() -> None:
    _redact.remember(secret(flag="on"))
    assert _redact.scrub("turned on") == "turned on"
    assert redact(secret(flag="on"))["data"] == {"flag": "<redacted>"}


def test_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_redact, "MAX_OBJECTS", 3)
    for n in range(10):
        obj = secret(password=f"password-number-{n}")
        obj["metadata"]["name"] = f"s{n}"
        _redact.remember(obj)
    assert len(_redact._values) == 3
    assert "password-number-9" not in _redact.scrub("password-number-9")
    assert _redact.scrub("password-number-0") == "password-number-0"  # forgotten


def test_api_error_text_and_body_are_scrubbed() -> None:
    _redact.remember(secret(password=PASSWORD))
    body = (
        b'{"kind":"Status","code":422,"reason":"Invalid","message":"ConfigMap \\"'
        + PASSWORD.encode()
        + b'\\" is invalid","details":{"causes":[{"message":"Invalid value: \\"'
        + PASSWORD.encode()
        + b'\\""}]}}'
    )
    err = error_from_response(422, body, method="POST", path="/api/v1/x")
    assert_clean(str(err), PASSWORD)
    assert_clean(repr(err.body), PASSWORD)
    plain = error_from_response(500, b"oops " + PASSWORD.encode(), method="GET", path="/x")
    assert_clean(str(plain), PASSWORD)
    assert "<redacted>" in str(plain)
    assert isinstance(plain, ApiError)


def test_reconcile_result_repr_redacts_the_object_and_the_error() -> None:
    obj = secret(password=PASSWORD)
    _redact.remember(obj)
    result = ReconcileResult(
        ObjectRef("creds", "ns"), Action.await_change(), RuntimeError(f"bad {PASSWORD}"), 0.1, obj
    )
    text = repr(result)
    assert_clean(text, PASSWORD, TOKEN)
    assert "RuntimeError('bad <redacted>')" in text
    assert "'name': 'creds'" in text


def test_invalid_object_errors_are_scrubbed() -> None:
    _redact.remember(secret(password=PASSWORD))
    err = InvalidObject("ns/creds", "Model", [f"spec.size: input_value='{PASSWORD}'"])
    assert_clean(str(err), PASSWORD)
    assert_clean(" ".join(err.errors), PASSWORD)


def test_the_filter_cleans_message_arguments_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _redact.remember(secret(password=PASSWORD))
    logger = logging.getLogger("test.redact")
    logger.addFilter(RedactingFilter())
    try:
        with caplog.at_level(logging.INFO, "test.redact"):
            logger.info("got %s", {"password": PASSWORD})
            try:
                raise ValueError(f"cannot use {PASSWORD}")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.filters.clear()
    assert_clean(caplog.text, PASSWORD)
    assert caplog.text.count("<redacted>") >= 2
    json_line = JsonFormatter().format(caplog.records[-1])
    assert_clean(json_line, PASSWORD)
    assert "cannot use <redacted>" in json_line


def test_fastctl_loggers_scrub_under_any_configuration(caplog: pytest.LogCaptureFixture) -> None:
    """The applier's logger carries the filter, so pytest's plain handler gets clean
    records."""
    _redact.remember(secret(password=PASSWORD))
    with caplog.at_level(logging.ERROR, "fastctl.runner"):
        logging.getLogger("fastctl.runner").error("reconcile failed: %r", PASSWORD)
    assert_clean(caplog.text, PASSWORD)


async def test_an_admission_handler_that_raises_with_a_secret_leaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A webhook reviewing Secrets: its handler's exception quotes the value; neither the
    logged traceback nor the denial the API server relays holds it."""
    hooks = Webhooks()

    @hooks.validating(Resource("v1", "Secret", plural="secrets"), name="s.validate.test.dev")
    async def broken(request: AdmissionRequest) -> Allow:
        obj = request.object or {}
        raise ValueError(f"weak: {base64.b64decode(obj['data']['password']).decode()}")

    (webhook,) = hooks.admission
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "1",
            "kind": {"group": "", "version": "v1", "kind": "Secret"},
            "resource": {"group": "", "version": "v1", "resource": "secrets"},
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": secret(password=PASSWORD),
        },
    }
    with caplog.at_level(logging.ERROR, "fastctl.webhook"):
        answer = await webhook.review(parse_admission_review(orjson.dumps(review)))
    message = answer["response"]["status"]["message"]
    assert "weak: <redacted>" in message
    assert_clean(message, PASSWORD)
    assert "weak: <redacted>" in caplog.text
    assert_clean(caplog.text, PASSWORD)


KUBECONFIGS = {
    "a YAML error": "apiVersion: v1\nusers:\n- name: u\n  user:\n\ttoken: {token}\n",
    "a flow mapping": "users: [ {{name: u, user: {{token: {token}}}\n",
    "no context": "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {token}\n",
    "a password": "users:\n- user:\n    password: {token}\n  name: {token}\n",
}


@pytest.mark.parametrize("text", KUBECONFIGS.values(), ids=KUBECONFIGS.keys())
def test_kubeconfig_errors_never_echo_credentials(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text.format(token=TOKEN))
    with pytest.raises(KubeconfigError) as info:
        asyncio.run(load_client(path))
    assert TOKEN not in str(info.value)
    assert str(path) in str(info.value)


# -- redact(text), and the status fastctl writes ---------------------------------------------


def test_redact_of_a_text_scrubs_it() -> None:
    _redact.remember(secret(password=PASSWORD))
    assert redact(f"login failed: {PASSWORD!r}") == "login failed: '<redacted>'"
    assert redact(f"token={TOKEN}") == "token=<redacted>"
    assert redact("nothing here") == "nothing here"


class _Sent:
    """Stands in for the HTTP layer of the object API: keeps each request's parsed body."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    async def __call__(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        self.bodies.append(orjson.loads(kw["body"]))
        return 200, {"metadata": {"name": "w", "resourceVersion": "2"}}


WIDGETS = ResolvedResource("example.com", "v1", "Widget", "widgets", True)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> _Sent:
    from fastctl.kube import _objects

    recorder = _Sent()
    monkeypatch.setattr(_objects, "request_json_status", recorder)
    return recorder


def _status_error(value: str) -> dict[str, Any]:
    message = f"driver said: password {value!r} rejected ({base64.b64encode(value.encode())!r})"
    return {"conditions": [{"type": "Ready", "status": "False", "message": message}]}


async def test_status_writes_store_no_remembered_value(sent: _Sent) -> None:
    from fastctl.kube import apply, apply_status, create, patch

    _redact.remember(secret(password=PASSWORD))
    obj = {"metadata": {"name": "w", "namespace": "ns"}}
    await apply_status(None, WIDGETS, obj, status=_status_error(PASSWORD), field_manager="m")  # type: ignore[arg-type]
    await apply_status(None, WIDGETS, {**obj, "status": _status_error(PASSWORD)}, field_manager="m")  # type: ignore[arg-type]
    await patch(None, WIDGETS, "w", {"status": _status_error(PASSWORD)}, namespace="ns",  # type: ignore[arg-type]
                subresource="status")  # fmt: skip
    await patch(None, WIDGETS, "w", [{"op": "replace", "path": "/status", "value":  # type: ignore[arg-type]
                _status_error(PASSWORD)}], namespace="ns", patch_type="json",
                subresource="status")  # fmt: skip
    await apply(None, WIDGETS, {**obj, "status": _status_error(PASSWORD)}, field_manager="m")  # type: ignore[arg-type]
    await create(None, WIDGETS, {**obj, "status": _status_error(PASSWORD)})  # type: ignore[arg-type]
    assert len(sent.bodies) == 6
    for body in sent.bodies:
        text = orjson.dumps(body).decode()
        assert_clean(text, PASSWORD)
        assert "<redacted>" in text


async def test_what_is_not_status_is_written_as_given(sent: _Sent) -> None:
    from fastctl.kube import apply, patch

    _redact.remember(secret(password=PASSWORD))
    spec = {"password": PASSWORD}
    obj = {"metadata": {"name": "w", "namespace": "ns"}, "spec": spec}
    await apply(None, WIDGETS, obj, field_manager="m")  # type: ignore[arg-type]
    await patch(None, WIDGETS, "w", [  # type: ignore[arg-type]
        {"op": "test", "path": "/status/x", "value": PASSWORD},
        {"op": "add", "path": "/statuses", "value": PASSWORD},
    ], namespace="ns", patch_type="json")  # fmt: skip
    assert sent.bodies[0]["spec"] == spec, "the operator's own data was changed"
    ops = sent.bodies[1]
    assert [op["value"] for op in ops if op["op"] != "replace"] == [PASSWORD, PASSWORD]


SECRETS = ResolvedResource("", "v1", "Secret", "secrets", True)


@pytest.mark.parametrize("how", ["create", "apply", "patch"])
async def test_a_secret_written_through_fastctl_is_scrubbed_from_later_statuses(
    sent: _Sent, how: str
) -> None:
    """An operator that generates a password and caches Secrets metadata-only never reads
    the value back: what it writes is remembered as what it reads."""
    from fastctl.kube import apply, apply_status, create, patch

    generated = "generated-pw-0Zq81xV"
    body = {"metadata": {"name": "db", "namespace": "ns"}, "stringData": {"password": generated}}
    if how == "create":
        await create(None, SECRETS, body)  # type: ignore[arg-type]
    elif how == "apply":
        await apply(None, SECRETS, body, field_manager="m")  # type: ignore[arg-type]
    else:
        await patch(None, SECRETS, "db", {"stringData": {"password": generated}}, namespace="ns")  # type: ignore[arg-type]
    obj = {"metadata": {"name": "w", "namespace": "ns"}}
    await apply_status(None, WIDGETS, obj, status=_status_error(generated), field_manager="m")  # type: ignore[arg-type]
    assert sent.bodies[0]["stringData"] == {"password": generated}, "the Secret itself is sent"
    status = orjson.dumps(sent.bodies[1]).decode()
    assert_clean(status, generated)
    assert redact(f"login with {generated} failed") == "login with <redacted> failed"
