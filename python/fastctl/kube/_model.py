"""Typed custom resources: a pydantic model that is also a CRD.

A custom resource is declared once, as a class; its CRD, its `Resource` and the validation
of the objects a controller reconciles all come from it::

    class WidgetSpec(KubeModel):
        replicas: Annotated[int, Field(ge=0, le=10)] = 1

    class Widget(CustomResource, group="example.com", version="v1", short_names=["wd"],
                 printer_columns=[PrinterColumn("Replicas", ".spec.replicas", "integer")]):
        \"\"\"A widget (this docstring becomes the CRD's description).\"\"\"
        spec: WidgetSpec
        status: WidgetStatus | None = None

The class keywords are kube-rs' ``#[kube(...)]`` attributes and controller-gen's
``+kubebuilder:resource`` markers, in Python spelling (see `CustomResource`). Field names
are snake_case in Python and camelCase on the wire (`KubeModel`'s aliases), as in the
Kubernetes API itself.

This is the only module of fastctl that imports pydantic; the package ``__init__`` files
load it on first use of one of its names, so ``import fastctl`` does not need pydantic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from fastctl.errors import InvalidObject
from fastctl.kube._crd_schema import (
    LIST_MAP_KEYS,
    REFUSED_DEFAULT,
    PrinterColumn,
    ValidationRule,
    add_rules,
    structural_schema,
)
from fastctl.kube._resource import Resource

__all__ = [
    "Condition",
    "CustomResource",
    "KubeModel",
    "ObjectMeta",
    "ResourceInfo",
    "crd",
    "parse",
]

Scope = Literal["Namespaced", "Cluster"]


class KubeModel(BaseModel):
    """A pydantic model with Kubernetes field names: ``observed_generation`` in Python is
    ``observedGeneration`` on the wire (either is accepted on input; dumps use the alias).

    ``rules=[ValidationRule(...)]`` as a class keyword adds CEL rules on the model as a whole, where
    ``self`` is the object (``self.min <= self.max``). ``list_map_keys=["name"]`` makes every
    list of this model a list-map keyed by those fields in the CRD
    (``x-kubernetes-list-type: map``): the API server refuses two items with the same keys,
    and server-side apply merges the items by key, so each writer owns its own items instead
    of the whole list (`Condition` is declared so, keyed by ``type``).

    A field that is ``None`` and whose default is ``None`` is left out of every dump: it
    has no value, and its absence parses back to the same model. As ``null`` the API server
    would refuse it for an enum (``colour: Literal["red", "blue"] | None = None``), and a
    server-side apply of ``null`` would claim the field. A field that must be given
    (``x: int | None``, no default) is dumped as ``null``, as its schema requires."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )
    __kube_rules__: ClassVar[tuple[ValidationRule, ...]] = ()
    __kube_list_map_keys__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(
        cls,
        *,
        rules: Iterable[ValidationRule] = (),
        list_map_keys: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.__kube_rules__ = tuple(rules)
        if isinstance(list_map_keys, str):
            raise TypeError(f"{cls.__name__}: list_map_keys is a list of field names")
        cls.__kube_list_map_keys__ = tuple(list_map_keys)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core_schema)
        if cls.__kube_rules__ or cls.__kube_list_map_keys__:
            own = handler.resolve_ref_schema(schema)
            add_rules(own, list(cls.__kube_rules__))
            if cls.__kube_list_map_keys__:
                fields = cls.model_fields
                own[LIST_MAP_KEYS] = [
                    (fields[key].alias or key) if key in fields else key
                    for key in cls.__kube_list_map_keys__
                ]
        return schema

    @model_serializer(mode="wrap")
    def _without_none_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for name, field in type(self).model_fields.items():
            if field.default is None and not field.is_required() and getattr(self, name) is None:
                data.pop(field.alias or name, None)
                data.pop(name, None)
        return data


_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class ObjectMeta(KubeModel, extra="allow"):
    """``metadata``, as a reconcile reads it; fields it does not name (managedFields, ...)
    are kept as extras."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)


class Condition(KubeModel, list_map_keys=["type"]):
    """A status condition, as metav1.Condition spells it: the same fields, patterns and
    bounds, so that kubectl wait and every tool that reads conditions understand it."""

    # (The docstring is the CRD's description.) A list of it is a list-map keyed by
    # ``type``, so each writer owns its own conditions. `fastctl.kube.set_condition` keeps
    # ``last_transition_time`` while the status stays and fills in ``observed_generation``;
    # the time may be left out here for that reason, though the CRD requires it, as metav1
    # does.

    type: Annotated[str, Field(max_length=316, pattern=_CONDITION_TYPE)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=_CONDITION_REASON)]
    message: Annotated[str, Field(max_length=32768)] = ""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339)."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = super().__get_pydantic_json_schema__(core_schema, handler)
        own = handler.resolve_ref_schema(schema)
        own["properties"]["lastTransitionTime"] = {
            "type": "string",
            "format": "date-time",
            "description": "When the status last changed (RFC 3339).",
        }
        own["required"] = [*own.get("required", ()), "lastTransitionTime"]
        return schema


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """What a `CustomResource` subclass declared with its class keywords."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: Scope
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    status_subresource: bool | None
    storage: bool | None
    served: bool
    deprecated: bool | str
    rules: tuple[ValidationRule, ...]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


class CustomResource(KubeModel):
    """The base of a typed custom resource; subclass it with class keywords:

    - `group`, `version` (required), `kind` (default: the class name);
    - `scope`: ``"Namespaced"`` (default) or ``"Cluster"``;
    - `plural` (default: the kind in lower case plus ``s``), `singular`, `short_names`,
      `categories`;
    - `printer_columns`: `PrinterColumn` values (``kubectl get``'s columns);
    - `status_subresource`: default on when the model has a ``status`` field;
    - `storage`, `served`, `deprecated`: for one version among several (`crd`);
    - `rules`: CEL rules on the whole object (``self.spec``, ``self.metadata.name``).

    A subclass without `group` is an abstract base (for shared fields). Declare ``spec``
    (and ``status``) as `KubeModel` fields; ``api_version``, ``kind`` and ``metadata`` are
    here already.
    """

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    __kube__: ClassVar[ResourceInfo | None] = None

    def __init_subclass__(
        cls,
        *,
        group: str | None = None,
        version: str | None = None,
        kind: str | None = None,
        scope: Scope = "Namespaced",
        plural: str | None = None,
        singular: str | None = None,
        short_names: Sequence[str] = (),
        categories: Sequence[str] = (),
        printer_columns: Sequence[PrinterColumn] = (),
        status_subresource: bool | None = None,
        storage: bool | None = None,
        served: bool = True,
        deprecated: bool | str = False,
        rules: Iterable[ValidationRule] = (),
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if group is None:
            cls.__kube__ = None
            return
        if "." not in group:
            raise ValueError(f"{cls.__name__}: a CRD's group needs a dot (example.com)")
        if not version:
            raise ValueError(f"{cls.__name__}: give version= with group=")
        if scope not in ("Namespaced", "Cluster"):
            raise ValueError(f"{cls.__name__}: scope must be Namespaced or Cluster, not {scope!r}")
        kind = kind or cls.__name__
        cls.__kube__ = ResourceInfo(
            group=group,
            version=version,
            kind=kind,
            plural=plural or f"{kind.lower()}s",
            singular=singular or kind.lower(),
            scope=scope,
            short_names=tuple(short_names),
            categories=tuple(categories),
            printer_columns=tuple(printer_columns),
            status_subresource=status_subresource,
            storage=storage,
            served=served,
            deprecated=deprecated,
            rules=tuple(rules),
        )

    def model_post_init(self, context: Any, /) -> None:
        info = type(self).__kube__
        if info is not None:
            if self.api_version is None:
                self.api_version = info.api_version
            if self.kind is None:
                self.kind = info.kind

    @classmethod
    def info(cls) -> ResourceInfo:
        """The class keywords; `TypeError` for an abstract base."""
        if cls.__kube__ is None:
            raise TypeError(f"{cls.__name__} declares no group=/version=: it is no resource")
        return cls.__kube__

    @classmethod
    def resource(cls) -> Resource:
        """The `Resource` of this kind, plural and scope given (no discovery needed)."""
        info = cls.info()
        return Resource(
            info.api_version, info.kind, plural=info.plural, namespaced=info.scope == "Namespaced"
        )

    @classmethod
    def crd(cls) -> dict[str, Any]:
        """The CRD of this one version (`crd` for several versions of a kind)."""
        return crd(cls)

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        """The structural ``openAPIV3Schema`` of this version (`SchemaError` if the model
        has no structural form)."""
        info = cls.info()
        raw = cls.model_json_schema(
            by_alias=True, mode="validation", schema_generator=_FactoryDefaults
        )
        props = dict(raw.get("properties") or {})
        for name in ("apiVersion", "kind", "metadata"):
            props.pop(name, None)
        body = {**raw, "properties": props}
        body["required"] = [r for r in raw.get("required", ()) if r in props]
        if not body["required"]:
            del body["required"]
        schema = structural_schema(body, model=cls.__name__)
        schema["properties"] = {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            **schema.get("properties", {}),
        }
        add_rules(schema, info.rules)
        return schema

    def to_json(self) -> dict[str, Any]:
        """The object as JSON, camelCase, with the fields that were set (given, parsed from
        the server, or assigned) and not the defaults: an apply body owns only those, so a
        defaulted ``metadata.finalizers: []`` never takes the list from its other owners."""
        dumped: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped


class _FactoryDefaults(GenerateJsonSchema):
    """pydantic's schema, with a ``default`` for fields that have a ``default_factory``
    (pydantic leaves it out): the API server fills in a missing field only from the CRD's
    ``default``, and a CEL rule that reads a field with none fails on every object that
    omits it ("no such key"). The factory is called twice: a value that differs between
    calls (a time, a random name) is no default the server could fill in, so the field is
    refused, by name, rather than given one value frozen at generation time."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if "default" in schema or factory is None:
            return super().get_default_value(schema)
        if schema.get("default_factory_takes_data"):
            return {REFUSED_DEFAULT: _refused("reads the other fields")}
        try:
            first, second = (self.encode_default(factory()) for _ in range(2))  # type: ignore[call-arg]
        except Exception as exc:  # a factory's own error, or a value JSON cannot hold
            return {REFUSED_DEFAULT: _refused(f"failed or gave no JSON value ({exc})")}
        if first != second:
            return {
                REFUSED_DEFAULT: _refused(
                    f"gives another value on each call ({first!r}, then {second!r})"
                )
            }
        return first


def _refused(why: str) -> str:
    return (
        f"its default_factory {why}: a CRD default is one fixed value the API server fills "
        "in; give a plain default, or make the field required"
    )


def parse(model: type[CustomResource], obj: Mapping[str, Any]) -> CustomResource:
    """`obj` (a cached JSON object) validated as `model`; `InvalidObject` if it is not."""
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        meta = obj.get("metadata") or {}
        key = (
            f"{meta.get('namespace')}/{meta.get('name')}"
            if meta.get("namespace")
            else str(meta.get("name"))
        )
        errors = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()]
        raise InvalidObject(key, model.__name__, errors) from exc


def crd(*models: type[CustomResource]) -> dict[str, Any]:
    """One ``apiextensions.k8s.io/v1`` CRD for the versions `models` (of one group and
    kind; with several, exactly one says ``storage=True``)."""
    if not models:
        raise TypeError("crd() needs at least one CustomResource model")
    infos = [m.info() for m in models]
    first = infos[0]
    for model, info in zip(models, infos, strict=True):
        same = (info.group, info.kind, info.plural, info.scope)
        if same != (first.group, first.kind, first.plural, first.scope):
            raise ValueError(
                f"{model.__name__}: every version of a CRD has the same group, kind, plural "
                f"and scope as {models[0].__name__}"
            )
    versions = [i.version for i in infos]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two models declare the same version: {versions}")
    storage = [i for i in infos if i.storage] if len(infos) > 1 else infos
    if len(storage) != 1:
        raise ValueError(
            f"exactly one version of {first.kind} must say storage=True, "
            f"got {[i.version for i in storage] or 'none'}"
        )
    names: dict[str, Any] = {
        "plural": first.plural,
        "singular": first.singular,
        "kind": first.kind,
        "listKind": f"{first.kind}List",
    }
    short_names = sorted({s for i in infos for s in i.short_names})
    categories = sorted({c for i in infos for c in i.categories})
    if short_names:
        names["shortNames"] = short_names
    if categories:
        names["categories"] = categories
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": first.crd_name},
        "spec": {
            "group": first.group,
            "scope": first.scope,
            "names": names,
            "versions": [
                _version(m, i, i is storage[0]) for m, i in zip(models, infos, strict=True)
            ],
        },
    }


def _version(model: type[CustomResource], info: ResourceInfo, storage: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.version,
        "served": info.served,
        "storage": storage,
        "schema": {"openAPIV3Schema": model.openapi_schema()},
    }
    status = info.status_subresource
    if status is None:
        status = "status" in model.model_fields
    if status:
        out["subresources"] = {"status": {}}
    if info.printer_columns:
        out["additionalPrinterColumns"] = [c.to_json() for c in info.printer_columns]
    if info.deprecated:
        out["deprecated"] = True
        if isinstance(info.deprecated, str):
            out["deprecationWarning"] = info.deprecated
    return out
