"""`fastctl.webhook.json_patch`: applying the patch to the old document gives the new one,
for any pair of JSON documents (Hypothesis), with keys that need JSON Pointer escaping.

The applier here is a small, strict RFC 6902 one (add, remove, replace; a missing target is
an error), written independently of the diff it checks."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastctl.webhook import json_patch


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _apply(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        path = op["path"]
        if path == "":
            assert op["op"] == "replace"
            doc = copy.deepcopy(op["value"])
            continue
        *parents, last = [_unescape(t) for t in path.split("/")[1:]]
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if isinstance(target, list):
            index = int(last)
            if op["op"] == "add":
                assert 0 <= index <= len(target), op
                target.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "remove":
                del target[index]
            else:
                assert index < len(target), op
                target[index] = copy.deepcopy(op["value"])
        else:
            if op["op"] == "add":
                assert last not in target, f"add over an existing key: {op}"
                target[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del target[last]
            else:
                assert last in target, f"replace of a missing key: {op}"
                target[last] = copy.deepcopy(op["value"])
    return doc


KEYS = st.sampled_from(["a", "b", "", "~", "/", "a/b", "~1", "~0x", "app.kubernetes.io/name"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equality that tells true from 1 and 1.0 from 1, as JSON does."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(JSON, JSON)
def test_applying_the_diff_gives_the_new_document(old: Any, new: Any) -> None:
    assert _same(_apply(old, json_patch(old, new)), new)


@given(JSON)
def test_no_change_is_no_operation(doc: Any) -> None:
    assert json_patch(doc, copy.deepcopy(doc)) == []


def test_keys_are_escaped_as_json_pointers() -> None:
    old: dict[str, Any] = {"metadata": {"labels": {}}}
    new = {"metadata": {"labels": {"app.kubernetes.io/name": "x", "a~b": "y"}}}
    assert json_patch(old, new) == [
        {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "x"},
        {"op": "add", "path": "/metadata/labels/a~0b", "value": "y"},
    ]


def test_true_is_not_one() -> None:
    assert json_patch({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]


def test_a_shorter_list_loses_its_tail_from_the_end() -> None:
    assert json_patch([1, 2, 3], [1]) == [
        {"op": "remove", "path": "/2"},
        {"op": "remove", "path": "/1"},
    ]
