"""``fastctl crd module:Model [module:Model ...]`` or ``fastctl crd module:attr``: print CRDs.

Each model target names a `fastctl.CustomResource` subclass; several targets are versions
of one kind and make one CRD (exactly one declares ``storage=True``). A target that is an
operator (what ``fastctl run`` runs: a factory, Controllers or a Manager) prints every CRD
the operator declares, read the way ``fastctl run`` and ``fastctl manifests`` read it: the
module's ``CRDS`` and ``CRD`` and every watched resource with a ``crd()`` (without the
conversion stanza, which depends on how the webhooks are certified: ``fastctl manifests``
writes it). The output is ready for ``kubectl apply -f -`` (or ``--json`` for JSON). A
model that no structural schema can express fails with the field path and the rule it
breaks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from fastctl.cli import CliError, Subcommands
from fastctl.cli._target import Target, build, load

__all__ = ["documents", "register", "render"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "crd",
        help="print CRDs: of typed models (module:Model) or of an operator (module:attr)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="module:Model",
        help="model classes, or one operator (module:attr)",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of YAML")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    sys.stdout.write(render(args.targets, as_json=args.json))
    return 0


def render(targets: list[str], *, as_json: bool = False) -> str:
    """The CRD of `targets` as YAML (or JSON) text."""
    found, operator = _documents(targets)
    return _dump(found, as_json=as_json, many=operator)


def documents(targets: list[str]) -> list[dict[str, Any]]:
    """The CRDs `targets` declare: an operator's, or the one its models make."""
    return _documents(targets)[0]


def _documents(targets: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The CRDs, and whether they are an operator's (not one made of models)."""
    loaded = [load(target) for target in targets]
    if len(loaded) == 1 and not isinstance(loaded[0].value, type):  # an operator, not a model
        return _operator_crds(loaded[0]), True
    try:
        from fastctl.errors import SchemaError
        from fastctl.kube._model import CustomResource, crd
    except ImportError as exc:
        raise CliError(
            f"typed resources need pydantic: pip install 'fastctl[typed]' ({exc})"
        ) from None
    models = []
    for target, item in zip(targets, loaded, strict=True):
        model = item.value
        if not (isinstance(model, type) and issubclass(model, CustomResource)):
            raise CliError(f"{target} is not a fastctl.CustomResource subclass")
        models.append(model)
    try:
        document: dict[str, Any] = crd(*models)
    except (SchemaError, ValueError, TypeError) as exc:
        raise CliError(str(exc)) from None
    return [document], False


def _operator_crds(target: Target) -> list[dict[str, Any]]:
    """The CRDs of the operator `target` builds (a client that is never connected)."""
    from kubernetes_asyncio.client import ApiClient, Configuration

    from fastctl.deploy._operator import describe

    async def read() -> list[dict[str, Any]]:
        client = ApiClient(Configuration(host=""))
        try:
            args = argparse.Namespace(namespace=None, concurrency=None)
            try:
                operator = describe(await build(target, client, args), target.module)
            except TypeError as exc:
                raise CliError(f"{target.spec}: {exc}") from None
        finally:
            await client.close()
        return list(operator.crds)

    crds = asyncio.run(read())
    if not crds:
        raise CliError(f"{target.spec}: the operator declares no CRD (CRDS, CRD, or models)")
    return crds


def _dump(documents: list[dict[str, Any]], *, as_json: bool, many: bool) -> str:
    if as_json:
        return json.dumps(documents if many else documents[0], indent=2) + "\n"
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise CliError(
            "YAML output needs PyYAML: pip install 'fastctl[typed]' (or --json)"
        ) from None
    text: str = yaml.safe_dump_all(documents, sort_keys=False, width=100)
    return text
