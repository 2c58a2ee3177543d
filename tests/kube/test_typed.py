"""Typed custom resources on the real API server: the generated CRD is accepted; the
server rejects what the schema, an enum and a CEL rule forbid, with its own message; the
printer columns show in table output; an optional enum that is None is written as absent
(create, apply, status apply), not as the null the server refuses; an object stored under a
looser schema is reported by a typed controller while the others reconcile; and, over
models Hypothesis builds from random field types and constraints, every generated CRD is
accepted and valid instances round-trip (create, get, parse back equal).

The Hypothesis test checks FASTCTL_TYPED_EXAMPLES models (default 15, one CRD each), in
examples of `BATCH` models whose CRDs are installed and checked concurrently (the wait for a
CRD to be established and served dominates); for a longer run:
``FASTCTL_TYPED_EXAMPLES=300 python -m pytest tests/kube/test_typed.py -k hypo``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import types
from collections.abc import Coroutine
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient
from pydantic import Field, create_model

from fastctl import (
    CustomResource,
    InvalidObject,
    KubeModel,
    PrinterColumn,
    ReconcileResult,
    Recorder,
    ValidationRule,
)
from fastctl.demo.widgets import install_crd
from fastctl.kube import ApiError, Resource, apply, apply_status, create, delete, get
from fastctl.runtime.controller import Controller
from fastctl.testing import ControlPlane

from .conftest import make_client

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]

GROUP = "typed.fastctl.dev"
T = TypeVar("T")


class GadgetSpec(
    KubeModel,
    rules=[
        ValidationRule(
            "self.minReplicas <= self.maxReplicas", message="minReplicas above maxReplicas"
        )
    ],
):
    """What a gadget should be."""

    size: Literal["small", "large"] = "small"
    min_replicas: Annotated[int, Field(ge=0)] = 0
    max_replicas: Annotated[int, Field(ge=0, le=100)] = 1
    port: int | str = 80
    code: Annotated[str, Field(max_length=8, pattern="^[a-z]*$")] = ""
    labels: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class GadgetStatus(KubeModel):
    phase: str | None = None


class Gadget(
    CustomResource,
    group=GROUP,
    version="v1",
    short_names=["gd"],
    printer_columns=[
        PrinterColumn("Size", ".spec.size"),
        PrinterColumn("Max", ".spec.maxReplicas", "integer"),
    ],
):
    """A gadget."""

    spec: GadgetSpec
    status: GadgetStatus | None = None


GADGET = Gadget.resource()


@pytest.fixture(autouse=True)
async def gadget_crd(client: ApiClient) -> None:
    await install_crd(client, Gadget.crd())


def gadget(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


async def create_when_served(client: ApiClient, resource: Resource, obj: Any) -> dict[str, Any]:
    """POST, retrying the 404 a CRD answers for a moment after it is established."""
    for _ in range(100):
        try:
            return await create(client, resource, obj)
        except ApiError as exc:
            if exc.status != 404:
                raise
        await asyncio.sleep(0.1)
    raise AssertionError(f"{resource} never served")


async def test_the_generated_crd_is_accepted_and_an_object_round_trips(
    client: ApiClient, namespace: str
) -> None:
    sent = Gadget.model_validate(
        gadget("a", namespace, size="large", maxReplicas=3, port="http", extra={"x": [1]})
    )
    await create_when_served(client, GADGET, sent.to_json())
    back = Gadget.model_validate(await get(client, GADGET, "a", namespace=namespace))
    assert back.spec == sent.spec
    # the server filled in the defaults the schema declares
    raw = await get(client, GADGET, "a", namespace=namespace)
    assert raw["spec"]["minReplicas"] == 0
    assert raw["spec"]["code"] == ""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"maxReplicas": 101}, "spec.maxReplicas: Invalid value: 101: spec.maxReplicas in body"),
        ({"code": "ABC"}, 'spec.code: Invalid value: "ABC": spec.code in body should match'),
        ({"size": "huge"}, 'spec.size: Unsupported value: "huge": supported values: "small"'),
        ({"minReplicas": 5, "maxReplicas": 2}, "spec: Invalid value: minReplicas above maxRe"),
        ({"port": True}, "spec.port: Invalid value: \"boolean\""),
    ],
    ids=["bound", "pattern", "enum", "cel-rule", "int-or-string"],
)  # fmt: skip
async def test_the_server_rejects_what_the_model_forbids(
    client: ApiClient, namespace: str, spec: dict[str, Any], message: str
) -> None:
    await create_when_served(client, GADGET, gadget("ok", namespace))  # served: the CRD is up
    with pytest.raises(ApiError) as info:
        await create(client, GADGET, gadget("bad", namespace, **spec))
    assert info.value.status == 422
    assert message in info.value.message, info.value.message


async def test_printer_columns_show_in_table_output(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    await create_when_served(client, GADGET, gadget("t", namespace, size="large", maxReplicas=7))
    async with await make_client(control_plane.kubeconfig) as tables:
        tables.set_default_header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        path = (await GADGET.resolve(client)).collection_path(namespace)
        from fastctl.kube._http import request_json

        table = await request_json(tables, "GET", path)
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Size", "Max"]  # declared columns replace Age
    (row,) = table["rows"]
    assert row["cells"][:3] == ["t", "large", 7]


# -- an optional enum left unset ----------------------------------------------------------


Colour = Literal["red", "blue"]


class PaintSpec(KubeModel):
    colour: Colour | None = None
    coats: int = 1


class PaintStatus(KubeModel):
    colour: Colour | None = None
    dry: bool = False


class Paint(CustomResource, group=GROUP, version="v1"):
    spec: PaintSpec
    status: PaintStatus | None = None


PAINT = Paint.resource()


@pytest.mark.parametrize("colour", ["unset", None, "red"])
async def test_an_optional_enum_that_is_none_is_written_as_absent(
    client: ApiClient, namespace: str, colour: Colour | str | None
) -> None:
    """A ``Literal[...] | None = None`` field that is None (never set, or set to None) is
    left out of what fastctl sends: the API server, which refuses a ``null`` for an enum
    field, accepts the create, the apply and the status apply, and the object parses back
    equal. A value set is sent and stored."""
    await install_crd(client, Paint.crd())
    given = {} if colour == "unset" else {"colour": colour}
    sent = Paint.model_validate(
        {"metadata": {"name": "p", "namespace": namespace}, "spec": {"coats": 2, **given}}
    )
    await create_when_served(client, PAINT, sent)
    await apply(client, PAINT, sent, field_manager="painter")
    stored = await apply_status(
        client, PAINT, sent, status=PaintStatus.model_validate(given), field_manager="drier"
    )
    expected = None if colour == "unset" else colour
    assert stored["spec"].get("colour") == expected
    assert (stored.get("status") or {}).get("colour") == expected
    back = Paint.model_validate(await get(client, PAINT, "p", namespace=namespace))
    assert back.spec == sent.spec
    assert (back.status or PaintStatus()).colour == expected


# -- an invalid object in the cluster ---------------------------------------------------------


class GizmoSpec(KubeModel):
    replicas: Annotated[int, Field(ge=0)] = 1


class Gizmo(CustomResource, group=GROUP, version="v1"):
    spec: GizmoSpec


LOOSE_GIZMO: dict[str, Any] = {
    **Gizmo.crd(),
    "spec": {
        **Gizmo.crd()["spec"],
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}
"""The Gizmo CRD before its schema was tightened: anything goes in ``spec``."""


async def test_an_object_the_model_rejects_is_reported_and_the_others_reconcile(
    client: ApiClient, namespace: str
) -> None:
    resource = Gizmo.resource()
    await install_crd(client, LOOSE_GIZMO)
    await create_when_served(client, resource, gadget("bad", namespace, replicas="many"))
    await install_crd(client, Gizmo.crd())  # tightened: stored objects are not re-validated
    for _ in range(100):  # until the new schema is in force
        try:
            await create(client, resource, gadget("probe", namespace, replicas="x"))
        except ApiError as exc:
            if exc.status == 422:
                break
            raise
        await delete(client, resource, "probe", namespace=namespace)
        await asyncio.sleep(0.1)
    for name in ("good-1", "good-2"):
        await create(client, resource, gadget(name, namespace, replicas=2))

    seen: list[str] = []

    async def reconcile(obj: Gizmo, ctx: Any) -> None:
        assert isinstance(obj, Gizmo)
        seen.append(str(obj.metadata.name))

    ctl = Controller(
        client,
        Gizmo,
        reconcile,
        namespace=namespace,
        recorder=Recorder(client, "typed-test"),
    )
    results: list[ReconcileResult] = []

    async def consume() -> None:
        async for result in ctl.stream():
            results.append(result)
            if {"good-1", "good-2"} <= set(seen) and any(r.error for r in results):
                ctl.shutdown()

    await asyncio.wait_for(consume(), 60)
    (bad,) = {r.ref.name: r for r in results if r.error is not None}.values()
    assert bad.ref.name == "bad"
    assert isinstance(bad.error, InvalidObject)
    assert "spec.replicas" in str(bad.error)
    events = await until_listed(client, namespace)
    (event,) = [e for e in events if e["regarding"]["name"] == "bad"]
    assert event["type"] == "Warning"
    assert "is not a valid Gizmo" in event["note"]


async def until_listed(client: ApiClient, namespace: str) -> list[dict[str, Any]]:
    from fastctl.kube._http import request_json

    path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    deadline = time.monotonic() + 30
    while True:
        items = (await request_json(client, "GET", path))["items"]
        invalid = [e for e in items if e.get("reason") == "InvalidObject"]
        if invalid or time.monotonic() > deadline:
            return invalid
        await asyncio.sleep(0.1)


# -- Hypothesis: generated models, generated CRDs, round trips --------------------------------

EXAMPLES = int(os.environ.get("FASTCTL_TYPED_EXAMPLES", "15"))
BATCH = 3
"""Models per Hypothesis example, round-tripped at the same time."""
_KINDS = itertools.count()
_TEXT = st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=12)
_KEYS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6)

Field_ = tuple[Any, st.SearchStrategy[Any]]
"""A field's annotation and a strategy for its valid values."""


@st.composite
def scalar_fields(draw: st.DrawFn) -> Field_:
    choice = draw(st.sampled_from(["int", "float", "str", "bool", "literal", "int-or-str"]))
    if choice == "int":
        lo = draw(st.none() | st.integers(-1000, 1000))
        hi = draw(st.none() | st.integers(lo if lo is not None else -1000, 2000))
        exclusive = draw(st.booleans()) and lo is not None and hi is not None and hi - lo > 2
        bounds = Field(gt=lo, lt=hi) if exclusive else Field(ge=lo, le=hi)
        low = (lo if lo is not None else -(2**40)) + (1 if exclusive else 0)
        high = (hi if hi is not None else 2**40) - (1 if exclusive else 0)
        return Annotated[int, bounds], st.integers(low, high)
    if choice == "float":
        lo_f = draw(st.none() | st.floats(-1e6, 1e6))
        return (
            Annotated[float, Field(ge=lo_f)],
            st.floats(lo_f if lo_f is not None else -1e9, 1e9, allow_nan=False),
        )
    if choice == "str":
        lo_n = draw(st.integers(0, 3))
        hi_n = draw(st.integers(lo_n, 10))
        if draw(st.booleans()):
            return (
                Annotated[str, Field(min_length=lo_n, max_length=hi_n, pattern="^[a-z0-9-]*$")],
                st.text("abcxyz019-", min_size=lo_n, max_size=hi_n),
            )
        text = st.text(
            st.characters(categories=("L", "N", "P", "Zs")), min_size=lo_n, max_size=hi_n
        )
        return Annotated[str, Field(min_length=lo_n, max_length=hi_n)], text
    if choice == "bool":
        return bool, st.booleans()
    if choice == "literal":
        values = draw(st.lists(_KEYS, min_size=1, max_size=4, unique=True))
        return Literal[tuple(values)], st.sampled_from(values)
    return int | str, st.integers(-(2**31), 2**31) | _KEYS


def _rule_field(inner: Field_) -> Field_:
    """The same field with a CEL rule every valid value passes (so the server checks it)."""
    annotation, values = inner
    return Annotated[annotation, ValidationRule("true", message="always")], values


def default_of(annotation: Any) -> Any:
    """A model field's default: None for an optional literal (``Literal[...] | None = None``,
    which fastctl leaves out when it is None), else required (``...``)."""
    args = get_args(annotation)
    if type(None) in args and any(get_origin(a) is Literal for a in args):
        return None
    return ...


@st.composite
def fields(draw: st.DrawFn, depth: int = 0, item: bool = False) -> Field_:
    kinds = ["scalar", "optional", "list", "map", "free", "set", "rule"]
    if depth == 0:
        kinds.append("model")
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        return draw(scalar_fields())
    if kind == "optional":
        annotation, values = draw(scalar_fields())
        if getattr(annotation, "__origin__", None) is Literal:
            # the API server rejects a null in an enum field even when it is nullable (and
            # with null among the values): an optional literal field defaults to None
            # (`default_of`), so None is left out; as a list item it would be sent as null
            return annotation | None, values if item else st.none() | values
        return annotation | None, st.none() | values
    if kind == "list":
        annotation, values = (
            draw(fields(depth=depth + 1, item=True)) if depth == 0 else draw(scalar_fields())
        )
        top = draw(st.integers(0, 4))
        return (
            Annotated[list[annotation], Field(max_length=top)],  # type: ignore[valid-type]
            st.lists(values, max_size=top),
        )
    if kind == "map":
        annotation, values = draw(scalar_fields())
        return dict[str, annotation], st.dictionaries(_KEYS, values, max_size=3)  # type: ignore[valid-type]
    if kind == "free":
        json_leaf = st.integers(-100, 100) | _TEXT | st.booleans()
        return dict[str, Any], st.dictionaries(_KEYS, json_leaf | st.lists(json_leaf, max_size=2))
    if kind == "set":
        return set[str], st.sets(_KEYS, max_size=4)
    if kind == "rule":
        return _rule_field(draw(scalar_fields()))
    model, values = draw(models(depth + 1))
    return model, values


@st.composite
def models(draw: st.DrawFn, depth: int = 0) -> tuple[type[KubeModel], st.SearchStrategy[Any]]:
    """A KubeModel class with 1-4 random fields, and a strategy for valid instances."""
    n = draw(st.integers(1, 4))
    annotations: dict[str, Any] = {}
    value_strategies: dict[str, st.SearchStrategy[Any]] = {}
    for i in range(n):
        annotation, values = draw(fields(depth))
        name = f"f{i}_{draw(st.sampled_from(['a', 'max', 'some_thing']))}"
        annotations[name] = (annotation, default_of(annotation))
        value_strategies[name] = values
    model = create_model(f"Gen{depth}_{n}", __base__=KubeModel, **annotations)
    # not st.builds: it would also infer the required parameters it sees by their aliases
    return model, st.fixed_dictionaries(value_strategies).map(lambda d: model(**d))


async def round_trip(
    client: ApiClient, namespace: str, resource_model: type[CustomResource], specs: list[Any]
) -> None:
    crd = resource_model.crd()
    await install_crd(client, crd)
    resource = resource_model.resource()
    try:
        for i, spec in enumerate(specs):
            sent = resource_model.model_validate(
                {"metadata": {"name": f"o{i}", "namespace": namespace}, "spec": spec}
            )
            await create_when_served(client, resource, sent.to_json())
            back = resource_model.model_validate(
                await get(client, resource, f"o{i}", namespace=namespace)
            )
            assert back.spec == sent.spec, (crd, sent.to_json())  # type: ignore[attr-defined]
    finally:
        crd_resource = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        await delete(client, crd_resource, crd["metadata"]["name"])


async def test_hypothesis_generated_models_are_accepted_and_round_trip(
    client: ApiClient, namespace: str
) -> None:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=120)

    @settings(
        max_examples=-(-EXAMPLES // BATCH),
        deadline=None,
        database=None,
        # no shrinking: each step costs a CRD on the server; a failure prints its CRD
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        trips = []
        for _ in range(BATCH):
            spec_model, spec_values = data.draw(models())

            def body(ns: dict[str, Any], spec: type[KubeModel] = spec_model) -> None:
                ns["__annotations__"] = {"spec": spec}

            resource_model = types.new_class(
                f"Gen{next(_KINDS)}",
                (CustomResource,),
                {"group": f"hypo.{GROUP}", "version": "v1"},
                body,
            )
            specs = data.draw(st.lists(spec_values, min_size=1, max_size=3))
            trips.append(round_trip(client, namespace, resource_model, specs))

        async def together() -> None:
            await asyncio.gather(*trips)

        on_loop(together())

    await asyncio.to_thread(check)
