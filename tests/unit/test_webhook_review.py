"""Admission and conversion reviews without an API server: what the handler is given, and
the answer the API server gets for every way a handler can end (allow, deny, a changed
object, an exception, a wrong type, a timeout); CRD conversion by direct functions and
through a hub."""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from typing import Any

import orjson
import pytest

from fastctl.kube import Resource
from fastctl.webhook import AdmissionRequest, Allow, Deny, Webhooks
from fastctl.webhook._review import ReviewError, parse_admission_review

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)


def _review(
    operation: str = "CREATE",
    obj: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> bytes:
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "cm",
        "namespace": "ns",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["devs"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


def _cm(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data}


async def _answer(hooks: Webhooks, body: bytes) -> dict[str, Any]:
    (webhook,) = hooks.admission
    answer = await webhook.review(parse_admission_review(body))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == orjson.loads(body)["request"]["uid"]
    response: dict[str, Any] = answer["response"]
    return response


async def test_the_handler_gets_the_request_and_its_denial_reaches_the_answer() -> None:
    hooks = Webhooks()
    seen: list[AdmissionRequest] = []

    @hooks.validating(CONFIGMAP, name="cm.validate.test.dev", operations=["UPDATE"])
    async def check(request: AdmissionRequest) -> Allow | Deny:
        seen.append(request)
        return Deny("no colour", warnings=["mind the colour"], code=422, reason="Invalid")

    response = await _answer(hooks, _review("UPDATE", _cm(a="2"), _cm(a="1"), dry_run=True))
    assert response["allowed"] is False
    assert response["status"] == {"code": 422, "message": "no colour", "reason": "Invalid"}
    assert response["warnings"] == ["mind the colour"]
    assert "patch" not in response
    (request,) = seen
    assert request.operation == "UPDATE"
    assert request.dry_run is True
    assert request.old_object == _cm(a="1")
    assert request.object == _cm(a="2")
    assert request.user_info["username"] == "alice"
    assert request.namespace == "ns"
    assert request.kind["kind"] == "ConfigMap"


async def test_a_plain_function_may_allow_with_warnings() -> None:
    hooks = Webhooks()
    hooks.validating(CONFIGMAP, name="cm.validate.test.dev")(lambda r: Allow(warnings=["w"]))
    response = await _answer(hooks, _review(obj=_cm()))
    assert response == {"uid": response["uid"], "allowed": True, "warnings": ["w"]}


async def test_a_mutating_handler_returns_the_object_and_fastctl_sends_the_patch() -> None:
    hooks = Webhooks()

    @hooks.mutating(CONFIGMAP, name="cm.mutate.test.dev")
    def default(request: AdmissionRequest) -> dict[str, Any]:
        obj = request.object
        assert obj is not None
        obj["data"]["added"] = "yes"  # in place: fastctl diffs against its own copy
        obj["metadata"]["labels"] = {"app.kubernetes.io/name": "x"}
        return obj

    original = _cm(a="1")
    response = await _answer(hooks, _review(obj=original))
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = orjson.loads(base64.b64decode(response["patch"]))
    assert patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"app.kubernetes.io/name": "x"}},
        {"op": "add", "path": "/data/added", "value": "yes"},
    ]


async def test_an_unchanged_object_sends_no_patch() -> None:
    hooks = Webhooks()
    hooks.mutating(CONFIGMAP, name="cm.mutate.test.dev")(lambda r: r.object)
    response = await _answer(hooks, _review(obj=_cm(a="1")))
    assert response == {"uid": response["uid"], "allowed": True}


async def test_a_handler_that_raises_is_a_denial_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = Webhooks()

    @hooks.validating(CONFIGMAP, name="cm.validate.test.dev")
    async def broken(request: AdmissionRequest) -> Allow:
        raise KeyError("spec")

    with caplog.at_level(logging.ERROR, "fastctl.webhook"):
        response = await _answer(hooks, _review(obj=_cm()))
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    message = response["status"]["message"]
    assert "cm.validate.test.dev" in message
    assert "broken" in message
    assert "KeyError('spec')" in message
    assert any(r.exc_info for r in caplog.records), "the traceback is logged"


@pytest.mark.parametrize(("mutating", "result"), [(False, None), (False, {"a": 1}), (True, 42)])
async def test_a_wrong_return_type_is_a_denial_naming_the_handler(
    mutating: bool, result: object
) -> None:
    hooks = Webhooks()

    def sloppy(request: AdmissionRequest) -> object:
        return result

    register = hooks.mutating if mutating else hooks.validating
    register(CONFIGMAP, name="cm.hook.test.dev")(sloppy)
    response = await _answer(hooks, _review(obj=_cm()))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "test_webhook_review" in message
    assert "sloppy" in message
    assert f"returned {type(result).__name__}" in message


async def test_a_slow_handler_is_denied_at_its_deadline() -> None:
    hooks = Webhooks()
    never = asyncio.Event()

    @hooks.validating(CONFIGMAP, name="cm.validate.test.dev", timeout_seconds=1)
    async def slow(request: AdmissionRequest) -> Allow:
        await never.wait()
        return Allow()

    response = await _answer(hooks, _review(obj=_cm()))
    assert response["allowed"] is False
    assert response["status"]["code"] == 504
    assert "did not return within 0.8 s" in response["status"]["message"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", "not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "v1"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
    ],
)
def test_a_body_that_is_not_a_v1_review_is_refused(body: bytes, error: str) -> None:
    with pytest.raises(ReviewError, match=error):
        parse_admission_review(body)


def test_registration_checks_what_the_configuration_needs() -> None:
    hooks = Webhooks()
    with pytest.raises(ValueError, match="plural"):
        hooks.validating(Resource("v1", "ConfigMap"), name="a.b.c")(lambda r: Allow())
    with pytest.raises(ValueError, match="fully qualified"):
        hooks.validating(CONFIGMAP, name="short")(lambda r: Allow())
    with pytest.raises(ValueError, match="operations"):
        hooks.validating(CONFIGMAP, name="a.b.c", operations=["PATCH"])(  # type: ignore[list-item]
            lambda r: Allow()
        )


# -- conversion -------------------------------------------------------------------------------


def _conversion_review(desired: str, *objects: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": list(objects)},
        }
    )


def _widget(version: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"ex.dev/{version}", "kind": "W", "metadata": {"name": "w"}, "spec": spec}


def _converters() -> Webhooks:
    hooks = Webhooks()
    widgets = hooks.conversion("widgets.ex.dev", hub="v2")

    @widgets.converts("v1", "v2")
    def up(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"] = {"size": {"value": obj["spec"].pop("size")}}
        return obj

    @widgets.converts("v2", "v1")
    async def down(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"] = {"size": obj["spec"]["size"]["value"]}
        return obj

    @widgets.converts("v2", "v3")
    def to_v3(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"]["v3"] = True
        return obj

    return hooks


async def test_conversion_up_down_and_through_the_hub() -> None:
    (widgets,) = _converters().converters
    answer = await widgets.review(_conversion_review("ex.dev/v2", _widget("v1", size=3)))
    assert answer["kind"] == "ConversionReview"
    assert answer["response"]["uid"] == "u-1"
    assert answer["response"]["result"] == {"status": "Success"}
    assert answer["response"]["convertedObjects"] == [_widget("v2", size={"value": 3})]
    back = await widgets.review(_conversion_review("ex.dev/v1", _widget("v2", size={"value": 3})))
    assert back["response"]["convertedObjects"] == [_widget("v1", size=3)]
    hub = await widgets.review(_conversion_review("ex.dev/v3", _widget("v1", size=3)))
    assert hub["response"]["convertedObjects"] == [_widget("v3", size={"value": 3}, v3=True)]


async def test_a_conversion_without_a_route_fails_with_a_message() -> None:
    (widgets,) = _converters().converters
    answer = await widgets.review(_conversion_review("ex.dev/v1", _widget("v3")))
    assert answer["response"]["result"]["status"] == "Failure"
    assert "no conversion from v3 to v1" in answer["response"]["result"]["message"]


async def test_a_conversion_function_that_raises_fails_the_review() -> None:
    (widgets,) = _converters().converters
    answer = await widgets.review(_conversion_review("ex.dev/v2", _widget("v1")))  # no size
    assert answer["response"]["result"]["status"] == "Failure"
    assert "KeyError('size')" in answer["response"]["result"]["message"]
