"""`ObjectRef.from_object`, on the path of every watch event: a served object's reference
is built without the dataclass's validation, and is the same reference (equal, same hash,
same key) as the validated one; anything else is still validated and refused."""

from __future__ import annotations

from typing import Any

import pytest

from fastctl.types import ObjectRef


class Name(str):
    """A str subclass: valid, but not the plain str of a parsed object."""


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"name": "a", "namespace": "shop"}, ObjectRef("a", "shop")),
        ({"name": "a"}, ObjectRef("a")),
        ({"name": "a", "namespace": ""}, ObjectRef("a")),  # cluster-scoped, as served
        ({"name": "a", "namespace": None}, ObjectRef("a")),
        ({"name": Name("a"), "namespace": Name("shop")}, ObjectRef("a", "shop")),
    ],
)
def test_a_served_object_s_reference_is_the_validated_one(
    meta: dict[str, Any], expected: ObjectRef
) -> None:
    ref = ObjectRef.from_object({"metadata": meta})
    assert ref == expected
    assert hash(ref) == hash(expected)
    assert ref.key == expected.key
    assert {expected: 1}[ref] == 1  # finds the cache's entry


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"name": ""}},
        {"metadata": {"name": 3}},
        {"metadata": {"name": "a", "namespace": 5}},
        {"metadata": {"name": None}},
        {"metadata": {}},
        {"metadata": None},
        {"metadata": "a"},
        {},
        None,
        "a",
    ],
)
def test_anything_else_is_refused(obj: Any) -> None:
    with pytest.raises(ValueError, match=r"not a Kubernetes object with metadata\.name"):
        ObjectRef.from_object(obj)
