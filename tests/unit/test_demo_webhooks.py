"""The demo Widget's webhooks (`fastctl.demo.webhooks`) through the reviews the API server
sends: refusals with their message, the warning, the default, and the conversion (v1 →
v1alpha1 → v1 gives the object back, for any data; a key named twice fails)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastctl.demo import webhooks
from fastctl.demo.widgets import WIDGET, widget

pytest.importorskip("pydantic")

HOOKS = webhooks.make_webhooks()
BY_NAME = {w.name: w for w in HOOKS.admission}
(CONVERTER,) = HOOKS.converters


def _admit(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    from fastctl.webhook._review import parse_admission_review

    request = {
        "uid": str(uuid.uuid4()),
        "operation": "CREATE",
        "object": obj,
        "userInfo": {"username": "alice"},
    }
    body = orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )
    review = asyncio.run(BY_NAME[name].review(parse_admission_review(body)))
    response: dict[str, Any] = review["response"]
    return response


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"not a key!": "x"}, "'not a key!' is not a valid ConfigMap key"),
        ({f"k{i}": "v" for i in range(webhooks.MAX_KEYS + 1)}, "a Widget renders at most 64"),
    ],
)
def test_what_cannot_be_rendered_is_refused_with_why(data: dict[str, str], message: str) -> None:
    response = _admit(webhooks.VALIDATE, widget("w", "ns", data))
    assert response["allowed"] is False
    assert message in response["status"]["message"]


def test_an_empty_widget_is_admitted_with_a_warning() -> None:
    response = _admit(webhooks.VALIDATE, widget("w", "ns", {}))
    assert response["allowed"] is True
    assert response["warnings"] == ["spec.data is empty: the rendered ConfigMap will have no keys"]
    full = _admit(webhooks.VALIDATE, widget("w", "ns", {f"k{i}": "v" for i in range(64)}))
    assert full["allowed"] is True
    assert not full.get("warnings")


def test_the_owner_defaults_to_the_creating_user_and_is_not_overwritten() -> None:
    response = _admit(webhooks.DEFAULT, widget("w", "ns", {"a": "b"}))
    patch = orjson.loads(base64.b64decode(response["patch"]))
    assert patch == [{"op": "add", "path": "/spec/owner", "value": "alice"}]
    given_owner = widget("w", "ns", {"a": "b"})
    given_owner["spec"]["owner"] = "bob"
    assert "patch" not in _admit(webhooks.DEFAULT, given_owner)


def _convert(obj: dict[str, Any], version: str) -> dict[str, Any]:
    return asyncio.run(CONVERTER.convert(obj, f"{WIDGET.group}/{version}"))


keys = st.from_regex(r"[-._a-zA-Z0-9]{1,12}", fullmatch=True)


@settings(deadline=None, max_examples=60)
@given(
    data=st.dictionaries(keys, st.text(max_size=8), max_size=6),
    owner=st.none() | st.text(min_size=1, max_size=5),
)
def test_v1_to_v1alpha1_and_back_is_the_same_object(
    data: dict[str, str], owner: str | None
) -> None:
    obj = widget("w", "ns", data)
    if owner is not None:
        obj["spec"]["owner"] = owner
    obj["status"] = {"observedGeneration": 2}
    old = _convert(obj, "v1alpha1")
    assert old["apiVersion"] == f"{WIDGET.group}/v1alpha1"
    assert [(v["key"], v["value"]) for v in old["spec"].get("values", [])] == sorted(data.items())
    back = _convert(old, "v1")
    expected = {k: v for k, v in obj["spec"].items() if v}  # an empty map is not written
    assert back == {**obj, "spec": expected}


def test_a_key_named_twice_in_v1alpha1_has_no_v1_form() -> None:
    old = {
        "apiVersion": f"{WIDGET.group}/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"values": [{"key": "a", "value": "1"}, {"key": "a", "value": "2"}]},
    }
    with pytest.raises(ValueError, match="names the key 'a' twice"):
        _convert(old, "v1")
