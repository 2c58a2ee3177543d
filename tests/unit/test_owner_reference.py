"""`owner_reference`: the controller reference to a dict or typed owner, refused (naming what
is missing) for an owner without its type, name or uid."""

from __future__ import annotations

from typing import Any

import pytest

from fastctl import CustomResource
from fastctl.kube import owner_reference


class Widget(CustomResource, group="example.com", version="v1"):
    pass


def owner(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


def test_a_dict_owner() -> None:
    assert owner_reference(owner(name="w", uid="u-1", namespace="ns")) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_a_typed_owner_and_the_options() -> None:
    widget = Widget.model_validate({"metadata": {"name": "w", "uid": "u-2"}})
    assert owner_reference(widget, controller=False, block_owner_deletion=False) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "u-2",
        "controller": False,
        "blockOwnerDeletion": False,
    }


@pytest.mark.parametrize(
    ("obj", "missing"),
    [
        (owner(name="w"), "no metadata.uid"),
        (owner(uid="u"), "no metadata.name"),
        ({"metadata": {"name": "w", "uid": "u"}}, "no apiVersion, kind"),
        ({"kind": "Widget"}, "no apiVersion, metadata.name, metadata.uid"),
        (Widget.model_validate({"metadata": {"name": "w"}}), "Widget w: it has no metadata.uid"),
    ],
)
def test_an_owner_without_what_a_reference_needs_is_refused(obj: Any, missing: str) -> None:
    with pytest.raises(ValueError, match=missing):
        owner_reference(obj)


def test_a_non_object_is_refused() -> None:
    with pytest.raises(TypeError, match="an owner is an object"):
        owner_reference("w")
