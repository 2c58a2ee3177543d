"""`set_condition` keeps a condition's transition time while its status stays, for typed and
dict statuses alike, and never changes the items it replaces; a ``list[Condition]`` is a
list-map keyed by ``type`` in the CRD, and ``list_map_keys`` says so for any model."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import Field

from fastctl import CustomResource, KubeModel, SchemaError
from fastctl.kube import Condition, set_condition

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def ready(status: str = "True", **extra: Any) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": "Rendered", **extra}


def test_a_new_condition_is_appended_with_the_time_and_the_generation() -> None:
    conditions: list[Any] = []
    assert set_condition(conditions, ready(message="ok"), generation=3, now=T0)
    assert conditions == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Rendered",
            "message": "ok",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-01-01T12:00:00Z",
        }
    ]


def test_the_time_is_kept_while_the_status_stays_and_the_rest_is_updated() -> None:
    conditions: list[Any] = []
    set_condition(conditions, ready(message="one"), generation=1, now=T0)
    assert set_condition(conditions, ready(message="two", reason="Again"), generation=2, now=T1)
    (only,) = conditions
    assert only["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert (only["message"], only["reason"], only["observedGeneration"]) == ("two", "Again", 2)


def test_a_status_change_moves_the_time() -> None:
    conditions: list[Any] = []
    set_condition(conditions, ready("True"), now=T0)
    assert set_condition(conditions, ready("False"), now=T1)
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T12:05:00Z"
    assert conditions[0]["status"] == "False"


def test_the_same_condition_again_changes_nothing() -> None:
    conditions: list[Any] = []
    set_condition(conditions, ready(), generation=1, now=T0)
    before = copy.deepcopy(conditions)
    assert not set_condition(conditions, ready(), generation=1, now=T1)
    assert conditions == before


def test_other_types_are_left_alone_and_the_old_item_is_replaced_not_changed() -> None:
    cached = [ready(lastTransitionTime="2025-01-01T00:00:00Z"), {**ready(), "type": "Synced"}]
    snapshot = copy.deepcopy(cached)
    conditions = list(cached)  # a copy of the cache's list, not of its items
    set_condition(conditions, ready("False"), now=T1)
    assert cached == snapshot, "the cached items were changed"
    assert [c["type"] for c in conditions] == ["Ready", "Synced"]
    assert conditions[1] is cached[1]


def test_the_condition_s_own_generation_wins() -> None:
    conditions: list[Any] = []
    set_condition(conditions, ready(observedGeneration=7), generation=9, now=T0)
    assert conditions[0]["observedGeneration"] == 7


def test_typed_conditions_stay_typed() -> None:
    conditions: list[Condition] = []
    set_condition(conditions, Condition(type="Ready", status="True", reason="A"), now=T0)
    first = conditions[0]
    set_condition(
        conditions, Condition(type="Ready", status="True", reason="B"), generation=4, now=T1
    )
    (now,) = conditions
    assert isinstance(now, Condition)
    assert (now.reason, now.observed_generation) == ("B", 4)
    assert now.last_transition_time == "2026-01-01T12:00:00Z"
    assert first.reason == "A", "the replaced model was changed"
    assert now.model_dump(by_alias=True)["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_a_typed_condition_reads_a_list_parsed_from_the_server() -> None:
    class Status(KubeModel):
        conditions: list[Condition] = Field(default_factory=list)

    status = Status.model_validate(
        {"conditions": [ready(lastTransitionTime="2025-01-01T00:00:00Z", message="m")]}
    )
    conditions = list(status.conditions)
    assert not set_condition(conditions, Condition(type="Ready", status="True", reason="Rendered",
                                                   message="m"), now=T1)  # fmt: skip
    assert conditions[0].last_transition_time == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("condition", "words"),
    [
        ({"status": "True", "reason": "R"}, "needs a type"),
        (ready(status="Yes"), "status must be one of"),
        ({"type": "Ready", "status": "True"}, "a reason is required"),
    ],
)
def test_a_condition_missing_its_parts_is_refused(condition: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        set_condition([], condition)


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        set_condition([], ready(), now=datetime(2026, 1, 1))


def test_the_model_checks_what_metav1_checks() -> None:
    with pytest.raises(ValueError, match="reason"):
        Condition(type="Ready", status="True", reason="has spaces")
    with pytest.raises(ValueError, match="status"):
        Condition(type="Ready", status="Maybe", reason="R")  # type: ignore[arg-type]


# -- the CRD ------------------------------------------------------------------------------


class _Status(KubeModel):
    conditions: list[Condition] = Field(default_factory=list)


class _Thing(CustomResource, group="test.fastctl.dev", version="v1"):
    status: _Status | None = None


def test_a_list_of_conditions_is_a_list_map_keyed_by_type() -> None:
    node = _Thing.openapi_schema()["properties"]["status"]["properties"]["conditions"]
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == ["type"]
    item = node["items"]
    assert set(item["required"]) == {"type", "status", "reason", "lastTransitionTime"}
    assert item["properties"]["lastTransitionTime"] == {
        "type": "string",
        "format": "date-time",
        "description": "When the status last changed (RFC 3339).",
    }
    assert not any(key.startswith("x-fastctl") for key in item)


def test_list_map_keys_on_any_model_and_its_checks() -> None:
    class Port(KubeModel, list_map_keys=["port_name"]):
        port_name: str
        number: int

    class Spec(KubeModel):
        ports: list[Port] = Field(default_factory=list)
        main: Port | None = None  # a single item: no list, nothing to key

    class Service(CustomResource, group="test.fastctl.dev", version="v1"):
        spec: Spec

    spec = Service.openapi_schema()["properties"]["spec"]["properties"]
    assert spec["ports"]["x-kubernetes-list-map-keys"] == ["portName"]
    assert "x-kubernetes-list-type" not in spec["main"]

    class Loose(KubeModel, list_map_keys=["name"]):
        name: str | None = None

    class Bad(CustomResource, group="test.fastctl.dev", version="v1"):
        spec: list[Loose]

    with pytest.raises(SchemaError, match="spec: the list-map key 'name' must be required"):
        Bad.openapi_schema()

    class Unknown(KubeModel, list_map_keys=["nope"]):
        name: str

    class Worse(CustomResource, group="test.fastctl.dev", version="v1"):
        spec: list[Unknown]

    with pytest.raises(SchemaError, match="'nope' is not a field"):
        Worse.openapi_schema()
    with pytest.raises(TypeError, match="list of field names"):

        class _Typo(KubeModel, list_map_keys="name"):
            name: str
