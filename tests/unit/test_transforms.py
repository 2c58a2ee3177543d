"""Transforms: what a watch keeps of each object before it is cached.

The built-ins drop what they say and nothing else; the watcher applies the transform to
listed and watched objects alike and puts the identity back (the store's keys, own-write
echoes and read-your-writes read it), and a controller's relation passes its own transform
to its watch; equal built-ins are equal values, so equal scopes still share a watch."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube import (
    Resource,
    WatchConfig,
    chain_transforms,
    drop_annotations,
    drop_last_applied,
    drop_managed_fields,
    keep_paths,
)
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._transforms import LAST_APPLIED
from fastctl.kube._watcher import Backoff, EventKind, ObjectEvent, _Watcher
from fastctl.runtime import Controller

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)


def configmap(name: str = "a", rv: str = "2") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"app": "web"},
            "annotations": {LAST_APPLIED: "{...}", "note": "kept"},
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"uid": "owner", "controller": True}],
        },
        "data": {"a": "1", "b": "2"},
        "binaryData": {"c": "Mw=="},
    }


def watcher_with(transform: Any, *, strip: bool | None = None) -> _Watcher:
    config = WatchConfig(transform=transform, strip_managed_fields=strip)
    w = _Watcher(ApiClient.__new__(ApiClient), CM, "ns", config, Backoff(), None)
    w.state.rv = "1"  # watching, not listing
    return w


def test_the_built_ins_drop_what_they_name_and_nothing_else() -> None:
    obj = drop_managed_fields(configmap())
    assert "managedFields" not in obj["metadata"]
    assert obj["metadata"]["annotations"]
    assert obj["data"] == {"a": "1", "b": "2"}

    obj = drop_last_applied(configmap())
    assert obj["metadata"]["annotations"] == {"note": "kept"}
    assert obj["metadata"]["managedFields"]

    assert "annotations" not in drop_annotations()(configmap())["metadata"]
    only = drop_annotations("note", LAST_APPLIED)(configmap())
    assert "annotations" not in only["metadata"]  # emptied: the map goes too

    kept = keep_paths("data.a")(configmap())
    assert kept["data"] == {"a": "1"}
    assert "binaryData" not in kept
    assert kept["metadata"] == configmap()["metadata"]  # metadata whole, always
    assert keep_paths("spec.replicas")(configmap())["metadata"]["name"] == "a"  # missing: skipped

    both = chain_transforms(drop_managed_fields, drop_last_applied)(configmap())
    assert "managedFields" not in both["metadata"]
    assert both["metadata"]["annotations"] == {"note": "kept"}


def test_built_ins_are_values_and_bad_ones_are_refused_at_once() -> None:
    assert keep_paths("data") == keep_paths("data")
    assert keep_paths("data") != keep_paths("spec")
    assert chain_transforms(drop_managed_fields, keep_paths("data")) == chain_transforms(
        drop_managed_fields, keep_paths("data")
    )
    assert drop_annotations(LAST_APPLIED) == drop_last_applied
    with pytest.raises(ValueError, match="dotted path"):
        keep_paths("spec..x")
    with pytest.raises(TypeError, match="not callable"):
        chain_transforms("data")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transform must be callable"):
        WatchConfig(transform="data")  # type: ignore[arg-type]


def test_the_watcher_transforms_watched_and_listed_objects_and_keeps_the_identity() -> None:
    """A transform that drops everything, the identity included: the watcher puts name,
    namespace, uid and resourceVersion back (the store keys and own-write checks need
    them), and nothing else."""
    w = watcher_with(lambda obj: {"data": obj.get("data")})
    event = w._event("MODIFIED", configmap(rv="7"))
    assert isinstance(event, ObjectEvent)
    assert event.kind is EventKind.APPLY
    assert event.obj == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"a": "1", "b": "2"},
        "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "resourceVersion": "7"},
    }
    assert w.state.rv == "7"
    deleted = w._event("DELETED", configmap(rv="8"))
    assert isinstance(deleted, ObjectEvent)
    assert "managedFields" not in deleted.obj["metadata"]
    assert deleted.obj["metadata"]["uid"] == "uid-a"
    with pytest.raises(TypeError, match="must return a dict"):
        watcher_with(lambda obj: None)._event("MODIFIED", configmap())


def test_a_transform_runs_after_the_managed_fields_are_stripped() -> None:
    seen: list[dict[str, Any]] = []

    def look(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(obj["metadata"]))
        return obj

    watcher_with(look, strip=True)._event("MODIFIED", configmap())
    assert "managedFields" not in seen[0]
    watcher_with(look, strip=None)._event("MODIFIED", configmap())  # a bare watcher: kept
    assert "managedFields" in seen[1]


def test_a_relation_watches_with_its_own_transform_not_the_primarys() -> None:
    ctl = Controller(
        ApiClient.__new__(ApiClient),
        WIDGET,
        lambda obj, ctx: None,
        watch_config=WatchConfig(transform=keep_paths("spec")),
    )
    ctl.owns(CONFIGMAP, cache=True, transform=drop_last_applied)
    primary, related = ctl.spec.watch_uses()
    assert primary.config.transform == keep_paths("spec")
    assert related.config.transform == drop_last_applied
    assert related.config.strip_managed_fields is True  # the controller's default
    with pytest.raises(TypeError, match="transform must be callable"):
        ctl.owns(Resource("v1", "Secret"), transform="data")  # type: ignore[arg-type]
