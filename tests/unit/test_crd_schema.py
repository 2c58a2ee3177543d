"""CRD generation from typed models, one mapping per test, without an API server (the server
accepting what is generated is tests/kube/test_typed.py's part). Every model a structural
schema cannot express must fail with the field path and the rule it breaks."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from fastctl import CustomResource, KubeModel, PrinterColumn, SchemaError, ValidationRule
from fastctl.kube import crd


def schema_of(spec: type[KubeModel]) -> dict[str, Any]:
    """The structural schema of `spec` as the ``spec`` of a throwaway resource."""

    class Thing(CustomResource, group="test.fastctl.dev", version="v1"):
        spec: spec  # type: ignore[valid-type]

    root = Thing.openapi_schema()
    result: dict[str, Any] = root["properties"]["spec"]
    return result


def field(spec: type[KubeModel], name: str) -> dict[str, Any]:
    result: dict[str, Any] = schema_of(spec)["properties"][name]
    return result


def no_refs(node: object) -> bool:
    text = json.dumps(node)
    return "$ref" not in text and "$defs" not in text and "anyOf" not in text


# -- mappings --------------------------------------------------------------------------------


def test_import_fastctl_does_not_import_pydantic() -> None:
    code = "import sys, fastctl, fastctl.kube, fastctl.runtime; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_nested_models_are_inlined_with_their_docstrings_and_descriptions() -> None:
    class Inner(KubeModel):
        """The inner part."""

        size: int

    class Spec(KubeModel):
        inner: Inner = Field(description="what is inside")
        again: Inner

    schema = schema_of(Spec)
    assert no_refs(schema)
    assert schema["properties"]["inner"] == {
        "type": "object",
        "description": "what is inside",
        "required": ["size"],
        "properties": {"size": {"type": "integer"}},
    }
    assert schema["properties"]["again"]["description"] == "The inner part."
    assert schema["required"] == ["inner", "again"]


def test_snake_case_fields_are_camel_case_on_the_wire() -> None:
    class Spec(KubeModel):
        max_replicas: int = 1

    assert list(schema_of(Spec)["properties"]) == ["maxReplicas"]


def test_optional_is_nullable_and_a_none_default_is_left_out() -> None:
    class Inner(KubeModel):
        a: int = 0

    class Spec(KubeModel):
        count: int | None = None
        inner: Inner | None = None

    assert field(Spec, "count") == {"type": "integer", "nullable": True}
    assert field(Spec, "inner")["nullable"] is True
    assert field(Spec, "inner")["type"] == "object"


def test_literals_and_enums_become_enums() -> None:
    class Color(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Spec(KubeModel):
        mode: Literal["fast", "slow"] = "fast"
        only: Literal["x"]
        color: Color = Color.BLUE
        level: Literal[1, 2, 3] | None = None

    assert field(Spec, "mode") == {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
    assert field(Spec, "only") == {"type": "string", "enum": ["x"]}
    assert field(Spec, "color") == {"type": "string", "enum": ["red", "blue"], "default": "blue"}
    assert field(Spec, "level") == {"type": "integer", "enum": [1, 2, 3], "nullable": True}


def test_defaults_are_kept() -> None:
    class Spec(KubeModel):
        n: int = 3
        s: str = "x"
        flags: list[str] = Field(default=["a"])
        on: bool = False

    props = schema_of(Spec)["properties"]
    assert [props[k]["default"] for k in ("n", "s", "flags", "on")] == [3, "x", ["a"], False]


def test_numeric_bounds_use_the_openapi_3_0_spelling() -> None:
    class Spec(KubeModel):
        closed: Annotated[int, Field(ge=1, le=10)] = 1
        opened: Annotated[float, Field(gt=0, lt=1)] = 0.5
        step: Annotated[int, Field(multiple_of=5)] = 5

    assert field(Spec, "closed") == {"type": "integer", "minimum": 1, "maximum": 10, "default": 1}
    assert field(Spec, "opened") == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
        "default": 0.5,
    }
    assert field(Spec, "step")["multipleOf"] == 5


def test_string_and_array_bounds() -> None:
    class Spec(KubeModel):
        name: Annotated[str, Field(min_length=1, max_length=63, pattern="^[a-z]+$")]
        items: Annotated[
            list[Annotated[str, Field(max_length=3)]], Field(min_length=1, max_length=4)
        ]

    assert field(Spec, "name") == {
        "type": "string",
        "minLength": 1,
        "maxLength": 63,
        "pattern": "^[a-z]+$",
    }
    assert field(Spec, "items") == {
        "type": "array",
        "minItems": 1,
        "maxItems": 4,
        "items": {"type": "string", "maxLength": 3},
    }


def test_int_or_string() -> None:
    class Spec(KubeModel):
        port: int | str = 80
        maybe: int | str | None = None

    assert field(Spec, "port") == {"x-kubernetes-int-or-string": True, "default": 80}
    assert field(Spec, "maybe") == {"x-kubernetes-int-or-string": True, "nullable": True}


def test_free_form_maps_preserve_unknown_fields_and_typed_maps_say_their_values() -> None:
    class Open(KubeModel, extra="allow"):
        known: int = 0

    class Spec(KubeModel):
        anything: dict[str, Any] = Field(default_factory=dict)
        value: Any = None
        labels: dict[str, str] = Field(default_factory=dict)
        open: Open = Open()

    assert field(Spec, "anything") == {
        "type": "object",
        "default": {},  # the factory's value, as a plain default would give
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert field(Spec, "value") == {"x-kubernetes-preserve-unknown-fields": True}
    assert field(Spec, "labels")["additionalProperties"] == {"type": "string"}
    assert field(Spec, "open")["x-kubernetes-preserve-unknown-fields"] is True
    assert field(Spec, "open")["properties"] == {"known": {"type": "integer", "default": 0}}


def test_sets_are_list_type_set_not_unique_items() -> None:
    class Spec(KubeModel):
        tags: set[str] = Field(default_factory=set)

    tags = field(Spec, "tags")
    assert tags["x-kubernetes-list-type"] == "set"
    assert "uniqueItems" not in tags


def test_cel_rules_on_fields_models_and_the_root() -> None:
    class Range(
        KubeModel, rules=[ValidationRule("self.low <= self.high", message="low above high")]
    ):
        low: int = 0
        high: int = 0

    class Spec(KubeModel):
        replicas: Annotated[
            int, ValidationRule("self >= 0", message="no negatives", reason="FieldValueInvalid")
        ] = 0
        range: Range = Range()
        other: Annotated[Range, ValidationRule("self.high < 100")] = Range()

    class Thing(
        CustomResource,
        group="test.fastctl.dev",
        version="v1",
        rules=[ValidationRule("self.metadata.name.size() <= 10", message_expression="'too long'")],
    ):
        spec: Spec

    root = Thing.openapi_schema()
    spec = root["properties"]["spec"]["properties"]
    assert spec["replicas"]["x-kubernetes-validations"] == [
        {"rule": "self >= 0", "message": "no negatives", "reason": "FieldValueInvalid"}
    ]
    assert spec["range"]["x-kubernetes-validations"] == [
        {"rule": "self.low <= self.high", "message": "low above high"}
    ]
    # the model's own rule and the field's rule, both
    assert [r["rule"] for r in spec["other"]["x-kubernetes-validations"]] == [
        "self.low <= self.high",
        "self.high < 100",
    ]
    assert root["x-kubernetes-validations"] == [
        {"rule": "self.metadata.name.size() <= 10", "messageExpression": "'too long'"}
    ]


def test_formats_the_server_checks_alike_are_kept_and_duration_is_not() -> None:
    import datetime

    class Spec(KubeModel):
        at: datetime.datetime
        every: datetime.timedelta

    assert field(Spec, "at") == {"type": "string", "format": "date-time"}
    assert field(Spec, "every") == {"type": "string"}


# -- the CRD ---------------------------------------------------------------------------------


class Spec(KubeModel):
    size: int = 1


class Status(KubeModel):
    ready: bool = False


class Gadget(
    CustomResource,
    group="test.fastctl.dev",
    version="v1",
    scope="Cluster",
    short_names=["gd"],
    categories=["all"],
    printer_columns=[PrinterColumn("Size", ".spec.size", "integer", priority=1)],
):
    """A gadget."""

    spec: Spec
    status: Status | None = None


def test_the_crd_names_scope_columns_and_status_subresource() -> None:
    doc = Gadget.crd()
    assert doc["metadata"] == {"name": "gadgets.test.fastctl.dev"}
    spec = doc["spec"]
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "plural": "gadgets",
        "singular": "gadget",
        "kind": "Gadget",
        "listKind": "GadgetList",
        "shortNames": ["gd"],
        "categories": ["all"],
    }
    (version,) = spec["versions"]
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"] == [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1}
    ]
    root = version["schema"]["openAPIV3Schema"]
    assert root["description"] == "A gadget."
    assert root["required"] == ["spec"]
    assert root["properties"]["metadata"] == {"type": "object"}
    assert Gadget.resource().namespaced is False
    assert Gadget.resource().plural == "gadgets"


def test_no_status_field_no_status_subresource() -> None:
    class Plain(CustomResource, group="test.fastctl.dev", version="v1"):
        spec: Spec

    assert "subresources" not in Plain.crd()["spec"]["versions"][0]


class GadgetV2(
    CustomResource, group="test.fastctl.dev", version="v2", kind="Gadget", scope="Cluster",
    storage=True,
):  # fmt: skip
    spec: Spec


class GadgetV3(
    CustomResource, group="test.fastctl.dev", version="v3alpha1", kind="Gadget", scope="Cluster",
    served=False, deprecated="v3alpha1 is going away",
):  # fmt: skip
    spec: Spec


def test_several_versions_make_one_crd_with_one_storage_version() -> None:
    doc = crd(Gadget, GadgetV2, GadgetV3)
    versions = {v["name"]: v for v in doc["spec"]["versions"]}
    assert [(n, v["served"], v["storage"]) for n, v in versions.items()] == [
        ("v1", True, False),
        ("v2", True, True),
        ("v3alpha1", False, False),
    ]
    assert versions["v3alpha1"]["deprecated"] is True
    assert versions["v3alpha1"]["deprecationWarning"] == "v3alpha1 is going away"
    with pytest.raises(ValueError, match="exactly one version of Gadget must say storage=True"):
        crd(Gadget, GadgetV3)
    with pytest.raises(ValueError, match="same group, kind, plural and scope"):
        crd(Gadget, Plainish)
    with pytest.raises(ValueError, match="same version"):
        crd(GadgetV2, GadgetV2)


class Plainish(CustomResource, group="test.fastctl.dev", version="v9", kind="Gadget"):
    spec: Spec


def test_class_keywords_are_checked() -> None:
    with pytest.raises(ValueError, match="needs a dot"):

        class Bad(CustomResource, group="nodot", version="v1"):
            pass

    with pytest.raises(ValueError, match="scope must be"):

        class Bad2(CustomResource, group="a.b", version="v1", scope="Global"):
            pass

    class Base(CustomResource):  # no group: an abstract base
        pass

    with pytest.raises(TypeError, match="no resource"):
        Base.crd()


def test_instances_fill_api_version_and_kind_and_dump_only_what_was_set() -> None:
    gadget = Gadget(metadata={"name": "g"}, spec=Spec(size=2))  # type: ignore[arg-type]
    assert gadget.to_json() == {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"size": 2},
    }


# -- what has no structural form -------------------------------------------------------------


class A(KubeModel):
    a: int


class B(KubeModel):
    b: str


class Node(KubeModel):
    children: list[Node] = Field(default_factory=list)


def unrepresentable(spec: type[KubeModel]) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        schema_of(spec)
    return info.value


def test_a_union_of_two_object_types_names_the_field_and_the_rule() -> None:
    class Spec(KubeModel):
        choice: A | B

    err = unrepresentable(Spec)
    assert err.path == "spec.choice"
    assert "a union of A | B" in err.rule
    assert "one type" in err.rule
    assert str(err).startswith("Thing: field spec.choice: a union of A | B")


def test_a_union_deep_in_lists_and_maps_says_where() -> None:
    class Spec(KubeModel):
        items: list[dict[str, A | B]] = Field(default_factory=list)

    assert unrepresentable(Spec).path == "spec.items[][*]"


def test_a_recursive_model_is_refused() -> None:
    class Spec(KubeModel):
        root: Node

    err = unrepresentable(Spec)
    assert err.path == "spec.root.children[]"
    assert "Node contains itself" in err.rule


@pytest.mark.parametrize(
    ("annotation", "rule"),
    [
        (tuple[int, str], "a tuple"),
        (int | float, "a union of integer | number"),
        (Literal[1, "a"], "an enum of mixed types"),
        (set[A], "a set of non-scalar items"),
        (None, "only be null"),
        (dict[Annotated[str, Field(pattern="^a")], int], "map keys"),
    ],
    ids=["tuple", "int|float", "mixed-literal", "set-of-objects", "none", "key-pattern"],
)
def test_other_unrepresentable_fields(annotation: Any, rule: str) -> None:
    from pydantic import create_model

    spec = create_model("Spec", __base__=KubeModel, value=(annotation, ...))
    err = unrepresentable(spec)
    assert err.path == "spec.value"
    assert rule in err.rule, err.rule


# -- fastctl crd -----------------------------------------------------------------------------


class Unrepresentable(CustomResource, group="test.fastctl.dev", version="v1"):
    spec: dict[str, A | B]


def test_fastctl_crd_prints_the_yaml_of_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml  # type: ignore[import-untyped]

    from fastctl.cli import main

    here = "tests.unit.test_crd_schema"
    assert main(["crd", f"{here}:Gadget", f"{here}:GadgetV2"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == crd(Gadget, GadgetV2)
    assert main(["crd", "--json", f"{here}:Gadget"]) == 0
    assert json.loads(capsys.readouterr().out) == Gadget.crd()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("Spec", "is not a fastctl.CustomResource subclass"),
        ("Unrepresentable", "Unrepresentable: field spec[*]: a union of A | B"),
        ("Missing", "has no attribute"),
    ],
)
def test_fastctl_crd_reports_bad_targets_in_one_line(
    capsys: pytest.CaptureFixture[str], target: str, message: str
) -> None:
    from fastctl.cli import main

    assert main(["crd", f"tests.unit.test_crd_schema:{target}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fastctl: error: ")
    assert message in err


def test_fastctl_crd_of_an_operator_prints_what_the_manifests_ship(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One declaration: ``fastctl crd module:attr`` reads the operator as ``fastctl
    manifests`` does, so the CRDs are the same (the manifests add only the conversion
    stanza of a converter's CRD, which this operator has none of)."""
    import yaml

    from fastctl.cli import main

    target = "fastctl.demo.widgets:make_controller"
    assert main(["crd", "--json", target]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main(["manifests", target, "--namespace", "shop"]) == 0
    shipped = [
        d
        for d in yaml.safe_load_all(capsys.readouterr().out)
        if d and d["kind"] == "CustomResourceDefinition"
    ]
    assert printed == shipped
    assert [d["metadata"]["name"] for d in printed] == ["widgets.demo.fastctl.dev"]


def test_a_default_factory_gives_the_same_default_as_a_plain_default() -> None:
    class Inner(KubeModel):
        level: int = 1

    class Spec(KubeModel):
        members: list[str] = Field(default_factory=list)
        plain: list[str] = []  # noqa: RUF012 (pydantic copies it)
        tags: dict[str, str] = Field(default_factory=lambda: {"team": "a"})
        inner: Inner = Field(default_factory=Inner)
        required: list[str]

    assert field(Spec, "members")["default"] == field(Spec, "plain")["default"] == []
    assert field(Spec, "tags")["default"] == {"team": "a"}
    assert field(Spec, "inner")["default"] == {"level": 1}
    assert "default" not in field(Spec, "required")


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat()


_calls = iter(range(10**6))


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        (_now, "gives another value on each call"),
        (lambda: f"name-{next(_calls)}", "gives another value on each call"),
        (lambda data: data["other"], "reads the other fields"),
        (lambda: 1 / 0, "failed or gave no JSON value"),
        (object, "failed or gave no JSON value"),
    ],
)
def test_a_factory_that_cannot_be_a_default_is_refused_by_name(factory: Any, why: str) -> None:
    class Spec(KubeModel):
        other: str = "x"
        stamp: Any = Field(default_factory=factory)

    with pytest.raises(SchemaError, match=f"spec.stamp: its default_factory {why}"):
        schema_of(Spec)
